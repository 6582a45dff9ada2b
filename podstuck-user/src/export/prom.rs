//! Prometheus text exposition: `metrics.prom` of `--histograms`, and
//! `--listen`'s `/metrics` ([`render_endpoint`]), which adds that podstuck
//! is up, which one, the findings active now and what podstuck itself
//! costs.
//!
//! Bounded by design, whatever the pod churn: a cluster keeps these series
//! from every node for weeks. Per node, one latency histogram by actor
//! role, syscall and outcome (the errnos the pathologies are told by, any
//! other as `error`), [`BUCKETS_S`] buckets, at most [`MAX_HISTOGRAMS`]
//! label sets of their own; per pod only the calls of the pods followed
//! (an active finding, or named by `--pod`: [`LatencyBook::follow`]), at
//! most [`MAX_POD_ROWS`]; the findings, at most [`MAX_FINDING_ROWS`]. The
//! whole page stays under [`MAX_SERIES`] series and 100 KB (tested on the
//! worst case below).

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use crate::diagnose::{Finding, Status};
use crate::event::syscall_name;
use crate::export::RunInfo;
use crate::identify::actor::Role;
use crate::latency::{LatencyBook, Series, SeriesKey};
use crate::run::ProgramCost;
use podstuck_common::Syscall;

/// Upper bounds of the latency buckets, in seconds: from a quick unlink
/// (microseconds) to an unmount hung on a dead server (minutes).
pub const BUCKETS_S: [f64; 12] = [0.000005, 0.00002, 0.0001, 0.0005, 0.002, 0.01, 0.05, 0.25, 1.0, 5.0, 30.0, 120.0];

/// The errnos kept apart as outcomes: those the pathologies are told by
/// (busy, denied, not empty, gone, not a mount). Any other is `error`.
pub const OUTCOMES: [&str; 6] = ["EBUSY", "EPERM", "EACCES", "ENOTEMPTY", "ENOENT", "EINVAL"];

/// Label sets of the latency histogram of their own, in the order they
/// first came; later ones are counted under role `other`, their syscall,
/// and `ok` or `error` (8 more sets at most).
pub const MAX_HISTOGRAMS: usize = 16;

/// Rows of `podstuck_pod_calls_total` at most (pod x role x syscall x
/// outcome): the named pods first, then the followed ones as they came.
pub const MAX_POD_ROWS: usize = 60;

/// Rows of `podstuck_findings` of their own, the most pressing first; the
/// rest are counted by severity under kind and pod `other` (3 more rows).
pub const MAX_FINDING_ROWS: usize = 24;

/// A finding's fix as a label: its first characters; /findings has it whole.
pub const FIX_LABEL_CHARS: usize = 200;

/// Series a scrape of `/metrics` holds at most, every family counted.
pub const MAX_SERIES: usize = 500;

/// A label value with `\`, `"` and newlines escaped as the format wants.
fn label(value: &str) -> String {
    value.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n")
}

/// A family's HELP and TYPE lines.
fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The outcome a series is exported under.
fn outcome_class(key: &SeriesKey) -> &'static str {
    if !key.is_error() {
        return "ok";
    }
    OUTCOMES.iter().copied().find(|o| *o == key.outcome).unwrap_or("error")
}

/// One histogram of the page: calls by bucket, count, sum.
#[derive(Clone, Default)]
struct Latencies {
    buckets: [u64; BUCKETS_S.len()],
    count: u64,
    sum_ns: u128,
    /// When its first series came ([`Series::seq`]).
    seq: u64,
}

impl Latencies {
    fn add_series(&mut self, series: &Series) {
        for (slot, bound) in self.buckets.iter_mut().zip(BUCKETS_S) {
            *slot += series.total.count_between(0, (bound * 1e9) as u64);
        }
        self.count += series.count;
        self.sum_ns += series.sum_ns;
    }

    fn add(&mut self, other: &Latencies) {
        for (slot, n) in self.buckets.iter_mut().zip(other.buckets) {
            *slot += n;
        }
        self.count += other.count;
        self.sum_ns += other.sum_ns;
    }
}

/// role, syscall, outcome.
type HistogramLabels = (Role, Syscall, &'static str);

/// The node's histograms: every series of the book by role, syscall and
/// outcome, the first [`MAX_HISTOGRAMS`] sets apart.
fn node_histograms(book: &LatencyBook) -> BTreeMap<HistogramLabels, Latencies> {
    let mut sets: BTreeMap<HistogramLabels, Latencies> = BTreeMap::new();
    // A followed pod's counts-only series: its calls are in the node's.
    for (key, series) in book.series().filter(|(_, s)| !s.counts_only) {
        let set = sets
            .entry((key.role, key.syscall, outcome_class(key)))
            .or_insert_with(|| Latencies { seq: series.seq, ..Latencies::default() });
        set.seq = set.seq.min(series.seq);
        set.add_series(series);
    }
    let mut by_age: Vec<(HistogramLabels, Latencies)> = sets.into_iter().collect();
    by_age.sort_by_key(|(_, l)| l.seq);
    let mut kept: BTreeMap<HistogramLabels, Latencies> = BTreeMap::new();
    for (n, ((role, syscall, outcome), latencies)) in by_age.into_iter().enumerate() {
        let labels = match n < MAX_HISTOGRAMS {
            true => (role, syscall, outcome),
            false => (Role::Other, syscall, if outcome == "ok" { "ok" } else { "error" }),
        };
        kept.entry(labels).or_default().add(&latencies);
    }
    kept
}

/// A row of `podstuck_pod_calls_total`: pod UID, role, syscall, outcome.
type PodRow = (String, Role, Syscall, &'static str);

/// The followed pods' calls, by [`PodRow`].
fn pod_rows(book: &LatencyBook, named: &[String]) -> Vec<(PodRow, u64)> {
    let followed: BTreeSet<&str> = book.followed().map(|p| p.as_str()).collect();
    let mut rows: BTreeMap<PodRow, (u64, u64)> = BTreeMap::new();
    for (key, series) in book.series() {
        let Some(pod) = key.pod.as_ref().filter(|p| followed.contains(p.as_str())) else { continue };
        let row = rows.entry((pod.to_string(), key.role, key.syscall, outcome_class(key))).or_insert((u64::MAX, 0));
        row.0 = row.0.min(series.seq);
        row.1 += series.count;
    }
    let mut rows: Vec<_> = rows.into_iter().collect();
    // Named pods first, then as their series came.
    rows.sort_by_key(|((pod, ..), (seq, _))| (!named.contains(pod), *seq));
    rows.into_iter().take(MAX_POD_ROWS).map(|(labels, (_, count))| (labels, count)).collect()
}

/// The calls and latencies of the run: what `metrics.prom` holds.
pub fn render(book: &LatencyBook, run: &RunInfo) -> String {
    let mut out = String::new();
    family(
        &mut out,
        "podstuck_calls_total",
        "counter",
        "Calls completed, counted in the kernel (exact even when events are lost).",
    );
    // The node's calls even with --pod: the metric has no pod label.
    for (syscall, count) in run.node_calls_counted.as_ref().unwrap_or(&run.calls_counted) {
        let _ = writeln!(out, "podstuck_calls_total{{syscall=\"{}\"}} {count}", label(syscall));
    }
    family(
        &mut out,
        "podstuck_call_duration_seconds",
        "histogram",
        "Time from entry to return of the calls of the pods followed (all by default), by actor role, syscall and outcome.",
    );
    for ((role, syscall, outcome), latencies) in node_histograms(book) {
        let labels = format!("role=\"{}\",syscall=\"{}\",outcome=\"{outcome}\"", role.as_str(), syscall_name(syscall));
        for (bound, cumulative) in BUCKETS_S.iter().zip(latencies.buckets) {
            let _ = writeln!(out, "podstuck_call_duration_seconds_bucket{{{labels},le=\"{bound}\"}} {cumulative}");
        }
        let _ = writeln!(out, "podstuck_call_duration_seconds_bucket{{{labels},le=\"+Inf\"}} {}", latencies.count);
        let _ = writeln!(out, "podstuck_call_duration_seconds_sum{{{labels}}} {}", latencies.sum_ns as f64 / 1e9);
        let _ = writeln!(out, "podstuck_call_duration_seconds_count{{{labels}}} {}", latencies.count);
    }
    family(
        &mut out,
        "podstuck_pod_calls_total",
        "counter",
        "Calls of the pods podstuck follows (an active finding, or named by --pod), counted from when it began following them; a pod's series end 10 minutes after its findings resolve.",
    );
    for ((pod, role, syscall, outcome), count) in pod_rows(book, &run.pods) {
        let _ = writeln!(
            out,
            "podstuck_pod_calls_total{{pod_uid=\"{}\",role=\"{}\",syscall=\"{}\",outcome=\"{outcome}\"}} {count}",
            label(&pod),
            role.as_str(),
            syscall_name(syscall)
        );
    }
    family(&mut out, "podstuck_events_seen_total", "counter", "Call events received by podstuck.");
    let _ = writeln!(out, "podstuck_events_seen_total {}", run.events_seen);
    family(
        &mut out,
        "podstuck_events_lost_total",
        "counter",
        "Call events the kernel could not hand over (ring buffer full).",
    );
    let _ = writeln!(out, "podstuck_events_lost_total {}", run.events_lost);
    family(
        &mut out,
        "podstuck_lifecycle_lost_total",
        "counter",
        "Of podstuck_events_lost_total, the process lifecycle's records (CNI plugin execs, SIGTERMs and SIGKILLs, exits) their ring could not keep.",
    );
    let _ = writeln!(out, "podstuck_lifecycle_lost_total {}", run.lifecycle_lost);
    family(
        &mut out,
        "podstuck_calls_outside_series_total",
        "counter",
        "Calls counted while the kernel's series map was full: in the totals and histograms, without their process.",
    );
    let _ = writeln!(out, "podstuck_calls_outside_series_total {}", run.calls_outside_series);
    family(
        &mut out,
        "podstuck_lifecycle_dropped_total",
        "counter",
        "Execs of the node's CNI plugin files set aside as no runtime's work (a pod's process, a parent that is no runtime), by reason: they never reach a pod.",
    );
    for (reason, count) in &run.lifecycle_dropped {
        let _ = writeln!(out, "podstuck_lifecycle_dropped_total{{reason=\"{}\"}} {count}", label(reason));
    }
    family(
        &mut out,
        "podstuck_calls_unproven_total",
        "counter",
        "Failed calls whose path was the caller's word alone (made in a mount namespace where it is not the node's: a pod's own), by reason: set aside, never diagnosed.",
    );
    for (reason, count) in &run.claims_set_aside {
        let _ = writeln!(out, "podstuck_calls_unproven_total{{reason=\"{}\"}} {count}", label(reason));
    }
    family(
        &mut out,
        "podstuck_paths_naming_another_pod_total",
        "counter",
        "Calls whose unproven path named another pod than the caller's (a pod's process making another pod's paths in its own namespace).",
    );
    let _ = writeln!(out, "podstuck_paths_naming_another_pod_total {}", run.claims_naming_another_pod);
    node_reads(&mut out, run);
    out
}

/// How podstuck's reads of the node stand: the queue that keeps the rings
/// read while they wait, the filesystems avoided now (each a series while
/// it is: a few at most, as readers stuck are), those that answered
/// again, and the reads that failed by kind.
fn node_reads(out: &mut String, run: &RunInfo) {
    family(
        out,
        "podstuck_queue_full_total",
        "counter",
        "Times the rings' reader found a queue full (the calls' or the lifecycle's) and left that ring to the kernel until podstuck made room: podstuck fell behind, and the kernel counted what it could not keep in podstuck_events_lost_total.",
    );
    let _ = writeln!(out, "podstuck_queue_full_total {}", run.queue_full);
    family(
        out,
        "podstuck_mount_avoided",
        "gauge",
        "A filesystem podstuck does not read now because a read there has not returned (a hung NFS or FUSE server): read again once it returns, or after a backoff.",
    );
    for (point, fstype) in &run.mounts_avoided {
        let _ =
            writeln!(out, "podstuck_mount_avoided{{mount_point=\"{}\",fstype=\"{}\"}} 1", label(point), label(fstype));
    }
    family(
        out,
        "podstuck_mount_recoveries_total",
        "counter",
        "Avoided filesystems that answered again and are read again.",
    );
    let _ = writeln!(out, "podstuck_mount_recoveries_total {}", run.mounts_recovered);
    family(
        out,
        "podstuck_mount_recovered_avoided_seconds",
        "gauge",
        "How long each of the last filesystems to recover was avoided.",
    );
    for (point, fstype, seconds) in &run.mounts_recovered_last {
        let _ = writeln!(
            out,
            "podstuck_mount_recovered_avoided_seconds{{mount_point=\"{}\",fstype=\"{}\"}} {seconds}",
            label(point),
            label(fstype)
        );
    }
    family(
        out,
        "podstuck_node_read_failures_total",
        "counter",
        "Node reads that did not answer, by kind: gone, denied, timed-out, avoided, too-many, other.",
    );
    for (kind, count) in &run.node_reads_failed {
        let _ = writeln!(out, "podstuck_node_read_failures_total{{kind=\"{}\"}} {count}", label(kind));
    }
}

/// What podstuck costs, for its own alerts: the process, as Prometheus'
/// client libraries name it, and with `--kernel-cost` its kernel programs.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct OwnCost {
    pub process: Option<ProcessStats>,
    pub programs: Vec<ProgramCost>,
}

/// This process as `/proc/self` tells it.
#[derive(Clone, Debug, PartialEq)]
pub struct ProcessStats {
    pub cpu_seconds: f64,
    pub resident_bytes: u64,
    pub virtual_bytes: u64,
    pub open_fds: u64,
    pub max_fds: Option<u64>,
    pub start_time_seconds: f64,
}

impl ProcessStats {
    /// Read now; `None` where /proc cannot say (never the case on a node).
    pub fn now() -> Option<ProcessStats> {
        let me = procfs::process::Process::myself().ok()?;
        let stat = me.stat().ok()?;
        let ticks = procfs::ticks_per_second() as f64;
        let boot = procfs::boot_time_secs().ok()? as f64;
        let max_fds = me.limits().ok().and_then(|l| match l.max_open_files.soft_limit {
            procfs::process::LimitValue::Value(n) => Some(n),
            procfs::process::LimitValue::Unlimited => None,
        });
        Some(ProcessStats {
            cpu_seconds: (stat.utime + stat.stime) as f64 / ticks,
            resident_bytes: stat.rss * procfs::page_size(),
            virtual_bytes: stat.vsize,
            open_fds: me.fd_count().ok()? as u64,
            max_fds,
            start_time_seconds: boot + stat.starttime as f64 / ticks,
        })
    }
}

/// `/metrics` of `--listen`: whether podstuck is up and which, the
/// findings active now, then everything [`render`] says, then its own cost.
pub fn render_endpoint(book: &LatencyBook, run: &RunInfo, findings: &[&Finding], cost: &OwnCost) -> String {
    let node = label(&run.node);
    let mut out = String::new();
    family(&mut out, "podstuck_up", "gauge", "1 while podstuck traces this node.");
    out.push_str("podstuck_up 1\n");
    family(&mut out, "podstuck_build_info", "gauge", "Which podstuck traces, on which node and kernel.");
    let _ = writeln!(
        out,
        "podstuck_build_info{{version=\"{}\",node=\"{node}\",kernel=\"{}\"}} 1",
        label(&run.podstuck_version),
        label(&run.kernel)
    );
    family(
        &mut out,
        "podstuck_findings",
        "gauge",
        "Findings active now (why pods are stuck), by kind, severity and pod UID (\"\" for the node's), with the fix (whole on /findings).",
    );
    for (row, n) in finding_rows(findings) {
        let _ = writeln!(
            out,
            "podstuck_findings{{node=\"{node}\",kind=\"{}\",severity=\"{}\",pod_uid=\"{}\",fix=\"{}\"}} {n}",
            row.kind,
            row.severity,
            label(&row.pod),
            label(&row.fix)
        );
    }
    out.push_str(&render(book, run));
    render_cost(&mut out, cost);
    out
}

/// `/metrics` of a `watch --listen --stay-up` that cannot trace this
/// node: `podstuck_up 0`, why in one word (`reason`: lockdown, no-btf,
/// privileges, tracefs, kernel, load-failed) for the alert that fires once
/// per such node, which podstuck it is, and its own cost.
pub fn render_untraceable(node: &str, version: &str, kernel: &str, reason: &str, cost: &OwnCost) -> String {
    let node = label(node);
    let mut out = String::new();
    family(&mut out, "podstuck_up", "gauge", "1 while podstuck traces this node.");
    out.push_str("podstuck_up 0\n");
    family(
        &mut out,
        "podstuck_cannot_trace",
        "gauge",
        "1 while podstuck runs on this node but cannot trace it; reason in one word, the whole on /findings and in its log.",
    );
    let _ = writeln!(out, "podstuck_cannot_trace{{node=\"{node}\",reason=\"{}\"}} 1", label(reason));
    family(&mut out, "podstuck_build_info", "gauge", "Which podstuck traces, on which node and kernel.");
    let _ = writeln!(
        out,
        "podstuck_build_info{{version=\"{}\",node=\"{node}\",kernel=\"{}\"}} 1",
        label(version),
        label(kernel)
    );
    render_cost(&mut out, cost);
    out
}

fn render_cost(out: &mut String, cost: &OwnCost) {
    if let Some(p) = &cost.process {
        family(out, "process_cpu_seconds_total", "counter", "Total user and system CPU time spent in seconds.");
        let _ = writeln!(out, "process_cpu_seconds_total {}", p.cpu_seconds);
        family(out, "process_resident_memory_bytes", "gauge", "Resident memory size in bytes.");
        let _ = writeln!(out, "process_resident_memory_bytes {}", p.resident_bytes);
        family(out, "process_virtual_memory_bytes", "gauge", "Virtual memory size in bytes.");
        let _ = writeln!(out, "process_virtual_memory_bytes {}", p.virtual_bytes);
        family(out, "process_open_fds", "gauge", "Number of open file descriptors.");
        let _ = writeln!(out, "process_open_fds {}", p.open_fds);
        if let Some(max) = p.max_fds {
            family(out, "process_max_fds", "gauge", "Maximum number of open file descriptors.");
            let _ = writeln!(out, "process_max_fds {max}");
        }
        family(out, "process_start_time_seconds", "gauge", "Start time of the process since unix epoch in seconds.");
        let _ = writeln!(out, "process_start_time_seconds {}", p.start_time_seconds);
    }
    if cost.programs.is_empty() {
        return;
    }
    family(out, "podstuck_program_runs_total", "counter", "Runs of podstuck's kernel programs (--kernel-cost).");
    for p in &cost.programs {
        let _ = writeln!(out, "podstuck_program_runs_total{{program=\"{}\"}} {}", label(&p.name), p.runs);
    }
    family(
        out,
        "podstuck_program_run_seconds_total",
        "counter",
        "Time spent in podstuck's kernel programs (--kernel-cost).",
    );
    for p in &cost.programs {
        let _ = writeln!(
            out,
            "podstuck_program_run_seconds_total{{program=\"{}\"}} {}",
            label(&p.name),
            p.run_time_ns as f64 / 1e9
        );
    }
}

/// A row of `podstuck_findings`.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct FindingRow {
    kind: &'static str,
    severity: &'static str,
    pod: String,
    fix: String,
}

/// A fix on one line, cut to [`FIX_LABEL_CHARS`] characters.
fn fix_label(fix: &str) -> String {
    let one_line = fix.split('\n').map(str::trim).filter(|l| !l.is_empty()).collect::<Vec<_>>().join("; ");
    match one_line.char_indices().nth(FIX_LABEL_CHARS) {
        Some((cut, _)) => format!("{}…", &one_line[..cut]),
        None => one_line,
    }
}

/// Active findings counted by kind, severity and pod, the first
/// [`MAX_FINDING_ROWS`] (findings come most pressing first) with the fix of
/// their first finding; the rest counted by severity under `other`.
fn finding_rows(findings: &[&Finding]) -> Vec<(FindingRow, u64)> {
    let mut rows: Vec<(FindingRow, u64)> = Vec::new();
    let mut folded: BTreeMap<&'static str, u64> = BTreeMap::new();
    for f in findings.iter().filter(|f| f.status == Status::Active) {
        let (kind, severity) = (f.kind.id(), f.severity.as_str());
        let pod = f.pod_uid.as_ref().map(|p| p.to_string()).unwrap_or_default();
        if let Some((_, n)) = rows.iter_mut().find(|(r, _)| r.kind == kind && r.severity == severity && r.pod == pod) {
            *n += 1;
        } else if rows.len() < MAX_FINDING_ROWS {
            rows.push((FindingRow { kind, severity, pod, fix: fix_label(&f.fix) }, 1));
        } else {
            *folded.entry(severity).or_default() += 1;
        }
    }
    for (severity, n) in folded {
        rows.push((
            FindingRow {
                kind: "other",
                severity,
                pod: "other".into(),
                fix: "more findings than /metrics lists: see /findings".into(),
            },
            n,
        ));
    }
    rows
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::{Kind, Severity};
    use crate::export::summary::tests::run_info;
    use crate::identify::pod::PodUid;
    use crate::latency::tests::{event, identity};
    use std::time::{Duration, SystemTime};

    fn pod(n: usize) -> PodUid {
        PodUid::parse(&format!("1b2c3d4e-0000-4000-8000-{n:012x}")).unwrap()
    }

    /// The lines of `text` that are samples.
    fn samples(text: &str) -> Vec<&str> {
        text.lines().filter(|l| !l.is_empty() && !l.starts_with('#')).collect()
    }

    #[test]
    fn buckets_are_cumulative_in_seconds_and_end_with_the_count() {
        let mut book = LatencyBook::new(SystemTime::now());
        for latency in [3_000, 4_000, 50_000, 7_000_000, 2_000_000_000] {
            book.record(&event(Syscall::Rmdir, -16, latency), &identity(Role::Kubelet, Some(pod(1).as_str())));
        }
        let text = render(&book, &run_info());
        let labels = "role=\"kubelet\",syscall=\"rmdir\",outcome=\"EBUSY\"";
        for (le, n) in [("0.000005", 2), ("0.00002", 2), ("0.0001", 3), ("0.01", 4), ("1", 4), ("5", 5), ("+Inf", 5)] {
            assert!(
                text.contains(&format!("podstuck_call_duration_seconds_bucket{{{labels},le=\"{le}\"}} {n}\n")),
                "{le}: {text}"
            );
        }
        assert!(text.contains(&format!("podstuck_call_duration_seconds_count{{{labels}}} 5\n")));
        assert!(text.contains(&format!("podstuck_call_duration_seconds_sum{{{labels}}} 2.007057\n")), "{text}");
        assert!(text.contains("podstuck_calls_total{syscall=\"unlinkat\"} 101\n"));
        assert!(text.contains("podstuck_events_lost_total 0\n"));
        assert!(text.contains("podstuck_lifecycle_lost_total 0\n"));
        assert_eq!(
            samples(&text).iter().filter(|l| l.starts_with("podstuck_call_duration_seconds_bucket")).count(),
            13
        );
        // No pod is followed: no pod in the page.
        assert!(!text.contains(pod(1).as_str()), "{text}");
    }

    #[test]
    fn outcomes_are_the_errnos_that_tell_a_cause_and_error() {
        let mut book = LatencyBook::new(SystemTime::now());
        for errno in [0, -16, -2, -39, -5, -28, 0] {
            book.record(&event(Syscall::Unlink, errno, 1_000), &identity(Role::Runtime, None));
        }
        let text = render(&book, &run_info());
        let count = |outcome: &str| {
            format!("podstuck_call_duration_seconds_count{{role=\"runtime\",syscall=\"unlink\",outcome=\"{outcome}\"}}")
        };
        assert!(text.contains(&format!("{} 2\n", count("ok"))), "{text}");
        assert!(text.contains(&format!("{} 1\n", count("EBUSY"))));
        assert!(text.contains(&format!("{} 1\n", count("ENOENT"))));
        assert!(text.contains(&format!("{} 1\n", count("ENOTEMPTY"))));
        assert!(text.contains(&format!("{} 2\n", count("error"))), "EIO and ENOSPC: {text}");
    }

    #[test]
    fn pods_have_series_only_while_followed_and_a_while_after() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_000_000);
        let mut book = LatencyBook::node_wide(t0);
        let (stuck, named, other) = (pod(1), pod(2), pod(3));
        let mut run = run_info();
        run.pods = vec![named.to_string()];
        let rmdir = |book: &mut LatencyBook, p: &PodUid| {
            book.record(&event(Syscall::Rmdir, -16, 1_000), &identity(Role::Kubelet, Some(p.as_str())))
        };
        for p in [&stuck, &named, &other] {
            rmdir(&mut book, p);
        }
        assert!(!render(&book, &run).contains("podstuck_pod_calls_total{"), "nobody followed yet");
        book.follow([&named], [&stuck], t0);
        for p in [&stuck, &named, &other, &stuck] {
            rmdir(&mut book, p);
        }
        let text = render(&book, &run);
        let row = |p: &PodUid| {
            format!("podstuck_pod_calls_total{{pod_uid=\"{p}\",role=\"kubelet\",syscall=\"rmdir\",outcome=\"EBUSY\"}}")
        };
        assert!(text.contains(&format!("{} 2\n", row(&stuck))), "counted from when followed: {text}");
        assert!(text.contains(&format!("{} 1\n", row(&named))));
        assert!(!text.contains(other.as_str()));
        let node_count =
            "podstuck_call_duration_seconds_count{role=\"kubelet\",syscall=\"rmdir\",outcome=\"EBUSY\"} 7\n";
        assert!(text.contains(node_count), "every call in the node's: {text}");
        // Resolved: kept a while, then gone, its calls still the node's.
        book.follow([&named], [], t0 + Duration::from_secs(5));
        assert!(render(&book, &run).contains(&row(&stuck)));
        book.follow([&named], [], t0 + Duration::from_secs(5) + crate::latency::POD_SERIES_LINGER);
        let text = render(&book, &run);
        assert!(!text.contains(stuck.as_str()), "{text}");
        assert!(text.contains(&row(&named)));
        assert!(text.contains(node_count), "{text}");
        assert_eq!(book.series().filter(|(k, _)| k.pod.is_some()).count(), 1, "only the named pod's series left");
    }

    fn finding(kind: Kind, n: Option<usize>, status: Status) -> Finding {
        let mut f = Finding::new(kind, "/x", Severity::Critical, SystemTime::UNIX_EPOCH);
        f.pod_uid = n.map(pod);
        f.status = status;
        f.fix = format!("umount /var/lib/kubelet/pods/{n:?}/volumes/\"x\"\nrmdir y");
        f
    }

    #[test]
    fn the_endpoint_says_up_the_findings_with_their_fix_and_the_cost() {
        let mut run = run_info();
        run.node = "node-\"7".into();
        let mut findings = vec![
            finding(Kind::VolumeStillMounted, Some(1), Status::Active),
            finding(Kind::VolumeStillMounted, Some(1), Status::Active),
            finding(Kind::MountHeld, Some(1), Status::Resolved),
            finding(Kind::DiskFull, None, Status::Active),
        ];
        findings.extend((2..MAX_FINDING_ROWS + 12).map(|n| finding(Kind::HungCall, Some(n), Status::Active)));
        let refs: Vec<&Finding> = findings.iter().collect();
        let cost = OwnCost {
            process: ProcessStats::now(),
            programs: vec![ProgramCost { name: "unlink_exit".into(), runs: 10, run_time_ns: 2_500 }],
        };
        let text = render_endpoint(&LatencyBook::new(SystemTime::now()), &run, &refs, &cost);
        assert!(text.starts_with("# HELP podstuck_up "), "{text}");
        assert!(text.contains("\npodstuck_up 1\n"));
        assert!(text.contains("\npodstuck_build_info{version=\"0.1.0\",node=\"node-\\\"7\","), "{text}");
        let node = "node=\"node-\\\"7\"";
        let fix = "umount /var/lib/kubelet/pods/Some(1)/volumes/\\\"x\\\"; rmdir y";
        assert!(text.contains(&format!("podstuck_findings{{{node},kind=\"volume-still-mounted\",severity=\"critical\",pod_uid=\"{}\",fix=\"{fix}\"}} 2\n", pod(1))), "{text}");
        assert!(
            text.contains(&format!("podstuck_findings{{{node},kind=\"disk-full\",severity=\"critical\",pod_uid=\"\","))
        );
        assert!(!text.contains("mount-held"), "resolved findings are not current");
        let rows: Vec<&str> = samples(&text).into_iter().filter(|l| l.starts_with("podstuck_findings{")).collect();
        assert_eq!(rows.len(), MAX_FINDING_ROWS + 1, "{rows:#?}");
        assert!(rows.last().unwrap().contains("kind=\"other\",severity=\"critical\",pod_uid=\"other\""), "{rows:#?}");
        assert!(rows.last().unwrap().ends_with(" 12"), "{rows:#?}");
        for family in [
            "process_cpu_seconds_total ",
            "process_resident_memory_bytes ",
            "process_open_fds ",
            "process_start_time_seconds ",
        ] {
            assert!(text.contains(&format!("\n{family}")), "{family}: {text}");
        }
        assert!(text.contains("podstuck_program_runs_total{program=\"unlink_exit\"} 10\n"));
        assert!(text.contains("podstuck_program_run_seconds_total{program=\"unlink_exit\"} 0.0000025\n"), "{text}");
        assert!(text.contains(&render(&LatencyBook::new(SystemTime::now()), &run)));
    }

    #[test]
    fn a_long_fix_is_cut_on_a_character() {
        let long = "é".repeat(300);
        let cut = fix_label(&long);
        assert_eq!(cut.chars().count(), FIX_LABEL_CHARS + 1);
        assert!(cut.ends_with('…'));
        assert_eq!(fix_label("a\n\n  b  \n"), "a; b");
    }

    /// The worst any node can do: every role, syscall and errno, more pods
    /// followed than kept, more findings than rows, the longest fixes and
    /// pod labels: the page stays within its promise.
    #[test]
    fn the_page_stays_within_500_series_and_100_kb_whatever_comes() {
        let mut book = LatencyBook::node_wide(SystemTime::now());
        let pods: Vec<PodUid> = (1..200).map(pod).collect();
        book.follow(&pods[..10], &pods[10..], SystemTime::now());
        let roles = [Role::Kubelet, Role::Runtime, Role::Shim, Role::Runc, Role::CsiPlugin, Role::Systemd, Role::Other];
        for (i, p) in pods.iter().enumerate() {
            for syscall in Syscall::ALL {
                for role in roles {
                    for errno in [0, 1, 2, 5, 13, 16, 22, 28, 39, 30 + i as i64] {
                        book.record(&event(syscall, -errno, 1 << (i % 40)), &identity(role, Some(p.as_str())));
                    }
                }
            }
        }
        let findings: Vec<Finding> = (0..2_000)
            .map(|n| {
                let mut f = finding(
                    [Kind::VolumeStillMounted, Kind::HungCall, Kind::CgroupBusy][n % 3],
                    Some(n),
                    Status::Active,
                );
                f.severity = [Severity::Critical, Severity::Warning, Severity::Info][n % 3];
                f.fix = "\"".repeat(1000);
                f
            })
            .collect();
        let refs: Vec<&Finding> = findings.iter().collect();
        let mut run = run_info();
        run.node = "n".repeat(253);
        let cost = OwnCost {
            process: ProcessStats::now(),
            programs: (0..12).map(|n| ProgramCost { name: format!("p{n}"), runs: 1, run_time_ns: 1 }).collect(),
        };
        let text = render_endpoint(&book, &run, &refs, &cost);
        let series = samples(&text).len();
        assert!(series <= MAX_SERIES, "{series} series");
        assert!(text.len() <= 100 * 1024, "{} bytes", text.len());
        // Every call is still counted, in the node's histograms.
        let counted: u64 = samples(&text)
            .iter()
            .filter(|l| l.starts_with("podstuck_call_duration_seconds_count"))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<u64>().unwrap())
            .sum();
        assert_eq!(counted, book.series().filter(|(_, s)| !s.counts_only).map(|(_, s)| s.count).sum::<u64>());
        let histograms =
            samples(&text).iter().filter(|l| l.starts_with("podstuck_call_duration_seconds_count")).count();
        assert!(histograms <= MAX_HISTOGRAMS + 2 * Syscall::ALL.len(), "{histograms}");
    }

    #[test]
    fn label_values_are_escaped() {
        assert_eq!(label("a\"b\\c\nd"), "a\\\"b\\\\c\\nd");
    }
}
