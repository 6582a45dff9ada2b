//! P11 `volume-detach-stuck`: a VolumeAttachment of one of the pod's
//! volumes on its node reports a detach error, or was deleted and is still
//! attached. The CSI external-attacher keeps it (its finalizer) until the
//! storage says the volume is detached; until then the volume cannot
//! attach to the node a replacement pod lands on.

use super::commands::{patch_volume_attachment, show_volume_attachment};
use super::json_patch_removing;
use super::snapshot::{time, ApiSnapshot, SOURCE};
use crate::diagnose::{Finding, Kind, Severity};

pub fn detect(snapshot: &ApiSnapshot) -> Vec<Finding> {
    let volumes: Vec<&str> = snapshot.claims.iter().filter_map(|c| c.spec.as_ref()?.volume_name.as_deref()).collect();
    let mut found = Vec::new();
    for va in &snapshot.attachments {
        let Some(name) = va.metadata.name.as_deref() else { continue };
        let Some(pv) = va.spec.source.persistent_volume_name.as_deref() else { continue };
        if !volumes.contains(&pv) {
            continue;
        }
        let status = va.status.as_ref();
        let attached = status.is_some_and(|s| s.attached);
        let detach_error = status.and_then(|s| s.detach_error.as_ref());
        let deleted = va.metadata.deletion_timestamp.as_ref().map(time);
        if detach_error.is_none() && !(deleted.is_some() && attached) {
            continue;
        }
        let since = detach_error.and_then(|e| e.time.as_ref()).map(time).or(deleted).unwrap_or(snapshot.now);
        let node = va.spec.node_name.as_str();
        let driver = va.spec.attacher.as_str();
        let mut f =
            snapshot.finding(Kind::VolumeDetachStuck, &format!("volumeattachment/{name}"), Severity::Warning, since);
        let error = detach_error.and_then(|e| e.message.as_deref()).unwrap_or("");
        f.summary = format!(
            "volume {pv} of pod {} does not detach from node {node}: {}; it cannot attach to another node until it does.",
            snapshot.pod_words(),
            match detach_error {
                Some(_) => format!("{driver} reports \"{error}\""),
                None => format!("its VolumeAttachment {name} was deleted and {driver} has not confirmed the detach"),
            }
        );
        f.evidence(
            SOURCE,
            format!("volumeattachment {name}: attacher {driver}, node {node}, volume {pv}, attached {attached}"),
        );
        if let Some(e) = detach_error {
            let at = e.time.as_ref().map(|t| format!(" at {}", snapshot.when_words(time(t)))).unwrap_or_default();
            f.evidence(SOURCE, format!("volumeattachment {name}: status.detachError{at}: {error}"));
        }
        if let Some(d) = deleted {
            f.evidence(
                SOURCE,
                format!("volumeattachment {name}: metadata.deletionTimestamp {}", snapshot.when_words(d)),
            );
        }
        let finalizers = va.metadata.finalizers.clone().unwrap_or_default();
        match (deleted, finalizers.iter().position(|f| f.starts_with("external-attacher/"))) {
            (Some(_), Some(index)) => {
                f.fix = patch_volume_attachment(
                    name,
                    &json_patch_removing("/metadata/finalizers", index, &finalizers[index]),
                );
                f.advice.push(format!(
                    "risk: removing {} skips the detach the CSI attacher would have done (ControllerUnpublishVolume): detach {pv} in the storage first, or the volume stays attached to {node} and may be written from two nodes",
                    finalizers[index]
                ));
            }
            _ => {
                f.fix = show_volume_attachment(name);
                f.advice.push(format!("the {driver} controller's logs (its csi-attacher container) say why the storage refuses the detach"));
            }
        }
        f.detail("volumeattachment", name);
        found.push(f);
    }
    found
}

#[cfg(test)]
mod tests {
    use super::super::tests::{at, attachment, claim, deleted_pod, snapshot, ts};
    use super::*;
    use k8s_openapi::api::storage::v1::VolumeError;

    #[test]
    fn a_detach_error_on_the_pods_volume_is_quoted() {
        let mut s = snapshot(deleted_pod(at(100.0)), at(400.0));
        s.claims.push(claim("data-web-0", "pv-1"));
        let mut va = attachment("csi-123", "pv-1", "worker-1");
        va.status.as_mut().unwrap().detach_error = Some(VolumeError {
            message: Some("rpc error: volume is busy".into()),
            time: Some(ts(at(200.0))),
            ..Default::default()
        });
        s.attachments.push(va);
        s.attachments.push(attachment("csi-other", "pv-9", "worker-1"));
        let found = detect(&s);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].summary.contains("\"rpc error: volume is busy\""), "{}", found[0].summary);
        assert_eq!(found[0].fix, "kubectl get volumeattachment -o yaml -- csi-123");
    }

    #[test]
    fn a_deleted_attachment_still_attached_gets_its_finalizer_removal_with_the_risk() {
        let mut s = snapshot(deleted_pod(at(100.0)), at(400.0));
        s.claims.push(claim("data-web-0", "pv-1"));
        let mut va = attachment("csi-123", "pv-1", "worker-1");
        va.metadata.deletion_timestamp = Some(ts(at(150.0)));
        va.metadata.finalizers = Some(vec!["external-attacher/hostpath-csi-k8s-io".into()]);
        s.attachments.push(va);
        let f = &detect(&s)[0];
        assert!(
            f.fix.starts_with("kubectl patch volumeattachment --type=json -p '[{\"op\":\"test\"")
                && f.fix.ends_with("' -- csi-123"),
            "{}",
            f.fix
        );
        assert!(f.advice[0].contains("ControllerUnpublishVolume"));
    }
}
