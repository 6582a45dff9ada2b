//! End-to-end: `podstuck watch --histograms DIR` on a real traced workload
//! writes files that standard readers accept, with exact counts; SIGKILL
//! leaves readable files; a bad directory fails at start; `podstuck report`
//! reads them back.

use std::collections::HashMap;
use std::ffi::OsStr;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use base64::Engine as _;
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::Histogram;
use podstuck_tests::*;
use serde_json::Value;

/// Calls per tag in latency.hlog, read with the hdrhistogram crate's own
/// interval-log reader.
fn hlog_counts(dir: &Path) -> HashMap<String, u64> {
    let bytes = std::fs::read(dir.join("latency.hlog")).expect("latency.hlog");
    let text = String::from_utf8_lossy(&bytes);
    assert!(text.starts_with("#[Histogram log format version 1.3]"), "{text}");
    assert!(text.contains("#[StartTime: ") && text.contains("#[BaseTime: "));
    let mut counts = HashMap::new();
    let mut deserializer = Deserializer::new();
    for entry in IntervalLogIterator::new(&bytes) {
        if let LogEntry::Interval(line) = entry.expect("a well-formed log line") {
            let tag = line.tag().expect("every line is tagged").as_str().to_string();
            assert!(!tag.contains(',') && !tag.contains(' '), "{tag}");
            let payload = base64::engine::general_purpose::STANDARD.decode(line.encoded_histogram()).unwrap();
            let h: Histogram<u64> = deserializer.deserialize(&mut &payload[..]).expect("a V2 compressed histogram");
            *counts.entry(tag).or_default() += h.len();
        }
    }
    counts
}

/// Calls per tag as the Java and the Python HdrHistogram log readers see
/// them (`tests/readers/`). `cargo xtask test` installs both; without them
/// the test fails (an empty list where skips are allowed).
fn other_readers_counts(dir: &Path) -> Vec<(&'static str, HashMap<String, u64>)> {
    let readers = Path::new(env!("CARGO_MANIFEST_DIR")).join("readers");
    let log = dir.join("latency.hlog");
    let java_jar = Path::new("/usr/share/java/hdrhistogram.jar");
    let python = std::env::var_os("PODSTUCK_PYTHON");
    if !java_jar.exists() || python.is_none() {
        return missing(
            &prerequisite::this_test(),
            "the Java and Python HdrHistogram readers (/usr/share/java/hdrhistogram.jar, $PODSTUCK_PYTHON)",
            "run `cargo xtask test`: it installs libhdrhistogram-java and a venv with the Python reader",
        );
    }
    let parse = |out: std::process::Output| -> HashMap<String, u64> {
        assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
        String::from_utf8_lossy(&out.stdout)
            .lines()
            .filter_map(|l| l.rsplit_once(' ').map(|(tag, n)| (tag.to_string(), n.parse().unwrap())))
            .collect()
    };
    let java = Command::new("java")
        .arg("-cp")
        .arg(java_jar)
        .arg(readers.join("ReadHlog.java"))
        .arg(&log)
        .output()
        .expect("run java");
    let py = Command::new(python.unwrap()).arg(readers.join("read_hlog.py")).arg(&log).output().expect("run python");
    vec![("java", parse(java)), ("python", parse(py))]
}

/// metrics.prom through a Prometheus text-format parser: the followed
/// pods' calls by (pod, syscall, outcome), and the node's histogram counts
/// by (role, syscall, outcome) under pod "".
fn prom_counts(dir: &Path) -> HashMap<(String, String, String), f64> {
    let text = std::fs::read_to_string(dir.join("metrics.prom")).expect("metrics.prom");
    let lines = text.lines().map(|l| Ok(l.to_string()));
    let scrape = prometheus_parse::Scrape::parse(lines).expect("metrics.prom parses");
    let mut counts = HashMap::new();
    for sample in &scrape.samples {
        let key = |k: &str| sample.labels.get(k).unwrap_or("").to_string();
        let (prometheus_parse::Value::Untyped(v) | prometheus_parse::Value::Counter(v)) = sample.value else {
            continue;
        };
        match sample.metric.as_str() {
            "podstuck_pod_calls_total" => counts.insert((key("pod_uid"), key("syscall"), key("outcome")), v),
            "podstuck_call_duration_seconds_count" => {
                counts.insert((format!("node {}", key("role")), key("syscall"), key("outcome")), v)
            }
            _ => None,
        };
    }
    assert!(scrape.samples.iter().any(|s| s.metric == "podstuck_events_lost_total"));
    counts
}

/// latency.svg as XML: the number of percentile curves.
fn svg_curves(dir: &Path) -> usize {
    let text = std::fs::read_to_string(dir.join("latency.svg")).expect("latency.svg");
    let doc = roxmltree::Document::parse(&text).expect("latency.svg is well-formed XML");
    assert_eq!(doc.root_element().tag_name().name(), "svg");
    doc.descendants().filter(|n| n.has_tag_name("polyline") && n.attribute("class") == Some("curve")).count()
}

fn summary(dir: &Path) -> Value {
    summary_json(dir).expect("summary.json, whole JSON")
}

kernel_test! {
    fn ten_thousand_unlinks_are_counted_exactly_in_every_file(test) {
        let scratch = test.scratch();
        let (root, pod, volume) = pod_with_empty_dir(scratch.path(), "scratch");
        let uid = pod.uid();
        let out = scratch.path().join("histograms");
        let watch = Watch::start(&["--pod", uid, "--kubelet-root", root.arg(), "--histograms", text(&out), "--interval", "1s"]);

        let done = actor().args([OsStr::new("unlink-many"), volume.as_os_str(), OsStr::new("10000")]).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&done.stdout).trim(), "unlink-many 10000 unlinked, 0 failed");
        let tag = format!("unlink/ok/other/{uid}");
        // Most calls are counted in the kernel, not streamed: wait for the files.
        let finished = stop_when(watch, |_| series_count(&out, &tag) >= 10_000);
        assert!(finished.status.success(), "{}", finished.stderr);
        assert_eq!(finished.end.as_ref().unwrap()["events_lost"], 0, "no loss expected for 10k calls");
        let streamed: u64 = finished.events.iter().filter(|e| e["syscall"] == UNLINK_CALL).map(|e| e["represents"].as_u64().unwrap()).sum();
        assert!(streamed <= 10_000, "records carry no more calls than were made");
        assert!(finished.events.iter().filter(|e| e["syscall"] == UNLINK_CALL).count() < 10_000, "a storm is not streamed call by call");

        let summary = summary(&out);
        let series: Vec<&Value> = summary["series"].as_array().unwrap().iter().collect();
        let ours = series.iter().find(|s| s["tag"] == tag.as_str()).unwrap_or_else(|| panic!("no {tag} in {summary}"));
        assert_eq!(ours["count"], 10_000);
        assert_eq!(ours["errors"], 0);
        for p in ["min_ns", "p50_ns", "p90_ns", "p99_ns", "p99_9_ns", "max_ns"] {
            assert!(ours[p].as_u64().unwrap() > 0, "{p}");
        }
        assert!(ours["p50_ns"].as_u64() <= ours["p99_ns"].as_u64());
        assert_eq!(summary["run"]["finished"], true);
        assert_eq!(summary["run"]["pods"], serde_json::json!([uid]));
        // With --pod the run's counts are the pod's calls, the node's apart.
        assert_eq!(summary["run"]["calls_counted"]["unlink"], 10_000, "{}", summary["run"]);
        assert!(summary["run"]["node_calls_counted"]["unlink"].as_u64().unwrap() >= 10_000, "{}", summary["run"]);
        let end = finished.end.as_ref().unwrap();
        assert_eq!(end["calls"]["unlink"], 10_000, "{end}");
        assert!(end["node_calls"].as_u64().unwrap() >= 10_000, "{end}");

        assert_eq!(hlog_counts(&out)[&tag], 10_000);
        for (reader, counts) in other_readers_counts(&out) {
            assert_eq!(counts.get(&tag), Some(&10_000), "{reader} reader: {counts:?}");
        }
        let prom = prom_counts(&out);
        assert_eq!(prom[&(uid.to_string(), "unlink".to_string(), "ok".to_string())], 10_000.0, "{prom:?}");
        assert_eq!(prom[&("node other".to_string(), "unlink".to_string(), "ok".to_string())], 10_000.0, "{prom:?}");
        assert_eq!(svg_curves(&out), series.len());

        // podstuck report reads the same back.
        let report = Command::new(podstuck_binary()).arg("report").arg(&out).output().unwrap();
        let text = String::from_utf8_lossy(&report.stdout);
        assert!(report.status.success(), "{}", String::from_utf8_lossy(&report.stderr));
        assert!(text.contains(&format!("unlink ok, actor other, pod {uid}: 10000 calls")), "{text}");
        assert!(text.contains("usecs               : count     distribution"), "{text}");
        let json = Command::new(podstuck_binary()).arg("report").arg(&out).arg("--json").output().unwrap();
        let json: Value = serde_json::from_slice(&json.stdout).expect("report --json is JSON");
        let ours = json["series"].as_array().unwrap().iter().find(|s| s["tag"] == tag.as_str()).unwrap();
        assert_eq!(ours["count_in_log"], 10_000);
        let log2_total: u64 = ours["log2_usecs"].as_array().unwrap().iter().map(|r| r["count"].as_u64().unwrap()).sum();
        assert_eq!(log2_total, 10_000);
    }
}

kernel_test! {
    fn every_call_is_counted_when_the_ring_buffer_overflows(test) {
        let scratch = test.scratch();
        let (root, pod, volume) = pod_with_empty_dir(scratch.path(), "scratch");
        let uid = pod.uid();
        let out = scratch.path().join("histograms");
        // Every call streamed into a one-page ring buffer: most records cannot fit.
        let watch = Watch::start(&[
            "--kubelet-root", root.arg(), "--histograms", text(&out), "--interval", "1s", "--every-call", "--ring-buffer-kib", "4",
        ]);
        let done = actor().args([OsStr::new("unlink-many"), volume.as_os_str(), OsStr::new("20000")]).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&done.stdout).trim(), "unlink-many 20000 unlinked, 0 failed");
        let tag = format!("unlink/ok/other/{uid}");
        let finished = stop_when(watch, |_| series_count(&out, &tag) >= 20_000);
        assert!(finished.status.success(), "{}", finished.stderr);
        let end = finished.end.as_ref().unwrap();
        assert!(end["events_lost"].as_u64().unwrap() > 0, "the ring buffer was meant to overflow: {end}");
        assert_eq!(series_count(&out, &tag), 20_000, "counted exactly despite {} records lost", end["events_lost"]);
        assert_eq!(hlog_counts(&out)[&tag], 20_000);
        assert!(summary(&out)["run"]["events_lost"].as_u64().unwrap() > 0, "the loss is in the files too");
    }
}

kernel_test! {
    fn sigkill_mid_run_leaves_readable_files(test) {
        let scratch = test.scratch();
        let work = scratch.path().join("work");
        std::fs::create_dir(&work).unwrap();
        let out = scratch.path().join("histograms");
        let watch = Watch::start(&["--histograms", text(&out), "--interval", "1s", "--syscall", UNLINK_CALL]);
        let ran = actor().args([OsStr::new("unlink-many"), work.as_os_str(), OsStr::new("500")]).output().unwrap();
        assert!(ran.status.success());
        // Wait until the files hold all 500 calls (an interval can close
        // halfway through them), then kill.
        wait_until("the 500 calls written", Duration::from_secs(20), || {
            out.join("summary.json").exists()
                && summary(&out)["series"].as_array().is_some_and(|all| {
                    all.iter().filter(|s| s["syscall"] == UNLINK_CALL).filter_map(|s| s["count"].as_u64()).sum::<u64>() >= 500
                })
        });
        let killed = watch.stop(libc::SIGKILL);
        assert!(!killed.status.success());

        let summary = summary(&out);
        assert_eq!(summary["run"]["finished"], false, "the files say the run did not finish");
        let counted: u64 = summary["series"].as_array().unwrap().iter().map(|s| s["count"].as_u64().unwrap()).sum();
        assert!(counted >= 500, "{summary}");
        let logged: u64 = hlog_counts(&out).values().sum();
        assert!(logged >= 500);
        assert!(!prom_counts(&out).is_empty());
        assert!(svg_curves(&out) >= 1);
        let leftovers: Vec<_> = std::fs::read_dir(&out).unwrap().flatten().filter(|e| e.file_name().to_string_lossy().ends_with(".tmp")).collect();
        assert!(leftovers.is_empty() || leftovers.len() == 1, "at most the file being replaced at the kill");
    }
}

kernel_test! {
    fn a_bad_output_directory_fails_at_start(test) {
        let scratch = test.scratch();
        let earlier = scratch.path().join("earlier");
        std::fs::create_dir(&earlier).unwrap();
        std::fs::write(earlier.join("summary.json"), b"{\"from\":\"an earlier run\"}").unwrap();
        let earlier_arg = text(&earlier);
        let stderr = podstuck_refuses(&["watch", "--concurrent", "--histograms", earlier_arg]);
        assert!(stderr.contains("--force") && stderr.contains("summary.json"), "{stderr}");
        assert_eq!(std::fs::read(earlier.join("summary.json")).unwrap(), b"{\"from\":\"an earlier run\"}", "kept");

        // A read-only filesystem: refused before tracing starts.
        let readonly = scratch.path().join("ro");
        let _ro = TmpfsMount::new(&readonly, "size=1m,ro");
        let stderr = podstuck_refuses(&["watch", "--concurrent", "--histograms", text(&readonly.join("out"))]);
        assert!(stderr.contains("writable"), "{stderr}");

        // --force takes over the earlier directory.
        let watch = Watch::start(&["--histograms", earlier_arg, "--force", "--interval", "1s"]);
        let done = watch.stop(libc::SIGINT);
        assert!(done.status.success(), "{}", done.stderr);
        assert_eq!(summary(&earlier)["run"]["finished"], true);
    }
}
