//! What was read about one pod from the Kubernetes API (or from files a
//! user saved with kubectl), and what could not be read and why: the one
//! input of the API-side detectors, so they stay pure and are tested
//! without a network.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Container, ContainerStatus, Event, Node, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};

use crate::diagnose::pod_shutdown::{container_id_of_status, PodShutdown, ShutdownContainer, CONTAINERS_KEPT};
use crate::diagnose::{human_duration, Confidence, Finding, Kind, Severity};
use crate::identify::pod::PodUid;

/// Everything the detectors may look at, read once.
#[derive(Clone, Debug)]
pub struct ApiSnapshot {
    /// When it was read: every "since" is measured to it.
    pub now: SystemTime,
    pub pod: Pod,
    /// The pod's node (`spec.nodeName`), when read.
    pub node: Option<Node>,
    /// The node is known not to exist (read, and not found).
    pub node_missing: bool,
    /// The kubelet's Lease in `kube-node-lease`: its heartbeat.
    pub lease: Option<Lease>,
    /// Events about the pod (and, from files, any that name its UID).
    pub events: Vec<Event>,
    /// The PersistentVolumeClaims its volumes name.
    pub claims: Vec<PersistentVolumeClaim>,
    /// VolumeAttachments of those claims' volumes.
    pub attachments: Vec<VolumeAttachment>,
    /// What could not be read, and why: said, never silently skipped.
    pub unread: Vec<Unread>,
}

/// Something the diagnosis would have liked to read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Unread {
    /// "node worker-1", "events of shop/web-0"...
    pub what: String,
    pub why: String,
}

impl ApiSnapshot {
    /// A snapshot of `pod` alone, read at `now`.
    pub fn of(pod: Pod, now: SystemTime) -> ApiSnapshot {
        ApiSnapshot {
            now,
            pod,
            node: None,
            node_missing: false,
            lease: None,
            events: Vec::new(),
            claims: Vec::new(),
            attachments: Vec::new(),
            unread: Vec::new(),
        }
    }

    pub fn namespace(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or("default")
    }

    pub fn name(&self) -> &str {
        self.pod.metadata.name.as_deref().unwrap_or("?")
    }

    /// "shop/web-0".
    pub fn pod_words(&self) -> String {
        format!("{}/{}", self.namespace(), self.name())
    }

    pub fn uid(&self) -> Option<PodUid> {
        self.pod.metadata.uid.as_deref().and_then(|u| PodUid::parse(u).ok())
    }

    pub fn node_name(&self) -> Option<&str> {
        self.pod.spec.as_ref().and_then(|s| s.node_name.as_deref()).filter(|n| !n.is_empty())
    }

    /// When deletion was asked for plus the grace period: when kubelet
    /// should have had the pod gone. `None`: the pod is not being deleted.
    pub fn deletion(&self) -> Option<SystemTime> {
        self.pod.metadata.deletion_timestamp.as_ref().map(time)
    }

    /// The pod's shutdown as kubelet runs it, when it is being deleted:
    /// the grace period's end and start, and each container's hook, role
    /// and state ([`PodShutdown`]).
    pub fn shutdown(&self) -> Option<PodShutdown> {
        let grace_ends = self.deletion()?;
        let grace = self.pod.metadata.deletion_grace_period_seconds.and_then(|s| u64::try_from(s).ok());
        let deleted_at = grace.and_then(|s| grace_ends.checked_sub(Duration::from_secs(s)));
        let status = self.pod.status.as_ref();
        let statuses = |of: Option<&Vec<ContainerStatus>>| of.cloned().unwrap_or_default();
        let main_statuses = statuses(status.and_then(|s| s.container_statuses.as_ref()));
        let init_statuses = statuses(status.and_then(|s| s.init_container_statuses.as_ref()));
        let one = |c: &Container, statuses: &[ContainerStatus], sidecar: bool| {
            let status = statuses.iter().find(|s| s.name == c.name);
            let id = status.and_then(|s| s.container_id.as_deref()).and_then(container_id_of_status);
            let running = status.and_then(|s| s.state.as_ref()).is_some_and(|s| s.running.is_some());
            let container = ShutdownContainer::new(&c.name, id, sidecar, running);
            let hook = c.lifecycle.as_ref().and_then(|l| l.pre_stop.as_ref()).and_then(|h| h.exec.as_ref());
            match hook.and_then(|e| e.command.as_ref()) {
                Some(command) => container.with_prestop(command),
                None => container,
            }
        };
        let spec = self.pod.spec.as_ref();
        let mains = spec.map(|s| s.containers.iter().map(|c| one(c, &main_statuses, false)).collect::<Vec<_>>());
        // Only restartable init containers run beside the main ones.
        let sidecars = spec.and_then(|s| s.init_containers.as_ref()).map(|inits| {
            let restartable = inits.iter().filter(|c| c.restart_policy.as_deref() == Some("Always"));
            restartable.map(|c| one(c, &init_statuses, true)).collect::<Vec<_>>()
        });
        let containers =
            sidecars.unwrap_or_default().into_iter().chain(mains.unwrap_or_default()).take(CONTAINERS_KEPT).collect();
        Some(PodShutdown { grace_ends, deleted_at, containers })
    }

    /// How long ago `then` was (zero if in the future).
    pub fn ago(&self, then: SystemTime) -> Duration {
        self.now.duration_since(then).unwrap_or_default()
    }

    /// "2026-05-01T10:00:00Z (3m12s ago)".
    pub fn when_words(&self, then: SystemTime) -> String {
        format!("{} ({} ago)", crate::words::rfc3339_seconds(then), human_duration(self.ago(then)))
    }

    /// A finding about this pod, read from the API now: confirmed (the
    /// API says it), one observation.
    pub fn finding(&self, kind: Kind, key: &str, severity: Severity, since: SystemTime) -> Finding {
        let mut f = Finding::new(kind, &format!("{}:{key}", self.pod_words()), severity, since);
        f.confidence = Confidence::Confirmed;
        f.pod_uid = self.uid();
        f.pods = f.pod_uid.iter().cloned().collect();
        f.last_seen = self.now;
        f.count = 1;
        f.revision = 1;
        f.detail("pod", self.pod_words());
        if let Some(node) = self.node_name() {
            f.detail("node", node);
        }
        f
    }
}

/// An API time as the system's.
pub fn time(t: &Time) -> SystemTime {
    SystemTime::from(t.0)
}

/// An API micro-time as the system's.
pub fn micro_time(t: &MicroTime) -> SystemTime {
    SystemTime::from(t.0)
}

/// The words an API source is named by in evidence.
pub const SOURCE: &str = "api";

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pod::ContainerId;

    #[test]
    fn a_deleted_pods_shutdown_names_its_hooks_its_sidecars_and_their_ids() {
        let id = |n: &str| n.repeat(32);
        let pod: Pod = serde_json::from_value(serde_json::json!({
            "metadata": {
                "name": "web-0", "namespace": "shop", "uid": "5f1c2a9e-0000-4000-8000-000000000001",
                "deletionTimestamp": "2026-11-29T10:05:00Z", "deletionGracePeriodSeconds": 300
            },
            "spec": {
                "initContainers": [
                    {"name": "migrate"},
                    {"name": "proxy", "restartPolicy": "Always"}
                ],
                "containers": [
                    {"name": "app", "lifecycle": {"preStop": {"exec": {"command": ["sh", "-c", "sleep 3600"]}}}},
                    {"name": "metrics", "lifecycle": {"preStop": {"httpGet": {"port": 8080}}}}
                ]
            },
            "status": {
                "initContainerStatuses": [
                    {"name": "migrate", "image": "m", "imageID": "", "ready": false, "restartCount": 0,
                     "containerID": format!("containerd://{}", id("0c")), "state": {"terminated": {"exitCode": 0}}},
                    {"name": "proxy", "image": "p", "imageID": "", "ready": true, "restartCount": 0,
                     "containerID": format!("containerd://{}", id("0b")), "state": {"running": {}}}
                ],
                "containerStatuses": [
                    {"name": "app", "image": "a", "imageID": "", "ready": true, "restartCount": 0,
                     "containerID": format!("cri-o://{}", id("0a")), "state": {"running": {}}},
                    {"name": "metrics", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
                     "state": {"waiting": {"reason": "ContainerCreating"}}}
                ]
            }
        }))
        .unwrap();
        let snapshot = ApiSnapshot::of(pod.clone(), SystemTime::now());
        let s = snapshot.shutdown().expect("deleted");
        assert_eq!(s.grace_ends.duration_since(s.deleted_at.unwrap()).unwrap(), Duration::from_secs(300));
        let names: Vec<&str> = s.containers.iter().map(|c| c.name.as_str()).collect();
        assert_eq!(names, ["proxy", "app", "metrics"], "an init container that runs to its end is no sidecar");
        let [proxy, app, metrics] = &s.containers[..] else { unreachable!() };
        assert!(proxy.sidecar && proxy.running && proxy.prestop.is_none());
        assert_eq!(proxy.id, ContainerId::parse(&id("0b")));
        assert!(!app.sidecar && app.running);
        assert_eq!(app.id, ContainerId::parse(&id("0a")));
        assert_eq!(app.prestop.as_deref(), Some(&["sh".to_string(), "-c".into(), "sleep 3600".into()][..]));
        assert!(metrics.prestop.is_none(), "an httpGet hook runs in kubelet, not in the container");
        assert!(!metrics.running && metrics.id.is_none());

        let mut alive = pod;
        alive.metadata.deletion_timestamp = None;
        assert_eq!(ApiSnapshot::of(alive, SystemTime::now()).shutdown(), None, "not being deleted");
    }
}
