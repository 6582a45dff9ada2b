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

/// Where the podstuck DaemonSet runs unless told otherwise
/// (`--podstuck-namespace`, `$PODSTUCK_NAMESPACE`): the namespace of
/// deploy/base, which an install's own overlay may change.
pub const DAEMONSET_NAMESPACE: &str = "podstuck";
/// The variable that names podstuck's namespace when no flag does: one
/// setting for `podstuck explain --all` and `kubectl podstuck` alike.
pub const NAMESPACE_VARIABLE: &str = "PODSTUCK_NAMESPACE";
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
    /// Where the podstuck DaemonSet runs (`--podstuck-namespace`); `None`
    /// is [`DAEMONSET_NAMESPACE`].
    pub podstuck_namespace: Option<String>,
    pub json: bool,
    pub kube: KubeOptions,
}

/// Runs `podstuck explain --all` (and `kubectl podstuck --all`).
pub async fn explain_all(options: &AllOptions) -> Result<()> {
    // A namespace is a DNS label: nothing else reaches a URL.
    let label = |ns: &str| {
        !ns.is_empty()
            && ns.len() <= 63
            && ns.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    };
    if let Some(ns) = options.namespace.as_deref().filter(|ns| !label(ns)) {
        return Err(anyhow!("-n {}: not a namespace name", crate::words::terminal_safe(ns)));
    }
    let podstuck_namespace = options.podstuck_namespace.as_deref().unwrap_or(DAEMONSET_NAMESPACE);
    if !label(podstuck_namespace) {
        return Err(anyhow!(
            "--podstuck-namespace {}: not a namespace name",
            crate::words::terminal_safe(podstuck_namespace)
        ));
    }
    let api = Api::connect(&options.kube).await?;
    let report = read(&api, options.namespace.as_deref(), podstuck_namespace).await?;
    let mut out = Out::stdout();
    if options.json {
        out.line_as_is(&super::json(&report, &api.through))?;
    } else {
        let scope =
            options.namespace.as_deref().map(|ns| format!("namespace {ns}")).unwrap_or_else(|| "all namespaces".into());
        stderr_line(format_args!("podstuck: read the pods of {scope} through {}", api.through));
        out.text(&super::text(&report))?;
    }
    out.flush()?;
    Ok(())
}

/// Reads everything the report needs and makes it; the DaemonSet's pods
/// are looked for in `podstuck_namespace`.
pub async fn read(api: &Api, namespace: Option<&str>, podstuck_namespace: &str) -> Result<AllReport> {
    let scope = namespace.map(|ns| format!(" in namespace {ns}")).unwrap_or_else(|| " in all namespaces".into());
    let pods: Vec<Pod> = api
        .list(namespace, &ListParams::default(), "pods")
        .await
        .map_err(|why| anyhow!("cannot list the pods{scope}: {why}"))?;
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
    let answers = ask_nodes(api, &nodes, podstuck_namespace).await;
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
    objects.events =
        said(unread, "the warning events", api.list::<Event>(namespace, &warnings, "events").await).unwrap_or_default();
    if let Some(nodes) = said(unread, "the nodes", api.list_cluster::<Node>("nodes").await) {
        objects.nodes = nodes;
        objects.all_nodes = true;
    }
    objects.leases = said(
        unread,
        "the nodes' leases",
        api.list::<Lease>(Some("kube-node-lease"), &ListParams::default(), "leases.coordination.k8s.io").await,
    )
    .unwrap_or_default();
    if stuck.iter().any(|p| !claim_names(p).is_empty()) {
        objects.claims = said(
            unread,
            "the claims",
            api.list::<PersistentVolumeClaim>(namespace, &ListParams::default(), "persistentvolumeclaims").await,
        )
        .unwrap_or_default();
    }
    if objects.claims.iter().any(|c| c.spec.as_ref().is_some_and(|s| s.volume_name.is_some())) {
        objects.attachments = said(
            unread,
            "the volume attachments",
            api.list_cluster::<VolumeAttachment>("volumeattachments.storage.k8s.io").await,
        )
        .unwrap_or_default();
    }
    objects
}

/// The pod of the DaemonSet to ask on each node, and its port.
fn podstuck_pods(pods: Vec<Pod>) -> BTreeMap<String, (String, u16, Option<String>)> {
    let mut by_node = BTreeMap::new();
    for pod in pods {
        let (Some(name), Some(node)) = (pod.metadata.name.clone(), pod.spec.as_ref().and_then(|s| s.node_name.clone()))
        else {
            continue;
        };
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

/// What each node's podstuck says, asked through the pod proxy; the
/// DaemonSet runs in `podstuck_namespace`.
async fn ask_nodes(api: &Api, nodes: &BTreeSet<String>, podstuck_namespace: &str) -> BTreeMap<String, NodeAnswer> {
    let selector = ListParams::default().labels(DAEMONSET_LABEL);
    let daemons = match api.list::<Pod>(Some(podstuck_namespace), &selector, "pods").await {
        Ok(pods) => podstuck_pods(pods),
        Err(why) => {
            let why = format!("cannot list the podstuck DaemonSet's pods (namespace {podstuck_namespace}, label {DAEMONSET_LABEL}; another namespace: --podstuck-namespace or ${NAMESPACE_VARIABLE}): {why}");
            return nodes
                .iter()
                .map(|n| (n.clone(), NodeAnswer::NotHeard { podstuck_pod: None, why: why.clone() }))
                .collect();
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
                answers
                    .insert(node.clone(), NodeAnswer::NotHeard { podstuck_pod: Some(pod.clone()), why: why.clone() });
            }
            Some((pod, port, None)) => to_ask.push((node.clone(), pod.clone(), *port)),
        }
    }
    let started = Instant::now();
    let gate = Arc::new(tokio::sync::Semaphore::new(NODES_AT_ONCE));
    let mut asking = tokio::task::JoinSet::new();
    let client = Arc::new(api.clone());
    let namespace: Arc<str> = Arc::from(podstuck_namespace);
    for (node, pod, port) in to_ask {
        let (gate, client, namespace) = (gate.clone(), client.clone(), namespace.clone());
        asking.spawn(async move {
            let _turn = gate.acquire_owned().await;
            let answer = match started.elapsed() < NODES_BUDGET {
                false => NodeAnswer::NotHeard {
                    podstuck_pod: Some(pod),
                    why: format!("not asked: {} for all nodes ran out", crate::words::human_duration(NODES_BUDGET)),
                },
                true => match client
                    .pod_proxy_get(&namespace, &pod, port, "findings", PROXY_TIMEOUT)
                    .await
                    .and_then(|t| FindingsPage::parse(&t))
                {
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

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, ContainerPort, PodSpec, PodStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn daemon(name: &str, node: &str, phase: &str, port: Option<i32>) -> Pod {
        let ports =
            port.map(|p| vec![ContainerPort { name: Some(PORT_NAME.into()), container_port: p, ..Default::default() }]);
        Pod {
            metadata: ObjectMeta {
                name: Some(name.into()),
                namespace: Some(DAEMONSET_NAMESPACE.into()),
                ..Default::default()
            },
            spec: Some(PodSpec {
                node_name: Some(node.into()),
                containers: vec![Container { name: "podstuck".into(), ports, ..Default::default() }],
                ..Default::default()
            }),
            status: Some(PodStatus { phase: Some(phase.into()), ..Default::default() }),
        }
    }

    #[test]
    fn each_node_is_asked_on_its_running_podstuck_pod_and_the_port_named_metrics() {
        let found = podstuck_pods(vec![
            daemon("podstuck-a", "worker-1", "Running", Some(9500)),
            daemon("podstuck-old", "worker-1", "Pending", None),
            daemon("podstuck-b", "worker-2", "Pending", None),
            daemon("podstuck-c", "worker-3", "Running", None),
        ]);
        assert_eq!(found["worker-1"], ("podstuck-a".to_string(), 9500, None));
        assert_eq!(found["worker-2"], ("podstuck-b".to_string(), DEFAULT_PORT, Some("it is Pending".to_string())));
        assert_eq!(found["worker-3"], ("podstuck-c".to_string(), DEFAULT_PORT, None));
    }

    #[test]
    fn a_namespace_that_is_no_dns_label_is_refused_before_anything_is_asked() {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        let options = AllOptions { namespace: Some("../kube-system".into()), ..Default::default() };
        let e = runtime.block_on(explain_all(&options)).unwrap_err().to_string();
        assert_eq!(e, "-n ../kube-system: not a namespace name");
    }
}
