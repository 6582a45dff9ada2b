//! `sandbox-teardown-failing` (P12): kubelet's KillPodSandbox retried,
//! containerd running Debian's own CNI plugins with DEL as it runs them,
//! and the DEL failing each time; its near misses: a DEL that succeeds, and
//! a pod forging a CNI teardown of another pod, which must give that pod no
//! finding; and a plugin's CNI variables read where the kernel's copy of
//! its environment ends, in a plugin directory the user names.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use podstuck_tests::findings::assert_told_in_order;
use podstuck_tests::*;
use serde_json::Value;

use super::{secs, watch_pods, FINDING_TIMEOUT};

/// Where Debian's containernetworking-plugins puts the plugins, one of the
/// directories whose execs the kernel program reports.
const CNI_DIR: &str = "/usr/lib/cni";

/// A fresh name, unique on this machine, of at most 8 + `prefix` bytes.
fn unique_name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{prefix}{:08x}", nanos ^ (std::process::id() << 20))
}

/// A network namespace made with `ip netns add`, deleted on drop.
struct NetNs(String);

impl NetNs {
    fn add() -> NetNs {
        let name = unique_name("podstuck-");
        let out = Command::new("ip").args(["netns", "add", &name]).output().expect("run ip netns add");
        assert!(out.status.success(), "ip netns add {name}: {}", String::from_utf8_lossy(&out.stderr));
        NetNs(name)
    }

    /// Its path, the CNI_NETNS a runtime hands its plugins.
    fn path(&self) -> String {
        format!("/run/netns/{}", self.0)
    }
}

impl Drop for NetNs {
    fn drop(&mut self) {
        let _ = Command::new("ip").args(["netns", "del", &self.0]).status();
    }
}

/// Whether Debian's bridge and host-local plugins and `ip` are here;
/// without them the test fails (or skips, where allowed) saying so.
fn cni_prerequisites(test: &str) -> bool {
    for plugin in ["bridge", "host-local"] {
        if !Path::new(CNI_DIR).join(plugin).is_file() {
            return missing(
                test,
                &format!("{CNI_DIR}/{plugin}, the CNI plugin containerd runs"),
                "apt-get install containernetworking-plugins",
            );
        }
    }
    if Command::new("ip").arg("-V").output().is_err() {
        return missing(test, "ip, to make the sandbox's network namespace", "apt-get install iproute2");
    }
    true
}

/// A bridge network with host-local IPAM keeping its allocations in
/// `data_dir`, as a node's /etc/cni/net.d conflist says it (one plugin).
fn bridge_conf(bridge: &str, data_dir: &Path) -> String {
    serde_json::json!({
        "cniVersion": "1.0.0",
        "name": "podstuck-test",
        "type": "bridge",
        "bridge": bridge,
        "isGateway": true,
        "ipMasq": false,
        "ipam": {
            "type": "host-local",
            "dataDir": text(data_dir),
            "ranges": [[{"subnet": "10.244.77.0/24"}]]
        }
    })
    .to_string()
}

/// A container runtime as podstuck trusts one: a process of the node's
/// mount namespace, in no pod, whose executable is named `containerd`.
/// podstuck trusts a plugin's exec by its parent's executable, never by a
/// name it gives itself, so this is a copy of dash under that name, which
/// runs each plugin as its child as containerd does. containerd outlives
/// its plugins, and podstuck reads a plugin's parent from /proc when it
/// takes the exec's record (a busy moment may make that later than the
/// plugin's end): each runtime process says the plugin's status on stderr,
/// closes its output, and stays a while, as a daemon would; those still
/// there are ended with the test.
struct Runtime {
    containerd: PathBuf,
    lingering: std::sync::Mutex<Vec<std::process::Child>>,
}

/// How long a runtime process stays after its plugin ended.
const RUNTIME_LINGERS: &str = "3";

impl Runtime {
    fn in_scratch(scratch: &ScratchDir) -> Runtime {
        let bin = scratch.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let containerd = bin.join("containerd");
        std::fs::copy("/bin/dash", &containerd).expect("copy dash as the test's containerd");
        Runtime { containerd, lingering: std::sync::Mutex::new(Vec::new()) }
    }

    /// `program` run as this runtime's child, with the arguments added
    /// after; its status as `exit N`, last on stderr, then the runtime
    /// lingers with its output closed.
    fn runs(&self, program: &Path) -> Command {
        let mut command = Command::new(&self.containerd);
        let script =
            format!("\"$0\" \"$@\"; rc=$?; echo \"exit $rc\" >&2; exec >&- 2>&-; sleep {RUNTIME_LINGERS}; exit $rc");
        command.arg("-c").arg(script).arg(program);
        command
    }

    /// Runs `command` (made by [`Runtime::runs`], stdin, stdout and stderr
    /// piped) with `input` on its stdin: the plugin's output and status,
    /// once the plugin ended, the runtime left lingering.
    fn run(&self, command: &mut Command, input: &[u8]) -> Output {
        use std::io::{Read, Write};
        use std::os::unix::process::ExitStatusExt;
        let mut child = command.spawn().expect("run the plugin");
        child.stdin.take().unwrap().write_all(input).expect("write the plugin's stdin");
        let (mut stdout, mut stderr) = (Vec::new(), Vec::new());
        child.stdout.take().unwrap().read_to_end(&mut stdout).expect("read the plugin's stdout");
        child.stderr.take().unwrap().read_to_end(&mut stderr).expect("read the plugin's stderr");
        let text = String::from_utf8_lossy(&stderr).into_owned();
        let (said, last) = text.trim_end().rsplit_once('\n').unwrap_or(("", text.trim_end()));
        let code: i32 = last
            .strip_prefix("exit ")
            .and_then(|c| c.parse().ok())
            .unwrap_or_else(|| panic!("no status from the runtime: {text}"));
        self.lingering.lock().unwrap().push(child);
        Output { status: std::process::ExitStatus::from_raw(code << 8), stdout, stderr: said.as_bytes().to_vec() }
    }
}

impl Drop for Runtime {
    fn drop(&mut self) {
        for mut child in self.lingering.lock().unwrap().drain(..) {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// One pod's sandbox as containerd hands it to its CNI plugin.
struct Sandbox<'a> {
    id: String,
    netns: &'a NetNs,
    pod: &'a Pod,
    runtime: &'a Runtime,
}

impl Sandbox<'_> {
    fn new<'a>(netns: &'a NetNs, pod: &'a Pod, runtime: &'a Runtime) -> Sandbox<'a> {
        // A sandbox id is 64 hex digits; the pod's UID keeps it unique.
        let id = format!("{:0<64}", pod.uid().replace('-', ""));
        Sandbox { id, netns, pod, runtime }
    }

    /// `/usr/lib/cni/bridge` run with DEL and `conf` on stdin, as
    /// containerd runs it for kubelet's KillPodSandbox.
    fn del(&self, conf: &str) -> Output {
        let args = format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0;K8S_POD_UID={}", self.pod.uid());
        let mut command = self.runtime.runs(&Path::new(CNI_DIR).join("bridge"));
        command
            .env_clear()
            .env("PATH", "/usr/sbin:/usr/bin:/sbin:/bin")
            .env("CNI_COMMAND", "DEL")
            .env("CNI_CONTAINERID", &self.id)
            .env("CNI_NETNS", self.netns.path())
            .env("CNI_IFNAME", "eth0")
            .env("CNI_PATH", CNI_DIR)
            .env("CNI_ARGS", args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        self.runtime.run(&mut command, conf.as_bytes())
    }

    /// A DEL that must fail because host-local cannot make its directory.
    fn failing_del(&self, conf: &str) {
        let out = self.del(conf);
        let said = String::from_utf8_lossy(&out.stdout);
        assert!(!out.status.success(), "DEL with an unusable dataDir succeeded: {said}");
        assert!(said.contains("not a directory"), "the plugin's error: {said}");
    }

    /// A DEL that must succeed.
    fn working_del(&self, conf: &str) {
        let out = self.del(conf);
        assert!(
            out.status.success(),
            "DEL failed ({}): {}{}",
            out.status,
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}

/// The conf of a network whose host-local dataDir is a path under a
/// regular file (its mkdir fails with ENOTDIR), and of one that works.
fn confs(scratch: &ScratchDir) -> (String, String) {
    let bridge = unique_name("psb");
    let file = scratch.path().join("not-a-directory");
    std::fs::write(&file, "").unwrap();
    (bridge_conf(&bridge, &file.join("cni")), bridge_conf(&bridge, &scratch.path().join("cni-data")))
}

kernel_test! {
    /// Issue 40's CNI case: kubelet's KillPodSandbox retried, containerd
    /// running the bridge plugin with DEL each time, and each time its
    /// IPAM plugin host-local fails. One finding on the pod, naming both
    /// plugins and the sandbox; resolved by the DEL that finally succeeds.
    /// Then another pod's DEL failing: the plugin's words read again (the
    /// write program unloaded at the success, loaded again).
    fn a_cni_del_failing_again_and_again_is_sandbox_teardown_failing_until_one_succeeds(test) {
        if !cni_prerequisites(test.name()) {
            return;
        }
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let uid = pod.uid().to_string();
        let netns = NetNs::add();
        let runtime = Runtime::in_scratch(&scratch);
        let sandbox = Sandbox::new(&netns, &pod, &runtime);
        let (broken, working) = confs(&scratch);
        let later = root.new_pod();
        let mut watch = watch_pods(&root, &[&pod, &later]);

        for _ in 0..3 {
            sandbox.failing_del(&broken);
        }
        let finding = watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(),
            |f| f["kind"] == "sandbox-teardown-failing" && f["pod_uid"] == uid.as_str(),
            |e| {
                e.eq("/status", "active");
                e.eq("/severity", "critical");
                e.eq("/confidence", "confirmed");
                e.eq("/details/plugin", "bridge");
                e.eq("/details/sandbox", sandbox.id.as_str());
                e.eq("/details/failures", 3);
                e.eq("/count", 3);
                e.eq("/paths/0", "/usr/lib/cni/bridge");
                e.contains("/summary", "CNI plugin bridge with DEL 3 times");
                e.contains("/summary", "host-local");
                e.contains("/summary", "web-0");
                e.that(e.mentions("/evidence", &sandbox.id), "the evidence names the sandbox");
                e.that(e.mentions("/evidence", &netns.path()), "the evidence names the netns, still there");
                e.that(e.mentions("/advice", "host-local"), "the advice names host-local's directory");
                e.contains("/fix", &sandbox.id);
                e.eq("/actor/parent", "containerd");
            },
        );
        eprintln!("finding: {finding}");

        // Once a DEL is known failing, the kernel reads what the plugin
        // writes on its stdout (attached before that finding was told): the
        // next attempt's error is said, from bridge itself.
        sandbox.failing_del(&broken);
        let said = watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(),
            |f| f["id"] == finding["id"] && f["count"] == 4,
            |e| {
                e.contains("/details/plugin_said", "not a directory");
                e.contains("/summary", "It said: \"");
                e.contains("/summary", "not a directory");
                e.that(e.mentions("/evidence", "bridge wrote on its stdout"), "the evidence says who wrote it");
                e.eq("/confidence", "confirmed");
            },
        );
        eprintln!("with the plugin's words: {said}");

        // The cause gone: the next DEL succeeds, and the finding is over.
        sandbox.working_del(&working);
        watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(),
            |f| f["id"] == finding["id"],
            |e| {
                e.eq("/status", "resolved");
                e.eq("/fix", "");
            },
        );

        let second = Sandbox::new(&netns, &later, &runtime);
        for _ in 0..3 {
            second.failing_del(&broken);
        }
        watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(),
            |f| f["kind"] == "sandbox-teardown-failing" && f["pod_uid"] == later.uid() && f["details"]["plugin_said"].is_string(),
            |e| e.contains("/details/plugin_said", "not a directory"),
        );
        let done = watch.stop(libc::SIGINT);
        assert!(done.status.success(), "podstuck failed: {}", done.stderr);
        assert_told_in_order(&done.finding_lines, &finding["id"]);
    }
}

kernel_test! {
    /// DEL of a sandbox that succeeds (bridge and host-local, on a network
    /// never added: the CNI spec asks DEL to succeed then) is no finding,
    /// however often it runs. A second pod whose DEL fails, afterwards, is
    /// the barrier: once its finding is told, every run before it was seen.
    fn a_cni_del_that_succeeds_is_no_finding(test) {
        if !cni_prerequisites(test.name()) {
            return;
        }
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let (fine, failing) = (root.new_pod(), root.new_pod());
        let (netns_fine, netns_failing) = (NetNs::add(), NetNs::add());
        let runtime = Runtime::in_scratch(&scratch);
        let (sandbox_fine, sandbox_failing) =
            (Sandbox::new(&netns_fine, &fine, &runtime), Sandbox::new(&netns_failing, &failing, &runtime));
        let (broken, working) = confs(&scratch);
        let mut watch = watch_pods(&root, &[&fine, &failing]);

        for _ in 0..3 {
            sandbox_fine.working_del(&working);
        }
        for _ in 0..2 {
            sandbox_failing.failing_del(&broken);
        }
        watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(),
            |f| f["kind"] == "sandbox-teardown-failing" && f["pod_uid"] == failing.uid(),
            |e| e.eq("/details/sandbox", sandbox_failing.id.as_str()),
        );
        let done = watch.stop(libc::SIGINT);
        let wrong: Vec<&Value> = done
            .findings
            .iter()
            .filter(|f| f["kind"] == "sandbox-teardown-failing" && f["pod_uid"] == fine.uid())
            .collect();
        assert!(wrong.is_empty(), "a DEL that succeeded was told: {wrong:?}");
    }
}

kernel_test! {
    /// A plugin whose environment is longer than the 4 KiB the kernel
    /// copies, its CNI variables past the cut (a runtime with many
    /// variables of its own): read whole from /proc while the plugin
    /// lives. The plugin lives in a directory the node's defaults do not
    /// name, given with --cni-plugin-dir: a copy of timeout(1) that fails
    /// (exit 124) after a second.
    fn cni_variables_past_the_kernels_copy_are_read_from_proc_in_a_plugin_directory_named_by_the_user(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let uid = pod.uid().to_string();
        std::fs::create_dir_all(pod.dir()).unwrap();
        let plugins = scratch.path().join("cni-bin");
        std::fs::create_dir_all(&plugins).unwrap();
        std::fs::copy("/usr/bin/timeout", plugins.join("slowfail")).expect("copy timeout(1) as a plugin");
        let runtime = Runtime::in_scratch(&scratch);
        let mut watch = Watch::start(&[
            "--findings",
            "--kubelet-root",
            root.arg(),
            "--pod",
            &uid,
            "--cni-plugin-dir",
            text(&plugins),
        ]);
        for _ in 0..2 {
            // Variables are passed in order of name: AAA_PAD first, 5 KB.
            let status = runtime
                .runs(&plugins.join("slowfail"))
                .args(["1", "sleep", "5"])
                .env_clear()
                .env("AAA_PAD", "x".repeat(5000))
                .env("PATH", "/usr/bin:/bin")
                .env("CNI_COMMAND", "DEL")
                .env("CNI_CONTAINERID", "0123456789abcdef")
                .env("CNI_NETNS", "/var/run/netns/podstuck-none")
                .env("CNI_IFNAME", "eth0")
                .env("CNI_ARGS", format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0;K8S_POD_UID={uid}"))
                .status()
                .expect("run the plugin");
            assert_eq!(status.code(), Some(124), "timeout(1) ends in 124");
        }
        watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(),
            |f| f["kind"] == "sandbox-teardown-failing" && f["pod_uid"] == uid.as_str(),
            |e| {
                e.eq("/details/plugin", "slowfail");
                e.eq("/details/sandbox", "0123456789abcdef");
                e.eq("/details/exit_code", 124);
                e.eq("/actor/parent", "containerd");
            },
        );
        let done = watch.stop(libc::SIGINT);
        assert!(done.status.success(), "podstuck failed: {}", done.stderr);
    }
}

kernel_test! {
    /// Issue 47's first trial: a process of pod A, in a mount namespace of
    /// its own (as every container is), runs its own /opt/cni/bin/calico
    /// (a script that exits 1) three times with DEL, CNI_CONTAINERID=--all,
    /// CNI_NETNS=/proc/self/ns/net and pod B's UID in CNI_ARGS, from a
    /// shell that named itself containerd; then the node's own bridge
    /// plugin file (as a pod with a hostPath of the plugin directory could)
    /// three times with the same claims. Neither reaches pod B: the first
    /// is no plugin file of the node's (the kernel never streams it), the
    /// second ran in a pod's cgroup and is dropped and counted. A real
    /// failing DEL of pod C afterwards is the barrier: once its finding is
    /// told, the forged runs were all seen.
    fn a_pod_forging_a_cni_teardown_gives_no_other_pod_a_finding(test) {
        if !cni_prerequisites(test.name()) {
            return;
        }
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let (attacker, victim, barrier) = (root.new_pod(), root.new_pod(), root.new_pod());
        let cgroup = PodCgroup::create(scratch.path(), attacker.uid());
        let netns = NetNs::add();
        let runtime = Runtime::in_scratch(&scratch);
        let sandbox = Sandbox::new(&netns, &barrier, &runtime);
        let (broken, _) = confs(&scratch);
        let mut watch = watch_pods(&root, &[&victim, &barrier]);

        let claims = format!(
            "CNI_COMMAND=DEL CNI_CONTAINERID=--all CNI_NETNS=/proc/self/ns/net CNI_IFNAME=eth0 CNI_PATH=/opt/cni/bin CNI_ARGS='IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0;K8S_POD_UID={}'",
            victim.uid()
        );
        // In a mount namespace of its own (private: nothing reaches the
        // node), a tmpfs on /opt holds the pod's own "calico".
        let inner = format!(
            "mount -t tmpfs podstuck-forged /opt && mkdir -p /opt/cni/bin \\
             && printf '#!/bin/sh\\nexit 1\\n' > /opt/cni/bin/calico && chmod +x /opt/cni/bin/calico \\
             && printf containerd > /proc/$$/comm \\
             && for i in 1 2 3; do {claims} /opt/cni/bin/calico; done; \\
             for i in 1 2 3; do {claims} {CNI_DIR}/bridge </dev/null; echo; done; \
             for i in 1 2 3; do echo '{{\"code\":999,\"msg\":\"Unauthorized\"}}'; done; echo forged"
        );
        // The barrier's DEL failing first: what plugins write is read
        // while the forger runs, and its words must reach no finding.
        for _ in 0..2 {
            sandbox.failing_del(&broken);
        }
        watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(),
            |f| f["kind"] == "sandbox-teardown-failing" && f["pod_uid"] == barrier.uid(),
            |e| {
                e.eq("/confidence", "confirmed");
                e.eq("/actor/parent", "containerd");
            },
        );
        let forger = cgroup.run(&format!("exec unshare --mount --propagation private sh -c {}", shell_word(Path::new(&inner))));
        let (status, lines) = forger.finish(secs(30));
        assert!(lines.iter().any(|l| l == "forged"), "the forged runs did not all run ({status}): {lines:?}");
        sandbox.failing_del(&broken);
        watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(),
            |f| f["kind"] == "sandbox-teardown-failing" && f["pod_uid"] == barrier.uid() && f["count"] == 3,
            |e| {
                e.contains("/details/plugin_said", "not a directory");
                e.that(!e.mentions("/details/plugin_said", "Unauthorized"), "the forger's words are not the barrier's");
            },
        );
        let done = watch.stop(libc::SIGINT);
        assert!(done.status.success(), "podstuck failed: {}", done.stderr);
        // Pod B: nothing but, at the run's end, that nothing worked on it.
        let about_b = |f: &&Value| {
            f["pod_uid"] == victim.uid() || f["pods"].as_array().is_some_and(|p| p.iter().any(|p| p == victim.uid()))
        };
        let wrong: Vec<&Value> =
            done.findings.iter().filter(about_b).filter(|f| f["kind"] != "no-teardown-seen").collect();
        assert!(wrong.is_empty(), "a forged teardown reached pod B: {wrong:?}");
        let everything = format!("{:?}", done.finding_lines);
        assert!(!everything.contains("--all") || !everything.contains("rmp"), "a fix names --all: {everything}");
        let end = done.end.as_ref().expect("the end line");
        let in_a_pod = end["lifecycle_dropped"]["in-a-pod"].as_u64().unwrap_or(0);
        assert!(in_a_pod >= 3, "the node's plugin run from pod A's cgroup is dropped and counted: {end}");
    }
}
