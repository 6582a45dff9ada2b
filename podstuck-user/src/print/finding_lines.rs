//! Standard output is no terminal (a log file, `| tee`, a pager): a block
//! per finding when it appears, changes or resolves, headed by the time it
//! was told, with its cause, evidence and fix (see [`crate::finding_block`]),
//! then the closing line. The calls behind the findings are not printed:
//! `--calls` or `--json` show them.

use std::io;
use std::time::SystemTime;

use crate::diagnose::Report;
use crate::run::{RunFacts, Tracing};
use crate::words::rfc3339_seconds;

use super::call_lines::{banner, end_text};
use super::{stderr_line, Ending, Out, Printer};
use crate::finding_block::{finding_block, told_word};

/// A block per finding as it is told; opened and closed as call lines are.
pub struct FindingLines;

impl Printer for FindingLines {
    fn start(&mut self, _out: &mut Out, run: &RunFacts, tracing: &Tracing) -> io::Result<()> {
        stderr_line(format_args!("{}", banner(run, tracing, "; findings, a block each")));
        Ok(())
    }

    fn findings(&mut self, out: &mut Out, reports: &[Report]) -> io::Result<()> {
        // Each block ends its lines; the line after it is the empty one between blocks.
        reports.iter().try_for_each(|report| out.line(&finding_told(report, SystemTime::now())))
    }

    fn finish(&mut self, out: &mut Out, ending: &Ending<'_>) -> io::Result<()> {
        out.line_as_is(&end_text(ending.totals, ending.stopped_by))
    }
}

/// A finding as told in a stream read later: when, what happened to it
/// (FINDING, UPDATE, RESOLVED), then its block.
pub fn finding_told(report: &Report, now: SystemTime) -> String {
    finding_block(Some(&format!("{} {}", rfc3339_seconds(now), told_word(report))), report.finding())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::fake::t;
    use crate::diagnose::Status;
    use crate::view::model::tests::{volume_finding, POD};

    #[test]
    fn a_told_finding_is_headed_by_when_and_what_happened() {
        let mut f = volume_finding();
        // Only the evidence this test says.
        f.evidence.clear();
        f.evidence("/proc", "no process has a file, cwd, root or mapping on it");
        let told = finding_told(&Report::New(f.clone()), t(5.0));
        assert!(
            told.starts_with(&format!(
                "2027-01-15T08:00:05Z FINDING [critical] volume-still-mounted  pod {POD}  confirmed\n"
            )),
            "{told}"
        );
        assert!(told.contains("\n  evidence: no process has a file, cwd, root or mapping on it [/proc]\n"), "{told}");
        assert!(told.ends_with("\n  fix:      umount /k/pods/x/mount\n"), "{told}");
        assert!(finding_told(&Report::Update(f.clone()), t(5.0)).starts_with("2027-01-15T08:00:05Z UPDATE [critical]"));
        f.status = Status::Resolved;
        let over = finding_told(&Report::Update(f), t(5.0));
        assert!(over.starts_with("2027-01-15T08:00:05Z RESOLVED [critical]") && !over.contains("fix:"), "{over}");
    }
}
