//! What `explain --all` reads, through [`Api`]: the pods (of one
//! namespace or all), then only when some are stuck, the objects their
//! diagnosis needs, each listed once (warning events, nodes, leases,
//! claims, volume attachments), the podstuck DaemonSet's pods, and each
//! stuck pod's node's `/findings` through the API server's pod proxy, a
//! few nodes at a time, each within a timeout, all within a budget.
//!
//! Only the pods must be read; anything else that cannot be is said, and
//! the report is made of the rest.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime};

use anyhow::{anyhow, Result};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::ListParams;

use super::{report, stuck_pods, AllReport, FindingsPage, NodeAnswer, StuckPod, MAX_PODS_LISTED};
use crate::explain::client::{claim_names, Api, KubeOptions};
use crate::explain::offline::Objects;
use crate::explain::snapshot::Unread;
use crate::print::{stderr_line, Out};

/// Where the podstuck DaemonSet runs (deploy/podstuck-daemonset.yaml).
pub const DAEMONSET_NAMESPACE: &str = "podstuck";
/// The label its pods carry.
pub const DAEMONSET_LABEL: &str = "app.kubernetes.io/name=podstuck";
/// The name of the container port it serves `/findings` on.
pub const PORT_NAME: &str = "metrics";
/// That port when a pod does not name it.
pub const DEFAULT_PORT: u16 = 9464;

/// How long one node's podstuck may take to answer.
pub const PROXY_TIMEOUT: Duration = Duration::from_secs(5);
/// Nodes asked at once: enough to be quick, few enough not to load the
/// API server (each call goes through it to the node's kubelet).
pub const NODES_AT_ONCE: usize = 4;
/// All nodes are asked within this; the ones not asked by then are said.
pub const NODES_BUDGET: Duration = Duration::from_secs(60);

/// What `podstuck explain --all` is told.
#[derive(Clone, Debug, Default)]
pub struct AllOptions {
    /// `-n`: one namespace's pods only (default: every namespace).
    pub namespace: Option<String>,
    pub json: bool,
    pub kube: KubeOptions,
}

/// Runs `podstuck explain --all` (and `kubectl podstuck --all`).
pub async fn explain_all(options: &AllOptions) -> Result<()> {
    let api = Api::connect(&options.kube).await?;
    let report = read(&api, options.namespace.as_deref()).await?;
    let mut out = Out::stdout();
    if options.json {
        out.line_as_is(&super::json(&report, &api.through))?;
    } else {
        let scope = options.namespace.as_deref().map(|ns| format!("namespace {ns}")).unwrap_or_else(|| "all namespaces".into());
        stderr_line(format_args!("podstuck: read the pods of {scope} through {}", api.through));
        out.text(&super::text(&report))?;
    }
    out.flush()?;
    Ok(())
}

/// Reads everything the report needs and makes it.
pub async fn read(api: &Api, namespace: Option<&str>) -> Result<AllReport> {
    let scope = namespace.map(|ns| format!(" in namespace {ns}")).unwrap_or_else(|| " in all namespaces".into());
    let pods: Vec<Pod> = api.list(namespace, &ListParams::default(), "pods").await.map_err(|why| anyhow!("cannot list the pods{scope}: {why}"))?;
    let now = SystemTime::now();
    let pods_read = pods.len();
    let (stuck, stuck_in_all) = stuck_pods(pods, now, MAX_PODS_LISTED);
    let mut unread: Vec<Unread> = Vec::new();
    if stuck.is_empty() {
        return Ok(report(now, pods_read, 0, &[], &BTreeMap::new(), &unread));
    }
    let objects = objects(api, namespace, &stuck, &mut unread).await;
    let stuck: Vec<StuckPod> = stuck
        .into_iter()
        .map(|pod| {
            let s = objects.snapshot_of(pod, now);
            StuckPod::of(&s, crate::explain::findings(&s))
        })
        .collect();
    let nodes: BTreeSet<String> = stuck.iter().filter_map(|p| p.node.clone()).collect();
    let answers = ask_nodes(api, &nodes).await;
    Ok(report(now, pods_read, stuck_in_all, &stuck, &answers, &unread))
}

/// Each object the stuck pods' diagnosis looks at, listed once; what
/// cannot be is said in `unread`.
async fn objects(api: &Api, namespace: Option<&str>, stuck: &[Pod], unread: &mut Vec<Unread>) -> Objects {
    fn said<T>(unread: &mut Vec<Unread>, what: &str, result: Result<Vec<T>, String>) -> Option<Vec<T>> {
        match result {
            Ok(items) => Some(items),
            Err(why) => {
                unread.push(Unread { what: what.to_string(), why });
                None
            }
        }
    }
    let mut objects = Objects::default();
    let warnings = ListParams::default().fields("type=Warning");
    objects.events = said(unread, "the warning events", api.list::<Event>(namespace, &warnings, "events").await).unwrap_or_default();
    if let Some(nodes) = said(unread, "the nodes", api.list_cluster::<Node>("nodes").await) {
        objects.nodes = nodes;
        objects.all_nodes = true;
    }
    objects.leases = said(unread, "the nodes' leases", api.list::<Lease>(Some("kube-node-lease"), &ListParams::default(), "leases.coordination.k8s.io").await)
        .unwrap_or_default();
    if stuck.iter().any(|p| !claim_names(p).is_empty()) {
        objects.claims = said(unread, "the claims", api.list::<PersistentVolumeClaim>(namespace, &ListParams::default(), "persistentvolumeclaims").await)
            .unwrap_or_default();
    }
    if objects.claims.iter().any(|c| c.spec.as_ref().is_some_and(|s| s.volume_name.is_some())) {
        objects.attachments = said(unread, "the volume attachments", api.list_cluster::<VolumeAttachment>("volumeattachments.storage.k8s.io").await)
            .unwrap_or_default();
    }
    objects
}

/// The pod of the DaemonSet to ask on each node, and its port.
fn podstuck_pods(pods: Vec<Pod>) -> BTreeMap<String, (String, u16, Option<String>)> {
    let mut by_node = BTreeMap::new();
    for pod in pods {
        let (Some(name), Some(node)) = (pod.metadata.name.clone(), pod.spec.as_ref().and_then(|s| s.node_name.clone())) else { continue };
        let port = pod
            .spec
            .iter()
            .flat_map(|s| s.containers.iter())
            .flat_map(|c| c.ports.iter().flatten())
            .find(|p| p.name.as_deref() == Some(PORT_NAME))
            .and_then(|p| u16::try_from(p.container_port).ok())
            .unwrap_or(DEFAULT_PORT);
        let phase = pod.status.as_ref().and_then(|s| s.phase.clone());
        let running = phase.as_deref() == Some("Running") && pod.metadata.deletion_timestamp.is_none();
        // A pod not running is said as such, unless another one on the node runs.
        let not_running = (!running).then(|| format!("it is {}", phase.as_deref().unwrap_or("not running yet")));
        match by_node.get(&node) {
            Some((_, _, None)) => {}
            _ => {
                by_node.insert(node, (name, port, not_running));
            }
        }
    }
    by_node
}

/// What each node's podstuck says, asked through the pod proxy.
async fn ask_nodes(api: &Api, nodes: &BTreeSet<String>) -> BTreeMap<String, NodeAnswer> {
    let selector = ListParams::default().labels(DAEMONSET_LABEL);
    let daemons = match api.list::<Pod>(Some(DAEMONSET_NAMESPACE), &selector, "pods").await {
        Ok(pods) => podstuck_pods(pods),
        Err(why) => {
            let why = format!("cannot list the podstuck DaemonSet's pods (namespace {DAEMONSET_NAMESPACE}, label {DAEMONSET_LABEL}): {why}");
            return nodes.iter().map(|n| (n.clone(), NodeAnswer::NotHeard { podstuck_pod: None, why: why.clone() })).collect();
        }
    };
    let mut answers = BTreeMap::new();
    let mut to_ask = Vec::new();
    for node in nodes {
        match daemons.get(node) {
            None => {
                answers.insert(node.clone(), NodeAnswer::NoDaemonSet);
            }
            Some((pod, _, Some(why))) => {
                answers.insert(node.clone(), NodeAnswer::NotHeard { podstuck_pod: Some(pod.clone()), why: why.clone() });
            }
            Some((pod, port, None)) => to_ask.push((node.clone(), pod.clone(), *port)),
        }
    }
    let started = Instant::now();
    let gate = Arc::new(tokio::sync::Semaphore::new(NODES_AT_ONCE));
    let mut asking = tokio::task::JoinSet::new();
    let client = Arc::new(api.clone());
    for (node, pod, port) in to_ask {
        let (gate, client) = (gate.clone(), client.clone());
        asking.spawn(async move {
            let _turn = gate.acquire_owned().await;
            let answer = match started.elapsed() < NODES_BUDGET {
                false => NodeAnswer::NotHeard {
                    podstuck_pod: Some(pod),
                    why: format!("not asked: {} for all nodes ran out", crate::words::human_duration(NODES_BUDGET)),
                },
                true => match client.pod_proxy_get(DAEMONSET_NAMESPACE, &pod, port, "findings", PROXY_TIMEOUT).await.and_then(|t| FindingsPage::parse(&t)) {
                    Ok(page) => NodeAnswer::Answered { podstuck_pod: pod, page },
                    Err(why) => NodeAnswer::NotHeard { podstuck_pod: Some(pod), why },
                },
            };
            (node, answer)
        });
    }
    while let Some(done) = asking.join_next().await {
        if let Ok((node, answer)) = done {
            answers.insert(node, answer);
        }
    }
    answers
}
