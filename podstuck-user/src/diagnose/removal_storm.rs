//! P2 `removal-storm`: one actor (dockerd, containerd, kubelet) removing a
//! huge tree entry by entry (a docker volume with millions of empty dirs),
//! for a long time, while everything else waits on the same store.
//!
//! Signature: one process issuing removals at a high rate under one prefix
//! for seconds. Counted per process, with the prefix narrowed to what all
//! its calls share; the directory is then measured to estimate how many
//! entries are left and how long that takes at the current rate. An
//! `rm -rf` of a few thousand files that ends in a second is not a storm.

use std::collections::{HashMap, VecDeque};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;

use super::track::RECHECK;
use super::{human_duration, removes, shown, Confidence, Detector, Finding, FindingActor, Kind, Review, Severity, Status};
use crate::event::CallEvent;
use crate::identify::pod::PodUid;
use crate::identify::Identity;
use crate::inspect::mounts::is_at_or_below;
use crate::inspect::EntryEstimate;

/// A storm has at least this many calls...
const STORM_CALLS: u64 = 20_000;
/// ...over at least this long...
const STORM_LASTS: Duration = Duration::from_secs(2);
/// ...at no less than this mean rate per second.
const STORM_RATE: f64 = 2_000.0;
/// A gap this long between two calls ends a storm.
const STORM_PAUSE: Duration = Duration::from_secs(5);
/// Processes followed at once; the stalest go first.
const ACTORS_KEPT: usize = 64;
/// Latency is kept only for processes past this many calls.
const LATENCY_FROM: u64 = 1_000;
/// Seconds of per-second counts kept for the current rate.
const RATE_WINDOW: usize = 3;

struct Storm {
    actor: FindingActor,
    pod: Option<PodUid>,
    first: SystemTime,
    last: SystemTime,
    calls: u64,
    failed: u64,
    /// What every path removed shares, by whole components.
    prefix: Vec<u8>,
    /// (unix second, calls in it), newest last.
    per_second: VecDeque<(u64, u64)>,
    latency: Option<Histogram<u64>>,
    checked: Option<SystemTime>,
    estimate: Option<Result<EntryEstimate, String>>,
    reported: bool,
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
            prefix: path.to_vec(),
            per_second: VecDeque::new(),
            latency: None,
            checked: None,
            estimate: None,
            reported: false,
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
        let window: Vec<&(u64, u64)> = self.per_second.iter().filter(|(s, _)| *s + RATE_WINDOW as u64 >= now_s && *s < now_s).collect();
        if window.is_empty() {
            // Younger than a second, or the calls are all in this second.
            return self.mean_rate();
        }
        let seconds = (now_s - window[0].0) as f64;
        window.iter().map(|(_, n)| *n).sum::<u64>() as f64 / seconds.max(1.0)
    }

    fn is_storm(&self) -> bool {
        self.calls >= STORM_CALLS && self.duration() >= STORM_LASTS && self.mean_rate() >= STORM_RATE
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
}

impl RemovalStorm {
    pub fn new(node_name: String) -> RemovalStorm {
        RemovalStorm { node_name, by_pid: HashMap::new(), latest: None, fresh: false }
    }

    fn finding(&self, s: &Storm, now: SystemTime, ended: bool) -> Finding {
        let key = format!("{}:{}", s.actor.pid, s.actor.comm);
        let mut f = Finding::new(Kind::RemovalStorm, &key, Severity::Warning, s.first);
        f.last_seen = s.last;
        f.count = s.calls;
        f.actor = Some(s.actor.clone());
        f.pod_uid = s.pod.clone();
        f.pods = s.pod.iter().cloned().collect();
        f.syscall = Some("unlinkat");
        f.paths = vec![s.prefix.clone()];
        let rate = if ended { 0.0 } else { s.current_rate(now) };
        let (p50, p99) = match &s.latency {
            Some(h) => (h.value_at_quantile(0.5), h.value_at_quantile(0.99)),
            None => (0, 0),
        };
        let took = human_duration(s.duration());
        f.evidence(
            "trace",
            format!(
                "{} made {} removal calls under {} in {took} ({:.0}/s on average, {:.0}/s now; {} failed)",
                s.actor.description,
                s.calls,
                shown(&s.prefix),
                s.mean_rate(),
                rate,
                s.failed
            ),
        );
        if s.latency.is_some() {
            f.evidence("trace", format!("latency per call: p50 {:.1} µs, p99 {:.1} µs", p50 as f64 / 1e3, p99 as f64 / 1e3));
        }
        f.detail("calls", s.calls);
        f.detail("failed", s.failed);
        f.detail("rate_per_s", rate.round());
        f.detail("mean_rate_per_s", s.mean_rate().round());
        f.detail("p50_ns", p50);
        f.detail("p99_ns", p99);
        f.detail("prefix", String::from_utf8_lossy(&s.prefix).into_owned());
        let mut left_words = String::new();
        match &s.estimate {
            Some(Ok(e)) => {
                let bound = if e.at_least { "at least " } else { "" };
                f.evidence("directory", format!("{bound}{} entries left under {} ({})", e.entries, shown(&s.prefix), e.method));
                f.detail("remaining", e.entries);
                f.detail("remaining_at_least", e.at_least);
                f.confidence = Confidence::Confirmed;
                if rate > 0.0 {
                    let eta = e.entries as f64 / rate;
                    f.detail("eta_s", eta.round());
                    left_words = format!(" About {bound}{} entries are left: {} more at this rate.", e.entries, human_duration(Duration::try_from_secs_f64(eta).unwrap_or(Duration::MAX)));
                } else {
                    f.detail("eta_s", serde_json::Value::Null);
                    left_words = format!(" {bound}{} entries are left.", e.entries);
                }
            }
            Some(Err(why)) => {
                f.evidence("directory", format!("entries left under {} unknown: {why}", shown(&s.prefix)));
                f.detail("remaining", serde_json::Value::Null);
                f.detail("eta_s", serde_json::Value::Null);
            }
            None => {}
        }
        if ended {
            f.status = Status::Resolved;
            f.summary = format!(
                "{} removed {} entries under {} one by one in {took} ({:.0}/s); it has stopped.",
                s.actor.description,
                s.calls,
                shown(&s.prefix),
                s.mean_rate()
            );
        } else {
            f.summary = format!(
                "{} is removing {} entry by entry: {} calls in {took}, {:.0}/s now (p99 {:.0} µs per call).{left_words} Pods whose teardown needs the same store wait meanwhile.",
                s.actor.description,
                shown(&s.prefix),
                s.calls,
                rate,
                p99 as f64 / 1e3
            );
        }
        f.fix = format!("kubectl drain {} --ignore-daemonsets --delete-emptydir-data", self.node_name);
        f.advice.push("drain the node so no new pods wait behind the removal, and let it finish; it cannot be sped up safely".into());
        f.advice.push(format!(
            "to pause the writer while you decide: kill -STOP {pid} (resume with kill -CONT {pid})",
            pid = s.actor.pid
        ));
        f.advice.push("then find who filled it (a container writing millions of small files into a volume) before it comes back".into());
        f
    }
}

impl Detector for RemovalStorm {
    fn observe(&mut self, event: &CallEvent, identity: &Identity) {
        if !removes(event) {
            return;
        }
        let Ok(path) = &identity.abs_path else { return };
        self.latest = self.latest.max(Some(event.time));
        self.fresh = true;
        if !self.by_pid.contains_key(&event.pid) && self.by_pid.len() >= ACTORS_KEPT {
            if let Some(stalest) = self.by_pid.iter().filter(|(_, s)| !s.reported).min_by_key(|(_, s)| s.last).map(|(p, _)| *p) {
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
        storm.calls += calls;
        storm.failed += if event.errno().is_some() { calls } else { 0 };
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
            let h = storm.latency.get_or_insert_with(|| Histogram::new_with_bounds(1, 60_000_000_000, 2).expect("valid bounds"));
            h.saturating_record(event.latency_ns.max(1));
        }
    }

    fn review(&mut self, review: &mut Review<'_>) -> Vec<Finding> {
        // While calls keep coming, time is theirs; when they stop, the clock's.
        let now = match (self.fresh, self.latest) {
            (true, Some(latest)) => latest,
            _ => review.now,
        };
        self.fresh = false;
        let mut out = Vec::new();
        let mut ended = Vec::new();
        let pids: Vec<u32> = self.by_pid.keys().copied().collect();
        for pid in pids {
            let storm = self.by_pid.get_mut(&pid).expect("listed");
            let quiet = now.duration_since(storm.last).unwrap_or_default() > STORM_PAUSE;
            if quiet {
                if storm.reported {
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
                storm.estimate = Some(match review.node.remaining_entries(&storm.prefix) {
                    // The tree itself is gone: nothing is left.
                    Err(e) if e.0.contains("no such file") => Ok(EntryEstimate { entries: 0, at_least: false, method: "the directory is gone".into() }),
                    other => other.map_err(|e| e.0),
                });
            }
            storm.reported = true;
            let storm = self.by_pid.get(&pid).expect("listed");
            out.push(self.finding(storm, now, false));
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
            let mut c = call_by(i as f64 / 500.0, "dockerd", 77, Syscall::Unlinkat, libc::AT_REMOVEDIR as u64, &format!("{dir}/d{i:07}"), 0);
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
        assert_eq!(f.fix, "kubectl drain node-1 --ignore-daemonsets --delete-emptydir-data");
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
        // 30k calls over 60 s: many, long, but 500/s.
        removals(&mut d, "/data/a", "kubelet", 1, 30_000, 0.0, 500.0);
        // Two processes of 15k each at a high rate: neither reaches the count.
        removals(&mut d, "/data/b", "rm", 2, 15_000, 0.0, 5_000.0);
        removals(&mut d, "/data/b", "rm", 3, 15_000, 0.0, 5_000.0);
        assert!(run(&mut d, &mut node, &[], 60.0).is_empty());
    }
}
