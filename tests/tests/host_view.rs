//! podstuck in a container on the node, shaped like a `kubectl debug node`
//! pod: its own mount namespace (private propagation) whose root is a new
//! tmpfs with the node's `/` rbound at `/host`, so it holds a private copy
//! of every mount of the node, pod volumes included. podstuck must enter
//! the node's mount namespace, report with the node's paths and fixes that
//! act there (`nsenter -t 1 -m --`), never name its own container's copy
//! or processes as holders, and still name a holder in another namespace.
//!
//! This machine's PID 1 keeps its namespaces from root, so the node's
//! namespaces are the test's own: podstuck is told with `--node-pid`.
//!
//! Runs as root; see `kernel_test!` for the skip rule.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use podstuck_tests::mountinfo::is_mountpoint;
use podstuck_tests::node::{BusyPodCgroup, TmpfsMount};
use podstuck_tests::*;

/// What makes a container's mount namespace shaped after the node, as a
/// `kubectl debug node` pod's or a DaemonSet's is: its root a new tmpfs
/// at `$CONTAINER_ROOT`, the node's `/` rbound at `/host`, and /usr,
/// /proc, /dev and /sys of its own. What each container adds follows.
const CONTAINER_OF_THE_NODE: &str = r#"set -e
new="$CONTAINER_ROOT"
mount -t tmpfs container-root "$new"
mkdir "$new/usr" "$new/host" "$new/proc" "$new/dev" "$new/sys" "$new/tmp"
mount --rbind /usr "$new/usr"
for d in bin lib lib64 sbin; do ln -s "usr/$d" "$new/$d"; done
mount --rbind / "$new/host"
mount -t proc proc "$new/proc"
mount --rbind /dev "$new/dev"
mount --rbind /sys "$new/sys"
"#;

/// A `kubectl debug node` pod: its copy of the node private, and the
/// command it is given last run in it, chrooted; before that it starts
/// another process of the same namespace (a `sleep`, the debug pod's
/// shell) whose cwd is `$HOLD` in its private copy, and writes its pid to
/// `$HOLD_PID`.
const DEBUG_POD: &str = r#"mount --make-rprivate "$new/host"
(cd "$HOLD" && exec sleep 600) </dev/null >/dev/null 2>&1 &
echo $! > "$HOLD_PID"
program="$1"; shift
exec chroot "$new" "/host$program" "$@"
"#;

/// The command line that runs a command given after it in a container of
/// the node rooted at `root` (see [`CONTAINER_OF_THE_NODE`]), made
/// particular by `script`, with `env` (`NAME=value`) set.
fn in_a_container(root: &Path, env: &[String], script: &str) -> Vec<std::ffi::OsString> {
    std::fs::create_dir_all(root).unwrap();
    let mut line: Vec<std::ffi::OsString> = vec!["env".into(), format!("CONTAINER_ROOT={}", root.display()).into()];
    line.extend(env.iter().map(Into::into));
    line.extend(["unshare", "-m", "--propagation", "private", "sh", "-c"].map(Into::into));
    line.push(format!("{CONTAINER_OF_THE_NODE}{script}").into());
    line.push("sh".into());
    line
}

/// A process killed and reaped on drop.
struct Killed(Child);

impl Drop for Killed {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A pid from a file, killed on drop (the debug pod's other process).
struct KilledPid(i32);

impl Drop for KilledPid {
    fn drop(&mut self) {
        // SAFETY: kill(2) on a pid this test started.
        unsafe { libc::kill(self.0, libc::SIGKILL) };
    }
}

/// Waits until a line is written whole to `path`; returns it.
fn wait_for_file(path: &Path) -> String {
    poll_until(&format!("a line in {}", path.display()), Duration::from_secs(10), || {
        std::fs::read_to_string(path).ok().filter(|text| text.ends_with('\n')).map(|text| text.trim().to_string())
    })
}

/// Waits until `pid`'s cwd is `dir` (as /proc shows a cwd in another
/// mount namespace: its path there, ending the same).
fn wait_for_cwd(pid: u32, dir: &Path) {
    wait_until(&format!("pid {pid} to settle in {}", dir.display()), Duration::from_secs(10), || {
        std::fs::read_link(format!("/proc/{pid}/cwd")).is_ok_and(|cwd| cwd.ends_with(dir.strip_prefix("/").unwrap()))
    });
}

kernel_test! {
    fn in_a_debug_pod_p1_says_the_nodes_paths_and_never_names_its_own_copy(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let uid = pod.uid();
        let pv = pod.create_csi_volume("pvc-debug");
        let mount = pv.join("mount");
        let _volume = TmpfsMount::new(&mount, "size=1m");

        // Another container's namespace, not podstuck's, with a private copy and its cwd in it.
        let other = Killed(
            Command::new("unshare")
                .args(["-m", "--propagation", "private", "sh", "-c", "cd \"$0\" && exec sleep 600"])
                .arg(&mount)
                .stdin(Stdio::null())
                .spawn()
                .expect("run unshare"),
        );
        let other_pid = other.0.id();
        wait_for_cwd(other_pid, &mount);

        let hold_pid_file = scratch.path().join("debug-shell.pid");
        let node_pid = std::process::id().to_string();
        let hold = [format!("HOLD={}", mount.display()), format!("HOLD_PID={}", hold_pid_file.display())];
        let wrapper = in_a_container(&scratch.path().join("debug-root"), &hold, DEBUG_POD);
        let mut watch = Watch::start_wrapped(&wrapper, &["--findings", "--kubelet-root", root.arg(), "--pod", uid, "--node-pid", &node_pid]);
        let own_pid: i32 = wait_for_file(&hold_pid_file).parse().unwrap();
        let _own = KilledPid(own_pid);
        let own_ns = std::fs::read_link(format!("/proc/{own_pid}/ns/mnt")).unwrap();
        assert_ne!(own_ns, std::fs::read_link("/proc/self/ns/mnt").unwrap(), "the debug pod has its own mount namespace");
        assert_eq!(std::fs::read_link(format!("/proc/{}/ns/mnt", watch.pid())).unwrap(), std::fs::read_link("/proc/self/ns/mnt").unwrap(), "podstuck entered the node's");
        wait_for_cwd(own_pid as u32, &mount);

        let kubelet = start_actor(["--comm", "kubelet", "--backoff-ms", "500", "--repeat", "0", "rmdir-at"].map(std::ffi::OsString::from).into_iter().chain([pv.clone().into_os_string(), "mount".into()]));
        let finding = watch.await_finding(
            Duration::from_secs(60),
            |f| f["kind"] == "volume-still-mounted",
            |e| {
                e.eq("/pod_uid", uid);
                e.eq("/paths/0", text(&mount));
                e.eq("/confidence", "confirmed");
                e.eq("/fix", format!("nsenter -t 1 -m -- umount -- {}", shell_word(&mount)));
                e.that(e.mentions_number("/evidence", other_pid.into()), format!("evidence should name the other namespace's holder, pid {other_pid}"));
            },
        );
        let evidence = finding["evidence"].to_string();
        assert!(!evidence.contains(&format!("pid {own_pid} ")), "podstuck's own container is named as a holder: {evidence}");
        assert!(!evidence.contains("/host/"), "paths are the node's: {evidence}");
        assert!(finding["advice"].to_string().contains("podstuck runs in a container"), "{finding}");
        drop(kubelet);
        let done = watch.stop(libc::SIGINT);
        assert!(done.status.success(), "podstuck failed: {}", done.stderr);
        assert!(is_mountpoint(&mount), "podstuck changed nothing");
    }
}

kernel_test! {
    fn without_the_hosts_pid_namespace_podstuck_refuses_in_one_sentence(test) {
        let _ = test;
        let out = Command::new("unshare")
            .args(["-p", "-f", "--mount-proc"])
            .arg(podstuck_binary())
            .args(["watch", "--duration", "1s"])
            .output()
            .expect("run unshare");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("without the host's PID namespace") && stderr.contains("hostPID: true"), "{stderr}");
        assert_eq!(stderr.lines().count(), 1, "{stderr}");
    }
}

kernel_test! {
    fn a_host_root_that_is_no_root_is_refused_before_tracing(test) {
        let scratch = test.scratch();
        let out = Command::new(podstuck_binary()).args(["watch", "--host-root"]).arg(scratch.path()).output().expect("run podstuck");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("--host-root") && stderr.contains("not the node's root"), "{stderr}");
    }
}

/// A container that reads the node through `--host-root`, as a DaemonSet
/// without CAP_SYS_ADMIN does: a cgroupfs of its own at /sys/fs/cgroup,
/// here an empty tmpfs (a container's cgroup namespace shows its own
/// cgroup alone, none of the pods'). The command it is given last runs
/// chrooted there without CAP_SYS_ADMIN, so entering the node's mount
/// namespace is refused.
const HOST_ROOT_CONTAINER: &str = r#"mount -t tmpfs container-cgroups "$new/sys/fs/cgroup"
program="$1"; shift
exec chroot "$new" setpriv --bounding-set -sys_admin --inh-caps -sys_admin "/host$program" "$@"
"#;

/// CAP_SYS_ADMIN, as numbered in /proc/PID/status's capability masks.
const CAP_SYS_ADMIN: u32 = 21;

/// Whether process `pid` holds the capability numbered `cap` now.
fn has_capability(pid: i32, cap: u32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let effective = status.lines().find_map(|l| l.strip_prefix("CapEff:")).expect("a CapEff line");
    u64::from_str_radix(effective.trim(), 16).unwrap() & (1 << cap) != 0
}

kernel_test! {
    /// Issue 38: read through `--host-root`, a pod cgroup kubelet cannot
    /// remove is read in the node's cgroupfs, under the root, and its live
    /// task named; podstuck's own /sys/fs/cgroup has none of it.
    fn through_a_host_root_a_busy_pod_cgroup_is_read_in_the_nodes_cgroupfs(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let busy = BusyPodCgroup::create(scratch.path());
        let (uid, cgroup) = (busy.uid.as_str(), &busy.path);

        let node_pid = std::process::id().to_string();
        let wrapper = in_a_container(&scratch.path().join("container-root"), &[], HOST_ROOT_CONTAINER);
        let mut watch = Watch::start_wrapped(
            &wrapper,
            &["--findings", "--hung-after", "2s", "--kubelet-root", root.arg(), "--pod", uid, "--host-root", "/host", "--node-pid", &node_pid],
        );
        // The shape is the one asked for: another mount namespace, no
        // CAP_SYS_ADMIN to leave it, and no pod cgroup in its own cgroupfs.
        let pid = watch.pid();
        assert_ne!(std::fs::read_link(format!("/proc/{pid}/ns/mnt")).unwrap(), std::fs::read_link("/proc/self/ns/mnt").unwrap(), "podstuck stays in its container's mount namespace");
        assert!(!has_capability(pid, CAP_SYS_ADMIN), "podstuck runs without CAP_SYS_ADMIN");
        let own_view = Path::new(&format!("/proc/{pid}/root")).join(cgroup.strip_prefix("/").unwrap());
        assert!(!own_view.exists(), "{} is in podstuck's own cgroupfs", cgroup.display());

        let kubelet = busy.kubelet_removing();
        let pause = busy.task.pid();
        let finding = watch.await_finding(
            Duration::from_secs(60),
            |f| f["kind"] == "cgroup-busy",
            |e| {
                e.eq("/pod_uid", uid);
                e.eq("/paths/0", text(cgroup));
                e.eq("/confidence", "confirmed");
                e.that(e.mentions_number("/evidence", pause.into()), format!("evidence should name the live task, pid {pause}"));
                e.contains("/fix", &format!("echo 1 > {}", shell_word(&cgroup.join("cgroup.kill"))));
            },
        );
        let evidence = finding["evidence"].to_string();
        assert!(!evidence.contains("/host/"), "paths are the node's: {evidence}");
        drop(kubelet);
        let done = watch.stop(libc::SIGINT);
        assert!(done.status.success(), "podstuck failed: {}", done.stderr);
    }
}
