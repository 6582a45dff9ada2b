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
use crate::event::{CallEvent, DecodeError};
use crate::explain::join::ApiJoin;
use crate::identify::actor::Role;
use crate::identify::path_proof::ClaimsSetAside;
use crate::identify::pod::PodUid;
use crate::identify::{Identifier, PluginTable, PodFilter};
use crate::inspect::real_node::RealNode;
use crate::k8s_events::EventSink;
use crate::latency::LatencyBook;
use crate::lifecycle::LifecycleEvent;
use crate::node_access::Node;
use crate::print::{stderr_line, Out, Printer};
use crate::record::{Recorder, RecordingNode};
use crate::run::RunTotals;
use crate::series::{Attribution, SeriesNames};
use crate::view::Moment;
use podstuck_common::{PluginFile, Syscall};
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
    /// The node's CNI plugin files, as the exec program knows them.
    plugins: Option<Plugins>,
    /// Calls whose path was a claim, set aside before the diagnosis.
    claims: ClaimsSetAside,
    /// `--slow-pipeline` (end-to-end tests only): what each call costs on
    /// top of its own work, so a test can make the loop fall behind.
    pub(super) slow_calls: Option<Duration>,
}

/// What one review's reads of the node wait, all together, at most: a
/// review of many hung filesystems must not wait their deadlines one
/// after another (the rings are read meanwhile by their own thread; the
/// findings and the live view wait on the review).
const REVIEW_BUDGET: Duration = Duration::from_secs(2);

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
            plugins: None,
            claims: ClaimsSetAside::default(),
            slow_calls: None,
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
        self.identifier.lifecycle_dropped()
    }

    /// Calls set aside because their path was a claim.
    pub(super) fn claims_set_aside(&self) -> &ClaimsSetAside {
        &self.claims
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

    /// One lifecycle event: identified, filtered, seen by the detectors, recorded.
    fn take_lifecycle(&mut self, mut event: LifecycleEvent) {
        let plugins = self.plugins.as_ref().map(|p| &p.files as &dyn PluginTable);
        let filter = &self.filter;
        let follows = |pod: Option<&PodUid>| follows(filter, pod);
        let Some(identity) = self.identifier.identify_lifecycle(&mut event, plugins, follows) else { return };
        self.diagnoser.lifecycle(&event, &identity);
        let stopped = self.recorder.as_mut().and_then(|r| r.add_lifecycle(&event, &identity).err());
        if let Some(e) = stopped {
            self.say(&e.to_string());
        }
    }

    /// One call from the kernel.
    fn take_call(&mut self, decoded: Result<CallEvent, DecodeError>) -> io::Result<()> {
        if let Some(cost) = self.slow_calls {
            // The test knob's whole point: a loop this slow per call, as an
            // identify stuck on a busy /proc would be.
            std::thread::sleep(cost);
        }
        let event = match decoded {
            Ok(event) => event,
            // Counted in the totals; said here so it is never silent.
            Err(e) => {
                self.say(&format!("skipped a record: {e}"));
                return Ok(());
            }
        };
        let identity = self.identifier.identify(&event);
        // Counted whichever pods are followed: a pod naming another in its
        // paths is worth knowing about in a run that follows the other.
        self.claims.count(&identity.proof, event.errno().is_some(), identity.claimed_pod.is_some());
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

    /// Reads what running CNI plugins write on their stdout while a
    /// detector wants it (a sandbox's DEL is failing), and stops reading
    /// when none does: every write of the node passes the program.
    pub(super) fn follow_plugin_words(&mut self, tracer: &mut Tracer) {
        let wanted = self.diagnoser.wants_plugin_words();
        if wanted == tracer.plugin_words_followed() {
            return;
        }
        if let Err(why) = tracer.follow_plugin_words(wanted) {
            self.say(&format!("what a failing CNI plugin writes is not read on this kernel ({why}): its error is in the runtime's log, as the finding says"));
        }
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
        let shutdowns = self.api.as_ref().map(ApiJoin::shutdowns).unwrap_or_default();
        self.diagnoser.shutdowns(&shutdowns);
        let reports = match self.recorder.as_mut() {
            None => self.diagnoser.review(&mut Review { now, in_flight, node }),
            Some(recorder) => {
                let mut recording = RecordingNode::new(node);
                let reports = self.diagnoser.review(&mut Review { now, in_flight, node: &mut recording });
                recorder.shutdowns(&shutdowns);
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
            let mntns = crate::identify::namespaces::namespace_of(self.identifier.proc_root(), flight.tid).unwrap_or(0);
            calls.push(CallInFlight {
                flight,
                path: identity.abs_path.ok(),
                pod_uid: identity.pod_uid,
                actor: identity.actor,
                mntns,
                proof: identity.proof,
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
/// Whether the lifecycle of processes of `pod` is followed under
/// `filter`. A CNI run for no pod (a runtime's own test, `cnitool`) and a
/// signal to a process in no pod are not a pod's teardown.
fn follows(filter: &PodFilter, pod: Option<&PodUid>) -> bool {
    pod.is_some_and(|uid| filter.is_whole_node() || filter.pods().any(|p| p == uid))
}

/// The node's plugin files, as identify asks of them.
impl PluginTable for PluginFiles {
    fn path_of(&self, file: &PluginFile) -> Option<&Path> {
        self.get(file)
    }

    fn file_of_process(&self, proc_root: &Path, pid: u32) -> Option<PluginFile> {
        PluginFiles::file_of_process(self, proc_root, pid)
    }
}

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
