//! Standard output is no terminal (a log file, `| tee`, a pager): one
//! line per finding when it appears, changes or resolves, with its whole
//! cause and fix, and the closing line. The calls behind the findings are
//! not printed: `--calls` or `--json` show them.

use std::io;
use std::time::SystemTime;

use crate::diagnose::{Confidence, Report, Severity, Status};
use crate::run::{RunFacts, Tracing};
use crate::words::{call_count, rfc3339_seconds};

use super::call_lines::{banner, end_text};
use super::{stderr_line, Ending, Out, Printer};

/// One line per finding; opened and closed as call lines are.
pub struct FindingLines;

impl Printer for FindingLines {
    fn start(&mut self, _out: &mut Out, run: &RunFacts, tracing: &Tracing) -> io::Result<()> {
        stderr_line(format_args!("{}", banner(run, tracing, "; findings, one line each")));
        Ok(())
    }

    fn findings(&mut self, out: &mut Out, reports: &[Report]) -> io::Result<()> {
        reports.iter().try_for_each(|report| out.line(&finding_line(report, SystemTime::now())))
    }

    fn finish(&mut self, out: &mut Out, ending: &Ending<'_>) -> io::Result<()> {
        out.line_as_is(&end_text(ending.totals, ending.stopped_by))
    }
}

/// A finding on one line, for a reader that is not a terminal: what
/// happened to it (new, updated, resolved), its kind, pod and confidence,
/// the whole cause and the fix.
pub fn finding_line(report: &Report, now: SystemTime) -> String {
    let f = report.finding();
    let what = match (report, f.status) {
        (_, Status::Resolved) => "RESOLVED",
        (Report::New(_), _) => "FINDING",
        (Report::Update(_), _) => "UPDATE",
    };
    let pod = f.pod_uid.as_ref().map(|p| format!(" pod {p}")).unwrap_or_default();
    // A summary is one paragraph; a line must stay one line whatever it quotes.
    let cause = f.summary.replace(['\n', '\r'], " ");
    format!(
        "{} {what} [{}] {}{pod} ({}, {}): {cause} | fix: {}",
        rfc3339_seconds(now),
        Severity::as_str(f.severity),
        f.kind.id(),
        Confidence::as_str(f.confidence),
        call_count(f.count),
        f.fix
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::fake::t;
    use crate::view::model::tests::{volume_finding, POD};

    #[test]
    fn a_finding_line_is_one_line_with_cause_and_fix() {
        let mut f = volume_finding();
        f.summary.push_str("\nsecond line");
        let line = finding_line(&Report::New(f.clone()), t(5.0));
        assert!(!line.contains('\n'), "{line}");
        assert!(line.contains(&format!(" FINDING [critical] volume-still-mounted pod {POD} (confirmed, 4 calls): kubelet cannot remove")), "{line}");
        assert!(line.ends_with("Removal failed with EBUSY 4 times. second line | fix: umount /k/pods/x/mount"), "{line}");
        assert!(finding_line(&Report::Update(f.clone()), t(5.0)).contains(" UPDATE [critical]"));
        f.status = Status::Resolved;
        assert!(finding_line(&Report::Update(f), t(5.0)).contains(" RESOLVED [critical]"));
    }
}
