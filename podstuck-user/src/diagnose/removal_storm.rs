//! P2 `removal-storm`: one actor (dockerd, containerd, kubelet) removing a
//! huge tree entry by entry (a docker volume with millions of empty dirs),
//! for a long time, while everything else waits on the same store.
//!
//! Signature: one process issuing removals at a high rate under one prefix
//! for seconds. Counted per process, with the prefix narrowed to what all
//! its calls share; the directory is then measured to estimate how many
//! entries are left and how long that takes at the current rate. An
//! `rm -rf` of a few thousand files that ends in a second is not a storm.
//!
//! The tree is the subtree of that process's calls: it may widen a level
//! at a time while the removal climbs back up (RemoveAll ends with the
//! tree's root), but removals elsewhere by the same process (dockerd
//! removing a container meanwhile) are counted apart, not in the tree. The
//! count is the kernel's (every call of the process, streamed or not) less
//! what was seen elsewhere, so it is exact whatever the ring buffer kept.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;

use super::shell::kill_if_same;
use super::track::RECHECK;
use super::{
    human_duration, removes, shown, Confidence, CountedCalls, Detector, Finding, FindingActor, Kind, Review, Severity,
    Status,
};
use crate::event::{CallEvent, ProcessStart};
use crate::identify::path_proof::PathProof;
use crate::identify::pod::PodUid;
use crate::identify::Identity;
use crate::inspect::mounts::is_at_or_below;
use crate::inspect::{EntryEstimate, NodeInspector, Probe, Unreadable};
use crate::words::latency_in_microseconds;
use podstuck_common::Syscall;

/// A storm has at least this many calls...
const STORM_CALLS: u64 = 20_000;
/// ...over at least this long...
const STORM_LASTS: Duration = Duration::from_secs(2);
/// ...at no less than this mean rate per second: routine deletions
/// trickle far below it.
const STORM_RATE: f64 = 1_000.0;
/// A slower storm (slow storage, or a slow node: an arm64 guest under load
/// removes the demo's volume at 600 a second) keeps its pods waiting
/// longer, not less: one once it lasts this long, with these many calls at
/// this mean rate. A trickle (log rotation, small layers) stays below it.
const SLOW_STORM: (Duration, u64, f64) = (Duration::from_secs(10), 10_000, 250.0);
/// A gap this long between two calls ends a storm.
const STORM_PAUSE: Duration = Duration::from_secs(5);
/// Processes followed at once; the stalest go first.
const ACTORS_KEPT: usize = 64;
/// Latency is kept only for processes past this many calls.
const LATENCY_FROM: u64 = 1_000;
/// Seconds of per-second counts kept for the current rate.
const RATE_WINDOW: usize = 3;
/// Other trees a process removes meanwhile that are followed apart.
const OTHER_TREES_KEPT: usize = 8;
/// A tree of this many calls is settled: it widens no more than a level
/// at a time. Before, its first paths are leaves anywhere in it.
const TREE_SETTLED: u64 = 1_000;
/// How long the count of a storm's tree may take in the review that first
/// tells it (a count cut short says "at least" what it counted).
const FIRST_COUNT_MS: u32 = 10;

struct Storm {
    actor: FindingActor,
    pod: Option<PodUid>,
    first: SystemTime,
    last: SystemTime,
    calls: u64,
    failed: u64,
    /// Failed with EISDIR: unlink tried on a directory (Go's RemoveAll).
    eisdir: u64,
    /// What every path removed shares, by whole components.
    prefix: Vec<u8>,
    /// Calls streamed under other trees of the same process: (prefix, calls).
    others: Vec<(Vec<u8>, u64)>,
    /// Removal calls the kernel counted for the process since the storm
    /// began: all of them, failed ones, EISDIR ones.
    kernel: KernelCounts,
    /// (unix second, calls in it), newest last.
    per_second: VecDeque<(u64, u64)>,
    latency: Option<Histogram<u64>>,
    checked: Option<SystemTime>,
    estimate: Option<Probe<EntryEstimate>>,
    reported: bool,
    /// The caller's mount namespace, and how far its paths speak for the
    /// node: a runtime's own namespace is read below its member's root.
    mntns: u32,
    proof: PathProof,
    /// When the remover started, read at its first look: what its
    /// pause and resume are checked against when pasted.
    start: Option<ProcessStart>,
}

/// Removal calls of a process the kernel counted: all, failed, EISDIR.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KernelCounts {
    pub calls: u64,
    pub failed: u64,
    pub eisdir: u64,
}

fn depth(path: &[u8]) -> usize {
    path.split(|b| *b == b'/').filter(|c| !c.is_empty()).count()
}

/// Whether a removal of `path` belongs to the settled tree under
/// `prefix`: below it, one of its parents (the climb back up), or a sibling
/// a level up (the tree was first seen from one of its subdirectories).
fn joins(prefix: &[u8], path: &[u8]) -> bool {
    is_at_or_below(path, prefix)
        || is_at_or_below(prefix, path)
        || depth(&common_dir(prefix, path)) + 1 >= depth(prefix)
}

/// Whether two paths removed by one process elsewhere than its storm are
/// one job: they share more than the store's top directories.
fn same_job(prefix: &[u8], path: &[u8]) -> bool {
    depth(&common_dir(prefix, path)) >= 3
}

/// The longest common prefix of two absolute paths, by whole components.
fn common_dir(a: &[u8], b: &[u8]) -> Vec<u8> {
    let same = a.iter().zip(b).take_while(|(x, y)| x == y).count();
    let at_boundary = |p: &[u8], n: usize| n == p.len() || p[n] == b'/';
    if at_boundary(a, same) && at_boundary(b, same) {
        return a[..same].to_vec();
    }
    let cut = a[..same].iter().rposition(|c| *c == b'/').unwrap_or(0);
    if cut == 0 {
        b"/".to_vec()
    } else {
        a[..cut].to_vec()
    }
}

impl Storm {
    fn new(event: &CallEvent, identity: &Identity, path: &[u8]) -> Storm {
        Storm {
            actor: FindingActor::of(event.pid, &identity.actor),
            pod: identity.pod_uid.clone(),
            first: event.time,
            last: event.time,
            calls: 0,
            failed: 0,
            eisdir: 0,
            prefix: path.to_vec(),
            others: Vec::new(),
            kernel: KernelCounts::default(),
            per_second: VecDeque::new(),
            latency: None,
            checked: None,
            estimate: None,
            reported: false,
            mntns: event.mntns,
            proof: identity.proof.clone(),
            start: None,
        }
    }

    /// Reads what is left of its tree, where its paths are, and once when
    /// its process started (read while it is still removing: it is the
    /// process that made the calls a moment ago).
    fn look(&mut self, node: &mut dyn NodeInspector, pid: u32) {
        // The first count is cut short: it is read in the review that tells
        // the storm, and a whole count of a tree being removed (its
        // directories locked by the remover) held that review, and every
        // cause proved beside it, some 40 ms. The rechecks count it whole.
        let within_ms = if self.reported { 0 } else { FIRST_COUNT_MS };
        if self.start.is_none() {
            self.start = node.process(pid, 0).ok().flatten().map(|p| ProcessStart(p.start));
        }
        let root = match &self.proof {
            PathProof::RuntimeNamespace { .. } => node.mount_namespace(u64::from(self.mntns)).map(|ns| ns.member),
            _ => Ok(crate::inspect::NODE_ROOT),
        };
        self.estimate = Some(root.and_then(|root| estimate(node, &self.prefix, root, within_ms)));
    }

    /// A removal by the same process in another tree: counted apart. A
    /// tree seen elsewhere that outgrows this one before it is told was
    /// the storm all along (the first calls seen were of a side job).
    fn elsewhere(&mut self, path: &[u8], calls: u64) {
        let at = match self.others.iter().position(|(p, _)| same_job(p, path)) {
            Some(i) => i,
            None => {
                if self.others.len() >= OTHER_TREES_KEPT {
                    let smallest =
                        self.others.iter().enumerate().min_by_key(|(_, (_, n))| *n).map(|(i, _)| i).unwrap_or(0);
                    self.others.swap_remove(smallest);
                }
                self.others.push((path.to_vec(), 0));
                self.others.len() - 1
            }
        };
        let (prefix, n) = &mut self.others[at];
        *n += calls;
        if !is_at_or_below(prefix, path) {
            *prefix = common_dir(prefix, path);
        }
        if !self.reported && *n > self.calls {
            let (prefix, n) = self.others.swap_remove(at);
            self.others.push((std::mem::replace(&mut self.prefix, prefix), self.calls));
            self.calls = n;
            self.failed = 0;
            self.eisdir = 0;
            self.per_second.clear();
        }
    }

    fn duration(&self) -> Duration {
        self.last.duration_since(self.first).unwrap_or_default()
    }

    fn mean_rate(&self) -> f64 {
        self.calls as f64 / self.duration().as_secs_f64().max(0.001)
    }

    /// Calls per second over the last complete seconds before `now`.
    fn current_rate(&self, now: SystemTime) -> f64 {
        let now_s = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        let window: Vec<&(u64, u64)> =
            self.per_second.iter().filter(|(s, _)| *s + RATE_WINDOW as u64 >= now_s && *s < now_s).collect();
        if window.is_empty() {
            // Younger than a second, or the calls are all in this second.
            return self.mean_rate();
        }
        let seconds = (now_s - window[0].0) as f64;
        window.iter().map(|(_, n)| *n).sum::<u64>() as f64 / seconds.max(1.0)
    }

    /// Calls in the tree: the kernel's count less the calls seen
    /// elsewhere, or what was streamed when that is more (the kernel's
    /// count is read at reviews, records arrive all the time).
    fn tree_counts(&self) -> KernelCounts {
        let elsewhere: u64 = self.others.iter().map(|(_, n)| n).sum();
        KernelCounts {
            calls: self.calls.max(self.kernel.calls.saturating_sub(elsewhere)),
            failed: self.failed.max(self.kernel.failed.saturating_sub(elsewhere)),
            eisdir: self.eisdir.max(self.kernel.eisdir),
        }
    }

    fn is_storm(&self) -> bool {
        [(STORM_LASTS, STORM_CALLS, STORM_RATE), SLOW_STORM]
            .iter()
            .any(|(lasts, calls, rate)| self.calls >= *calls && self.duration() >= *lasts && self.mean_rate() >= *rate)
    }
}

pub struct RemovalStorm {
    node_name: String,
    by_pid: HashMap<u32, Storm>,
    /// The newest call time seen, and whether any call came since the last
    /// review: under a storm user space may run seconds behind the kernel,
    /// so "now" is the time of the calls being read, not the wall clock.
    latest: Option<SystemTime>,
    fresh: bool,
    /// A storm became one with the record just read and is not told yet:
    /// its proof is its count and rate, so its answer need not wait for
    /// the next tick.
    newly_proven: bool,
}

impl RemovalStorm {
    pub fn new(node_name: String) -> RemovalStorm {
        RemovalStorm { node_name, by_pid: HashMap::new(), latest: None, fresh: false, newly_proven: false }
    }

    fn finding(&self, s: &Storm, now: SystemTime, ended: bool) -> Finding {
        self.tell(s, &Self::judge(s, now, ended))
    }

    /// How the storm stands: its counts, rates and latency, whether Go's
    /// RemoveAll explains its failures, and what is left of its tree.
    fn judge(s: &Storm, now: SystemTime, ended: bool) -> Verdict {
        let counts = s.tree_counts();
        let left = match &s.estimate {
            None => Left::NotCounted,
            Some(Err(why)) => Left::Unread(why.clone()),
            Some(Ok(e)) if e.entries == 0 && e.method == GONE => Left::Gone,
            Some(Ok(e)) => Left::Entries(e.clone()),
        };
        let progress = match (ended, &left) {
            (_, Left::Gone) => Progress::Done,
            (true, _) => Progress::Stopped,
            (false, _) => Progress::Going { rate: s.current_rate(now) },
        };
        Verdict {
            counts,
            mean_rate: counts.calls as f64 / s.duration().as_secs_f64().max(0.001),
            latency: s.latency.as_ref().map(|h| (h.value_at_quantile(0.5), h.value_at_quantile(0.99))),
            // Go's os.RemoveAll unlinks first and only rmdirs what answers
            // EISDIR: on a tree of directories half the calls "fail" by design.
            remove_all: counts.eisdir > 0 && counts.eisdir * 10 >= counts.calls * 3,
            progress,
            left,
        }
    }

    /// The verdict in words: summary, evidence, details, fix and advice.
    fn tell(&self, s: &Storm, v: &Verdict) -> Finding {
        let key = format!("{}:{}", s.actor.pid, s.actor.comm);
        let counts = v.counts;
        let mut f = Finding::new(Kind::RemovalStorm, &key, Severity::Warning, s.first);
        f.last_seen = s.last;
        f.count = counts.calls;
        f.actor = Some(s.actor.clone());
        f.pod_uid = s.pod.clone();
        f.pods = s.pod.iter().cloned().collect();
        f.syscall = Some("unlinkat");
        f.paths = vec![s.prefix.clone()];
        f.confidence = v.confidence();
        let rate = v.rate();
        let (p50, p99) = v.latency.unwrap_or((0, 0));
        let took = human_duration(s.duration());
        let mean = v.mean_rate;
        let failed_words = match counts.eisdir {
            0 => format!("{} failed", counts.failed),
            n if n == counts.failed => format!("{} failed, all with EISDIR", counts.failed),
            n => format!("{} failed, {n} of them with EISDIR", counts.failed),
        };
        f.evidence(
            "trace",
            format!(
                "{} made {} removal calls under {} in {took} ({mean:.0}/s on average, {rate:.0}/s now; {failed_words})",
                s.actor.description,
                counts.calls,
                shown(&s.prefix),
            ),
        );
        let per_entry = if v.remove_all {
            f.evidence(
                "trace",
                format!(
                    "{} of the calls are unlinkat(name, 0) failing with EISDIR, each followed by unlinkat(name, AT_REMOVEDIR): Go's RemoveAll tries unlink first, so it makes two calls per directory; these failures are how it works, not a fault",
                    counts.eisdir
                ),
            );
            " Go's RemoveAll: unlink fails with EISDIR, then rmdir: two calls per directory, half of them failing by design."
        } else {
            ""
        };
        if let Some(others) = (!s.others.is_empty()).then(|| s.others.iter().map(|(_, n)| n).sum::<u64>()) {
            f.evidence("trace", format!("{others} more removal calls by the same process elsewhere, not counted here"));
        }
        if v.latency.is_some() {
            f.evidence(
                "trace",
                format!(
                    "latency per call: p50 {}, p99 {}",
                    latency_in_microseconds(p50, 1),
                    latency_in_microseconds(p99, 1)
                ),
            );
        }
        f.detail("calls", counts.calls);
        f.detail("failed", counts.failed);
        f.detail("failed_eisdir", counts.eisdir);
        f.detail("rate_per_s", rate.round());
        f.detail("mean_rate_per_s", mean.round());
        f.detail("p50_ns", p50);
        f.detail("p99_ns", p99);
        f.detail("prefix", String::from_utf8_lossy(&s.prefix).into_owned());
        let left_words = remaining(&mut f, s, &v.left, rate);
        match v.progress {
            Progress::Going { rate } => {
                f.summary = format!(
                    "{} is removing {} entry by entry: {} calls in {took}, {rate:.0}/s now (p99 {} per call).{left_words}{per_entry} Pods whose teardown needs the same store wait meanwhile.",
                    s.actor.description,
                    shown(&s.prefix),
                    counts.calls,
                    latency_in_microseconds(p99, 0)
                );
            }
            Progress::Stopped | Progress::Done => {
                f.status = Status::Resolved;
                let end = match v.progress {
                    Progress::Done => "it is done: the tree is gone",
                    _ => "it has stopped",
                };
                f.summary = format!(
                    "{} removed {} entry by entry: {} calls in {took} ({mean:.0}/s); {end}.{per_entry}",
                    s.actor.description,
                    shown(&s.prefix),
                    counts.calls,
                );
            }
        }
        f.fix = super::shell::drain(&self.node_name);
        f.advice.push(
            "drain the node so no new pods wait behind the removal, and let it finish; it cannot be sped up safely"
                .into(),
        );
        let pid = s.actor.pid;
        match (kill_if_same("STOP", pid, s.start), kill_if_same("CONT", pid, s.start)) {
            (Some(pause), Some(resume)) => {
                f.advice.push(format!("to pause the remover while you decide: {pause} (resume with {resume})"))
            }
            _ => f.advice.push(format!(
                "to pause the remover while you decide, stop pid {pid} once `ps -p {pid} -o lstart,comm` shows it is still that process (its start could not be read)"
            )),
        }
        f.advice.push(
            "then find who filled it (a container writing millions of small files into a volume) before it comes back"
                .into(),
        );
        f
    }
}

/// What removal-storm decides of a process removing a tree entry by
/// entry, before a word of it is said.
#[derive(Clone, Debug, PartialEq)]
pub struct Verdict {
    /// The kernel's counts of its removals in the tree.
    pub counts: KernelCounts,
    /// Calls a second since it began.
    pub mean_rate: f64,
    /// p50 and p99 of a call, in nanoseconds, where latency was kept.
    pub latency: Option<(u64, u64)>,
    /// Its EISDIR failures are Go's RemoveAll's two calls per directory.
    pub remove_all: bool,
    pub progress: Progress,
    pub left: Left,
}

/// Whether the storm goes on.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Progress {
    /// Still removing, `rate` calls a second now.
    Going { rate: f64 },
    /// No call for a while; the tree is still there, or not read.
    Stopped,
    /// The tree is gone.
    Done,
}

/// What is left of the tree.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Left {
    /// Not counted yet.
    NotCounted,
    /// It could not be counted (why).
    Unread(Unreadable),
    /// It no longer exists.
    Gone,
    /// Entries left, counted or estimated.
    Entries(EntryEstimate),
}

impl Verdict {
    /// Calls a second now: none once it stopped.
    pub fn rate(&self) -> f64 {
        match self.progress {
            Progress::Going { rate } => rate,
            Progress::Stopped | Progress::Done => 0.0,
        }
    }

    /// Confirmed once the tree was read: what is left, or that it is gone.
    pub fn confidence(&self) -> Confidence {
        match self.left {
            Left::Gone | Left::Entries(_) => Confidence::Confirmed,
            Left::NotCounted | Left::Unread(_) => Confidence::Likely,
        }
    }
}

/// What is left of the tree, as evidence and details of `f`; the words
/// the summary ends with (how many entries, how long at `rate`).
fn remaining(f: &mut Finding, s: &Storm, left: &Left, rate: f64) -> String {
    match left {
        Left::Gone => {
            f.evidence("directory", format!("{} is gone", shown(&s.prefix)));
            f.detail("remaining", 0);
            f.detail("remaining_at_least", false);
            f.detail("eta_s", 0);
            String::new()
        }
        Left::Entries(e) => {
            let (bound, how) = match (e.at_least, e.method.as_str()) {
                (true, _) => ("At least ", format!(" ({})", e.method)),
                (false, "counted") => ("", String::new()),
                (false, method) => ("About ", format!(" (estimated from the {method})")),
            };
            f.evidence(
                "directory",
                format!("{}{} entries left under {} ({})", bound.to_lowercase(), e.entries, shown(&s.prefix), e.method),
            );
            f.detail("remaining", e.entries);
            f.detail("remaining_at_least", e.at_least);
            let left = format!(" {bound}{} entries are left{how}", e.entries);
            if rate > 0.0 {
                let eta = e.entries as f64 / rate;
                f.detail("eta_s", eta.round());
                let more = if e.at_least { " or more" } else { "" };
                format!(
                    "{left}: {}{more} at this rate.",
                    human_duration(Duration::try_from_secs_f64(eta).unwrap_or(Duration::MAX))
                )
            } else {
                f.detail("eta_s", serde_json::Value::Null);
                format!("{left}.")
            }
        }
        Left::Unread(why) => {
            f.evidence("directory", format!("entries left under {} not counted: {}", shown(&s.prefix), why.said()));
            f.detail("remaining", serde_json::Value::Null);
            f.detail("eta_s", serde_json::Value::Null);
            String::new()
        }
        Left::NotCounted => String::new(),
    }
}

/// How an estimate says the tree no longer exists.
const GONE: &str = "the directory is gone";

/// How many entries are left under `prefix` below `root`, "gone" when it
/// no longer exists.
fn estimate(node: &mut dyn NodeInspector, prefix: &[u8], root: u32, within_ms: u32) -> Probe<EntryEstimate> {
    match node.remaining_entries(prefix, root, within_ms) {
        Err(e) if e.is_gone() => Ok(EntryEstimate { entries: 0, at_least: false, method: GONE.into() }),
        other => other,
    }
}

impl Detector for RemovalStorm {
    fn counted(&mut self, counts: &[CountedCalls]) {
        for c in counts.iter().filter(|c| c.syscall != Syscall::Umount2) {
            if let Some(storm) = self.by_pid.get_mut(&c.pid) {
                storm.kernel.calls += c.count;
                if c.errno != 0 {
                    storm.kernel.failed += c.count;
                }
                if c.errno as i32 == libc::EISDIR {
                    storm.kernel.eisdir += c.count;
                }
            }
        }
    }

    fn observe(&mut self, event: &CallEvent, identity: &Identity) {
        if !removes(event) {
            return;
        }
        let Ok(path) = &identity.abs_path else { return };
        self.latest = self.latest.max(Some(event.time));
        self.fresh = true;
        if !self.by_pid.contains_key(&event.pid) && self.by_pid.len() >= ACTORS_KEPT {
            if let Some(stalest) =
                self.by_pid.iter().filter(|(_, s)| !s.reported).min_by_key(|(_, s)| s.last).map(|(p, _)| *p)
            {
                self.by_pid.remove(&stalest);
            } else {
                return;
            }
        }
        let storm = self.by_pid.entry(event.pid).or_insert_with(|| Storm::new(event, identity, path));
        if event.time.duration_since(storm.last).unwrap_or_default() > STORM_PAUSE && !storm.reported {
            *storm = Storm::new(event, identity, path);
        }
        // A record stands for the calls of its series the kernel counted
        // since the previous one: a storm is mostly counted, not streamed.
        let calls = event.represents;
        if storm.calls >= TREE_SETTLED && !joins(&storm.prefix, path) {
            storm.elsewhere(path, calls);
            return;
        }
        storm.calls += calls;
        storm.failed += if event.errno().is_some() { calls } else { 0 };
        storm.eisdir += if event.errno() == Some(libc::EISDIR) { calls } else { 0 };
        storm.last = storm.last.max(event.time);
        // The tree's own root goes last (RemoveAll's final rmdir, or its first
        // EISDIR try): it does not widen what is being removed.
        if !is_at_or_below(&storm.prefix, path) {
            storm.prefix = common_dir(&storm.prefix, path);
        }
        if storm.pod.is_none() {
            storm.pod = identity.pod_uid.clone();
        }
        let second = event.time.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs();
        match storm.per_second.back_mut() {
            Some((s, n)) if *s == second => *n += calls,
            _ => {
                if storm.per_second.len() > RATE_WINDOW + 1 {
                    storm.per_second.pop_front();
                }
                storm.per_second.push_back((second, calls));
            }
        }
        // Latency of the calls streamed: a sample of the storm's.
        if storm.calls >= LATENCY_FROM {
            let h = storm
                .latency
                .get_or_insert_with(|| Histogram::new_with_bounds(1, 60_000_000_000, 2).expect("valid bounds"));
            h.saturating_record(event.latency_ns.max(1));
        }
        if !storm.reported && storm.is_storm() {
            self.newly_proven = true;
        }
    }

    fn wants_review(&self) -> bool {
        self.newly_proven
    }

    fn review(&mut self, review: &mut Review<'_>) -> Vec<Finding> {
        // While calls keep coming, time is theirs; when they stop, the clock's.
        let now = match (self.fresh, self.latest) {
            (true, Some(latest)) => latest,
            _ => review.now,
        };
        self.fresh = false;
        self.newly_proven = false;
        let mut out = Vec::new();
        let mut ended = Vec::new();
        let pids: Vec<u32> = self.by_pid.keys().copied().collect();
        for pid in pids {
            let storm = self.by_pid.get_mut(&pid).expect("listed");
            let quiet = now.duration_since(storm.last).unwrap_or_default() > STORM_PAUSE;
            if quiet {
                if storm.reported {
                    // Whether it stopped half-way or finished: one last look.
                    storm.look(review.node, pid);
                    let storm = self.by_pid.get(&pid).expect("listed");
                    out.push(self.finding(storm, now, true));
                }
                ended.push(pid);
                continue;
            }
            if !storm.is_storm() {
                continue;
            }
            let due = storm.checked.is_none_or(|at| now.duration_since(at).unwrap_or_default() >= RECHECK);
            if due {
                storm.checked = Some(now);
                storm.look(review.node, pid);
            }
            storm.reported = true;
            let storm = self.by_pid.get(&pid).expect("listed");
            let finding = self.finding(storm, now, false);
            // The tree is gone: the storm is over, whatever comes next.
            if finding.status == Status::Resolved {
                ended.push(pid);
            }
            out.push(finding);
        }
        for pid in ended {
            self.by_pid.remove(&pid);
        }
        out
    }
}

#[cfg(test)]
mod tests;
