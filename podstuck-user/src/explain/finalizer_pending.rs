//! P11 `finalizer-pending`: the pod is deleted (it has a
//! deletionTimestamp) but a finalizer is still on it, and the API server
//! keeps the object until whoever owns the finalizer removes it. Also a
//! claim of the pod that is itself deleted and held by
//! `kubernetes.io/pvc-protection` while the pod still uses it.
//!
//! The fix removes exactly that finalizer (a JSON patch that first tests
//! the entry is the one named, so a list changed since is never cut
//! wrong), and says what the owning controller would have done first.

use super::commands::patch_pod;
use super::json_patch_removing;
use super::snapshot::{time, ApiSnapshot, SOURCE};
use crate::diagnose::{Finding, Kind, Severity};

/// Who owns a finalizer, and what it would have done before removing it.
pub struct Owner {
    pub who: String,
    pub would: String,
}

/// The owner of a well-known finalizer; for any other, its domain's controller.
pub fn owner(finalizer: &str) -> Owner {
    let (who, would) = match finalizer {
        "foregroundDeletion" => (
            "the garbage collector (kube-controller-manager)",
            "deleted every dependent whose ownerReference to this object has blockOwnerDeletion first",
        ),
        "orphan" => (
            "the garbage collector (kube-controller-manager)",
            "removed this object's ownerReferences from its dependents, leaving them behind",
        ),
        "batch.kubernetes.io/job-tracking" => {
            ("the Job controller (kube-controller-manager)", "counted the pod in its Job's status (succeeded/failed)")
        }
        "kubernetes.io/pvc-protection" => {
            ("the PVC protection controller (kube-controller-manager)", "waited until no pod uses the claim")
        }
        "kubernetes.io/pv-protection" => {
            ("the PV protection controller (kube-controller-manager)", "waited until no claim is bound to the volume")
        }
        "external-attacher" => ("the CSI external-attacher", "detached the volume from the node"),
        other => {
            let domain = other.split_once('/').map(|(d, _)| d).unwrap_or(other);
            return Owner {
                who: format!("the controller of {domain} that added it (not part of Kubernetes)"),
                would: "its own cleanup for this pod (whatever that controller does: see its documentation or logs)"
                    .to_string(),
            };
        }
    };
    Owner { who: who.to_string(), would: would.to_string() }
}

/// One finding per finalizer left on a deleted pod, and per deleted claim
/// of it held by pvc-protection.
pub fn detect(snapshot: &ApiSnapshot) -> Vec<Finding> {
    let mut found = Vec::new();
    let meta = &snapshot.pod.metadata;
    if let Some(deleted) = meta.deletion_timestamp.as_ref().map(time) {
        let finalizers = meta.finalizers.clone().unwrap_or_default();
        for (index, finalizer) in finalizers.iter().enumerate() {
            let owner = owner(finalizer);
            let mut f = snapshot.finding(Kind::FinalizerPending, finalizer, Severity::Critical, deleted);
            f.summary = format!(
                "pod {} was deleted {} ago, but finalizer {finalizer} is still on it: the API server keeps the pod until {} removes it, and it has not.",
                snapshot.pod_words(),
                crate::diagnose::human_duration(snapshot.ago(deleted)),
                owner.who
            );
            f.evidence(SOURCE, format!("metadata.deletionTimestamp {}", snapshot.when_words(deleted)));
            f.evidence(SOURCE, format!("metadata.finalizers: {}", finalizers.join(", ")));
            f.evidence(SOURCE, format!("{finalizer} is owned by {}", owner.who));
            f.fix = patch_pod(
                snapshot.name(),
                snapshot.namespace(),
                &json_patch_removing("/metadata/finalizers", index, finalizer),
            );
            f.advice.push(format!(
                "risk: removing it skips what {} would have done: it would have {}; remove it only once that is done or not needed, and check first why the owner is not acting (is it running? its logs)",
                owner.who, owner.would
            ));
            f.detail("finalizer", finalizer.as_str());
            found.push(f);
        }
    }
    for claim in &snapshot.claims {
        let (Some(deleted), Some(name)) =
            (claim.metadata.deletion_timestamp.as_ref().map(time), claim.metadata.name.as_deref())
        else {
            continue;
        };
        let held = claim.metadata.finalizers.iter().flatten().any(|f| f == "kubernetes.io/pvc-protection");
        if !held {
            continue;
        }
        let mut f = snapshot.finding(Kind::FinalizerPending, &format!("pvc/{name}"), Severity::Warning, deleted);
        f.summary = format!(
            "claim {name} of pod {} was deleted {} ago and is held by kubernetes.io/pvc-protection until no pod uses it: it goes once this pod is gone (it does not hold the pod).",
            snapshot.pod_words(),
            crate::diagnose::human_duration(snapshot.ago(deleted))
        );
        f.evidence(
            SOURCE,
            format!("persistentvolumeclaim {name}: metadata.deletionTimestamp {}", snapshot.when_words(deleted)),
        );
        f.evidence(SOURCE, format!("persistentvolumeclaim {name}: finalizer kubernetes.io/pvc-protection"));
        f.fix = "none needed: resolve why the pod is stuck; the claim follows".to_string();
        f.advice.push(
            "risk: removing pvc-protection while the pod still runs lets the volume be deleted under it".to_string(),
        );
        f.detail("claim", name);
        found.push(f);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::super::tests::{at, claim, deleted_pod, snapshot};
    use super::*;

    #[test]
    fn a_finalizer_on_a_deleted_pod_is_named_with_its_owner_and_a_tested_patch() {
        let mut pod = deleted_pod(at(100.0));
        pod.metadata.finalizers = Some(vec!["example.com/cleanup".into(), "foregroundDeletion".into()]);
        let found = detect(&snapshot(pod, at(400.0)));
        assert_eq!(found.len(), 2);
        let f = &found[1];
        assert_eq!((f.kind, f.severity), (Kind::FinalizerPending, Severity::Critical));
        assert!(f.summary.contains("finalizer foregroundDeletion is still on it"), "{}", f.summary);
        assert!(f.summary.contains("deleted 5m00s ago"), "{}", f.summary);
        assert_eq!(
            f.fix,
            r#"kubectl patch pod -n shop --type=json -p '[{"op":"test","path":"/metadata/finalizers/1","value":"foregroundDeletion"},{"op":"remove","path":"/metadata/finalizers/1"}]' -- web-0"#
        );
        assert!(f.advice[0].contains("blockOwnerDeletion"), "{:?}", f.advice);
        assert!(
            found[0]
                .evidence
                .iter()
                .any(|e| e.source == "api" && e.fact.contains("the controller of example.com that added it")),
            "{:?}",
            found[0].evidence
        );
        assert_eq!(f.first_seen, at(100.0));
    }

    #[test]
    fn a_pod_not_deleted_has_no_pending_finalizer() {
        let mut pod = deleted_pod(at(100.0));
        pod.metadata.deletion_timestamp = None;
        pod.metadata.finalizers = Some(vec!["example.com/cleanup".into()]);
        assert!(detect(&snapshot(pod, at(400.0))).is_empty());
    }

    #[test]
    fn a_deleted_claim_held_by_pvc_protection_is_said_not_to_hold_the_pod() {
        let mut s = snapshot(deleted_pod(at(100.0)), at(400.0));
        let mut c = claim("data-web-0", "pv-1");
        c.metadata.deletion_timestamp =
            Some(k8s_openapi::apimachinery::pkg::apis::meta::v1::Time(at(200.0).try_into().unwrap()));
        c.metadata.finalizers = Some(vec!["kubernetes.io/pvc-protection".into()]);
        s.claims.push(c);
        let found = detect(&s);
        assert_eq!(found.len(), 1);
        assert_eq!(found[0].severity, Severity::Warning);
        assert!(found[0].summary.contains("does not hold the pod"));
    }
}
