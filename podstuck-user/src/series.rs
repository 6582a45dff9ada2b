//! Who the kernel's series are, for the latency book. The kernel counts
//! exactly per process, cgroup, syscall and outcome; the book shows per
//! syscall, outcome, actor role and pod. A process's role and pods come from
//! its streamed calls (kubelet, in the host's cgroup, acts on many pods, told
//! apart by their paths), so a series' calls go to the pods its streamed
//! records named: one by one when every call was streamed (exact), else
//! shared in proportion to the calls each record carried.
//!
//! The kernel's counts and its records are read apart: a call that ends
//! after the ring is drained and before its series is read is counted
//! before its record comes. Such calls are owed to the records of the next
//! read, not given to the records at hand (which would give one pod's call
//! to another and leave a pod without its own); what the next read's
//! records do not name either goes to the process's latest name.
//!
//! A pod named by a call's path is one only if it exists: anyone on the
//! node can fail to unlink `/var/lib/kubelet/pods/<made-up uid>/x`, and
//! each made-up UID would otherwise cost a series (see [`PodCheck`]).

use std::collections::hash_map::RandomState;
use std::collections::{HashMap, HashSet};
use std::hash::BuildHasher;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::time::{Duration, Instant, SystemTime};

use podstuck_common::{latency_bucket, Syscall};

use crate::event::{errno_name, CallEvent};
use crate::identify::actor::Role;
use crate::identify::pod::PodUid;
use crate::latency::{other_pod, LatencyBook, SeriesKey, MAX_PODS, OTHER_POD_UID};

/// Who a call is for the book; `None` when the run does not follow it
/// (another pod than those asked for).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Attribution {
    pub role: Role,
    pub pod: Option<PodUid>,
}

/// A kernel series: process, cgroup, syscall, errno (0 = success).
type KernelSeries = (u32, u64, Syscall, u16);

/// Latencies kept per part to give calls out one by one; past this, shares.
const LATENCIES_KEPT: usize = 10_000;

/// Parts (who the records named) kept per kernel series: one process, such
/// as kubelet, acts on many pods, but only on pods that exist (at most
/// [`MAX_PODS`] are kept apart by the book anyway); past this, the calls go
/// to the `other` pod.
const PARTS_KEPT: usize = MAX_PODS + 2;

/// Pods shown to exist, remembered (a pod is one for the whole run). Past
/// this the memory is cleared and pods are looked at again.
const PODS_KEPT: usize = 4 * MAX_PODS;

/// Paths found to name no pod, remembered for [`NOT_A_POD_FOR`], so that a
/// storm of calls on one made-up path looks at the disk once.
const NOT_PODS_KEPT: usize = 4096;
const NOT_A_POD_FOR: Duration = Duration::from_secs(10);

/// Whether the pods that calls' paths name exist on this node. A pod named
/// by a path counts when the directory the path names it by (kubelet's
/// `<root>/pods/<uid>`, a pod cgroup `.../kubepods/pod<uid>`, kubelet's
/// plugin directory for it) is a directory of root's, not a symbolic link,
/// or when a call of root's on that path succeeded (the pod's last `rmdir`
/// leaves no directory to look at). Root's, because kubelet and the
/// container runtimes run as root and others can make directories of their
/// own anywhere they can write (`/tmp/kubepods/pod<uid>/x`). A pod named by
/// the caller's cgroup or a container's (not by the path) comes from the
/// node's cgroup tree and is taken as it is.
///
/// Each answer is remembered (bounded): a pod once shown is one for the
/// run; a path shown not to be one is looked at again after 10 s.
pub struct PodCheck {
    pods: HashSet<PodUid>,
    not_pods: HashMap<(PodUid, u64), Instant>,
    hasher: RandomState,
    /// Calls counted as the node's because their pod does not exist.
    refused_calls: u64,
    said: bool,
}

impl Default for PodCheck {
    fn default() -> PodCheck {
        PodCheck {
            pods: HashSet::new(),
            not_pods: HashMap::new(),
            hasher: RandomState::new(),
            refused_calls: 0,
            said: false,
        }
    }
}

/// Where `path` names the pod `uid`: the path up to the first segment that
/// holds its UID (kubelet's form, or systemd's with underscores).
fn pod_directory<'p>(path: &'p [u8], uid: &PodUid) -> Option<&'p [u8]> {
    let plain = uid.as_str().as_bytes();
    let systemd = uid.systemd_form();
    let holds = |segment: &[u8], needle: &[u8]| {
        segment.len() >= needle.len() && segment.windows(needle.len()).any(|w| w == needle)
    };
    let mut start = 0;
    while start < path.len() {
        let end = path[start..].iter().position(|b| *b == b'/').map_or(path.len(), |i| start + i);
        let segment = &path[start..end];
        if holds(segment, plain) || holds(segment, systemd.as_bytes()) {
            return Some(&path[..end]);
        }
        start = end + 1;
    }
    None
}

impl PodCheck {
    /// Whether the pod `uid`, named by `event`, is one of this node's.
    pub fn exists(&mut self, event: &CallEvent, uid: &PodUid) -> bool {
        if uid.as_str() == OTHER_POD_UID {
            return false;
        }
        if self.pods.contains(uid) {
            return true;
        }
        let Ok(path) = event.abs_path() else { return true };
        // Not named by the path: by the caller's cgroup or a container's.
        let Some(directory) = pod_directory(&path, uid) else { return true };
        if event.ret == 0 && event.uid == 0 {
            self.remember_pod(uid);
            return true;
        }
        let key = (uid.clone(), self.hasher.hash_one(directory));
        if self.not_pods.get(&key).is_some_and(|at| at.elapsed() < NOT_A_POD_FOR) {
            return false;
        }
        let directory = Path::new(std::ffi::OsStr::from_bytes(directory));
        let is_pod = std::fs::symlink_metadata(directory).is_ok_and(|m| m.is_dir() && m.uid() == 0);
        if is_pod {
            self.not_pods.remove(&key);
            self.remember_pod(uid);
        } else {
            if self.not_pods.len() >= NOT_PODS_KEPT {
                self.not_pods.retain(|_, at| at.elapsed() < NOT_A_POD_FOR);
                if self.not_pods.len() >= NOT_PODS_KEPT {
                    self.not_pods.clear();
                }
            }
            self.not_pods.insert(key, Instant::now());
        }
        is_pod
    }

    fn remember_pod(&mut self, uid: &PodUid) {
        if self.pods.len() >= PODS_KEPT {
            self.pods.clear();
        }
        self.pods.insert(uid.clone());
    }
}

/// What the streamed records of one series named since it was last read.
struct Part {
    who: Option<Attribution>,
    /// Calls the records carried (`CallEvent::represents`).
    calls: u64,
    /// Each record's latency, while every record stood for itself alone.
    latencies: Option<Vec<u64>>,
}

/// Calls a series counted: how many, their time and their histogram.
#[derive(Default)]
struct Counted {
    calls: u64,
    sum_ns: u64,
    /// (bucket index, calls), non-zero only, by bucket.
    buckets: Vec<(usize, u64)>,
}

impl Counted {
    fn of(delta: &SeriesDelta) -> Counted {
        Counted { calls: delta.count, sum_ns: delta.sum_ns, buckets: delta.buckets.clone() }
    }

    fn absorb(&mut self, other: Counted) {
        self.calls += other.calls;
        self.sum_ns += other.sum_ns;
        for (bucket, calls) in other.buckets {
            match self.buckets.binary_search_by_key(&bucket, |(b, _)| *b) {
                Ok(i) => self.buckets[i].1 += calls,
                Err(i) => self.buckets.insert(i, (bucket, calls)),
            }
        }
    }

    /// One call of `latency_ns`, named by its record: out of its bucket,
    /// or the nearest one holding calls (a series read mid-call may have
    /// its count a bucket ahead of its histogram).
    fn take_call(&mut self, latency_ns: u64) {
        self.calls = self.calls.saturating_sub(1);
        self.sum_ns = self.sum_ns.saturating_sub(latency_ns);
        let bucket = latency_bucket(latency_ns);
        let nearest = self.buckets.iter().enumerate().min_by_key(|(_, (b, _))| b.abs_diff(bucket)).map(|(i, _)| i);
        if let Some(i) = nearest {
            self.buckets[i].1 -= 1;
            if self.buckets[i].1 == 0 {
                self.buckets.remove(i);
            }
        }
    }

    /// Shares of these calls in proportion to `weights`, each with its
    /// part of the histogram and of the time.
    fn share(self, weights: &[u64]) -> Vec<Counted> {
        let mut shares: Vec<Counted> = weights.iter().map(|_| Counted::default()).collect();
        for (bucket, calls) in &self.buckets {
            for (share, n) in shares.iter_mut().zip(split(*calls, weights)) {
                if n > 0 {
                    share.buckets.push((*bucket, n));
                }
            }
        }
        for (share, calls) in shares.iter_mut().zip(split(self.calls, weights)) {
            share.calls = calls;
            share.sum_ns = (self.sum_ns as u128 * calls as u128 / self.calls.max(1) as u128) as u64;
        }
        shares
    }
}

/// Names the kernel's series from the calls streamed.
#[derive(Default)]
pub struct SeriesNames {
    parts: HashMap<KernelSeries, Vec<Part>>,
    /// Calls counted before their records came, by series: the records
    /// of the next read name them first.
    owed: HashMap<KernelSeries, Counted>,
    /// The latest name of each process in each cgroup, for series read
    /// with no record of their own since (`--errors-only`, a filtered
    /// syscall, records lost).
    latest: HashMap<(u32, u64), Option<Attribution>>,
    pods: PodCheck,
}

fn outcome(errno: u16) -> String {
    match errno {
        0 => "ok".to_string(),
        // Counted while the series map was full: only "it failed" is known.
        u16::MAX => "failed".to_string(),
        e => errno_name(e as i32),
    }
}

/// The book's series of `who`'s calls of `syscall` ending with `errno`.
fn book_key(syscall: Syscall, errno: u16, who: &Attribution) -> SeriesKey {
    SeriesKey { syscall, outcome: outcome(errno), role: who.role, pod: who.pod.clone() }
}

impl SeriesNames {
    /// A streamed call and who it is (`None`: not followed). A pod its
    /// path names that does not exist is not one: the call is the node's.
    pub fn observe(&mut self, event: &CallEvent, mut who: Option<Attribution>) {
        if let Some(attribution) = who.as_mut() {
            if let Some(uid) = &attribution.pod {
                if !self.pods.exists(event, uid) {
                    attribution.pod = None;
                    self.pods.refused_calls += event.represents;
                }
            }
        }
        let errno = event.errno().map(|e| e.min(u16::MAX as i32 - 1) as u16).unwrap_or(0);
        let parts = self.parts.entry((event.pid, event.cgroup_id, event.syscall, errno)).or_default();
        if parts.len() >= PARTS_KEPT && !parts.iter().any(|p| p.who == who) {
            // Past the pods a node has: counted, together, as `other`.
            who = who.map(|w| Attribution { pod: Some(other_pod()), ..w });
        }
        let part = match parts.iter_mut().find(|p| p.who == who) {
            Some(part) => part,
            None => {
                parts.push(Part { who: who.clone(), calls: 0, latencies: Some(Vec::new()) });
                parts.last_mut().expect("just pushed")
            }
        };
        part.calls += event.represents;
        let alone = event.represents == 1;
        if let Some(latencies) = part.latencies.as_mut().filter(|l| alone && l.len() < LATENCIES_KEPT) {
            latencies.push(event.latency_ns);
        } else {
            part.latencies = None;
        }
        self.latest.insert((event.pid, event.cgroup_id), who);
    }

    /// Adds what the kernel counted to `book`, under the names the streamed
    /// calls gave. `unknown` names a process no record named; calls whose
    /// process is unknown (the series map was full) count as `orphans`.
    pub fn apply(
        &mut self,
        mut deltas: Vec<SeriesDelta>,
        book: &mut LatencyBook,
        now: SystemTime,
        mut unknown: impl FnMut(u32, u64) -> Option<Attribution>,
        orphans: Option<Attribution>,
    ) {
        if self.pods.refused_calls > 0 && !self.pods.said {
            self.pods.said = true;
            book.add_note(format!(
                "{} call(s) named pods that have no directory or cgroup on this node (made-up pod UIDs in paths): they are counted as the node's",
                self.pods.refused_calls
            ));
        }
        // Calls still owed whose series counted nothing since: their
        // records may have come all the same.
        let read: HashSet<KernelSeries> =
            deltas.iter().filter_map(|d| Some((d.caller?.0, d.caller?.1, d.syscall, d.errno))).collect();
        for &(pid, cgroup, syscall, errno) in self.owed.keys().filter(|series| !read.contains(*series)) {
            deltas.push(SeriesDelta {
                caller: Some((pid, cgroup)),
                syscall,
                errno,
                streamed: true,
                count: 0,
                sum_ns: 0,
                buckets: Vec::new(),
            });
        }
        for delta in deltas {
            let key = |who: &Attribution| book_key(delta.syscall, delta.errno, who);
            let Some((pid, cgroup)) = delta.caller else {
                if let Some(who) = &orphans {
                    book.add(key(who), now, delta.count, delta.sum_ns, &delta.buckets);
                }
                continue;
            };
            let series = (pid, cgroup, delta.syscall, delta.errno);
            let mut calls = Counted::of(&delta);
            if let Some(owed) = self.owed.remove(&series) {
                calls.absorb(owed);
            }
            let parts = self.parts.remove(&series).unwrap_or_default();
            give(parts, &mut calls, book, now, &key);
            if calls.calls == 0 {
                continue;
            }
            // Records may yet come only for a series the kernel streams, and
            // only for calls of this read (records name the older ones
            // first, and those had a whole read for theirs to come): the
            // others go to the latest name.
            let waiting = if delta.streamed { delta.count.min(calls.calls) } else { 0 };
            let unnamed = calls.calls - waiting;
            let mut shares = calls.share(&[unnamed, waiting]).into_iter();
            let (to_latest, to_wait) = (shares.next().unwrap_or_default(), shares.next().unwrap_or_default());
            if to_latest.calls > 0 {
                self.give_to_latest(series, to_latest, book, now, &mut unknown);
            }
            if to_wait.calls > 0 {
                self.owed.insert(series, to_wait);
            }
        }
        // Processes that are gone send nothing more (what they are still
        // owed keeps their name for the next read).
        let alive = |pid: u32| Path::new(&format!("/proc/{pid}")).exists();
        self.parts.retain(|(pid, ..), _| alive(*pid));
        let owed: HashSet<(u32, u64)> = self.owed.keys().map(|(pid, cgroup, ..)| (*pid, *cgroup)).collect();
        self.latest.retain(|caller, _| alive(caller.0) || owed.contains(caller));
    }

    /// At the end of a run: the calls still owed go to their process's
    /// latest name, so that the book holds every call the kernel counted.
    pub fn settle(
        &mut self,
        book: &mut LatencyBook,
        now: SystemTime,
        mut unknown: impl FnMut(u32, u64) -> Option<Attribution>,
    ) {
        for (series, owed) in std::mem::take(&mut self.owed) {
            self.give_to_latest(series, owed, book, now, &mut unknown);
        }
    }

    /// Calls of `series` no record named, under its process's latest name
    /// (`unknown`'s, when none of its records came): nowhere when that is
    /// a pod the run does not follow.
    fn give_to_latest(
        &mut self,
        (pid, cgroup, syscall, errno): KernelSeries,
        calls: Counted,
        book: &mut LatencyBook,
        now: SystemTime,
        unknown: &mut impl FnMut(u32, u64) -> Option<Attribution>,
    ) {
        if let Some(who) = self.latest.entry((pid, cgroup)).or_insert_with(|| unknown(pid, cgroup)) {
            book.add(book_key(syscall, errno, who), now, calls.calls, calls.sum_ns, &calls.buckets);
        }
    }
}

/// Gives `calls` to the records' `parts`: one by one when each record
/// stood for one call (each with its own latency), else in proportion to
/// the calls each carried. What the records do not cover stays in
/// `calls`.
fn give(
    parts: Vec<Part>,
    calls: &mut Counted,
    book: &mut LatencyBook,
    now: SystemTime,
    key: &impl Fn(&Attribution) -> SeriesKey,
) {
    let carried: u64 = parts.iter().map(|p| p.calls).sum();
    if carried == 0 {
        return;
    }
    let streamed: Option<u64> = parts.iter().try_fold(0u64, |n, p| Some(n + p.latencies.as_ref()?.len() as u64));
    if streamed == Some(carried) && carried <= calls.calls {
        for part in &parts {
            for latency in part.latencies.iter().flatten() {
                calls.take_call(*latency);
                if let Some(who) = &part.who {
                    book.record_latency(key(who), now, *latency);
                }
            }
        }
        return;
    }
    let mut weights: Vec<u64> = parts.iter().map(|p| p.calls).collect();
    // Calls the records do not cover stay, as one more share.
    weights.push(calls.calls.saturating_sub(carried));
    let mut shares = std::mem::take(calls).share(&weights);
    *calls = shares.pop().unwrap_or_default();
    for (part, share) in parts.iter().zip(shares) {
        if let Some(who) = &part.who {
            book.add(key(who), now, share.calls, share.sum_ns, &share.buckets);
        }
    }
}

/// `n` shared in proportion to `weights` (largest remainders first, ties to
/// the first), so the shares always add up to `n`.
pub fn split(n: u64, weights: &[u64]) -> Vec<u64> {
    let total: u128 = weights.iter().map(|w| *w as u128).sum();
    if total == 0 {
        let mut shares = vec![0; weights.len()];
        if let Some(first) = shares.first_mut() {
            *first = n;
        }
        return shares;
    }
    let exact: Vec<(u64, u128)> = weights
        .iter()
        .map(|w| {
            let scaled = n as u128 * *w as u128;
            ((scaled / total) as u64, scaled % total)
        })
        .collect();
    let mut shares: Vec<u64> = exact.iter().map(|(q, _)| *q).collect();
    let mut left = n - shares.iter().sum::<u64>();
    let mut order: Vec<usize> = (0..weights.len()).collect();
    order.sort_by(|a, b| exact[*b].1.cmp(&exact[*a].1).then(a.cmp(b)));
    for i in order {
        if left == 0 {
            break;
        }
        shares[i] += 1;
        left -= 1;
    }
    shares
}

/// What a series counted since it was last read: the kernel keeps the
/// running totals, user space the difference.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SeriesDelta {
    /// The process and its cgroup; `None` for calls counted while the
    /// series map was full (who made them is unknown).
    pub caller: Option<(u32, u64)>,
    pub syscall: Syscall,
    /// 0 for success; for an overflow slot, any failure is `u16::MAX`.
    pub errno: u16,
    /// Whether the kernel streams records of this series' calls (see
    /// [`crate::collect::streams`]): the calls of one that it does not
    /// are never named by a record.
    pub streamed: bool,
    pub count: u64,
    pub sum_ns: u64,
    /// (bucket index, calls), non-zero only.
    pub buckets: Vec<(usize, u64)>,
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::latency::tests::event;
    use podstuck_common::latency_bucket;

    const POD_A: &str = "1b2c3d4e-0000-4000-8000-00000000000a";
    const POD_B: &str = "1b2c3d4e-0000-4000-8000-00000000000b";

    fn who(pod: &str) -> Option<Attribution> {
        Some(Attribution { role: Role::Kubelet, pod: Some(PodUid::parse(pod).unwrap()) })
    }

    /// A call of this test process (alive, so its names are kept).
    fn call(syscall: Syscall, latency: u64) -> CallEvent {
        let mut e = event(syscall, 0, latency);
        e.pid = std::process::id();
        e
    }

    fn delta(count: u64, latency: u64) -> SeriesDelta {
        let e = call(Syscall::Rmdir, latency);
        SeriesDelta {
            caller: Some((e.pid, e.cgroup_id)),
            syscall: Syscall::Rmdir,
            errno: 0,
            streamed: true,
            count,
            sum_ns: count * latency,
            buckets: vec![(latency_bucket(latency), count)],
        }
    }

    fn counts(book: &LatencyBook) -> Vec<(String, u64)> {
        book.series().map(|(k, s)| (k.tag(), s.count)).collect()
    }

    #[test]
    fn shares_add_up() {
        assert_eq!(split(10, &[1, 1, 1]), vec![4, 3, 3]);
        assert_eq!(split(7, &[0, 0]), vec![7, 0]);
        assert_eq!(split(1_000_000, &[999_000, 1_000]), vec![999_000, 1_000]);
        for n in [0, 1, 5, 999] {
            assert_eq!(split(n, &[3, 5, 7, 11]).iter().sum::<u64>(), n);
        }
    }

    #[test]
    fn a_storm_of_one_pod_is_all_its_own() {
        let mut names = SeriesNames::default();
        let mut sampled = call(Syscall::Rmdir, 2_000);
        sampled.represents = 40_000;
        names.observe(&sampled, who(POD_A));
        let mut book = LatencyBook::new(SystemTime::now());
        names.apply(vec![delta(100_000, 2_000)], &mut book, SystemTime::now(), |_, _| None, None);
        // The calls counted since that record wait for the next one...
        assert_eq!(counts(&book), vec![(format!("rmdir/ok/kubelet/{POD_A}"), 40_000)]);
        let mut next = call(Syscall::Rmdir, 2_000);
        next.represents = 60_001;
        names.observe(&next, who(POD_A));
        names.apply(vec![delta(1, 2_000)], &mut book, SystemTime::now(), |_, _| None, None);
        assert_eq!(counts(&book), vec![(format!("rmdir/ok/kubelet/{POD_A}"), 100_001)]);
        // ...and at the end of the run, with no record to come, go to the
        // process's latest name.
        names.apply(vec![delta(500, 2_000)], &mut book, SystemTime::now(), |_, _| None, None);
        names.settle(&mut book, SystemTime::now(), |_, _| None);
        assert_eq!(counts(&book), vec![(format!("rmdir/ok/kubelet/{POD_A}"), 100_501)]);
        assert!(names.owed.is_empty());
    }

    #[test]
    fn a_call_counted_before_its_record_came_is_its_own_pods() {
        // Four calls, each on a pod of its own; the series is read after
        // the third has ended but before its record was taken, then after
        // the fourth.
        let pods: Vec<String> = (0..4).map(|n| format!("1b2c3d4e-0000-4000-8000-00000000010{n}")).collect();
        let mut names = SeriesNames::default();
        let mut book = LatencyBook::new(SystemTime::now());
        for (pod, latency) in pods.iter().zip([1_000, 2_000]) {
            names.observe(&call(Syscall::Rmdir, latency), who(pod));
        }
        let mut read = delta(3, 1_000);
        read.sum_ns = 6_000;
        read.buckets = vec![(latency_bucket(1_000), 1), (latency_bucket(2_000), 1), (latency_bucket(3_000), 1)];
        names.apply(vec![read], &mut book, SystemTime::now(), |_, _| None, None);
        for (pod, latency) in pods[2..].iter().zip([3_000, 4_000]) {
            names.observe(&call(Syscall::Rmdir, latency), who(pod));
        }
        names.apply(vec![delta(1, 4_000)], &mut book, SystemTime::now(), |_, _| None, None);
        let mut expected: Vec<(String, u64)> = pods.iter().map(|p| (format!("rmdir/ok/kubelet/{p}"), 1)).collect();
        expected.sort();
        assert_eq!(counts(&book), expected);
        let sums: Vec<u128> = book.series().map(|(_, s)| s.sum_ns).collect();
        assert_eq!(sums, vec![1_000, 2_000, 3_000, 4_000]);
        assert!(names.owed.is_empty());
    }

    #[test]
    fn calls_no_record_named_by_the_next_read_go_to_the_latest_name() {
        let mut names = SeriesNames::default();
        let mut book = LatencyBook::new(SystemTime::now());
        names.observe(&call(Syscall::Rmdir, 1_000), who(POD_A));
        // Two calls counted, one record (a record lost, say).
        names.apply(vec![delta(2, 1_000)], &mut book, SystemTime::now(), |_, _| None, None);
        assert_eq!(counts(&book), vec![(format!("rmdir/ok/kubelet/{POD_A}"), 1)]);
        // The next read names nothing: the calls owed have had their chance.
        names.apply(Vec::new(), &mut book, SystemTime::now(), |_, _| None, None);
        assert_eq!(counts(&book), vec![(format!("rmdir/ok/kubelet/{POD_A}"), 2)]);
        assert!(names.owed.is_empty());
        // A series the kernel does not stream (a filtered syscall, or
        // successes under --errors-only) has nothing to wait for.
        let mut filtered = delta(7, 1_000);
        filtered.syscall = Syscall::Unlink;
        filtered.streamed = false;
        names.apply(vec![filtered], &mut book, SystemTime::now(), |_, _| None, None);
        assert!(counts(&book).contains(&(format!("unlink/ok/kubelet/{POD_A}"), 7)));
        assert!(names.owed.is_empty());
    }

    #[test]
    fn calls_streamed_one_by_one_keep_their_pods_and_latencies() {
        let mut names = SeriesNames::default();
        for (pod, latency) in [(POD_A, 1_000), (POD_B, 9_000), (POD_A, 1_000)] {
            names.observe(&call(Syscall::Rmdir, latency), who(pod));
        }
        let mut book = LatencyBook::new(SystemTime::now());
        names.apply(vec![delta(3, 1_000)], &mut book, SystemTime::now(), |_, _| None, None);
        assert_eq!(
            counts(&book),
            vec![(format!("rmdir/ok/kubelet/{POD_A}"), 2), (format!("rmdir/ok/kubelet/{POD_B}"), 1)]
        );
        let (_, b) = book.series().find(|(k, _)| k.tag().ends_with(POD_B)).unwrap();
        assert_eq!(b.sum_ns, 9_000);
    }

    #[test]
    fn sampled_calls_of_two_pods_are_shared_by_what_they_carried() {
        let mut names = SeriesNames::default();
        let mut a = call(Syscall::Rmdir, 1_000);
        a.represents = 300;
        let mut b = call(Syscall::Rmdir, 1_000);
        b.represents = 100;
        names.observe(&a, who(POD_A));
        names.observe(&b, who(POD_B));
        let mut book = LatencyBook::new(SystemTime::now());
        names.apply(vec![delta(1_000, 1_000)], &mut book, SystemTime::now(), |_, _| None, None);
        assert_eq!(
            counts(&book),
            vec![(format!("rmdir/ok/kubelet/{POD_A}"), 300), (format!("rmdir/ok/kubelet/{POD_B}"), 100)]
        );
        // The next records carry the 600 counted meanwhile.
        a.represents = 450;
        b.represents = 150;
        names.observe(&a, who(POD_A));
        names.observe(&b, who(POD_B));
        names.apply(Vec::new(), &mut book, SystemTime::now(), |_, _| None, None);
        assert_eq!(
            counts(&book),
            vec![(format!("rmdir/ok/kubelet/{POD_A}"), 750), (format!("rmdir/ok/kubelet/{POD_B}"), 250)]
        );
    }

    /// A call of this test process on `path`, by `uid`, returning `ret`.
    fn call_on(path: &Path, ret: i64, uid: u32) -> CallEvent {
        let mut e = call(Syscall::Rmdir, 1_000);
        e.path = path.as_os_str().as_bytes().to_vec();
        e.ret = ret;
        e.uid = uid;
        e
    }

    #[test]
    fn a_pod_its_path_names_counts_only_if_it_exists() {
        let tmp = crate::test_support::TempDir::new("podcheck");
        let pods = tmp.0.join("kubelet/pods");
        let real = "1b2c3d4e-0000-4000-8000-0000000000c1";
        std::fs::create_dir_all(pods.join(real).join("volumes")).unwrap();
        let made_up = "1b2c3d4e-0000-4000-8000-0000000000c2";
        let linked = "1b2c3d4e-0000-4000-8000-0000000000c3";
        std::os::unix::fs::symlink(pods.join(real), pods.join(linked)).unwrap();
        let removed = "1b2c3d4e-0000-4000-8000-0000000000c4";
        let by_root = nix::unistd::geteuid().is_root();
        let nobody = 65534;
        let calls = [
            // Fails: the pod directory does not exist.
            (call_on(&pods.join(made_up).join("volumes/x/y"), -2, nobody), made_up),
            // The directory exists, made by this test (root's when run as root).
            (call_on(&pods.join(real).join("volumes/x"), -2, nobody), real),
            // A symbolic link is nobody's pod directory.
            (call_on(&pods.join(linked).join("volumes/x"), -2, nobody), linked),
            // Its directory is gone, but root's rmdir of it succeeded.
            (call_on(&pods.join(removed), 0, 0), removed),
            // Named by the caller's cgroup, not the path: taken as it is.
            (call_on(Path::new("/x"), -2, nobody), POD_B),
            // The `other` pod is nobody's.
            (call_on(Path::new("/x"), -2, nobody), OTHER_POD_UID),
        ];
        let mut names = SeriesNames::default();
        for (event, pod) in &calls {
            names.observe(event, who(pod));
            names.observe(event, who(pod));
        }
        let mut book = LatencyBook::new(SystemTime::now());
        let mut failed = delta(10, 1_000);
        failed.errno = 2;
        names.apply(vec![failed, delta(2, 1_000)], &mut book, SystemTime::now(), |_, _| None, None);
        let mut expected =
            vec![(format!("rmdir/ENOENT/kubelet/{POD_B}"), 2), (format!("rmdir/ok/kubelet/{removed}"), 2)];
        if by_root {
            expected.push((format!("rmdir/ENOENT/kubelet/{real}"), 2));
            expected.push(("rmdir/ENOENT/kubelet/node".to_string(), 6));
        } else {
            expected.push(("rmdir/ENOENT/kubelet/node".to_string(), 8));
        }
        expected.sort();
        let mut got = counts(&book);
        got.sort();
        assert_eq!(got, expected);
        let note = book.take_overflow_note().expect("said");
        assert!(note.contains("no directory or cgroup"), "{note}");
        assert_eq!(book.take_overflow_note(), None);
        // Said once, however many more.
        names.observe(&calls[0].0, who(made_up));
        names.apply(vec![delta(1, 1_000)], &mut book, SystemTime::now(), |_, _| None, None);
        assert_eq!(book.take_overflow_note(), None);
    }

    #[test]
    fn where_a_path_names_its_pod() {
        let uid = PodUid::parse(POD_A).unwrap();
        let dir = |p: &[u8]| pod_directory(p, &uid).map(|d| String::from_utf8_lossy(d).into_owned());
        assert_eq!(
            dir(format!("/var/lib/kubelet/pods/{POD_A}/volumes/x").as_bytes()),
            Some(format!("/var/lib/kubelet/pods/{POD_A}"))
        );
        assert_eq!(
            dir(format!("/sys/fs/cgroup/kubepods/besteffort/pod{POD_A}/c").as_bytes()),
            Some(format!("/sys/fs/cgroup/kubepods/besteffort/pod{POD_A}"))
        );
        let slice = format!("kubepods-burstable-pod{}.slice", uid.systemd_form());
        assert_eq!(
            dir(format!("/sys/fs/cgroup/kubepods.slice/{slice}/x").as_bytes()),
            Some(format!("/sys/fs/cgroup/kubepods.slice/{slice}"))
        );
        assert_eq!(dir(b"/var/lib/kubelet/pods/other/volumes"), None);
        assert_eq!(dir(b""), None);
        assert_eq!(dir(b"////"), None);
    }

    #[test]
    fn a_process_acting_on_more_pods_than_a_node_has_is_bounded() {
        let mut names = SeriesNames::default();
        let pods = 2 * MAX_PODS;
        for n in 0..pods {
            // Named by the caller's cgroup (the path is "/x"): taken as they are.
            names.observe(
                &call(Syscall::Rmdir, 1_000),
                Some(Attribution {
                    role: Role::Kubelet,
                    pod: Some(PodUid::parse(&format!("1b2c3d4e-0000-4000-8000-{n:012x}")).unwrap()),
                }),
            );
        }
        let parts: usize = names.parts.values().map(Vec::len).sum();
        assert!(parts <= PARTS_KEPT + 1, "{parts} parts");
        let mut book = LatencyBook::new(SystemTime::now());
        names.apply(vec![delta(pods as u64, 1_000)], &mut book, SystemTime::now(), |_, _| None, None);
        assert_eq!(book.series().map(|(_, s)| s.count).sum::<u64>(), pods as u64);
        assert!(book.series().filter(|(k, _)| !k.is_other()).count() <= MAX_PODS);
        assert!(book.series().any(|(k, _)| k.tag() == "rmdir/ok/kubelet/other"));
    }

    #[test]
    fn many_sampled_parts_are_shared_without_overflow() {
        // Records standing for many calls each keep no latencies: shares.
        let mut names = SeriesNames::default();
        for n in 0..6 {
            let mut e = call(Syscall::Rmdir, 1_000);
            e.represents = 10;
            names.observe(
                &e,
                Some(Attribution {
                    role: Role::Kubelet,
                    pod: Some(PodUid::parse(&format!("1b2c3d4e-0000-4000-8000-{n:012x}")).unwrap()),
                }),
            );
        }
        let mut book = LatencyBook::new(SystemTime::now());
        names.apply(vec![delta(60, 1_000)], &mut book, SystemTime::now(), |_, _| None, None);
        assert_eq!(book.series().map(|(_, s)| s.count).collect::<Vec<_>>(), vec![10; 6]);
    }

    #[test]
    fn unnamed_series_are_named_once_and_unfollowed_ones_dropped() {
        let mut names = SeriesNames::default();
        let mut book = LatencyBook::new(SystemTime::now());
        let mut asked = 0;
        for _ in 0..2 {
            names.apply(
                // A series no record names: one the kernel does not stream.
                vec![SeriesDelta { streamed: false, ..delta(5, 1_000) }],
                &mut book,
                SystemTime::now(),
                |_, _| {
                    asked += 1;
                    who(POD_B)
                },
                None,
            );
        }
        assert_eq!(asked, 1);
        assert_eq!(counts(&book), vec![(format!("rmdir/ok/kubelet/{POD_B}"), 10)]);
        // Another pod than the one followed: counted nowhere in the book.
        names.observe(&call(Syscall::Unlink, 1_000), None);
        let mut unlinks = delta(50, 1_000);
        unlinks.syscall = Syscall::Unlink;
        names.apply(vec![unlinks], &mut book, SystemTime::now(), |_, _| who(POD_A), None);
        assert_eq!(book.series().count(), 1);
        // Orphans (series map full) go where the run says.
        let orphans = SeriesDelta { caller: None, errno: u16::MAX, ..delta(7, 1_000) };
        names.apply(
            vec![orphans],
            &mut book,
            SystemTime::now(),
            |_, _| None,
            Some(Attribution { role: Role::Other, pod: None }),
        );
        assert!(counts(&book).contains(&("rmdir/failed/other/node".to_string(), 7)));
    }
}
