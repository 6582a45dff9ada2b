//! `podstuck watch`: trace the node until told to stop, diagnose what it
//! sees, and say it the way the reader needs (a [`crate::print`] printer:
//! the live view on a terminal, a block per finding to a pipe, `--json`,
//! `--calls`). With `--histograms DIR`, keep latency histograms and
//! refresh their files every interval; with `record`, save what the
//! diagnosis saw; with `--listen`, serve the metrics and findings too. SIGINT, SIGTERM and SIGHUP (and `q` or Ctrl-C in the
//! live view) stop it cleanly; the programs detach when the tracer is
//! dropped.
//!
//! A run is three steps: [`prepare`] (judge the node, gather the run's
//! facts, open every file that could fail, load the programs, pick the
//! printer), [`trace`] (hand each call and each review down the
//! [`pipeline`] until something says stop), [`finish`] (the last calls and
//! review, the record's end, the files' last refresh, the printer's last
//! words).

mod options;
mod pipeline;
mod untraceable;

use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{Context, Result};
use tokio::signal::unix::{signal, Signal, SignalKind};

use crate::cni_plugins::PluginPlaces;
use crate::collect::{Tracer, TracerOptions};
use crate::diagnose::{DiagnoseOptions, Diagnoser, Severity, Status};
use crate::explain::client::Api;
use crate::explain::join::ApiJoin;
use crate::export::{Exporter, RunInfo};
use crate::identify::process::own_mount_namespace;
use crate::identify::{Identifier, NodeLayout, PodFilter};
use crate::inspect::real_node::RealNode;
use crate::k8s_events::EventSink;
use crate::kernel_features::{AttachPoint, Lockdown, PathWalk};
use crate::latency::{LatencyBook, POD_SERIES_LINGER};
use crate::preflight::{plan, NodeFacts, Problem};
use crate::print::endpoint::{Endpoint, WithEndpoint};
use crate::print::{printer, stderr_line, Ending, Printer};
use crate::record::{RecordHeader, Recorder};
use crate::run::{AvoidedMount, NodeReads, RecoveredMount, RunTotals};
use crate::run::{RunFacts, Tracing};
use crate::serve::Listener;
use crate::tracer_lock::TracerLock;
use crate::view::{Moment, Quit, QuitKeys};

pub use options::WatchOptions;
use pipeline::{finished, for_at_most, Pipeline};

/// Calls in flight at least this long are shown: shorter ones are just
/// calls, not waits.
const SHOWN_IN_FLIGHT_AFTER: Duration = Duration::from_millis(100);

/// How often the detectors look again, with the node, at what they saw.
const REVIEW_EVERY: Duration = Duration::from_millis(500);

/// Reviews at most this close together: a call that proves its cause at
/// once is reviewed this soon after the last review, however many come (a
/// storm of refusals costs at most one review per gap, each reading the
/// node only for paths not looked at yet).
const REVIEW_GAP: Duration = Duration::from_millis(25);

/// Reviews asked for early come at most this often over time, after a
/// burst of `EARLY_REVIEW_BURST` a gap apart: a churn of pods that each
/// fail a call once (ten a second) asked for one every gap, and those
/// reviews, each a whole pass over the node, cost the collector ten times
/// its CPU and 120 MB resident where 27 MB do (`cargo xtask soak`). An
/// incident's proving calls, a few at once, are still each reviewed a gap
/// after they come: while a runtime's removal goes on, what it proves a
/// quarter of a second later may be gone.
const EARLY_REVIEW_SPACING: Duration = Duration::from_millis(250);
const EARLY_REVIEW_BURST: u32 = 4;

/// What stopped a run whose reader went away.
const OUTPUT_GONE: &str = "its output closing";

/// How long records are taken in one go before the loop turns to its other
/// work, a signal above all: a storm can write them as fast as they are
/// taken, and a batch that waited for the ring to empty would never end.
const BATCH_FOR: Duration = Duration::from_millis(200);

/// How long a stop gives podstuck's own last work: the last records and
/// review, the node's reads among them. A stop that waits a minute in an
/// incident is a defect: past this, what is not done is said and left.
const STOP_WITHIN: Duration = Duration::from_secs(10);

/// How long the stop takes records still coming from the kernel, each time.
const DRAIN_AT_STOP: Duration = Duration::from_secs(2);

/// The node cannot run podstuck; each problem says what to do.
#[derive(Debug)]
pub struct NodeNotReady(pub Vec<Problem>);

impl std::fmt::Display for NodeNotReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lines: Vec<String> = self.0.iter().map(|p| p.to_string()).collect();
        write!(f, "cannot trace on this node:\n{}", lines.join("\n"))
    }
}

impl std::error::Error for NodeNotReady {}

/// A run, prepared: everything it holds until it ends. Fields drop in
/// order: the programs detach first, the tracing lock goes last.
struct Run {
    tracer: Tracer,
    facts: RunFacts,
    pipeline: Pipeline,
    node: RealNode,
    exporter: Option<Exporter>,
    /// The live view's keys that ask to stop.
    keys: Option<QuitKeys>,
    /// The kernel's BPF run-time statistics, on while held (`--kernel-cost`).
    _stats: Option<std::os::fd::OwnedFd>,
    /// Held for the run; the kernel lets go of it however podstuck ends.
    _lock: Option<TracerLock>,
}

/// Why the tracing stopped.
struct Stopped {
    /// A signal, a key, the output closing; `None`: the end of `--duration`.
    by: Option<&'static str>,
    /// The live view asked to stop, or its terminal failed.
    quit: Option<Quit>,
}

impl Stopped {
    fn by(what: &'static str) -> Stopped {
        Stopped { by: Some(what), quit: None }
    }
}

/// Runs `podstuck watch` on standard output.
pub async fn watch(options: &WatchOptions) -> Result<Verdict> {
    watch_with(options, || {}).await
}

/// How a run ended, as its exit code tells a script (docs/exit-codes.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Verdict {
    /// Critical findings still active at the end.
    pub critical_active: usize,
    /// It ran its whole `--duration` (not stopped by a key, a signal or
    /// its output going away).
    pub ran_its_duration: bool,
}

impl Verdict {
    /// [`exit::CRITICAL_ACTIVE`] when a run of a set `--duration` (what a
    /// script runs) ends with a critical finding still active, else
    /// success. A run someone stopped (a key, Ctrl-C) or a supervisor did
    /// (SIGTERM to the DaemonSet's pod) exits 0: its findings were shown.
    pub fn exit_code(&self) -> u8 {
        if self.ran_its_duration && self.critical_active > 0 {
            crate::exit::CRITICAL_ACTIVE
        } else {
            crate::exit::SUCCESS
        }
    }
}

/// Runs `podstuck watch`, calling `on_attached` once every probe is
/// attached: what happens after it is traced (the demo starts its actors).
pub async fn watch_with(options: &WatchOptions, on_attached: impl FnOnce()) -> Result<Verdict> {
    let (resolved, api) = resolve_named_pods(options).await?;
    let options = resolved.as_ref().unwrap_or(options);
    let events = events_api(options).await?;
    // Caught before the start line says it is attached: a SIGINT right
    // after it would otherwise end podstuck as the default action does,
    // its last words unsaid.
    let mut signals = StopSignals::catch()?;
    let mut run = match prepare(options, api) {
        Ok(run) => run,
        Err(e) => match (options.stay_up, options.listen, untraceable::cannot_trace(&e)) {
            (true, Some(addr), Some(why)) => {
                let node = NodeFacts::gather(options.node, options.btf.as_deref());
                let name = options.node_name.clone().unwrap_or(node.node_name);
                return untraceable::serve(addr, &name, &node.kernel_release, why, &mut signals).await;
            }
            _ => return Err(e),
        },
    };
    if let (Some(api), Some(node)) = (events, &options.node_name) {
        run.pipeline.events = Some(EventSink::start(api, node.clone()));
    }
    // Starting parsed the kernel's BTF and read the node whole (mount
    // tables, cgroups, the runtimes' stores: megabytes freed by now); the
    // heap would keep their pages for the whole run, counted against a
    // DaemonSet's limit.
    crate::collect::give_back_freed_memory();
    on_attached();
    let stopped = trace(&mut run, options, &mut signals).await?;
    let events = run.pipeline.events.as_ref().map(EventSink::handle);
    let finished = finish(run, options, stopped);
    // What the last review told (a finding's end) is posted before exit,
    // within what a pod's termination grace period allows.
    if let Some(events) = events {
        events.settle(EVENTS_SETTLE).await;
    }
    finished
}

/// How long the end of a run waits for its last Events to be posted.
const EVENTS_SETTLE: Duration = Duration::from_secs(3);

/// `--pod NAMESPACE/NAME`: the UIDs asked of the Kubernetes API, and the
/// API's side of the diagnosis started (not when recording: a replay
/// could not ask the API again). A pod that cannot be resolved stops the
/// run before anything loads: tracing the whole node instead would widen
/// the filter the user asked for without their knowing.
async fn resolve_named_pods(options: &WatchOptions) -> Result<(Option<WatchOptions>, Option<ApiJoin>)> {
    if options.named_pods.is_empty() {
        return Ok((None, None));
    }
    let resolved = crate::explain::join::resolve(&options.named_pods, &options.kube).await;
    if !resolved.warnings.is_empty() {
        return Err(crate::exit::BadInput(resolved.warnings.join("\n")).into());
    }
    let mut options = options.clone();
    options.pods.extend(resolved.uids);
    let api = match (resolved.join, &options.record) {
        (Some((api, pods)), None) => Some(ApiJoin::start(api, pods)),
        (Some(_), Some(_)) => {
            stderr_line(format_args!("podstuck: recording: the pods named are followed, but what the Kubernetes API says of them is not joined (a replay could not ask it again)"));
            None
        }
        (None, _) => None,
    };
    Ok((Some(options), api))
}

/// `--events`: the API client, made before anything loads. A
/// configuration that cannot be used (none found, a bad kubeconfig) stops
/// the run now: the user asked for Events. A server that does not answer
/// is another matter, said and retried while tracing goes on.
async fn events_api(options: &WatchOptions) -> Result<Option<Api>> {
    if !options.events {
        return Ok(None);
    }
    let api = Api::connect(&options.kube).await.context("--events: cannot make a Kubernetes API client")?;
    Ok(Some(api))
}

/// Everything before the first call: the node judged, the run's facts
/// gathered once, every file that could fail opened (a bad directory fails
/// now, not after an hour of tracing), the programs loaded, the printer
/// picked and started.
fn prepare(options: &WatchOptions, api: Option<ApiJoin>) -> Result<Run> {
    let node = NodeFacts::gather(options.node, options.btf.as_deref());
    let mut plan = plan(&node, options.attach).map_err(NodeNotReady)?;
    if let Some(walk) = options.walk {
        plan.walk = walk;
        if !walk.reads_kernel() {
            // As Plan::choose does under lockdown: fentry would read its
            // arguments from kernel memory.
            plan.attach = AttachPoint::Tracepoint;
        }
    }
    // A busy port or a wrong address refuses the run before the lock is
    // taken or anything loads.
    let listener = options.listen.map(Listener::bind).transpose()?;
    let lock = TracerLock::take(options.node, options.concurrent)?;
    let facts = options.run_facts(&node, SystemTime::now());
    let exporter = match &options.histograms {
        Some(dir) => Some(Exporter::open(dir, options.force, facts.started)?.with_file_mode(options.file_mode)),
        None => None,
    };
    let filter = PodFilter::new(options.pods.iter().cloned());
    let warnings = warnings(options, &filter);
    for warning in &warnings {
        stderr_line(format_args!("{warning}"));
    }
    let diagnose = DiagnoseOptions {
        hung_after: options.hung_after,
        node_name: facts.node.clone(),
        host_mntns: own_mount_namespace(options.node),
        in_container: options.node.in_container(),
        pods: options.pods.clone(),
    };
    // A bad record path fails now too, before the programs load.
    let recorder = match &options.record {
        Some(path) => Some(Recorder::create(path, &RecordHeader::of_run(&facts, &diagnose))?),
        None => None,
    };
    let stats = match options.kernel_cost {
        true => Some(
            aya::sys::enable_stats(aya::sys::Stats::RunTime)
                .context("turning on BPF run-time statistics (--kernel-cost)")?,
        ),
        false => None,
    };
    // One layout for both ends: the v1 hierarchy the kernel reads callers'
    // cgroups in is the one identify maps them back in.
    let layout = NodeLayout::of_this_node(options.node, options.kubelet_root.clone());
    let tracer = start_tracer(options, &node, &layout, plan.attach, plan.walk)
        .map_err(|e| anyhow::Error::new(untraceable::TracingRefused(format!("{e:#}"))))?;
    let tracing = Tracing {
        program_ids: tracer.program_ids().to_vec(),
        attach: tracer.attach_point(),
        path_walk: plan.walk,
        lockdown: node.features.lockdown,
        degraded: plan.degraded,
    };
    let (printer, keys) = printer(options.output(), &facts, &warnings);
    // An incident run (histogram files, the live view) keeps every pod's
    // latencies, as asked; the always-on run (--listen alone) only the
    // node's and the followed pods', so that weeks of pods cost nothing.
    let incident = exporter.is_some() || printer.shows_every().is_some();
    let always_on = !incident && listener.is_some();
    let book = match (incident, always_on) {
        (true, _) => Some(LatencyBook::new(facts.started)),
        (false, true) => Some(LatencyBook::node_wide(facts.started)),
        // A run with --pod keeps one too: its series are the pods' calls.
        (false, false) if !filter.is_whole_node() => Some(LatencyBook::new(facts.started)),
        (false, false) => None,
    };
    let serving = listener.as_ref().and_then(Listener::local_addr);
    let printer = match listener {
        Some(listener) => serve(listener, printer, options),
        None => printer,
    };
    let identifier = Identifier::new(layout);
    let mut diagnoser = Diagnoser::new(&diagnose);
    if always_on {
        // A resolved finding ends with its pod's series, not weeks later.
        diagnoser.forget_resolved_after(POD_SERIES_LINGER);
    }
    if let Some(api) = &api {
        let (first, last) = api.detectors();
        diagnoser.join(first, last);
    }
    let mut pipeline = Pipeline::new(printer, identifier, filter, book, diagnoser, recorder, api);
    pipeline.slow_calls = options.slow_pipeline;
    let mut tracer = tracer;
    pipeline.printer.start(&mut pipeline.out, &facts, &tracing)?;
    if tracer.lifecycle_missing().is_none() {
        let places = PluginPlaces::of_this_node(options.node, &options.cni_plugin_dirs);
        pipeline.with_plugins(&mut tracer, places, options.node);
    }
    pipeline.out.flush()?;
    if let Some(addr) = serving {
        pipeline.say(&format!("serving http://{addr}/metrics and http://{addr}/findings"));
    }
    if let Some(why) = tracer.fallback() {
        pipeline.say(why);
    }
    if tracer.attach_attempts() > 1 {
        pipeline.say(&format!(
            "the kernel accepted the programs and ran none of them until they were attached again ({} attachments): they run now",
            tracer.attach_attempts()
        ));
    }
    if let Some(why) = tracer.lifecycle_missing() {
        pipeline.say(&format!("no process lifecycle on this kernel ({why}): a failing CNI teardown, a SIGTERM ignored and a task SIGKILL does not end go unseen; the removals are traced as ever"));
    }
    if let Some(why) = tracer.connect_missing() {
        pipeline.say(&format!("kubelet's connects are not traced on this kernel ({why}): a CSI plugin kubelet cannot reach goes unseen; the rest is traced as ever"));
    }
    // After the banner, as the fallback is: what this kernel does less well.
    for degraded in &tracing.degraded {
        pipeline.say(&format!("on this kernel: {degraded}"));
    }
    Ok(Run { tracer, facts, pipeline, node: RealNode::new(options.node), exporter, keys, _stats: stats, _lock: lock })
}

/// Serves the endpoint's pages from `listener` (once tracing awaits), the
/// endpoint beside `printer`.
fn serve(listener: Listener, printer: Box<dyn Printer>, options: &WatchOptions) -> Box<dyn Printer> {
    let (endpoint, pages) = Endpoint::new(options.interval);
    listener.serve(pages);
    Box::new(WithEndpoint::new(printer, endpoint))
}

/// What the user should know before tracing starts; said on stderr before
/// the live view takes the screen (they stay above its summary) and on it.
fn warnings(options: &WatchOptions, filter: &PodFilter) -> Vec<String> {
    let mut warnings = Vec::new();
    if !options.node.path(&options.kubelet_root).is_dir() {
        warnings.push(format!(
            "podstuck: kubelet root {} not found: pods are recognised by cgroup and container only (set --kubelet-root if kubelet runs with --root-dir)",
            options.kubelet_root.display()
        ));
    }
    let missing = filter.pods_not_on_node(options.node, &options.kubelet_root);
    if !missing.is_empty() {
        warnings.push(crate::check::pods_not_found(options.node, &missing, &options.kubelet_root));
    }
    warnings
}

/// Loads and attaches the programs as planned.
fn start_tracer(
    options: &WatchOptions,
    node: &NodeFacts,
    layout: &NodeLayout,
    attach: AttachPoint,
    walk: PathWalk,
) -> Result<Tracer> {
    Tracer::start(TracerOptions {
        cgroup_v1: layout.cgroup_v1.iter().map(|h| h.controller).collect(),
        filter: options.kernel_filter(),
        attach,
        walk,
        btf: node.features.btf.path().map(Path::to_path_buf).unwrap_or_default(),
        ring_buffer_bytes: options.ring_buffer_bytes,
        proc_root: options.node.proc_root(),
    })
    .map_err(|e| match node.features.lockdown {
        // Kernels before 5.13 refuse at load what later ones refuse at run time.
        Lockdown::Confidentiality => e.context(
            "kernel lockdown=confidentiality refuses BPF programs that read kernel memory on this kernel: boot with lockdown=integrity (or none) to trace here",
        ),
        _ => e,
    })
}

/// Waits for the live view to ask to stop; forever when there is none.
async fn quit_asked(keys: &mut Option<QuitKeys>) -> Quit {
    match keys {
        Some(keys) => keys.asked().await,
        None => std::future::pending().await,
    }
}

/// The signals that stop a run.
struct StopSignals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl StopSignals {
    fn catch() -> Result<StopSignals> {
        Ok(StopSignals {
            int: signal(SignalKind::interrupt()).context("installing the SIGINT handler")?,
            term: signal(SignalKind::terminate()).context("installing the SIGTERM handler")?,
            hup: signal(SignalKind::hangup()).context("installing the SIGHUP handler")?,
        })
    }
}

/// Hands each call and each review down the pipeline until a signal, a
/// key, the end of `--duration` or the reader going away says stop.
async fn trace(run: &mut Run, options: &WatchOptions, signals: &mut StopSignals) -> Result<Stopped> {
    let Run { tracer, facts, pipeline, node, exporter, keys, .. } = run;
    let StopSignals { int: sigint, term: sigterm, hup: sighup } = signals;
    let deadline = tokio::time::sleep(options.duration.unwrap_or(Duration::MAX / 4));
    tokio::pin!(deadline);
    let mut refresh = tokio::time::interval_at(tokio::time::Instant::now() + options.interval, options.interval);
    let mut review = tokio::time::interval(REVIEW_EVERY);
    review.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let shows_every = pipeline.printer.shows_every();
    let mut screen = tokio::time::interval(shows_every.unwrap_or(REVIEW_EVERY));
    screen.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut last_review = tokio::time::Instant::now();
    // When the early reviews' rate is next met (a leaky bucket's clock):
    // one may come while it is less than a burst ahead of now.
    let mut early_due = last_review;
    let burst = EARLY_REVIEW_SPACING * (EARLY_REVIEW_BURST - 1);
    let mut give_back = tokio::time::interval_at(tokio::time::Instant::now() + GIVE_BACK_EVERY, GIVE_BACK_EVERY);
    loop {
        tokio::select! {
            batch = tracer.next_batch(for_at_most(BATCH_FOR, |e| pipeline.take(e))) => {
                finished(batch).and_then(|_| pipeline.out.flush()).context("writing events")?;
                pipeline.follow_plugin_words(tracer);
            }
            _ = review.tick() => {
                review_now(tracer, pipeline, node, options)?;
                last_review = tokio::time::Instant::now();
            }
            // A call that proves its cause at once came: its review is due
            // a gap after the last one, not at the next tick.
            _ = tokio::time::sleep_until((last_review + REVIEW_GAP).max(early_due.checked_sub(burst).unwrap_or(early_due))),
                if pipeline.review_soon() => {
                review_now(tracer, pipeline, node, options)?;
                last_review = tokio::time::Instant::now();
                early_due = early_due.max(last_review) + EARLY_REVIEW_SPACING;
                review.reset();
            }
            // What a burst of reads freed (a rescan, a storm's records).
            _ = give_back.tick() => crate::collect::give_back_freed_memory(),
            _ = sigint.recv() => return Ok(Stopped::by("SIGINT")),
            _ = sigterm.recv() => return Ok(Stopped::by("SIGTERM")),
            // A closed terminal or a dropped ssh session: end as on SIGTERM.
            _ = sighup.recv() => return Ok(Stopped::by("SIGHUP")),
            _ = &mut deadline => return Ok(Stopped { by: None, quit: None }),
            quit = quit_asked(keys) => return Ok(Stopped { by: Some(quit.stopped_by()), quit: Some(quit) }),
            _ = screen.tick(), if shows_every.is_some() => {
                pipeline.harvest(tracer, BATCH_FOR);
                let totals = totals_and_cost(tracer, pipeline, node, options)?;
                let in_flight = pipeline.in_flight(tracer.calls_in_flight(SHOWN_IN_FLIGHT_AFTER));
                pipeline.show(&in_flight, &totals);
            }
            _ = refresh.tick(), if exporter.is_some() => {
                pipeline.harvest(tracer, BATCH_FOR);
                let totals = totals_and_cost(tracer, pipeline, node, options)?;
                let (Some(exporter), Some(book)) = (exporter.as_mut(), pipeline.book.as_mut()) else { continue };
                let info = RunInfo::of_run(facts, &totals, options.interval, SystemTime::now(), false);
                // A failed refresh (disk full, the directory gone) is said
                // once and retried every interval; tracing goes on, the
                // book keeps every call.
                if let Some(message) = exporter.refresh_and_tell(book, &info, SystemTime::now()) {
                    pipeline.say(&message);
                }
            }
        }
        // The reader went away (`podstuck watch --json | head`, a closed
        // terminal): stop quietly, keeping the files.
        if pipeline.out.gone() {
            return Ok(Stopped::by(OUTPUT_GONE));
        }
    }
}

/// How often the heap's free pages go back to the kernel in a long run.
const GIVE_BACK_EVERY: Duration = Duration::from_secs(30);

/// One review: the plugins' files and the kernel's counts read, the
/// calls in flight, the findings told.
fn review_now(tracer: &mut Tracer, pipeline: &mut Pipeline, node: &mut RealNode, options: &WatchOptions) -> Result<()> {
    pipeline.refresh_plugins(tracer, options.node);
    pipeline.refresh_identities();
    pipeline.harvest(tracer, BATCH_FOR);
    let in_flight = pipeline.in_flight(tracer.calls_in_flight(options.hung_after));
    let reports = pipeline.review(node, &in_flight, false);
    pipeline.follow_plugin_words(tracer);
    pipeline.tell(&reports).context("writing findings")
}

/// The last calls and review, what was never told, the record's end, the
/// histogram files' last refresh, the printer's last words and, in every
/// mode, the kernel's cost. Within [`STOP_WITHIN`], whatever the node
/// does: what could not be done in it is said, not waited for.
fn finish(mut run: Run, options: &WatchOptions, stopped: Stopped) -> Result<Verdict> {
    let Run { tracer, facts, pipeline, node, exporter, .. } = &mut run;
    // The programs' teardown takes the kernel a grace period or two each
    // (the syscall tracepoints' one after the other): begun first, it goes
    // on while the rings are drained and the last review is made.
    tracer.stop_programs(options.kernel_cost);
    let stop_by = Instant::now() + STOP_WITHIN;
    node.stopping(stop_by);
    let drain_for = || DRAIN_AT_STOP.min(stop_by.saturating_duration_since(Instant::now()));
    let emptied = pipeline.drain(tracer, drain_for()).context("writing events")?;
    pipeline.last_harvest(tracer, drain_for());
    let in_flight = pipeline.in_flight(tracer.calls_in_flight(options.hung_after));
    let reports = pipeline.review(node, &in_flight, true);
    pipeline.tell(&reports).context("writing findings")?;
    let untold = pipeline.diagnoser.untold();
    pipeline.tell(&untold).context("writing findings")?;
    let totals = totals_and_cost(tracer, pipeline, node, options)?;
    pipeline.finish_record(&untold, &totals);
    let histograms = last_refresh(
        exporter.as_mut(),
        pipeline.book.as_mut(),
        &RunInfo::of_run(facts, &totals, options.interval, SystemTime::now(), true),
    );
    let printed = last_words(tracer, pipeline, &totals, &stopped);
    for cost in &totals.programs {
        stderr_line(format_args!("podstuck: kernel cost: {cost}"));
    }
    if !emptied {
        stderr_line(format_args!(
            "podstuck: stopped while the kernel still sent calls: those after the first {} of the stop were not read (the totals count them)",
            crate::words::exact_duration(DRAIN_AT_STOP)
        ));
    }
    for (pid, path) in node.readers_left() {
        stderr_line(format_args!(
            "podstuck: left its read of {} unanswered, in reader process {pid}: it ends when that filesystem answers or its connection is aborted, and podstuck does not wait for it",
            crate::words::safe_text(&path)
        ));
    }
    printed.context("writing the end of the output")?;
    // The last refresh failing (disk full) is said at the very end (exit
    // code 1), after the closing summary or `end` line: those hold the
    // run's totals and events lost, which must not be lost with the files.
    histograms?;
    let critical_active = pipeline
        .diagnoser
        .findings()
        .iter()
        .filter(|f| f.status == Status::Active && f.severity == Severity::Critical)
        .count();
    let verdict = Verdict { critical_active, ran_its_duration: stopped.by.is_none() };
    // The demo says its own verdict: its exit status is 0 (issue 42).
    if verdict.exit_code() == crate::exit::CRITICAL_ACTIVE && options.says_verdict {
        stderr_line(format_args!(
            "podstuck: {critical_active} critical finding(s) still active at the end of --duration: exit {}",
            crate::exit::CRITICAL_ACTIVE
        ));
    }
    Ok(verdict)
}

/// The kernel's totals (with `--pod` the pods' calls apart), how the
/// node's reads stand, and with `--kernel-cost` what its programs cost.
fn totals_and_cost(
    tracer: &Tracer,
    pipeline: &Pipeline,
    node: &mut RealNode,
    options: &WatchOptions,
) -> Result<RunTotals> {
    let mut totals = pipeline.with_pods_calls(tracer.totals()?);
    totals.lifecycle_dropped = pipeline.lifecycle_dropped();
    let claims = pipeline.claims_set_aside();
    totals.claims_set_aside = claims.by_name();
    totals.claims_naming_another_pod = claims.naming_another_pod;
    totals.node_reads = node_reads(node);
    if options.kernel_cost {
        totals.programs = tracer.program_costs();
    }
    Ok(totals)
}

/// How podstuck's reads of the node stand, as the run's totals say it.
fn node_reads(node: &mut RealNode) -> NodeReads {
    let now = node.reads_now();
    NodeReads {
        avoided: now
            .avoided
            .into_iter()
            .map(|a| AvoidedMount { mount_point: a.mount_point, fstype: a.fstype, since: a.since, readers: a.readers })
            .collect(),
        recovered_total: now.recovered_total,
        recovered: now
            .recovered
            .into_iter()
            .map(|r| RecoveredMount { mount_point: r.mount_point, fstype: r.fstype, avoided_for: r.avoided_for })
            .collect(),
        failed: now.failed.into_iter().map(|(kind, n)| (kind.to_string(), n)).collect(),
    }
}

/// The histogram files' last refresh, marked finished.
fn last_refresh(exporter: Option<&mut Exporter>, book: Option<&mut LatencyBook>, info: &RunInfo) -> Result<()> {
    let (Some(exporter), Some(book)) = (exporter, book) else { return Ok(()) };
    exporter.refresh(book, info, SystemTime::now()).map(|_| ()).map_err(|e| {
        anyhow::anyhow!(
            "cannot write the final histogram files in {}: {e:#}; they hold the last interval written before",
            exporter.dir().display()
        )
    })
}

/// The printer's last words: the closing line, or the live view's summary
/// with the run as it stands at the end.
fn last_words(
    tracer: &mut Tracer,
    pipeline: &mut Pipeline,
    totals: &RunTotals,
    stopped: &Stopped,
) -> std::io::Result<()> {
    let in_flight = match pipeline.printer.shows_every() {
        Some(_) => pipeline.in_flight(tracer.calls_in_flight(SHOWN_IN_FLIGHT_AFTER)),
        None => Vec::new(),
    };
    let findings = pipeline.diagnoser.findings();
    let moment = pipeline.printer.shows_every().and(pipeline.book.as_ref()).map(|book| Moment {
        now: SystemTime::now(),
        findings: &findings,
        book,
        in_flight: &in_flight,
        totals,
    });
    let ending = Ending { totals, stopped_by: stopped.by, quit: stopped.quit.as_ref(), moment };
    pipeline.printer.finish(&mut pipeline.out, &ending)?;
    pipeline.out.flush()
}

#[cfg(test)]
mod tests {
    use super::Verdict;

    #[test]
    fn only_a_run_of_its_whole_duration_with_a_critical_finding_left_exits_3() {
        let verdict = |critical_active, ran_its_duration| Verdict { critical_active, ran_its_duration }.exit_code();
        assert_eq!(verdict(1, true), 3);
        assert_eq!(verdict(0, true), 0, "nothing critical left");
        assert_eq!(verdict(2, false), 0, "stopped by a key or a signal: its findings were shown");
    }
}
