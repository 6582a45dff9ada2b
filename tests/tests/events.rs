//! End-to-end: `podstuck watch --events`, against the stand-in API server.
//! A pod's CSI volume left mounted, kubelet failing to remove it: one
//! Warning Event regarding the pod (found by UID among the node's pods),
//! its repeats patched into the Event's series, one Normal Event once the
//! volume is unmounted and the removal succeeds. An API server down from
//! the start: the findings are printed all the same, the failure said
//! once, the Event posted when it comes back; down mid-run, the series
//! patched when it comes back. And the RBAC in deploy/
//! grants exactly what was asked.
//!
//! Runs as root; see `kernel_test!` for the skip rule.

use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::Pod as ApiPod;
use k8s_openapi::api::events::v1::Event;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use podstuck_tests::apiserver::{ApiServer, Request};
use podstuck_tests::*;

const NODE: &str = "worker-7";

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The API's view of `pod`: shop/web-0 on [`NODE`], and another pod elsewhere.
fn serve_pod(api: &ApiServer, pod: &Pod) {
    let named = |ns: &str, name: &str, uid: &str| ApiPod {
        metadata: ObjectMeta {
            namespace: Some(ns.into()),
            name: Some(name.into()),
            uid: Some(uid.into()),
            ..Default::default()
        },
        ..Default::default()
    };
    api.node_pods(NODE, &[named("shop", "web-0", pod.uid())]);
    api.node_pods("worker-8", &[named("other", "db-0", &new_pod_uid())]);
}

/// `podstuck watch --events` on [`NODE`] with the stand-in's kubeconfig.
fn watch_events(root: &KubeletRoot, config: &Path, pod: &Pod) -> Watch {
    Watch::start(&[
        "--findings",
        "--events",
        "--kubeconfig",
        config.to_str().unwrap(),
        "--node-name",
        NODE,
        "--kubelet-root",
        root.arg(),
        "--pod",
        pod.uid(),
    ])
}

/// The pod's CSI volume, left mounted (P1); the mount goes on drop.
fn volume_left_mounted(pod: &Pod) -> (PathBuf, PathBuf, TmpfsMount) {
    let pv = pod.create_csi_volume("pvc-events");
    let mount = pv.join("mount");
    let guard = TmpfsMount::new(&mount, "size=1m");
    (pv, mount, guard)
}

/// kubelet retrying the volume's removal every second.
fn kubelet_retrying(pv: &Path) -> Process {
    start_actor(["--comm", "kubelet", "--every-ms", "1000", "--repeat", "0", "rmdir-at", text(pv), "mount"])
}

/// What each test here starts from: a pod served by the stand-in API
/// server (made ready by `ready` before podstuck starts: down, refusing),
/// its CSI volume left mounted, `podstuck watch --events` following it,
/// and kubelet retrying the volume's removal.
struct StuckVolume {
    kubelet: Process,
    watch: Watch,
    volume: TmpfsMount,
    mount: PathBuf,
    api: ApiServer,
    pod: Pod,
    root: KubeletRoot,
}

impl StuckVolume {
    fn start(scratch: &Path, ready: impl FnOnce(&ApiServer)) -> StuckVolume {
        let root = KubeletRoot::new(scratch.join("kubelet"));
        let pod = root.new_pod();
        let api = ApiServer::start();
        serve_pod(&api, &pod);
        ready(&api);
        let config = api.kubeconfig(scratch);
        let (pv, mount, volume) = volume_left_mounted(&pod);
        let watch = watch_events(&root, &config, &pod);
        let kubelet = kubelet_retrying(&pv);
        StuckVolume { kubelet, watch, volume, mount, api, pod, root }
    }
}

/// Waits until `wanted` holds of the requests, or panics with them.
fn await_requests(
    api: &ApiServer,
    timeout: Duration,
    what: &str,
    wanted: impl Fn(&[Request]) -> bool,
    watch: &Watch,
) -> Vec<Request> {
    poll_until_else(what, timeout, || {
        let requests = api.requests();
        if wanted(&requests) {
            return Ok(requests);
        }
        let seen: Vec<String> = requests.iter().map(|r| format!("{} {} {}", r.method, r.target, r.body)).collect();
        Err(format!("requests:\n{}\npodstuck stderr:\n{}", seen.join("\n"), watch.stderr_so_far()))
    })
}

/// Waits until podstuck's stderr says `said`.
fn await_said(watch: &Watch, said: &str, timeout: Duration) {
    poll_until_else(&format!("podstuck to say {said:?}"), timeout, || {
        let stderr = watch.stderr_so_far();
        if stderr.contains(said) {
            return Ok(());
        }
        Err(format!("podstuck stderr:\n{stderr}"))
    })
}

/// The Events created, as the real type.
fn created(requests: &[Request]) -> Vec<Event> {
    requests
        .iter()
        .filter(|r| r.method == "POST")
        .map(|r| serde_json::from_str(&r.body).unwrap_or_else(|e| panic!("{e}: {}", r.body)))
        .collect()
}

kernel_test! {
    fn a_stuck_volume_is_one_event_on_its_pod_its_repeats_a_series_and_its_end_a_normal_event(test) {
        let scratch = test.scratch();
        let StuckVolume { kubelet, mut watch, volume, mount, api, pod, root: _root } =
            StuckVolume::start(scratch.path(), |_| {});
        let finding = watch.await_finding(secs(60), |f| f["kind"] == "volume-still-mounted", |e| e.eq("/pod_uid", pod.uid()));

        let requests = await_requests(&api, secs(30), "an Event POSTed", |r| r.iter().any(|r| r.method == "POST"), &watch);
        let posts: Vec<&Request> = requests.iter().filter(|r| r.method == "POST").collect();
        assert_eq!(posts[0].path(), "/apis/events.k8s.io/v1/namespaces/shop/events");
        assert!(posts[0].with_token);
        let event: Event = serde_json::from_str(&posts[0].body).unwrap();
        let regarding = event.regarding.clone().unwrap();
        assert_eq!((regarding.kind.as_deref(), regarding.namespace.as_deref(), regarding.name.as_deref()), (Some("Pod"), Some("shop"), Some("web-0")));
        assert_eq!(regarding.uid.as_deref(), Some(pod.uid()));
        assert_eq!(event.reason.as_deref(), Some("VolumeStillMounted"));
        assert_eq!(event.type_.as_deref(), Some("Warning"));
        assert_eq!(event.reporting_controller.as_deref(), Some("podstuck.dev/podstuck"));
        assert_eq!(event.reporting_instance.as_deref(), Some(NODE));
        let note = event.note.clone().unwrap();
        assert!(note.contains(&format!("Fix: umount -- {}", shell_word(&mount))), "{note}\nfix: {}", finding["fix"]);
        // Microseconds, as MicroTime has them.
        let time = posts[0].json()["eventTime"].as_str().unwrap().to_string();
        assert_eq!(time.len(), "2026-01-01T00:00:00.000000Z".len(), "{time}");
        // The pod was found among this node's pods only.
        let lists: Vec<&Request> = requests.iter().filter(|r| r.method == "GET").collect();
        assert!(!lists.is_empty() && lists.iter().all(|r| r.target.contains("fieldSelector=spec.nodeName%3Dworker-7")), "{lists:?}");

        // Repeats: the Event's series, patched, not new Events.
        let name = event.metadata.name.clone().unwrap();
        let requests = await_requests(&api, secs(60), "the series PATCHed", |r| r.iter().any(|r| r.method == "PATCH"), &watch);
        let patch = requests.iter().find(|r| r.method == "PATCH").unwrap();
        assert_eq!(patch.path(), format!("/apis/events.k8s.io/v1/namespaces/shop/events/{name}"));
        assert!(patch.json()["series"]["count"].as_i64().unwrap() >= 2, "{}", patch.body);
        assert!(patch.json()["series"]["lastObservedTime"].is_string(), "{}", patch.body);
        assert_eq!(created(&requests).len(), 1, "one Event for one finding");

        // The fix: kubelet's next removal succeeds, one Normal Event says so.
        drop(volume);
        let requests = await_requests(&api, secs(60), "the resolved Event", |r| created(r).len() >= 2, &watch);
        let events = created(&requests);
        assert_eq!(events.len(), 2, "{events:?}");
        assert_eq!(events[1].type_.as_deref(), Some("Normal"));
        assert_eq!(events[1].reason.as_deref(), Some("VolumeStillMountedResolved"));
        assert_eq!(events[1].regarding.as_ref().unwrap().uid.as_deref(), Some(pod.uid()));
        drop(kubelet);
        let done = watch.stop(libc::SIGINT);
        assert!(done.status.success(), "{}", done.stderr);
        assert!(done.findings.iter().any(|f| f["kind"] == "volume-still-mounted" && f["status"] == "resolved"), "{:?}", done.findings);
        assert!(!done.stderr.contains("cannot post"), "{}", done.stderr);
    }
}

kernel_test! {
    fn an_api_server_down_loses_nothing_on_the_node_and_gets_its_event_when_back(test) {
        let scratch = test.scratch();
        let StuckVolume { kubelet: _kubelet, mut watch, volume: _volume, mount: _, api, pod, root: _root } =
            StuckVolume::start(scratch.path(), |api| api.go_down());
        // Traced and printed as ever.
        watch.await_finding(secs(60), |f| f["kind"] == "volume-still-mounted", |e| e.eq("/pod_uid", pod.uid()));
        await_said(&watch, "cannot post Kubernetes Events", secs(30));
        // Nothing is awaited but time: the retries that go on meanwhile
        // (after 2 s, then 4 s: podstuck's backoff) must not say the
        // failure again (checked at the end).
        std::thread::sleep(secs(8));
        api.come_back();
        let requests = await_requests(&api, secs(60), "the Event POSTed once the API is back", |r| r.iter().any(|r| r.method == "POST"), &watch);
        let events = created(&requests);
        assert_eq!(events[0].reason.as_deref(), Some("VolumeStillMounted"));
        assert_eq!(events[0].regarding.as_ref().unwrap().uid.as_deref(), Some(pod.uid()));
        let done = watch.stop(libc::SIGINT);
        assert!(done.status.success(), "{}", done.stderr);
        assert_eq!(done.stderr.matches("cannot post Kubernetes Events").count(), 1, "said once: {}", done.stderr);
        assert!(done.stderr.contains(&format!("cannot reach the API server at {}/", api.url())), "{}", done.stderr);
        assert_eq!(done.stderr.matches("the Kubernetes API takes Events again").count(), 1, "{}", done.stderr);
    }
}

kernel_test! {
    fn an_api_server_down_mid_run_gets_the_series_when_back(test) {
        let scratch = test.scratch();
        let StuckVolume { kubelet: _kubelet, watch, volume: _volume, mount: _, api, pod: _, root: _root } =
            StuckVolume::start(scratch.path(), |_| {});
        await_requests(&api, secs(60), "the Event POSTed", |r| r.iter().any(|r| r.method == "POST"), &watch);
        api.go_down();
        // The series patch, due 30 s after the Event, finds the server down.
        await_said(&watch, "cannot post Kubernetes Events", secs(60));
        let before = watch.findings_so_far().len();
        api.come_back();
        let requests = await_requests(&api, secs(60), "the series PATCHed once back", |r| r.iter().any(|r| r.method == "PATCH"), &watch);
        assert_eq!(created(&requests).len(), 1, "the repeats went to the series, not new Events");
        let done = watch.stop(libc::SIGINT);
        assert!(done.status.success(), "{}", done.stderr);
        assert!(done.findings.len() >= before, "the node's output went on");
        assert_eq!(done.stderr.matches("cannot post Kubernetes Events").count(), 1, "said once: {}", done.stderr);
        assert_eq!(done.stderr.matches("the Kubernetes API takes Events again").count(), 1, "{}", done.stderr);
    }
}

kernel_test! {
    fn a_missing_permission_is_named_once_and_tracing_goes_on(test) {
        let scratch = test.scratch();
        let StuckVolume { kubelet: _kubelet, mut watch, volume: _volume, mount: _, api, pod, root: _root } =
            StuckVolume::start(scratch.path(), |api| api.refuse("/apis/events.k8s.io/v1/namespaces/shop/events", 403, "create", "events", "shop"));
        watch.await_finding(secs(60), |f| f["kind"] == "volume-still-mounted", |e| e.eq("/pod_uid", pod.uid()));
        await_requests(&api, secs(30), "the refused POST", |r| r.iter().any(|r| r.method == "POST"), &watch);
        // Nothing is awaited but time: longer than podstuck's first
        // backoffs (2 s, then 4 s), for a retry of the refused POST (there
        // must be none) to come.
        std::thread::sleep(secs(12));
        let done = watch.stop(libc::SIGINT);
        assert!(done.status.success(), "{}", done.stderr);
        assert_eq!(done.stderr.matches("permission missing: create events").count(), 1, "said once: {}", done.stderr);
        assert!(done.stderr.contains("deploy/base/podstuck-events-rbac.yaml"), "{}", done.stderr);
        assert_eq!(api.requests_of("POST").len(), 1, "not retried: {:?}", api.requests_of("POST"));
    }
}

#[test]
fn events_need_the_nodes_name() {
    let out = std::process::Command::new(podstuck_binary())
        .args(["watch", "--events", "--duration", "1s"])
        .env_remove("NODE_NAME")
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("--events needs the node's name"),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// What a request asks, in RBAC's words: (API group, resource, verb).
fn permission(request: &Request) -> (String, String, String) {
    let parts: Vec<&str> = request.path().trim_start_matches('/').split('/').collect();
    let (group, rest) = match parts[0] {
        "api" => (String::new(), &parts[2..]),
        _ => (parts[1].to_string(), &parts[3..]),
    };
    let rest = match rest {
        ["namespaces", _, rest @ ..] => rest,
        rest => rest,
    };
    let verb = match (request.method.as_str(), rest.len()) {
        ("POST", _) => "create",
        ("PATCH", _) => "patch",
        ("GET", 1) => "list",
        _ => "get",
    };
    (group, rest[0].to_string(), verb.to_string())
}

kernel_test! {
    fn the_rbac_in_deploy_grants_what_events_asks_and_nothing_more(test) {
        let documents = harness::deploy_manifest("base/podstuck-events-rbac.yaml");
        let scratch = test.scratch();
        let StuckVolume { kubelet, mut watch, volume, mount: _, api, pod: _, root: _root } =
            StuckVolume::start(scratch.path(), |_| {});
        watch.await_finding(secs(60), |f| f["kind"] == "volume-still-mounted", |_| {});
        await_requests(&api, secs(60), "a PATCH", |r| r.iter().any(|r| r.method == "PATCH"), &watch);
        drop(volume);
        await_requests(&api, secs(60), "the resolved Event", |r| created(r).len() >= 2, &watch);
        drop(kubelet);
        watch.stop(libc::SIGINT);
        let asked: std::collections::BTreeSet<_> = api.requests().iter().map(permission).collect();

        let roles: Vec<&serde_json::Value> = documents.iter().filter(|d| d["kind"] == "ClusterRole").collect();
        assert_eq!(roles.len(), 1, "one ClusterRole");
        let binding = documents.iter().find(|d| d["kind"] == "ClusterRoleBinding").expect("a ClusterRoleBinding");
        assert_eq!(binding["roleRef"]["name"], roles[0]["metadata"]["name"]);
        assert_eq!(binding["subjects"][0]["kind"], "ServiceAccount");
        assert_eq!((binding["subjects"][0]["name"].as_str(), binding["subjects"][0]["namespace"].as_str()), (Some("podstuck"), Some("podstuck")));
        let mut granted = std::collections::BTreeSet::new();
        for rule in roles[0]["rules"].as_array().unwrap() {
            let words = |key: &str| rule[key].as_array().unwrap().iter().map(|v| v.as_str().unwrap().to_string()).collect::<Vec<_>>();
            for group in words("apiGroups") {
                for resource in words("resources") {
                    for verb in words("verbs") {
                        granted.insert((group.clone(), resource.clone(), verb));
                    }
                }
            }
        }
        assert_eq!(granted, asked, "granted exactly what was asked");
    }
}
