//! `podstuck explain --from FILE...`: the same diagnosis from JSON a user
//! saved with kubectl (`get pod -o json`, `get events -o json`, a node, a
//! lease, claims, VolumeAttachments, and Lists of any of them), on a
//! laptop or from a ticket. Each object is told apart by its
//! apiVersion and kind, never by the file's name.
//!
//! The files are untrusted: regular files only, each at most
//! [`MAX_FILE`] bytes and [`MAX_OBJECTS`] objects in all, and anything
//! unexpected is an error that names the file and the object.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use anyhow::{anyhow, bail, Result};
use k8s_openapi::api::core::v1::Pod;
use serde::de::DeserializeOwned;
use serde_json::Value;

use super::client::{claim_names, read_small};
use super::snapshot::ApiSnapshot;
use super::PodRef;
use crate::node_access::path_words;

/// The largest file read: a busy namespace's events fit many times over.
pub const MAX_FILE: u64 = 32 << 20;

/// The most objects read from all files together.
pub const MAX_OBJECTS: usize = 100_000;

/// Objects read in bulk, by kind: what the files held, or what
/// `explain --all` listed once for every stuck pod (so 500 pods cost six
/// lists, not 500 rounds of reads).
#[derive(Default)]
pub struct Objects {
    pub pods: Vec<Pod>,
    pub events: Vec<k8s_openapi::api::core::v1::Event>,
    pub nodes: Vec<k8s_openapi::api::core::v1::Node>,
    pub leases: Vec<k8s_openapi::api::coordination::v1::Lease>,
    pub claims: Vec<k8s_openapi::api::core::v1::PersistentVolumeClaim>,
    pub attachments: Vec<k8s_openapi::api::storage::v1::VolumeAttachment>,
    count: usize,
    /// Every node was listed: a node not among them is gone, not merely
    /// unsaved (files a user saved say nothing of the nodes left out).
    pub all_nodes: bool,
}

/// One object, typed, or an error naming where it came from.
fn typed<T: DeserializeOwned>(object: Value, whence: &str) -> Result<T> {
    serde_json::from_value(object).map_err(|e| anyhow!("{whence}: {e}"))
}

impl Objects {
    /// Takes one object (a List's items one by one; `item_kind` is the kind
    /// a typed list's items have when they do not say it).
    fn take(&mut self, object: Value, item_kind: Option<&str>, whence: &str) -> Result<()> {
        let Value::Object(map) = &object else { bail!("{whence}: not a JSON object") };
        let api_version = map.get("apiVersion").and_then(Value::as_str).unwrap_or("");
        let kind = map.get("kind").and_then(Value::as_str).or(item_kind).unwrap_or("").to_string();
        if kind == "List" || (kind.ends_with("List") && map.contains_key("items")) {
            let items = match object {
                Value::Object(mut m) => m.remove("items").unwrap_or(Value::Null),
                _ => unreachable!(),
            };
            let Value::Array(items) = items else { bail!("{whence}: a {kind} without items") };
            let inner = kind.strip_suffix("List").filter(|k| !k.is_empty()).map(str::to_string);
            for (n, item) in items.into_iter().enumerate() {
                self.take(item, inner.as_deref(), &format!("{whence}, item {n}"))?;
            }
            return Ok(());
        }
        self.count += 1;
        if self.count > MAX_OBJECTS {
            bail!("{whence}: more than {MAX_OBJECTS} objects in all: save only what concerns the pod");
        }
        // A typed list's items carry no apiVersion: the group follows from the kind.
        let group =
            api_version.rsplit_once('/').map(|(g, _)| g).unwrap_or(if api_version.is_empty() { "?" } else { "" });
        match (group, kind.as_str()) {
            ("" | "?", "Pod") => self.pods.push(typed(object, whence)?),
            ("" | "?", "Event") => self.events.push(typed(object, whence)?),
            ("" | "?", "Node") => self.nodes.push(typed(object, whence)?),
            ("" | "?", "PersistentVolumeClaim") => self.claims.push(typed(object, whence)?),
            ("coordination.k8s.io" | "?", "Lease") => self.leases.push(typed(object, whence)?),
            ("storage.k8s.io" | "?", "VolumeAttachment") => self.attachments.push(typed(object, whence)?),
            ("events.k8s.io", "Event") => bail!("{whence}: an events.k8s.io/v1 Event: save events as kubectl get events -o json prints them (core v1)"),
            _ => bail!(
                "{whence}: {} {kind}: not something podstuck explain reads (a Pod, Event, Node, Lease, PersistentVolumeClaim, VolumeAttachment, or a List of them)",
                if api_version.is_empty() { "an object of kind" } else { api_version }
            ),
        }
        Ok(())
    }
}

/// Reads the files and picks the pod: the one `pod` names, or the only
/// one saved.
pub fn snapshot(files: &[PathBuf], pod: Option<&PodRef>, now: SystemTime) -> Result<ApiSnapshot> {
    let mut saved = Objects::default();
    for file in files {
        read_file(file, &mut saved)?;
    }
    let names = |pods: &[Pod]| {
        pods.iter()
            .map(|p| {
                format!(
                    "{}/{}",
                    p.metadata.namespace.as_deref().unwrap_or("default"),
                    p.metadata.name.as_deref().unwrap_or("?")
                )
            })
            .collect::<Vec<_>>()
            .join(", ")
    };
    let chosen = match pod {
        Some(wanted) => saved.pods.iter().position(|p| wanted.matches(p)).ok_or_else(|| {
            anyhow!(
                "{} is not in the files (they hold: {})",
                wanted.words(),
                if saved.pods.is_empty() { "no pod".into() } else { names(&saved.pods) }
            )
        })?,
        None => match saved.pods.len() {
            0 => bail!(
                "the files hold no pod: add the pod's JSON (kubectl get pod NAME -n NAMESPACE -o json > pod.json)"
            ),
            1 => 0,
            _ => bail!(
                "the files hold several pods ({}): name one: podstuck explain NAMESPACE/NAME --from ...",
                names(&saved.pods)
            ),
        },
    };
    let pod = saved.pods.swap_remove(chosen);
    Ok(saved.snapshot_of(pod, now))
}

impl Objects {
    /// A snapshot of `pod` from these objects: the events about it, its
    /// node and lease, its claims and their volumes' attachments.
    pub fn snapshot_of(&self, pod: Pod, now: SystemTime) -> ApiSnapshot {
        let mut s = ApiSnapshot::of(pod, now);
        let uid = s.pod.metadata.uid.clone().unwrap_or_default();
        s.events = self
            .events
            .iter()
            .filter(|e| {
                let about = e.involved_object.uid.as_deref() == Some(uid.as_str())
                    || (e.involved_object.kind.as_deref() == Some("Pod")
                        && e.involved_object.name.as_deref() == s.pod.metadata.name.as_deref()
                        && e.involved_object.namespace.as_deref() == s.pod.metadata.namespace.as_deref());
                // kubelet's orphaned-pod complaints name the UID, on the node's events.
                about || (!uid.is_empty() && e.message.as_deref().is_some_and(|m| m.contains(&uid)))
            })
            .cloned()
            .collect();
        if let Some(node) = s.node_name().map(str::to_string) {
            s.node = self.nodes.iter().find(|n| n.metadata.name.as_deref() == Some(node.as_str())).cloned();
            s.lease = self.leases.iter().find(|l| l.metadata.name.as_deref() == Some(node.as_str())).cloned();
            s.node_missing = self.all_nodes && s.node.is_none();
        }
        let wanted = claim_names(&s.pod);
        let ns = s.namespace().to_string();
        s.claims = self
            .claims
            .iter()
            .filter(|c| {
                c.metadata.namespace.as_deref().unwrap_or(&ns) == ns
                    && c.metadata.name.as_ref().is_some_and(|n| wanted.contains(n))
            })
            .cloned()
            .collect();
        // Only the attachments of its claims' volumes: the detector looks at no other.
        let volumes: Vec<&str> = s.claims.iter().filter_map(|c| c.spec.as_ref()?.volume_name.as_deref()).collect();
        s.attachments = self
            .attachments
            .iter()
            .filter(|a| a.spec.source.persistent_volume_name.as_deref().is_some_and(|pv| volumes.contains(&pv)))
            .cloned()
            .collect();
        s
    }
}

/// One file's objects, or an error naming the file.
fn read_file(file: &Path, saved: &mut Objects) -> Result<()> {
    let shown = path_words(file);
    let text = read_small(file, MAX_FILE).map_err(|e| anyhow!("cannot read {shown}: {e}"))?;
    // kubectl prints one document; a file of several (a shell's >>) is read whole.
    let mut any = false;
    for (n, value) in serde_json::Deserializer::from_str(&text).into_iter::<Value>().enumerate() {
        let value = value.map_err(|e| anyhow!("{shown}: not JSON as kubectl -o json writes it ({e})"))?;
        let whence = if n == 0 { shown.clone() } else { format!("{shown}, document {}", n + 1) };
        saved.take(value, None, &whence)?;
        any = true;
    }
    if !any {
        bail!("{shown}: empty");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::tests::{at, deleted_pod, node, warning};
    use super::*;
    use std::io::Write;

    fn file(dir: &Path, name: &str, value: &Value) -> PathBuf {
        let path = dir.join(name);
        std::fs::File::create(&path).unwrap().write_all(value.to_string().as_bytes()).unwrap();
        path
    }

    #[test]
    fn kinds_are_told_apart_by_api_version_and_kind_in_lists_too() {
        let dir = crate::test_support::TempDir::new("explain-offline");
        let pod = file(dir.0.as_path(), "a", &serde_json::to_value(deleted_pod(at(100.0))).unwrap());
        let events = serde_json::json!({"apiVersion": "v1", "kind": "List", "items": [serde_json::to_value(warning("FailedUnmount", "busy", 3, at(200.0))).unwrap()]});
        let events = file(dir.0.as_path(), "b", &events);
        let mut typed_list = serde_json::json!({"apiVersion": "v1", "kind": "NodeList", "items": [serde_json::to_value(node("worker-1", "False", at(50.0))).unwrap()]});
        typed_list["items"][0].as_object_mut().unwrap().remove("kind");
        let nodes = file(dir.0.as_path(), "c", &typed_list);
        let s = snapshot(&[pod, events, nodes], None, at(300.0)).unwrap();
        assert_eq!(s.pod_words(), "shop/web-0");
        assert_eq!(s.events.len(), 1);
        assert!(s.node.is_some());
    }

    #[test]
    fn bad_files_are_clear_errors() {
        let dir = crate::test_support::TempDir::new("explain-offline-bad");
        let secret = file(dir.0.as_path(), "s", &serde_json::json!({"apiVersion": "v1", "kind": "Secret"}));
        let e = snapshot(&[secret], None, at(0.0)).err().unwrap().to_string();
        assert!(e.contains("v1 Secret: not something podstuck explain reads"), "{e}");
        let junk = dir.0.as_path().join("junk");
        std::fs::write(&junk, "<html>").unwrap();
        assert!(snapshot(&[junk], None, at(0.0)).err().unwrap().to_string().contains("not JSON"));
        let e = snapshot(&[dir.0.as_path().to_path_buf()], None, at(0.0)).err().unwrap().to_string();
        assert!(e.contains("not a regular file"), "{e}");
        // A FIFO is refused, never opened to wait for a writer.
        let fifo = dir.0.as_path().join("fifo");
        nix::unistd::mkfifo(&fifo, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let e = snapshot(&[fifo], None, at(0.0)).err().unwrap().to_string();
        assert!(e.contains("it is a FIFO, not a regular file"), "{e}");
        let pod = file(dir.0.as_path(), "p", &serde_json::to_value(deleted_pod(at(100.0))).unwrap());
        let e = snapshot(&[pod], Some(&PodRef::parse("shop/other", None).unwrap()), at(0.0)).err().unwrap().to_string();
        assert_eq!(e, "shop/other is not in the files (they hold: shop/web-0)");
    }
}
