//! `podstuck report DIR`: reads a run's histogram files back and prints,
//! per series, a percentile table and a log2 histogram in the layout BCC
//! and bpftrace users know (`usecs : count distribution`), or, with
//! `--json`, the same for machines.

use std::fmt::Write as _;
use std::path::Path;

use anyhow::{Context, Result};
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::export::summary::{SeriesSummary, Summary};
use crate::export::{hlog, HLOG, SUMMARY};
use crate::output::latency_text;

/// One row of a log2 histogram: values from `low` to `high` microseconds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Log2Row {
    pub low: u64,
    pub high: u64,
    pub count: u64,
}

/// Log2 buckets of microseconds, BCC style: 0 -> 1, 2 -> 3, 4 -> 7, ...,
/// from the first to the last non-empty bucket.
pub fn log2_usecs(histogram: &Histogram<u64>) -> Vec<Log2Row> {
    let mut counts = [0u64; 64];
    for value in histogram.iter_recorded() {
        let us = value.value_iterated_to() / 1_000;
        let bucket = if us < 2 { 0 } else { 63 - us.leading_zeros() as usize };
        counts[bucket] += value.count_at_value();
    }
    let (Some(first), Some(last)) = (counts.iter().position(|&c| c > 0), counts.iter().rposition(|&c| c > 0)) else {
        return Vec::new();
    };
    (first..=last)
        .map(|k| Log2Row {
            low: if k == 0 { 0 } else { 1 << k },
            high: (1u64 << (k + 1)) - 1,
            count: counts[k],
        })
        .collect()
}

/// The rows as BCC prints them: 40 stars for the fullest bucket.
pub fn render_log2(rows: &[Log2Row]) -> String {
    let mut out = String::from("     usecs               : count     distribution\n");
    let peak = rows.iter().map(|r| r.count).max().unwrap_or(0).max(1);
    for row in rows {
        let stars = (row.count * 40).div_ceil(peak) as usize;
        let _ = writeln!(
            out,
            "{:>10} -> {:<10} : {:<9} |{:<40}|",
            row.low,
            row.high,
            row.count,
            "*".repeat(stars.min(40))
        );
    }
    out
}


#[derive(Serialize)]
struct SeriesReport<'a> {
    #[serde(flatten)]
    summary: &'a SeriesSummary,
    /// Calls found in latency.hlog (equal to `count` once an interval has
    /// been written after the last call).
    count_in_log: u64,
    log2_usecs: Vec<Log2Row>,
}

#[derive(Serialize)]
struct Report<'a> {
    run: &'a crate::export::RunInfo,
    series: Vec<SeriesReport<'a>>,
}

/// Prints the report of the run whose files are in `dir`.
pub fn report(dir: &Path, json: bool) -> Result<()> {
    print!("{}", render(dir, json)?);
    Ok(())
}

pub fn render(dir: &Path, json: bool) -> Result<String> {
    let summary_path = dir.join(SUMMARY);
    let text = std::fs::read_to_string(&summary_path).with_context(|| {
        format!("reading {}: is {} the --histograms directory of a podstuck watch run?", summary_path.display(), dir.display())
    })?;
    let summary: Summary =
        serde_json::from_str(&text).with_context(|| format!("{} is not a podstuck summary", summary_path.display()))?;
    let log_path = dir.join(HLOG);
    let log = std::fs::read(&log_path).with_context(|| format!("reading {}", log_path.display()))?;
    let intervals = hlog::read(&log).with_context(|| format!("reading {}", log_path.display()))?;
    let totals = hlog::totals_by_tag(&intervals)?;

    let series: Vec<SeriesReport> = summary
        .series
        .iter()
        .map(|s| {
            let histogram = totals.get(&s.tag);
            SeriesReport {
                summary: s,
                count_in_log: histogram.map(|h| h.len()).unwrap_or(0),
                log2_usecs: histogram.map(log2_usecs).unwrap_or_default(),
            }
        })
        .collect();
    if json {
        let report = Report { run: &summary.run, series };
        return Ok(serde_json::to_string_pretty(&report)? + "\n");
    }

    let run = &summary.run;
    let scope = if run.pods.is_empty() { "the whole node".to_string() } else { format!("pods {}", run.pods.join(", ")) };
    let mut out = format!(
        "podstuck {} on {} (kernel {}), {} for {:.1} s, {}: {} events seen, {} lost{}\n",
        run.podstuck_version,
        run.node,
        run.kernel,
        run.started,
        run.duration_s,
        scope,
        run.events_seen,
        run.events_lost,
        if run.finished { "" } else { " (run did not finish: files of its last interval)" }
    );
    for s in &series {
        let pod = s.summary.pod_uid.as_deref().map(|p| format!("pod {p}")).unwrap_or_else(|| "no pod".into());
        let _ = write!(
            out,
            "\n{} {}, actor {}, {}: {} calls\n  min {}  mean {}  p50 {}  p90 {}  p99 {}  p99.9 {}  max {}\n",
            s.summary.syscall,
            s.summary.outcome,
            s.summary.role,
            pod,
            s.summary.count,
            latency_text(s.summary.min_ns),
            latency_text(s.summary.mean_ns as u64),
            latency_text(s.summary.p50_ns),
            latency_text(s.summary.p90_ns),
            latency_text(s.summary.p99_ns),
            latency_text(s.summary.p99_9_ns),
            latency_text(s.summary.max_ns),
        );
        out.push_str(&render_log2(&s.log2_usecs));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::summary::tests::run_info;
    use crate::export::Exporter;
    use crate::identify::actor::Role;
    use crate::latency::tests::{event, identity};
    use crate::latency::{new_histogram, LatencyBook};
    use crate::test_support::TempDir;
    use podstuck_common::Syscall;
    use std::time::{Duration, SystemTime};

    #[test]
    fn log2_rows_follow_bcc() {
        let mut h = new_histogram();
        for us in [0u64, 1, 2, 3, 5, 7, 9, 1000] {
            h.record(us * 1_000 + 1).unwrap();
        }
        let rows = log2_usecs(&h);
        assert_eq!(rows[0], Log2Row { low: 0, high: 1, count: 2 });
        assert_eq!(rows[1], Log2Row { low: 2, high: 3, count: 2 });
        assert_eq!(rows[2], Log2Row { low: 4, high: 7, count: 2 });
        assert_eq!(rows[3], Log2Row { low: 8, high: 15, count: 1 });
        assert_eq!(rows.last().unwrap(), &Log2Row { low: 512, high: 1023, count: 1 });
        let text = render_log2(&rows);
        assert!(text.starts_with("     usecs               : count     distribution\n"));
        assert!(text.contains("         0 -> 1          : 2         |****************************************|"), "{text}");
    }

    #[test]
    fn reads_back_what_watch_wrote() {
        let tmp = TempDir::new("report");
        let t0 = SystemTime::now();
        let mut exporter = Exporter::open(&tmp.0, false, t0).unwrap();
        let mut book = LatencyBook::new(t0);
        for i in 0..300u64 {
            book.record(&event(Syscall::Unlink, 0, 2_000 + i), &identity(Role::Other, None));
        }
        book.record(&event(Syscall::Umount2, -16, 9_000_000), &identity(Role::Runtime, None));
        exporter.refresh(&mut book, &run_info(), t0 + Duration::from_secs(5)).unwrap();

        let text = render(&tmp.0, false).unwrap();
        assert!(text.contains("unlink ok, actor other, no pod: 300 calls"), "{text}");
        assert!(text.contains("umount2 EBUSY, actor runtime, no pod: 1 calls"), "{text}");
        assert!(text.contains("       2 -> 3          : 300"), "{text}");
        let json: serde_json::Value = serde_json::from_str(&render(&tmp.0, true).unwrap()).unwrap();
        assert_eq!(json["series"][0]["count"], json["series"][0]["count_in_log"]);
        assert_eq!(json["run"]["node"], "node-1");
        assert!(json["series"][1]["log2_usecs"].as_array().unwrap().iter().any(|r| r["count"] == 1));
    }

    #[test]
    fn a_directory_without_files_says_what_it_expected() {
        let tmp = TempDir::new("report-empty");
        let err = render(&tmp.0, false).unwrap_err().to_string();
        assert!(err.contains("--histograms directory"), "{err}");
    }
}
