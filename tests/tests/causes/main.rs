//! End-to-end diagnosis, one module per cause: every cause podstuck's
//! detectors tell (the table of podstuck-user/src/diagnose/causes.rs, the
//! catalogue of docs/pathologies.md) made real on this machine, in the
//! module named by its id (`mount-held` in `mount_held.rs`), and what
//! `podstuck watch --findings` concludes about it: the kind, the key path,
//! the actor, the evidence and the exact fix. A cause told by another's
//! detector is tested with that detector (`permission-denied` in
//! `immutable_file`, `read-only-fs` in `disk_full`), and a near miss with
//! the cause it must not be called; `no_cause` is a busy background of
//! normal deletions that must be no finding at all. The causes the
//! Kubernetes API tells are tests/tests/explain.rs's. tests/tests/docs.rs
//! holds this layout to the table.
//!
//! Failed calls (P1-P10, P16) are made real with real mounts, `chattr +i`,
//! cgroups, a stopped FUSE daemon, a full filesystem, a loop device, driven
//! by the `actor` stand-in for kubelet, containerd or dockerd. The process
//! lifecycle podstuck traces beside the calls (P12-P15) is made real too:
//! Debian's own CNI plugins run as containerd runs them, a PID-namespace
//! init made by unshare, a FUSE request read and never answered, a pod
//! nobody works on. A lifecycle finding is about no call: its `syscall` is
//! null and it may name no path, so those tests wait for it with
//! `Watch::await_finding_shaped` and `Expect::shape_of_no_call`.
//!
//! Every test of P1-P10 also checks the fixture itself (the errno each
//! attempt of the actor printed), so a wrong finding is never blamed on a
//! wrong fixture. `PODSTUCK_FIXTURES_ONLY=1` runs just that half, without
//! podstuck: the way to check the fixtures on a new kernel or machine.
//! podstuck's half not run is a missing part like any other (see
//! `prerequisite`): each test fails saying so, unless
//! `PODSTUCK_ALLOW_SKIPS=1`, and then counts as a skip, named in `cargo
//! xtask test`'s closing lines; a run with it never passes as a whole run
//! of the diagnosis.
//!
//! Runs as root; see `kernel_test!` for the skip rule. Scenarios are
//! isolated by path, pod UID, container id, netns and cgroup, so they may
//! run in parallel (as `cargo xtask test` runs them); each podstuck runs
//! node-wide or for its own pods and picks only findings about its own
//! scratch directory or pods. The one exception: a task stuck on FUSE in
//! the host's mount namespace reaches every such connection, so those
//! tests hold [`one_stuck_fuse_connection`].

use std::path::Path;
use std::time::Duration;

use nix::mount::{mount, umount2, MntFlags, MsFlags};
use podstuck_tests::findings::assert_told_in_order;
use podstuck_tests::*;
use serde_json::Value;

/// Arguments of mixed kinds (text, paths) for a helper process.
macro_rules! os {
    ($($arg:expr),* $(,)?) => {
        vec![$(AsRef::<std::ffi::OsStr>::as_ref(&$arg).to_os_string()),*]
    };
}

mod block_volume_held;
mod cgroup_busy;
mod csi_plugin_gone;
mod dir_not_empty;
mod disk_full;
mod hung_call;
mod immutable_file;
mod mount_held;
mod no_cause;
mod no_teardown_seen;
mod not_mounted;
mod prestop_hook_running;
mod removal_storm;
mod sandbox_teardown_failing;
mod sigterm_ignored;
mod subpath_left;
mod unkillable_task;
mod volume_device_lost;
mod volume_still_mounted;

/// How long podstuck may take to reach a finding once its cause is there:
/// generous, because a finding may need several attempts on kubelet's
/// doubling backoff, its reviews are a second apart, and the machine may
/// be loaded.
const FINDING_TIMEOUT: Duration = Duration::from_secs(60);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

// Failed calls ---------------------------------------------------------------

fn fixtures_only() -> bool {
    std::env::var("PODSTUCK_FIXTURES_ONLY").is_ok_and(|v| v == "1")
}

/// `podstuck watch --json --findings --hung-after 2s --kubelet-root ROOT EXTRA...`,
/// or nothing when only the fixtures are checked: podstuck's half of the
/// test is then a skip (a failure unless skips are allowed).
fn podstuck(root: &KubeletRoot, extra: &[&str]) -> Option<Watch> {
    if fixtures_only() {
        return missing(
            &prerequisite::this_test(),
            "podstuck's half of the test: PODSTUCK_FIXTURES_ONLY=1 checks the fixtures alone",
            "unset PODSTUCK_FIXTURES_ONLY to run podstuck too (to check the fixtures alone, set PODSTUCK_ALLOW_SKIPS=1 with it)",
        );
    }
    let mut args = vec!["--findings", "--hung-after", "2s", "--kubelet-root", root.arg()];
    args.extend_from_slice(extra);
    Some(Watch::start(&args))
}

/// Stops podstuck and checks what holds for every finding test: findings
/// only (no call events), and the finding was first emitted as "finding"
/// (revision 1), then only revised as "finding-update".
fn stop(watch: Watch, finding: &Value) -> Finished {
    eprintln!("finding: {finding}");
    let done = watch.stop(libc::SIGINT);
    assert!(done.status.success(), "podstuck failed: {}", done.stderr);
    assert!(done.events.is_empty(), "--findings printed call events: {:?}", &done.events[..done.events.len().min(3)]);
    assert_told_in_order(&done.finding_lines, &finding["id"]);
    done
}

/// Retries `call` (an errno-returning syscall) until it succeeds, for up to
/// 5 s: what the stuck actor's next attempt would get once the fix is in.
fn succeeds_soon(call: impl Fn() -> i32) -> i32 {
    let mut errno = 0;
    within(secs(5), || {
        errno = call();
        (errno == 0).then_some(())
    });
    errno
}

/// kubelet's volume backoff (0.5 s, doubling) removing `name` in `dir`,
/// once its first `tries` were refused with `errno`; and the line each
/// refusal prints.
fn kubelet_refused(dir: &Path, name: &str, errno: i32, tries: usize) -> (Process, String) {
    let kubelet = start_actor(os!["--comm", "kubelet", "--backoff-ms", "500", "--repeat", "0", "rmdir-at", dir, name]);
    let refused = format!("rmdir-at errno {errno}");
    all_say(&kubelet.wait_for_lines(tries, secs(10)), &refused);
    (kubelet, refused)
}

/// Asserts that every attempt printed `want` (and there was one).
fn all_say(lines: &[String], want: &str) {
    assert!(
        !lines.is_empty() && lines.iter().all(|l| l == want),
        "want every attempt to print {want:?}, got {lines:?}"
    );
}

/// A container or layer id: 64 hex digits, unique to this run.
fn hex64() -> String {
    let uid = new_pod_uid().replace('-', "");
    format!("{uid}{:032x}", std::process::id())
}

// The process lifecycle ------------------------------------------------------

/// `podstuck watch --json --findings --kubelet-root ROOT --pod UID...`.
fn watch_pods(root: &KubeletRoot, pods: &[&Pod]) -> Watch {
    let mut args = vec!["--findings", "--kubelet-root", root.arg()];
    for pod in pods {
        std::fs::create_dir_all(pod.dir()).expect("create the pod's directory");
        args.extend(["--pod", pod.uid()]);
    }
    Watch::start(&args)
}

fn signal(pid: u32, sig: i32) {
    // SAFETY: plain kill(2) of a process this test made.
    assert_eq!(unsafe { libc::kill(pid as i32, sig) }, 0, "kill -{sig} {pid}");
}

/// When process `pid` started (`/proc/<pid>/stat`'s 22nd field, read
/// past its name): with its pid, the one process a finding is about.
fn start_of(pid: u32) -> u64 {
    findings::start_of(pid).unwrap_or_else(|| panic!("/proc/{pid}/stat: no start (gone?)"))
}

// FUSE -----------------------------------------------------------------------

/// Holds the machine to one stuck FUSE connection at a time, for the
/// tests whose stuck task lives in the host's mount namespace (hung_call's,
/// unkillable_task's, and sigterm_ignored's near misses on FUSE): podstuck
/// names the connection a task waits on only where the kernel counts
/// requests waiting on it and on no other connection the task can reach,
/// and two tests' stuck connections at once would both be in its reach
/// (a pod's task, in its own namespace, reaches its own mounts only). One
/// test binary holds them all, so one lock in it is enough.
fn one_stuck_fuse_connection() -> std::sync::MutexGuard<'static, ()> {
    static ONE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    ONE.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

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

/// A pod and a FUSE server on the node that reads requests and never
/// answers, the one such connection (a test at a time): where a task of
/// the pod gets stuck. Dropped in order: the FUSE mount (its abort frees
/// a stuck task), then the pod's cgroup the task was in, the scratch dir.
struct StuckFuseLab {
    fuse: FuseMount,
    _fusectl: Fusectl,
    cgroup: PodCgroup,
    pod: Pod,
    root: KubeletRoot,
    scratch: ScratchDir,
    _alone: std::sync::MutexGuard<'static, ()>,
}

impl StuckFuseLab {
    fn new(test: &KernelTest) -> StuckFuseLab {
        let alone = one_stuck_fuse_connection();
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let cgroup = PodCgroup::create(scratch.path(), pod.uid());
        let fusectl = Fusectl::ensure();
        let fuse = FuseMount::start(&scratch.path().join("fuse"));
        StuckFuseLab { fuse, _fusectl: fusectl, cgroup, pod, root, scratch, _alone: alone }
    }

    fn fuse_dir(&self) -> std::path::PathBuf {
        self.scratch.path().join("fuse")
    }

    /// `actor hold-stat-in-thread` in the pod's cgroup: a process of two
    /// threads (as every Go or Java program is), its second thread
    /// waiting on a lookup of `never` in the FUSE mount, which the server
    /// reads and never answers. The process and that thread's id.
    fn thread_waiting_on_fuse(&self) -> (Process, u32) {
        let never = self.fuse_dir().join("never");
        let process = self.cgroup.run(&format!(
            "exec {} hold-stat-in-thread {}",
            shell_word(&actor_binary()),
            shell_word(&never)
        ));
        let pid = process.pid();
        let tid = poll_until_else("a thread of the actor to wait on the FUSE server", secs(10), || {
            let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).map_err(|e| e.to_string())?;
            let threads: Vec<u32> = tasks.flatten().filter_map(|t| t.file_name().to_str()?.parse().ok()).collect();
            threads
                .iter()
                .copied()
                .find(|tid| {
                    *tid != pid
                        && std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/wchan"))
                            .unwrap_or_default()
                            .contains("request_wait_answer")
                })
                .ok_or_else(|| format!("threads {threads:?}"))
        });
        // Until the server has read the request, a kill takes it back.
        self.fuse.wait_held(1, secs(10));
        (process, tid)
    }
}
