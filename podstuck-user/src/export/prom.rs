//! `metrics.prom`: the Prometheus text exposition of the same histograms
//! (cumulative buckets, `_sum`, `_count`) and the run's counters, labelled
//! by pod, actor role, syscall and errno. Point a node exporter's textfile
//! collector at the directory, or read it by eye.

use std::fmt::Write as _;

use crate::event::syscall_name;
use crate::export::RunInfo;
use crate::latency::LatencyBook;

/// Bucket bounds: 1 us doubling to about 71 minutes (past the one-hour top).
fn bucket_bounds_ns() -> impl Iterator<Item = u64> {
    (0..=32).map(|k| 1_000u64 << k)
}

/// A label value with `\`, `"` and newlines escaped as the format wants.
fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

pub fn render(book: &LatencyBook, run: &RunInfo) -> String {
    let mut out = String::new();
    out.push_str("# HELP podstuck_call_latency_seconds Latency of traced calls, from entry to return.\n");
    out.push_str("# TYPE podstuck_call_latency_seconds histogram\n");
    for (key, series) in book.series() {
        let errno = if key.is_error() { key.outcome.as_str() } else { "none" };
        let labels = format!(
            "pod=\"{}\",role=\"{}\",syscall=\"{}\",errno=\"{}\"",
            label(key.pod_label()),
            key.role.as_str(),
            syscall_name(key.syscall),
            label(errno)
        );
        for bound in bucket_bounds_ns() {
            let cumulative = series.total.count_between(0, bound);
            let _ = writeln!(
                out,
                "podstuck_call_latency_seconds_bucket{{{labels},le=\"{}\"}} {cumulative}",
                bound as f64 / 1e9
            );
        }
        let _ = writeln!(out, "podstuck_call_latency_seconds_bucket{{{labels},le=\"+Inf\"}} {}", series.count);
        let _ = writeln!(out, "podstuck_call_latency_seconds_sum{{{labels}}} {}", series.sum_ns as f64 / 1e9);
        let _ = writeln!(out, "podstuck_call_latency_seconds_count{{{labels}}} {}", series.count);
    }
    out.push_str("# HELP podstuck_calls_total Calls completed, counted in the kernel (exact even when events are lost).\n");
    out.push_str("# TYPE podstuck_calls_total counter\n");
    for (syscall, count) in &run.calls_counted {
        let _ = writeln!(out, "podstuck_calls_total{{syscall=\"{}\"}} {count}", label(syscall));
    }
    out.push_str("# HELP podstuck_events_seen_total Call events received by podstuck.\n");
    out.push_str("# TYPE podstuck_events_seen_total counter\n");
    let _ = writeln!(out, "podstuck_events_seen_total {}", run.events_seen);
    out.push_str("# HELP podstuck_events_lost_total Call events the kernel could not hand over (ring buffer full).\n");
    out.push_str("# TYPE podstuck_events_lost_total counter\n");
    let _ = writeln!(out, "podstuck_events_lost_total {}", run.events_lost);
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::summary::tests::run_info;
    use crate::identify::actor::Role;
    use crate::latency::tests::{event, identity};
    use podstuck_common::Syscall;
    use std::time::SystemTime;

    #[test]
    fn buckets_are_cumulative_and_end_with_the_count() {
        let mut book = LatencyBook::new(SystemTime::now());
        let pod = "1b2c3d4e-0000-4000-8000-00000000000a";
        for latency in [500, 1_500, 3_000, 3_000, 2_000_000] {
            book.record(&event(Syscall::Rmdir, -16, latency), &identity(Role::Kubelet, Some(pod)));
        }
        let text = render(&book, &run_info());
        let labels = format!("pod=\"{pod}\",role=\"kubelet\",syscall=\"rmdir\",errno=\"EBUSY\"");
        assert!(text.contains(&format!("podstuck_call_latency_seconds_bucket{{{labels},le=\"0.000001\"}} 1\n")), "{text}");
        assert!(text.contains(&format!("podstuck_call_latency_seconds_bucket{{{labels},le=\"0.000002\"}} 2\n")));
        assert!(text.contains(&format!("podstuck_call_latency_seconds_bucket{{{labels},le=\"0.000004\"}} 4\n")));
        assert!(text.contains(&format!("podstuck_call_latency_seconds_bucket{{{labels},le=\"+Inf\"}} 5\n")));
        assert!(text.contains(&format!("podstuck_call_latency_seconds_count{{{labels}}} 5\n")));
        assert!(text.contains(&format!("podstuck_call_latency_seconds_sum{{{labels}}} 0.002008\n")));
        assert!(text.contains("podstuck_calls_total{syscall=\"unlinkat\"} 101\n"));
        assert!(text.contains("podstuck_events_lost_total 0\n"));
        // Cumulative: never decreasing along a series.
        let counts: Vec<u64> = text
            .lines()
            .filter(|l| l.starts_with("podstuck_call_latency_seconds_bucket"))
            .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
            .collect();
        assert!(counts.windows(2).all(|w| w[0] <= w[1]));
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
