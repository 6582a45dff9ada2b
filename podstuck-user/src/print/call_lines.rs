//! `--calls`: one plain line per call as it completes (unless
//! `--findings`), each finding as a block whenever it is told (new,
//! changed, resolved), a closing line with what was counted and lost. Text output
//! escapes control characters, backslashes and non-UTF-8 bytes in paths.

use std::fmt::Write as _;
use std::io;

use crate::diagnose::Report;
use crate::event::{errno_name, syscall_name, CallEvent};
use crate::identify::Identity;
use crate::run::RunTotals;
use crate::run::{RunFacts, Tracing};
use crate::words::{escape_path, latency_text, rfc3339};

use super::{calls_by_name, stderr_line, Ending, Out, Printer};
use crate::finding_block::{finding_block, told_word};

/// `--calls`: plain lines for people.
pub struct CallLines {
    /// Each call too, not only findings (no `--findings`).
    calls: bool,
}

impl CallLines {
    pub fn new(calls: bool) -> CallLines {
        CallLines { calls }
    }
}

impl Printer for CallLines {
    fn start(&mut self, _out: &mut Out, run: &RunFacts, tracing: &Tracing) -> io::Result<()> {
        stderr_line(format_args!("{}", banner(run, tracing, "")));
        Ok(())
    }

    fn call(&mut self, out: &mut Out, event: &CallEvent, identity: &Identity) -> io::Result<()> {
        match self.calls {
            true => out.line(&event_text(event, identity)),
            false => Ok(()),
        }
    }

    fn findings(&mut self, out: &mut Out, reports: &[Report]) -> io::Result<()> {
        reports.iter().try_for_each(|report| out.line(&finding_text(report)))
    }

    fn finish(&mut self, out: &mut Out, ending: &Ending<'_>) -> io::Result<()> {
        out.line_as_is(&end_text(ending.totals, ending.stopped_by))
    }
}

/// The line on stderr before any output: what is traced, where, how;
/// `shown` says what follows when it is not every call.
pub(super) fn banner(run: &RunFacts, tracing: &Tracing, shown: &str) -> String {
    format!(
        "podstuck {}: tracing {} on {} (kernel {}, {}, path walk {}){shown}; Ctrl-C to stop",
        run.version,
        run.syscall_names().join(", "),
        run.scope(),
        run.kernel,
        tracing.attach.as_str(),
        tracing.path_walk.as_str(),
    )
}

/// One event as a line for people: time, call, outcome, latency, actor,
/// pod, and the absolute path (or the argument and why it is relative).
pub fn event_text(event: &CallEvent, identity: &Identity) -> String {
    let ts = rfc3339(event.time);
    // HH:MM:SS.micro is enough on a live screen; the date is in the header.
    let clock = ts.get(11..26).unwrap_or(&ts);
    let outcome = match event.errno() {
        Some(e) => errno_name(e),
        None => "ok".to_string(),
    };
    let flags = event.flag_names();
    let call = if flags.is_empty() {
        syscall_name(event.syscall).to_string()
    } else {
        format!("{}({})", syscall_name(event.syscall), flags.join("|"))
    };
    let status = match event.path_status {
        crate::event::PathStatus::Whole => "",
        crate::event::PathStatus::TooLong => " [path too long, cut]",
        crate::event::PathStatus::Unreadable => " [path unreadable]",
    };
    let path = match &identity.abs_path {
        Ok(abs) => escape_path(abs),
        Err(why) => format!("{} [relative to dfd {}: {why}]", escape_path(&event.path), event.dfd),
    };
    let pod = match &identity.pod_uid {
        Some(uid) => format!(" pod={uid}"),
        None => String::new(),
    };
    // Calls counted in the kernel and not streamed are said, not hidden.
    let more = match event.represents {
        0 | 1 => String::new(),
        n => format!(" (+{} more like it, counted)", n - 1),
    };
    format!(
        "{clock} {call:<24} {outcome:<9} {lat:>9}  {actor}[{pid}] <- {pcomm}[{ppid}]{pod}  {path}{status}{more}",
        lat = latency_text(event.latency_ns),
        actor = identity.actor.description,
        pid = event.pid,
        pcomm = event.pcomm,
        ppid = event.ppid,
    )
}

/// A finding for people, as every text output shows one: its block
/// (ending in a line break), headed by what happened to it.
pub fn finding_text(report: &Report) -> String {
    finding_block(Some(told_word(report)), report.finding())
}

/// The closing line: what was seen, what was lost, every call counted.
pub(super) fn end_text(totals: &RunTotals, stopped_by: Option<&str>) -> String {
    let calls: Vec<String> = calls_by_name(totals).iter().map(|(k, v)| format!("{k} {v}")).collect();
    let whose = match totals.node_calls() {
        Some(node) => {
            format!("calls of the pods followed, counted in the kernel: {} (node: {node} calls)", calls.join(", "))
        }
        None => format!("calls counted in the kernel: {}", calls.join(", ")),
    };
    let mut text = format!(
        "podstuck: {whose}; {} events seen (calls streamed one by one), {} lost (ring buffer full)",
        totals.events_seen, totals.events_lost,
    );
    if totals.lifecycle_lost > 0 {
        let _ = write!(text, " ({} of them process lifecycle records: execs, signals, exits)", totals.lifecycle_lost);
    }
    if totals.calls_outside_series > 0 {
        let _ = write!(text, "; {} counted without their process (series map full)", totals.calls_outside_series);
    }
    if totals.calls_without_entry > 0 {
        let _ = write!(text, "; {} calls already in flight at start", totals.calls_without_entry);
    }
    if let Some(words) = totals.claims_words() {
        let _ = write!(text, "; {words}");
    }
    if !totals.lifecycle_dropped.is_empty() {
        let reasons: Vec<String> = totals.lifecycle_dropped.iter().map(|(why, n)| format!("{why} {n}")).collect();
        let _ = write!(
            text,
            "; execs of CNI plugin files set aside as no runtime's work, never tied to a pod: {}",
            reasons.join(", ")
        );
    }
    if totals.queue_full > 0 {
        let _ = write!(
            text,
            "; the rings' queue was full {} time(s) (podstuck fell behind; the kernel counted what it lost)",
            totals.queue_full
        );
    }
    if let Some(reads) = totals.node_reads.words() {
        let _ = write!(text, "; {reads}");
    }
    if let Some(signal) = stopped_by {
        let _ = write!(text, "; stopped by {signal}");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::print::tests::{event, identity};
    use podstuck_common::Syscall;
    use std::collections::BTreeMap;

    #[test]
    fn text_line_reads_plainly() {
        let e = event(Syscall::Umount2, -16, 2, b"/mnt/vol");
        let line = event_text(&e, &identity(&e));
        assert!(line.contains("umount2(MNT_DETACH)"), "{line}");
        assert!(line.contains("EBUSY"), "{line}");
        assert!(line.contains("kubelet[10] <- bash[9] pod=1b2c3d4e-0000-4000-8000-00000000000a"), "{line}");
        assert!(line.ends_with("/mnt/vol"), "{line}");
        assert_eq!(latency_text(5_000), "5000ns");
        assert_eq!(latency_text(2_500_000_000), "2.5s");
    }

    #[test]
    fn the_closing_line_says_what_was_lost() {
        let mut totals = RunTotals { events_seen: 3, events_lost: 2, ..Default::default() };
        totals.calls.insert(Syscall::Rmdir, 5);
        let text = end_text(&totals, None);
        assert!(text.contains("2 lost (ring buffer full)") && !text.contains("lifecycle"), "{text}");
        totals.lifecycle_lost = 1;
        let text = end_text(&totals, None);
        assert!(text.contains("2 lost (ring buffer full) (1 of them process lifecycle records"), "{text}");
    }

    #[test]
    fn with_pod_the_closing_line_counts_the_pods_calls_and_the_nodes_apart() {
        let mut totals = RunTotals { events_seen: 4, ..Default::default() };
        totals.calls = BTreeMap::from([(Syscall::Unlinkat, 87_570), (Syscall::Rmdir, 5)]);
        assert!(
            end_text(&totals, None).starts_with("podstuck: calls counted in the kernel: rmdir 5, unlinkat 87570;"),
            "{}",
            end_text(&totals, None)
        );
        totals.pods_calls = Some(BTreeMap::from([(Syscall::Unlinkat, 4)]));
        let line = end_text(&totals, None);
        assert!(
            line.starts_with(
                "podstuck: calls of the pods followed, counted in the kernel: rmdir 0, unlinkat 4 (node: 87575 calls);"
            ),
            "{line}"
        );
    }
}
