//! End-to-end: the soak, short (see podstuck_tests::soak). The DaemonSet's
//! `podstuck watch --listen ADDR --concurrent` through a minute and a half
//! of pod churn, a pod about every 0.1 s, sampled every 5 s; then a pod
//! stuck for real. Asserts what does not depend on the machine's speed:
//! every scrape within 500 series and 100 KiB, the stuck pods named (one
//! stuck through the churn, one after it), memory under a debug build's
//! ceiling, no fd leaked, podstuck still well; and a real Prometheus with
//! deploy/'s rules scraping it shows the stuck pod's alert, none of its own.
//! `cargo xtask soak` runs the long one against the release build.
//!
//! Runs as root; see `kernel_test!` for the skip rule.

use std::time::Duration;

use podstuck_tests::actors::actor_binary;
use podstuck_tests::scrape::Prometheus;
use podstuck_tests::soak::{self, SoakOptions, FD_MARGIN, MAX_SCRAPE_BYTES, MAX_SERIES};
use podstuck_tests::*;

/// RSS a debug build may reach: its code and symbols alone are some tens
/// of MB more than a release build's.
const DEBUG_RSS_CEILING_MB: f64 = 150.0;

kernel_test! {
    fn the_always_on_mode_stays_bounded_through_a_pod_churn(test) {
        let scratch = test.scratch();
        let mut options = SoakOptions::new(podstuck_binary(), actor_binary(), scratch.path().to_path_buf(), Duration::from_secs(90));
        options.sample_every = Duration::from_secs(5);
        // The cluster's Prometheus, with the rules of deploy/, scraping the
        // soaking podstuck: the stuck pods alert (pending: `for` is 5 min)
        // and podstuck's own health and cost do not.
        let rules = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/monitoring/prometheus-rules.yaml");
        let Some(prometheus) = Prometheus::start_with_rules(&scratch.path().join("prometheus"), options.listen, &[&rules]) else { return };
        let alerts = |stuck: &str| -> anyhow::Result<()> {
            let pending = format!(r#"ALERTS{{alertname="PodStuckOnNode", alertstate="pending", pod_uid="{stuck}", kind="volume-still-mounted"}}"#);
            prometheus.await_samples(&pending, Duration::from_secs(60), |s| s.len() == 1);
            let others = prometheus.query(r#"ALERTS{alertname=~"Podstuck.*"}"#);
            let unexplained: Vec<&serde_json::Value> = others.iter().filter(|a| !explained(&prometheus, a)).collect();
            anyhow::ensure!(unexplained.is_empty(), "podstuck's own alerts, with nothing measured behind them: {unexplained:?}");
            Ok(())
        };
        let report = soak::run(&options, |s| eprintln!("{}", soak::sample_line(s)), alerts).unwrap_or_else(|e| panic!("{e:#}"));
        let table = report.markdown_table();
        eprintln!(
            "{} pods churned in {:.1} s ({:.1} a second), cgroups {}; stuck pod on /findings after {:?}, in podstuck_findings after {:?}\n{table}",
            report.pods,
            report.churned_for.as_secs_f64(),
            report.pods_per_s(),
            report.cgroups,
            report.stuck_in_findings,
            report.stuck_in_metrics
        );
        assert!(report.pods > 0, "no pod churned");

        for s in &report.samples {
            assert!(s.series <= MAX_SERIES, "{} series at {}:\n{table}", s.series, soak::minutes(s.at));
            assert!(s.bytes <= MAX_SCRAPE_BYTES, "a scrape of {} bytes at {}:\n{table}", s.bytes, soak::minutes(s.at));
            assert!(s.rss_mb() < DEBUG_RSS_CEILING_MB, "{:.1} MB resident at {}:\n{table}", s.rss_mb(), soak::minutes(s.at));
        }
        assert!(report.stuck_in_findings.is_some(), "pod {} not on /findings:\n{}", report.stuck_pod, report.stderr);
        assert!(report.stuck_in_metrics.is_some(), "pod {} not in podstuck_findings:\n{}", report.stuck_pod, report.stderr);
        assert_eq!(report.stuck_through_churn_named, Some(true), "the pod stuck through the churn, at its end:\n{}", report.stderr);
        let (first, last) = (report.first().fds, report.last().fds);
        assert!(last <= first + FD_MARGIN, "{first} fds at the start, {last} at the end:\n{table}");
        assert_eq!(report.healthz, 200, "GET /healthz at the end");
        assert!(report.exited_cleanly, "podstuck ended {} on SIGTERM: {}", report.exit, report.stderr);
    }
}

/// Whether podstuck's own alert `alert` (pending: every rule waits minutes)
/// says what this machine really did to it, measured by Prometheus
/// itself: a scrape that did not answer within its 1 s (`PodstuckDown`),
/// or events lost (`PodstuckLosingEvents`). A whole run's machine is busy
/// with builds and emulated kernels beside this test, and both are right
/// to say so; any other, or these with nothing behind them, is a rule that
/// fires on a podstuck that is well.
fn explained(prometheus: &Prometheus, alert: &serde_json::Value) -> bool {
    let measured = match alert["metric"]["alertname"].as_str() {
        Some("PodstuckDown") => r#"min_over_time(up{job="podstuck"}[10m]) == 0"#,
        Some("PodstuckLosingEvents") => "max_over_time(podstuck_events_lost_total[10m]) > 0",
        _ => return false,
    };
    let behind = prometheus.query(measured);
    eprintln!(
        "podstuck's own alert {}: {}",
        alert["metric"],
        if behind.is_empty() {
            "nothing measured behind it"
        } else {
            "measured here (the machine's load), not a rule's fault"
        }
    );
    !behind.is_empty()
}
