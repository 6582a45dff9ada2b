//! `podstuck watch`: trace the node until told to stop, diagnose what it
//! sees, and say it the way the reader needs ([`Output`]): on a terminal,
//! the live view, then a summary to paste into an incident channel; to a
//! pipe, one line per finding as it appears or changes; `--json`, every
//! call and finding as JSON lines; `--calls`, one plain line per call. With
//! `--histograms DIR`, keep latency histograms and refresh their files
//! every interval. SIGINT and SIGTERM (and `q` or Ctrl-C in the live view)
//! stop it cleanly; the programs detach when the tracer is dropped.

use std::fs::File;
use std::io::{BufWriter, ErrorKind, IsTerminal, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use podstuck_common::{KernelFilter, Syscall};

use anyhow::{Context, Result};
use tokio::signal::unix::{signal, SignalKind};

use crate::collect::{kernel_filter, AttachPoint, Flight, Tracer, TracerOptions};
use crate::diagnose::{CallInFlight, CountedCalls, DiagnoseOptions, Diagnoser, Report, Review};
use crate::event::{CallEvent, DecodeError};
use crate::export::{Exporter, RunInfo};
use crate::inspect::live::LiveNode;
use crate::latency::LatencyBook;
use crate::series::{Attribution, SeriesNames};
use crate::identify::pod::PodUid;
use crate::identify::{Identifier, NodeLayout, PodFilter, DEFAULT_KUBELET_ROOT};
use crate::output::{end_json, end_text, event_json, event_text, finding_json, finding_text, start_json, terminal_safe_lines, StartLine};
use crate::kernel_features::{Lockdown, PathWalk};
use crate::preflight::{plan, NodeFacts, Problem};
use crate::record::{RecordHeader, Recorder, RecordingNode};
use crate::view::model::Notes;
use crate::view::text::{finding_line, summary};
use crate::view::{LiveTerminal, LiveView, Moment, Quit, RunHeading};
use crate::run::{RunFacts, Tracing};

#[derive(Clone, Debug)]
pub struct WatchOptions {
    /// JSON lines instead of text.
    pub json: bool,
    /// Stop by itself after this long.
    pub duration: Option<Duration>,
    /// Follow these pods only; empty = the whole node.
    pub pods: Vec<PodUid>,
    pub kubelet_root: PathBuf,
    /// Failed calls only (decided in the kernel).
    pub errors_only: bool,
    /// These syscalls only (decided in the kernel); empty = all four.
    pub syscalls: Vec<Syscall>,
    /// Where to keep latency histogram files, if anywhere.
    pub histograms: Option<PathBuf>,
    /// Overwrite an earlier run's files in `histograms`.
    pub force: bool,
    /// How often histogram files are refreshed (and interval histograms cut).
    pub interval: Duration,
    /// With `json` or `calls`: print findings only, not each call.
    pub findings_only: bool,
    /// One plain line per call instead of the live view (the text output
    /// of earlier versions).
    pub calls: bool,
    /// A call in flight longer than this is a hung call.
    pub hung_after: Duration,
    /// Trace even when another podstuck already traces this node.
    pub concurrent: bool,
    /// Save what the diagnosis sees to this file (`podstuck record`).
    pub record: Option<PathBuf>,
    /// Stream every call, past the per-series budget (costs user space a
    /// storm's worth of records; the counts are exact either way).
    pub every_call: bool,
    pub attach: AttachPoint,
    /// A BTF file for the struct layouts when the kernel has none (`--btf`).
    pub btf: Option<PathBuf>,
    /// Walk base directories unrolled even where bpf_loop exists (tests).
    pub unrolled_walk: bool,
    /// The mode of the histogram files (`--file-mode`, default 0600).
    pub file_mode: u32,
    /// Ring buffer size in bytes; default `RING_BUFFER_BYTES`.
    pub ring_buffer_bytes: Option<u32>,
    /// Turn on the kernel's BPF run-time statistics and say what each
    /// program cost per run at the end.
    pub kernel_cost: bool,
}

impl Default for WatchOptions {
    fn default() -> WatchOptions {
        WatchOptions {
            json: false,
            duration: None,
            pods: Vec::new(),
            kubelet_root: PathBuf::from(DEFAULT_KUBELET_ROOT),
            errors_only: false,
            syscalls: Vec::new(),
            histograms: None,
            force: false,
            interval: Duration::from_secs(5),
            findings_only: false,
            calls: false,
            hung_after: Duration::from_secs(5),
            concurrent: false,
            record: None,
            every_call: false,
            attach: AttachPoint::Auto,
            btf: None,
            unrolled_walk: false,
            file_mode: 0o600,
            ring_buffer_bytes: None,
            kernel_cost: false,
        }
    }
}

impl WatchOptions {
    fn kernel_filter(&self) -> KernelFilter {
        let syscalls = crate::run::traced(&self.syscalls).iter().fold(0, |mask, s| mask | 1 << *s as u32);
        kernel_filter(syscalls, self.errors_only, self.every_call)
    }
}

/// How a run is shown.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Output {
    /// `--json`: a start line, every call and finding, an end line (with
    /// `--findings`, no calls).
    Json,
    /// `--calls`: one plain line per call, findings as blocks, a closing
    /// line (with `--findings`, no calls).
    Calls,
    /// Standard output is not a terminal: one line per finding when it
    /// appears or changes, and the closing line.
    FindingLines,
    /// A terminal: the live view, then a summary.
    Live,
}

impl Output {
    /// What `options` and standard output call for.
    pub fn chosen(options: &WatchOptions) -> Output {
        if options.json {
            Output::Json
        } else if options.calls {
            Output::Calls
        } else if LiveTerminal::possible() {
            Output::Live
        } else {
            if std::io::stdout().is_terminal() {
                eprintln!("podstuck: no terminal to read keys from (or TERM=dumb): printing findings as lines instead of the live view");
            }
            Output::FindingLines
        }
    }
}

/// How often the live view is redrawn: often enough to feel live, rarely
/// enough to cost nothing.
const SCREEN_EVERY: Duration = Duration::from_millis(250);
/// Calls in flight at least this long are shown: shorter ones are just
/// calls, not waits.
const SHOWN_IN_FLIGHT_AFTER: Duration = Duration::from_millis(100);

/// Waits for the live view to ask to stop; forever when there is none.
async fn quit_asked(live: &mut Option<LiveTerminal>) -> Quit {
    match live {
        Some(live) => live.quit_asked().await,
        None => std::future::pending().await,
    }
}

/// The node cannot run podstuck; each problem says what to do.
#[derive(Debug)]
pub struct NodeNotReady(pub Vec<Problem>);

impl std::fmt::Display for NodeNotReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lines: Vec<String> = self.0.iter().map(|p| p.to_string()).collect();
        write!(f, "{}", lines.join("\n"))
    }
}

impl std::error::Error for NodeNotReady {}

/// Where each decoded record goes: identified, filtered to the pods asked
/// for, printed, counted in the latency book and seen by the detectors.
struct Sink {
    /// Standard output, or nothing while the live view owns the terminal.
    out: Box<dyn Write>,
    output: Output,
    findings_only: bool,
    identifier: Identifier,
    filter: PodFilter,
    book: Option<LatencyBook>,
    /// Who the kernel's series are, learnt from the calls streamed.
    names: SeriesNames,
    diagnoser: Diagnoser,
    /// What the kernel counted since the last review.
    counted: Vec<CountedCalls>,
    /// `podstuck record`: every admitted call and every review, saved.
    recorder: Option<Recorder<File>>,
    /// What would go to stderr while the live view owns the terminal.
    notes: Notes,
}

impl Sink {
    fn take(&mut self, decoded: Result<CallEvent, DecodeError>) -> std::io::Result<()> {
        match decoded {
            Ok(event) => {
                let identity = self.identifier.identify(&event);
                let admitted = self.filter.admits(&identity);
                if self.book.is_some() {
                    let who = admitted.then(|| Attribution { role: identity.actor.role, pod: identity.pod_uid.clone() });
                    self.names.observe(&event, who);
                }
                if !admitted {
                    return Ok(());
                }
                self.diagnoser.observe(&event, &identity);
                let stopped = self.recorder.as_mut().and_then(|r| r.add_call(&event, &identity).err());
                if let Some(e) = stopped {
                    self.say(e.to_string());
                }
                let line = match self.output {
                    _ if self.findings_only => return Ok(()),
                    Output::Json => event_json(&event, &identity),
                    Output::Calls => terminal_safe_lines(&event_text(&event, &identity)).into_owned(),
                    Output::FindingLines | Output::Live => return Ok(()),
                };
                writeln!(self.out, "{line}")
            }
            // Counted in the totals; said here so it is never silent.
            Err(e) => {
                self.say(format!("skipped a record: {e}"));
                Ok(())
            }
        }
    }

    /// A message for the user: on stderr, or on the live view's screen
    /// (stderr would tear it).
    fn say(&mut self, message: String) {
        match self.output {
            Output::Live => self.notes.add(message),
            _ => stderr_line(format_args!("podstuck: {message}")),
        }
    }
}

impl Sink {
    /// Reads what the kernel counted since last time into the latency book
    /// (exact, whatever was streamed). Done even without a book: reading
    /// is what frees the series of exited processes in the kernel.
    fn harvest(&mut self, tracer: &mut Tracer) {
        let deltas = tracer.series_deltas();
        let counts: Vec<CountedCalls> = deltas
            .iter()
            .filter_map(|d| d.caller.map(|(pid, _)| CountedCalls { pid, syscall: d.syscall, errno: d.errno, count: d.count }))
            .collect();
        // Handed to the diagnosis at the next review, with it in a record.
        self.counted.extend(counts);
        let Some(book) = self.book.as_mut() else { return };
        let (identifier, filter) = (&mut self.identifier, &self.filter);
        let named = |pid: u32, cgroup_id: u64| {
            let identity = identifier.identify_process(pid, cgroup_id);
            filter.admits(&identity).then(|| Attribution { role: identity.actor.role, pod: identity.pod_uid })
        };
        // Calls counted without their process can only be the node's.
        let orphans = filter.is_whole_node().then(|| Attribution { role: crate::identify::actor::Role::Other, pod: None });
        self.names.apply(deltas, book, SystemTime::now(), named, orphans);
        // Pods past the caps, or pods that do not exist: said once each.
        if let Some(note) = book.take_overflow_note() {
            self.say(note);
        }
    }

    /// One diagnosis review at `now`; recorded, questions to the node and
    /// all, when recording.
    fn review(&mut self, node: &mut LiveNode, in_flight: &[CallInFlight]) -> Vec<Report> {
        let now = SystemTime::now();
        let counted = std::mem::take(&mut self.counted);
        self.diagnoser.counted(&counted);
        let Some(recorder) = self.recorder.as_mut() else {
            return self.diagnoser.review(&mut Review { now, in_flight, node });
        };
        let mut recording = RecordingNode::new(node);
        let reports = self.diagnoser.review(&mut Review { now, in_flight, node: &mut recording });
        if let Err(e) = recorder.add_review(now, in_flight, &counted, recording.into_asked(), &reports) {
            self.say(e.to_string());
        }
        reports
    }

    /// Calls in flight, identified and filtered like completed ones.
    fn in_flight(&mut self, flights: Vec<Flight>) -> Vec<CallInFlight> {
        let mut calls = Vec::new();
        for flight in flights {
            let identity = self.identifier.identify_flight(&flight);
            if !self.filter.admits(&identity) {
                continue;
            }
            calls.push(CallInFlight {
                tid: flight.tid,
                pid: flight.pid,
                syscall: flight.syscall,
                flags: flight.flags,
                started: flight.started,
                path: identity.abs_path.ok(),
                pod_uid: identity.pod_uid,
                actor: identity.actor,
            });
        }
        calls
    }

    fn tell(&mut self, reports: &[Report]) -> std::io::Result<()> {
        for report in reports {
            let text = match self.output {
                Output::Json => finding_json(report),
                Output::Calls => finding_text(report),
                Output::FindingLines => finding_line(report, SystemTime::now()),
                // The screen shows every finding's latest state.
                Output::Live => continue,
            };
            writeln!(self.out, "{}", terminal_safe_lines(&text))?;
        }
        Ok(())
    }
}

/// What stopped a run whose reader went away.
const OUTPUT_GONE: &str = "its output closing";

/// How often the detectors look again, with the node, at what they saw.
const REVIEW_EVERY: Duration = Duration::from_millis(500);

/// Whoever read the output is gone: a closed pipe (`podstuck watch | head`),
/// or a terminal hung up (a dropped ssh session, a closed window: EIO).
fn reader_gone(e: &std::io::Error) -> bool {
    e.kind() == ErrorKind::BrokenPipe || e.raw_os_error() == Some(libc::EIO)
}

fn is_reader_gone(e: &anyhow::Error) -> bool {
    e.chain().any(|c| c.downcast_ref::<std::io::Error>().is_some_and(reader_gone))
}

/// Output the reader may no longer take: a gone reader is no error (what
/// must be kept, the record and the histogram files, is written apart).
fn unless_gone(result: std::io::Result<()>) -> std::io::Result<()> {
    match result {
        Err(e) if reader_gone(&e) => Ok(()),
        other => other,
    }
}

/// A line on stderr that never panics: after a hang-up there is no
/// terminal to write to, and the cleanup after it must go on.
pub fn stderr_line(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(std::io::stderr(), "{}", terminal_safe_lines(&line.to_string()));
}

/// Runs `podstuck watch` on standard output.
pub async fn watch(options: &WatchOptions) -> Result<()> {
    watch_with(options, || {}).await
}

/// Runs `podstuck watch`, calling `on_attached` once every probe is
/// attached: what happens after it is traced (the demo starts its actors).
pub async fn watch_with(options: &WatchOptions, on_attached: impl FnOnce()) -> Result<()> {
    let facts = NodeFacts::gather(options.btf.as_deref());
    let mut plan = plan(&facts, options.attach).map_err(NodeNotReady)?;
    if options.unrolled_walk {
        plan.walk = PathWalk::Unrolled;
    }
    // Held for the run; the kernel lets go of it however podstuck ends.
    let _tracing = crate::check::TracerLock::take(options.concurrent)?;
    let started = SystemTime::now();
    // A bad output directory fails now, not after an hour of tracing.
    let mut exporter = match &options.histograms {
        Some(dir) => Some(Exporter::open(dir, options.force, started)?.with_file_mode(options.file_mode)),
        None => None,
    };
    let filter = PodFilter::new(options.pods.iter().cloned());
    let identifier = Identifier::new(NodeLayout::of_this_node(options.kubelet_root.clone()));
    // Said before the live view takes the screen (they stay above its
    // summary) and on it while it runs.
    let mut warnings = Vec::new();
    if !options.kubelet_root.is_dir() {
        warnings.push(format!(
            "podstuck: kubelet root {} not found: pods are recognised by cgroup and container only (set --kubelet-root if kubelet runs with --root-dir)",
            options.kubelet_root.display()
        ));
    }
    let missing = filter.pods_not_on_node(&options.kubelet_root);
    if !missing.is_empty() {
        warnings.push(crate::check::pods_not_found(&missing, &options.kubelet_root));
    }
    for warning in &warnings {
        eprintln!("{warning}");
    }
    let run = RunFacts {
        version: crate::run::VERSION,
        node: facts.node_name.clone(),
        kernel: facts.kernel_release.clone(),
        started,
        pods: options.pods.clone(),
        kubelet_root: options.kubelet_root.clone(),
        syscalls: options.syscalls.clone(),
        errors_only: options.errors_only,
        every_call: options.every_call,
    };
    let diagnose = DiagnoseOptions { hung_after: options.hung_after, node_name: run.node.clone(), host_mntns: crate::identify::process::own_mount_namespace() };
    // A bad record path fails now too, before the programs load.
    let recorder = match &options.record {
        Some(path) => Some(Recorder::create(path, &RecordHeader::of_run(&run, &diagnose))?),
        None => None,
    };
    // Held for the run: the statistics stop when it closes.
    let _stats = match options.kernel_cost {
        true => Some(aya::sys::enable_stats(aya::sys::Stats::RunTime).context("turning on BPF run-time statistics (--kernel-cost)")?),
        false => None,
    };
    let mut tracer = Tracer::start(TracerOptions {
        filter: options.kernel_filter(),
        attach: plan.attach,
        walk: plan.walk,
        btf: facts.features.btf.path().map(Path::to_path_buf).unwrap_or_default(),
        ring_buffer_bytes: options.ring_buffer_bytes,
    })
    .map_err(|e| match facts.features.lockdown {
        // Kernels before 5.13 refuse at load what later ones refuse at run time.
        Lockdown::Confidentiality => e.context(
            "kernel lockdown=confidentiality refuses BPF programs that read kernel memory on this kernel: boot with lockdown=integrity (or none) to trace here",
        ),
        _ => e,
    })?;
    let diagnoser = Diagnoser::new(&diagnose);
    let mut node = LiveNode::new();
    let mut output = Output::chosen(options);
    let mut live = None;
    if output == Output::Live {
        match LiveTerminal::start() {
            Ok(terminal) => live = Some(terminal),
            Err(e) => {
                eprintln!("podstuck: cannot take the terminal for the live view ({e}): printing findings as lines");
                output = Output::FindingLines;
            }
        }
    }
    let mut sink = Sink {
        out: match output {
            Output::Live => Box::new(std::io::sink()),
            _ => Box::new(BufWriter::new(std::io::stdout().lock())),
        },
        output,
        findings_only: options.findings_only,
        identifier,
        filter,
        // The live view's busiest series need per-series counts and
        // latencies even without --histograms.
        book: (exporter.is_some() || output == Output::Live).then(|| LatencyBook::new(started)),
        names: SeriesNames::default(),
        diagnoser,
        counted: Vec::new(),
        recorder,
        notes: Notes::default(),
    };
    for warning in &warnings {
        sink.notes.add(warning.trim_start_matches("podstuck: "));
    }
    let mut view = LiveView::new(RunHeading::of(&run));
    let mut terminal_failure = None;

    let tracing = Tracing {
        program_ids: tracer.program_ids().to_vec(),
        attach: tracer.attach_point(),
        path_walk: plan.walk,
        lockdown: facts.features.lockdown,
        degraded: plan.degraded.clone(),
    };
    let start = StartLine::new(&run, &tracing);
    match output {
        Output::Json => writeln!(sink.out, "{}", start_json(&start))?,
        // The live view's header says it.
        Output::Live => {}
        Output::Calls | Output::FindingLines => eprintln!(
            "podstuck {}: tracing {} on {} (kernel {}, {}, path walk {}){}; Ctrl-C to stop",
            start.version,
            start.syscalls.join(", "),
            run.scope(),
            start.kernel,
            start.attach,
            start.path_walk,
            if output == Output::FindingLines { "; findings, one line each" } else { "" }
        ),
    }
    sink.out.flush()?;
    if let Some(why) = tracer.fallback() {
        sink.say(why.to_string());
    }
    // After the banner, as the fallback is: what this kernel does less well.
    for degraded in &plan.degraded {
        sink.say(format!("on this kernel: {degraded}"));
    }
    on_attached();

    let mut sigint = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut sigterm = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let mut sighup = signal(SignalKind::hangup()).context("installing the SIGHUP handler")?;
    let deadline = tokio::time::sleep(options.duration.unwrap_or(Duration::MAX / 4));
    tokio::pin!(deadline);
    let mut refresh = tokio::time::interval_at(tokio::time::Instant::now() + options.interval, options.interval);
    let mut review = tokio::time::interval(REVIEW_EVERY);
    review.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut screen = tokio::time::interval(SCREEN_EVERY);
    screen.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);

    let stopped_by = loop {
        tokio::select! {
            batch = tracer.next_batch(|e| sink.take(e)) => {
                let flushed = batch.and_then(|()| sink.out.flush());
                match flushed {
                    Ok(()) => {}
                    // The reader went away (`podstuck watch --json | head`, a
                    // closed terminal): stop quietly, keeping the files.
                    Err(e) if reader_gone(&e) => break Some(OUTPUT_GONE),
                    Err(e) => return Err(e).context("writing events"),
                }
            }
            _ = review.tick() => {
                sink.harvest(&mut tracer);
                let in_flight = sink.in_flight(tracer.calls_in_flight(options.hung_after));
                let reports = sink.review(&mut node, &in_flight);
                match sink.tell(&reports).and_then(|()| sink.out.flush()) {
                    Ok(()) => {}
                    Err(e) if reader_gone(&e) => break Some(OUTPUT_GONE),
                    Err(e) => return Err(e).context("writing findings"),
                }
            }
            _ = sigint.recv() => break Some("SIGINT"),
            _ = sigterm.recv() => break Some("SIGTERM"),
            // A closed terminal or a dropped ssh session: end as on SIGTERM.
            _ = sighup.recv() => break Some("SIGHUP"),
            _ = &mut deadline => break None,
            quit = quit_asked(&mut live) => {
                if let Quit::TerminalFailed(why) = &quit {
                    terminal_failure = Some(why.clone());
                }
                break Some(quit.stopped_by());
            }
            _ = screen.tick(), if live.is_some() => {
                sink.harvest(&mut tracer);
                let totals = tracer.totals()?;
                let in_flight = sink.in_flight(tracer.calls_in_flight(SHOWN_IN_FLIGHT_AFTER));
                if let (Some(live), Some(book)) = (live.as_ref(), sink.book.as_ref()) {
                    let findings = sink.diagnoser.findings();
                    let now = SystemTime::now();
                    live.show(view.screen(&Moment { now, findings: &findings, book, in_flight: &in_flight, totals: &totals, notes: &sink.notes }));
                }
            }
            _ = refresh.tick(), if exporter.is_some() => {
                sink.harvest(&mut tracer);
                let (Some(exporter), Some(book)) = (exporter.as_mut(), sink.book.as_mut()) else { continue };
                let info = RunInfo::of_run(&run, &tracer.totals()?, options.interval, SystemTime::now(), false);
                // A failed refresh (disk full, the directory gone) is said
                // once and retried every interval; tracing goes on, the
                // book keeps every call.
                if let Some(message) = exporter.refresh_and_tell(book, &info, SystemTime::now()) {
                    sink.say(message);
                }
            }
        }
    };

    let finish = (|| -> Result<()> {
        tracer.drain(&mut |e| sink.take(e))?;
        sink.harvest(&mut tracer);
        let in_flight = sink.in_flight(tracer.calls_in_flight(options.hung_after));
        let reports = sink.review(&mut node, &in_flight);
        unless_gone(sink.tell(&reports))?;
        let untold = sink.diagnoser.untold();
        unless_gone(sink.tell(&untold))?;
        let totals = tracer.totals()?;
        if let Some(recorder) = sink.recorder.take() {
            let name = recorder.name().to_string();
            match recorder.finish(SystemTime::now(), &untold, Some(&totals)) {
                Ok(saved) if saved.complete => {
                    sink.notes.add(format!("recorded {} entries to {name} (podstuck replay {name} diagnoses them again)", saved.entries));
                    if output != Output::Live {
                        stderr_line(format_args!("podstuck: recorded {} entries to {name} (podstuck replay {name} diagnoses them again)", saved.entries));
                    }
                }
                Ok(_) => {}
                Err(e) => stderr_line(format_args!("podstuck: {e}")),
            }
        }
        // The last refresh failing (disk full) is said at the very end
        // (exit code 1), after the closing summary or `end` line: those
        // hold the run's totals and events lost, which must not be lost
        // with the files. Said as text only, so that no I/O error in it is
        // mistaken for the reader going away.
        let mut histograms_failed = None;
        if let (Some(exporter), Some(book)) = (exporter.as_mut(), sink.book.as_mut()) {
            let info = RunInfo::of_run(&run, &totals, options.interval, SystemTime::now(), true);
            if let Err(e) = exporter.refresh(book, &info, SystemTime::now()) {
                histograms_failed = Some(anyhow::anyhow!(
                    "cannot write the final histogram files in {}: {e:#}; they hold the last interval written before",
                    exporter.dir().display()
                ));
            }
        }
        let histograms_result = || histograms_failed.map_or(Ok(()), Err);
        if output == Output::Live {
            let in_flight = sink.in_flight(tracer.calls_in_flight(SHOWN_IN_FLIGHT_AFTER));
            // Give the terminal back first: the summary goes to the user's own screen.
            if let Some(live) = live.take() {
                live.close();
            }
            let findings = sink.diagnoser.findings();
            let book = sink.book.as_ref().expect("the live view always keeps a latency book");
            let moment = Moment { now: SystemTime::now(), findings: &findings, book, in_flight: &in_flight, totals: &totals, notes: &sink.notes };
            let mut stdout = std::io::stdout().lock();
            let stopped_by = stopped_by.or(options.duration.map(|_| "the end of --duration"));
            // Wherever standard output still goes; nowhere after a hang-up.
            unless_gone(write!(stdout, "{}", terminal_safe_lines(&summary(view.run(), &moment, stopped_by))).and_then(|()| stdout.flush()))?;
            // Said on the screen while it lasted; kept for after it.
            for note in sink.notes.lines().iter().filter(|n| !warnings.iter().any(|w| w.ends_with(n.as_str()))) {
                stderr_line(format_args!("podstuck: {note}"));
            }
            if let Some(why) = &terminal_failure {
                stderr_line(format_args!("podstuck: the live view stopped: {why}"));
            }
        }
        // In every mode, the live view's too (it once returned before this).
        if options.kernel_cost {
            for cost in tracer.program_costs() {
                stderr_line(format_args!("podstuck: kernel cost: {cost}"));
            }
        }
        if output == Output::Live {
            return histograms_result();
        }
        let end = if output == Output::Json { end_json(&totals, stopped_by) } else { end_text(&totals, stopped_by) };
        unless_gone(writeln!(sink.out, "{end}").and_then(|()| sink.out.flush()))?;
        histograms_result()
    })();
    match finish {
        Err(e) if is_reader_gone(&e) => Ok(()),
        other => other,
    }
}
