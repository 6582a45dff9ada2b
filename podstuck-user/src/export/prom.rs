//! `metrics.prom`: the Prometheus text exposition of the same histograms
//! (cumulative buckets, `_sum`, `_count`) and the run's counters, labelled
//! by pod, actor role, syscall and errno. Point a node exporter's textfile
//! collector at the directory, or read it by eye.
//!
//! `--listen`'s `/metrics` is the same text ([`render`]) with what a
//! scraped target adds ([`render_endpoint`]): that podstuck is up, which
//! one, and the findings active now, labelled with the node.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::diagnose::{Finding, Status};
use crate::event::syscall_name;
use crate::export::RunInfo;
use crate::identify::pod::PodUid;
use crate::latency::{LatencyBook, MAX_PODS};

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
    out.push_str("# HELP podstuck_call_outcomes_total Calls completed by the pods followed (all by default), by syscall and outcome, counted in the kernel.\n");
    out.push_str("# TYPE podstuck_call_outcomes_total counter\n");
    let mut outcomes: BTreeMap<(&str, &str), u64> = BTreeMap::new();
    for (key, series) in book.series() {
        let errno = if key.is_error() { key.outcome.as_str() } else { "none" };
        *outcomes.entry((syscall_name(key.syscall), errno)).or_default() += series.count;
    }
    for ((syscall, errno), count) in &outcomes {
        let _ = writeln!(out, "podstuck_call_outcomes_total{{syscall=\"{syscall}\",errno=\"{}\"}} {count}", label(errno));
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

/// `/metrics` of `--listen`: whether podstuck is up and which, the
/// findings active now, then everything [`render`] says.
pub fn render_endpoint(book: &LatencyBook, run: &RunInfo, findings: &[&Finding]) -> String {
    let node = label(&run.node);
    let mut out = String::new();
    out.push_str("# HELP podstuck_up 1 while podstuck traces this node.\n");
    out.push_str("# TYPE podstuck_up gauge\n");
    out.push_str("podstuck_up 1\n");
    out.push_str("# HELP podstuck_build_info Which podstuck traces, on which node and kernel.\n");
    out.push_str("# TYPE podstuck_build_info gauge\n");
    let _ = writeln!(
        out,
        "podstuck_build_info{{version=\"{}\",node=\"{node}\",kernel=\"{}\"}} 1",
        label(&run.podstuck_version),
        label(&run.kernel)
    );
    out.push_str("# HELP podstuck_findings Findings active now (why pods are stuck), by kind, severity and pod UID (\"\" for none).\n");
    out.push_str("# TYPE podstuck_findings gauge\n");
    for ((kind, severity, pod), n) in active_findings(findings) {
        let _ = writeln!(out, "podstuck_findings{{node=\"{node}\",kind=\"{kind}\",severity=\"{severity}\",pod=\"{}\"}} {n}", label(&pod));
    }
    out.push_str(&render(book, run));
    out
}

/// Active findings counted by kind, severity and pod. Pod UIDs come from
/// paths anyone can make up, so as in the latency book at most
/// [`MAX_PODS`] pods are named (the most pressing findings' first); the
/// findings of any more count under `other`.
fn active_findings(findings: &[&Finding]) -> BTreeMap<(&'static str, &'static str, String), u64> {
    let mut named: BTreeSet<&PodUid> = BTreeSet::new();
    let mut rows = BTreeMap::new();
    for f in findings.iter().filter(|f| f.status == Status::Active) {
        let pod = match &f.pod_uid {
            None => String::new(),
            Some(uid) if named.contains(uid) || named.len() < MAX_PODS => {
                named.insert(uid);
                uid.to_string()
            }
            Some(_) => "other".to_string(),
        };
        *rows.entry((f.kind.id(), f.severity.as_str(), pod)).or_default() += 1;
    }
    rows
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
    fn calls_are_counted_by_syscall_and_outcome() {
        let mut book = LatencyBook::new(SystemTime::now());
        let (a, b) = ("1b2c3d4e-0000-4000-8000-00000000000a", "1b2c3d4e-0000-4000-8000-00000000000b");
        for (errno, pod) in [(0, a), (0, b), (-16, a), (0, a)] {
            book.record(&event(Syscall::Unlink, errno, 1_000), &identity(Role::Kubelet, Some(pod)));
        }
        let text = render(&book, &run_info());
        assert!(text.contains("podstuck_call_outcomes_total{syscall=\"unlink\",errno=\"none\"} 3\n"), "{text}");
        assert!(text.contains("podstuck_call_outcomes_total{syscall=\"unlink\",errno=\"EBUSY\"} 1\n"), "{text}");
    }

    #[test]
    fn the_endpoint_says_up_and_the_active_findings_by_node() {
        use crate::diagnose::{Finding, Kind, Severity, Status};
        use crate::identify::pod::PodUid;
        let mut run = run_info();
        run.node = "node-\"7".into();
        let pod = |n: usize| PodUid::parse(&format!("1b2c3d4e-0000-4000-8000-{n:012x}")).unwrap();
        let finding = |kind, n: Option<usize>, status| {
            let mut f = Finding::new(kind, "/x", Severity::Critical, SystemTime::UNIX_EPOCH);
            f.pod_uid = n.map(pod);
            f.status = status;
            f
        };
        let mut findings = vec![
            finding(Kind::VolumeStillMounted, Some(1), Status::Active),
            finding(Kind::VolumeStillMounted, Some(1), Status::Active),
            finding(Kind::MountHeld, Some(1), Status::Resolved),
            finding(Kind::DiskFull, None, Status::Active),
        ];
        // More pods than the book names: the rest under `other`.
        findings.extend((2..MAX_PODS + 12).map(|n| finding(Kind::HungCall, Some(n), Status::Active)));
        let refs: Vec<&Finding> = findings.iter().collect();
        let text = render_endpoint(&LatencyBook::new(SystemTime::now()), &run, &refs);
        assert!(text.starts_with("# HELP podstuck_up "), "{text}");
        assert!(text.contains("\npodstuck_up 1\n"));
        assert!(text.contains("\npodstuck_build_info{version=\"0.1.0\",node=\"node-\\\"7\","), "{text}");
        let node = "node=\"node-\\\"7\"";
        assert!(text.contains(&format!("podstuck_findings{{{node},kind=\"volume-still-mounted\",severity=\"critical\",pod=\"{}\"}} 2\n", pod(1))), "{text}");
        assert!(text.contains(&format!("podstuck_findings{{{node},kind=\"disk-full\",severity=\"critical\",pod=\"\"}} 1\n")));
        assert!(!text.contains("mount-held"), "resolved findings are not current");
        assert!(text.contains(&format!("podstuck_findings{{{node},kind=\"hung-call\",severity=\"critical\",pod=\"other\"}} 11\n")), "{text}");
        let rows = text.lines().filter(|l| l.starts_with("podstuck_findings{")).count();
        assert_eq!(rows, 1 + 1 + (MAX_PODS - 1) + 1);
        // Then what metrics.prom says.
        assert!(text.ends_with(&render(&LatencyBook::new(SystemTime::now()), &run)));
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
