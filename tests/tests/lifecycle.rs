//! End-to-end: the process lifecycle podstuck traces beside the calls
//! (issue 40): a CNI plugin's DEL that keeps failing, a pod's process that
//! SIGTERM does not end, a task that outlives SIGKILL on a FUSE server,
//! and a pod nobody works on. Each scenario is real: Debian's own CNI
//! plugins run as containerd runs them, a PID-namespace init made by
//! unshare, a FUSE request read and never answered; podstuck is the real
//! binary with its real kernel programs.
//!
//! A lifecycle finding is about no call: its `syscall` is null and it may
//! name no path, so these tests wait for it with
//! `Watch::await_finding_shaped` and `Expect::shape_of_no_call`.
//!
//! Runs as root; see `kernel_test!` for the skip rule. Scenarios are kept
//! apart by pod UID, container id, netns, cgroup and scratch directory, so
//! they may run in parallel with every other test.

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::Duration;

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use podstuck_tests::findings::{apply_fix, assert_told_in_order};
use podstuck_tests::*;
use serde_json::Value;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// How long podstuck may take to tell a finding once its cause is there:
/// its reviews are a second apart, the machine may be loaded.
const FINDING_TIMEOUT: Duration = Duration::from_secs(60);

/// Where Debian's containernetworking-plugins puts the plugins, one of the
/// directories whose execs the kernel program reports.
const CNI_DIR: &str = "/usr/lib/cni";

/// The grace period of the scenario of issue 40: kubelet's SIGKILL comes
/// 20 s after its SIGTERM. The time itself is what is under test here: the
/// init must survive all of it and the finding stay active.
const GRACE_PERIOD: Duration = Duration::from_secs(20);

// Reading lifecycle findings ------------------------------------------------

/// `podstuck watch --json --findings --kubelet-root ROOT --pod UID...`.
fn watch_pods(root: &KubeletRoot, pods: &[&Pod]) -> Watch {
    let mut args = vec!["--findings", "--kubelet-root", root.arg()];
    for pod in pods {
        std::fs::create_dir_all(pod.dir()).expect("create the pod's directory");
        args.extend(["--pod", pod.uid()]);
    }
    Watch::start(&args)
}

/// A fresh name, unique on this machine, of at most 8 + `prefix` bytes.
fn unique_name(prefix: &str) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{prefix}{:08x}", nanos ^ (std::process::id() << 20))
}

// CNI ----------------------------------------------------------------------

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
/// runs each plugin as its child as containerd does.
struct Runtime(PathBuf);

impl Runtime {
    fn in_scratch(scratch: &ScratchDir) -> Runtime {
        let bin = scratch.path().join("bin");
        std::fs::create_dir_all(&bin).unwrap();
        let containerd = bin.join("containerd");
        std::fs::copy("/bin/dash", &containerd).expect("copy dash as the test's containerd");
        Runtime(containerd)
    }

    /// `program` run as this runtime's child, with the arguments added
    /// after (`; exit $?` keeps dash from exec'ing it in its own place).
    fn runs(&self, program: &Path) -> Command {
        let mut command = Command::new(&self.0);
        command.arg("-c").arg("\"$0\" \"$@\"; exit $?").arg(program);
        command
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
        use std::io::Write;
        let args = format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0;K8S_POD_UID={}", self.pod.uid());
        let mut child = self
            .runtime
            .runs(&Path::new(CNI_DIR).join("bridge"))
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
            .stderr(Stdio::piped())
            .spawn()
            .expect("run the bridge plugin");
        child.stdin.take().unwrap().write_all(conf.as_bytes()).expect("write the network's conf");
        child.wait_with_output().expect("wait for the bridge plugin")
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
        let mut watch = watch_pods(&root, &[&pod]);

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

        // The cause gone: the next DEL succeeds, and the finding is over.
        sandbox.working_del(&working);
        watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(),
            |f| f["id"] == finding["id"],
            |e| {
                e.eq("/status", "resolved");
                e.eq("/fix", "");
            },
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

// Processes in a pod's cgroup ----------------------------------------------

/// A pod's cgroup, named as the systemd driver names it, below a parent of
/// the test's own: in the cgroup v2 tree and, on a hybrid node (this
/// machine's kind: v1 controllers, v2 mounted at .../unified), in the
/// `name=systemd` v1 hierarchy too, where systemd keeps the same slices
/// and where podstuck reads a process's pod from on such a node.
struct PodCgroup {
    paths: Vec<PathBuf>,
    _dirs: Vec<CgroupDirs>,
}

impl PodCgroup {
    fn create(scratch: &ScratchDir, pod: &Pod) -> PodCgroup {
        let parent = scratch.path().file_name().unwrap();
        let roots = std::iter::once(cgroup2_root()).chain(v1_hierarchy("name=systemd"));
        let paths: Vec<PathBuf> = roots.map(|root| pod_slice(&root.join(parent), "besteffort", pod.uid())).collect();
        let dirs = paths.iter().map(|path| CgroupDirs::create(path)).collect();
        PodCgroup { paths, _dirs: dirs }
    }

    /// `sh -c SCRIPT` that moves itself into the cgroup, says "ready",
    /// then runs `script` (an `exec` keeps its pid).
    fn run(&self, script: &str) -> Process {
        let moves: Vec<String> =
            self.paths.iter().map(|p| format!("echo $$ > {}", shell_word(&p.join("cgroup.procs")))).collect();
        let whole = format!("{} && echo ready && {script}", moves.join(" && "));
        let process = Process::spawn(Command::new("sh").arg("-c").arg(whole));
        process.wait_ready(secs(10));
        process
    }
}

/// A process killed with SIGKILL on drop if still there (a PID-namespace
/// init, which takes its namespace's every process with it).
struct KillOnDrop(u32);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        if alive(self.0) {
            // SAFETY: plain kill(2) of a process this test made.
            unsafe { libc::kill(self.0 as i32, libc::SIGKILL) };
        }
    }
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: plain kill(2) of a process this test made.
    assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0, "kill -{sig} {pid}");
}

/// `unshare -p -f sleep` in the pod's cgroup: its child, `sleep`, is the
/// init of a new PID namespace, with no SIGTERM handler. (unshare, the
/// init, its guard.)
fn namespace_init(cgroup: &PodCgroup) -> (Process, u32, KillOnDrop) {
    let unshare = cgroup.run("exec unshare --pid --fork --kill-child sleep 1000");
    let pid = unshare.pid();
    let init = poll_until("unshare's child, the PID namespace's init", secs(10), || {
        let children = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).ok()?;
        children.split_whitespace().next()?.parse::<u32>().ok()
    });
    let guard = KillOnDrop(init);
    wait_until("the init to be sleep, PID 1 of its namespace", secs(10), || {
        let status = std::fs::read_to_string(format!("/proc/{init}/status")).unwrap_or_default();
        let comm = std::fs::read_to_string(format!("/proc/{init}/comm")).unwrap_or_default();
        comm.trim() == "sleep" && status.lines().any(|l| l.starts_with("NSpid:") && l.ends_with("\t1"))
    });
    (unshare, init, guard)
}

/// When process `pid` started (`/proc/<pid>/stat`'s 22nd field, read
/// past its name): with its pid, the one process a finding is about.
fn start_of(pid: u32) -> u64 {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_else(|e| panic!("/proc/{pid}/stat: {e}"));
    let after = &stat[stat.rfind(") ").expect("a stat line") + 2..];
    after.split(' ').nth(19).and_then(|f| f.parse().ok()).expect("starttime")
}

/// The id podstuck gives a lifecycle finding about process `pid`, which
/// must be alive to be read: a pid and its start.
fn finding_id(kind: &str, pid: u32) -> String {
    format!("{kind}:{pid}@{}", start_of(pid))
}

/// The kill fix podstuck prints for process `pid`: it checks the start.
fn kill_fix(pid: u32) -> String {
    format!("[ \"$(sed 's/.*) //' /proc/{pid}/stat | cut -d' ' -f20)\" = {} ] && kill -KILL {pid}", start_of(pid))
}

kernel_test! {
    /// Issue 40's SIGTERM case: a pod's process is the init of its PID
    /// namespace with no handler, so the kernel drops kubelet's SIGTERM;
    /// it lives through the 20 s grace period until SIGKILL. Told at once
    /// (Confirmed: the kernel's own verdict), resolved when it dies.
    fn a_pid_namespace_init_without_a_handler_is_sigterm_ignored_until_sigkill(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let uid = pod.uid().to_string();
        let cgroup = PodCgroup::create(&scratch, &pod);
        let mut watch = watch_pods(&root, &[&pod]);
        let (unshare, init, _guard) = namespace_init(&cgroup);

        signal(init, libc::SIGTERM);
        let id = finding_id("sigterm-ignored", init);
        let finding = watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(), |f| f["id"] == id.as_str(), |e| {
            e.eq("/status", "active");
            e.eq("/severity", "warning");
            e.eq("/confidence", "confirmed");
            e.eq("/pod_uid", uid.as_str());
            e.eq("/details/pid", init);
            e.eq("/details/ignored_by_kernel", true);
            e.eq("/actor/pid", std::process::id());
            e.contains("/summary", &format!("sleep (pid {init})"));
            e.contains("/summary", "init (PID 1) of its PID namespace with no SIGTERM handler");
            e.that(e.mentions("/evidence", "ignored by the kernel"), "the evidence quotes the kernel's verdict");
            e.eq("/details/start", start_of(init));
            e.eq("/fix", kill_fix(init));
        });
        eprintln!("finding: {finding}");

        // The grace period: the init lives through all of it, the finding
        // stays active. The 20 s are the scenario, not a wait for something.
        let over = within(GRACE_PERIOD, || {
            let resolved = watch.findings_so_far().iter().any(|f| f["id"] == id.as_str() && f["status"] != "active");
            (!alive(init) || resolved).then_some(resolved)
        });
        assert_eq!(over, None, "the init died, or the finding ended, within the grace period");
        assert!(alive(init), "the init ended during the grace period");

        signal(init, libc::SIGKILL);
        let (status, _) = unshare.finish(secs(10));
        assert!(!alive(init), "the init outlived SIGKILL (unshare: {status})");
        watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(), |f| f["id"] == id.as_str(), |e| {
            e.eq("/status", "resolved");
            e.that(e.mentions("/evidence", "SIGKILL followed"), "the evidence says SIGKILL followed SIGTERM");
        });
        let done = watch.stop(libc::SIGINT);
        assert!(done.status.success(), "podstuck failed: {}", done.stderr);
        assert_told_in_order(&done.finding_lines, &finding["id"]);
    }
}

kernel_test! {
    /// A pod's process that handles SIGTERM and exits is what should
    /// happen: no finding. A namespace init of the same pod, signalled
    /// after it, is the barrier: once its finding is told, the first
    /// process's SIGTERM and exit were seen.
    fn a_process_that_exits_on_sigterm_is_no_finding(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let cgroup = PodCgroup::create(&scratch, &pod);
        let mut watch = watch_pods(&root, &[&pod]);

        let polite = cgroup.run("trap 'exit 0' TERM; while :; do sleep 0.1; done");
        let pid = polite.pid();
        let start = start_of(pid);
        signal(pid, libc::SIGTERM);
        let (status, _) = polite.finish(secs(10));
        assert_eq!(status.code(), Some(0), "the shell's trap should exit 0: {status}");

        let (_unshare, init, _guard) = namespace_init(&cgroup);
        signal(init, libc::SIGTERM);
        let barrier = finding_id("sigterm-ignored", init);
        watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(), |f| f["id"] == barrier.as_str(), |e| {
            e.eq("/confidence", "confirmed");
        });
        let done = watch.stop(libc::SIGINT);
        let wrong: Vec<&Value> = done
            .findings
            .iter()
            .filter(|f| f["kind"] == "sigterm-ignored" && f["details"]["pid"] == pid && f["details"]["start"] == start)
            .collect();
        assert!(wrong.is_empty(), "a process that exited on SIGTERM was told: {wrong:?}");
    }
}

// FUSE -----------------------------------------------------------------------

const FUSECTL: &str = "/sys/fs/fuse/connections";

/// fusectl mounted for the test if it was not (the fix writes there),
/// unmounted on drop.
struct Fusectl(bool);

impl Fusectl {
    fn ensure() -> Fusectl {
        let path = Path::new(FUSECTL);
        if is_mountpoint(path) {
            return Fusectl(false);
        }
        mount(Some("fusectl"), path, Some("fusectl"), MsFlags::empty(), None::<&str>)
            .unwrap_or_else(|e| panic!("mount fusectl on {FUSECTL}: {e}"));
        Fusectl(true)
    }
}

impl Drop for Fusectl {
    fn drop(&mut self) {
        if self.0 {
            let _ = umount2(FUSECTL, MntFlags::MNT_DETACH);
        }
    }
}

kernel_test! {
    /// Issue 40's unkillable case: kubelet's SIGKILL to a pod's process
    /// waiting on a FUSE request its daemon read and never answers. The
    /// kernel waits for that answer uninterruptibly, SIGKILL or not; the
    /// finding names the connection to abort, and its fix, run as printed,
    /// ends the task and the finding.
    fn a_task_waiting_on_an_unanswered_fuse_request_is_unkillable_until_the_connection_is_aborted(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let uid = pod.uid().to_string();
        // Dropped in reverse: the stuck task, the FUSE mount (its abort
        // frees the task), then the cgroup the task was in.
        let cgroup = PodCgroup::create(&scratch, &pod);
        let _fusectl = Fusectl::ensure();
        let fuse = FuseMount::start(&scratch.path().join("fuse"));
        let mut watch = watch_pods(&root, &[&pod]);

        let mountpoint = shell_word(&scratch.path().join("fuse"));
        let stuck = cgroup.run(&format!("cd {mountpoint} && exec stat never"));
        let pid = stuck.pid();
        let start = start_of(pid);
        poll_until_else("stat to wait on the FUSE server", secs(10), || {
            let (comm, wchan) = (std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default(), wchan(pid));
            match comm.trim() == "stat" && wchan.contains("request_wait_answer") {
                true => Ok(()),
                false => Err(format!("comm {comm:?}, state {:?}, wchan {wchan:?}", task_state(pid))),
            }
        });

        signal(pid, libc::SIGKILL);
        wait_until("the killed stat to wait uninterruptibly (D)", secs(10), || task_state(pid) == Some('D'));
        let id = format!("unkillable-task:{pid}@{start}");
        let abort = format!("echo 1 > {FUSECTL}/{}/abort", fuse.connection());
        let finding = watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(), |f| f["id"] == id.as_str(), |e| {
            e.eq("/status", "active");
            e.eq("/severity", "critical");
            e.eq("/confidence", "confirmed");
            e.eq("/pod_uid", uid.as_str());
            e.eq("/details/pid", pid);
            e.starts_with("/summary", &format!("stat (pid {pid}) got SIGKILL"));
            e.contains("/summary", "SIGKILL cannot end it until the request is answered or the connection aborted");
            e.eq("/fix", abort.as_str());
        });
        eprintln!("finding: {finding}");
        assert!(alive(pid), "stat ended before the fix");

        apply_fix(&finding);
        let (status, _) = stuck.finish(secs(10));
        assert_eq!(status.signal(), Some(libc::SIGKILL), "stat should end of its SIGKILL once aborted: {status}");
        watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(), |f| f["id"] == id.as_str(), |e| {
            e.eq("/status", "resolved");
            e.contains("/summary", "outlived its SIGKILL, then ended");
        });
        let done = watch.stop(libc::SIGINT);
        assert!(done.status.success(), "podstuck failed: {}", done.stderr);
        assert_told_in_order(&done.finding_lines, &finding["id"]);
        drop(fuse);
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
            &text(&plugins),
        ]);
        for _ in 0..2 {
            // Variables are passed in order of name: AAA_PAD first, 5 KB.
            let status = runtime
                .runs(&plugins.join("slowfail"))
                .args(["1", "sleep", "5"])
                .env_clear()
                .env("AAA_PAD", "x".repeat(5000))
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
        let cgroup = PodCgroup::create(&scratch, &attacker);
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
             for i in 1 2 3; do {claims} {CNI_DIR}/bridge </dev/null; echo; done; echo forged"
        );
        let forger = cgroup.run(&format!("exec unshare --mount --propagation private sh -c {}", shell_word(Path::new(&inner))));
        let (status, lines) = forger.finish(secs(30));
        assert!(lines.iter().any(|l| l == "forged"), "the forged runs did not all run ({status}): {lines:?}");

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

kernel_test! {
    /// Issue 47's second trial: a pod's process handles SIGTERM (from
    /// outside the pod, as containerd-shim sends it) and drains for 8 s
    /// before exiting 0, well inside kubelet's default grace period of
    /// 30 s. That is a normal shutdown: at most an info line saying it
    /// drains, never a warning, never a kill; resolved when it exits.
    fn a_graceful_drain_within_its_grace_period_is_never_told_to_be_killed(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let cgroup = PodCgroup::create(&scratch, &pod);
        let mut watch = watch_pods(&root, &[&pod]);

        let drain = cgroup.run("trap 'sleep 8; exit 0' TERM; while :; do sleep 0.1; done");
        let pid = drain.pid();
        let id = finding_id("sigterm-ignored", pid);
        signal(pid, libc::SIGTERM);
        let (status, _) = drain.finish(secs(30));
        assert_eq!(status.code(), Some(0), "the drain should end in exit 0: {status}");
        watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(),
            |f| f["id"] == id.as_str() && f["status"] == "resolved",
            |e| e.eq("/fix", ""),
        );
        let done = watch.stop(libc::SIGINT);
        assert!(done.status.success(), "podstuck failed: {}", done.stderr);
        // Every revision told while it drained: an info line, no fix.
        let told: Vec<&Value> = done.finding_lines.iter().filter(|f| f["id"] == id.as_str()).collect();
        let [first, ..] = told[..] else { panic!("nothing told of the drain") };
        let mut e = Expect::new(first);
        e.eq("/status", "active");
        e.eq("/severity", "info");
        e.eq("/fix", "");
        e.contains("/summary", "draining");
        e.contains("/summary", "kubelet's default grace period of 30");
        assert!(e.failures().is_empty(), "{first}\nunmet: {}", e.failures().join("\n       "));
        for line in &told {
            assert_eq!(line["fix"], "", "a drain is never told to be killed: {line}");
            assert!(line["status"] == "resolved" || line["severity"] == "info", "a drain within its grace period is no warning: {line}");
        }
    }
}

kernel_test! {
    /// Issue 47's third trial: a process of two threads, its second thread
    /// waiting on a FUSE request the server read and never answers. After
    /// SIGTERM (its default action ends the whole process) and SIGKILL the
    /// leader has exited, a zombie, and the thread stays in D: the process
    /// and its pod stay. unkillable-task names the thread; the printed
    /// abort ends it, and the finding.
    fn a_process_whose_thread_waits_on_fuse_after_its_leader_died_is_unkillable_and_the_thread_is_named(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let uid = pod.uid().to_string();
        let cgroup = PodCgroup::create(&scratch, &pod);
        let _fusectl = Fusectl::ensure();
        let fuse = FuseMount::start(&scratch.path().join("fuse"));
        let mut watch = watch_pods(&root, &[&pod]);

        let never = scratch.path().join("fuse").join("never");
        let stuck = cgroup.run(&format!("exec {} hold-stat-in-thread {}", shell_word(&actor_binary()), shell_word(&never)));
        let pid = stuck.pid();
        let start = start_of(pid);
        let tid = poll_until_else("a thread of the actor to wait on the FUSE server", secs(10), || {
            let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).map_err(|e| e.to_string())?;
            let threads: Vec<u32> = tasks.flatten().filter_map(|t| t.file_name().to_str()?.parse().ok()).collect();
            threads
                .iter()
                .copied()
                .find(|tid| *tid != pid && std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/wchan")).unwrap_or_default().contains("request_wait_answer"))
                .ok_or_else(|| format!("threads {threads:?}"))
        });

        signal(pid, libc::SIGTERM);
        wait_until("the leader to exit, a zombie, its thread left", secs(10), || task_state(pid) == Some('Z'));
        signal(pid, libc::SIGKILL);
        let id = format!("unkillable-task:{pid}@{start}");
        let abort = format!("echo 1 > {FUSECTL}/{}/abort", fuse.connection());
        let finding = watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(), |f| f["id"] == id.as_str(), |e| {
            e.eq("/status", "active");
            e.eq("/severity", "critical");
            e.eq("/confidence", "confirmed");
            e.eq("/pod_uid", uid.as_str());
            e.eq("/details/pid", pid);
            e.eq("/details/start", start);
            e.eq("/details/tid", tid);
            e.contains("/summary", &format!("its thread {tid}"));
            e.contains("/summary", "its leader has exited (a zombie)");
            e.that(e.mentions("/evidence", "request_wait_answer"), "the evidence quotes where the thread waits");
            e.eq("/fix", abort.as_str());
        });
        eprintln!("finding: {finding}");

        apply_fix(&finding);
        let (status, _) = stuck.finish(secs(10));
        assert!(status.signal().is_some(), "the actor should end of its signal once aborted: {status}");
        watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(), |f| f["id"] == id.as_str(), |e| {
            e.eq("/status", "resolved");
        });
        let done = watch.stop(libc::SIGINT);
        assert!(done.status.success(), "podstuck failed: {}", done.stderr);
        drop(fuse);
    }
}

// Nothing at all ----------------------------------------------------------------

kernel_test! {
    /// `watch --pod UID` for 30 s on a pod nothing on this node touches:
    /// the run ends with no-teardown-seen, pointing to `podstuck explain`
    /// (the API's view), a warning, so the run still exits 0.
    fn a_pod_nothing_works_on_is_no_teardown_seen_pointing_to_explain(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let uid = pod.uid().to_string();
        std::fs::create_dir_all(pod.dir()).unwrap();
        let watch = Watch::start(&["--findings", "--kubelet-root", root.arg(), "--pod", &uid, "--duration", "30s"]);
        let done = watch.finish(secs(120));
        assert!(done.status.success(), "a run ending with a warning exits 0: {} {}", done.status, done.stderr);
        assert!(done.end.is_some(), "no end line: {}", done.stderr);
        let told: Vec<&Value> = done.findings.iter().filter(|f| f["kind"] == "no-teardown-seen").collect();
        let [finding] = told[..] else { panic!("one no-teardown-seen finding, not {told:?}") };
        let mut e = Expect::new(finding);
        e.shape_of_no_call();
        e.eq("/status", "active");
        e.eq("/severity", "warning");
        e.eq("/pod_uid", uid.as_str());
        e.starts_with("/summary", &format!("Nothing on this node is working on pod {uid}'s teardown"));
        e.eq("/fix", format!("podstuck explain {uid}"));
        assert!(e.failures().is_empty(), "{finding}\nunmet: {}", e.failures().join("\n       "));
    }
}
