//! Replay: the diagnosis of a record made again, as the live run made it:
//! a Diagnoser with the recorded settings sees the recorded calls in order
//! and reviews at the recorded times, with the recorded node answering.
//! Says whether it tells what the live run told: when a newer podstuck
//! replays an old record, the difference is the point.

use std::fs::File;
use std::io::{BufReader, ErrorKind, Read};
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::path::Path;
use std::time::SystemTime;

use anyhow::{anyhow, Context};
use serde::Serialize;
use serde_json::Value;

use crate::exit::BadInput;

use super::read::{Entry, RecordEnd, RecordError, RecordReader, RecordedCall};
use super::{RecordHeader, ReplayNode, FORMAT};
use crate::diagnose::{human_duration, Diagnoser, Report, Review};
use crate::event::syscall_name;
use crate::print::call_lines::finding_text;
use crate::print::json_lines::{finding_json, finding_value};
use crate::print::{stderr_line, Out};
use crate::words::rfc3339;

/// What a replay read and how it went.
#[derive(Debug)]
pub struct ReplaySummary {
    pub header: RecordHeader,
    pub calls: u64,
    pub reviews: u64,
    /// The time of the last call or review read.
    pub last_time: Option<SystemTime>,
    /// The closing entry; None when the record was cut short or broken.
    pub end: Option<RecordEnd>,
    /// Why the replay stopped before the end, other than a cut: a corrupt
    /// entry, or podstuck's own diagnosis failing.
    pub broken: Option<RecordError>,
    /// Questions this replay's detectors asked that the record has no
    /// answer to (they got "not in the record"), and the first of them.
    pub not_in_record: u64,
    pub first_not_in_record: Option<String>,
    /// Reviews (and the exit) where this replay told other findings than
    /// the live run, and the first, in words.
    pub differences: u64,
    pub first_difference: Option<String>,
    /// Entries passed over unread, longer than any a podstuck writes, and
    /// the first, in words.
    pub skipped: u64,
    pub first_skipped: Option<String>,
}

impl ReplaySummary {
    /// Nothing replayed yet of a record with `header`.
    fn new(header: RecordHeader) -> ReplaySummary {
        ReplaySummary {
            header,
            calls: 0,
            reviews: 0,
            last_time: None,
            end: None,
            broken: None,
            not_in_record: 0,
            first_not_in_record: None,
            differences: 0,
            first_difference: None,
            skipped: 0,
            first_skipped: None,
        }
    }

    /// Counts a difference between what the live run told `when` and what
    /// the replay tells, keeping the first in words.
    fn compare(&mut self, when: String, live: Vec<Value>, here: Vec<Value>) {
        if live != here {
            self.differences += 1;
            if self.first_difference.is_none() {
                self.first_difference = Some(format!("{when}: {}", difference_words(&live, &here)));
            }
        }
    }

    /// Calls and reviews read.
    pub fn entries(&self) -> u64 {
        self.calls + self.reviews
    }

    /// Cut short (disk full, podstuck killed): what is there was replayed.
    pub fn ends_early(&self) -> bool {
        self.end.is_none() && self.broken.is_none()
    }

    /// When the recorded run ended, or its last entry.
    pub fn ended(&self) -> SystemTime {
        self.end.as_ref().map(|e| e.ended).or(self.last_time).unwrap_or(self.header.started)
    }
}

/// Findings in an order of their own (by their JSON text): detectors walk
/// hash maps, so the order of one review's findings varies between runs.
fn comparable(values: impl IntoIterator<Item = Value>) -> Vec<Value> {
    let mut all: Vec<Value> = values.into_iter().collect();
    all.sort_by_cached_key(Value::to_string);
    all
}

fn replayed(reports: &[Report]) -> Vec<Value> {
    comparable(reports.iter().map(finding_value))
}

/// "volume-still-mounted:/x revision 2, ..." or "nothing".
fn told_words(told: &[Value]) -> String {
    if told.is_empty() {
        return "nothing".into();
    }
    let words: Vec<String> =
        told.iter().map(|v| format!("{} revision {}", v["id"].as_str().unwrap_or("?"), v["revision"])).collect();
    words.join(", ")
}

/// How two tellings of one review differ: other findings, or the same
/// findings with other contents (and which fields).
fn difference_words(live: &[Value], here: &[Value]) -> String {
    let heading = |v: &Value| (v["type"].clone(), v["id"].clone(), v["revision"].clone());
    let mut live_sorted = live.to_vec();
    let mut here_sorted = here.to_vec();
    let by_heading = |a: &Value, b: &Value| {
        heading(a)
            .0
            .to_string()
            .cmp(&heading(b).0.to_string())
            .then(heading(a).1.to_string().cmp(&heading(b).1.to_string()))
    };
    live_sorted.sort_by(by_heading);
    here_sorted.sort_by(by_heading);
    let same_findings = live_sorted.len() == here_sorted.len()
        && live_sorted.iter().zip(&here_sorted).all(|(a, b)| heading(a) == heading(b));
    if same_findings {
        if let Some((a, b)) = live_sorted.iter().zip(&here_sorted).find(|(a, b)| a != b) {
            let keys: Vec<&str> = match (a.as_object(), b.as_object()) {
                (Some(a), Some(b)) => a
                    .keys()
                    .chain(b.keys().filter(|k| !a.contains_key(*k)))
                    .filter(|k| a.get(*k) != b.get(*k))
                    .map(String::as_str)
                    .collect(),
                _ => Vec::new(),
            };
            return format!(
                "{} revision {} differs in {}",
                a["id"].as_str().unwrap_or("?"),
                a["revision"],
                keys.join(", ")
            );
        }
    }
    format!("the live run told {}; this replay told {}", told_words(live), told_words(here))
}

fn panic_words(payload: Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic".into())
}

/// Replays a record read from `reader` (`name` is what messages call it),
/// handing each finding as it is told to `tell`. Err only when not even
/// the header can be read; a record cut short or broken further on is
/// replayed up to there, and the summary says so.
pub fn replay_record(
    reader: impl Read,
    name: &str,
    tell: &mut dyn FnMut(&Report),
) -> Result<ReplaySummary, RecordError> {
    let mut record = RecordReader::open(BufReader::with_capacity(64 << 10, reader), name)?;
    let header = record.header().clone();
    let mut diagnoser = Diagnoser::new(&header.diagnose);
    let mut summary = ReplaySummary::new(header);
    loop {
        let next = record.next_entry();
        summary.skipped = record.skipped();
        if summary.first_skipped.is_none() {
            summary.first_skipped = record.first_skipped();
        }
        let entry = match next {
            Ok(Some(entry)) => entry,
            Ok(None) => break,
            Err(e) => {
                summary.broken = Some(e);
                break;
            }
        };
        let n = record.entries();
        let failed = |why| RecordError::Diagnosis { name: name.to_string(), entry: n, why };
        match entry {
            Entry::Call(call) => {
                let RecordedCall { event, identity } = *call;
                summary.calls += 1;
                summary.last_time = Some(summary.last_time.map_or(event.time, |t| t.max(event.time)));
                // A record comes from anywhere: a detector that panics on it is
                // a podstuck bug to report with the record, not a crash.
                if let Err(panic) = catch_unwind(AssertUnwindSafe(|| diagnoser.observe(&event, &identity))) {
                    summary.broken = Some(failed(panic_words(panic)));
                    return Ok(summary);
                }
            }
            Entry::Lifecycle(lifecycle) => {
                let (event, identity) = *lifecycle;
                summary.last_time = Some(summary.last_time.map_or(event.time, |t| t.max(event.time)));
                if let Err(panic) = catch_unwind(AssertUnwindSafe(|| diagnoser.lifecycle(&event, &identity))) {
                    summary.broken = Some(failed(panic_words(panic)));
                    return Ok(summary);
                }
            }
            Entry::Review(review) => {
                summary.reviews += 1;
                summary.last_time = Some(summary.last_time.map_or(review.now, |t| t.max(review.now)));
                let mut node = ReplayNode::new(review.asked).with_host_mntns(summary.header.diagnose.host_mntns);
                let reports = match catch_unwind(AssertUnwindSafe(|| {
                    if review.closing {
                        diagnoser.closing();
                    }
                    diagnoser.counted(&review.counted);
                    diagnoser.shutdowns(&review.shutdowns);
                    diagnoser.review(&mut Review { now: review.now, in_flight: &review.in_flight, node: &mut node })
                })) {
                    Ok(reports) => reports,
                    Err(panic) => {
                        summary.broken = Some(failed(panic_words(panic)));
                        return Ok(summary);
                    }
                };
                summary.not_in_record += node.not_in_record().len() as u64;
                if summary.first_not_in_record.is_none() {
                    summary.first_not_in_record = node.not_in_record().first().cloned();
                }
                summary.compare(
                    format!("at the review of {}", rfc3339(review.now)),
                    comparable(review.told),
                    replayed(&reports),
                );
                reports.iter().for_each(&mut *tell);
            }
            Entry::End(end) => {
                let untold = diagnoser.untold();
                summary.compare("at exit".into(), comparable(end.untold.iter().cloned()), replayed(&untold));
                untold.iter().for_each(&mut *tell);
                summary.end = Some(*end);
                return Ok(summary);
            }
        }
    }
    // Cut short or broken: what the live run would have said at exit then.
    diagnoser.untold().iter().for_each(&mut *tell);
    Ok(summary)
}

/// The findings a record replays to, in the order told (the exit's last).
/// Err when the record cannot be read or is corrupt; a record cut short
/// gives what it holds.
pub fn replay_findings(reader: impl Read) -> Result<Vec<Report>, RecordError> {
    let mut reports = Vec::new();
    let summary = replay_record(reader, "the record", &mut |r| reports.push(r.clone()))?;
    match summary.broken {
        Some(e) => Err(e),
        None => Ok(reports),
    }
}

/// "the whole node" or "pod <uid>, pod <uid>", and the kernel filters.
fn scope(header: &RecordHeader) -> String {
    let mut scope = if header.pods.is_empty() {
        "the whole node".to_string()
    } else {
        header.pods.iter().map(|p| format!("pod {p}")).collect::<Vec<_>>().join(", ")
    };
    if !header.syscalls.is_empty() {
        let names: Vec<&str> = header.syscalls.iter().map(|s| syscall_name(*s)).collect();
        scope.push_str(&format!(", {} only", names.join(", ")));
    }
    if header.errors_only {
        scope.push_str(", failed calls only");
    }
    scope
}

/// The first line of `podstuck replay`: what the record is.
pub(super) fn record_text(name: &str, s: &ReplaySummary) -> String {
    let h = &s.header;
    let ended = s.ended();
    let mut text = format!(
        "podstuck record {name}: node {}, kernel {}, podstuck {}; {} to {} ({}); {} calls, {} reviews; {}",
        h.node,
        h.kernel,
        h.podstuck_version,
        rfc3339(h.started),
        rfc3339(ended),
        human_duration(ended.duration_since(h.started).unwrap_or_default()),
        s.calls,
        s.reviews,
        scope(h),
    );
    if let Some(lost) = s.end.as_ref().and_then(|e| e.totals.as_ref()).map(|t| t.events_lost).filter(|n| *n > 0) {
        text.push_str(&format!("; the live run lost {lost} events (ring buffer full), which the record lacks"));
    }
    if s.skipped > 0 {
        text.push_str(&format!("; {} entries too long to be any podstuck's were skipped", s.skipped));
    }
    if s.broken.is_some() {
        text.push_str("; the record is damaged after that");
    } else if s.end.is_none() {
        text.push_str("; the record ends early");
    }
    text
}

/// The first line of `podstuck replay --json`, like watch's "start" line.
#[derive(Serialize)]
struct RecordLine<'a> {
    r#type: &'static str,
    file: &'a str,
    format: u32,
    podstuck: &'a str,
    node: &'a str,
    kernel: &'a str,
    started: String,
    ended: String,
    /// Read to its closing entry.
    complete: bool,
    calls: u64,
    reviews: u64,
    pods: &'a [crate::identify::pod::PodUid],
    kubelet_root: String,
    errors_only: bool,
    syscalls: Vec<&'static str>,
    hung_after: String,
    events_seen: Option<u64>,
    events_lost: Option<u64>,
    /// Entries passed over unread (longer than any a podstuck writes).
    #[serde(skip_serializing_if = "is_zero")]
    skipped: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

pub(super) fn record_json(name: &str, s: &ReplaySummary) -> String {
    let h = &s.header;
    let totals = s.end.as_ref().and_then(|e| e.totals.as_ref());
    let line = RecordLine {
        r#type: "record",
        file: name,
        format: FORMAT,
        podstuck: &h.podstuck_version,
        node: &h.node,
        kernel: &h.kernel,
        started: rfc3339(h.started),
        ended: rfc3339(s.ended()),
        complete: s.end.is_some(),
        calls: s.calls,
        reviews: s.reviews,
        pods: &h.pods,
        kubelet_root: h.kubelet_root.to_string_lossy().into_owned(),
        errors_only: h.errors_only,
        syscalls: h.syscalls.iter().map(|s| syscall_name(*s)).collect(),
        hung_after: humantime::format_duration(h.diagnose.hung_after).to_string(),
        events_seen: totals.map(|t| t.events_seen),
        events_lost: totals.map(|t| t.events_lost),
        skipped: s.skipped,
    };
    serde_json::to_string(&line).unwrap_or_default()
}

/// Why `path`, a directory, is no record; pointing to `podstuck report`
/// when it holds the histogram files `watch --histograms` writes, which
/// is what a user who gives a directory to replay most likely has.
fn not_a_record_but_a_directory(path: &Path) -> String {
    let name = path.display();
    let histograms = ["summary.json", "latency.hlog"].iter().any(|f| path.join(f).exists());
    if histograms {
        format!("{name} is a directory of latency histograms (podstuck watch --histograms), not a record: read it with `podstuck report {name}`")
    } else {
        format!("{name} is a directory: podstuck replay reads a file written by `podstuck record FILE`")
    }
}

/// `podstuck replay FILE [--json]`: says what the record is, then prints
/// the findings as `podstuck watch --calls` printed them (blocks, or JSON lines), the ones said at exit
/// last. Warnings (cut short, differs from the live run) go to stderr.
pub fn replay(path: &Path, json: bool) -> anyhow::Result<()> {
    let name = path.display().to_string();
    if path.is_dir() {
        return Err(BadInput(not_a_record_but_a_directory(path)).into());
    }
    let file = File::open(path).map_err(|e| match e.kind() {
        ErrorKind::NotFound => BadInput(format!("{name} does not exist")).into(),
        _ => anyhow!("cannot open {name}: {e}"),
    })?;
    let mut told = Vec::new();
    let summary = replay_record(file, &name, &mut |r| told.push(if json { finding_json(r) } else { finding_text(r) }))
        .map_err(|e| match e.is_bad_input() {
            // A file that is no record this podstuck reads: asked wrongly (exit 2).
            true => anyhow::Error::new(BadInput(e.to_string())),
            false => e.into(),
        })?;
    if let Some(first) = &summary.first_skipped {
        stderr_line(format_args!(
            "podstuck: {name}: {} entries skipped unread ({first}): the findings may lack what they held",
            summary.skipped
        ));
    }
    if summary.ends_early() {
        stderr_line(format_args!(
            "podstuck: {name}: the record ends early, after {} entries: replaying what is there",
            summary.entries()
        ));
    }
    let mut out = Out::stdout();
    let printed = (|| -> std::io::Result<()> {
        // Everything in a record is the node's (or an attacker's) words.
        out.line(&if json { record_json(&name, &summary) } else { record_text(&name, &summary) })?;
        // Text: each finding a block that ends its lines; the empty line after each sets them apart.
        if !json && !told.is_empty() {
            out.line("")?;
        }
        for line in &told {
            out.line(line)?;
        }
        out.flush()
    })();
    printed.context("writing findings")?;
    // The reader went away (`podstuck replay FILE | head`).
    if out.gone() {
        return Ok(());
    }
    if let Some(question) = &summary.first_not_in_record {
        stderr_line(format_args!(
            "podstuck: this replay asked the node {} thing(s) the live run (podstuck {}) did not read, e.g. {question}; they were answered \"not in the record\"",
            summary.not_in_record, summary.header.podstuck_version
        ));
    }
    if let Some(first) = &summary.first_difference {
        let why = if summary.header.podstuck_version == crate::run::VERSION {
            "the same podstuck version should tell the same: please report this with the record"
        } else {
            "the record was made by another podstuck version"
        };
        stderr_line(format_args!(
            "podstuck: this replay's findings differ from the live run's {} time(s) ({why}); first {first}",
            summary.differences
        ));
    }
    match summary.broken {
        Some(e) => Err(e.into()),
        None => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histograms_directory_is_pointed_to_report() {
        let tmp = crate::test_support::TempDir::new("replay-dir");
        let err = replay(&tmp.0, false).unwrap_err();
        assert_eq!(crate::exit::code_of(&err, &[]), crate::exit::BAD_INPUT);
        assert!(
            err.to_string().contains("is a directory: podstuck replay reads a file written by `podstuck record FILE`"),
            "{err}"
        );
        std::fs::write(tmp.0.join("summary.json"), "{}").unwrap();
        let err = replay(&tmp.0, false).unwrap_err();
        assert_eq!(err.to_string(), format!("{d} is a directory of latency histograms (podstuck watch --histograms), not a record: read it with `podstuck report {d}`", d = tmp.0.display()));
        let missing = replay(&tmp.0.join("none"), false).unwrap_err();
        assert_eq!(crate::exit::code_of(&missing, &[]), crate::exit::BAD_INPUT);
    }

    #[test]
    fn a_difference_names_the_finding_and_its_fields_that_differ() {
        let finding = |summary: &str, fix: &str| serde_json::json!({"type": "finding", "id": "mount-held:/m", "revision": 1, "summary": summary, "fix": fix});
        let live = comparable([finding("held by pid 7", "kill 7")]);
        let here = comparable([finding("held by pid 8", "kill 7")]);
        assert_eq!(difference_words(&live, &here), "mount-held:/m revision 1 differs in summary");
        let other = comparable([serde_json::json!({"type": "finding", "id": "hung-call:1:/n", "revision": 1})]);
        assert_eq!(
            difference_words(&live, &other),
            "the live run told mount-held:/m revision 1; this replay told hung-call:1:/n revision 1"
        );
        assert_eq!(
            difference_words(&[], &live),
            "the live run told nothing; this replay told mount-held:/m revision 1"
        );
    }
}
