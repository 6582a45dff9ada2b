//! What the plugin reads from `kubectl get pod -o json`: of the pod asked
//! about, where it runs and whether it is being deleted; of the debug pod,
//! whether it is ready yet and, if not, why (in kubelet's words); and from
//! `kubectl get namespace -o json`, whether a namespace takes new pods.

use anyhow::{anyhow, bail, Context, Result};
use serde_json::Value;

/// The pod the user asked about, as the API server has it.
#[derive(Debug, Clone, PartialEq)]
pub struct TargetPod {
    pub name: String,
    pub namespace: String,
    /// `metadata.uid`: what podstuck's `--pod` follows.
    pub uid: String,
    /// `spec.nodeName`; `None` while the pod is not scheduled.
    pub node: Option<String>,
    /// `metadata.deletionTimestamp`: set once a delete was asked for.
    pub deleting_since: Option<String>,
    /// `metadata.finalizers`: what must let go before the object goes.
    pub finalizers: Vec<String>,
    /// `status.phase`.
    pub phase: Option<String>,
}

fn text(value: &Value, pointer: &str) -> Option<String> {
    value.pointer(pointer).and_then(Value::as_str).map(str::to_string)
}

impl TargetPod {
    /// The pod in `kubectl get pod NAME -o json`'s output.
    pub fn parse(json: &str) -> Result<TargetPod> {
        let pod: Value = serde_json::from_str(json).context("kubectl printed no JSON pod")?;
        if pod["kind"] != "Pod" {
            bail!(
                "kubectl printed a {} where a Pod was expected",
                pod["kind"].as_str().unwrap_or("document without a kind")
            );
        }
        let need = |pointer: &str| text(&pod, pointer).ok_or_else(|| anyhow!("the pod has no {pointer}"));
        Ok(TargetPod {
            name: need("/metadata/name")?,
            namespace: need("/metadata/namespace")?,
            uid: need("/metadata/uid")?,
            node: text(&pod, "/spec/nodeName").filter(|n| !n.is_empty()),
            deleting_since: text(&pod, "/metadata/deletionTimestamp"),
            finalizers: pod
                .pointer("/metadata/finalizers")
                .and_then(Value::as_array)
                .map(|f| f.iter().filter_map(Value::as_str).map(str::to_string).collect())
                .unwrap_or_default(),
            phase: text(&pod, "/status/phase"),
        })
    }

    /// `namespace/name`.
    pub fn full_name(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }

    /// What the user is told before tracing starts.
    pub fn described(&self) -> String {
        let mut words = format!("pod {} (uid {})", self.full_name(), self.uid);
        if let Some(node) = &self.node {
            words.push_str(&format!(" on node {node}"));
        }
        match &self.deleting_since {
            Some(since) => words.push_str(&format!(", Terminating since {since}")),
            None => words.push_str(&format!(", {}", self.phase.as_deref().unwrap_or("phase unknown"))),
        }
        if !self.finalizers.is_empty() {
            words.push_str(&format!(", finalizers: {}", self.finalizers.join(", ")));
        }
        words
    }
}

/// Where the debug pod stands while the plugin waits for it.
#[derive(Debug, Clone, PartialEq)]
pub enum DebugPodState {
    /// Its container runs and it is Ready: podstuck can be run in it.
    Ready,
    /// Not yet; why, in kubelet's words, when it says.
    Starting(Option<String>),
    /// It ended (its deadline, its container failing): it never will be.
    Ended(String),
}

impl DebugPodState {
    pub fn parse(json: &str) -> Result<DebugPodState> {
        let pod: Value = serde_json::from_str(json).context("kubectl printed no JSON pod")?;
        let phase = text(&pod, "/status/phase").unwrap_or_default();
        let reason = || {
            let said: Vec<String> =
                [text(&pod, "/status/reason"), text(&pod, "/status/message")].into_iter().flatten().collect();
            said.join(": ")
        };
        if phase == "Failed" || phase == "Succeeded" {
            let why = container_words(&pod).unwrap_or_else(reason);
            return Ok(DebugPodState::Ended(format!(
                "{phase}{}",
                if why.is_empty() { String::new() } else { format!(" ({why})") }
            )));
        }
        let ready = pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .is_some_and(|c| c.iter().any(|c| c["type"] == "Ready" && c["status"] == "True"));
        if ready {
            return Ok(DebugPodState::Ready);
        }
        let scheduling = pod
            .pointer("/status/conditions")
            .and_then(Value::as_array)
            .and_then(|c| c.iter().find(|c| c["type"] == "PodScheduled" && c["status"] == "False"))
            .map(|c| {
                [c["reason"].as_str(), c["message"].as_str()].into_iter().flatten().collect::<Vec<_>>().join(": ")
            });
        Ok(DebugPodState::Starting(container_words(&pod).or(scheduling)))
    }
}

/// Whether a namespace takes new pods: a Terminating one (being deleted,
/// a common reason a pod is stuck) refuses them all.
pub fn namespace_terminating(json: &str) -> Result<bool> {
    let namespace: Value = serde_json::from_str(json).context("kubectl printed no JSON namespace")?;
    if namespace["kind"] != "Namespace" {
        bail!("kubectl printed a {} where a Namespace was expected", namespace["kind"].as_str().unwrap_or("document"));
    }
    Ok(namespace.pointer("/metadata/deletionTimestamp").is_some_and(|t| !t.is_null())
        || text(&namespace, "/status/phase").as_deref() == Some("Terminating"))
}

/// Why the container is waiting or how it ended: "ImagePullBackOff: Back-off pulling image ...".
fn container_words(pod: &Value) -> Option<String> {
    let statuses = pod.pointer("/status/containerStatuses")?.as_array()?;
    statuses.iter().find_map(|status| {
        let state = status.get("state")?;
        let (_, detail) = state.as_object()?.iter().find(|(how, _)| *how == "waiting" || *how == "terminated")?;
        let reason = detail["reason"].as_str()?;
        Some(match detail["message"].as_str() {
            Some(message) => format!("{reason}: {message}"),
            None => reason.to_string(),
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const TERMINATING: &str = include_str!("../../../tests/fixtures/terminating-pod.json");
    const PENDING: &str = include_str!("../../../tests/fixtures/unscheduled-pod.json");

    #[test]
    fn a_terminating_pod_gives_its_node_uid_and_finalizers() {
        let pod = TargetPod::parse(TERMINATING).unwrap();
        assert_eq!(pod.name, "web-0");
        assert_eq!(pod.namespace, "shop");
        assert_eq!(pod.uid, "8f14e45f-ceea-467f-a0e6-6b8d2c1f5b3a");
        assert_eq!(pod.node.as_deref(), Some("node-1"));
        assert_eq!(pod.deleting_since.as_deref(), Some("2026-05-01T10:02:11Z"));
        assert_eq!(pod.finalizers, ["example.com/volume-protection"]);
        assert_eq!(
            pod.described(),
            "pod shop/web-0 (uid 8f14e45f-ceea-467f-a0e6-6b8d2c1f5b3a) on node node-1, Terminating since 2026-05-01T10:02:11Z, finalizers: example.com/volume-protection"
        );
    }

    #[test]
    fn an_unscheduled_pod_has_no_node() {
        let pod = TargetPod::parse(PENDING).unwrap();
        assert_eq!(pod.node, None);
        assert_eq!(pod.deleting_since, None);
        assert_eq!(pod.phase.as_deref(), Some("Pending"));
    }

    #[test]
    fn what_is_not_a_pod_is_refused() {
        let list = r#"{"apiVersion":"v1","kind":"List","items":[]}"#;
        assert!(TargetPod::parse(list).unwrap_err().to_string().contains("List"));
        assert!(TargetPod::parse("pod/web-0").is_err());
        let no_uid = r#"{"kind":"Pod","metadata":{"name":"a","namespace":"b"}}"#;
        assert!(TargetPod::parse(no_uid).unwrap_err().to_string().contains("/metadata/uid"));
    }

    #[test]
    fn a_namespace_being_deleted_is_terminating() {
        let active = r#"{"kind":"Namespace","metadata":{"name":"podstuck"},"status":{"phase":"Active"}}"#;
        assert!(!namespace_terminating(active).unwrap());
        let deleting = r#"{"kind":"Namespace","metadata":{"name":"shop","deletionTimestamp":"2026-05-01T10:00:00Z"},"status":{"phase":"Terminating"}}"#;
        assert!(namespace_terminating(deleting).unwrap());
        assert!(namespace_terminating(r#"{"kind":"Pod"}"#).is_err());
    }

    #[test]
    fn the_debug_pod_is_ready_starting_or_ended() {
        let ready = r#"{"kind":"Pod","status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}]}}"#;
        assert_eq!(DebugPodState::parse(ready).unwrap(), DebugPodState::Ready);
        let pulling = r#"{"kind":"Pod","status":{"phase":"Pending","conditions":[{"type":"Ready","status":"False","reason":"ContainersNotReady"}],
            "containerStatuses":[{"name":"podstuck","ready":false,"restartCount":0,"image":"podstuck:0.1.0","imageID":"",
            "state":{"waiting":{"reason":"ImagePullBackOff","message":"Back-off pulling image \"podstuck:0.1.0\""}}}]}}"#;
        assert_eq!(
            DebugPodState::parse(pulling).unwrap(),
            DebugPodState::Starting(Some("ImagePullBackOff: Back-off pulling image \"podstuck:0.1.0\"".into()))
        );
        let unschedulable = r#"{"kind":"Pod","status":{"phase":"Pending","conditions":[{"type":"PodScheduled","status":"False","reason":"Unschedulable","message":"0/3 nodes are available"}]}}"#;
        assert_eq!(
            DebugPodState::parse(unschedulable).unwrap(),
            DebugPodState::Starting(Some("Unschedulable: 0/3 nodes are available".into()))
        );
        let deadline = r#"{"kind":"Pod","status":{"phase":"Failed","reason":"DeadlineExceeded","message":"Pod was active on the node longer than the specified deadline"}}"#;
        assert_eq!(
            DebugPodState::parse(deadline).unwrap(),
            DebugPodState::Ended(
                "Failed (DeadlineExceeded: Pod was active on the node longer than the specified deadline)".into()
            )
        );
    }
}
