//! The debug pod the plugin creates on the stuck pod's node: the shape
//! `kubectl debug node/NODE --profile=sysadmin` makes (pinned to the node,
//! the host's PID, network and IPC namespaces, privileged, the node's `/`
//! at `/host`, every taint tolerated, never restarted), plus labels that
//! say whose it is, requests and limits (a namespace with a ResourceQuota
//! refuses a pod without them) and a deadline after which the cluster ends
//! it even if the plugin died without deleting it. Unlike `kubectl debug
//! node`'s pod, its `/host` follows the node's unmounts (HostToContainer),
//! so it never keeps a copy of the volume it was made to diagnose.

use std::time::Duration;

use serde_json::{json, Value};

/// The container's name in the debug pod.
pub const CONTAINER: &str = "podstuck";
/// Where the node's root filesystem is mounted in the debug pod.
pub const HOST_ROOT: &str = "/host";
/// Label that marks every debug pod the plugin made
/// (`kubectl get pods -A -l app.kubernetes.io/name=kubectl-podstuck`):
/// not `podstuck`, the DaemonSet's, whose pods `explain --all`, the
/// PodMonitor and the NetworkPolicy select in the same namespace.
pub const NAME_LABEL: &str = "app.kubernetes.io/name";
/// [`NAME_LABEL`]'s value on a debug pod.
pub const DEBUG_POD_NAME: &str = "kubectl-podstuck";
/// Label naming the pod being traced.
pub const TARGET_LABEL: &str = "podstuck.dev/target-uid";

/// What the debug pod is made of.
#[derive(Debug, Clone)]
pub struct DebugPod {
    pub name: String,
    pub namespace: String,
    pub node: String,
    pub image: String,
    /// The pod traced: its UID labels the debug pod.
    pub target_uid: String,
    /// `namespace/name` of the pod traced, for the annotation.
    pub target: String,
    /// `activeDeadlineSeconds`: the cluster stops the debug pod after this.
    pub deadline: Duration,
}

/// A debug pod's name: `podstuck-` and the first 8 characters of the
/// traced pod's UID, then `salt` to keep two sessions apart.
pub fn debug_pod_name(target_uid: &str, salt: &str) -> String {
    let short: String =
        target_uid.chars().filter(char::is_ascii_alphanumeric).take(8).collect::<String>().to_ascii_lowercase();
    format!("podstuck-{short}-{salt}")
}

impl DebugPod {
    /// The manifest given to `kubectl create -f -`.
    pub fn manifest(&self) -> Value {
        json!({
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": self.name,
                "namespace": self.namespace,
                "labels": {
                    NAME_LABEL: DEBUG_POD_NAME,
                    "app.kubernetes.io/part-of": "podstuck",
                    TARGET_LABEL: self.target_uid,
                },
                "annotations": {
                    "podstuck.dev/target": self.target,
                },
            },
            "spec": {
                "nodeName": self.node,
                "hostPID": true,
                "hostNetwork": true,
                "hostIPC": true,
                "restartPolicy": "Never",
                // At least one second: the API server refuses zero.
                "activeDeadlineSeconds": self.deadline.as_secs().max(1),
                // The main process ends on SIGTERM at once; a short grace
                // keeps a delete from lingering on a node in trouble.
                "terminationGracePeriodSeconds": 5,
                // The debug pod never talks to the API server.
                "automountServiceAccountToken": false,
                "enableServiceLinks": false,
                "tolerations": [{"operator": "Exists"}],
                "containers": [{
                    "name": CONTAINER,
                    "image": self.image,
                    "imagePullPolicy": "IfNotPresent",
                    // Idles until told to stop; the plugin runs podstuck
                    // itself with kubectl exec, so it sees its output live
                    // and can stop it cleanly.
                    "command": ["podstuck", "__pause"],
                    "securityContext": {"privileged": true},
                    // A ResourceQuota on requests or limits refuses a pod
                    // that sets none. The requests are what a --pod trace
                    // uses (the DaemonSet's node-wide one: 31 MB, 1 % of a
                    // CPU); the limits leave room for a storm's bursts and
                    // the histogram files, a whole CPU so that the
                    // collector is never throttled behind the kernel.
                    "resources": {
                        "requests": {"cpu": "100m", "memory": "128Mi"},
                        "limits": {"cpu": "1", "memory": "512Mi"},
                    },
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                    // HostToContainer (rslave), as the DaemonSet's: without
                    // it the container holds a private copy of every mount
                    // the node had when it started, for up to the deadline,
                    // and a volume kubelet unmounts meanwhile stays mounted
                    // in here: its device cannot detach, the stuck pod stays
                    // stuck, and podstuck itself would be what holds it.
                    "volumeMounts": [{
                        "name": "host-root",
                        "mountPath": HOST_ROOT,
                        "mountPropagation": "HostToContainer",
                    }],
                }],
                "volumes": [{"name": "host-root", "hostPath": {"path": "/"}}],
            },
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pod() -> DebugPod {
        DebugPod {
            name: debug_pod_name("8f14e45f-ceea-467f-a0e6-6b8d2c1f5b3a", "x7k2p"),
            namespace: "shop".into(),
            node: "node-1".into(),
            image: "podstuck:0.1.0".into(),
            target_uid: "8f14e45f-ceea-467f-a0e6-6b8d2c1f5b3a".into(),
            target: "shop/web-0".into(),
            deadline: Duration::from_secs(3600),
        }
    }

    #[test]
    fn the_name_is_short_and_says_whose_it_is() {
        assert_eq!(pod().name, "podstuck-8f14e45f-x7k2p");
    }

    #[test]
    fn the_debug_pod_is_pinned_privileged_and_sees_the_host() {
        let m = pod().manifest();
        assert_eq!(m["metadata"]["name"], "podstuck-8f14e45f-x7k2p");
        assert_eq!(m["metadata"]["namespace"], "shop");
        assert_eq!(m["metadata"]["labels"]["app.kubernetes.io/name"], "kubectl-podstuck");
        assert_eq!(m["metadata"]["labels"]["podstuck.dev/target-uid"], "8f14e45f-ceea-467f-a0e6-6b8d2c1f5b3a");
        let spec = &m["spec"];
        assert_eq!(spec["nodeName"], "node-1");
        for shared in ["hostPID", "hostNetwork", "hostIPC"] {
            assert_eq!(spec[shared], true, "{shared}");
        }
        assert_eq!(spec["restartPolicy"], "Never");
        assert_eq!(spec["activeDeadlineSeconds"], 3600);
        assert_eq!(spec["tolerations"], json!([{"operator": "Exists"}]));
        let container = &spec["containers"][0];
        assert_eq!(container["image"], "podstuck:0.1.0");
        assert_eq!(container["command"], json!(["podstuck", "__pause"]));
        assert_eq!(container["securityContext"]["privileged"], true);
        assert_eq!(container["resources"]["requests"], json!({"cpu": "100m", "memory": "128Mi"}));
        assert_eq!(container["resources"]["limits"], json!({"cpu": "1", "memory": "512Mi"}));
        assert_eq!(spec["volumes"], json!([{"name": "host-root", "hostPath": {"path": "/"}}]));
    }

    #[test]
    fn the_debug_pods_host_mount_follows_the_nodes_unmounts() {
        let m = pod().manifest();
        assert_eq!(
            m["spec"]["containers"][0]["volumeMounts"],
            json!([{"name": "host-root", "mountPath": "/host", "mountPropagation": "HostToContainer"}]),
            "a private copy of the node's mounts would keep an unmounted volume busy"
        );
    }

    #[test]
    fn a_deadline_under_a_second_is_still_a_deadline() {
        let m = DebugPod { deadline: Duration::from_millis(10), ..pod() }.manifest();
        assert_eq!(m["spec"]["activeDeadlineSeconds"], 1);
    }
}
