//! Latency histograms per series (syscall x outcome x actor role x pod), for
//! the whole run and per interval, with exact counts. This is the record
//! kept in memory; `export` turns it into files and `report` reads them back.
//!
//! One HdrHistogram per series and scope: 1 ns to 1 hour at 3 significant
//! digits. The calls come from the kernel's exact per-series buckets
//! (log-linear, 8 per power of two): each bucket's calls are recorded at its
//! middle, so a percentile is told to within 6 % of the true latency, and
//! counts and sums are exact.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use hdrhistogram::Histogram;
use podstuck_common::{latency_bucket_range, Syscall};

use crate::event::{errno_name, syscall_name, CallEvent};
use crate::identify::actor::Role;
use crate::identify::pod::PodUid;
use crate::identify::Identity;

/// Largest latency kept apart: an hour. A longer call is recorded as an
/// hour (and its exact duration is in its event).
pub const MAX_LATENCY_NS: u64 = 3_600_000_000_000;
pub const SIGNIFICANT_DIGITS: u8 = 3;

pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, MAX_LATENCY_NS, SIGNIFICANT_DIGITS).expect("valid histogram bounds")
}

/// Where a kernel latency bucket's calls are recorded: its middle, within
/// the histogram's bounds.
pub fn bucket_middle(bucket: usize) -> u64 {
    let (low, high) = latency_bucket_range(bucket);
    (low + (high - low) / 2).clamp(1, MAX_LATENCY_NS)
}

/// What a series is: one kind of call, one outcome, one kind of actor, one
/// pod (or none).
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct SeriesKey {
    pub syscall: Syscall,
    /// "ok" or the errno name ("EBUSY").
    pub outcome: String,
    pub role: Role,
    pub pod: Option<PodUid>,
}

impl SeriesKey {
    pub fn of(event: &CallEvent, identity: &Identity) -> SeriesKey {
        SeriesKey {
            syscall: event.syscall,
            outcome: event.errno().map(errno_name).unwrap_or_else(|| "ok".to_string()),
            role: identity.actor.role,
            pod: identity.pod_uid.clone(),
        }
    }

    /// The interval-log tag: `syscall/outcome/role/pod`, "node" for no pod.
    /// Free of commas and spaces, as the log format requires.
    pub fn tag(&self) -> String {
        let pod = self.pod.as_ref().map(|p| p.as_str()).unwrap_or("node");
        format!("{}/{}/{}/{}", syscall_name(self.syscall), self.outcome, self.role.as_str(), pod)
    }

    pub fn is_error(&self) -> bool {
        self.outcome != "ok"
    }
}

/// One series: its histograms and exact counts.
#[derive(Clone, Debug)]
pub struct Series {
    pub total: Histogram<u64>,
    pub interval: Histogram<u64>,
    pub count: u64,
    pub sum_ns: u128,
    pub first_seen: SystemTime,
    pub last_seen: SystemTime,
}

/// Calls and errors of one closed interval, all series together: the
/// timeline of the picture.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct IntervalTotals {
    /// Since the start of the run.
    pub start: Duration,
    pub length: Duration,
    pub calls: u64,
    pub errors: u64,
}

/// A closed interval: its per-series histograms (non-empty series only).
pub struct ClosedInterval {
    pub start: Duration,
    pub length: Duration,
    pub histograms: Vec<(SeriesKey, Histogram<u64>)>,
}

/// Every series of a run.
pub struct LatencyBook {
    pub started: SystemTime,
    series: BTreeMap<SeriesKey, Series>,
    interval_started: SystemTime,
    interval_calls: u64,
    interval_errors: u64,
    timeline: Vec<IntervalTotals>,
}

impl LatencyBook {
    pub fn new(started: SystemTime) -> LatencyBook {
        LatencyBook {
            started,
            series: BTreeMap::new(),
            interval_started: started,
            interval_calls: 0,
            interval_errors: 0,
            timeline: Vec::new(),
        }
    }

    fn series_at(&mut self, key: SeriesKey, time: SystemTime, count: u64, sum_ns: u64) -> &mut Series {
        self.interval_calls += count;
        if key.is_error() {
            self.interval_errors += count;
        }
        let series = self.series.entry(key).or_insert_with(|| Series {
            total: new_histogram(),
            interval: new_histogram(),
            count: 0,
            sum_ns: 0,
            first_seen: time,
            last_seen: time,
        });
        series.count += count;
        series.sum_ns += sum_ns as u128;
        series.first_seen = series.first_seen.min(time);
        series.last_seen = series.last_seen.max(time);
        series
    }

    /// One call whose latency is known exactly.
    pub fn record(&mut self, event: &CallEvent, identity: &Identity) {
        self.record_latency(SeriesKey::of(event, identity), event.time, event.latency_ns);
    }

    pub fn record_latency(&mut self, key: SeriesKey, time: SystemTime, latency_ns: u64) {
        let series = self.series_at(key, time, 1, latency_ns);
        let latency = latency_ns.clamp(1, MAX_LATENCY_NS);
        series.total.saturating_record(latency);
        series.interval.saturating_record(latency);
    }

    /// Calls the kernel counted, `count` of them taking `sum_ns` in all,
    /// spread over its latency buckets as (bucket, calls).
    pub fn add(&mut self, key: SeriesKey, time: SystemTime, count: u64, sum_ns: u64, buckets: &[(usize, u64)]) {
        if count == 0 {
            return;
        }
        let series = self.series_at(key, time, count, sum_ns);
        for (bucket, calls) in buckets {
            let value = bucket_middle(*bucket);
            series.total.saturating_record_n(value, *calls);
            series.interval.saturating_record_n(value, *calls);
        }
    }

    pub fn series(&self) -> impl Iterator<Item = (&SeriesKey, &Series)> {
        self.series.iter()
    }

    pub fn timeline(&self) -> &[IntervalTotals] {
        &self.timeline
    }

    /// Ends the current interval at `now`: returns its histograms and
    /// starts the next one.
    pub fn close_interval(&mut self, now: SystemTime) -> ClosedInterval {
        let start = self.interval_started.duration_since(self.started).unwrap_or_default();
        let length = now.duration_since(self.interval_started).unwrap_or_default();
        let mut histograms = Vec::new();
        for (key, series) in self.series.iter_mut() {
            if !series.interval.is_empty() {
                histograms.push((key.clone(), series.interval.clone()));
                series.interval.reset();
            }
        }
        self.timeline.push(IntervalTotals { start, length, calls: self.interval_calls, errors: self.interval_errors });
        self.interval_started = now;
        self.interval_calls = 0;
        self.interval_errors = 0;
        ClosedInterval { start, length, histograms }
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::event::{decode, tests::record_bytes, WallClock};
    use crate::identify::Actor;

    pub(crate) fn identity(role: Role, pod: Option<&str>) -> Identity {
        Identity {
            abs_path: Ok(b"/x".to_vec()),
            pod_uid: pod.map(|p| PodUid::parse(p).unwrap()),
            path_area: None,
            container_id: None,
            actor: Actor { comm: "c".into(), exe: None, parent: "p".into(), role, description: "c".into() },
            matched: vec![],
        }
    }

    pub(crate) fn event(syscall: Syscall, ret: i64, latency_ns: u64) -> CallEvent {
        let mut e = decode(&record_bytes(syscall, ret, 0, b"/x"), &WallClock::now()).unwrap();
        e.latency_ns = latency_ns;
        e
    }

    #[test]
    fn series_split_by_syscall_outcome_role_and_pod() {
        let mut book = LatencyBook::new(SystemTime::now());
        let pod = "1b2c3d4e-0000-4000-8000-00000000000a";
        for _ in 0..3 {
            book.record(&event(Syscall::Rmdir, -16, 1_000), &identity(Role::Kubelet, Some(pod)));
        }
        book.record(&event(Syscall::Rmdir, 0, 2_000), &identity(Role::Kubelet, Some(pod)));
        book.record(&event(Syscall::Unlink, 0, 3_000), &identity(Role::Other, None));
        let tags: Vec<(String, u64)> = book.series().map(|(k, s)| (k.tag(), s.count)).collect();
        assert_eq!(
            tags,
            vec![
                ("unlink/ok/other/node".to_string(), 1),
                (format!("rmdir/EBUSY/kubelet/{pod}"), 3),
                (format!("rmdir/ok/kubelet/{pod}"), 1),
            ]
        );
    }

    #[test]
    fn intervals_reset_but_totals_keep_counting() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1000);
        let mut book = LatencyBook::new(t0);
        for latency in [10, 20, 30] {
            book.record(&event(Syscall::Unlink, 0, latency), &identity(Role::Other, None));
        }
        book.record(&event(Syscall::Unlink, -2, 5), &identity(Role::Other, None));
        let first = book.close_interval(t0 + Duration::from_secs(5));
        assert_eq!(first.start, Duration::ZERO);
        assert_eq!(first.length, Duration::from_secs(5));
        assert_eq!(first.histograms.len(), 2);
        assert_eq!(first.histograms.iter().map(|(_, h)| h.len()).sum::<u64>(), 4);
        book.record(&event(Syscall::Unlink, 0, 40), &identity(Role::Other, None));
        let second = book.close_interval(t0 + Duration::from_secs(10));
        assert_eq!(second.histograms.len(), 1, "empty series are not logged");
        assert_eq!(second.histograms[0].1.len(), 1);
        let (_, ok) = book.series().find(|(k, _)| k.outcome == "ok").unwrap();
        assert_eq!(ok.count, 4);
        assert_eq!(ok.total.len(), 4);
        assert_eq!(ok.sum_ns, 100);
        assert_eq!(book.timeline()[0], IntervalTotals { start: Duration::ZERO, length: Duration::from_secs(5), calls: 4, errors: 1 });
        assert_eq!(book.timeline()[1].calls, 1);
    }

    #[test]
    fn kernel_buckets_cover_every_latency_within_an_eighth() {
        use podstuck_common::{latency_bucket, LATENCY_BUCKETS};
        let mut previous = 0;
        for ns in (0..100_000u64).chain((17..42).flat_map(|p| [(1u64 << p) - 1, 1 << p, (1 << p) + 1, 3 << (p - 1)])) {
            let bucket = latency_bucket(ns);
            assert!(bucket < LATENCY_BUCKETS);
            let (low, high) = latency_bucket_range(bucket);
            assert!(low <= ns && ns <= high, "{ns} not in bucket {bucket} = {low}..={high}");
            assert!((high - low) as f64 <= low as f64 / 8.0 + 1.0, "bucket {bucket} too wide");
            if ns < 100_000 {
                assert!(bucket >= previous, "buckets follow latencies");
                previous = bucket;
            }
        }
        assert_eq!(latency_bucket(u64::MAX), LATENCY_BUCKETS - 1);
        let (_, top) = latency_bucket_range(LATENCY_BUCKETS - 1);
        assert_eq!(top, (1u64 << 42) - 1);
    }

    #[test]
    fn kernel_counts_are_added_exactly() {
        use podstuck_common::latency_bucket;
        let mut book = LatencyBook::new(SystemTime::now());
        let key = SeriesKey { syscall: Syscall::Unlinkat, outcome: "ok".into(), role: Role::Runtime, pod: None };
        let buckets = [(latency_bucket(1_000), 600_000), (latency_bucket(50_000), 400_000)];
        book.add(key.clone(), SystemTime::now(), 1_000_000, 20_600_000_000, &buckets);
        let (_, s) = book.series().next().unwrap();
        assert_eq!((s.count, s.sum_ns, s.total.len()), (1_000_000, 20_600_000_000, 1_000_000));
        let p50 = s.total.value_at_quantile(0.5) as f64;
        assert!((p50 - 1_000.0).abs() / 1_000.0 < 0.07, "p50 {p50}");
        let p99 = s.total.value_at_quantile(0.99) as f64;
        assert!((p99 - 50_000.0).abs() / 50_000.0 < 0.07, "p99 {p99}");
    }

    #[test]
    fn an_hour_long_call_is_kept_at_the_top() {
        let mut book = LatencyBook::new(SystemTime::now());
        book.record(&event(Syscall::Umount2, 0, 10 * MAX_LATENCY_NS), &identity(Role::Runtime, None));
        let (_, s) = book.series().next().unwrap();
        assert_eq!(s.count, 1);
        assert!(s.total.max() >= MAX_LATENCY_NS - MAX_LATENCY_NS / 1000);
    }
}
