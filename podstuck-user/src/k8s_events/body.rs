//! What a finding looks like as a Kubernetes Event (events.k8s.io/v1):
//! the object it regards, its reason, and a note an on-call reads in
//! `kubectl describe pod` without ever logging in to the node.
//!
//! Pure: built from a [`Finding`], the node's name and a clock, so every
//! field is checked in unit tests against the real `k8s-openapi` type.

use std::time::{SystemTime, UNIX_EPOCH};

use k8s_openapi::api::core::v1::ObjectReference;
use k8s_openapi::api::events::v1::{Event, EventSeries};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta};

use crate::diagnose::{Finding, Kind, Status};

/// Who posts, as `kubectl get events -o wide` shows it.
pub const REPORTING_CONTROLLER: &str = "podstuck.dev/podstuck";

/// What podstuck did: it diagnosed; it never acts on the node.
pub const ACTION: &str = "Diagnose";

/// The API server refuses a note longer than this (in bytes).
pub const MAX_NOTE: usize = 1024;

/// The API refuses a reportingInstance longer than this.
const MAX_INSTANCE: usize = 128;

/// Node events live where kubelet puts its own: in `default`.
pub const NODE_EVENTS_NAMESPACE: &str = "default";

/// The object an Event is about: a pod resolved through the API, or the node.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Regarding {
    pub kind: &'static str,
    /// `None` for the node (cluster-scoped).
    pub namespace: Option<String>,
    pub name: String,
    pub uid: String,
}

impl Regarding {
    pub fn pod(namespace: &str, name: &str, uid: &str) -> Regarding {
        Regarding { kind: "Pod", namespace: Some(namespace.into()), name: name.into(), uid: uid.into() }
    }

    /// The node as kubelet refers to it in its own events: its UID is its name.
    pub fn node(name: &str) -> Regarding {
        Regarding { kind: "Node", namespace: None, name: name.into(), uid: name.into() }
    }

    /// Where the Event is created: the pod's namespace, or `default`.
    pub fn events_namespace(&self) -> &str {
        self.namespace.as_deref().unwrap_or(NODE_EVENTS_NAMESPACE)
    }

    fn reference(&self) -> ObjectReference {
        ObjectReference {
            api_version: Some("v1".into()),
            kind: Some(self.kind.into()),
            namespace: self.namespace.clone(),
            name: Some(self.name.clone()),
            uid: Some(self.uid.clone()),
            ..Default::default()
        }
    }
}

/// A finding's kind as Events name their reasons: `volume-still-mounted`
/// is `VolumeStillMounted`.
pub fn reason(kind: Kind) -> String {
    kind.id()
        .split('-')
        .map(|word| {
            let mut chars = word.chars();
            chars.next().map(|c| c.to_ascii_uppercase().to_string() + chars.as_str()).unwrap_or_default()
        })
        .collect()
}

/// The note: the cause, who holds it, and the fix, within [`MAX_NOTE`]
/// bytes. The summary gives way first: the fix is what the reader acts on.
pub fn note(finding: &Finding) -> String {
    let mut rest = String::new();
    if let Some(actor) = &finding.actor {
        rest.push_str(&format!(" Held by {} (pid {}, {}).", actor.description, actor.pid, actor.comm));
    }
    if !finding.fix.is_empty() {
        rest.push_str(&format!(" Fix: {}", finding.fix));
    }
    if finding.status == Status::Resolved {
        return cut(&format!("Resolved ({}): {}", finding.kind.id(), finding.summary), MAX_NOTE);
    }
    let rest = cut(&rest, MAX_NOTE);
    let summary = cut(&finding.summary, MAX_NOTE - rest.len());
    summary + &rest
}

/// `text` cut to at most `max` bytes on a char boundary, marked with `…`
/// when anything was cut.
pub fn cut(text: &str, max: usize) -> String {
    if text.len() <= max {
        return text.to_string();
    }
    const MARK: &str = "…";
    let Some(room) = max.checked_sub(MARK.len()) else { return String::new() };
    let mut end = room;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}{MARK}", &text[..end])
}

/// A time as the API's MicroTime (it keeps microseconds).
pub fn micro_time(time: SystemTime) -> MicroTime {
    let micros = time.duration_since(UNIX_EPOCH).unwrap_or_default().as_micros() as i64;
    MicroTime(
        k8s_openapi::jiff::Timestamp::from_microsecond(micros).unwrap_or(k8s_openapi::jiff::Timestamp::UNIX_EPOCH),
    )
}

/// The Event's name: the object's and the time, as client-go names them.
pub fn event_name(regarding: &Regarding, now: SystemTime) -> String {
    let nanos = now.duration_since(UNIX_EPOCH).unwrap_or_default().as_nanos();
    format!("{}.{nanos:x}", regarding.name)
}

/// The Event that tells `finding` about `regarding`, posted by podstuck on
/// `node` at `now`: a Warning while active, Normal once resolved.
pub fn event(finding: &Finding, regarding: &Regarding, node: &str, now: SystemTime) -> Event {
    let resolved = finding.status == Status::Resolved;
    Event {
        metadata: ObjectMeta {
            name: Some(event_name(regarding, now)),
            namespace: Some(regarding.events_namespace().to_string()),
            ..Default::default()
        },
        action: Some(ACTION.into()),
        event_time: Some(micro_time(now)),
        note: Some(note(finding)),
        reason: Some(match resolved {
            true => format!("{}Resolved", reason(finding.kind)),
            false => reason(finding.kind),
        }),
        regarding: Some(regarding.reference()),
        reporting_controller: Some(REPORTING_CONTROLLER.into()),
        reporting_instance: Some(cut(node, MAX_INSTANCE)),
        type_: Some(if resolved { "Normal" } else { "Warning" }.into()),
        ..Default::default()
    }
}

/// The merge patch that says an Event happened `count` times, the last at `last`.
pub fn series_patch(count: i32, last: SystemTime) -> serde_json::Value {
    let series = EventSeries { count, last_observed_time: micro_time(last) };
    serde_json::json!({ "series": series })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::{FindingActor, Severity};
    use crate::identify::pod::PodUid;
    use std::time::Duration;

    const UID: &str = "1b2c3d4e-5f60-4a7b-8c9d-0e1f2a3b4c5d";

    fn stuck_volume() -> Finding {
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut f =
            Finding::new(Kind::VolumeStillMounted, "/var/lib/kubelet/pods/x/volumes/v/mount", Severity::Critical, t);
        f.summary =
            "The volume pvc-1 of pod 1b2c3d4e is still mounted: kubelet cannot remove its directory (EBUSY).".into();
        f.pod_uid = Some(PodUid::parse(UID).unwrap());
        f.actor = Some(FindingActor {
            pid: 812,
            comm: "kubelet".into(),
            parent: "systemd".into(),
            role: "kubelet",
            description: "kubelet".into(),
        });
        f.fix = "umount /var/lib/kubelet/pods/x/volumes/v/mount".into();
        f
    }

    /// Through JSON into the real type, as the API server would read it.
    fn as_posted(event: &Event) -> (serde_json::Value, Event) {
        let json = serde_json::to_value(event).unwrap();
        let back: Event = serde_json::from_value(json.clone()).unwrap();
        (json, back)
    }

    #[test]
    fn an_active_finding_is_a_warning_regarding_its_pod() {
        let now = UNIX_EPOCH + Duration::new(1_700_000_100, 123_456_789);
        let regarding = Regarding::pod("shop", "web-0", UID);
        let (json, e) = as_posted(&event(&stuck_volume(), &regarding, "worker-1", now));
        assert_eq!(json["apiVersion"], "events.k8s.io/v1");
        assert_eq!(json["kind"], "Event");
        assert_eq!(e.metadata.namespace.as_deref(), Some("shop"));
        assert_eq!(e.metadata.name.as_deref(), Some(format!("web-0.{:x}", 1_700_000_100_123_456_789u128).as_str()));
        let r = e.regarding.unwrap();
        assert_eq!(
            (r.kind.as_deref(), r.namespace.as_deref(), r.name.as_deref(), r.uid.as_deref()),
            (Some("Pod"), Some("shop"), Some("web-0"), Some(UID))
        );
        assert_eq!(r.api_version.as_deref(), Some("v1"));
        assert_eq!(e.reporting_controller.as_deref(), Some("podstuck.dev/podstuck"));
        assert_eq!(e.reporting_instance.as_deref(), Some("worker-1"));
        assert_eq!(e.type_.as_deref(), Some("Warning"));
        assert_eq!(e.reason.as_deref(), Some("VolumeStillMounted"));
        assert_eq!(e.action.as_deref(), Some("Diagnose"));
        // Microseconds, as MicroTime keeps them.
        assert_eq!(json["eventTime"], "2023-11-14T22:15:00.123456Z");
        let note = e.note.unwrap();
        assert!(note.starts_with("The volume pvc-1 of pod"), "{note}");
        assert!(note.contains("Held by kubelet (pid 812, kubelet)."), "{note}");
        assert!(note.ends_with("Fix: umount /var/lib/kubelet/pods/x/volumes/v/mount"), "{note}");
        assert!(e.series.is_none());
    }

    #[test]
    fn a_resolved_finding_is_normal_and_says_which_kind() {
        let mut f = stuck_volume();
        f.status = Status::Resolved;
        let (_, e) = as_posted(&event(&f, &Regarding::pod("shop", "web-0", UID), "worker-1", UNIX_EPOCH));
        assert_eq!(e.type_.as_deref(), Some("Normal"));
        assert_eq!(e.reason.as_deref(), Some("VolumeStillMountedResolved"));
        assert!(e.note.unwrap().starts_with("Resolved (volume-still-mounted): The volume"));
    }

    #[test]
    fn a_node_finding_regards_the_node_in_default() {
        let mut f = Finding::new(Kind::DiskFull, "/var/lib", Severity::Critical, UNIX_EPOCH);
        f.summary = "The filesystem of /var/lib is full.".into();
        let (_, e) = as_posted(&event(&f, &Regarding::node("worker-1"), "worker-1", UNIX_EPOCH));
        assert_eq!(e.metadata.namespace.as_deref(), Some("default"));
        let r = e.regarding.unwrap();
        assert_eq!(
            (r.kind.as_deref(), r.namespace, r.name.as_deref(), r.uid.as_deref()),
            (Some("Node"), None, Some("worker-1"), Some("worker-1"))
        );
        assert_eq!(e.reason.as_deref(), Some("DiskFull"));
    }

    /// Every cause of the table, told as an Event, has a reason in the
    /// API's style: its id in UpperCamelCase.
    #[test]
    fn every_kind_has_an_events_style_reason() {
        assert_eq!(reason(Kind::VolumeStillMounted), "VolumeStillMounted");
        assert_eq!(reason(Kind::BlockVolumeHeld), "BlockVolumeHeld");
        for kind in Kind::ALL {
            let reason = reason(*kind);
            assert!(reason.chars().next().is_some_and(|c| c.is_ascii_uppercase()), "{reason}");
            assert!(reason.chars().all(|c| c.is_ascii_alphanumeric()), "{reason}");
            let kebab: String = reason
                .chars()
                .enumerate()
                .flat_map(|(i, c)| {
                    let dash = (i > 0 && c.is_ascii_uppercase()).then_some('-');
                    dash.into_iter().chain(std::iter::once(c.to_ascii_lowercase()))
                })
                .collect();
            assert_eq!(kebab, kind.id());
        }
    }

    #[test]
    fn a_long_note_keeps_the_fix_and_cuts_the_summary_on_a_char_boundary() {
        let mut f = stuck_volume();
        // Three bytes each: no cut may split one.
        f.summary = "卷".repeat(600);
        let note = note(&f);
        assert!(note.len() <= MAX_NOTE, "{}", note.len());
        assert!(note.ends_with("Fix: umount /var/lib/kubelet/pods/x/volumes/v/mount"), "{note}");
        assert!(note.contains("卷… Held by kubelet"), "{note}");
        // A fix longer than the limit alone is cut too, still valid UTF-8.
        f.fix = "é".repeat(2000);
        let note = super::note(&f);
        assert!(note.len() <= MAX_NOTE && note.ends_with('…'), "{}", note.len());
        for max in 0..12 {
            let cut = cut("ééééé", max);
            assert!(cut.len() <= max, "{max}: {cut:?}");
        }
        assert_eq!(cut("short", MAX_NOTE), "short");
    }

    #[test]
    fn the_series_patch_counts_with_microseconds() {
        let patch = series_patch(4, UNIX_EPOCH + Duration::from_micros(1_700_000_000_000_007));
        assert_eq!(
            patch,
            serde_json::json!({"series": {"count": 4, "lastObservedTime": "2023-11-14T22:13:20.000007Z"}})
        );
    }
}
