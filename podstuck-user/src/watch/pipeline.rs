//! Where each call goes while `watch` runs, stage after stage: identified,
//! filtered to the pods asked for, counted in the latency book, seen by the
//! detectors, saved in the record, handed to the printer. And what each
//! review does: the kernel's counts harvested, the calls in flight
//! identified, the detectors asked, what they tell printed and recorded.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::time::{Duration, Instant, SystemTime};

use crate::cni_plugins::{PluginFiles, PluginPlaces};
use crate::collect::{Received, Tracer};
use crate::diagnose::{CallInFlight, CountedCalls, Diagnoser, Report, Review, Status};
use crate::event::Flight;
use crate::event::ProcessStart;
use crate::event::{CallEvent, DecodeError};
use crate::explain::join::ApiJoin;
use crate::identify::actor::Role;
use crate::identify::pod::PodUid;
use crate::identify::process::process_start;
use crate::identify::{Identifier, KernelCgroups, PodFilter};
use crate::inspect::real_node::RealNode;
use crate::k8s_events::EventSink;
use crate::latency::LatencyBook;
use crate::lifecycle::provenance::{exe_name, Dropped, ExecFacts, ParentFacts, Provenance};
use crate::lifecycle::{CniRun, Lifecycle, LifecycleEvent, LifecycleIdentity};
use crate::node_access::Node;
use crate::print::{stderr_line, Out, Printer};
use crate::record::{Recorder, RecordingNode};
use crate::run::RunTotals;
use crate::series::{Attribution, SeriesNames};
use crate::view::Moment;
use podstuck_common::Syscall;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

/// The stages a call goes through, and where they print.
pub(super) struct Pipeline {
    pub(super) out: Out,
    pub(super) printer: Box<dyn Printer>,
    identifier: Identifier,
    filter: PodFilter,
    /// Kept for the histogram files and for a printer that shows the
    /// busiest series (the live view), even without `--histograms`.
    pub(super) book: Option<LatencyBook>,
    /// Who the kernel's series are, learnt from the calls streamed.
    names: SeriesNames,
    pub(super) diagnoser: Diagnoser,
    /// What the kernel counted since the last review.
    counted: Vec<CountedCalls>,
    /// `podstuck record`: every admitted call and every review, saved.
    recorder: Option<Recorder<File>>,
    /// `--pod NAMESPACE/NAME`: the Kubernetes API's side, joined.
    api: Option<ApiJoin>,
    /// `--events`: what is told is posted as Kubernetes Events too.
    pub(super) events: Option<EventSink>,
    /// Processes an admitted exec or signal named, and their pod: their
    /// exit is admitted as theirs (a CNI plugin runs in the runtime's
    /// cgroup, so only its exec says which pod it works for).
    named: Named,
    /// The node's CNI plugin files, as the exec program knows them.
    plugins: Option<Plugins>,
    /// Which execs of plugin files are the node's runtime at work.
    provenance: Provenance,
    /// The node's mount namespace, as `/proc/<pid>/ns/mnt` names it.
    node_mntns: Option<Vec<u8>>,
}

/// Processes [`Pipeline`] remembers between their exec or signal and their
/// exit, at most: past this the oldest are forgotten (the kernel's own map
/// of them is as large, and LRU).
const NAMED_MAX: usize = 4096;

/// What one review's reads of the node wait, all together, at most: a
/// review of many hung filesystems must not wait their deadlines one
/// after another (the rings are read meanwhile by their own thread; the
/// findings and the live view wait on the review).
const REVIEW_BUDGET: Duration = Duration::from_secs(2);

/// The bytes of a plugin's `/proc/<pid>/environ` read, at most, when the
/// kernel's copy was cut before its `CNI_*` variables.
const ENVIRON_MAX: u64 = 64 * 1024;

/// A process an event named: when it started and its pod.
#[derive(Clone, Debug)]
struct NamedProcess {
    start: Option<ProcessStart>,
    pod: Option<PodUid>,
    order: u64,
}

/// The processes named, by pid, each with its start: a pid named again
/// by another process (its start differs) is that other process.
#[derive(Debug, Default)]
struct Named {
    by_pid: BTreeMap<u32, NamedProcess>,
    order: u64,
}

impl Named {
    fn insert(&mut self, pid: u32, start: Option<ProcessStart>, pod: Option<PodUid>) {
        if !self.by_pid.contains_key(&pid) && self.by_pid.len() >= NAMED_MAX {
            let oldest = self.by_pid.iter().min_by_key(|(_, n)| n.order).map(|(pid, _)| *pid);
            oldest.map(|pid| self.by_pid.remove(&pid));
        }
        self.order += 1;
        self.by_pid.insert(pid, NamedProcess { start, pod, order: self.order });
    }

    /// Process `pid` as named, if `start` is its start (either unknown:
    /// taken as the same, the pid being all there is to go by).
    fn get(&self, pid: u32, start: Option<ProcessStart>) -> Option<&NamedProcess> {
        self.by_pid.get(&pid).filter(|n| same_start(n.start, start))
    }

    fn remove(&mut self, pid: u32, start: Option<ProcessStart>) -> Option<NamedProcess> {
        self.get(pid, start)?;
        self.by_pid.remove(&pid)
    }
}

fn same_start(a: Option<ProcessStart>, b: Option<ProcessStart>) -> bool {
    match (a, b) {
        (Some(a), Some(b)) => a == b,
        _ => true,
    }
}

/// The node's plugin places and files, read again when a place changes.
pub(super) struct Plugins {
    places: PluginPlaces,
    files: PluginFiles,
}

impl Pipeline {
    pub(super) fn new(
        printer: Box<dyn Printer>,
        identifier: Identifier,
        filter: PodFilter,
        book: Option<LatencyBook>,
        diagnoser: Diagnoser,
        recorder: Option<Recorder<File>>,
        api: Option<ApiJoin>,
    ) -> Pipeline {
        let mut book = book;
        if let Some(book) = book.as_mut() {
            // The pods named are followed from the first call.
            let started = book.started;
            book.follow(filter.pods(), [], started);
        }
        Pipeline {
            out: Out::stdout(),
            printer,
            identifier,
            filter,
            book,
            names: SeriesNames::default(),
            diagnoser,
            counted: Vec::new(),
            recorder,
            api,
            events: None,
            named: Named::default(),
            plugins: None,
            provenance: Provenance::default(),
            node_mntns: None,
        }
    }

    /// The node's CNI plugin files, told to the kernel's exec program;
    /// `node_mntns` the node's mount namespace link. What could not be
    /// read or kept is said.
    pub(super) fn with_plugins(&mut self, tracer: &mut Tracer, places: PluginPlaces, node: &Node) {
        for unreadable in &places.unreadable {
            self.say(&format!("cannot read the CNI plugin directories of {unreadable}: the defaults are used"));
        }
        let files = PluginFiles::scan(node, &places);
        let left_out = files.left_out + self.tell_plugin_files(tracer, &files);
        if left_out > 0 {
            self.say(&format!(
                "{left_out} files of the CNI plugin directories left out (too many): their execs go unseen"
            ));
        }
        self.node_mntns = std::fs::read_link(node.node_proc_file("ns/mnt")).ok().map(|l| l.into_os_string().into_vec());
        self.plugins = Some(Plugins { places, files });
    }

    /// Reads the plugin places again if one changed (a plugin installed,
    /// replaced or removed), and tells the kernel.
    pub(super) fn refresh_plugins(&mut self, tracer: &mut Tracer, node: &Node) {
        let Some(plugins) = self.plugins.as_mut() else { return };
        if !plugins.files.stale(node) {
            return;
        }
        let files = PluginFiles::scan(node, &plugins.places);
        self.tell_plugin_files(tracer, &files);
        if let Some(plugins) = self.plugins.as_mut() {
            plugins.files = files;
        }
    }

    /// Tells the exec program the plugin files; the files left out.
    fn tell_plugin_files(&mut self, tracer: &mut Tracer, files: &PluginFiles) -> usize {
        match tracer.set_plugin_files(files.ids()) {
            Ok(left_out) => left_out,
            Err(e) => {
                self.say(&format!("cannot tell the kernel the CNI plugin files ({e:#}): their execs may go unseen"));
                0
            }
        }
    }

    /// Lifecycle records set aside as untrusted, by reason.
    pub(super) fn lifecycle_dropped(&self) -> BTreeMap<String, u64> {
        self.provenance.dropped_counts()
    }

    /// `totals` (the node's, from the kernel) with, under `--pod`, the
    /// calls of the pods followed: their series in the book, which a run
    /// with `--pod` always keeps, each call given to its pod as the
    /// histograms give it.
    pub(super) fn with_pods_calls(&self, mut totals: RunTotals) -> RunTotals {
        if !self.filter.is_whole_node() {
            totals.pods_calls = Some(self.book.as_ref().map(pods_calls).unwrap_or_default());
        }
        totals
    }

    /// A message for the user, where the printer says them.
    pub(super) fn say(&mut self, message: &str) {
        self.printer.say(message);
    }

    /// One record from the kernel, of either ring.
    pub(super) fn take(&mut self, received: Received) -> io::Result<()> {
        match received {
            Received::Call(decoded) => self.take_call(decoded),
            Received::Lifecycle(decoded) => {
                match decoded {
                    Ok(event) => self.take_lifecycle(event),
                    Err(e) => self.say(&format!("skipped a lifecycle record: {e}")),
                }
                Ok(())
            }
        }
    }

    /// Who a lifecycle event is about, when it is about a pod followed:
    /// decided on what the kernel proved (cgroups, start times, the file
    /// exec'd), never on what a workload says of itself. An exec is a
    /// pod's only when it is the node's runtime at work ([`Provenance`]);
    /// it may have its CNI variables filled from `/proc` here.
    fn identify_lifecycle(&mut self, event: &mut LifecycleEvent) -> Option<LifecycleIdentity> {
        let cgroups = KernelCgroups { v2: event.cgroup_id, v1: event.v1_cgroup_id, v1_hierarchy: event.v1_hierarchy };
        let (mut runner, mut target_start) = (None, None);
        let pod_uid;
        match &mut event.what {
            Lifecycle::Exec { file, cni, env_cut, .. } => {
                let plugin =
                    self.plugins.as_ref().and_then(|p| p.files.get(file)).map(|p| exe_name(p.as_os_str().as_bytes()));
                let facts = ExecFacts {
                    pid: event.pid,
                    start: event.start,
                    ppid: event.ppid,
                    parent_start: event.parent_start,
                    file: *file,
                    pod_of_cgroup: self.identifier.pod_of_caller(event.pid, cgroups),
                };
                let proc_root = self.identifier.proc_root().to_path_buf();
                let (plugins, node_mntns) = (self.plugins.as_ref(), self.node_mntns.as_deref());
                let parent = || parent_facts(&proc_root, event.ppid, node_mntns, plugins);
                let trusted = self.provenance.judge(&facts, plugin.as_deref(), parent).ok()?;
                if *env_cut && cni.as_ref().is_none_or(|c| c.pod_uid.is_none()) {
                    // The variables past the kernel's cut, while the plugin lives.
                    if let Some(more) = environ_of(&proc_root, event.pid, event.start) {
                        *cni = CniRun::from_env(&more).or(cni.take());
                    }
                }
                let Some(run) = cni.as_ref() else {
                    self.provenance.count(&Dropped::EnvironmentUnknown);
                    return None;
                };
                pod_uid = run.pod_uid.clone();
                runner = Some(trusted.runner().to_string());
            }
            // The target's pod: as an earlier signal named it (a SIGKILL's
            // target is gone from /proc by the time its record is read),
            // else from its cgroups; its start from /proc, or as named.
            Lifecycle::Signal(sent) => {
                let proc_root = self.identifier.proc_root().to_path_buf();
                let start = process_start(&proc_root, sent.target_pid);
                target_start = start;
                pod_uid = match self.named.get(sent.target_pid, start) {
                    Some(named) => {
                        target_start = named.start.or(start);
                        named.pod.clone()
                    }
                    None if start.is_some() => self.identifier.pod_of_process(sent.target_pid),
                    None => None,
                };
            }
            Lifecycle::Exit { .. } => {
                let named = self.named.remove(event.pid, event.start)?;
                pod_uid = named.pod;
            }
        };
        // A signal or an exit is its target's: one for no pod followed (most
        // of a node's) is dropped before its sender is read from /proc.
        if !self.follows(pod_uid.as_ref()) {
            return None;
        }
        let mut actor = self.identifier.identify_task(event.pid, &event.comm, event.ppid, cgroups).actor;
        if let Some(runner) = &runner {
            // Who ran it by its executable: the comm is the workload's.
            actor.parent = runner.clone();
            actor.description = format!("{} (child of {runner})", actor.comm);
        }
        let mut identity = LifecycleIdentity::of(pod_uid, actor);
        if let Lifecycle::Signal(_) = event.what {
            identity.sender_pod = self.identifier.pod_of_caller(event.pid, cgroups).flatten();
        }
        identity.target_start = target_start;
        identity.runner = runner;
        Some(identity)
    }

    /// Whether the lifecycle of processes of `pod` is followed. A CNI run
    /// for no pod (a runtime's own test, `cnitool`) and a signal to a
    /// process in no pod are not a pod's teardown.
    fn follows(&self, pod: Option<&PodUid>) -> bool {
        pod.is_some_and(|uid| self.filter.is_whole_node() || self.filter.pods().any(|p| p == uid))
    }

    /// One lifecycle event: identified, filtered, seen by the detectors, recorded.
    fn take_lifecycle(&mut self, mut event: LifecycleEvent) {
        // An exit of a process nothing named before is none of ours.
        if matches!(event.what, Lifecycle::Exit { .. }) && self.named.get(event.pid, event.start).is_none() {
            return;
        }
        if let Lifecycle::Exit { .. } = event.what {
            self.provenance.ended(event.pid, event.start);
        }
        let Some(identity) = self.identify_lifecycle(&mut event) else { return };
        let named = match &event.what {
            Lifecycle::Exec { .. } => Some((event.pid, event.start)),
            Lifecycle::Signal(sent) => Some((sent.target_pid, identity.target_start)),
            Lifecycle::Exit { .. } => None,
        };
        if let Some((pid, start)) = named {
            self.named.insert(pid, start, identity.pod_uid.clone());
        }
        self.diagnoser.lifecycle(&event, &identity);
        let stopped = self.recorder.as_mut().and_then(|r| r.add_lifecycle(&event, &identity).err());
        if let Some(e) = stopped {
            self.say(&e.to_string());
        }
    }

    /// One call from the kernel.
    fn take_call(&mut self, decoded: Result<CallEvent, DecodeError>) -> io::Result<()> {
        let event = match decoded {
            Ok(event) => event,
            // Counted in the totals; said here so it is never silent.
            Err(e) => {
                self.say(&format!("skipped a record: {e}"));
                return Ok(());
            }
        };
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
            self.say(&e.to_string());
        }
        self.printer.call(&mut self.out, &event, &identity)
    }

    /// Takes the records waiting in the ring, for `budget` at most: a
    /// storm can write them as fast as they are taken, and a drain that
    /// waits for the ring to empty would then never end (nor would the
    /// loop see a signal, nor a stop end). Whether the ring was emptied;
    /// a record left is counted in the kernel's totals all the same.
    pub(super) fn drain(&mut self, tracer: &mut Tracer, budget: Duration) -> io::Result<bool> {
        let mut take = for_at_most(budget, |e| self.take(e));
        finished(tracer.drain(&mut take))
    }

    /// Reads what the kernel counted since last time into the latency book
    /// (exact, whatever was streamed). Done even without a book: reading
    /// is what frees the series of exited processes in the kernel.
    pub(super) fn harvest(&mut self, tracer: &mut Tracer, budget: Duration) {
        // Records the kernel sent without waking us wait in the ring: their
        // paths name the pods the counts below go to, so they come first.
        // A failed write shows again at the next batch.
        let _ = self.drain(tracer, budget);
        let deltas = tracer.series_deltas();
        let counts: Vec<CountedCalls> = deltas
            .iter()
            .filter_map(|d| {
                d.caller.map(|(pid, _)| CountedCalls { pid, syscall: d.syscall, errno: d.errno, count: d.count })
            })
            .collect();
        // Handed to the diagnosis at the next review, with it in a record.
        self.counted.extend(counts);
        let Some(book) = self.book.as_mut() else { return };
        // Calls counted without their process can only be the node's.
        let orphans = self.filter.is_whole_node().then_some(Attribution { role: Role::Other, pod: None });
        self.names.apply(deltas, book, SystemTime::now(), process_name(&mut self.identifier, &self.filter), orphans);
        // Pods past the caps, or pods that do not exist: said once each.
        if let Some(note) = book.take_overflow_note() {
            self.printer.say(&note);
        }
    }

    /// The run's last harvest: once more, for the records of the calls
    /// the one before counted before they came, then what no record named
    /// goes to its process's latest name, so the book holds every call.
    pub(super) fn last_harvest(&mut self, tracer: &mut Tracer, budget: Duration) {
        self.harvest(tracer, budget);
        self.harvest(tracer, budget);
        let Some(book) = self.book.as_mut() else { return };
        self.names.settle(book, SystemTime::now(), process_name(&mut self.identifier, &self.filter));
    }

    /// The node's indexes the identities come from, read where they changed.
    pub(super) fn refresh_identities(&mut self) {
        self.identifier.refresh();
    }

    /// Whether a detector asks for a review before the next tick: a call
    /// came whose cause the node's state proves at once.
    pub(super) fn review_soon(&self) -> bool {
        self.diagnoser.wants_review()
    }

    /// One diagnosis review at `now`; recorded, questions to the node and
    /// all, when recording. `closing`: the run's last.
    pub(super) fn review(&mut self, node: &mut RealNode, in_flight: &[CallInFlight], closing: bool) -> Vec<Report> {
        let now = SystemTime::now();
        // One budget for all of this review's reads of the node.
        node.look_within(REVIEW_BUDGET);
        for message in self.api.as_ref().map(ApiJoin::messages).unwrap_or_default() {
            self.printer.say(&message);
        }
        for message in self.events.as_ref().map(EventSink::messages).unwrap_or_default() {
            self.printer.say(&message);
        }
        let counted = std::mem::take(&mut self.counted);
        if closing {
            self.diagnoser.closing();
        }
        self.diagnoser.counted(&counted);
        let grace_ends = self.api.as_ref().map(ApiJoin::grace_ends).unwrap_or_default();
        self.diagnoser.grace_ends(&grace_ends);
        let reports = match self.recorder.as_mut() {
            None => self.diagnoser.review(&mut Review { now, in_flight, node }),
            Some(recorder) => {
                let mut recording = RecordingNode::new(node);
                let reports = self.diagnoser.review(&mut Review { now, in_flight, node: &mut recording });
                recorder.grace_ends(&grace_ends);
                if let Err(e) = recorder.add_review(now, in_flight, &counted, recording.into_asked(), &reports, closing)
                {
                    self.printer.say(&e.to_string());
                }
                reports
            }
        };
        self.follow_pods(now);
        reports
    }

    /// The pods the book keeps series of their own for: those named, and
    /// those with an active finding (see [`LatencyBook::follow`]).
    fn follow_pods(&mut self, now: SystemTime) {
        let Some(book) = self.book.as_mut() else { return };
        let findings = self.diagnoser.findings();
        let stuck =
            findings.iter().filter(|f| f.status == Status::Active).flat_map(|f| f.pod_uid.iter().chain(&f.pods));
        book.follow(self.filter.pods(), stuck, now);
    }

    /// Calls in flight, identified and filtered like completed ones.
    pub(super) fn in_flight(&mut self, flights: Vec<Flight>) -> Vec<CallInFlight> {
        let mut calls = Vec::new();
        for flight in flights {
            let identity = self.identifier.identify_flight(&flight);
            if !self.filter.admits(&identity) {
                continue;
            }
            calls.push(CallInFlight {
                flight,
                path: identity.abs_path.ok(),
                pod_uid: identity.pod_uid,
                actor: identity.actor,
            });
        }
        calls
    }

    /// What a review found, printed and flushed.
    pub(super) fn tell(&mut self, reports: &[Report]) -> io::Result<()> {
        if let Some(events) = &self.events {
            events.offer(reports);
        }
        self.printer.findings(&mut self.out, reports)?;
        self.out.flush()
    }

    /// Shows the run as it stands, to a printer that shows it whole.
    pub(super) fn show(&mut self, in_flight: &[CallInFlight], totals: &RunTotals) {
        let Some(book) = self.book.as_ref() else { return };
        let findings = self.diagnoser.findings();
        self.printer.show(&Moment { now: SystemTime::now(), findings: &findings, book, in_flight, totals });
    }

    /// Closes the record with what was never told and the totals, and says
    /// where it is.
    pub(super) fn finish_record(&mut self, untold: &[Report], totals: &RunTotals) {
        let Some(recorder) = self.recorder.take() else { return };
        let name = recorder.name().to_string();
        match recorder.finish(SystemTime::now(), untold, Some(totals)) {
            Ok(saved) if saved.complete => {
                self.say(&format!(
                    "recorded {} entries to {name} (podstuck replay {name} diagnoses them again)",
                    saved.entries
                ));
            }
            Ok(_) => {}
            Err(e) => stderr_line(format_args!("podstuck: {e}")),
        }
    }
}

/// What a drain made to stop early is told: not an error, "enough for now".
#[derive(Debug)]
struct Enough;

impl std::fmt::Display for Enough {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("enough records for now")
    }
}

impl std::error::Error for Enough {}

/// `take`, made to say [`Enough`] once `budget` has passed since its first
/// record, so that a drain ends with records left in the ring. The record
/// it was handed is taken first.
pub(super) fn for_at_most<F>(budget: Duration, mut take: F) -> impl FnMut(Received) -> io::Result<()>
where
    F: FnMut(Received) -> io::Result<()>,
{
    let mut first: Option<Instant> = None;
    move |record| {
        take(record)?;
        if first.get_or_insert_with(Instant::now).elapsed() >= budget {
            return Err(io::Error::other(Enough));
        }
        Ok(())
    }
}

/// A drain's end through [`for_at_most`]: whether the ring was emptied
/// (false: the budget ran out first), or the error that stopped it.
pub(super) fn finished(drained: io::Result<()>) -> io::Result<bool> {
    match drained {
        Ok(()) => Ok(true),
        Err(e) if e.get_ref().is_some_and(|inner| inner.is::<Enough>()) => Ok(false),
        Err(e) => Err(e),
    }
}

/// What `/proc` says of an exec's parent, for [`Provenance`]: its start,
/// its executable, whether it lives in the node's mount namespace, and
/// whether its executable is one of the node's plugin files.
fn parent_facts(proc_root: &Path, ppid: u32, node_mntns: Option<&[u8]>, plugins: Option<&Plugins>) -> ParentFacts {
    let entry = proc_root.join(ppid.to_string());
    let start = process_start(proc_root, ppid);
    let exe = std::fs::read_link(entry.join("exe")).ok().map(|p| p.into_os_string().into_vec());
    let mntns = std::fs::read_link(entry.join("ns/mnt")).ok().map(|l| l.into_os_string().into_vec());
    let in_node_namespace = mntns.is_some() && mntns.as_deref() == node_mntns;
    let plugin_file = plugins.and_then(|p| p.files.file_of_process(proc_root, ppid));
    // Read once more: a parent that exited and whose pid was taken while
    // it was read is another process, whatever the reads said.
    let start = start.filter(|s| process_start(proc_root, ppid) == Some(*s));
    ParentFacts { start, exe, in_node_namespace, plugin_file }
}

/// A live process's whole environment, if it is still the process that
/// started at `start`: what a plugin's kernel copy cut off.
fn environ_of(proc_root: &Path, pid: u32, start: Option<ProcessStart>) -> Option<Vec<u8>> {
    use std::io::Read;
    let start = start?;
    let file = File::open(proc_root.join(pid.to_string()).join("environ")).ok()?;
    let mut env = Vec::new();
    file.take(ENVIRON_MAX).read_to_end(&mut env).ok()?;
    (process_start(proc_root, pid) == Some(start)).then_some(env)
}

/// The calls of every pod's series in `book`, by syscall. Under `--pod`
/// the book holds the followed pods' series alone (the filter admits no
/// other call), so this is their calls.
fn pods_calls(book: &LatencyBook) -> BTreeMap<Syscall, u64> {
    let mut calls = BTreeMap::new();
    for (key, series) in book.series() {
        if key.pod.is_some() {
            *calls.entry(key.syscall).or_default() += series.count;
        }
    }
    calls
}

/// Who a process is when no record of its names it: itself, as the run
/// follows it or not.
fn process_name<'a>(
    identifier: &'a mut Identifier,
    filter: &'a PodFilter,
) -> impl FnMut(u32, u64) -> Option<Attribution> + 'a {
    move |pid, cgroup_id| {
        let identity = identifier.identify_process(pid, cgroup_id);
        filter.admits(&identity).then_some(Attribution { role: identity.actor.role, pod: identity.pod_uid })
    }
}

#[cfg(test)]
mod pods_calls_tests {
    use super::*;
    use crate::latency::tests::{event, identity};

    #[test]
    fn the_pods_calls_are_their_series_and_not_the_nodes() {
        const POD: &str = "1b2c3d4e-0000-4000-8000-00000000000a";
        let mut book = LatencyBook::new(SystemTime::now());
        for _ in 0..3 {
            book.record(&event(Syscall::Unlinkat, 0, 1000), &identity(Role::Runtime, Some(POD)));
        }
        book.record(&event(Syscall::Rmdir, -16, 1000), &identity(Role::Kubelet, Some(POD)));
        // A node process's call, had one been kept, is not the pod's.
        book.record(&event(Syscall::Unlinkat, 0, 1000), &identity(Role::Other, None));
        assert_eq!(pods_calls(&book), BTreeMap::from([(Syscall::Unlinkat, 3), (Syscall::Rmdir, 1)]));
        assert_eq!(pods_calls(&LatencyBook::new(SystemTime::now())), BTreeMap::new());
    }
}
