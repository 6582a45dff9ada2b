//! Who the kernel's series are, for the latency book. The kernel counts
//! exactly per process, cgroup, syscall and outcome; the book shows per
//! syscall, outcome, actor role and pod. A process's role and pods come from
//! its streamed calls (kubelet, in the host's cgroup, acts on many pods, told
//! apart by their paths), so a series' calls go to the pods its streamed
//! records named: all of them when they named one (the usual case, exact);
//! one by one when every call was streamed (exact); else shared in
//! proportion to the calls each record carried.

use std::collections::HashMap;
use std::path::Path;
use std::time::SystemTime;

use podstuck_common::Syscall;

use crate::collect::SeriesDelta;
use crate::event::{errno_name, CallEvent};
use crate::identify::actor::Role;
use crate::identify::pod::PodUid;
use crate::latency::{LatencyBook, SeriesKey};

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
    /// A streamed call and who it is (`None`: not followed).
    pub fn observe(&mut self, event: &CallEvent, who: Option<Attribution>) {
        let errno = event.errno().map(|e| e.min(u16::MAX as i32 - 1) as u16).unwrap_or(0);
        let parts = self.parts.entry((event.pid, event.cgroup_id, event.syscall, errno)).or_default();
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
            let streamed: usize = parts.iter().map(|p| p.latencies.as_ref().map_or(usize::MAX / 4, Vec::len)).sum();
            if streamed as u64 == delta.count {
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
