//! What the live view shows at one moment: the run's header, the findings
//! (first: they are the answer), the busiest series and the slowest calls
//! still in flight, computed from what `watch` gathered and a clock.
//!
//! Pure: no terminal, no kernel, no node. The only state is the recent
//! history of counts the rates are measured over, so a test drives it with
//! a hand-made latency book, findings and times and reads back a
//! [`Screen`].

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, SystemTime};

use podstuck_common::Syscall;

use crate::diagnose::{CallInFlight, Confidence, Finding, Severity, Status};
use crate::event::{decode_flags, syscall_name};
use crate::identify::actor::Role;
use crate::identify::pod::PodUid;
use crate::latency::{new_histogram, LatencyBook, Series};
use crate::run::RunFacts;
use crate::run::RunTotals;
use crate::words::{escape_path, terminal_safe_lines};

/// Rates are measured over about this much of the recent past: long enough
/// that a call every half second does not flicker between 0/s and 4/s.
pub const RATE_WINDOW: Duration = Duration::from_secs(1);
/// The busiest series kept for the screen (the renderer shows what fits).
pub const BUSIEST_SHOWN: usize = 8;
/// The slowest calls in flight kept for the screen.
pub const IN_FLIGHT_SHOWN: usize = 5;
/// Distinct notes kept; older ones scroll away.
pub const NOTES_KEPT: usize = 3;

/// What the view's header and the closing summary say of the run.
#[derive(Clone, Debug, PartialEq)]
pub struct RunHeading {
    pub version: String,
    pub node: String,
    pub kernel: String,
    /// The filters in force, as a user would say them.
    pub filters: String,
    pub started: SystemTime,
}

impl RunHeading {
    pub fn of(run: &RunFacts) -> RunHeading {
        RunHeading {
            version: run.version.to_string(),
            node: run.node.clone(),
            kernel: run.kernel.clone(),
            filters: run.filters(),
            started: run.started,
        }
    }
}

/// The run as it stands at `now`: what the view and the summary are
/// computed from.
pub struct Moment<'a> {
    pub now: SystemTime,
    /// Every finding told so far, most pressing first (as
    /// [`crate::diagnose::Diagnoser::findings`] orders them).
    pub findings: &'a [&'a Finding],
    pub book: &'a LatencyBook,
    /// Calls entered and not returned, identified and filtered.
    pub in_flight: &'a [CallInFlight],
    pub totals: &'a RunTotals,
}

/// The first lines: where, what is traced, and whether anything is lost.
#[derive(Clone, Debug, PartialEq)]
pub struct Header {
    pub version: String,
    pub node: String,
    pub kernel: String,
    pub filters: String,
    pub uptime: Duration,
    pub events_per_s: f64,
    pub events_seen: u64,
    pub events_lost: u64,
    /// Every completed call the run is about (with `--pod` the pods'),
    /// counted in the kernel (exact even when events were lost).
    pub calls_counted: u64,
    /// With `--pod`, every call of the node, said apart as the node's.
    pub node_calls: Option<u64>,
}

/// One finding on one screen line, plus its cause and fix, and what its
/// detail shows when it is expanded.
#[derive(Clone, Debug, PartialEq)]
pub struct FindingRow {
    pub severity: Severity,
    pub kind: &'static str,
    pub active: bool,
    pub confidence: Confidence,
    pub pod: Option<String>,
    /// Calls behind it.
    pub count: u64,
    /// Since it was first seen.
    pub age: Duration,
    /// The first sentence of its summary.
    pub cause: String,
    /// The whole summary, for the detail.
    pub summary: String,
    /// Each piece of evidence as "source: fact", for the detail.
    pub evidence: Vec<String>,
    /// As the diagnosis wrote it: what `c` copies. The renderer makes it
    /// terminal-safe before showing it.
    pub fix: String,
}

/// A series as the live view shows it: one syscall by one kind of actor on
/// one pod, every outcome together, so that what fails and how often sits
/// on one line (the histogram files keep outcomes apart).
#[derive(Clone, Debug, PartialEq)]
pub struct SeriesRow {
    pub syscall: &'static str,
    pub actor: &'static str,
    /// `None`: calls that concern no pod.
    pub pod: Option<String>,
    pub count: u64,
    /// Over the last [`RATE_WINDOW`] (the whole run for the exit summary).
    pub per_second: f64,
    pub failed: u64,
    /// Failures by errno name, most frequent first.
    pub errnos: Vec<(String, u64)>,
    pub p50_ns: u64,
    pub p99_ns: u64,
}

/// A call still waiting in the kernel.
#[derive(Clone, Debug, PartialEq)]
pub struct FlightRow {
    /// "umount2", "unlinkat(AT_REMOVEDIR)".
    pub call: String,
    pub waiting: Duration,
    pub actor: String,
    pub pid: u32,
    pub pod: Option<String>,
    pub path: String,
}

/// What the live view shows, top to bottom.
#[derive(Clone, Debug, PartialEq)]
pub struct Screen {
    pub header: Header,
    pub findings: Vec<FindingRow>,
    pub busiest: Vec<SeriesRow>,
    pub in_flight: Vec<FlightRow>,
    pub notes: Vec<String>,
}

/// The identity of a [`SeriesRow`].
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct CallSeries {
    syscall: Syscall,
    role: Role,
    pod: Option<PodUid>,
}

/// Counts at one past moment, to measure rates from.
struct Sample {
    at: SystemTime,
    events_seen: u64,
    calls: BTreeMap<CallSeries, u64>,
}

/// The live view's model: turns each [`Moment`] into a [`Screen`], keeping
/// just enough history for the rates.
pub struct LiveView {
    run: RunHeading,
    samples: VecDeque<Sample>,
}

impl LiveView {
    pub fn new(run: RunHeading) -> LiveView {
        // Until a second has passed, rates run from the start.
        let start = Sample { at: run.started, events_seen: 0, calls: BTreeMap::new() };
        LiveView { run, samples: VecDeque::from([start]) }
    }

    pub fn run(&self) -> &RunHeading {
        &self.run
    }

    /// The screen at `moment`, with the notes said so far at its bottom.
    pub fn screen(&mut self, moment: &Moment<'_>, notes: &Notes) -> Screen {
        let now = moment.now;
        // The baseline is the newest sample at least a window old, or the
        // oldest there is.
        while self.samples.len() > 1 && self.samples[1].at + RATE_WINDOW <= now {
            self.samples.pop_front();
        }
        let current = Sample { at: now, events_seen: moment.totals.events_seen, calls: series_counts(moment.book) };
        let base = self.samples.front().expect("the start sample is never dropped alone");
        let elapsed = now.duration_since(base.at).unwrap_or_default().as_secs_f64();
        let per_second =
            |now: u64, then: u64| if elapsed > 0.0 { now.saturating_sub(then) as f64 / elapsed } else { 0.0 };
        let header = Header {
            version: self.run.version.clone(),
            node: self.run.node.clone(),
            kernel: self.run.kernel.clone(),
            filters: self.run.filters.clone(),
            uptime: now.duration_since(self.run.started).unwrap_or_default(),
            events_per_s: per_second(current.events_seen, base.events_seen),
            events_seen: moment.totals.events_seen,
            events_lost: moment.totals.events_lost,
            calls_counted: moment.totals.shown_calls().values().sum(),
            node_calls: moment.totals.node_calls(),
        };
        let busiest = busiest(moment.book, &base.calls, elapsed, BUSIEST_SHOWN);
        self.samples.push_back(current);
        Screen {
            header,
            findings: moment.findings.iter().map(|f| finding_row(f, now)).collect(),
            busiest,
            in_flight: slowest_in_flight(moment.in_flight, now, IN_FLIGHT_SHOWN),
            notes: notes.lines(),
        }
    }
}

/// Calls per series, every outcome together.
fn series_counts(book: &LatencyBook) -> BTreeMap<CallSeries, u64> {
    let mut counts = BTreeMap::new();
    for (key, series) in book.series() {
        let group = CallSeries { syscall: key.syscall, role: key.role, pod: key.pod.clone() };
        *counts.entry(group).or_insert(0) += series.count;
    }
    counts
}

/// The `limit` busiest series of the whole run, for the exit summary.
pub(crate) fn busiest_over_run(book: &LatencyBook, now: SystemTime, limit: usize) -> Vec<SeriesRow> {
    let elapsed = now.duration_since(book.started).unwrap_or_default().as_secs_f64();
    busiest(book, &BTreeMap::new(), elapsed, limit)
}

/// The outcomes of one [`CallSeries`] (`"ok"` or an errno name, and the
/// book's series for it), with how busy it is.
struct Busy<'a> {
    series: CallSeries,
    outcomes: Vec<(&'a str, &'a Series)>,
    count: u64,
    per_second: f64,
}

/// The `limit` busiest series: fastest over the last `elapsed` seconds
/// (their counts then were `before`), then most calls overall.
fn busiest(book: &LatencyBook, before: &BTreeMap<CallSeries, u64>, elapsed: f64, limit: usize) -> Vec<SeriesRow> {
    let mut groups: BTreeMap<CallSeries, Vec<(&str, &Series)>> = BTreeMap::new();
    for (key, series) in book.series() {
        let group = CallSeries { syscall: key.syscall, role: key.role, pod: key.pod.clone() };
        groups.entry(group).or_default().push((key.outcome.as_str(), series));
    }
    let mut ranked: Vec<Busy> = groups
        .into_iter()
        .map(|(series, outcomes)| {
            let count: u64 = outcomes.iter().map(|(_, s)| s.count).sum();
            let then = before.get(&series).copied().unwrap_or(0);
            let per_second = if elapsed > 0.0 { count.saturating_sub(then) as f64 / elapsed } else { 0.0 };
            Busy { series, outcomes, count, per_second }
        })
        .collect();
    ranked.sort_by(|a, b| {
        b.per_second.total_cmp(&a.per_second).then(b.count.cmp(&a.count)).then(a.series.cmp(&b.series))
    });
    ranked.truncate(limit);
    ranked
        .into_iter()
        .map(|busy| {
            let mut errnos: Vec<(String, u64)> = busy
                .outcomes
                .iter()
                .filter(|(outcome, _)| *outcome != "ok")
                .map(|(outcome, s)| (outcome.to_string(), s.count))
                .collect();
            errnos.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
            let (p50_ns, p99_ns) = percentiles(&busy.outcomes);
            SeriesRow {
                syscall: syscall_name(busy.series.syscall),
                actor: busy.series.role.as_str(),
                pod: busy.series.pod.map(|p| p.to_string()),
                count: busy.count,
                per_second: busy.per_second,
                failed: errnos.iter().map(|(_, n)| n).sum(),
                errnos,
                p50_ns,
                p99_ns,
            }
        })
        .collect()
}

/// p50 and p99 of the series' whole-run histograms together.
fn percentiles(members: &[(&str, &Series)]) -> (u64, u64) {
    if let [(_, only)] = members {
        return (only.total.value_at_quantile(0.5), only.total.value_at_quantile(0.99));
    }
    let mut all = new_histogram();
    for (_, series) in members {
        // Same bounds for every series, so adding cannot fail.
        let _ = all.add(&series.total);
    }
    (all.value_at_quantile(0.5), all.value_at_quantile(0.99))
}

fn finding_row(finding: &Finding, now: SystemTime) -> FindingRow {
    FindingRow {
        severity: finding.severity,
        kind: finding.kind.id(),
        active: finding.status == Status::Active,
        confidence: finding.confidence,
        pod: finding.pod_uid.as_ref().map(|p| p.to_string()),
        count: finding.count,
        age: now.duration_since(finding.first_seen).unwrap_or_default(),
        // Names in them were chosen by the node: safe before they reach a screen.
        cause: terminal_safe_lines(first_sentence(&finding.summary)).into_owned(),
        summary: terminal_safe_lines(&finding.summary).into_owned(),
        evidence: finding
            .evidence
            .iter()
            .map(|e| terminal_safe_lines(&format!("{}: {}", e.source, e.fact)).into_owned())
            .collect(),
        fix: finding.fix.clone(),
    }
}

/// A summary's first sentence: the cause; the rest (counts, rhythm) is
/// for the exit summary and the JSON.
pub fn first_sentence(text: &str) -> &str {
    match text.find(". ") {
        Some(end) => &text[..=end],
        None => text,
    }
}

/// The `limit` calls that have waited longest, longest first.
pub(crate) fn slowest_in_flight(calls: &[CallInFlight], now: SystemTime, limit: usize) -> Vec<FlightRow> {
    let mut calls: Vec<&CallInFlight> = calls.iter().collect();
    calls.sort_by(|a, b| a.flight.started.cmp(&b.flight.started).then(a.flight.tid.cmp(&b.flight.tid)));
    calls
        .into_iter()
        .take(limit)
        .map(|c| {
            let flags = decode_flags(c.flight.syscall, c.flight.flags);
            let call = if flags.is_empty() {
                syscall_name(c.flight.syscall).to_string()
            } else {
                format!("{}({})", syscall_name(c.flight.syscall), flags.join("|"))
            };
            FlightRow {
                call,
                waiting: now.duration_since(c.flight.started).unwrap_or_default(),
                actor: c.actor.description.clone(),
                pid: c.flight.pid,
                pod: c.pod_uid.as_ref().map(|p| p.to_string()),
                path: c.path.as_deref().map(escape_path).unwrap_or_else(|| "(path unreadable)".to_string()),
            }
        })
        .collect()
}

/// The most a fix copied with `c` may be, in bytes: terminals refuse or
/// cut large OSC 52 payloads (a fix is a few hundred bytes; a fix this
/// large is better read from `--json`).
pub const COPY_LIMIT: usize = 8 * 1024;

/// What a key asks of the findings on the live view.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Up,
    Down,
    /// Open the selected finding's detail, or close it.
    Toggle,
    Close,
    /// Copy the selected finding's fix to the clipboard.
    Copy,
}

/// The user's place on the live view: which finding is selected, whether
/// its detail is open, and what the last key did. Kept by the terminal
/// thread across screens; a new screen with fewer findings pulls the
/// selection back onto one.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Selection {
    pub index: usize,
    pub expanded: bool,
    /// Rows of the open detail scrolled past (Up/Down scroll it: at 80 x 24
    /// a finding's evidence may not fit).
    pub scroll: u16,
    /// Said on the status line: "fix sent as OSC 52 (42 bytes): ...".
    pub status: Option<String>,
}

impl Selection {
    /// Keeps the selection on one of `count` findings.
    pub fn clamp(&mut self, count: usize) {
        self.index = self.index.min(count.saturating_sub(1));
        if count == 0 {
            self.expanded = false;
        }
    }

    /// Does `action` over the findings shown; returns what to write to the
    /// terminal for it (the OSC 52 sequence of a copy), if anything.
    pub fn apply(&mut self, action: Action, findings: &[FindingRow]) -> Option<String> {
        self.clamp(findings.len());
        match action {
            Action::Up if self.expanded => self.scroll = self.scroll.saturating_sub(1),
            // The renderer stops it at the detail's last row.
            Action::Down if self.expanded => self.scroll = self.scroll.saturating_add(1),
            Action::Up => self.index = self.index.saturating_sub(1),
            Action::Down => self.index = (self.index + 1).min(findings.len().saturating_sub(1)),
            Action::Toggle => {
                self.expanded = !self.expanded && !findings.is_empty();
                self.scroll = 0;
            }
            Action::Close => self.expanded = false,
            Action::Copy => {
                let Some(finding) = findings.get(self.index) else {
                    self.status = Some("no finding to copy a fix from".into());
                    return None;
                };
                if !finding.active || finding.fix.is_empty() {
                    self.status = Some("no fix to copy: this finding is over".into());
                    return None;
                }
                return match osc52(&finding.fix) {
                    Ok(sequence) => {
                        // Written, not known to be copied: tmux's default
                        // `set-clipboard external` drops OSC 52. Say what was
                        // done, and where the fix is whole anyway.
                        self.status = Some(format!(
                            "fix sent as OSC 52 ({} bytes): tmux needs set-clipboard on; q prints it",
                            finding.fix.len()
                        ));
                        Some(sequence)
                    }
                    Err(size) => {
                        self.status = Some(format!("fix not copied: {size} bytes, more than a terminal takes ({COPY_LIMIT}); --json has it whole"));
                        None
                    }
                };
            }
        }
        None
    }
}

/// The OSC 52 sequence that puts `text` on the clipboard of the terminal
/// (and of tmux with `set-clipboard on`, and through ssh): base64 keeps
/// whatever the text holds from being read as an escape. Err with the size
/// when over [`COPY_LIMIT`].
pub fn osc52(text: &str) -> Result<String, usize> {
    use base64::Engine as _;
    if text.len() > COPY_LIMIT {
        return Err(text.len());
    }
    Ok(format!("\x1b]52;c;{}\x07", base64::engine::general_purpose::STANDARD.encode(text)))
}

/// What podstuck would have said on standard error, kept for the screen
/// (writing to stderr would tear the live view); a message said again is
/// counted, not repeated.
#[derive(Clone, Debug, Default)]
pub struct Notes {
    kept: VecDeque<(String, u64)>,
}

impl Notes {
    pub fn add(&mut self, note: impl Into<String>) {
        // One note, one row of the screen.
        let note = note.into().replace(['\n', '\r'], " ");
        if let Some((_, times)) = self.kept.iter_mut().find(|(kept, _)| *kept == note) {
            *times += 1;
            return;
        }
        if self.kept.len() == NOTES_KEPT {
            self.kept.pop_front();
        }
        self.kept.push_back((note, 1));
    }

    /// Oldest first, with how often each was said.
    pub fn lines(&self) -> Vec<String> {
        self.kept
            .iter()
            .map(|(note, times)| if *times > 1 { format!("{note} (x{times})") } else { note.clone() })
            .collect()
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::diagnose::fake::t;
    use crate::diagnose::Kind;
    use crate::event::{Flight, AT_FDCWD};
    use crate::identify::tests::actor;
    use crate::latency::tests::{event, identity};

    pub(crate) const POD: &str = "1b2c3d4e-0000-4000-8000-00000000000a";

    pub(crate) fn run() -> RunHeading {
        RunHeading {
            version: "0.1.0".into(),
            node: "node-1".into(),
            kernel: "6.1.0-test".into(),
            filters: "the whole node".into(),
            started: t(0.0),
        }
    }

    pub(crate) fn volume_finding() -> Finding {
        let mut f = Finding::new(Kind::VolumeStillMounted, "/k/pods/x/mount", Severity::Critical, t(2.0));
        f.summary = "kubelet cannot remove the CSI volume dir of pod x: /k/pods/x/mount is still mounted (tmpfs). Removal failed with EBUSY 4 times.".into();
        f.fix = "umount /k/pods/x/mount".into();
        f.confidence = Confidence::Confirmed;
        f.pod_uid = Some(PodUid::parse(POD).unwrap());
        f.count = 4;
        f.evidence = vec![
            crate::diagnose::Evidence::new("trace", "unlinkat(AT_REMOVEDIR) by kubelet failed EBUSY 4 times"),
            crate::diagnose::Evidence::new("mountinfo", "/k/pods/x/mount: tmpfs"),
        ];
        f
    }

    pub(crate) fn flight(tid: u32, started: f64, path: Option<&[u8]>) -> CallInFlight {
        let path = path.map(|p| p.to_vec());
        CallInFlight {
            flight: Flight {
                tid,
                pid: tid,
                syscall: Syscall::Umount2,
                flags: 0,
                dfd: AT_FDCWD,
                started: t(started),
                path: path.clone(),
            },
            path,
            pod_uid: None,
            actor: actor("kubelet", "systemd", Role::Kubelet),
            mntns: 0,
            proof: crate::identify::path_proof::PathProof::NodeNamespace,
        }
    }

    fn record(
        book: &mut LatencyBook,
        syscall: Syscall,
        ret: i64,
        latency_ns: u64,
        role: Role,
        pod: Option<&str>,
        times: usize,
    ) {
        for _ in 0..times {
            book.record(&event(syscall, ret, latency_ns), &identity(role, pod));
        }
    }

    fn totals(events_seen: u64, lost: u64) -> RunTotals {
        let mut totals = RunTotals { events_seen, events_lost: lost, ..Default::default() };
        totals.calls.insert(Syscall::Rmdir, events_seen + lost);
        totals
    }

    fn screen(
        view: &mut LiveView,
        at: f64,
        book: &LatencyBook,
        findings: &[&Finding],
        in_flight: &[CallInFlight],
        totals: &RunTotals,
    ) -> Screen {
        let notes = Notes::default();
        view.screen(&Moment { now: t(at), findings, book, in_flight, totals }, &notes)
    }

    #[test]
    fn the_header_says_where_what_and_whether_anything_was_lost() {
        let mut view = LiveView::new(run());
        let book = LatencyBook::new(t(0.0));
        let s = screen(&mut view, 4.0, &book, &[], &[], &totals(200, 3));
        assert_eq!(s.header.node, "node-1");
        assert_eq!(s.header.kernel, "6.1.0-test");
        assert_eq!(s.header.uptime, Duration::from_secs(4));
        assert_eq!(s.header.events_seen, 200);
        assert_eq!(s.header.events_lost, 3);
        assert_eq!((s.header.calls_counted, s.header.node_calls), (203, None));
        // With --pod: the pods' calls, and the node's apart.
        let mut pod = totals(200, 3);
        pod.pods_calls = Some([(Syscall::Rmdir, 4)].into_iter().collect());
        let s = screen(&mut LiveView::new(run()), 4.0, &book, &[], &[], &pod);
        assert_eq!((s.header.calls_counted, s.header.node_calls), (4, Some(203)));
        // No sample a second old yet: the rate runs from the start.
        assert_eq!(s.header.events_per_s, 50.0);
        // Then over the last second only.
        screen(&mut view, 4.5, &book, &[], &[], &totals(300, 3));
        let s = screen(&mut view, 5.5, &book, &[], &[], &totals(310, 3));
        assert_eq!(s.header.events_per_s, 10.0, "since the sample of 4.5 s");
        let s = screen(&mut view, 5.75, &book, &[], &[], &totals(310, 3));
        assert_eq!(s.header.events_per_s, 8.0, "still since 4.5 s: 5.5 s is not a second old yet");
    }

    #[test]
    fn findings_come_as_given_with_their_cause_in_one_sentence_and_their_fix() {
        let mut view = LiveView::new(run());
        let book = LatencyBook::new(t(0.0));
        let mut resolved = volume_finding();
        resolved.status = Status::Resolved;
        resolved.severity = Severity::Warning;
        let active = volume_finding();
        let s = screen(&mut view, 14.0, &book, &[&active, &resolved], &[], &totals(0, 0));
        assert_eq!(s.findings.len(), 2);
        let row = &s.findings[0];
        assert_eq!(row.kind, "volume-still-mounted");
        assert_eq!(row.severity, Severity::Critical);
        assert!(row.active);
        assert_eq!(row.pod.as_deref(), Some(POD));
        assert_eq!(row.age, Duration::from_secs(12));
        assert_eq!(
            row.cause,
            "kubelet cannot remove the CSI volume dir of pod x: /k/pods/x/mount is still mounted (tmpfs)."
        );
        assert_eq!(row.fix, "umount /k/pods/x/mount");
        assert!(!s.findings[1].active);
        assert_eq!(first_sentence("no full stop"), "no full stop");
    }

    #[test]
    fn a_finding_row_carries_its_whole_summary_and_evidence_made_safe_for_a_terminal() {
        let mut hostile = volume_finding();
        hostile.summary = "kubelet cannot remove /k/\x1b[2Jevil: it is busy. Removal failed 4 times.".into();
        hostile.evidence.push(crate::diagnose::Evidence::new("trace", "comm \x07bell"));
        let row = finding_row(&hostile, t(3.0));
        assert_eq!(row.summary, "kubelet cannot remove /k/\\u{1b}[2Jevil: it is busy. Removal failed 4 times.");
        assert_eq!(row.cause, "kubelet cannot remove /k/\\u{1b}[2Jevil: it is busy.");
        assert_eq!(row.evidence[0], "trace: unlinkat(AT_REMOVEDIR) by kubelet failed EBUSY 4 times");
        assert_eq!(row.evidence[2], "trace: comm \\u{7}bell");
    }

    fn rows(n: usize) -> Vec<FindingRow> {
        (0..n).map(|_| finding_row(&volume_finding(), t(3.0))).collect()
    }

    #[test]
    fn the_selection_stays_on_a_finding() {
        let findings = rows(3);
        let mut selection = Selection::default();
        selection.apply(Action::Up, &findings);
        assert_eq!(selection.index, 0, "no row above the first");
        for _ in 0..5 {
            selection.apply(Action::Down, &findings);
        }
        assert_eq!(selection.index, 2, "no row below the last");
        selection.apply(Action::Up, &findings);
        assert_eq!(selection.index, 1);
        selection.apply(Action::Toggle, &findings);
        assert!(selection.expanded);
        // Open, Up/Down scroll the detail and leave the selection be.
        selection.apply(Action::Down, &findings);
        selection.apply(Action::Down, &findings);
        selection.apply(Action::Up, &findings);
        assert_eq!((selection.index, selection.scroll), (1, 1));
        selection.apply(Action::Toggle, &findings);
        assert_eq!(selection.scroll, 0, "a detail opens at its top");
        assert!(!selection.expanded, "Enter closes what it opened");
        selection.apply(Action::Toggle, &findings);
        selection.apply(Action::Close, &findings);
        assert!(!selection.expanded, "Esc closes");
        // A newer screen with fewer findings pulls it back.
        selection.index = 2;
        selection.expanded = true;
        selection.clamp(1);
        assert_eq!((selection.index, selection.expanded), (0, true));
        selection.clamp(0);
        assert!(!selection.expanded, "nothing to expand");
        selection.apply(Action::Toggle, &[]);
        assert!(!selection.expanded);
        assert_eq!(selection.apply(Action::Copy, &[]), None);
        assert_eq!(selection.status.as_deref(), Some("no finding to copy a fix from"));
        // A finding that is over has no fix: nothing is copied, and that is said.
        let mut over = rows(1);
        over[0].active = false;
        over[0].fix.clear();
        assert_eq!(selection.apply(Action::Copy, &over), None);
        assert_eq!(selection.status.as_deref(), Some("no fix to copy: this finding is over"));
    }

    #[test]
    fn c_copies_the_selected_fix_whole_with_osc_52() {
        let mut findings = rows(2);
        findings[1].fix = "umount '/var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/pvc 1/mount'\nrmdir /k".into();
        let mut selection = Selection::default();
        selection.apply(Action::Down, &findings);
        let sequence = selection.apply(Action::Copy, &findings).expect("a sequence to write");
        // printf 'umount ...' | base64 -w0, by hand once.
        let payload = sequence.strip_prefix("\x1b]52;c;").and_then(|s| s.strip_suffix('\x07')).expect(&sequence);
        use base64::Engine as _;
        let decoded = base64::engine::general_purpose::STANDARD.decode(payload).unwrap();
        assert_eq!(String::from_utf8(decoded).unwrap(), findings[1].fix);
        assert!(
            payload.chars().all(|c| c.is_ascii_alphanumeric() || "+/=".contains(c)),
            "nothing in it a terminal reads as an escape"
        );
        assert_eq!(
            selection.status,
            Some(format!(
                "fix sent as OSC 52 ({} bytes): tmux needs set-clipboard on; q prints it",
                findings[1].fix.len()
            ))
        );
        assert_eq!(osc52("umount /k/pods/x/mount").unwrap(), "\x1b]52;c;dW1vdW50IC9rL3BvZHMveC9tb3VudA==\x07");
        // Too large for a terminal: said, not sent.
        findings[1].fix = "x".repeat(COPY_LIMIT + 1);
        assert_eq!(selection.apply(Action::Copy, &findings), None);
        assert!(selection.status.as_deref().unwrap().starts_with(&format!("fix not copied: {} bytes", COPY_LIMIT + 1)));
    }

    #[test]
    fn the_busiest_series_put_outcomes_together_and_rank_by_recent_rate() {
        let mut view = LiveView::new(run());
        let mut book = LatencyBook::new(t(0.0));
        // An old burst of unlinks, and kubelet failing on a pod now and then.
        record(&mut book, Syscall::Unlink, 0, 2_000, Role::Other, None, 1000);
        record(&mut book, Syscall::Rmdir, -16, 20_000, Role::Kubelet, Some(POD), 3);
        let first = screen(&mut view, 10.0, &book, &[], &[], &totals(1003, 0));
        assert_eq!(first.busiest[0].syscall, "unlink", "most calls since the start");
        assert_eq!(first.busiest[0].per_second, 100.0);
        record(&mut book, Syscall::Rmdir, -16, 40_000, Role::Kubelet, Some(POD), 1);
        record(&mut book, Syscall::Rmdir, -2, 40_000, Role::Kubelet, Some(POD), 2);
        record(&mut book, Syscall::Rmdir, 0, 10_000, Role::Kubelet, Some(POD), 4);
        let s = screen(&mut view, 12.0, &book, &[], &[], &totals(1010, 0));
        assert_eq!(s.busiest.len(), 2);
        let rmdir = &s.busiest[0];
        assert_eq!((rmdir.syscall, rmdir.actor, rmdir.pod.as_deref()), ("rmdir", "kubelet", Some(POD)));
        assert_eq!(rmdir.count, 10);
        assert_eq!(rmdir.per_second, 3.5, "7 calls over the last 2 s");
        assert_eq!(rmdir.failed, 6);
        assert_eq!(rmdir.errnos, vec![("EBUSY".to_string(), 4), ("ENOENT".to_string(), 2)]);
        // 4 at 10 us, 3 at 20 us, 3 at 40 us: across every outcome.
        assert!((19_980..=20_030).contains(&rmdir.p50_ns), "{}", rmdir.p50_ns);
        assert!((39_960..=40_040).contains(&rmdir.p99_ns), "{}", rmdir.p99_ns);
        let unlink = &s.busiest[1];
        assert_eq!((unlink.count, unlink.per_second, unlink.failed, unlink.pod.as_deref()), (1000, 0.0, 0, None));
        assert!((1_999..=2_001).contains(&unlink.p50_ns));
    }

    #[test]
    fn only_the_busiest_few_are_kept() {
        let mut book = LatencyBook::new(t(0.0));
        for (i, syscall) in Syscall::ALL.iter().enumerate() {
            for role in [Role::Kubelet, Role::Runtime, Role::Other] {
                record(&mut book, *syscall, 0, 1_000, role, None, i + 1);
            }
        }
        let rows = busiest_over_run(&book, t(10.0), BUSIEST_SHOWN);
        assert_eq!(rows.len(), BUSIEST_SHOWN);
        assert!(rows.windows(2).all(|w| w[0].count >= w[1].count));
    }

    #[test]
    fn the_slowest_calls_in_flight_come_longest_first() {
        let mut view = LiveView::new(run());
        let book = LatencyBook::new(t(0.0));
        let mut calls: Vec<CallInFlight> =
            (0..7).map(|i| flight(100 + i, 10.0 + i as f64, Some(b"/mnt/nfs"))).collect();
        calls.push(flight(99, 3.0, None));
        calls[0].flight.flags = libc::MNT_DETACH as u64;
        let s = screen(&mut view, 20.0, &book, &[], &calls, &totals(0, 0));
        assert_eq!(s.in_flight.len(), IN_FLIGHT_SHOWN);
        assert_eq!(s.in_flight[0].pid, 99);
        assert_eq!(s.in_flight[0].waiting, Duration::from_secs(17));
        assert_eq!(s.in_flight[0].path, "(path unreadable)");
        assert_eq!(s.in_flight[1].call, "umount2(MNT_DETACH)");
        assert_eq!(s.in_flight[1].path, "/mnt/nfs");
        assert_eq!(s.in_flight[1].actor, "kubelet");
    }

    #[test]
    fn a_note_said_again_is_counted_and_old_ones_scroll_away() {
        let mut notes = Notes::default();
        notes.add("skipped a record");
        notes.add("skipped a record");
        for n in 0..NOTES_KEPT {
            notes.add(format!("note {n}"));
        }
        assert_eq!(notes.lines().len(), NOTES_KEPT);
        assert!(!notes.lines().iter().any(|l| l.contains("skipped")));
        let mut notes = Notes::default();
        notes.add("skipped a record");
        notes.add("skipped a record");
        assert_eq!(notes.lines(), vec!["skipped a record (x2)".to_string()]);
    }
}
