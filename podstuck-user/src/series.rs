//! Who the kernel's series are, for the latency book. The kernel counts
//! exactly per process, cgroup, syscall and outcome; the book shows per
//! syscall, outcome, actor role and pod. A process's role and pods come from
//! its streamed calls (kubelet, in the host's cgroup, acts on many pods, told
//! apart by their paths), so a series' calls go to the pods its streamed
//! records named: all of them when they named one (the usual case, exact);
//! one by one when every call was streamed (exact); else shared in
//! proportion to the calls each record carried.
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

use podstuck_common::Syscall;

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
        PodCheck { pods: HashSet::new(), not_pods: HashMap::new(), hasher: RandomState::new(), refused_calls: 0, said: false }
    }
}

/// Where `path` names the pod `uid`: the path up to the first segment that
/// holds its UID (kubelet's form, or systemd's with underscores).
fn pod_directory<'p>(path: &'p [u8], uid: &PodUid) -> Option<&'p [u8]> {
    let plain = uid.as_str().as_bytes();
    let systemd = uid.systemd_form();
    let holds = |segment: &[u8], needle: &[u8]| segment.len() >= needle.len() && segment.windows(needle.len()).any(|w| w == needle);
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

/// Names the kernel's series from the calls streamed.
#[derive(Default)]
pub struct SeriesNames {
    parts: HashMap<KernelSeries, Vec<Part>>,
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
        deltas: Vec<SeriesDelta>,
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
        for delta in deltas {
            let parts = match delta.caller {
                Some((pid, cgroup)) => match self.parts.remove(&(pid, cgroup, delta.syscall, delta.errno)) {
                    Some(parts) if !parts.is_empty() => parts,
                    _ => {
                        let who = self.latest.entry((pid, cgroup)).or_insert_with(|| unknown(pid, cgroup)).clone();
                        vec![Part { who, calls: 1, latencies: None }]
                    }
                },
                None => vec![Part { who: orphans.clone(), calls: 1, latencies: None }],
            };
            let key = |who: &Attribution| SeriesKey {
                syscall: delta.syscall,
                outcome: outcome(delta.errno),
                role: who.role,
                pod: who.pod.clone(),
            };
            if let [part] = parts.as_slice() {
                if let Some(who) = &part.who {
                    book.add(key(who), now, delta.count, delta.sum_ns, &delta.buckets);
                }
                continue;
            }
            // Every call streamed alone, with its latency: given out one by one.
            let streamed: Option<u64> = parts.iter().try_fold(0u64, |n, p| Some(n + p.latencies.as_ref()?.len() as u64));
            if streamed == Some(delta.count) {
                for part in &parts {
                    let Some(who) = &part.who else { continue };
                    for latency in part.latencies.iter().flatten() {
                        book.record_latency(key(who), now, *latency);
                    }
                }
                continue;
            }
            let weights: Vec<u64> = parts.iter().map(|p| p.calls).collect();
            let mut shares: Vec<Vec<(usize, u64)>> = vec![Vec::new(); parts.len()];
            for (bucket, calls) in &delta.buckets {
                for (i, n) in split(*calls, &weights).into_iter().enumerate() {
                    if n > 0 {
                        shares[i].push((*bucket, n));
                    }
                }
            }
            for (part, buckets) in parts.iter().zip(shares) {
                let Some(who) = &part.who else { continue };
                let count: u64 = buckets.iter().map(|(_, n)| n).sum();
                let sum_ns = (delta.sum_ns as u128 * count as u128 / delta.count.max(1) as u128) as u64;
                book.add(key(who), now, count, sum_ns, &buckets);
            }
        }
        // Processes that are gone send nothing more.
        let alive = |pid: u32| Path::new(&format!("/proc/{pid}")).exists();
        self.parts.retain(|(pid, ..), _| alive(*pid));
        self.latest.retain(|(pid, _), _| alive(*pid));
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
        assert_eq!(counts(&book), vec![(format!("rmdir/ok/kubelet/{POD_A}"), 100_000)]);
    }

    #[test]
    fn calls_streamed_one_by_one_keep_their_pods_and_latencies() {
        let mut names = SeriesNames::default();
        for (pod, latency) in [(POD_A, 1_000), (POD_B, 9_000), (POD_A, 1_000)] {
            names.observe(&call(Syscall::Rmdir, latency), who(pod));
        }
        let mut book = LatencyBook::new(SystemTime::now());
        names.apply(vec![delta(3, 1_000)], &mut book, SystemTime::now(), |_, _| None, None);
        assert_eq!(counts(&book), vec![(format!("rmdir/ok/kubelet/{POD_A}"), 2), (format!("rmdir/ok/kubelet/{POD_B}"), 1)]);
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
        assert_eq!(counts(&book), vec![(format!("rmdir/ok/kubelet/{POD_A}"), 750), (format!("rmdir/ok/kubelet/{POD_B}"), 250)]);
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
        let mut expected = vec![(format!("rmdir/ENOENT/kubelet/{POD_B}"), 2), (format!("rmdir/ok/kubelet/{removed}"), 2)];
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
        assert_eq!(dir(format!("/var/lib/kubelet/pods/{POD_A}/volumes/x").as_bytes()), Some(format!("/var/lib/kubelet/pods/{POD_A}")));
        assert_eq!(dir(format!("/sys/fs/cgroup/kubepods/besteffort/pod{POD_A}/c").as_bytes()), Some(format!("/sys/fs/cgroup/kubepods/besteffort/pod{POD_A}")));
        let slice = format!("kubepods-burstable-pod{}.slice", uid.systemd_form());
        assert_eq!(dir(format!("/sys/fs/cgroup/kubepods.slice/{slice}/x").as_bytes()), Some(format!("/sys/fs/cgroup/kubepods.slice/{slice}")));
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
            names.observe(&call(Syscall::Rmdir, 1_000), Some(Attribution { role: Role::Kubelet, pod: Some(PodUid::parse(&format!("1b2c3d4e-0000-4000-8000-{n:012x}")).unwrap()) }));
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
            names.observe(&e, Some(Attribution { role: Role::Kubelet, pod: Some(PodUid::parse(&format!("1b2c3d4e-0000-4000-8000-{n:012x}")).unwrap()) }));
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
                vec![delta(5, 1_000)],
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
        names.apply(vec![orphans], &mut book, SystemTime::now(), |_, _| None, Some(Attribution { role: Role::Other, pod: None }));
        assert!(counts(&book).contains(&("rmdir/failed/other/node".to_string(), 7)));
    }
}
