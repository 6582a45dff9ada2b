//! End to end: `podstuck explain --all` and `kubectl podstuck --all`, every
//! pod stuck in Terminating in one table, against a stand-in cluster of
//! four nodes (the loopback API server of src/apiserver.rs, whose pod
//! proxy reaches real local addresses):
//!
//! - worker-1 runs a podstuck DaemonSet stand-in, a real `podstuck watch
//!   --listen`, on this machine, where pod shop/web-0 has a CSI volume left
//!   mounted and a kubelet-named actor fails to remove it (EBUSY): its
//!   cause comes from the node, volume-still-mounted, with its `umount`;
//!   shop/db-0 there is held by a finalizer: its cause comes from the API;
//! - worker-2's DaemonSet pod does not answer through the proxy (503), and
//!   worker-4's answers nothing at all (the 5 s timeout): their pods are
//!   told to be traced with `kubectl podstuck POD -n NS`;
//! - worker-3 runs no DaemonSet: its pod shop/api-0 likewise;
//! - shop/fresh-0 was deleted but is within its grace period, and
//!   shop/running-0 is not deleted: neither is listed.
//!
//! Runs as root (`kernel_test!`): the node's podstuck traces the kernel.

use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant, SystemTime};

use k8s_openapi::api::core::v1::{
    Container, ContainerPort, Event, Node, NodeCondition, NodeStatus, Pod, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use podstuck_tests::apiserver::objects::lease;
use podstuck_tests::apiserver::{ApiServer, TOKEN};
use podstuck_tests::kubectl::kubectl_podstuck_binary;
use podstuck_tests::scrape::{self, free_port};
use podstuck_tests::*;
use serde_json::Value;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

fn stamp(t: SystemTime) -> k8s_openapi::jiff::Timestamp {
    let secs = t.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
    k8s_openapi::jiff::Timestamp::from_second(secs as i64).unwrap()
}

/// `secs` from now (negative: ago), as the API says a time.
fn time(secs: i64) -> Time {
    let now = SystemTime::now();
    let t =
        if secs < 0 { now - Duration::from_secs(secs.unsigned_abs()) } else { now + Duration::from_secs(secs as u64) };
    Time(stamp(t))
}

/// Pod `ns/name` with `uid` on `node`; deleted, when `due` is given, with
/// 30 s of grace ending `due` seconds from now.
fn pod(ns: &str, name: &str, uid: &str, node: &str, due: Option<i64>) -> Pod {
    Pod {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some(ns.into()),
            uid: Some(uid.into()),
            deletion_timestamp: due.map(time),
            deletion_grace_period_seconds: due.map(|_| 30),
            ..Default::default()
        },
        spec: Some(PodSpec { node_name: Some(node.into()), ..Default::default() }),
        status: Some(PodStatus { phase: Some("Running".into()), ..Default::default() }),
    }
}

/// The podstuck DaemonSet's pod on `node`, serving on the port named metrics.
fn podstuck_pod(name: &str, node: &str) -> Pod {
    let mut p = pod("podstuck", name, &new_pod_uid(), node, None);
    p.metadata.labels = Some([("app.kubernetes.io/name".to_string(), "podstuck".to_string())].into());
    p.spec.as_mut().unwrap().containers = vec![Container {
        name: "podstuck".into(),
        ports: Some(vec![ContainerPort { name: Some("metrics".into()), container_port: 9464, ..Default::default() }]),
        ..Default::default()
    }];
    p
}

fn ready_node(name: &str) -> Node {
    Node {
        metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
        spec: None,
        status: Some(NodeStatus {
            conditions: Some(vec![NodeCondition {
                type_: "Ready".into(),
                status: "True".into(),
                last_heartbeat_time: Some(time(-5)),
                last_transition_time: Some(time(-86_400)),
                ..Default::default()
            }]),
            ..Default::default()
        }),
    }
}

/// The stand-in cluster; `web_0` is the UID of the pod whose volume is
/// left mounted on this machine, `listen` where worker-1's podstuck serves.
fn serve_cluster(api: &ApiServer, web_0: &str, listen: SocketAddr, silent: SocketAddr) {
    let mut db_0 = pod("shop", "db-0", &new_pod_uid(), "worker-1", Some(-1200));
    db_0.metadata.finalizers = Some(vec!["example.com/cleanup".into()]);
    let pods = [
        pod("shop", "web-0", web_0, "worker-1", Some(-600)),
        db_0,
        pod("shop", "api-0", &new_pod_uid(), "worker-3", Some(-300)),
        pod("batch", "job-7", &new_pod_uid(), "worker-2", Some(-900)),
        pod("batch", "job-8", &new_pod_uid(), "worker-4", Some(-900)),
        // Deleted, its grace period not over: not stuck (yet).
        pod("shop", "fresh-0", &new_pod_uid(), "worker-1", Some(20)),
        pod("shop", "running-0", &new_pod_uid(), "worker-3", None),
        podstuck_pod("podstuck-w1", "worker-1"),
        podstuck_pod("podstuck-w2", "worker-2"),
        podstuck_pod("podstuck-w4", "worker-4"),
    ];
    api.pods(&pods);
    api.list(None, &["worker-1", "worker-2", "worker-3", "worker-4"].map(ready_node));
    api.list(
        Some("kube-node-lease"),
        &["worker-1", "worker-2", "worker-3", "worker-4"].map(|node| lease(node, SystemTime::now())),
    );
    api.list::<Event>(None, &[]);
    api.list::<Event>(Some("shop"), &[]);
    // worker-1's DaemonSet pod is the real podstuck on this machine;
    // worker-4's accepts and never answers; worker-2's is not reachable.
    api.proxy_pod("podstuck", "podstuck-w1", 9464, listen);
    api.proxy_pod("podstuck", "podstuck-w4", 9464, silent);
}

/// `podstuck explain --all ARGS --kubeconfig CONFIG`, with no kubeconfig of the user's around.
fn explain_all(config: &Path, args: &[&str]) -> Output {
    run(Command::new(podstuck_binary()).args(["explain", "--all", "--kubeconfig", text(config)]).args(args))
}

fn run(command: &mut Command) -> Output {
    let started = Instant::now();
    let out = command
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("HOME", "/nonexistent")
        .output()
        .expect("run");
    // worker-4's silence costs its 5 s, no more.
    assert!(started.elapsed() < secs(30), "took {:?}", started.elapsed());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "failed: {stderr}\n{}", String::from_utf8_lossy(&out.stdout));
    out
}

/// The rows of the table: each line's words, by pod.
fn row<'a>(table: &'a str, pod: &str) -> Vec<&'a str> {
    let lines: Vec<&str> = table.lines().filter(|l| l.split_whitespace().nth(2) == Some(pod)).collect();
    assert_eq!(lines.len(), 1, "one row for {pod}:\n{table}");
    lines[0].split_whitespace().collect()
}

/// What both commands print: the table, checked.
fn check_table(table: &str, mount: &Path) {
    assert!(
        table.starts_with("5 pods are stuck in Terminating past their grace period, on 4 node(s) (10 pod(s) read at "),
        "{table}"
    );
    // Grouped by node, then cause.
    let nodes: Vec<&str> = table.lines().skip(3).take(5).map(|l| l.split_whitespace().next().unwrap()).collect();
    assert_eq!(nodes, ["worker-1", "worker-1", "worker-2", "worker-3", "worker-4"], "{table}");
    let web = row(table, "shop/web-0");
    assert_eq!(&web[..2], ["worker-1", "volume-still-mounted"], "{table}");
    assert_eq!(&web[4..6], ["podstuck", "DaemonSet"], "{table}");
    assert!(web[6..].join(" ").contains(&format!("umount -- {}", shell_word(mount))), "{table}");
    assert!(web[3].starts_with("10m") || web[3].starts_with("11m"), "terminating for {}: {table}", web[3]);
    let db = row(table, "shop/db-0");
    assert_eq!(&db[..2], ["worker-1", "finalizer-pending"], "{table}");
    assert_eq!(&db[4..7], ["API", "kubectl", "patch"], "{table}");
    assert_eq!(&row(table, "shop/api-0")[4..], ["API", "kubectl", "podstuck", "api-0", "-n", "shop"], "{table}");
    assert_eq!(row(table, "batch/job-7")[1], "grace-period-past", "{table}");
    for pod in ["fresh-0", "running-0", "podstuck-w1"] {
        assert!(!table.contains(pod), "{pod} is not stuck: {table}");
    }
    // The nodes podstuck was not heard on, and what to run for each pod there.
    assert!(table.contains("\n  worker-2: podstuck pod podstuck-w2: the API server's proxy answered 503 ServiceUnavailable: error trying to reach service"), "{table}");
    assert!(table.contains("\n  worker-3: no podstuck DaemonSet pod runs there\n"), "{table}");
    assert!(table.contains("\n  worker-4: podstuck pod podstuck-w4: no answer within 5.0 s\n"), "{table}");
    for (command, node) in [
        ("kubectl podstuck job-7 -n batch", "worker-2"),
        ("kubectl podstuck api-0 -n shop ", "worker-3"),
        ("kubectl podstuck job-8 -n batch", "worker-4"),
    ] {
        assert!(table.contains(&format!("\n  {command}  # on {node}\n")), "{command}: {table}");
    }
    assert!(!table.contains("could not read"), "{table}");
}

kernel_test! {
    fn every_stuck_pod_with_its_cause_from_its_node_or_the_api(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        // P1 on worker-1: the CSI driver said NodeUnpublish worked and left this mounted.
        let web_0 = root.new_pod();
        let pv = web_0.create_csi_volume("pvc-all");
        let mount = pv.join("mount");
        let _volume = TmpfsMount::new(&mount, "size=1m");
        let listen = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let mut node = Watch::start(&[
            "--findings", "--kubelet-root", root.arg(), "--pod", web_0.uid(), "--listen", &listen.to_string(), "--node-name", "worker-1",
        ]);
        let _kubelet = start_actor(["--comm", "kubelet", "--backoff-ms", "500", "--repeat", "0", "rmdir-at", text(&pv), "mount"]);
        node.await_finding(secs(60), |f| f["kind"] == "volume-still-mounted", |e| {
            e.eq("/pod_uid", web_0.uid());
        });
        // /findings is rendered once a second: wait for the finding there too.
        wait_until("the finding on /findings", secs(10), || scrape::get(listen, "/findings").body.contains("volume-still-mounted"));
        // Accepts, and never answers.
        let silent = TcpListener::bind("127.0.0.1:0").unwrap();
        let api = ApiServer::start();
        serve_cluster(&api, web_0.uid(), listen, silent.local_addr().unwrap());
        let config = api.kubeconfig(scratch.path());

        let out = explain_all(&config, &[]);
        let table = String::from_utf8_lossy(&out.stdout);
        eprintln!("{table}");
        check_table(&table, &mount);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains("podstuck: read the pods of all namespaces through kubeconfig "), "{stderr}");
        // worker-1's findings were read through the pod proxy, with the kubeconfig's credentials.
        let proxied: Vec<_> = api.requests().into_iter().filter(|r| r.path().contains("/proxy/")).collect();
        assert!(proxied.iter().any(|r| r.path() == "/api/v1/namespaces/podstuck/pods/podstuck-w1:9464/proxy/findings" && r.with_token), "{proxied:?}");
        assert!(api.requests().iter().all(|r| r.with_token && r.method == "GET"), "read only, with the token ({TOKEN})");

        // --json: one document, the same rows with the whole fix.
        let out = explain_all(&config, &["--json"]);
        let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
        assert_eq!(doc["type"], "explain-all");
        assert_eq!((doc["stuck"].as_u64(), doc["listed"].as_u64(), doc["pods_read"].as_u64()), (Some(5), Some(5), Some(10)), "{doc}");
        let rows = doc["rows"].as_array().unwrap();
        let web = rows.iter().find(|r| r["name"] == "web-0").unwrap_or_else(|| panic!("{doc}"));
        assert_eq!((web["node"].as_str(), web["cause"].as_str(), web["from"].as_str()), (Some("worker-1"), Some("volume-still-mounted"), Some("podstuck-daemonset")));
        assert_eq!(web["uid"], web_0.uid());
        assert!(web["fix"].as_str().unwrap().contains(&format!("umount -- {}", shell_word(&mount))), "{web}");
        assert!(web["past_grace_seconds"].as_u64().unwrap() >= 600, "{web}");
        let db = rows.iter().find(|r| r["name"] == "db-0").unwrap();
        assert_eq!((db["cause"].as_str(), db["from"].as_str()), (Some("finalizer-pending"), Some("api")));
        let commands: Vec<&str> = doc["run_on_node"].as_array().unwrap().iter().map(|r| r["command"].as_str().unwrap()).collect();
        assert_eq!(commands, ["kubectl podstuck job-7 -n batch", "kubectl podstuck api-0 -n shop", "kubectl podstuck job-8 -n batch"]);
        let heard: Vec<(&str, &str)> = doc["nodes"].as_array().unwrap().iter().map(|n| (n["node"].as_str().unwrap(), n["podstuck"].as_str().unwrap())).collect();
        assert_eq!(heard, [("worker-1", "answered"), ("worker-2", "not-heard"), ("worker-3", "no-daemonset"), ("worker-4", "not-heard")]);

        // -n: one namespace's pods only.
        let out = explain_all(&config, &["-n", "batch", "--json"]);
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        let names: Vec<&str> = doc["rows"].as_array().unwrap().iter().map(|r| r["name"].as_str().unwrap()).collect();
        assert_eq!(names, ["job-7", "job-8"], "{doc}");
        assert!(api.requests().iter().any(|r| r.path() == "/api/v1/namespaces/batch/pods"));

        // The kubectl plugin: the same table.
        let out = run(Command::new(kubectl_podstuck_binary()).args(["--all", "--kubeconfig", text(&config)]));
        check_table(&String::from_utf8_lossy(&out.stdout), &mount);

        let finished = node.stop(libc::SIGINT);
        assert!(finished.status.success(), "{}", finished.stderr);
        drop(silent);
    }
}

#[test]
fn no_stuck_pod_is_said_in_one_line_and_nothing_else_is_asked() {
    let scratch = ScratchDir::new("cluster-all-none");
    let api = ApiServer::start();
    api.pods(&[
        pod("shop", "web-0", &new_pod_uid(), "worker-1", None),
        pod("shop", "fresh-0", &new_pod_uid(), "worker-1", Some(30)),
    ]);
    let config = api.kubeconfig(scratch.path());
    let out = explain_all(&config, &[]);
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(said.starts_with("no pod is stuck in Terminating past its grace period (2 pod(s) read at "), "{said}");
    let asked: Vec<String> = api.requests().iter().map(|r| r.path().to_string()).collect();
    assert_eq!(asked, ["/api/v1/pods"], "only the pods are read");
}

/// An install whose overlay chose another namespace for podstuck: `--all`
/// finds the DaemonSet there when told, by flag or by the variable the
/// plugin reads too, and nowhere else.
#[test]
fn the_daemonset_is_looked_for_in_the_namespace_the_install_chose() {
    let scratch = ScratchDir::new("cluster-all-namespace");
    let api = ApiServer::start();
    let mut daemon = podstuck_pod("podstuck-w1", "worker-1");
    daemon.metadata.namespace = Some("sre-tools".into());
    api.pods(&[pod("shop", "web-0", &new_pod_uid(), "worker-1", Some(-600)), daemon]);
    api.list(None, &[ready_node("worker-1")]);
    api.list::<Event>(None, &[]);
    // An API server lists a namespace with no pods as empty, never 404.
    api.list::<Pod>(Some("podstuck"), &[]);
    let config = api.kubeconfig(scratch.path());
    let heard = |out: &Output| {
        let doc: Value = serde_json::from_slice(&out.stdout).expect("one JSON document");
        doc["nodes"][0]["podstuck"].as_str().unwrap().to_string()
    };
    let daemonset_lists = |api: &ApiServer| -> Vec<String> {
        api.requests()
            .iter()
            .filter(|r| r.target.contains("labelSelector=app.kubernetes.io"))
            .map(|r| r.path().to_string())
            .collect()
    };
    // As shipped, podstuck's namespace is `podstuck`: no DaemonSet there.
    assert_eq!(heard(&explain_all(&config, &["--json"])), "no-daemonset");
    assert_eq!(daemonset_lists(&api), ["/api/v1/namespaces/podstuck/pods"]);
    // Told by the flag, or by $PODSTUCK_NAMESPACE: found there (and asked
    // through the proxy, which this stand-in does not serve).
    let before = daemonset_lists(&api).len();
    assert_eq!(heard(&explain_all(&config, &["--json", "--podstuck-namespace", "sre-tools"])), "not-heard");
    let out = run(Command::new(podstuck_binary())
        .args(["explain", "--all", "--json", "--kubeconfig", text(&config)])
        .env("PODSTUCK_NAMESPACE", "sre-tools"));
    assert_eq!(heard(&out), "not-heard");
    let out = run(Command::new(kubectl_podstuck_binary())
        .args(["--all", "--json", "--kubeconfig", text(&config)])
        .env("PODSTUCK_NAMESPACE", "sre-tools"));
    assert_eq!(heard(&out), "not-heard");
    let lists = daemonset_lists(&api);
    assert_eq!(lists[before..], ["/api/v1/namespaces/sre-tools/pods"; 3], "{lists:?}");
    // Not a namespace name: refused before anything is asked.
    let out = Command::new(podstuck_binary())
        .args(["explain", "--all", "--kubeconfig", text(&config), "--podstuck-namespace", "../kube-system"])
        .output()
        .unwrap();
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--podstuck-namespace ../kube-system: not a namespace name"));
}
