//! `podstuck explain` against a stand-in API server on loopback (real
//! request paths, real object and list shapes): one scenario per API-side
//! cause (P11), each also diagnosed offline from the same objects saved as
//! kubectl saves them (`--from`); the failures a user meets (server
//! unreachable, 401, 403, pod not found, a pod that is not stuck); and,
//! as root, `watch --pod NS/NAME` joining a real kernel finding (P1, a
//! volume still mounted on this host) with a pending finalizer, the root
//! cause first, and stopping (exit 2) when the API cannot be reached.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{
    Event, Node, NodeCondition, NodeSpec, NodeStatus, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimVolumeSource, Pod, PodSpec, PodStatus, Taint, Volume,
};
use k8s_openapi::api::storage::v1::{
    VolumeAttachment, VolumeAttachmentSource, VolumeAttachmentSpec, VolumeAttachmentStatus, VolumeError,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use podstuck_tests::apiserver::objects::{kubelet_warning, lease};
use podstuck_tests::apiserver::{kubeconfig_for, ApiServer};
use podstuck_tests::*;
use serde_json::Value;

const UID: &str = "7e1f0c2a-0000-4000-8000-0000000000e1";

fn ago(secs: u64) -> SystemTime {
    SystemTime::now() - Duration::from_secs(secs)
}

fn stamp(t: SystemTime) -> k8s_openapi::jiff::Timestamp {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
    k8s_openapi::jiff::Timestamp::from_second(secs as i64).unwrap()
}

fn time(t: SystemTime) -> Time {
    Time(stamp(t))
}

/// What the cluster holds about pod shop/web-0 on worker-1.
#[derive(Clone)]
struct Cluster {
    pod: Pod,
    node: Node,
    lease: Lease,
    events: Vec<Event>,
    claims: Vec<PersistentVolumeClaim>,
    attachments: Vec<VolumeAttachment>,
}

impl Cluster {
    /// A running pod on a Ready node: nothing stuck.
    fn healthy(uid: &str) -> Cluster {
        let pod = Pod {
            metadata: ObjectMeta {
                name: Some("web-0".into()),
                namespace: Some("shop".into()),
                uid: Some(uid.into()),
                ..Default::default()
            },
            spec: Some(PodSpec { node_name: Some("worker-1".into()), ..Default::default() }),
            status: Some(PodStatus { phase: Some("Running".into()), ..Default::default() }),
        };
        let node = Node {
            metadata: ObjectMeta { name: Some("worker-1".into()), ..Default::default() },
            spec: Some(NodeSpec::default()),
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: "True".into(),
                    last_heartbeat_time: Some(time(ago(5))),
                    last_transition_time: Some(time(ago(86_400))),
                    reason: Some("KubeletReady".into()),
                    message: Some("kubelet is posting ready status".into()),
                }]),
                ..Default::default()
            }),
        };
        let lease = lease("worker-1", ago(3));
        Cluster { pod, node, lease, events: Vec::new(), claims: Vec::new(), attachments: Vec::new() }
    }

    /// The pod deleted `secs` ago past its grace period.
    fn deleted(mut self, secs: u64) -> Cluster {
        self.pod.metadata.deletion_timestamp = Some(time(ago(secs)));
        self.pod.metadata.deletion_grace_period_seconds = Some(30);
        self
    }

    /// The pod's volume "data" is claim data-web-0, bound to volume pv-7.
    fn with_claim(mut self) -> Cluster {
        self.pod.spec.as_mut().unwrap().volumes = Some(vec![Volume {
            name: "data".into(),
            persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
                claim_name: "data-web-0".into(),
                read_only: None,
            }),
            ..Default::default()
        }]);
        self.claims.push(PersistentVolumeClaim {
            metadata: ObjectMeta {
                name: Some("data-web-0".into()),
                namespace: Some("shop".into()),
                ..Default::default()
            },
            spec: Some(PersistentVolumeClaimSpec { volume_name: Some("pv-7".into()), ..Default::default() }),
            status: None,
        });
        self
    }

    fn serve(&self, api: &ApiServer) {
        api.object(&self.pod, Some("shop"), "web-0");
        api.list(Some("shop"), std::slice::from_ref(&self.pod));
        api.list(Some("shop"), &self.events);
        api.object(&self.node, None, "worker-1");
        api.object(&self.lease, Some("kube-node-lease"), "worker-1");
        for claim in &self.claims {
            api.object(claim, Some("shop"), claim.metadata.name.as_deref().unwrap());
        }
        api.list(None, &self.attachments);
    }

    /// The objects saved as kubectl saves them: the pod alone, the events
    /// and claims as a List, the node and lease alone, the attachments as
    /// a typed list.
    fn save(&self, dir: &Path) -> Vec<String> {
        let list =
            |items: Vec<Value>| serde_json::json!({"apiVersion": "v1", "kind": "List", "metadata": {}, "items": items});
        let value = |v: &dyn erased::Json| v.json();
        let files = [
            ("pod.json", value(&self.pod)),
            ("events.json", list(self.events.iter().map(|e| value(e)).collect())),
            ("node.json", value(&self.node)),
            ("lease.json", value(&self.lease)),
            ("claims.json", list(self.claims.iter().map(|c| value(c)).collect())),
            (
                "attachments.json",
                serde_json::to_value(k8s_openapi::List::<VolumeAttachment> {
                    items: self.attachments.clone(),
                    metadata: Default::default(),
                })
                .unwrap(),
            ),
        ];
        files
            .into_iter()
            .map(|(name, v)| {
                let path = dir.join(name);
                std::fs::write(&path, serde_json::to_string_pretty(&v).unwrap()).unwrap();
                path.to_str().unwrap().to_string()
            })
            .collect()
    }
}

/// Objects as JSON, whatever their type.
mod erased {
    pub trait Json {
        fn json(&self) -> serde_json::Value;
    }
    impl<T: serde::Serialize> Json for T {
        fn json(&self) -> serde_json::Value {
            serde_json::to_value(self).unwrap()
        }
    }
}

fn warning(reason: &str, message: &str, count: i32) -> Event {
    kubelet_warning(UID, reason, message, count, ago(600)..ago(20))
}

fn explain(args: &[&str]) -> Output {
    Command::new(podstuck_binary())
        .arg("explain")
        .args(args)
        .arg("--json")
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("HOME", "/nonexistent")
        .output()
        .expect("run podstuck explain")
}

/// The explain line and the findings of a successful run.
fn answer(output: &Output) -> (Value, Vec<Value>) {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "podstuck explain failed: {stderr}\n{stdout}");
    let mut lines = stdout.lines().map(|l| serde_json::from_str::<Value>(l).unwrap_or_else(|e| panic!("{e}: {l}")));
    let head = lines.next().expect("an explain line");
    assert_eq!(head["type"], "explain", "{head}");
    (head, lines.collect())
}

/// The cluster diagnosed through the API and from saved files: the same
/// findings both ways. Returns them.
fn both_ways(cluster: &Cluster) -> (Value, Vec<Value>) {
    let scratch = ScratchDir::new("explain");
    let api = ApiServer::start();
    cluster.serve(&api);
    let config = api.kubeconfig(scratch.path());
    let online = answer(&explain(&["web-0", "-n", "shop", "--kubeconfig", config.to_str().unwrap()]));
    assert!(
        api.requests().iter().all(|r| r.with_token),
        "every request carries the kubeconfig's token: {:?}",
        api.requests()
    );
    let mut args = vec!["--from".to_string()];
    args.extend(cluster.save(scratch.path()));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let offline = answer(&explain(&args));
    let essence = |findings: &[Value]| {
        findings
            .iter()
            .map(|f| (f["id"].clone(), f["fix"].clone(), f["evidence"].as_array().unwrap().len()))
            .collect::<Vec<_>>()
    };
    assert_eq!(essence(&online.1), essence(&offline.1), "online and offline disagree");
    assert_eq!(online.0["stuck"], offline.0["stuck"]);
    online
}

fn kinds(findings: &[Value]) -> Vec<&str> {
    findings.iter().map(|f| f["kind"].as_str().unwrap()).collect()
}

fn all_from_the_api(findings: &[Value]) {
    for f in findings {
        assert!(f["evidence"].as_array().unwrap().iter().all(|e| e["source"] == "api"), "{f}");
        assert_eq!(f["pod_uid"], UID);
        assert_eq!(f["type"], "finding");
    }
}

#[test]
fn a_pending_finalizer_is_named_with_its_owner_and_a_patch_that_removes_only_it() {
    let mut cluster = Cluster::healthy(UID).deleted(600);
    cluster.pod.metadata.finalizers = Some(vec!["example.com/backup-done".into()]);
    let (head, findings) = both_ways(&cluster);
    assert_eq!(head["stuck"], true);
    assert_eq!(kinds(&findings), ["finalizer-pending", "grace-period-past"]);
    all_from_the_api(&findings);
    let f = &findings[0];
    assert_eq!(f["severity"], "critical");
    assert_eq!(
        f["fix"],
        r#"kubectl patch pod -n shop --type=json -p '[{"op":"test","path":"/metadata/finalizers/0","value":"example.com/backup-done"},{"op":"remove","path":"/metadata/finalizers/0"}]' -- web-0"#
    );
    assert!(f["summary"].as_str().unwrap().contains("finalizer example.com/backup-done is still on it"), "{f}");
    assert!(
        f["advice"][0]
            .as_str()
            .unwrap()
            .starts_with("risk: removing it skips what the controller of example.com that added it"),
        "{f}"
    );
}

#[test]
fn the_api_is_asked_for_the_pod_its_events_node_and_lease() {
    let scratch = ScratchDir::new("explain-requests");
    let api = ApiServer::start();
    Cluster::healthy(UID).deleted(600).serve(&api);
    let config = api.kubeconfig(scratch.path());
    answer(&explain(&["shop/web-0", "--kubeconfig", config.to_str().unwrap()]));
    let asked: Vec<String> = api.requests().into_iter().map(|r| r.target).collect();
    for wanted in [
        "/api/v1/namespaces/shop/pods/web-0".to_string(),
        format!("/api/v1/namespaces/shop/events?&fieldSelector=involvedObject.uid%3D{UID}"),
        "/api/v1/nodes/worker-1".to_string(),
        "/apis/coordination.k8s.io/v1/namespaces/kube-node-lease/leases/worker-1".to_string(),
    ] {
        assert!(
            asked.iter().any(|a| a == &wanted || a.replace("?&", "?") == wanted.replace("?&", "?")),
            "{wanted} not asked: {asked:?}"
        );
    }
    // By UID: the pods are listed and the one with that UID picked.
    let before = api.requests().len();
    let (head, _) = answer(&explain(&[UID, "-n", "shop", "--kubeconfig", config.to_str().unwrap()]));
    assert_eq!(head["pod"], "shop/web-0");
    assert_eq!(api.requests()[before].target.split('?').next().unwrap(), "/api/v1/namespaces/shop/pods");
}

/// The pod's node unreachable: Ready Unknown since kubelet stopped posting
/// its status 20 minutes ago.
fn node_stopped_posting(cluster: &mut Cluster) {
    let status = cluster.node.status.as_mut().unwrap();
    status.conditions.as_mut().unwrap()[0] = NodeCondition {
        type_: "Ready".into(),
        status: "Unknown".into(),
        last_heartbeat_time: Some(time(ago(1200))),
        last_transition_time: Some(time(ago(1150))),
        reason: Some("NodeStatusUnknown".into()),
        message: Some("Kubelet stopped posting node status.".into()),
    };
}

#[test]
fn an_unreachable_node_is_the_root_cause_and_its_forced_deletion_says_the_risk() {
    let mut cluster = Cluster::healthy(UID).deleted(900);
    cluster.pod.metadata.finalizers = Some(vec!["example.com/backup-done".into()]);
    node_stopped_posting(&mut cluster);
    cluster.node.spec.as_mut().unwrap().taints = Some(vec![Taint {
        key: "node.kubernetes.io/unreachable".into(),
        effect: "NoExecute".into(),
        time_added: Some(time(ago(1140))),
        value: None,
    }]);
    cluster.lease.spec.as_mut().unwrap().renew_time = Some(MicroTime(stamp(ago(1190))));
    let (_, findings) = both_ways(&cluster);
    assert_eq!(kinds(&findings), ["node-not-ready", "finalizer-pending", "grace-period-past"]);
    let f = &findings[0];
    assert_eq!(f["fix"], "kubectl delete pod -n shop --grace-period=0 --force -- web-0");
    assert!(f["summary"].as_str().unwrap().contains("has been unreachable"), "{f}");
    assert!(f["advice"][0].as_str().unwrap().contains("the containers may still run on worker-1"), "{f}");
    let facts: Vec<&str> = f["evidence"].as_array().unwrap().iter().map(|e| e["fact"].as_str().unwrap()).collect();
    assert!(facts.iter().any(|e| e.starts_with("lease kube-node-lease/worker-1: renewTime")), "{facts:?}");
    assert!(facts.iter().any(|e| e.contains("taint node.kubernetes.io/unreachable:NoExecute")), "{facts:?}");
}

#[test]
fn a_volume_that_does_not_detach_is_quoted_from_its_volume_attachment() {
    let mut cluster = Cluster::healthy(UID).deleted(600).with_claim();
    let attachment = |name: &str, pv: &str, error: Option<&str>| VolumeAttachment {
        metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
        spec: VolumeAttachmentSpec {
            attacher: "ebs.csi.aws.com".into(),
            node_name: "worker-1".into(),
            source: VolumeAttachmentSource { persistent_volume_name: Some(pv.into()), ..Default::default() },
        },
        status: Some(VolumeAttachmentStatus {
            attached: true,
            detach_error: error.map(|m| VolumeError {
                message: Some(m.into()),
                time: Some(time(ago(100))),
                ..Default::default()
            }),
            ..Default::default()
        }),
    };
    cluster.attachments.push(attachment(
        "csi-aaa",
        "pv-7",
        Some("rpc error: code = Internal desc = volume vol-1 is busy"),
    ));
    cluster.attachments.push(attachment("csi-bbb", "pv-other", Some("not this pod's")));
    let (_, findings) = both_ways(&cluster);
    assert_eq!(kinds(&findings), ["volume-detach-stuck", "grace-period-past"]);
    let f = &findings[0];
    assert!(
        f["summary"].as_str().unwrap().contains("\"rpc error: code = Internal desc = volume vol-1 is busy\""),
        "{f}"
    );
    assert_eq!(f["fix"], "kubectl get volumeattachment -o yaml -- csi-aaa");
}

#[test]
fn kubelet_warnings_are_quoted_after_the_node_and_before_the_holds() {
    let mut cluster = Cluster::healthy(UID).deleted(600);
    cluster.events.push(warning("FailedUnmount", "UnmountVolume.TearDown failed for volume \"data\" : unmount failed: exit status 32: umount: /var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/pv-7/mount: target is busy (device or resource busy)", 9));
    cluster.events.push(warning(
        "FailedKillPod",
        "error killing pod: failed to \"KillPodSandbox\" for \"web-0\" with KillPodSandboxError",
        3,
    ));
    cluster.pod.metadata.finalizers = Some(vec!["foregroundDeletion".into()]);
    let (_, findings) = both_ways(&cluster);
    assert_eq!(kinds(&findings), ["kubelet-warning", "kubelet-warning", "finalizer-pending", "grace-period-past"]);
    let unmount = findings.iter().find(|f| f["details"]["reason"] == "FailedUnmount").unwrap();
    assert_eq!(unmount["count"], 9);
    assert!(
        unmount["summary"]
            .as_str()
            .unwrap()
            .starts_with("kubelet on worker-1 warns about pod shop/web-0 (FailedUnmount, 9 time(s)"),
        "{unmount}"
    );
    assert!(unmount["summary"].as_str().unwrap().contains("target is busy (device or resource busy)"), "{unmount}");
    assert_eq!(unmount["fix"], "kubectl podstuck web-0 -n shop");
    assert!(findings[2]["advice"][0].as_str().unwrap().contains("blockOwnerDeletion"));
}

#[test]
fn a_grace_period_long_past_with_no_api_cause_points_at_the_node() {
    let (head, findings) = both_ways(&Cluster::healthy(UID).deleted(400));
    assert_eq!(kinds(&findings), ["grace-period-past"]);
    assert_eq!(head["stuck"], true);
    assert!(
        head["verdict"]
            .as_str()
            .unwrap()
            .ends_with("the API shows no cause: it is on the node (kubectl podstuck web-0 -n shop)"),
        "{head}"
    );
}

#[test]
fn a_pod_that_is_not_stuck_says_so() {
    let (head, findings) = both_ways(&Cluster::healthy(UID));
    assert!(findings.is_empty(), "{findings:?}");
    assert_eq!(head["stuck"], false);
    assert_eq!(head["verdict"], "pod shop/web-0 is not being deleted (phase Running): not stuck in Terminating");
}

/// A failed explain: its exit code and what it said on stderr.
fn refused(output: &Output) -> String {
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(output.stdout.is_empty(), "nothing on stdout: {}", String::from_utf8_lossy(&output.stdout));
    stderr
}

#[test]
fn an_unreachable_api_server_is_a_clear_error() {
    let scratch = ScratchDir::new("explain-unreachable");
    // A port just freed: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = kubeconfig_for(scratch.path(), &format!("http://127.0.0.1:{port}"));
    let stderr = refused(&explain(&["web-0", "--kubeconfig", config.to_str().unwrap()]));
    assert!(stderr.contains(&format!("cannot reach the API server at http://127.0.0.1:{port}/")), "{stderr}");
    assert!(stderr.contains("Connection refused"), "{stderr}");
    assert!(
        stderr.contains(
            "without a cluster, explain reads the pod saved as JSON: `kubectl get pod -o json -- web-0 > pod.json`"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("`podstuck explain --from pod.json`"), "{stderr}");

    // No kubeconfig at all: the same way out, and exit 2 as `watch --pod`
    // without one (where podstuck cannot work as run; issue 42).
    let output = explain(&["web-0", "-n", "shop"]);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("`kubectl get pod -n shop -o json -- web-0 > pod.json` where the cluster answers, then `podstuck explain --from pod.json`"), "{stderr}");
}

#[test]
fn refused_credentials_and_missing_permissions_are_named() {
    let scratch = ScratchDir::new("explain-denied");
    let api = ApiServer::start();
    let config = api.kubeconfig(scratch.path());
    let config = config.to_str().unwrap();
    api.refuse("/api/v1/namespaces/shop/pods/web-0", 401, "get", "pods", "shop");
    let stderr = refused(&explain(&["web-0", "--kubeconfig", config]));
    assert!(stderr.contains("refused the credentials of kubeconfig"), "{stderr}");
    assert!(stderr.contains("401 Unauthorized"), "{stderr}");

    api.refuse("/api/v1/namespaces/shop/pods/web-0", 403, "get", "pods", "shop");
    let stderr = refused(&explain(&["web-0", "--kubeconfig", config]));
    assert!(
        stderr.contains("cannot read pod shop/web-0: permission missing: get pods in namespace shop (403 Forbidden"),
        "{stderr}"
    );
    assert!(stderr.contains("cannot get resource \"pods\""), "{stderr}");

    // The pod readable, its node not: said as unread, the rest diagnosed.
    let mut cluster = Cluster::healthy(UID).deleted(600);
    cluster.pod.metadata.finalizers = Some(vec!["example.com/x".into()]);
    cluster.serve(&api);
    api.refuse("/api/v1/nodes/worker-1", 403, "get", "nodes", "");
    let (head, findings) = answer(&explain(&["web-0", "--kubeconfig", config]));
    assert_eq!(kinds(&findings), ["finalizer-pending", "grace-period-past"]);
    let unread = head["unread"].as_array().unwrap();
    assert_eq!(unread.len(), 1, "{head}");
    assert_eq!(unread[0]["what"], "node worker-1");
    assert!(unread[0]["why"].as_str().unwrap().starts_with("permission missing: get nodes (403 Forbidden"), "{head}");
}

#[test]
fn a_pod_not_found_is_said_gone() {
    let scratch = ScratchDir::new("explain-gone");
    let api = ApiServer::start();
    let config = api.kubeconfig(scratch.path());
    let stderr = refused(&explain(&["web-0", "-n", "shop", "--kubeconfig", config.to_str().unwrap()]));
    assert!(stderr.contains("pod shop/web-0 not found: it is gone already (not stuck)"), "{stderr}");
}

#[test]
fn saved_files_are_bounded_and_checked() {
    let scratch = ScratchDir::new("explain-files");
    let secret = scratch.path().join("secret.json");
    std::fs::write(&secret, r#"{"apiVersion":"v1","kind":"Secret","data":{}}"#).unwrap();
    let stderr = refused(&explain(&["--from", secret.to_str().unwrap()]));
    assert!(stderr.contains("v1 Secret: not something podstuck explain reads"), "{stderr}");
    let stderr = refused(&explain(&["--from", "/dev/zero"]));
    assert!(stderr.contains("/dev/zero: it is a character device, not a regular file"), "{stderr}");
    let big = scratch.path().join("big.json");
    std::fs::File::create(&big).unwrap().set_len(33 << 20).unwrap();
    let stderr = refused(&explain(&["--from", big.to_str().unwrap()]));
    assert!(stderr.contains("larger than 32 MiB"), "{stderr}");
}

/// What a request asks, in RBAC's words: (API group, resource, verb, namespace).
fn permission(target: &str) -> (String, String, &'static str, Option<String>) {
    let path = target.split('?').next().unwrap();
    let parts: Vec<&str> = path.trim_start_matches('/').split('/').collect();
    let (group, rest) = match parts[0] {
        "api" => (String::new(), &parts[2..]),
        _ => (parts[1].to_string(), &parts[3..]),
    };
    let (namespace, rest) = match rest {
        ["namespaces", ns, rest @ ..] => (Some(ns.to_string()), rest),
        rest => (None, rest),
    };
    let verb = if rest.len() > 1 { "get" } else { "list" };
    // A subresource (pods/NAME:PORT/proxy/...) is granted by its own name.
    let resource = match rest {
        [resource, _, sub, ..] => format!("{resource}/{sub}"),
        _ => rest[0].to_string(),
    };
    (group, resource, verb, namespace)
}

#[test]
fn the_rbac_in_deploy_grants_what_explain_asks_and_nothing_more() {
    let documents = harness::deploy_manifest("components/on-call/explain-rbac.yaml");
    // Every resource read: the pod by name and by UID, events, node, lease, claims, attachments;
    // with --all, each listed, and the podstuck DaemonSet's pods and their proxy.
    let scratch = ScratchDir::new("explain-rbac");
    let api = ApiServer::start();
    let cluster = Cluster::healthy(UID).deleted(600).with_claim();
    cluster.serve(&api);
    let config = api.kubeconfig(scratch.path());
    answer(&explain(&["web-0", "--kubeconfig", config.to_str().unwrap()]));
    answer(&explain(&[UID, "-n", "shop", "--kubeconfig", config.to_str().unwrap()]));
    // explain --all: the pods, claims and DaemonSet pods listed, a node's podstuck asked through the proxy.
    api.list(Some("shop"), &cluster.claims);
    let mut daemon = Cluster::healthy("7e1f0c2a-0000-4000-8000-0000000000d5").pod;
    daemon.metadata.name = Some("podstuck-x".into());
    daemon.metadata.namespace = Some("podstuck".into());
    daemon.metadata.labels = Some([("app.kubernetes.io/name".to_string(), "podstuck".to_string())].into());
    api.list(Some("podstuck"), &[daemon]);
    let all = explain(&["--all", "-n", "shop", "--kubeconfig", config.to_str().unwrap()]);
    assert!(all.status.success(), "{}", String::from_utf8_lossy(&all.stderr));
    let asked: std::collections::BTreeSet<_> = api.requests().iter().map(|r| permission(&r.target)).collect();

    // (group, resource, verb, the one namespace it is granted in, if only one).
    let bound: Vec<(&str, &str)> = documents
        .iter()
        .filter(|d| d["kind"] == "ClusterRoleBinding" || d["kind"] == "RoleBinding")
        .map(|d| (d["roleRef"]["kind"].as_str().unwrap(), d["roleRef"]["name"].as_str().unwrap()))
        .collect();
    let mut granted = Vec::new();
    for role in documents.iter().filter(|d| d["kind"] == "ClusterRole" || d["kind"] == "Role") {
        let kind = role["kind"].as_str().unwrap();
        assert!(
            bound.contains(&(kind, role["metadata"]["name"].as_str().unwrap())),
            "{kind} {} is bound",
            role["metadata"]["name"]
        );
        let namespace = role["metadata"]["namespace"].as_str().map(str::to_string);
        for rule in role["rules"].as_array().unwrap() {
            let words = |key: &str| {
                rule[key].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect::<Vec<_>>()
            };
            for group in words("apiGroups") {
                for resource in words("resources") {
                    for verb in words("verbs") {
                        granted.push((group.clone(), resource.clone(), verb, namespace.clone()));
                    }
                }
            }
        }
    }
    let allows = |(group, resource, verb, ns): &(String, String, &str, Option<String>),
                  (g, r, v, only): &(String, String, String, Option<String>)| {
        g == group && r == resource && v == verb && only.as_ref().is_none_or(|only| ns.as_ref() == Some(only))
    };
    for want in &asked {
        assert!(granted.iter().any(|g| allows(want, g)), "{want:?} is not granted: {granted:?}");
    }
    for grant in &granted {
        assert!(asked.iter().any(|a| allows(a, grant)), "{grant:?} is granted but never asked: {asked:?}");
    }
}

// On the node: watch --pod NS/NAME ------------------------------------------

/// `podstuck watch --json --findings --pod shop/web-0 --kubeconfig CONFIG`, for this pod's kubelet root.
fn watch_named(root: &KubeletRoot, config: &Path) -> Watch {
    Watch::start(&[
        "--findings",
        "--hung-after",
        "2s",
        "--kubelet-root",
        root.arg(),
        "--pod",
        "shop/web-0",
        "--kubeconfig",
        config.to_str().unwrap(),
    ])
}

/// A pod with a CSI volume left mounted (P1), kubelet failing to remove
/// it on its backoff: the mount guard and the kubelet stand-in.
fn volume_left_mounted(pod: &podstuck_tests::Pod) -> (PathBuf, TmpfsMount) {
    let pv = pod.create_csi_volume("pvc-explain");
    let mount = pv.join("mount");
    let guard = TmpfsMount::new(&mount, "size=1m");
    (mount, guard)
}

kernel_test! {
    fn watch_by_name_joins_a_kernel_finding_and_a_pending_finalizer_root_cause_first(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let mut cluster = Cluster::healthy(pod.uid()).deleted(600);
        cluster.pod.metadata.finalizers = Some(vec!["example.com/backup-done".into()]);
        let api = ApiServer::start();
        cluster.serve(&api);
        let config = api.kubeconfig(scratch.path());
        let (mount, _volume) = volume_left_mounted(&pod);
        let mut watch = watch_named(&root, &config);
        let _kubelet = start_actor(vec!["--comm".into(), "kubelet".into(), "--backoff-ms".into(), "500".into(), "--repeat".into(), "0".into(), "rmdir-at".into(), mount.parent().unwrap().as_os_str().to_owned(), "mount".into()]);
        let kernel = watch.await_finding(Duration::from_secs(60), |f| f["kind"] == "volume-still-mounted", |e| {
            e.eq("/pod_uid", pod.uid());
        });
        // An API finding has no actor, call or path: not the kernel's shape.
        let finalizer = poll_until_else("a finalizer-pending finding", Duration::from_secs(60), || {
            let findings = watch.findings_so_far();
            findings.iter().find(|f| f["kind"] == "finalizer-pending").cloned().ok_or_else(|| format!("findings: {findings:?}"))
        });
        assert_eq!(finalizer["pod_uid"], pod.uid());
        assert_eq!(finalizer["evidence"][0]["source"], "api");
        let done = watch.stop(libc::SIGINT);
        assert!(done.status.success(), "{}", done.stderr);
        // Told in that order: the kernel's root cause first, the hold after.
        let told: Vec<&str> = done.finding_lines.iter().filter(|f| f["type"] == "finding").map(|f| f["kind"].as_str().unwrap()).collect();
        let at = |kind: &str| told.iter().position(|k| *k == kind).unwrap_or_else(|| panic!("{kind} not told: {told:?}"));
        assert!(at("volume-still-mounted") < at("finalizer-pending"), "root cause first: {told:?}");
        assert!(at("finalizer-pending") < at("grace-period-past"), "{told:?}");
        assert_eq!(kernel["paths"][0], text(&mount));
        assert!(finalizer["fix"].as_str().unwrap().starts_with("kubectl patch pod -n shop --type=json"), "{finalizer}");
        assert!(api.requests().iter().any(|r| r.target == "/api/v1/namespaces/shop/pods/web-0"));
    }
}

kernel_test! {
    fn watch_by_name_stops_without_an_unreachable_api(test) {
        // A --pod that cannot be resolved must not widen into tracing the
        // whole node: the run stops before anything loads, saying how to
        // name the pod without the API. -n and --namespace name the
        // namespace of a bare NAME as explain's do.
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
        let config = kubeconfig_for(scratch.path(), &format!("http://127.0.0.1:{port}"));
        for pod in [&["--pod", "shop/web-0"][..], &["--pod", "web-0", "-n", "shop"], &["--pod", "web-0", "--namespace", "shop"]] {
            let out = Command::new(podstuck_binary())
                .args(["watch", "--json", "--concurrent", "--duration", "30s", "--kubelet-root", root.arg(), "--kubeconfig", config.to_str().unwrap()])
                .args(pod)
                .stdin(std::process::Stdio::null())
                .output()
                .unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{pod:?}: {stderr}");
            assert!(out.stdout.is_empty(), "{pod:?}: nothing traced, nothing printed: {}", String::from_utf8_lossy(&out.stdout));
            assert_eq!(stderr.matches("cannot resolve --pod shop/web-0 through the Kubernetes API").count(), 1, "{pod:?}: said once: {stderr}");
            assert!(stderr.contains(&format!("cannot reach the API server at http://127.0.0.1:{port}/")), "{pod:?}: {stderr}");
            assert!(stderr.contains("podstuck stops rather than trace every pod of the node"), "{stderr}");
            assert!(stderr.contains("--pod UID; `kubectl get pod -n shop -o 'jsonpath={.metadata.uid}' -- web-0` prints it"), "{stderr}");
            assert!(stderr.contains("--kubeconfig FILE"), "{stderr}");
        }
    }
}

/// Without `--json`: the verdict, then each finding as the block every text
/// output prints (docs/output.md), its evidence and its whole fix on lines of their own.
#[test]
fn the_text_answer_is_a_block_per_finding_with_its_evidence_and_fix() {
    let mut cluster = Cluster::healthy(UID).deleted(900);
    node_stopped_posting(&mut cluster);
    let scratch = ScratchDir::new("explain-text");
    let saved = cluster.save(scratch.path());
    let output = Command::new(podstuck_binary())
        .arg("explain")
        .arg("--from")
        .args(&saved)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("HOME", "/nonexistent")
        .output()
        .expect("run podstuck explain");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}\n{stdout}", String::from_utf8_lossy(&output.stderr));
    let blocks: Vec<&str> = stdout.split("\n\n").skip(1).collect();
    let node = blocks
        .iter()
        .find(|b| b.starts_with("[critical] node-not-ready "))
        .unwrap_or_else(|| panic!("no node-not-ready block:\n{stdout}"));
    let lines: Vec<&str> = node.lines().collect();
    assert!(lines[1].starts_with("  status:   active, "), "{node}");
    assert!(lines.iter().any(|l| l.starts_with("  cause:    ") && l.contains("has been unreachable")), "{node}");
    let evidence =
        lines.iter().position(|l| l.starts_with("  evidence: ")).unwrap_or_else(|| panic!("no evidence:\n{node}"));
    assert!(lines[evidence + 1].starts_with("            "), "one fact per line:\n{node}");
    assert!(
        lines.contains(&"  fix:      kubectl delete pod -n shop --grace-period=0 --force -- web-0"),
        "the fix whole on its own line:\n{node}"
    );
}
