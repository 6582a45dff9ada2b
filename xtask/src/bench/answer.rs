//! The bench's "Time to answer": for each scenario of the demo lab, how
//! long after its first failing call (or signal, or plugin exit) podstuck
//! tells it, and tells it confirmed. Each round is one `podstuck demo
//! --json`, its lines stamped as they arrive; a finding's `first_seen` is
//! the kernel's time of the first call it is about.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, Read};
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::SystemTime;

use anyhow::{bail, Context, Result};

use super::{median, say};

/// The section's heading in BENCHMARKS.md.
pub const HEADING: &str = "## Time to answer";

/// How long each round's demo traces.
const DEMO_DURATION: &str = "20s";

/// The answer every cause aims at: confirmed this soon after the call that
/// proves it (the last call its confirmed line counts), whether one call
/// proves it or a retry on a daemon's rhythm does.
const TARGET_AFTER_PROOF_S: f64 = 0.05;

/// Each finding of the demo and what makes it confirmed.
const SCENARIOS: [(&str, &str); 9] = [
    ("volume-still-mounted", "the mount table, read at kubelet's first EBUSY"),
    ("immutable-file", "the inode's flags, read at dockerd's first EPERM"),
    (
        "dir-not-empty",
        "kubelet's retry (every 2 s: a first ENOTEMPTY is how every RemoveAll starts), then the directory's entries",
    ),
    ("mount-held", "a second EBUSY (containerd retries 50 ms apart), then who holds the mount"),
    ("removal-storm", "the storm's count and rate over its first 2 s, then its tree read"),
    ("cgroup-busy", "kubelet's second rmdir (every 2 s), then cgroup.procs"),
    ("sigterm-ignored", "the kernel's verdict on the SIGTERM, then the task still alive"),
    (
        "sandbox-teardown-failing",
        "the plugin's second failing DEL (every 2 s), then the sandbox's network namespace still there",
    ),
    ("csi-plugin-gone", "kubelet's connects to the driver's socket failing for 5 s, then the socket's path read"),
];

/// One finding's answer in one round: seconds from its first call to its
/// first line, and to its first line that says confirmed.
#[derive(Clone, Debug, Default)]
struct Answer {
    told_s: f64,
    told_confirmed: bool,
    confirmed_s: Option<f64>,
    /// From the last call the confirmed line counts (its `last_seen`): the
    /// retry, where a retry is what proves it.
    confirmed_after_last_s: Option<f64>,
}

/// The section, from `rounds` demos; `command` is said where the section
/// was made alone.
pub fn section(podstuck: &Path, rounds: usize, command: Option<&str>) -> Result<String> {
    let mut by_kind: BTreeMap<String, Vec<Answer>> = BTreeMap::new();
    for round in 0..rounds {
        say(&format!("time to answer: round {} of {rounds}", round + 1));
        for (kind, answer) in demo_round(podstuck)? {
            by_kind.entry(kind).or_default().push(answer);
        }
    }
    let mut out = format!("{HEADING}\n\n");
    if let Some(command) = command {
        writeln!(out, "{}", super::written_alone(command))?;
    }
    writeln!(
        out,
        "{rounds} rounds of `podstuck demo --json --duration {DEMO_DURATION}` (the release binary): for each finding, from its `first_seen` (the kernel's time of the first call, signal or exec it is about) to the line that first tells it, and to the first that tells it confirmed, medians over the rounds. The target, for every cause: confirmed within {:.0} ms of the call that proves it (the last call its confirmed line counts: the first where one call proves it, else the retry or the count that does).\n",
        TARGET_AFTER_PROOF_S * 1000.0
    )?;
    writeln!(out, "| finding | confirmed by | rounds | told | first told confirmed | confirmed | confirmed, after the last call it counts | target | met |")?;
    writeln!(out, "|---|---|---|---|---|---|---|---|---|")?;
    for (kind, proof) in SCENARIOS {
        let answers = by_kind.remove(kind).unwrap_or_default();
        out.push_str(&row(kind, proof, &answers, rounds));
    }
    for (kind, answers) in by_kind {
        out.push_str(&row(&kind, "(not a demo scenario)", &answers, rounds));
    }
    Ok(out)
}

/// One table row; `rounds` is how many were run, of which `answers` told it.
fn row(kind: &str, proof: &str, answers: &[Answer], rounds: usize) -> String {
    let told: Vec<f64> = answers.iter().map(|a| a.told_s).collect();
    let confirmed: Vec<f64> = answers.iter().filter_map(|a| a.confirmed_s).collect();
    let after_last: Vec<f64> = answers.iter().filter_map(|a| a.confirmed_after_last_s).collect();
    let seconds = |v: &[f64]| match v.is_empty() {
        true => "never".to_string(),
        false => format!("{:.3} s", median(&mut v.to_vec())),
    };
    let target = format!("≤ {TARGET_AFTER_PROOF_S} s after the last call");
    let met =
        if !after_last.is_empty() && median(&mut after_last.clone()) <= TARGET_AFTER_PROOF_S { "yes" } else { "no" };
    format!(
        "| {kind} | {proof} | {} of {rounds} | {} | {} of {} | {} | {} | {target} | {met} |\n",
        answers.len(),
        seconds(&told),
        answers.iter().filter(|a| a.told_confirmed).count(),
        answers.len(),
        seconds(&confirmed),
        seconds(&after_last),
    )
}

/// One demo, its findings' answers by kind (the first finding of each kind).
fn demo_round(podstuck: &Path) -> Result<BTreeMap<String, Answer>> {
    let mut child = Command::new(podstuck)
        .args(["demo", "--json", "--duration", DEMO_DURATION])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .with_context(|| format!("running {} demo", podstuck.display()))?;
    let mut stderr = child.stderr.take().context("the demo's stderr")?;
    let errors = std::thread::spawn(move || {
        let mut text = String::new();
        let _ = stderr.read_to_string(&mut text);
        text
    });
    let stdout = child.stdout.take().context("the demo's stdout")?;
    let mut first_of_kind: BTreeMap<String, String> = BTreeMap::new();
    let mut answers: BTreeMap<String, Answer> = BTreeMap::new();
    for line in BufReader::new(stdout).lines() {
        let at = SystemTime::now();
        let line = line.context("reading the demo's output")?;
        let Ok(value) = serde_json::from_str::<serde_json::Value>(&line) else { continue };
        if let Some((kind, answer)) = answered(&value, at, &mut first_of_kind)? {
            let known = answers.entry(kind).or_insert_with(|| answer.clone());
            if known.confirmed_s.is_none() {
                known.confirmed_s = answer.confirmed_s;
                known.confirmed_after_last_s = answer.confirmed_after_last_s;
            }
        }
    }
    let status = child.wait()?;
    let stderr = errors.join().unwrap_or_default();
    if !status.success() {
        bail!("podstuck demo failed ({status}): {}", stderr.trim());
    }
    Ok(answers)
}

/// What a finding line at `at` says of its kind's answer, if it is the
/// first finding of its kind seen (`first_of_kind`: kind to finding id).
fn answered(
    line: &serde_json::Value,
    at: SystemTime,
    first_of_kind: &mut BTreeMap<String, String>,
) -> Result<Option<(String, Answer)>> {
    if !matches!(line["type"].as_str(), Some("finding" | "finding-update")) {
        return Ok(None);
    }
    let (Some(kind), Some(id), Some(first_seen)) =
        (line["kind"].as_str(), line["id"].as_str(), line["first_seen"].as_str())
    else {
        return Ok(None);
    };
    if first_of_kind.entry(kind.to_string()).or_insert_with(|| id.to_string()) != id {
        return Ok(None);
    }
    let since = |time: &str| -> Result<f64> {
        let time = humantime::parse_rfc3339(time).with_context(|| format!("a finding's time {time:?}"))?;
        Ok(at.duration_since(time).unwrap_or_default().as_secs_f64())
    };
    let after = since(first_seen)?;
    let after_last = match line["last_seen"].as_str() {
        Some(last_seen) => since(last_seen)?,
        None => after,
    };
    let confirmed = line["confidence"] == "confirmed";
    Ok(Some((
        kind.to_string(),
        Answer {
            told_s: after,
            told_confirmed: confirmed,
            confirmed_s: confirmed.then_some(after),
            confirmed_after_last_s: confirmed.then_some(after_last),
        },
    )))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(kind: &str, id: &str, confidence: &str) -> serde_json::Value {
        serde_json::json!({"type": "finding", "kind": kind, "id": id, "confidence": confidence,
            "first_seen": "2026-11-27T04:00:00.000000000Z"})
    }

    #[test]
    fn a_kinds_answer_is_its_first_findings_first_line_and_first_confirmed_line() {
        let t =
            |s: f64| humantime::parse_rfc3339("2026-11-27T04:00:00Z").unwrap() + std::time::Duration::from_secs_f64(s);
        let mut first = BTreeMap::new();
        let (kind, a) = answered(&line("mount-held", "m:/a", "likely"), t(0.5), &mut first).unwrap().unwrap();
        assert_eq!((kind.as_str(), a.told_confirmed, a.confirmed_s), ("mount-held", false, None));
        assert!((a.told_s - 0.5).abs() < 1e-6);
        // Another finding of the kind is not its answer.
        assert!(answered(&line("mount-held", "m:/b", "confirmed"), t(0.6), &mut first).unwrap().is_none());
        let mut retried = line("mount-held", "m:/a", "confirmed");
        retried["last_seen"] = "2026-11-27T04:00:00.900000000Z".into();
        let (_, a) = answered(&retried, t(1.0), &mut first).unwrap().unwrap();
        assert!((a.confirmed_s.unwrap() - 1.0).abs() < 1e-6);
        assert!((a.confirmed_after_last_s.unwrap() - 0.1).abs() < 1e-6);
        assert!(answered(&serde_json::json!({"type": "event"}), t(1.0), &mut first).unwrap().is_none());
    }

    #[test]
    fn a_row_says_the_medians_and_whether_the_target_is_met() {
        let a = |told_s: f64, confirmed_s: Option<f64>| Answer {
            told_s,
            told_confirmed: confirmed_s == Some(told_s),
            confirmed_s,
            confirmed_after_last_s: confirmed_s.map(|s| s / 10.0),
        };
        let answers = [a(0.03, Some(0.03)), a(0.05, Some(0.05)), a(0.6, Some(0.6))];
        assert_eq!(
            row("immutable-file", "flags", &answers, 3),
            "| immutable-file | flags | 3 of 3 | 0.050 s | 3 of 3 | 0.050 s | 0.005 s | ≤ 0.05 s after the last call | yes |\n"
        );
        assert_eq!(
            row("volume-still-mounted", "mounts", &[a(0.4, None)], 3),
            "| volume-still-mounted | mounts | 1 of 3 | 0.400 s | 0 of 1 | never | never | ≤ 0.05 s after the last call | no |\n"
        );
        // Told 6 s after its first call, confirmed 0.06 s after the retry that proves it.
        assert!(row("cgroup-busy", "retry", &[a(6.0, Some(0.6))], 1)
            .ends_with("| 0.060 s | ≤ 0.05 s after the last call | no |\n"));
    }
}
