//! Latency histograms per series (syscall x outcome x actor role x pod), for
//! the whole run and per interval, with exact counts. This is the record
//! kept in memory; `export` turns it into files and `report` reads them back.
//!
//! One HdrHistogram per series and scope: 1 ns to 1 hour at 3 significant
//! digits, so p99.9 of a 40 us call is told to within 0.1 %.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use hdrhistogram::Histogram;
use podstuck_common::Syscall;

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

    pub fn record(&mut self, event: &CallEvent, identity: &Identity) {
        let key = SeriesKey::of(event, identity);
        let latency = event.latency_ns.min(MAX_LATENCY_NS);
        self.interval_calls += 1;
        if key.is_error() {
            self.interval_errors += 1;
        }
        let series = self.series.entry(key).or_insert_with(|| Series {
            total: new_histogram(),
            interval: new_histogram(),
            count: 0,
            sum_ns: 0,
            first_seen: event.time,
            last_seen: event.time,
        });
        // Within bounds by the clamp above, so recording cannot fail.
        series.total.saturating_record(latency);
        series.interval.saturating_record(latency);
        series.count += 1;
        series.sum_ns += event.latency_ns as u128;
        series.first_seen = series.first_seen.min(event.time);
        series.last_seen = series.last_seen.max(event.time);
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
    fn an_hour_long_call_is_kept_at_the_top() {
        let mut book = LatencyBook::new(SystemTime::now());
        book.record(&event(Syscall::Umount2, 0, 10 * MAX_LATENCY_NS), &identity(Role::Runtime, None));
        let (_, s) = book.series().next().unwrap();
        assert_eq!(s.count, 1);
        assert!(s.total.max() >= MAX_LATENCY_NS - MAX_LATENCY_NS / 1000);
    }
}
