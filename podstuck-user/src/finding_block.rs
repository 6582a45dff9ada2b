//! The one text form of a finding, for every output people read outside
//! the live view (piped `watch`, `--calls`, the summary at exit, `replay`,
//! `explain`): a head line, then cause, evidence and fix in labelled
//! lines. What convinces a channel is the evidence, so it is never left
//! out; what is copied is the fix, so each of its lines is printed whole
//! on a line of its own, never cut and never wrapped by podstuck. The
//! format is described for users in docs/output.md.

use std::fmt::Write as _;

use crate::diagnose::{Confidence, Finding, Report, Severity, Status};
use crate::words::{call_count, rfc3339_seconds, terminal_safe};

/// Labels are padded to this width so every value starts in one column.
const LABEL_WIDTH: usize = 10;

/// What happened to a finding when it was told: "FINDING" (new),
/// "UPDATE" (changed), "RESOLVED" (over).
pub fn told_word(report: &Report) -> &'static str {
    match (report, report.finding().status) {
        (_, Status::Resolved) => "RESOLVED",
        (Report::New(_), _) => "FINDING",
        (Report::Update(_), _) => "UPDATE",
    }
}

/// Writes `label: value`, one line per line of `value`, the following
/// ones indented under the first value (a multi-line fix stays one
/// command per line, each whole).
fn field(block: &mut String, label: &str, value: &str) {
    let mut lines = value.lines();
    let first = lines.next().unwrap_or("");
    let _ = writeln!(block, "  {:<LABEL_WIDTH$}{}", format!("{label}:"), terminal_safe(first));
    for line in lines {
        let _ = writeln!(block, "  {:<LABEL_WIDTH$}{}", "", terminal_safe(line));
    }
}

/// A finding as a block of lines, each ending in a line break; `head`
/// (a time and [`told_word`] in a stream) goes before the head line.
///
/// ```text
/// [critical] volume-still-mounted  pod 1b2c3d4e-...  confirmed
///   status:   active, 4 calls from 2027-01-15T08:00:02Z to 2027-01-15T08:00:08Z
///   cause:    kubelet cannot remove ...
///   evidence: /k/pods/x/mount is mounted (tmpfs) [mountinfo]
///             no process has a file, cwd, root or mapping on it [/proc]
///   fix:      umount /k/pods/x/mount
/// ```
///
/// A resolved finding has no fix (the diagnosis has already put its
/// cause in the past tense). Every value the node chose is made safe for
/// a terminal here, so a caller that writes the block raw is safe too.
pub fn finding_block(head: Option<&str>, f: &Finding) -> String {
    let mut block = String::new();
    if let Some(head) = head {
        let _ = write!(block, "{} ", terminal_safe(head));
    }
    let pod = f.pod_uid.as_ref().map(|p| format!("  pod {p}")).unwrap_or_default();
    let _ = writeln!(
        block,
        "[{}] {}{pod}  {}",
        Severity::as_str(f.severity),
        f.kind.id(),
        Confidence::as_str(f.confidence)
    );
    let status = match f.status {
        Status::Active => "active",
        Status::Resolved => "resolved",
    };
    let span = format!(
        "{}, {} from {} to {}",
        status,
        call_count(f.count),
        rfc3339_seconds(f.first_seen),
        rfc3339_seconds(f.last_seen)
    );
    field(&mut block, "status", &span);
    // A cause is one paragraph: a break in what it quotes must not start a field.
    field(&mut block, "cause", &f.summary.replace(['\n', '\r'], " "));
    if let Some(rhythm) = &f.rhythm {
        field(&mut block, "rhythm", rhythm);
    }
    let evidence: Vec<String> =
        f.evidence.iter().map(|e| format!("{} [{}]", e.fact.replace(['\n', '\r'], " "), e.source)).collect();
    if !evidence.is_empty() {
        field(&mut block, "evidence", &evidence.join("\n"));
    }
    if f.status == Status::Active && !f.fix.is_empty() {
        field(&mut block, "fix", &f.fix);
    }
    if !f.advice.is_empty() {
        field(&mut block, "also", &f.advice.join("\n"));
    }
    block
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::fake::t;
    use crate::diagnose::wording::settle;
    use crate::diagnose::Kind;
    use crate::view::model::tests::{volume_finding, POD};

    fn with_evidence() -> Finding {
        let mut f = volume_finding();
        // Only the evidence this test says.
        f.evidence.clear();
        f.evidence("mountinfo", "/k/pods/x/mount is mounted (tmpfs)");
        f.evidence("/proc", "no process has a file, cwd, root or mapping on it");
        f
    }

    #[test]
    fn a_block_says_cause_evidence_and_fix_each_on_its_line() {
        let block = finding_block(Some("2027-01-15T08:00:10Z FINDING"), &with_evidence());
        assert_eq!(
            block,
            format!(
                "2027-01-15T08:00:10Z FINDING [critical] volume-still-mounted  pod {POD}  confirmed
  status:   active, 4 calls from 2027-01-15T08:00:02Z to 2027-01-15T08:00:02Z
  cause:    kubelet cannot remove the CSI volume dir of pod x: /k/pods/x/mount is still mounted (tmpfs). Removal failed with EBUSY 4 times.
  evidence: /k/pods/x/mount is mounted (tmpfs) [mountinfo]
            no process has a file, cwd, root or mapping on it [/proc]
  fix:      umount /k/pods/x/mount
"
            )
        );
    }

    #[test]
    fn a_resolved_block_says_so_in_the_past_with_no_fix() {
        let mut f = with_evidence();
        f.status = Status::Resolved;
        f.last_seen = t(9.0);
        settle(&mut f);
        let block = finding_block(None, &f);
        assert!(
            block.contains("\n  status:   resolved, 4 calls from 2027-01-15T08:00:02Z to 2027-01-15T08:00:09Z\n"),
            "{block}"
        );
        assert!(
            block.contains("\n  cause:    A volume was still mounted where kubelet removes its directory from 2027-01-15T08:00:02Z until 2027-01-15T08:00:09Z, then it ended;"),
            "{block}"
        );
        assert!(block.contains("\n  evidence: /k/pods/x/mount is mounted (tmpfs) [mountinfo]\n"), "{block}");
        assert!(!block.contains("fix:") && !block.contains("umount /k"), "{block}");
        // Even a resolved finding whose fix a caller left in prints none.
        f.fix = "umount /k/pods/x/mount".into();
        assert!(!finding_block(None, &f).contains("fix:"));
    }

    #[test]
    fn each_line_of_a_fix_is_whole_and_indented() {
        let mut f = with_evidence();
        f.fix = "umount /k/pods/x/mount\nrmdir /k/pods/x".into();
        let block = finding_block(None, &f);
        assert!(block.ends_with("  fix:      umount /k/pods/x/mount\n            rmdir /k/pods/x\n"), "{block}");
    }

    #[test]
    fn hostile_words_are_made_safe_and_long_paths_never_broken() {
        let long = format!("/var/lib/kubelet/pods/{POD}/volumes/kubernetes.io~csi/{}/mount", "p".repeat(300));
        let mut f = Finding::new(Kind::MountHeld, &long, Severity::Critical, t(0.0));
        f.summary = format!("{long} is held by pid 7 (x\u{1b}]0;owned\u{7}) \u{202e}gpj");
        f.evidence("/proc/7/comm", "x\u{1b}[2J");
        f.fix = format!("umount {long}");
        let block = finding_block(Some("FINDING \u{1b}[31m"), &f);
        assert!(!block.chars().any(|c| c != '\n' && (c.is_control() || c == '\u{202e}')), "{block:?}");
        assert!(block.contains("(x\\u{1b}]0;owned\\u{7}) \\u{202e}gpj"), "{block}");
        assert!(block.contains("  evidence: x\\u{1b}[2J [/proc/7/comm]\n"), "{block}");
        assert!(block.contains(&format!("\n  fix:      umount {long}\n")), "{block}");
        assert!(
            block
                .lines()
                .any(|l| l.ends_with(&format!(" {long} is held by pid 7 (x\\u{{1b}}]0;owned\\u{{7}}) \\u{{202e}}gpj"))),
            "{block}"
        );
    }

    #[test]
    fn the_head_says_what_happened_to_the_finding() {
        let a = with_evidence();
        assert_eq!(told_word(&Report::New(a.clone())), "FINDING");
        assert_eq!(told_word(&Report::Update(a.clone())), "UPDATE");
        let mut over = a;
        over.status = Status::Resolved;
        assert_eq!(told_word(&Report::Update(over)), "RESOLVED");
    }
}
