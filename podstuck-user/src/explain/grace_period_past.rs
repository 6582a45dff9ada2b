//! P11 `grace-period-past`: the pod's deletion was due long ago (its
//! deletionTimestamp, which is the request plus the grace period), and it
//! is still there. The symptom, with since when and what kubelet last
//! reported of its containers; the cause is in another finding, or on the
//! node (where `kubectl podstuck` looks).

use std::time::Duration;

use super::snapshot::{time, ApiSnapshot, SOURCE};
use crate::diagnose::{human_duration, Finding, Kind, Severity};

/// Past its deletion time by this much, a pod is stuck rather than slow:
/// kubelet kills what is left when the grace period ends, and tears
/// down volumes within seconds after.
pub const LONG_PAST: Duration = Duration::from_secs(60);

pub fn detect(snapshot: &ApiSnapshot) -> Vec<Finding> {
    let Some(due) = snapshot.pod.metadata.deletion_timestamp.as_ref().map(time) else { return Vec::new() };
    let late = snapshot.ago(due);
    if late < LONG_PAST {
        return Vec::new();
    }
    let mut f = snapshot.finding(Kind::GracePeriodPast, "grace-period", Severity::Warning, due);
    let grace = snapshot.pod.metadata.deletion_grace_period_seconds.unwrap_or(0);
    let statuses: Vec<_> = snapshot.pod.status.iter().flat_map(|s| s.container_statuses.iter().flatten()).collect();
    let running: Vec<String> = statuses
        .iter()
        .filter(|c| c.state.as_ref().is_some_and(|s| s.running.is_some()))
        .map(|c| c.name.clone())
        .collect();
    f.summary = format!(
        "pod {} should have been gone {} ago: its grace period of {grace} s ended {}; {}.",
        snapshot.pod_words(),
        human_duration(late),
        crate::words::rfc3339_seconds(due),
        // Without statuses (saved by hand, or never reported) nothing is
        // known of the containers: say so rather than guess.
        match (statuses.is_empty(), running.is_empty()) {
            (true, _) =>
                "the pod has no container status, so whether its containers stopped is not known here".to_string(),
            (false, true) =>
                "kubelet reports no container running, so what is left is teardown (volumes, cgroup) or the API"
                    .to_string(),
            (false, false) => format!("kubelet last reported container(s) {} still running", running.join(", ")),
        }
    );
    f.evidence(SOURCE, format!("metadata.deletionTimestamp {} (grace period {grace} s)", snapshot.when_words(due)));
    if let Some(phase) = snapshot.pod.status.as_ref().and_then(|s| s.phase.as_deref()) {
        f.evidence(SOURCE, format!("status.phase {phase}"));
    }
    if !running.is_empty() {
        f.evidence(SOURCE, format!("status.containerStatuses: running: {}", running.join(", ")));
    }
    f.fix = super::commands::trace(snapshot.name(), snapshot.namespace());
    f.advice.push("the fix looks on the pod's node, in the kernel, for what kubelet fails to tear down".to_string());
    vec![f]
}

#[cfg(test)]
mod tests {
    use super::super::tests::{at, deleted_pod, snapshot};
    use super::*;
    use k8s_openapi::api::core::v1::{ContainerState, ContainerStateRunning, ContainerStatus, PodStatus};

    #[test]
    fn a_deletion_long_due_says_since_when_and_what_still_runs() {
        let mut pod = deleted_pod(at(100.0));
        pod.status = Some(PodStatus {
            phase: Some("Running".into()),
            container_statuses: Some(vec![ContainerStatus {
                name: "app".into(),
                state: Some(ContainerState { running: Some(ContainerStateRunning::default()), ..Default::default() }),
                ..Default::default()
            }]),
            ..Default::default()
        });
        let found = detect(&snapshot(pod.clone(), at(400.0)));
        assert_eq!(found.len(), 1);
        assert!(found[0].summary.contains("should have been gone 5m00s ago"), "{}", found[0].summary);
        assert!(found[0].summary.contains("container(s) app still running"), "{}", found[0].summary);
        assert_eq!(found[0].fix, "kubectl podstuck web-0 -n shop");
        // Within a minute of its due time a pod is only slow.
        assert!(detect(&snapshot(pod, at(130.0))).is_empty());
        // No status at all (a pod saved without it): nothing is claimed of its containers.
        let found = detect(&snapshot(deleted_pod(at(100.0)), at(400.0)));
        assert!(
            found[0].summary.contains("no container status, so whether its containers stopped is not known"),
            "{}",
            found[0].summary
        );
    }
}
