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

/// A hook that starts something in the background and returns: the
/// sleep it leaves holds the exec's output (issue 63's 1(b)).
const BACKGROUND_HOOK: [&str; 3] = ["sh", "-c", "sleep 3600 & echo started"];

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
/// and `app` with its preStop hook `hook`, both running, with their ids.
fn deleted_pod(
    pod: &Pod,
    deleted: SystemTime,
    (app, proxy): (&str, &str),
    hook: &[&str],
) -> k8s_openapi::api::core::v1::Pod {
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
            "containers": [{"name": "app", "lifecycle": {"preStop": {"exec": {"command": hook}}}}]
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

/// A deleted pod of two containers run by the real runtime in a pod's
/// cgroups, the API saying so, and podstuck watching it by name. Fields
/// drop in order: podstuck, the daemon (its tasks), then the cgroups.
struct DeletedPod {
    watch: Watch,
    containerd: Containerd,
    _api: ApiServer,
    pod: Pod,
    app: String,
    app_dir: std::path::PathBuf,
    app_init: u32,
    proxy_init: u32,
    _cgroups: Vec<CgroupDirs>,
    _root: KubeletRoot,
}

impl DeletedPod {
    /// `app`'s init forks a child with `hook`'s command line on SIGUSR1
    /// (the pod's forgery); the API's spec gives `app` `hook` as its
    /// preStop exec hook. None where containerd is missing (said).
    fn start(test: &KernelTest, scratch: &ScratchDir, hook: &[&str]) -> Option<DeletedPod> {
        let mut cgroups: Vec<CgroupDirs> = Vec::new();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        std::fs::create_dir_all(pod.dir()).expect("the pod's directory");
        let containerd = Containerd::start(scratch.path(), test.name())?;
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
        let forging = format!("trap '{} &' USR1; while :; do sleep 1; done", shell_line(hook));
        for (id, command) in [(&proxy, vec!["sleep", "1000"]), (&app, vec!["sh", "-c", &forging])] {
            containerd.run_detached_with(&["--cgroup".to_string(), cgroup(id)], id, &command);
            containerd.wait_task_status(id, "RUNNING", secs(20));
        }
        let app_init = containerd.task_pid(&app).expect("app's pid");
        let proxy_init = containerd.task_pid(&proxy).expect("proxy's pid");

        // Deleted a second ago (the API's second, rounded down).
        let now = UNIX_EPOCH + Duration::from_secs(SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs());
        let api = ApiServer::start();
        api.object(&deleted_pod(&pod, now - Duration::from_secs(1), (&app, &proxy), hook), Some("shop"), "web-0");
        serve_ready_node(&api);
        let config = api.kubeconfig(scratch.path());
        let watch = Watch::start(&[
            "--findings",
            "--kubelet-root",
            root.arg(),
            "--pod",
            "shop/web-0",
            "--kubeconfig",
            config.to_str().unwrap(),
        ]);
        Some(DeletedPod {
            watch,
            containerd,
            _api: api,
            pod,
            app,
            app_dir,
            app_init,
            proxy_init,
            _cgroups: cgroups,
            _root: root,
        })
    }

    /// The pod's own forgery: app's init forks a child with the hook's
    /// command line, after the deletion. Its pid.
    fn forge(&self, hook: &[&str]) -> u32 {
        super::signal(self.app_init, libc::SIGUSR1);
        poll_until("app's own child with the hook's command line", secs(20), || {
            procs_of(&self.app_dir).into_iter().find(|pid| cmdline(*pid) == hook.join(" "))
        })
    }

    /// The hook as kubelet runs it: an exec through the runtime, waited for.
    fn run_hook(&self, hook: &[&str]) -> Process {
        let mut exec = vec!["task", "exec", "--exec-id", "prestop", &self.app];
        exec.extend(hook);
        Process::spawn(&mut self.containerd.ctr_command(secs(300), &exec))
    }

    fn id(&self, kind: &str, container: &str) -> String {
        format!("{kind}:{}/{container}", self.pod.uid())
    }

    /// kubelet goes on once the hook is done: app ends (its init takes
    /// SIGKILL); the sidecar's finding ends with it.
    fn end_app_and_see_the_sidecar_released(mut self) -> Finished {
        self.containerd.ctr(&["task", "kill", "-s", "SIGKILL", &self.app]);
        self.containerd.wait_task_status(&self.app, "STOPPED", secs(20));
        assert!(!alive(self.app_init));
        let sidecar = self.id("sidecar-waiting", "proxy");
        self.watch.await_finding_shaped(
            FINDING_TIMEOUT,
            |e| e.shape_of_no_call(),
            |f| f["id"] == sidecar.as_str(),
            |e| {
                e.eq("/status", "resolved");
            },
        );
        let done = self.watch.stop(libc::SIGINT);
        assert!(done.status.success(), "podstuck failed: {}", done.stderr);
        let told: Vec<&Value> = done.finding_lines.iter().filter(|f| f["kind"] == "sigterm-ignored").collect();
        assert!(told.is_empty(), "no SIGTERM was sent, none ignored: {told:?}");
        done
    }
}

kernel_test! {
    /// Issue 63's preStop hook and sidecar, with the real runtime.
    fn a_running_prestop_hook_and_the_sidecar_it_holds_are_named_and_the_fix_ends_the_hook(test) {
        let scratch = test.scratch();
        let Some(mut lab) = DeletedPod::start(&test, &scratch, &HOOK) else { return };
        // The pod's own forgery first, then the hook.
        let forged = lab.forge(&HOOK);
        let hook_exec = lab.run_hook(&HOOK);
        let hook = poll_until("the hook's shell in app's cgroup", secs(20), || {
            procs_of(&lab.app_dir).into_iter().find(|pid| *pid != forged && cmdline(*pid) == HOOK.join(" "))
        });
        let sleep = poll_until("the hook's sleep", secs(20), || {
            let children = std::fs::read_to_string(format!("/proc/{hook}/task/{hook}/children")).ok()?;
            children.split_whitespace().next()?.parse::<u32>().ok()
        });
        let (hook_start, sleep_start) = (start_of(hook), start_of(sleep));

        let hook_id = lab.id("prestop-hook-running", "app");
        let finding = lab.watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(), |f| f["id"] == hook_id.as_str(), |e| {
            e.eq("/status", "active");
            e.eq("/confidence", "confirmed");
            e.eq("/pod_uid", lab.pod.uid());
            e.eq("/details/pid", hook);
            e.eq("/details/container", "app");
            e.eq("/details/container_id", lab.app.as_str());
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
        let sidecar_id = lab.id("sidecar-waiting", "proxy");
        let proxy_init = lab.proxy_init;
        lab.watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(), |f| f["id"] == sidecar_id.as_str(), |e| {
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
        lab.watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(), |f| f["id"] == hook_id.as_str(), |e| {
            e.eq("/status", "resolved");
        });
        lab.end_app_and_see_the_sidecar_released();
    }
}

kernel_test! {
    /// Issue 63's 1(b) with the real runtime: a preStop hook that starts
    /// a sleep in the background and returns. The sleep (now the
    /// container's init's child) holds the exec's output, so the runtime's
    /// exec never ends (`ctr task exec` as kubelet's ExecSync) and SIGTERM
    /// never comes. podstuck names the sleep, never the pod's own child
    /// with the same command line; its kill lets the exec end, with the
    /// hook's own exit status.
    fn a_hooks_background_child_holding_its_output_is_named_and_its_kill_lets_the_exec_end(test) {
        let scratch = test.scratch();
        let Some(mut lab) = DeletedPod::start(&test, &scratch, &BACKGROUND_HOOK) else { return };
        let forged = lab.forge(&["sleep", "3600"]);
        let hook_exec = lab.run_hook(&BACKGROUND_HOOK);
        let sleep = poll_until("the hook's sleep, left behind in app's cgroup", secs(20), || {
            procs_of(&lab.app_dir).into_iter().find(|pid| *pid != forged && cmdline(*pid) == "sleep 3600")
        });
        let start = start_of(sleep);
        poll_until_else("the hook's shell to be gone, the exec still waited for", secs(20), || {
            match procs_of(&lab.app_dir).iter().any(|pid| cmdline(*pid) == BACKGROUND_HOOK.join(" ")) {
                false => Ok(()),
                true => Err("the hook's shell still runs".to_string()),
            }
        });
        assert!(hook_exec.wait_for_line("started", secs(20)), "the hook ran and its words came through");
        assert!(alive(hook_exec.pid()), "the runtime's exec waits on the output the sleep holds");

        let hook_id = lab.id("prestop-hook-running", "app");
        let finding = lab.watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(), |f| f["id"] == hook_id.as_str(), |e| {
            e.eq("/status", "active");
            e.eq("/confidence", "likely");
            e.eq("/details/pid", sleep);
            e.contains("/summary", &format!("sleep (pid {sleep}), started since the deletion, still holds an exec's output open"));
            e.contains("/fix", &format!("kill -KILL {sleep}"));
            e.contains("/fix", &format!("= {start} ]"));
            e.that(!e.mentions("/fix", &format!("kill -KILL {forged}")), "the pod's own sleep, with no exec's output, is never killed");
            e.that(e.mentions("/advice", "drain_exec_sync_io_timeout"), "the advice names the runtime's bound");
        });
        eprintln!("finding: {finding}");
        apply_fix(&finding);
        let (status, _) = hook_exec.finish(secs(20));
        assert!(status.success(), "the hook itself had returned 0, and the exec now ends with it: {status}");
        lab.watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(), |f| f["id"] == hook_id.as_str(), |e| {
            e.eq("/status", "resolved");
        });
        lab.end_app_and_see_the_sidecar_released();
    }
}
