//! The plain-text form of what the live view shows: the summary printed
//! when a live run ends, written to be pasted as is into an incident
//! channel. Its own words and marks are plain ASCII, so the text survives
//! any chat or ticket system.

use std::fmt::Write as _;

use crate::event::syscall_name;
use crate::finding_block::finding_block;
use crate::run::RunTotals;
use crate::words::{call_count, human_duration, latency_text, rfc3339_seconds};

use super::model::{
    busiest_over_run, slowest_in_flight, FlightRow, Moment, RunHeading, SeriesRow, BUSIEST_SHOWN, IN_FLIGHT_SHOWN,
};

/// "rmdir by kubelet, pod <uid>" or "unlink by other, no pod".
fn series_name(row: &SeriesRow) -> String {
    let pod = row.pod.as_ref().map(|p| format!("pod {p}")).unwrap_or_else(|| "no pod".to_string());
    format!("{} by {}, {pod}", row.syscall, row.actor)
}

/// "none failed", "7 failed (EBUSY 7)", "9 failed (EBUSY 7, ENOENT 2)".
pub fn failures(row: &SeriesRow) -> String {
    if row.failed == 0 {
        return "none failed".to_string();
    }
    let errnos: Vec<String> = row.errnos.iter().map(|(e, n)| format!("{e} {n}")).collect();
    format!("{} failed ({})", row.failed, errnos.join(", "))
}

/// "12/s", "0.5/s", "<0.1/s", "0/s".
pub fn rate(per_second: f64) -> String {
    if per_second == 0.0 {
        "0/s".to_string()
    } else if per_second < 0.05 {
        "<0.1/s".to_string()
    } else if per_second < 10.0 {
        format!("{per_second:.1}/s")
    } else {
        format!("{per_second:.0}/s")
    }
}

fn flight_line(row: &FlightRow) -> String {
    let pod = row.pod.as_ref().map(|p| format!(", pod {p}")).unwrap_or_default();
    format!("{} by {}[{}]{pod}, waiting {}: {}", row.call, row.actor, row.pid, human_duration(row.waiting), row.path)
}

/// The totals line: what was seen, what was lost, every call counted in
/// the kernel.
fn totals_line(totals: &RunTotals) -> String {
    let counted: Vec<String> = totals.shown_calls().iter().map(|(s, n)| format!("{} {n}", syscall_name(*s))).collect();
    let whose = match totals.node_calls() {
        Some(node) => {
            format!("calls of the pods followed, counted in the kernel: {} (node: {node} calls)", counted.join(", "))
        }
        None => format!("calls counted in the kernel: {}", counted.join(", ")),
    };
    let lifecycle = match totals.lifecycle_lost {
        0 => String::new(),
        n => format!(", {n} of them process lifecycle records"),
    };
    let mut line = format!(
        "{} events seen, {} events lost (ring buffer full{lifecycle}); {whose}",
        totals.events_seen, totals.events_lost
    );
    if let Some(words) = totals.claims_words() {
        let _ = write!(line, "; {words}");
    }
    if !totals.lifecycle_dropped.is_empty() {
        let reasons: Vec<String> = totals.lifecycle_dropped.iter().map(|(why, n)| format!("{why} {n}")).collect();
        let _ = write!(
            line,
            "; execs of CNI plugin files set aside as no runtime's work, never tied to a pod: {}",
            reasons.join(", ")
        );
    }
    if let Some(reads) = totals.node_reads.words() {
        let _ = write!(line, "; {reads}");
    }
    line
}

/// What a live run found, for people who were not watching: where and
/// when, every finding as a block (cause, evidence, the whole fix), the busiest
/// series of the run, calls still waiting, and the totals.
pub fn summary(run: &RunHeading, moment: &Moment<'_>, stopped_by: Option<&str>) -> String {
    let mut text = String::new();
    let lasted = moment.now.duration_since(run.started).unwrap_or_default();
    let _ = write!(
        text,
        "podstuck {} on {} (kernel {}), {}: {} to {} ({})",
        run.version,
        run.node,
        run.kernel,
        run.filters,
        rfc3339_seconds(run.started),
        rfc3339_seconds(moment.now),
        human_duration(lasted)
    );
    if let Some(by) = stopped_by {
        let _ = write!(text, ", stopped by {by}");
    }
    text.push('\n');

    match moment.findings.len() {
        0 => text.push_str("\nNo finding: nothing seen was stuck.\n"),
        1 => text.push_str("\n1 finding:\n"),
        n => {
            let _ = writeln!(text, "\n{n} findings:");
        }
    }
    // The same blocks as every other text output: pasted from here or
    // from a log, a finding reads the same and its fix copies whole.
    for f in moment.findings {
        text.push('\n');
        text.push_str(&finding_block(None, f));
    }

    let busiest = busiest_over_run(moment.book, moment.now, BUSIEST_SHOWN);
    if busiest.is_empty() {
        text.push_str("\nNo call traced.\n");
    } else {
        text.push_str("\nBusiest series (calls, rate over the run, failures, p50, p99):\n");
        for row in &busiest {
            let _ = writeln!(
                text,
                "- {}: {}, {}, {}, p50 {}, p99 {}",
                series_name(row),
                call_count(row.count),
                rate(row.per_second),
                failures(row),
                latency_text(row.p50_ns),
                latency_text(row.p99_ns)
            );
        }
    }

    let waiting = slowest_in_flight(moment.in_flight, moment.now, IN_FLIGHT_SHOWN);
    if !waiting.is_empty() {
        text.push_str("\nStill in flight, longest first:\n");
        for row in &waiting {
            let _ = writeln!(text, "- {}", flight_line(row));
        }
    }

    let _ = writeln!(text, "\nTotals: {}", totals_line(moment.totals));
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::fake::t;
    use crate::identify::actor::Role;
    use crate::latency::tests::{event, identity};
    use crate::latency::LatencyBook;
    use crate::view::model::tests::{flight, run, volume_finding, POD};
    use podstuck_common::Syscall;

    fn totals() -> RunTotals {
        let mut totals = RunTotals { events_seen: 12, events_lost: 0, ..Default::default() };
        for syscall in Syscall::ALL {
            totals.calls.insert(syscall, 3);
        }
        totals
    }

    #[test]
    fn the_summary_says_findings_busiest_series_in_flight_and_totals() {
        let mut book = LatencyBook::new(t(0.0));
        for _ in 0..4 {
            book.record(&event(Syscall::Rmdir, -16, 20_000), &identity(Role::Kubelet, Some(POD)));
        }
        let mut f = volume_finding();
        // Only the evidence this test says.
        f.evidence.clear();
        f.advice.push("upgrade the CSI driver".into());
        f.evidence("mountinfo", "/k/pods/x/mount is mounted (tmpfs)");
        f.last_seen = t(8.0);
        let calls = [flight(77, 1.0, Some(b"/mnt/nfs"))];
        let totals = totals();
        let moment = Moment { now: t(10.0), findings: &[&f], book: &book, in_flight: &calls, totals: &totals };
        let text = summary(&run(), &moment, Some("q"));
        let expected = format!(
            "podstuck 0.1.0 on node-1 (kernel 6.1.0-test), the whole node: 2027-01-15T08:00:00Z to 2027-01-15T08:00:10Z (10 s), stopped by q

1 finding:

[critical] volume-still-mounted  pod {POD}  confirmed
  status:   active, 4 calls from 2027-01-15T08:00:02Z to 2027-01-15T08:00:08Z
  cause:    kubelet cannot remove the CSI volume dir of pod x: /k/pods/x/mount is still mounted (tmpfs). Removal failed with EBUSY 4 times.
  evidence: /k/pods/x/mount is mounted (tmpfs) [mountinfo]
  fix:      umount /k/pods/x/mount
  also:     upgrade the CSI driver

Busiest series (calls, rate over the run, failures, p50, p99):
- rmdir by kubelet, pod {POD}: 4 calls, 0.4/s, 4 failed (EBUSY 4), p50 20.0us, p99 20.0us

Still in flight, longest first:
- umount2 by kubelet[77], waiting 9.0 s: /mnt/nfs

Totals: 12 events seen, 0 events lost (ring buffer full); calls counted in the kernel: unlinkat 3, unlink 3, rmdir 3, umount2 3
"
        );
        assert_eq!(text, expected);
        assert!(text.is_ascii());
    }

    #[test]
    fn rates_read_plainly() {
        assert_eq!(rate(0.0), "0/s");
        assert_eq!(rate(0.01), "<0.1/s");
        assert_eq!(rate(0.5), "0.5/s");
        assert_eq!(rate(11828.4), "11828/s");
    }

    #[test]
    fn a_quiet_run_says_so() {
        let book = LatencyBook::new(t(0.0));
        let totals = RunTotals::default();
        let moment = Moment { now: t(3.0), findings: &[], book: &book, in_flight: &[], totals: &totals };
        let text = summary(&run(), &moment, None);
        assert!(text.contains("No finding: nothing seen was stuck."), "{text}");
        assert!(text.contains("No call traced."), "{text}");
        assert!(!text.contains("stopped by"));
        assert!(text.contains("Totals: 0 events seen, 0 events lost"), "{text}");
    }
}
