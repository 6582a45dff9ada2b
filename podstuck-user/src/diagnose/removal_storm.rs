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
mod tests {
    use super::super::fake::*;
    use super::*;
    use podstuck_common::Syscall;

    fn removals(d: &mut RemovalStorm, dir: &str, comm: &str, pid: u32, n: u64, from: f64, per_s: f64) {
        for i in 0..n {
            let at = from + i as f64 / per_s;
            let c = call_by(at, comm, pid, Syscall::Unlinkat, libc::AT_REMOVEDIR as u64, &format!("{dir}/d{i:07}"), 0);
            d.observe(&c.event, &c.identity);
        }
    }

    #[test]
    fn a_sampled_storm_is_counted_by_what_its_records_carry() {
        // 500 records a second, each carrying 20 calls: 10,000 calls/s.
        let dir = "/var/lib/docker/volumes/big/_data";
        let mut d = RemovalStorm::new("node-1".into());
        let mut node = FakeNode::default();
        node.remaining.insert(dir.as_bytes().to_vec(), 150_000);
        for i in 0..2_500u64 {
            let mut c = call_by(
                i as f64 / 500.0,
                "dockerd",
                77,
                Syscall::Unlinkat,
                libc::AT_REMOVEDIR as u64,
                &format!("{dir}/d{i:07}"),
                0,
            );
            c.event.represents = 20;
            d.observe(&c.event, &c.identity);
        }
        let found = run(&mut d, &mut node, &[], 5.0);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].details["calls"], 50_000);
        let rate = found[0].details["rate_per_s"].as_f64().unwrap();
        assert!((9_000.0..=11_000.0).contains(&rate), "{rate}");
    }

    #[test]
    fn the_call_that_makes_a_storm_asks_for_its_review_at_once() {
        let dir = "/var/lib/docker/volumes/big/_data";
        let mut d = RemovalStorm::new("n".into());
        let mut node = FakeNode::default();
        node.remaining.insert(dir.as_bytes().to_vec(), 150_000);
        removals(&mut d, dir, "dockerd", 7, 19_999, 0.0, 5_000.0);
        assert!(!d.wants_review(), "under 20,000 calls: not yet");
        removals(&mut d, dir, "dockerd", 7, 1, 4.0, 5_000.0);
        assert!(d.wants_review(), "the 20,000th call over 2 s proves it");
        let found = run(&mut d, &mut node, &[], 4.0);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(!d.wants_review(), "the review told it");
        removals(&mut d, dir, "dockerd", 7, 100, 4.1, 5_000.0);
        assert!(!d.wants_review(), "a storm told asks for nothing more: the ticks follow it");
        assert_eq!(node.counts_within, vec![FIRST_COUNT_MS], "the review that tells it counts its tree briefly");
        removals(&mut d, dir, "dockerd", 7, 50_000, 4.2, 5_000.0);
        run(&mut d, &mut node, &[], 14.2);
        assert_eq!(node.counts_within, vec![FIRST_COUNT_MS, 0], "its recheck counts it whole");
    }

    #[test]
    fn common_dir_is_by_whole_components() {
        assert_eq!(common_dir(b"/a/bc/d", b"/a/bc/e"), b"/a/bc");
        assert_eq!(common_dir(b"/a/bc", b"/a/bd"), b"/a");
        assert_eq!(common_dir(b"/a/bc", b"/a/bc/x"), b"/a/bc");
        assert_eq!(common_dir(b"/x", b"/y"), b"/");
    }

    #[test]
    fn dockerd_removing_a_volume_of_empty_dirs_is_a_storm_with_an_estimate() {
        let dir = "/var/lib/docker/volumes/big/_data";
        let mut d = RemovalStorm::new("node-1".into());
        let mut node = FakeNode::default();
        node.remaining.insert(dir.as_bytes().to_vec(), 150_000);
        removals(&mut d, dir, "dockerd", 77, 50_000, 0.0, 10_000.0);
        let found = run(&mut d, &mut node, &[], 5.0);
        assert_eq!(found.len(), 1, "{found:?}");
        let f = &found[0];
        assert_eq!(f.kind, Kind::RemovalStorm);
        assert_eq!(f.actor.as_ref().unwrap().comm, "dockerd");
        assert_eq!(f.paths, vec![dir.as_bytes().to_vec()]);
        assert_eq!(f.details["calls"], 50_000);
        assert_eq!(f.details["remaining"], 150_000);
        let rate = f.details["rate_per_s"].as_f64().unwrap();
        assert!((9_000.0..=11_000.0).contains(&rate), "{rate}");
        let eta = f.details["eta_s"].as_f64().unwrap();
        assert!((13.0..=17.0).contains(&eta), "{eta}");
        assert_eq!(f.fix, "kubectl drain --ignore-daemonsets --delete-emptydir-data -- node-1");
        assert!(f.summary.contains("entries are left"), "{}", f.summary);
        // The storm stops: resolved, once.
        let later = run(&mut d, &mut node, &[], 12.0);
        assert_eq!(later.len(), 1);
        assert_eq!(later[0].status, Status::Resolved);
        assert!(run(&mut d, &mut node, &[], 13.0).is_empty());
    }

    #[test]
    fn the_prefix_is_the_tree_removed_not_its_parent() {
        let mut d = RemovalStorm::new("n".into());
        let root = "/var/lib/docker/volumes/v";
        // Go's RemoveAll: unlinkat(root) fails with EISDIR first, the root goes last.
        let first = call_by(0.0, "dockerd", 9, Syscall::Unlinkat, 0, root, -libc::EISDIR);
        d.observe(&first.event, &first.identity);
        removals(&mut d, &format!("{root}/_data"), "dockerd", 9, 30_000, 0.001, 10_000.0);
        let last = call_by(3.1, "dockerd", 9, Syscall::Unlinkat, libc::AT_REMOVEDIR as u64, root, 0);
        d.observe(&last.event, &last.identity);
        let f = &run(&mut d, &mut FakeNode::default(), &[], 3.2)[0];
        assert_eq!(f.paths, vec![root.as_bytes().to_vec()]);
    }

    #[test]
    fn a_collector_running_behind_the_kernel_does_not_end_the_storm() {
        let mut d = RemovalStorm::new("n".into());
        let mut node = FakeNode::default();
        // Calls of the first 3 s read while the wall clock is already at 20 s.
        node.remaining.insert(b"/var/lib/docker/volumes/v/_data".to_vec(), 50_000);
        removals(&mut d, "/var/lib/docker/volumes/v/_data", "dockerd", 4, 30_000, 0.0, 10_000.0);
        let found = run(&mut d, &mut node, &[], 20.0);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].status, Status::Active);
        assert!(found[0].details["rate_per_s"].as_f64().unwrap() > 5_000.0);
        // Nothing more arrives: now it is over.
        assert_eq!(run(&mut d, &mut node, &[], 21.0)[0].status, Status::Resolved);
    }

    #[test]
    fn rm_rf_of_ten_thousand_files_in_a_second_is_not_a_storm() {
        let mut d = RemovalStorm::new("n".into());
        let mut node = FakeNode::default();
        removals(&mut d, "/home/u/build", "rm", 5, 10_000, 0.0, 10_000.0);
        assert!(run(&mut d, &mut node, &[], 1.5).is_empty());
        assert!(run(&mut d, &mut node, &[], 10.0).is_empty());
    }

    #[test]
    fn a_slow_trickle_is_not_a_storm_and_actors_are_counted_apart() {
        let mut d = RemovalStorm::new("n".into());
        let mut node = FakeNode::default();
        // 9k calls over 90 s: long, but 100/s.
        removals(&mut d, "/data/a", "kubelet", 1, 9_000, 0.0, 100.0);
        // Two processes of 9k each at a high rate for under 2 s: neither
        // reaches either count.
        removals(&mut d, "/data/b", "rm", 2, 9_000, 0.0, 5_000.0);
        removals(&mut d, "/data/b", "rm", 3, 9_000, 0.0, 5_000.0);
        assert!(run(&mut d, &mut node, &[], 90.0).is_empty());
    }

    #[test]
    fn a_slow_storm_is_told_once_it_has_gone_on_ten_seconds() {
        // A slow node's storm: 600 calls a second, 20,000 would take 33 s.
        let dir = "/var/lib/docker/volumes/big/_data";
        let mut d = RemovalStorm::new("n".into());
        let mut node = FakeNode::default();
        removals(&mut d, dir, "dockerd", 7, 5_400, 0.0, 600.0);
        assert!(run(&mut d, &mut node, &[], 9.0).is_empty(), "not yet 10,000 calls nor 10 s");
        removals(&mut d, dir, "dockerd", 7, 5_400, 9.0, 600.0);
        let found = run(&mut d, &mut node, &[], 18.0);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].kind, Kind::RemovalStorm);
        assert_eq!(found[0].details["calls"], 10_800);
    }

    /// Go's RemoveAll on a tree of empty directories: unlinkat(name, 0)
    /// fails with EISDIR, then unlinkat(name, AT_REMOVEDIR).
    fn remove_all(d: &mut RemovalStorm, dir: &str, pid: u32, dirs: u64, from: f64, dirs_per_s: f64) {
        for i in 0..dirs {
            let at = from + i as f64 / dirs_per_s;
            let path = format!("{dir}/d{i:07}");
            for (flags, ret) in [(0, -libc::EISDIR), (libc::AT_REMOVEDIR as u64, 0)] {
                let c = call_by(at, "dockerd", pid, Syscall::Unlinkat, flags, &path, ret);
                d.observe(&c.event, &c.identity);
            }
        }
    }

    #[test]
    fn how_a_storm_stands_is_decided_before_it_is_said() {
        let dir = "/var/lib/docker/volumes/v/_data";
        let mut d = RemovalStorm::new("n".into());
        remove_all(&mut d, dir, 9, 30_000, 0.0, 10_000.0);
        let storm = d.by_pid.get_mut(&9).expect("a storm of pid 9");
        let v = RemovalStorm::judge(storm, t(3.0), false);
        assert_eq!(v.counts, KernelCounts { calls: 60_000, failed: 30_000, eisdir: 30_000 });
        assert!(v.remove_all, "half the calls are Go's RemoveAll's EISDIR");
        assert!(matches!(v.progress, Progress::Going { rate } if rate > 0.0), "{v:?}");
        assert_eq!((v.left.clone(), v.confidence()), (Left::NotCounted, Confidence::Likely));
        let counted = EntryEstimate { entries: 70_000, at_least: false, method: "counted".into() };
        storm.estimate = Some(Ok(counted.clone()));
        let v = RemovalStorm::judge(storm, t(3.0), true);
        assert_eq!((v.progress, v.rate()), (Progress::Stopped, 0.0));
        assert_eq!((v.left.clone(), v.confidence()), (Left::Entries(counted), Confidence::Confirmed));
        storm.estimate = Some(Ok(EntryEstimate { entries: 0, at_least: false, method: GONE.into() }));
        let v = RemovalStorm::judge(storm, t(3.0), false);
        assert_eq!((v.progress, v.left), (Progress::Done, Left::Gone), "a gone tree is done, calls or not");
        storm.estimate = Some(Err(Unreadable::Other("denied".into())));
        assert!(matches!(RemovalStorm::judge(storm, t(3.0), false).left, Left::Unread(_)));
    }

    #[test]
    fn go_removeall_doubling_is_explained_and_a_gone_tree_is_done() {
        let dir = "/var/lib/docker/volumes/v/_data";
        let mut d = RemovalStorm::new("n".into());
        let mut node = FakeNode::default();
        node.remaining.insert(dir.as_bytes().to_vec(), 70_000);
        remove_all(&mut d, dir, 9, 30_000, 0.0, 10_000.0);
        let f = &run(&mut d, &mut node, &[], 3.0)[0];
        assert_eq!(f.details["calls"], 60_000);
        assert_eq!(f.details["failed_eisdir"], 30_000);
        assert!(f.summary.contains("two calls per directory") && f.summary.contains("EISDIR"), "{}", f.summary);
        assert!(f.summary.contains(" 70000 entries are left"), "{}", f.summary);
        assert!(!f.summary.contains("About at least"), "{}", f.summary);
        assert!(f.evidence.iter().any(|e| e.fact.contains("30000 failed, all with EISDIR")), "{:?}", f.evidence);
        // The rest goes, and the tree with it: done, said once.
        remove_all(&mut d, dir, 9, 1_000, 3.0, 10_000.0);
        node.remaining.clear();
        assert!(run(&mut d, &mut node, &[], 3.2).iter().all(|f| f.status == Status::Active));
        let done = &run(&mut d, &mut node, &[], 8.5)[0];
        assert_eq!(done.status, Status::Resolved);
        assert!(done.summary.contains("it is done: the tree is gone"), "{}", done.summary);
        assert!(
            !done.summary.contains("entries are left") && !done.summary.contains("wait meanwhile"),
            "{}",
            done.summary
        );
        assert!(run(&mut d, &mut node, &[], 9.0).is_empty());
    }

    #[test]
    fn removals_elsewhere_by_the_same_process_neither_widen_the_tree_nor_count_in_it() {
        let dir = "/var/lib/docker/volumes/v/_data";
        let mut d = RemovalStorm::new("n".into());
        let mut node = FakeNode::default();
        node.remaining.insert(dir.as_bytes().to_vec(), 10_000);
        remove_all(&mut d, dir, 9, 25_000, 0.0, 10_000.0);
        // dockerd removes a container meanwhile.
        for i in 0..500 {
            let c = call_by(
                1.0 + i as f64 / 1000.0,
                "dockerd",
                9,
                Syscall::Unlinkat,
                0,
                &format!("/var/lib/docker/containers/c1/f{i}"),
                0,
            );
            d.observe(&c.event, &c.identity);
        }
        let f = &run(&mut d, &mut node, &[], 2.5)[0];
        assert_eq!(f.paths, vec![dir.as_bytes().to_vec()]);
        assert_eq!(f.details["calls"], 50_000);
        assert!(
            f.evidence.iter().any(|e| e.fact.contains("500 more removal calls by the same process elsewhere")),
            "{:?}",
            f.evidence
        );
    }

    #[test]
    fn the_count_is_the_kernels_whatever_was_streamed() {
        // 10% of the calls streamed, one call each: the kernel counted them all.
        let dir = "/var/lib/docker/volumes/v/_data";
        let mut d = RemovalStorm::new("n".into());
        let mut node = FakeNode::default();
        node.remaining.insert(dir.as_bytes().to_vec(), 1);
        removals(&mut d, dir, "dockerd", 9, 25_000, 0.0, 10_000.0);
        d.counted(&[
            CountedCalls { pid: 9, syscall: Syscall::Unlinkat, errno: 0, count: 240_000 },
            CountedCalls { pid: 9, syscall: Syscall::Unlinkat, errno: libc::EISDIR as u16, count: 10_000 },
            CountedCalls { pid: 9, syscall: Syscall::Umount2, errno: 0, count: 3 },
            CountedCalls { pid: 10, syscall: Syscall::Unlinkat, errno: 0, count: 7 },
        ]);
        let f = &run(&mut d, &mut node, &[], 2.6)[0];
        assert_eq!(f.details["calls"], 250_000);
        assert_eq!(f.details["failed"], 10_000);
        assert_eq!(f.count, 250_000);
    }
}
