//! `summary.json`: per series count, errors, min, mean, p50, p90, p99,
//! p99.9, max, first and last seen, with the run's metadata. What a script
//! or a person pastes into an incident channel.

use serde::{Deserialize, Serialize};

use crate::event::syscall_name;
use crate::export::RunInfo;
use crate::latency::LatencyBook;
use crate::words::rfc3339;

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct SeriesSummary {
    /// The series' tag in latency.hlog.
    pub tag: String,
    pub syscall: String,
    /// "ok" or the errno name.
    pub outcome: String,
    pub role: String,
    /// The pod's UID, "other" for the calls of the pods past the book's
    /// caps (as in the hlog tag and the metrics' pod label), none for the
    /// node's own calls.
    pub pod_uid: Option<String>,
    pub count: u64,
    /// Calls of this series that failed (all of them, or none).
    pub errors: u64,
    pub min_ns: u64,
    pub mean_ns: f64,
    pub p50_ns: u64,
    pub p90_ns: u64,
    pub p99_ns: u64,
    pub p99_9_ns: u64,
    pub max_ns: u64,
    pub first_seen: String,
    pub last_seen: String,
}

impl SeriesSummary {
    /// The figures made to agree: min <= mean <= max, and every quantile
    /// between min and max. The mean is exact (the sum of the latencies),
    /// while min, max and the quantiles come from a histogram whose values
    /// are rounded, and for calls the kernel counted, are their bucket's
    /// middle: one call of 219.5 us would otherwise show a min of 221.1 us.
    /// One call is its own min, max and every quantile.
    pub fn consistent(mut self) -> SeriesSummary {
        if self.count == 0 {
            return self;
        }
        if self.count == 1 {
            let only = self.mean_ns as u64;
            self.mean_ns = only as f64;
            for v in [
                &mut self.min_ns,
                &mut self.p50_ns,
                &mut self.p90_ns,
                &mut self.p99_ns,
                &mut self.p99_9_ns,
                &mut self.max_ns,
            ] {
                *v = only;
            }
            return self;
        }
        self.min_ns = self.min_ns.min(self.mean_ns.floor() as u64);
        self.max_ns = self.max_ns.max(self.mean_ns.ceil() as u64);
        let (min, max) = (self.min_ns, self.max_ns);
        for q in [&mut self.p50_ns, &mut self.p90_ns, &mut self.p99_ns, &mut self.p99_9_ns] {
            *q = (*q).clamp(min, max);
        }
        self
    }
}

#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Summary {
    pub run: RunInfo,
    pub series: Vec<SeriesSummary>,
}

pub fn summarise(book: &LatencyBook, run: &RunInfo) -> Summary {
    let series = book
        .series()
        .map(|(key, s)| {
            let figures = SeriesSummary {
                tag: key.tag(),
                syscall: syscall_name(key.syscall).to_string(),
                outcome: key.outcome.clone(),
                role: key.role.as_str().to_string(),
                pod_uid: key.pod.as_ref().map(|_| key.pod_label().to_string()),
                count: s.count,
                errors: if key.is_error() { s.count } else { 0 },
                min_ns: s.total.min(),
                mean_ns: if s.count == 0 { 0.0 } else { s.sum_ns as f64 / s.count as f64 },
                p50_ns: s.total.value_at_quantile(0.5),
                p90_ns: s.total.value_at_quantile(0.9),
                p99_ns: s.total.value_at_quantile(0.99),
                p99_9_ns: s.total.value_at_quantile(0.999),
                max_ns: s.total.max(),
                first_seen: rfc3339(s.first_seen),
                last_seen: rfc3339(s.last_seen),
            };
            figures.consistent()
        })
        .collect();
    Summary { run: run.clone(), series }
}

pub fn render(book: &LatencyBook, run: &RunInfo) -> String {
    serde_json::to_string_pretty(&summarise(book, run)).expect("summary serialises") + "\n"
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::identify::actor::Role;
    use crate::latency::tests::{event, identity};
    use podstuck_common::Syscall;
    use std::time::SystemTime;

    pub(crate) fn run_info() -> RunInfo {
        RunInfo {
            node: "node-1".into(),
            kernel: "6.18".into(),
            podstuck_version: "0.1.0".into(),
            pods: vec![],
            kubelet_root: "/var/lib/kubelet".into(),
            syscalls: vec!["unlinkat".into()],
            errors_only: false,
            started: "2026-11-22T00:00:00.000000000Z".into(),
            updated: "2026-11-22T00:00:05.000000000Z".into(),
            duration_s: 5.0,
            interval_s: 5.0,
            events_seen: 101,
            events_lost: 0,
            lifecycle_lost: 0,
            calls_counted: [("unlinkat".to_string(), 101)].into_iter().collect(),
            node_calls_counted: None,
            calls_outside_series: 0,
            lifecycle_dropped: std::collections::BTreeMap::new(),
            claims_set_aside: std::collections::BTreeMap::new(),
            claims_naming_another_pod: 0,
            queue_full: 0,
            mounts_avoided: Vec::new(),
            mounts_recovered: 0,
            mounts_recovered_last: Vec::new(),
            node_reads_failed: std::collections::BTreeMap::new(),
            finished: false,
        }
    }

    #[test]
    fn percentiles_and_counts_per_series() {
        let mut book = LatencyBook::new(SystemTime::now());
        for latency in 1..=100u64 {
            book.record(&event(Syscall::Unlinkat, 0, latency * 1000), &identity(Role::Runtime, None));
        }
        book.record(&event(Syscall::Unlinkat, -1, 7), &identity(Role::Runtime, None));
        let summary: Summary = serde_json::from_str(&render(&book, &run_info())).unwrap();
        assert_eq!(summary.run, run_info());
        assert_eq!(summary.series.len(), 2);
        let ok = summary.series.iter().find(|s| s.outcome == "ok").unwrap();
        assert_eq!((ok.count, ok.errors, ok.min_ns), (100, 0, 1000));
        assert_eq!(ok.mean_ns, 50_500.0);
        assert!((50_000..=50_100).contains(&ok.p50_ns), "{}", ok.p50_ns);
        assert!((99_000..=99_100).contains(&ok.p99_ns), "{}", ok.p99_ns);
        assert!((100_000..=100_100).contains(&ok.max_ns));
        let failed = summary.series.iter().find(|s| s.outcome == "EPERM").unwrap();
        assert_eq!((failed.count, failed.errors, failed.role.as_str()), (1, 1, "runtime"));
        assert_eq!(failed.tag, "unlinkat/EPERM/runtime/node");
        assert_eq!(failed.pod_uid, None);
    }

    /// Whether min <= mean <= max, and every percentile within min and max.
    fn possible(s: &SeriesSummary) -> bool {
        let mean = s.mean_ns;
        (s.min_ns as f64) <= mean
            && mean <= s.max_ns as f64
            && [s.p50_ns, s.p90_ns, s.p99_ns, s.p99_9_ns].iter().all(|p| (s.min_ns..=s.max_ns).contains(p))
    }

    #[test]
    fn one_call_shows_a_min_and_max_that_hold_its_mean() {
        // Values inside a histogram bucket, at its edges and at powers of
        // two (where the buckets double in width), each as the only call.
        let mut values = vec![1, 7, 2047, 2048, 2049, 219_500, 221_100, 1_000_000_007];
        for shift in 10..40 {
            values.extend([(1u64 << shift) - 1, 1 << shift, (1 << shift) + 1]);
        }
        for latency in values {
            let mut book = LatencyBook::new(SystemTime::now());
            book.record(&event(Syscall::Unlinkat, 0, latency), &identity(Role::Runtime, None));
            let s = &summarise(&book, &run_info()).series[0];
            assert_eq!((s.count, s.mean_ns), (1, latency as f64));
            assert!(possible(s), "{latency}: {s:?}");
        }
    }

    #[test]
    fn the_kernels_bucketed_counts_show_a_possible_min_and_max() {
        // The kernel sends counts per log2 bucket with the exact sum: the
        // histogram places them at bucket values the sum does not match.
        for (count, sum_ns, bucket) in
            [(1u64, 219_500u64, 17usize), (3, 3 * 131_073, 17), (2, 2 * 262_143, 17), (1, 1, 0)]
        {
            let key = crate::latency::SeriesKey {
                syscall: Syscall::Unlinkat,
                outcome: "ok".into(),
                role: Role::Runtime,
                pod: None,
            };
            let mut book = LatencyBook::new(SystemTime::now());
            book.add(key, SystemTime::now(), count, sum_ns, &[(bucket, count)]);
            let s = &summarise(&book, &run_info()).series[0];
            assert_eq!(s.count, count);
            assert!(possible(s), "{count} calls, {sum_ns}ns, bucket {bucket}: {s:?}");
        }
    }

    #[test]
    fn the_mean_is_never_below_the_min_nor_above_the_max() {
        let mut book = LatencyBook::new(SystemTime::now());
        let key = |outcome: &str| crate::latency::SeriesKey {
            syscall: Syscall::Unlinkat,
            outcome: outcome.into(),
            role: Role::Kubelet,
            pod: None,
        };
        // One call the kernel counted: 219.5 us, recorded at its bucket's middle.
        let bucket =
            (0..podstuck_common::LATENCY_BUCKETS).find(|b| crate::latency::bucket_middle(*b) > 219_500).unwrap();
        book.add(key("ok"), SystemTime::now(), 1, 219_500, &[(bucket, 1)]);
        // Two counted calls in a bucket whose middle is above both of them.
        book.add(key("EBUSY"), SystemTime::now(), 2, 2 * 200_000, &[(bucket, 2)]);
        let summary = summarise(&book, &run_info());
        let one = summary.series.iter().find(|s| s.outcome == "ok").unwrap();
        assert_eq!(
            (one.min_ns, one.mean_ns, one.p50_ns, one.p99_9_ns, one.max_ns),
            (219_500, 219_500.0, 219_500, 219_500, 219_500)
        );
        let two = summary.series.iter().find(|s| s.outcome == "EBUSY").unwrap();
        assert!(two.min_ns as f64 <= two.mean_ns && two.mean_ns <= two.max_ns as f64, "{two:?}");
        for q in [two.p50_ns, two.p90_ns, two.p99_ns, two.p99_9_ns] {
            assert!((two.min_ns..=two.max_ns).contains(&q), "{two:?}");
        }
        // Figures from a file written before: made to agree when read.
        let old = SeriesSummary {
            min_ns: 221_100,
            mean_ns: 219_500.0,
            p50_ns: 221_100,
            max_ns: 221_100,
            count: 3,
            ..one.clone()
        }
        .consistent();
        assert_eq!((old.min_ns, old.p50_ns, old.max_ns), (219_500, 221_100, 221_100));
    }

    #[test]
    fn the_other_pods_series_says_other_as_its_tag_and_labels_do() {
        let mut book = LatencyBook::new(SystemTime::now());
        book.record(&event(Syscall::Unlink, 0, 1000), &identity(Role::Other, Some(crate::latency::OTHER_POD_UID)));
        let summary: Summary = serde_json::from_str(&render(&book, &run_info())).unwrap();
        assert_eq!(summary.series[0].pod_uid.as_deref(), Some("other"));
        assert_eq!(summary.series[0].tag, "unlink/ok/other/other");
    }
}
