//! `prestop-hook-running` and `sidecar-waiting` (P19): SIGTERM never came,
//! because kubelet's shutdown order holds the containers back. With the
//! real runtime (Debian's containerd and runc), a pod of two containers
//! in a pod's cgroups (`ctr run --cgroup`, as kubelet's cgroupfs driver
//! names them): `app`, whose preStop exec hook the test runs as kubelet
//! does through the runtime (`ctr task exec`, a process exec'd into the
//! container) right after the pod's deletion, and the sidecar `proxy` (a
//! restartable init container). The stand-in API server says the pod is
//! deleted, with its spec and its containers' ids; podstuck reads it
//! (`watch --pod shop/web-0`), names the hook and the sidecar waiting on
//! it, and its fix (the hook's processes killed, each checked by its
//! start) lets the runtime's exec end, as kubelet's ExecSync would. The
//! container's own init forges the hook's very command line in a child of
//! its own, after the deletion: never named, never in the fix.

use std::process::Command;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use podstuck_tests::apiserver::{objects, ApiServer};
use podstuck_tests::findings::apply_fix;
use podstuck_tests::*;
use serde_json::{json, Value};

use super::{secs, start_of, FINDING_TIMEOUT};

/// The hook's command, as the spec says it: a shell that waits on a child
/// (`; echo` keeps the shell from exec'ing the sleep), as a drain script does.
const HOOK: [&str; 3] = ["sh", "-c", "sleep 3600; echo drained"];

/// The grace period the pod was deleted with.
const GRACE: u64 = 600;

/// A container id, as containerd writes them: 64 lowercase hex digits,
/// this pod's own.
fn container_id(pod: &Pod, n: u8) -> String {
    format!("{}{:032x}", pod.uid().replace('-', ""), n)
}

/// "2026-11-29T10:00:00Z", to the second as the API keeps times.
fn rfc3339(t: SystemTime) -> String {
    let secs = t.duration_since(UNIX_EPOCH).unwrap().as_secs();
    let out = Command::new("date").args(["-u", "-d", &format!("@{secs}"), "+%Y-%m-%dT%H:%M:%SZ"]).output().unwrap();
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// shop/web-0, deleted at `deleted` with [`GRACE`]: the sidecar `proxy`
/// and `app` with its preStop hook, both running, with their ids.
fn deleted_pod(pod: &Pod, deleted: SystemTime, app: &str, proxy: &str) -> k8s_openapi::api::core::v1::Pod {
    let status = |name: &str, id: &str| {
        json!({"name": name, "image": "busybox", "imageID": "", "ready": true, "restartCount": 0,
               "containerID": format!("containerd://{id}"), "state": {"running": {"startedAt": rfc3339(deleted)}}})
    };
    serde_json::from_value(json!({
        "metadata": {
            "name": "web-0", "namespace": "shop", "uid": pod.uid(),
            "deletionTimestamp": rfc3339(deleted + Duration::from_secs(GRACE)),
            "deletionGracePeriodSeconds": GRACE
        },
        "spec": {
            "nodeName": "worker-1",
            "initContainers": [{"name": "proxy", "restartPolicy": "Always"}],
            "containers": [{"name": "app", "lifecycle": {"preStop": {"exec": {"command": HOOK}}}}]
        },
        "status": {
            "phase": "Running",
            "initContainerStatuses": [status("proxy", proxy)],
            "containerStatuses": [status("app", app)]
        }
    }))
    .expect("a pod")
}

/// worker-1, Ready, its kubelet's lease renewed now: nothing on the API's
/// side explains the pod.
fn serve_ready_node(api: &ApiServer) {
    let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(json!({
        "metadata": {"name": "worker-1"},
        "status": {"conditions": [{"type": "Ready", "status": "True", "reason": "KubeletReady",
                                   "lastHeartbeatTime": rfc3339(SystemTime::now())}]}
    }))
    .expect("a node");
    api.object(&node, None, "worker-1");
    api.object(&objects::lease("worker-1", SystemTime::now()), Some("kube-node-lease"), "worker-1");
}

/// `words` as one sh command line, each word double-quoted (the trap that
/// runs it is single-quoted).
fn shell_line(words: &[&str]) -> String {
    words.iter().map(|w| format!("\"{w}\"")).collect::<Vec<_>>().join(" ")
}

/// The processes of cgroup `dir` (its `cgroup.procs`).
fn procs_of(dir: &std::path::Path) -> Vec<u32> {
    let text = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
    text.lines().filter_map(|l| l.trim().parse().ok()).collect()
}

fn cmdline(pid: u32) -> String {
    std::fs::read(format!("/proc/{pid}/cmdline"))
        .unwrap_or_default()
        .split(|b| *b == 0)
        .filter(|w| !w.is_empty())
        .map(|w| String::from_utf8_lossy(w).into_owned())
        .collect::<Vec<_>>()
        .join(" ")
}

kernel_test! {
    /// Issue 63's preStop hook and sidecar, with the real runtime.
    fn a_running_prestop_hook_and_the_sidecar_it_holds_are_named_and_the_fix_ends_the_hook(test) {
        // Declared first, dropped last: the pod's cgroups in every
        // hierarchy, removed once the runtime's tasks are gone.
        let mut cgroups: Vec<CgroupDirs> = Vec::new();
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        std::fs::create_dir_all(pod.dir()).expect("the pod's directory");
        let Some(containerd) = Containerd::start(scratch.path(), test.name()) else { return };
        let (app, proxy) = (container_id(&pod, 0xa), container_id(&pod, 0xb));
        let parent = scratch.path().file_name().unwrap().to_string_lossy().into_owned();
        let cgroup = |id: &str| format!("/{parent}/kubepods/besteffort/pod{}/{id}", pod.uid());
        let hierarchies: Vec<_> =
            mountinfo::here().into_iter().filter(|m| m.fstype == "cgroup" || m.fstype == "cgroup2").collect();
        for id in [&app, &proxy] {
            for hierarchy in &hierarchies {
                cgroups.push(CgroupDirs::create(&hierarchy.mount_point.join(&cgroup(id)[1..])));
            }
        }
        let app_dir = hierarchies[0].mount_point.join(&cgroup(&app)[1..]);
        // app's init forks a child with the hook's command line on SIGUSR1.
        let forging = format!("trap '{} &' USR1; while :; do sleep 1; done", shell_line(&HOOK));
        for (id, command) in [(&proxy, vec!["sleep", "1000"]), (&app, vec!["sh", "-c", &forging])] {
            containerd.run_detached_with(&["--cgroup".to_string(), cgroup(id)], id, &command);
            containerd.wait_task_status(id, "RUNNING", secs(20));
        }
        let app_init = containerd.task_pid(&app).expect("app's pid");
        let proxy_init = containerd.task_pid(&proxy).expect("proxy's pid");

        // Deleted a second ago (the API's second, rounded down).
        let now = UNIX_EPOCH + Duration::from_secs(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs());
        let deleted = now - Duration::from_secs(1);
        let api = ApiServer::start();
        api.object(&deleted_pod(&pod, deleted, &app, &proxy), Some("shop"), "web-0");
        serve_ready_node(&api);
        let config = api.kubeconfig(scratch.path());
        let mut watch = Watch::start(&[
            "--findings", "--kubelet-root", root.arg(), "--pod", "shop/web-0", "--kubeconfig", config.to_str().unwrap(),
        ]);

        // The pod's own forgery first, then the hook, as kubelet runs it
        // through the runtime, waiting for it.
        super::signal(app_init, libc::SIGUSR1);
        let forged = poll_until("app's own child with the hook's command line", secs(20), || {
            procs_of(&app_dir).into_iter().find(|pid| cmdline(*pid) == HOOK.join(" "))
        });
        let mut exec = vec!["task", "exec", "--exec-id", "prestop", &app];
        exec.extend(HOOK);
        let hook_exec = Process::spawn(&mut containerd.ctr_command(secs(300), &exec));
        let hook = poll_until("the hook's shell in app's cgroup", secs(20), || {
            procs_of(&app_dir).into_iter().find(|pid| *pid != forged && cmdline(*pid) == HOOK.join(" "))
        });
        let sleep = poll_until("the hook's sleep", secs(20), || {
            let children = std::fs::read_to_string(format!("/proc/{hook}/task/{hook}/children")).ok()?;
            children.split_whitespace().next()?.parse::<u32>().ok()
        });
        let (hook_start, sleep_start) = (start_of(hook), start_of(sleep));

        let hook_id = format!("prestop-hook-running:{}/app", pod.uid());
        let finding = watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(), |f| f["id"] == hook_id.as_str(), |e| {
            e.eq("/status", "active");
            e.eq("/confidence", "confirmed");
            e.eq("/pod_uid", pod.uid());
            e.eq("/details/pid", hook);
            e.eq("/details/container", "app");
            e.eq("/details/container_id", app.as_str());
            e.contains("/summary", "Container app has not been sent SIGTERM: its preStop hook, sh");
            e.contains("/summary", "The pod's sidecar(s) proxy are stopped only after app ends");
            e.that(e.mentions("/evidence", "sleep 3600; echo drained"), "the evidence quotes the hook's command line");
            e.contains("/fix", &format!("kill -KILL {hook}"));
            e.contains("/fix", &format!("= {hook_start} ]"));
            e.contains("/fix", &format!("kill -KILL {sleep}"));
            e.contains("/fix", &format!("= {sleep_start} ]"));
            e.that(!e.mentions("/fix", &format!("kill -KILL {forged}")), "the pod's own forgery is never killed");
            e.that(e.mentions("/advice", "FailedPreStopHook"), "the advice says what the kill costs");
        });
        eprintln!("finding: {finding}");
        let sidecar_id = format!("sidecar-waiting:{}/proxy", pod.uid());
        watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(), |f| f["id"] == sidecar_id.as_str(), |e| {
            e.eq("/kind", "sidecar-waiting");
            e.eq("/status", "active");
            e.eq("/severity", "info");
            e.eq("/details/pid", proxy_init);
            e.contains("/summary", &format!("these still run: app, whose preStop hook runs (pid {hook})"));
            e.eq("/details/waits_for", json!([{"container": "app", "holding": "prestop-hook", "pid": hook}]));
            e.eq("/fix", "");
        });

        // The fix ends the hook: the runtime's exec returns, as kubelet's would.
        apply_fix(&finding);
        let (status, _) = hook_exec.finish(secs(20));
        assert!(!status.success(), "the hook was killed: {status}");
        watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(), |f| f["id"] == hook_id.as_str(), |e| {
            e.eq("/status", "resolved");
        });
        // kubelet goes on: app ends (its init, PID 1 of its namespace with
        // no handler, takes SIGKILL only); the sidecar waits no more.
        containerd.ctr(&["task", "kill", "-s", "SIGKILL", &app]);
        containerd.wait_task_status(&app, "STOPPED", secs(20));
        assert!(!alive(app_init));
        watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(), |f| f["id"] == sidecar_id.as_str(), |e| {
            e.eq("/status", "resolved");
        });
        let done = watch.stop(libc::SIGINT);
        assert!(done.status.success(), "podstuck failed: {}", done.stderr);
        let told: Vec<&Value> = done.finding_lines.iter().filter(|f| f["kind"] == "sigterm-ignored").collect();
        assert!(told.is_empty(), "no SIGTERM was sent, none ignored: {told:?}");
    }
}
