//! The last words on every finding before it is told, in one place so no
//! detector can get them wrong: a finding podstuck is not sure of never
//! reads as critical, and a finding that is over reads as over (in the
//! past tense, with no fix: acting on something already over can only harm).

use std::time::SystemTime;

use super::{Confidence, Finding, Kind, Severity, Status};
use crate::words::rfc3339_seconds;

/// The most a finding of this confidence may weigh: only what podstuck
/// is sure of (or believes for good reason) may page someone as critical.
pub fn severity_for(severity: Severity, confidence: Confidence) -> Severity {
    match confidence {
        Confidence::Possible => severity.min(Severity::Warning),
        Confidence::Likely | Confidence::Confirmed => severity,
    }
}

/// A resolved finding's summary: what it was and when, in the past tense,
/// then what was seen while it lasted, quoted (the detector's words are
/// about the present and would read as a problem still there).
pub fn resolved_summary(kind: Kind, first_seen: SystemTime, last_seen: SystemTime, seen: &str) -> String {
    let mut words = kind.past_words().to_string();
    if let Some(first) = words.get_mut(0..1) {
        first.make_ascii_uppercase();
    }
    format!(
        "{words} from {} until {}, then it ended; nothing to do now. Seen while it lasted: \"{}\"",
        rfc3339_seconds(first_seen),
        rfc3339_seconds(last_seen),
        seen.trim_end()
    )
}

/// Settles a finding as it is told: severity capped by confidence; once
/// resolved, the summary in the past tense and no fix or advice left.
pub fn settle(finding: &mut Finding) {
    finding.severity = severity_for(finding.severity, finding.confidence);
    if finding.status == Status::Resolved {
        finding.summary = resolved_summary(finding.kind, finding.first_seen, finding.last_seen, &finding.summary);
        finding.fix.clear();
        finding.advice.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::fake::t;

    #[test]
    fn a_possible_finding_is_at_most_a_warning() {
        assert_eq!(severity_for(Severity::Critical, Confidence::Possible), Severity::Warning);
        assert_eq!(severity_for(Severity::Info, Confidence::Possible), Severity::Info);
        assert_eq!(severity_for(Severity::Critical, Confidence::Likely), Severity::Critical);
        assert_eq!(severity_for(Severity::Critical, Confidence::Confirmed), Severity::Critical);
    }

    #[test]
    fn a_resolved_finding_reads_in_the_past_with_no_fix() {
        let mut f = Finding::new(Kind::MountHeld, "/x", Severity::Critical, t(0.0));
        f.confidence = Confidence::Possible;
        f.last_seen = t(30.0);
        f.summary = "umount of /x is refused with EBUSY: it is not mounted now: the next retry should succeed.".into();
        f.fix = "umount /x".into();
        f.advice.push("kill 42".into());
        f.status = Status::Resolved;
        settle(&mut f);
        assert_eq!(f.severity, Severity::Warning);
        assert_eq!(
            f.summary,
            "A mount was held busy and its unmount refused from 2027-01-15T08:00:00Z until 2027-01-15T08:00:30Z, then it ended; \
             nothing to do now. Seen while it lasted: \"umount of /x is refused with EBUSY: it is not mounted now: the next retry should succeed.\""
        );
        assert!(f.fix.is_empty() && f.advice.is_empty());
    }

    #[test]
    fn an_active_finding_keeps_its_words_and_fix() {
        let mut f = Finding::new(Kind::VolumeStillMounted, "/x", Severity::Critical, t(0.0));
        f.confidence = Confidence::Confirmed;
        f.summary = "still mounted".into();
        f.fix = "umount /x".into();
        settle(&mut f);
        assert_eq!(
            (f.severity, f.summary.as_str(), f.fix.as_str()),
            (Severity::Critical, "still mounted", "umount /x")
        );
    }
}
