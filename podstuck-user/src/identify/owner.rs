//! Who a process on the node belongs to, as a person names it: its pod
//! (by name where the runtime's state says it), a leftover `kubectl debug
//! node` pod, a docker container. A holder of a mount in another
//! container is named by what it is, so the reader knows what to delete.
//!
//! The pod and container come from `/proc/<pid>/cgroup`; the names from
//! the runtime's state for that container: an OCI bundle's `config.json`
//! annotations (containerd: `io.kubernetes.cri.sandbox-name`, CRI-O:
//! `io.kubernetes.pod.name`) or docker's `config.v2.json` (its name and
//! kubelet's labels). Reads only; all of it is best effort.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::cgroups::cgroup_path_of_process;
use super::pod::{clues_from_cgroup, ContainerId, PodUid};

/// The pod name `kubectl debug node/<node>` gives its pods.
const DEBUG_POD_PREFIX: &str = "node-debugger-";

/// What a process belongs to.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_uid: Option<PodUid>,
    /// The pod's name and namespace, where the runtime's state says them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_name: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pod_namespace: Option<String>,
    /// The container's name (kubelet's, or docker's without a pod).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<String>,
}

impl Owner {
    /// Whether this is a pod `kubectl debug node` made (and nobody deleted).
    pub fn is_debug_pod(&self) -> bool {
        self.pod_name.as_deref().is_some_and(|n| n.starts_with(DEBUG_POD_PREFIX))
    }

    /// "default/web", or the UID where the name is unknown.
    fn pod_words(&self) -> Option<String> {
        match (&self.pod_name, &self.pod_namespace, &self.pod_uid) {
            (Some(name), Some(ns), _) => Some(format!("{ns}/{name}")),
            (Some(name), None, _) => Some(name.clone()),
            (None, _, Some(uid)) => Some(uid.to_string()),
            (None, _, None) => None,
        }
    }

    /// "the leftover kubectl debug pod default/node-debugger-x",
    /// "pod default/web (container app)", "docker container web".
    pub fn words(&self) -> String {
        let container = self.container.as_ref().map(|c| format!(" (container {c})")).unwrap_or_default();
        match self.pod_words() {
            Some(pod) if self.is_debug_pod() => format!("the leftover kubectl debug pod {pod}"),
            Some(pod) => format!("pod {pod}{container}"),
            None => format!("docker container {}", self.container.as_deref().unwrap_or("?")),
        }
    }

    /// The command that deletes the pod: `kubectl delete pod -n NS -- NAME`
    /// (the names are the runtime's state's, which a pod's spec chose).
    pub fn delete_pod(&self) -> Option<String> {
        let name = self.pod_name.as_deref()?;
        let ns = self.pod_namespace.as_deref().unwrap_or("default");
        Some(crate::words::CommandLine::new("kubectl delete pod -n").value(ns).operands([name]).into())
    }
}

/// Where the runtimes keep each container's state, as podstuck reaches it.
#[derive(Clone, Debug)]
pub struct RuntimeState {
    /// Directories holding `<container id>/config.json` (OCI bundles).
    bundles: Vec<PathBuf>,
    /// Docker's `containers` directory: `<id>/config.v2.json`.
    docker: PathBuf,
}

impl RuntimeState {
    /// This node's runtimes at their default places.
    pub fn of_this_node(node: &crate::node_access::Node) -> RuntimeState {
        RuntimeState::under(&node.path("/"))
    }

    /// The runtimes' default places under `root`.
    pub fn under(root: &Path) -> RuntimeState {
        RuntimeState {
            bundles: [
                "run/containerd/io.containerd.runtime.v2.task/k8s.io",
                "run/containerd/io.containerd.runtime.v2.task/moby",
                "run/containers/storage/overlay-containers",
            ]
            .iter()
            .map(|d| root.join(d))
            .collect(),
            docker: root.join("var/lib/docker/containers"),
        }
    }

    /// What process `pid` (under `proc_root`) belongs to, if a pod or container.
    pub fn owner_of(&self, proc_root: &Path, pid: u32) -> Option<Owner> {
        let (pod_uid, container) = clues_from_cgroup(&cgroup_path_of_process(proc_root, pid)?);
        let mut owner = Owner { pod_uid, ..Owner::default() };
        if let Some(id) = &container {
            self.name(id, &mut owner);
        }
        (owner.pod_uid.is_some() || owner.pod_name.is_some() || owner.container.is_some()).then_some(owner)
    }

    /// Fills in the names the runtime's state gives container `id`.
    fn name(&self, id: &ContainerId, owner: &mut Owner) {
        for dir in &self.bundles {
            // CRI-O keeps its config under userdata/.
            for file in [dir.join(id.as_str()).join("config.json"), dir.join(id.as_str()).join("userdata/config.json")]
            {
                if let Some(config) = read_json(&file) {
                    let notes = &config["annotations"];
                    let pick = |keys: &[&str]| keys.iter().find_map(|k| notes[*k].as_str().map(str::to_string));
                    owner.pod_name = pick(&["io.kubernetes.cri.sandbox-name", "io.kubernetes.pod.name"]);
                    owner.pod_namespace = pick(&["io.kubernetes.cri.sandbox-namespace", "io.kubernetes.pod.namespace"]);
                    owner.container = pick(&["io.kubernetes.cri.container-name", "io.kubernetes.container.name"]);
                    return;
                }
            }
        }
        if let Some(config) = read_json(&self.docker.join(id.as_str()).join("config.v2.json")) {
            let labels = &config["Config"]["Labels"];
            let label = |k: &str| labels[k].as_str().map(str::to_string);
            owner.pod_name = label("io.kubernetes.pod.name");
            owner.pod_namespace = label("io.kubernetes.pod.namespace");
            owner.container = label("io.kubernetes.container.name")
                .or_else(|| config["Name"].as_str().map(|n| n.trim_start_matches('/').to_string()));
        }
    }
}

/// A runtime's JSON state file; runtimes write small ones, a big one is not theirs.
fn read_json(path: &Path) -> Option<serde_json::Value> {
    const LIMIT: u64 = 4 << 20;
    let file = std::fs::File::open(path).ok()?;
    let mut text = Vec::new();
    std::io::Read::read_to_end(&mut std::io::Read::take(file, LIMIT), &mut text).ok()?;
    let value: serde_json::Value = serde_json::from_slice(&text).ok()?;
    // Names are node-chosen text: nothing of them reaches a terminal raw.
    Some(sanitized(value))
}

fn sanitized(value: serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match value {
        Value::String(s) => Value::String(crate::words::terminal_safe(&s).into_owned()),
        Value::Object(map) => Value::Object(map.into_iter().map(|(k, v)| (k, sanitized(v))).collect()),
        Value::Array(items) => Value::Array(items.into_iter().map(sanitized).collect()),
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::TempDir;

    const UID: &str = "1b2c3d4e-5f60-4a7b-8c9d-0e1f2a3b4c5d";
    const UID_: &str = "1b2c3d4e_5f60_4a7b_8c9d_0e1f2a3b4c5d";
    const CID: &str = "4f2a1c0d9e8b7a6f5e4d3c2b1a0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c4b3a29";

    /// A fake node: /proc/<pid>/cgroup of one process in a pod's container, and `root`.
    fn node(name: &str, pid: u32) -> (TempDir, PathBuf) {
        let tmp = TempDir::new(name);
        let proc_pid = tmp.0.join("proc").join(pid.to_string());
        std::fs::create_dir_all(&proc_pid).unwrap();
        let cgroup = format!("0::/kubepods.slice/kubepods-besteffort.slice/kubepods-besteffort-pod{UID_}.slice/cri-containerd-{CID}.scope\n");
        std::fs::write(proc_pid.join("cgroup"), cgroup).unwrap();
        let proc = tmp.0.join("proc");
        (tmp, proc)
    }

    fn write(path: PathBuf, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn a_leftover_debug_pod_is_named_from_containerds_bundle() {
        let (tmp, proc) = node("owner-debug", 42);
        let config = r#"{"annotations":{"io.kubernetes.cri.sandbox-name":"node-debugger-node-1-x7k2p","io.kubernetes.cri.sandbox-namespace":"default","io.kubernetes.cri.container-name":"debugger"}}"#;
        write(
            tmp.0.join("root/run/containerd/io.containerd.runtime.v2.task/k8s.io").join(CID).join("config.json"),
            config,
        );
        let owner = RuntimeState::under(&tmp.0.join("root")).owner_of(&proc, 42).unwrap();
        assert_eq!(owner.pod_uid.as_ref().map(|u| u.to_string()).as_deref(), Some(UID));
        assert!(owner.is_debug_pod());
        assert_eq!(owner.words(), "the leftover kubectl debug pod default/node-debugger-node-1-x7k2p");
        assert_eq!(owner.delete_pod().unwrap(), "kubectl delete pod -n default -- node-debugger-node-1-x7k2p");
    }

    #[test]
    fn a_pod_is_named_from_crio_or_docker_state_else_by_uid() {
        let (tmp, proc) = node("owner-crio", 7);
        let root = tmp.0.join("root");
        let state = RuntimeState::under(&root);
        assert_eq!(state.owner_of(&proc, 7).unwrap().words(), format!("pod {UID}"));
        let crio = r#"{"annotations":{"io.kubernetes.pod.name":"web-0","io.kubernetes.pod.namespace":"shop","io.kubernetes.container.name":"app"}}"#;
        write(root.join("run/containers/storage/overlay-containers").join(CID).join("userdata/config.json"), crio);
        assert_eq!(state.owner_of(&proc, 7).unwrap().words(), "pod shop/web-0 (container app)");
        std::fs::remove_dir_all(root.join("run")).unwrap();
        let docker = r#"{"Name":"/k8s_app_web-0","Config":{"Labels":{"io.kubernetes.pod.name":"web-0\u001b[2J","io.kubernetes.pod.namespace":"shop"}}}"#;
        write(root.join("var/lib/docker/containers").join(CID).join("config.v2.json"), docker);
        let owner = state.owner_of(&proc, 7).unwrap();
        assert_eq!(owner.container.as_deref(), Some("k8s_app_web-0"));
        assert!(!owner.words().contains('\u{1b}'), "{}", owner.words());
        assert!(!owner.is_debug_pod());
    }

    #[test]
    fn a_process_of_no_pod_has_no_owner() {
        let tmp = TempDir::new("owner-none");
        std::fs::create_dir_all(tmp.0.join("9")).unwrap();
        std::fs::write(tmp.0.join("9/cgroup"), "0::/system.slice/kubelet.service\n").unwrap();
        assert_eq!(RuntimeState::under(&tmp.0).owner_of(&tmp.0, 9), None);
        assert_eq!(RuntimeState::under(&tmp.0).owner_of(&tmp.0, 10), None);
    }
}
