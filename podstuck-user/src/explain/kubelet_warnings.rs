//! P11 `kubelet-warning`: the Warning events kubelet (or the volume
//! controllers) posted about the pod, quoted as they are: `FailedKillPod`,
//! `FailedUnmount`, `UnmountVolume.TearDown failed ... device or resource
//! busy`, orphaned pod volume paths still on disk. One finding per reason,
//! with how often and since when. They say what failed on the node, not
//! why: the fix looks there.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::Event;

use super::snapshot::{micro_time, time, ApiSnapshot, SOURCE};
use crate::diagnose::{Finding, Kind, Severity};

/// Reasons worth telling even when not posted by kubelet itself.
const TEARDOWN_REASONS: [&str; 5] =
    ["FailedKillPod", "FailedUnmount", "FailedDetachVolume", "FailedPreStopHook", "FailedSync"];

/// Whether an event says a teardown on the node failed.
fn about_teardown(event: &Event) -> bool {
    let reason = event.reason.as_deref().unwrap_or("");
    let message = event.message.as_deref().unwrap_or("");
    let by_kubelet = event.source.as_ref().and_then(|s| s.component.as_deref()) == Some("kubelet")
        || event.reporting_component.as_deref() == Some("kubelet");
    TEARDOWN_REASONS.contains(&reason)
        || message.contains("UnmountVolume.TearDown failed")
        || message.contains("volume paths are still present on disk")
        || message.contains("device or resource busy")
        || by_kubelet
}

/// When an event was last and first seen.
fn times(event: &Event) -> (Option<std::time::SystemTime>, Option<std::time::SystemTime>) {
    let last = event
        .last_timestamp
        .as_ref()
        .map(time)
        .or_else(|| event.series.as_ref().and_then(|s| s.last_observed_time.as_ref()).map(micro_time))
        .or_else(|| event.event_time.as_ref().map(micro_time));
    let first = event.first_timestamp.as_ref().map(time).or_else(|| event.event_time.as_ref().map(micro_time)).or(last);
    (first, last)
}

pub fn detect(snapshot: &ApiSnapshot) -> Vec<Finding> {
    let mut by_reason: BTreeMap<String, Vec<&Event>> = BTreeMap::new();
    for event in snapshot.events.iter().filter(|e| e.type_.as_deref() == Some("Warning") && about_teardown(e)) {
        by_reason.entry(event.reason.clone().unwrap_or_else(|| "Warning".into())).or_default().push(event);
    }
    let mut found = Vec::new();
    for (reason, events) in by_reason {
        let count: u64 = events.iter().map(|e| e.count.unwrap_or(1).max(1) as u64).sum();
        let first = events.iter().filter_map(|e| times(e).0).min().unwrap_or(snapshot.now);
        let latest = events.iter().max_by_key(|e| times(e).1).expect("a reason has an event");
        let last = times(latest).1.unwrap_or(snapshot.now);
        let message = latest.message.as_deref().unwrap_or("").trim();
        let from = latest
            .source
            .as_ref()
            .and_then(|s| s.component.clone())
            .or_else(|| latest.reporting_component.clone())
            .unwrap_or_else(|| "?".into());
        let host = latest.source.as_ref().and_then(|s| s.host.clone()).or_else(|| latest.reporting_instance.clone());
        let on = host.as_deref().map(|h| format!(" on {h}")).unwrap_or_default();
        let mut f = snapshot.finding(Kind::KubeletWarning, &reason, Severity::Warning, first);
        f.count = count;
        f.last_seen = last;
        f.summary = format!(
            "{from}{on} warns about pod {} ({reason}, {count} time(s), last {} ago): \"{message}\"",
            snapshot.pod_words(),
            crate::diagnose::human_duration(snapshot.ago(last))
        );
        for e in &events {
            let (_, at) = times(e);
            let at = at.map(|t| snapshot.when_words(t)).unwrap_or_else(|| "at an unknown time".into());
            f.evidence(
                SOURCE,
                format!(
                    "event {reason} x{} from {from}{on}, last {at}: {}",
                    e.count.unwrap_or(1),
                    e.message.as_deref().unwrap_or("").trim()
                ),
            );
        }
        f.fix = super::commands::trace(snapshot.name(), snapshot.namespace());
        let busy = message.contains("device or resource busy") || message.contains("still present on disk");
        f.advice.push(match busy {
            true => "the event says a volume is still busy or present on the node: the fix traces the node's unmounts and names who holds it".to_string(),
            false => "the event says what failed on the node, not why: the fix traces the node's teardown calls".to_string(),
        });
        f.detail("reason", reason.as_str());
        found.push(f);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::super::tests::{at, deleted_pod, snapshot, warning};
    use super::*;

    #[test]
    fn teardown_warnings_are_quoted_one_finding_per_reason() {
        let mut s = snapshot(deleted_pod(at(100.0)), at(400.0));
        s.events.push(warning(
            "FailedUnmount",
            "UnmountVolume.TearDown failed for volume \"data\" : unmount failed: device or resource busy",
            7,
            at(390.0),
        ));
        s.events.push(warning("FailedKillPod", "error killing pod: failed to \"KillPodSandbox\"", 2, at(300.0)));
        let mut normal = warning("Killing", "Stopping container app", 1, at(101.0));
        normal.type_ = Some("Normal".into());
        s.events.push(normal);
        let found = detect(&s);
        assert_eq!(
            found.iter().map(|f| f.id.as_str()).collect::<Vec<_>>(),
            ["kubelet-warning:shop/web-0:FailedKillPod", "kubelet-warning:shop/web-0:FailedUnmount"]
        );
        let unmount = &found[1];
        assert_eq!(unmount.count, 7);
        assert!(unmount.summary.starts_with("kubelet on worker-1 warns about pod shop/web-0 (FailedUnmount, 7 time(s), last 10 s ago): \"UnmountVolume.TearDown failed"), "{}", unmount.summary);
        assert!(unmount.advice[0].contains("still busy"));
    }
}
