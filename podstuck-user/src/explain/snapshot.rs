//! What was read about one pod from the Kubernetes API (or from files a
//! user saved with kubectl), and what could not be read and why: the one
//! input of the API-side detectors, so they stay pure and are tested
//! without a network.

use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, Time};

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
