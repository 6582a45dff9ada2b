//! End-to-end diagnosis: each pathology of the catalogue (docs/pathologies.md,
//! P1-P10) made real on this machine (real mounts, `chattr +i`, cgroups, a
//! stopped FUSE daemon, a full filesystem), driven by the `actor` stand-in
//! for kubelet, containerd or dockerd, and what `podstuck watch --findings`
//! concludes about it: the kind, the key path, the actor, the evidence and
//! the exact fix. Plus the near-miss that must not be called immutable, and
//! a busy background of normal deletions that must yield no finding.
//!
//! Every test also checks the fixture itself (the errno each attempt of the
//! actor printed), so a wrong finding is never blamed on a wrong fixture.
//! `PODSTUCK_FIXTURES_ONLY=1` runs just that half, without podstuck: the
//! way to check the fixtures on a new kernel or machine. podstuck's half
//! not run is a missing part like any other (see `prerequisite`): each
//! test fails saying so, unless `PODSTUCK_ALLOW_SKIPS=1`, and then counts
//! as a skip, named in `cargo xtask test`'s closing lines; a run with it
//! never passes as a whole run of the diagnosis.
//!
//! Runs as root; see `kernel_test!` for the skip rule. Scenarios
//! are isolated by path, pod UID and cgroup, so they may run in parallel
//! (as `cargo xtask test` runs them); each podstuck runs node-wide or for
//! its own pod and picks only findings about its own scratch directory.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use podstuck_tests::findings::{apply_fix, assert_told_in_order};
use podstuck_tests::node::{fill_inodes, make_shared, rmdir_busy, BusyPodCgroup};
use podstuck_tests::*;
use serde_json::Value;

/// How long podstuck may take to reach a finding: generous, because a
/// finding may need several attempts on kubelet's doubling backoff.
const FINDING_TIMEOUT: Duration = Duration::from_secs(60);

/// Enough directories that removing them is a storm, not a blip.
const STORM_DIRS: usize = 200_000;

/// How fast dockerd's RemoveAll of empty directories goes on this
/// machine's ext4 root: 200k directories (400k calls) in 25 s, with
/// `discard` sometimes 80 s. The scenario keeps the tree on tmpfs (made in
/// a second, gone at unmount) and paces the removal to the disk's rate; on
/// tmpfs unpaced it would be over in 3 s, sooner than a storm is a storm.
const STORM_CALLS_PER_S: u32 = 16_000;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Arguments of mixed kinds (text, paths) for a helper process.
macro_rules! os {
    ($($arg:expr),* $(,)?) => {
        vec![$(AsRef::<OsStr>::as_ref(&$arg).to_os_string()),*]
    };
}

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

/// Repeated runs of the same actor with a pause between them (containerd
/// retries an unmount in bursts, then the whole teardown later), until
/// stopped; in fixture-only mode a single run.
struct Bursts {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<Vec<String>>>,
}

impl Bursts {
    fn start(args: Vec<OsString>, gap: Duration) -> Bursts {
        let stop = Arc::new(AtomicBool::new(false));
        let flag = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut all = Vec::new();
            loop {
                let (_, lines) = start_actor(args.clone()).finish(secs(60));
                all.extend(lines);
                if flag.load(Ordering::SeqCst) || fixtures_only() {
                    return all;
                }
                // The runtime's rhythm: its next burst comes `gap` later.
                std::thread::sleep(gap);
            }
        });
        Bursts { stop, thread: Some(thread) }
    }

    /// Lets the running burst end; returns every line of every burst.
    fn finish(mut self) -> Vec<String> {
        self.stop.store(true, Ordering::SeqCst);
        self.thread.take().unwrap().join().expect("burst thread")
    }
}

impl Drop for Bursts {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

// P1 --------------------------------------------------------------------

kernel_test! {
    fn p1_a_volume_left_mounted_is_named_with_its_umount(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let uid = pod.uid();
        let pv = pod.create_csi_volume("pvc-p1");
        let mount = pv.join("mount");
        // The CSI driver said NodeUnpublish worked and left this mounted.
        let _volume = TmpfsMount::new(&mount, "size=1m");
        let mut watch = podstuck(&root, &["--pod", uid]);

        let kubelet = start_actor(os!["--comm", "kubelet", "--backoff-ms", "500", "--repeat", "0", "rmdir-at", pv, "mount"]);
        let ebusy = format!("rmdir-at errno {}", libc::EBUSY);
        all_say(&kubelet.wait_for_lines(3, secs(10)), &ebusy);

        if let Some(mut watch) = watch.take() {
            let finding = watch.await_finding(
                FINDING_TIMEOUT,
                |f| f["kind"] == "volume-still-mounted",
                |e| {
                    e.eq("/pod_uid", uid);
                    e.eq("/actor/comm", "kubelet");
                    e.eq("/actor/pid", kubelet.pid());
                    e.eq("/errno", "EBUSY");
                    e.eq("/status", "active");
                    e.eq("/paths/0", text(&mount));
                    e.eq("/fix", format!("umount -- {}", shell_word(&mount)));
                    e.eq("/confidence", "confirmed");
                    let rhythm = e.text("/rhythm");
                    e.that(rhythm.contains("backoff"), format!("/rhythm ({rhythm}) should name kubelet's backoff"));
                },
            );
            all_say(&kubelet.lines(), &ebusy);
            assert!(is_mountpoint(&mount), "the fixture must still be mounted");
            apply_fix(&finding);
            assert!(!is_mountpoint(&mount), "the fix should unmount {}", mount.display());
            stop(watch, &finding);
            return;
        }
        all_say(&kubelet.lines(), &ebusy);
        assert!(is_mountpoint(&mount), "the fixture must still be mounted");
    }
}

// P2 --------------------------------------------------------------------

kernel_test! {
    fn p2_a_long_removal_is_a_storm_with_an_estimate(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let docker = scratch.path().join("docker");
        let _disk = TmpfsMount::new(&docker, "size=64m,nr_inodes=1m");
        let volume = docker.join("volumes/build-cache");
        let data = volume.join("_data");
        std::fs::create_dir_all(&data).unwrap();
        // mkdir is not traced: podstuck may start first, and fail fast.
        let mut watch = podstuck(&root, &[]);
        let made_at = Instant::now();
        let (status, lines) = start_actor(os!["mkdirs", data, STORM_DIRS.to_string()]).finish(secs(120));
        assert!(status.success());
        assert_eq!(lines, [format!("mkdirs {STORM_DIRS} made")]);
        eprintln!("p2: {STORM_DIRS} directories made in {:.1?}", made_at.elapsed());

        let started = Instant::now();
        let dockerd = start_actor(os!["--comm", "dockerd", "--calls-per-s", STORM_CALLS_PER_S.to_string(), "remove-all", volume]);
        if let Some(mut watch) = watch.take() {
            let under_scratch = |f: &Value| f["paths"][0].as_str().is_some_and(|p| p.starts_with(text(scratch.path())));
            let finding = watch.await_finding(
                FINDING_TIMEOUT,
                |f| f["kind"] == "removal-storm" && under_scratch(f),
                |e| {
                    // The tree being removed, or a directory above it that is
                    // still the test's own.
                    let key = PathBuf::from(e.text("/paths/0"));
                    e.that(
                        key == data || (volume.starts_with(&key) && key.starts_with(scratch.path()) && key != scratch.path()),
                        format!("/paths/0 ({}) should be {} or a directory above it in the test's tree", key.display(), volume.display()),
                    );
                    e.eq("/actor/comm", "dockerd");
                    e.eq("/actor/pid", dockerd.pid());
                    e.eq("/pod_uid", Value::Null);
                    // Caught while it lasts, with an estimate worth reading.
                    e.eq("/status", "active");
                    e.that(e.at("/details/calls").as_u64().is_some_and(|c| c > 0), "/details/calls > 0");
                    e.that(e.at("/details/rate_per_s").as_f64().is_some_and(|r| r > 0.0), "/details/rate_per_s > 0");
                    e.that(e.at("/details/remaining").as_u64().is_some_and(|r| r > 0), "/details/remaining > 0 while it lasts");
                    e.that(e.at("/details/eta_s").as_f64().is_some_and(|s| s > 0.0), "/details/eta_s > 0 while it lasts");
                    e.contains("/fix", "kubectl drain");
                },
            );
            eprintln!("p2: finding {:.1?} into the removal: {}", started.elapsed(), finding["details"]);
            stop(watch, &finding);
            // The rest goes with the tmpfs.
            drop(dockerd);
            return;
        }
        let (_, lines) = dockerd.finish(secs(120));
        eprintln!("p2: removal of {STORM_DIRS} directories took {:.1?}", started.elapsed());
        assert_eq!(lines, ["remove-all done"]);
        assert!(!volume.exists());
    }
}

// P3 --------------------------------------------------------------------

kernel_test! {
    fn p3_an_immutable_file_in_an_image_layer_is_named_with_chattr(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let layer = scratch.path().join("docker/overlay2").join(hex64());
        let etc = layer.join("diff/etc");
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::create_dir_all(layer.join("work/work")).unwrap();
        std::fs::write(etc.join("hosts"), "127.0.0.1 localhost\n").unwrap();
        let file = etc.join("resolv.conf");
        std::fs::write(&file, "nameserver 10.96.0.10\n").unwrap();
        let _immutable = Immutable::set(&file);
        let mut watch = podstuck(&root, &[]);

        // dockerd removing the layer with os.RemoveAll, retried.
        let dockerd = start_actor(os!["--comm", "dockerd", "--every-ms", "1000", "--repeat", "0", "remove-all", layer]);
        let layer_name = layer.file_name().unwrap().to_str().unwrap();
        let eperm = format!("remove-all left: errno {} at {layer_name}/diff/etc/resolv.conf", libc::EPERM);
        all_say(&dockerd.wait_for_lines(2, secs(10)), &eperm);

        if let Some(mut watch) = watch.take() {
            let finding = watch.await_finding(
                FINDING_TIMEOUT,
                |f| f["kind"] == "immutable-file" && f["paths"][0].as_str().is_some_and(|p| p.starts_with(text(scratch.path()))),
                |e| {
                    e.eq("/paths/0", text(&file));
                    e.eq("/fix", format!("chattr -i -- {}", shell_word(&file)));
                    e.eq("/errno", "EPERM");
                    e.eq("/actor/comm", "dockerd");
                },
            );
            all_say(&dockerd.lines(), &eperm);
            assert!(file.exists());
            // "then let kubelet retry": dockerd's next attempt goes through.
            apply_fix(&finding);
            assert!(dockerd.wait_for_line("remove-all done", secs(5)), "after the fix: {:?}", dockerd.lines());
            stop(watch, &finding);
            return;
        }
        all_say(&dockerd.lines(), &eperm);
        assert!(file.exists());
    }
}

kernel_test! {
    fn p3_near_miss_a_sticky_directory_is_not_called_immutable(test) {
        // Same EPERM, same place, no flag: /tmp's sticky bit keeps uid 1002
        // from removing uid 1001's file. Telling the user to chattr would be wrong.
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let tmp = scratch.path().join("docker/overlay2").join(hex64()).join("diff/tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
        let file = tmp.join("build.lock");
        std::fs::write(&file, "").unwrap();
        std::os::unix::fs::chown(&file, Some(1001), Some(1001)).unwrap();
        let mut watch = podstuck(&root, &[]);

        let cleanup = start_actor(os!["--comm", "cleanup", "--as-uid", "1002", "--every-ms", "1000", "--repeat", "0", "unlink", file]);
        let eperm = format!("unlink errno {}", libc::EPERM);
        all_say(&cleanup.wait_for_lines(2, secs(10)), &eperm);

        if let Some(mut watch) = watch.take() {
            let about_file = |f: &Value| f.to_string().contains(text(&file));
            let finding = watch.await_finding(
                FINDING_TIMEOUT,
                |f| f["kind"] == "permission-denied" && about_file(f),
                |e| {
                    e.that(
                        e.mentions("/summary", "sticky") || e.mentions("/evidence", "sticky"),
                        "summary or evidence should say the sticky bit refused it",
                    );
                    e.eq("/errno", "EPERM");
                },
            );
            let done = stop(watch, &finding);
            let immutable: Vec<&Value> = done.findings.iter().filter(|f| f["kind"] == "immutable-file" && about_file(f)).collect();
            assert!(immutable.is_empty(), "a file without the i flag called immutable: {immutable:?}");
        }
        all_say(&cleanup.lines(), &eperm);
    }
}

// P4 --------------------------------------------------------------------

/// A container rootfs as containerd mounts it, under a `run` directory
/// made a shared mount of its own (the host's /run is shared on systemd
/// nodes; this machine's root is private).
struct ContainerdRootfs {
    rootfs: PathBuf,
    // Field order is drop order: the rootfs before the mount it sits in.
    _rootfs_mount: TmpfsMount,
    _run: BindMount,
}

impl ContainerdRootfs {
    fn new(scratch: &Path) -> ContainerdRootfs {
        let run = scratch.join("run");
        let run_mount = BindMount::onto_itself(&run);
        make_shared(&run);
        let rootfs = run.join("containerd/io.containerd.runtime.v2.task/k8s.io").join(hex64()).join("rootfs");
        let rootfs_mount = TmpfsMount::new(&rootfs, "size=1m");
        std::fs::create_dir(rootfs.join("app")).unwrap();
        std::fs::write(rootfs.join("app/server.log"), "started\n").unwrap();
        ContainerdRootfs { rootfs, _rootfs_mount: rootfs_mount, _run: run_mount }
    }
}

/// containerd's mount.Unmount: 50 tries 50 ms apart on EBUSY, and the
/// teardown retried a few seconds later.
fn containerd_unmounts(rootfs: &Path) -> Bursts {
    Bursts::start(os!["--comm", "containerd", "--repeat", "50", "--every-ms", "50", "umount", rootfs], secs(2))
}

/// A container's rootfs and the process that holds it: the actor, started
/// with `args` (given the rootfs) and ready.
struct HeldRootfs {
    // Field order is drop order: the holder before the mounts it holds.
    holder: Process,
    container: ContainerdRootfs,
}

impl HeldRootfs {
    fn new(scratch: &ScratchDir, args: impl FnOnce(&Path) -> Vec<OsString>) -> HeldRootfs {
        let container = ContainerdRootfs::new(scratch.path());
        let holder = start_actor(args(&container.rootfs));
        holder.wait_ready(secs(10));
        HeldRootfs { holder, container }
    }
}

/// Runs the containerd bursts against a held rootfs until podstuck names
/// the holder (in its evidence; `fix` checks the rest), then runs the fix
/// it prints and checks that containerd's next try would succeed.
fn mount_held(scratch: &ScratchDir, held: &HeldRootfs, fix: impl Fn(&mut Expect)) {
    let (rootfs, pid) = (held.container.rootfs.as_path(), held.holder.pid());
    let root = KubeletRoot::empty(scratch.path().join("kubelet"));
    let watch = podstuck(&root, &[]);
    let bursts = containerd_unmounts(rootfs);
    let ebusy = format!("umount errno {}", libc::EBUSY);
    let Some(mut watch) = watch else {
        let lines = bursts.finish();
        assert_eq!(lines.len(), 50, "one whole burst: {lines:?}");
        all_say(&lines, &ebusy);
        assert!(is_mountpoint(rootfs), "the fixture must still be mounted");
        return;
    };
    let finding = watch.await_finding(
        FINDING_TIMEOUT,
        |f| f["kind"] == "mount-held" && f["paths"][0].as_str().is_some_and(|p| p.starts_with(text(scratch.path()))),
        |e| {
            e.eq("/paths/0", text(rootfs));
            e.eq("/actor/comm", "containerd");
            e.eq("/syscall", "umount2");
            e.eq("/errno", "EBUSY");
            let rhythm = e.text("/rhythm");
            e.that(rhythm.contains("containerd"), format!("/rhythm ({rhythm}) should name containerd's retries"));
            fix(e);
            e.that(e.mentions_number("/evidence", pid.into()), format!("evidence should name the holder, pid {pid}"));
        },
    );
    let lines = bursts.finish();
    assert!(lines.len() >= 50, "a whole burst: {lines:?}");
    all_say(&lines, &ebusy);
    assert!(is_mountpoint(rootfs), "the fixture must still be mounted");
    assert_eq!(task_state(pid), Some('S'), "the holder is alive");
    apply_fix(&finding);
    assert_eq!(succeeds_soon(|| sys_umount2(&cstring(rootfs), 0)), 0, "containerd's next umount2 after the fix");
    stop(watch, &finding);
}

kernel_test! {
    fn p4_a_mount_held_in_another_namespace_is_named_with_nsenter(test) {
        let scratch = test.scratch();
        // A process that unshared its mount namespace while the rootfs was
        // mounted (a leaked copy), with its cwd inside.
        let held = HeldRootfs::new(&scratch, |rootfs| os!["--comm", "leaky-agent", "hold-in-namespace", rootfs.join("app")]);
        let (rootfs, pid) = (&held.container.rootfs, held.holder.pid());
        let host_ns = std::fs::read_link("/proc/self/ns/mnt").unwrap();
        assert_ne!(std::fs::read_link(format!("/proc/{pid}/ns/mnt")).unwrap(), host_ns, "the holder has its own namespace");

        mount_held(&scratch, &held, |e| {
            // `umount` without -l fails in there: the holder's cwd is inside,
            // it is what keeps the copy busy (exit 32, "target is busy").
            e.eq("/fix", format!("nsenter -t {pid} -m -- umount -l -- {}", shell_word(rootfs)));
        });
    }
}

kernel_test! {
    fn p4_a_mount_held_by_an_open_file_is_named_with_kill(test) {
        let scratch = test.scratch();
        // A log shipper in the host namespace still reading the container's log.
        let held = HeldRootfs::new(&scratch, |rootfs| os!["--comm", "log-shipper", "hold-open", rootfs.join("app/server.log")]);
        let pid = held.holder.pid();
        mount_held(&scratch, &held, |e| e.contains("/fix", &format!("] && kill -TERM {pid}")));
    }
}

kernel_test! {
    fn p4_a_mount_held_by_a_cwd_is_named_with_kill(test) {
        let scratch = test.scratch();
        // A debugging shell someone left in the container's directory.
        let held = HeldRootfs::new(&scratch, |rootfs| os!["--comm", "bash", "hold-cwd", rootfs.join("app")]);
        let pid = held.holder.pid();
        mount_held(&scratch, &held, |e| e.contains("/fix", &format!("] && kill -TERM {pid}")));
    }
}

// P5 --------------------------------------------------------------------

kernel_test! {
    fn p5_a_pod_cgroup_with_a_live_task_is_named_with_cgroup_kill(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let busy = BusyPodCgroup::create(scratch.path());
        let (uid, cgroup) = (busy.uid.as_str(), &busy.path);
        let mut watch = podstuck(&root, &["--pod", uid]);

        let kubelet = busy.kubelet_removing();
        let ebusy = rmdir_busy();

        if let Some(mut watch) = watch.take() {
            let pid = busy.task.pid();
            let finding = watch.await_finding(
                FINDING_TIMEOUT,
                |f| f["kind"] == "cgroup-busy",
                |e| {
                    e.eq("/pod_uid", uid);
                    e.eq("/paths/0", text(cgroup));
                    e.eq("/actor/comm", "kubelet");
                    e.eq("/errno", "EBUSY");
                    e.that(e.mentions_number("/evidence", pid.into()), format!("evidence should name the live task, pid {pid}"));
                    e.eq("/fix", format!("echo 1 > {}", shell_word(&cgroup.join("cgroup.kill"))));
                },
            );
            all_say(&kubelet.lines(), &ebusy);
            apply_fix(&finding);
            assert_eq!(succeeds_soon(|| sys_rmdir(&cstring(cgroup))), 0, "kubelet's next rmdir after the fix");
            stop(watch, &finding);
            return;
        }
        all_say(&kubelet.lines(), &ebusy);
    }
}

kernel_test! {
    /// Issue 27's report on a cgroup v1 node: a container's task frozen by
    /// the v1 freezer, kubelet failing to remove the pod's cgroups in every
    /// hierarchy. One finding, not one per directory; its fix thaws before
    /// it kills (SIGKILL alone does nothing to a frozen task) and, run as
    /// printed, lets every one of the pod's cgroups go.
    fn p5_a_v1_pod_frozen_by_the_freezer_is_one_finding_whose_fix_frees_every_cgroup(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let uid = new_pod_uid();
        let uid = uid.as_str();
        let parent = text(Path::new(scratch.path().file_name().unwrap())).to_string();
        let mut cgroups = match V1PodCgroups::create(&parent, uid, &hex64()) {
            Ok(c) => c,
            Err(what) => return missing(test.name(), &what, "run it on a cgroup v1 or hybrid node (v1 controllers mounted under /sys/fs/cgroup)"),
        };
        let pid = cgroups.start_task("app");
        cgroups.freeze_container();
        let mut watch = podstuck(&root, &["--pod", uid]);

        // kubelet's pod cgroup cleanup, every 2 s: containers, then the pod, hierarchy by hierarchy.
        let dirs = cgroups.all();
        let mut args = os!["--comm", "kubelet", "--every-ms", "2000", "--repeat", "0", "rmdirs"];
        args.extend(dirs.iter().map(|d| d.clone().into_os_string()));
        let kubelet = start_actor(args);
        let ebusy = format!("rmdirs {}", vec![format!("errno {}", libc::EBUSY); dirs.len()].join(", "));
        all_say(&kubelet.wait_for_lines(1, secs(10)), &ebusy);

        if let Some(mut watch) = watch.take() {
            let thaw = format!("echo THAWED > {} && kill -9 {pid} && ", shell_word(&cgroups.freezer.join("freezer.state")));
            let finding = watch.await_finding(
                FINDING_TIMEOUT,
                |f| f["kind"] == "cgroup-busy",
                |e| {
                    e.eq("/pod_uid", uid);
                    e.eq("/severity", "critical");
                    e.eq("/confidence", "confirmed");
                    e.eq("/actor/comm", "kubelet");
                    e.that(e.text("/paths").matches("/sys/fs/cgroup/").count() == dirs.len(), format!("every one of the {} directories in /paths", dirs.len()));
                    for dir in &dirs {
                        e.contains("/evidence", &format!("of {} failed with EBUSY", text(dir)));
                    }
                    e.contains("/summary", &format!("pid {pid} (app, "));
                    e.contains("/summary", "frozen by the v1 freezer");
                    e.contains("/evidence", &format!("{}: FROZEN", text(&cgroups.freezer.join("freezer.state"))));
                    e.contains("/fix", &thaw);
                },
            );
            let told: Vec<Value> = watch.findings_so_far().into_iter().filter(|f| f["kind"] == "cgroup-busy").collect();
            assert_eq!(told.len(), 1, "one cgroup-busy finding for the pod, not one per directory: {told:#?}");
            // The fix as a person pastes it, with kubelet held between two
            // attempts so that its rmdirs do not race the fix's own.
            kubelet.signal(libc::SIGSTOP);
            apply_fix(&finding);
            let said = kubelet.lines().len();
            kubelet.signal(libc::SIGCONT);
            // kubelet's next attempt removes what is left: the pod's own
            // directories (the one after it, should the stop have caught
            // kubelet halfway through an attempt).
            let removed = |l: &String| l.strip_prefix("rmdirs ").is_some_and(|w| w.split(", ").all(|w| w == "ok" || w == "gone"));
            let next = kubelet.wait_for_lines(said + 1, secs(10));
            let next = if removed(&next[said]) { next } else { kubelet.wait_for_lines(said + 2, secs(10)) };
            assert!(next[said..].iter().any(removed), "kubelet's attempts after the fix: {:?}", &next[said..]);
            for dir in &dirs {
                assert!(!dir.exists(), "{} is left after the fix", dir.display());
            }
            stop(watch, &finding);
            return;
        }
        all_say(&kubelet.lines(), &ebusy);
    }
}

// P6 --------------------------------------------------------------------

kernel_test! {
    fn p6_a_call_hung_on_a_stopped_fuse_daemon_is_named_with_abort(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let uid = pod.uid();
        let pv = pod.create_csi_volume("pvc-fuse");
        let mount = pv.join("mount");
        let mut fuse = FuseMount::start(&mount);
        let victim = mount.join("a");
        // While the daemon answers, removal works.
        let (_, healthy) = start_actor(os!["unlink", victim]).finish(secs(10));
        all_say(&healthy, "unlink ok");
        fuse.stop_server();
        let mut watch = podstuck(&root, &["--pod", uid]);

        let kubelet = start_actor(os!["--comm", "kubelet", "unlink", victim]);
        // The unlink waits for the daemon's answer to LOOKUP: no line, and the
        // task sleeps in the FUSE request wait (interruptible, so state S).
        poll_until_else("the unlink to wait in request_wait_answer", secs(10), || match wchan(kubelet.pid()) {
            wchan if wchan == "request_wait_answer" => Ok(()),
            wchan => Err(format!("wchan {wchan:?}, lines {:?}", kubelet.lines())),
        });
        assert!(kubelet.lines().is_empty(), "the unlink returned: {:?}", kubelet.lines());

        if let Some(mut watch) = watch.take() {
            let server = fuse.server_pid();
            let connection = fuse.connection();
            let finding = watch.await_finding(
                FINDING_TIMEOUT,
                |f| f["kind"] == "hung-call",
                |e| {
                    e.eq("/paths/0", text(&victim));
                    e.eq("/pod_uid", uid);
                    e.eq("/actor/comm", "kubelet");
                    e.eq("/actor/pid", kubelet.pid());
                    e.eq("/syscall", UNLINK_CALL);
                    e.that(e.mentions_number("/evidence", server.into()), format!("evidence should name the FUSE daemon, pid {server}"));
                    e.that(e.mentions("/evidence", "stopped"), "evidence should say the daemon is stopped");
                    // Preceded by mounting fusectl when the node has not (this one has not).
                    let abort = format!("echo 1 > /sys/fs/fuse/connections/{connection}/abort");
                    e.that(e.text("/fix").ends_with(&abort), format!("/fix should end with {abort}"));
                },
            );
            // What the fix does: the hung call fails instead of hanging.
            fuse.abort();
            stop(watch, &finding);
        }
        fuse.abort();
        let (_, lines) = kubelet.finish(secs(10));
        let aborted = [libc::ECONNABORTED, libc::ENOTCONN].map(|e| format!("unlink errno {e}"));
        assert!(lines.len() == 1 && aborted.contains(&lines[0]), "after the abort: {lines:?}");
    }
}

// P7 --------------------------------------------------------------------

kernel_test! {
    fn p7_unmounting_what_is_not_mounted_is_named_with_rmdir(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let uid = pod.uid();
        let pv = pod.create_csi_volume("pvc-p7");
        let dir = pv.join("mount");
        std::fs::create_dir(&dir).unwrap();
        let mut watch = podstuck(&root, &["--pod", uid]);

        // A non-idempotent NodeUnpublish, called by kubelet on its backoff.
        let driver = start_actor(os!["--comm", "hostpathplugin", "--backoff-ms", "500", "--repeat", "0", "umount", dir]);
        let einval = format!("umount errno {}", libc::EINVAL);
        all_say(&driver.wait_for_lines(3, secs(10)), &einval);

        if let Some(mut watch) = watch.take() {
            let finding = watch.await_finding(
                FINDING_TIMEOUT,
                |f| f["kind"] == "not-mounted",
                |e| {
                    e.eq("/paths/0", text(&dir));
                    e.eq("/pod_uid", uid);
                    e.eq("/syscall", "umount2");
                    e.eq("/errno", "EINVAL");
                    e.eq("/fix", format!("rmdir -- {}", shell_word(&dir)));
                },
            );
            all_say(&driver.lines(), &einval);
            apply_fix(&finding);
            assert!(!dir.exists(), "the fix should remove {}", dir.display());
            stop(watch, &finding);
            return;
        }
        all_say(&driver.lines(), &einval);
    }
}

// P8 --------------------------------------------------------------------

kernel_test! {
    fn p8_a_volume_dir_with_a_stray_file_is_named_with_its_content(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let uid = pod.uid();
        let pv = pod.create_csi_volume("pvc-p8");
        let dir = pv.join("mount");
        std::fs::create_dir(&dir).unwrap();
        // Written under the mountpoint while the volume was not mounted.
        std::fs::write(dir.join("left-behind.log"), "written while unmounted\n").unwrap();
        let mut watch = podstuck(&root, &["--pod", uid]);

        let kubelet = start_actor(os!["--comm", "kubelet", "--backoff-ms", "500", "--repeat", "0", "rmdir-at", pv, "mount"]);
        let enotempty = format!("rmdir-at errno {}", libc::ENOTEMPTY);
        all_say(&kubelet.wait_for_lines(3, secs(10)), &enotempty);

        if let Some(mut watch) = watch.take() {
            let finding = watch.await_finding(
                FINDING_TIMEOUT,
                |f| f["kind"] == "dir-not-empty",
                |e| {
                    e.eq("/paths/0", text(&dir));
                    e.eq("/pod_uid", uid);
                    e.eq("/actor/comm", "kubelet");
                    e.eq("/errno", "ENOTEMPTY");
                    e.that(e.mentions("/evidence", "left-behind.log"), "evidence should list the stray file");
                    e.starts_with("/fix", "rm -r --one-file-system -- ");
                    e.contains("/fix", &shell_word(&dir));
                },
            );
            stop(watch, &finding);
        }
        all_say(&kubelet.lines(), &enotempty);
    }
}

// P9 --------------------------------------------------------------------

/// Whether a finding says the filesystem has no free inode: a details
/// field about inodes that is 0, or a fact about inodes with a lone 0.
fn says_no_inode_left(e: &Expect) -> bool {
    let in_details = e
        .at("/details")
        .as_object()
        .is_some_and(|d| d.iter().any(|(k, v)| (k.contains("inode") || k == "ffree") && v.as_u64() == Some(0)));
    let in_evidence = e.at("/evidence").as_array().is_some_and(|facts| {
        facts.iter().any(|f| {
            let fact = f["fact"].as_str().unwrap_or_default().to_lowercase();
            fact.contains("inode") && fact.split(|c: char| !c.is_ascii_alphanumeric()).any(|w| w == "0")
        })
    });
    in_details || in_evidence
}

kernel_test! {
    fn p9_an_overlay_whose_upper_filesystem_is_full_is_disk_full(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        // docker's whole data root on a tiny tmpfs, out of inodes.
        let docker = scratch.path().join("docker");
        let _disk = TmpfsMount::new(&docker, "size=4m,nr_inodes=64");
        let lower = docker.join("overlay2").join(hex64()).join("diff");
        std::fs::create_dir_all(lower.join("etc")).unwrap();
        std::fs::write(lower.join("etc/motd"), "welcome\n").unwrap();
        let layer = docker.join("overlay2").join(hex64());
        let merged = layer.join("merged");
        let _overlay = OverlayMount::new(&lower, &layer.join("diff"), &layer.join("work"), &merged);
        let filled = fill_inodes(&docker.join("tmp"));
        eprintln!("p9: {filled} files filled the upper filesystem");
        let victim = merged.join("etc/motd");
        let mut watch = podstuck(&root, &[]);

        // Removing a lower file needs a whiteout in the upper layer: an inode.
        let rm = start_actor(os!["--comm", "rm", "--every-ms", "1000", "--repeat", "0", "unlink", victim]);
        let enospc = format!("unlink errno {}", libc::ENOSPC);
        all_say(&rm.wait_for_lines(2, secs(10)), &enospc);

        if let Some(mut watch) = watch.take() {
            let finding = watch.await_finding(
                FINDING_TIMEOUT,
                |f| f["kind"] == "disk-full" && f.to_string().contains(text(scratch.path())),
                |e| {
                    e.eq("/paths/0", text(&victim));
                    e.eq("/errno", "ENOSPC");
                    e.that(says_no_inode_left(e), "evidence or details should say 0 free inodes");
                    // The upper layer is a tmpfs out of inodes: the fix gives it more.
                    e.starts_with("/fix", "mount -o remount,nr_inodes=");
                    let fix = e.text("/fix");
                    e.that(
                        fix.contains(&shell_word(&docker)) || fix.contains(&shell_word(&merged)),
                        format!("/fix ({fix}) should name {} or {}", docker.display(), merged.display()),
                    );
                },
            );
            stop(watch, &finding);
        }
        all_say(&rm.lines(), &enospc);
    }
}

kernel_test! {
    fn p9_a_read_only_kubelet_root_is_named_with_remount(test) {
        let scratch = test.scratch();
        let disk = KubeletRoot::new(scratch.path().join("kubelet-disk"));
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let uid = new_pod_uid();
        let uid = uid.as_str();
        let cache = disk.pod(uid).empty_dir("cache");
        std::fs::create_dir_all(&cache).unwrap();
        std::fs::write(cache.join("index.db"), "x").unwrap();
        // The kubelet root's disk went read-only (errors=remount-ro, a bind ro).
        let _read_only = BindMount::read_only(disk.path(), root.path());
        let mut watch = podstuck(&root, &["--pod", uid]);

        let target = root.pod(uid).empty_dir("cache");
        let kubelet = start_actor(os!["--comm", "kubelet", "--backoff-ms", "500", "--repeat", "0", "remove-all", target]);
        // Go's RemoveAll gives up at once on EROFS: it is not EISDIR or EPERM.
        let erofs = format!("remove-all left: errno {} at cache", libc::EROFS);
        all_say(&kubelet.wait_for_lines(2, secs(10)), &erofs);

        if let Some(mut watch) = watch.take() {
            let finding = watch.await_finding(
                FINDING_TIMEOUT,
                |f| f["kind"] == "read-only-fs",
                |e| {
                    e.eq("/pod_uid", uid);
                    e.eq("/errno", "EROFS");
                    e.eq("/actor/comm", "kubelet");
                    let key = e.text("/paths/0");
                    e.that(key.starts_with(text(&target)), format!("/paths/0 ({key}) should be in {}", target.display()));
                    // Both work on a read-only bind (checked by hand here);
                    // ",bind" leaves the filesystem itself alone.
                    let fix = e.text("/fix");
                    let allowed = ["remount,rw", "remount,bind,rw"].map(|o| format!("mount -o {o} -- {}", shell_word(root.path())));
                    e.that(allowed.contains(&fix), format!("/fix is {fix:?}, want one of {allowed:?}"));
                },
            );
            all_say(&kubelet.lines(), &erofs);
            apply_fix(&finding);
            std::fs::write(root.path().join("writable-again"), "").expect("the fix should make the kubelet root writable");
            stop(watch, &finding);
            return;
        }
        all_say(&kubelet.lines(), &erofs);
    }
}

// P10 -------------------------------------------------------------------

kernel_test! {
    fn p10_a_subpath_bind_mount_left_behind_is_named_with_its_umount(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let uid = pod.uid();
        let source = pod.empty_dir("data").join("config");
        std::fs::create_dir_all(&source).unwrap();
        let index = pod.subpath("data", "app", 0);
        let container = index.parent().unwrap();
        let _subpath = BindMount::new(&source, &index);
        let mut watch = podstuck(&root, &["--pod", uid]);

        // CleanSubPaths removing the index dir that is still a bind mount.
        let kubelet = start_actor(os!["--comm", "kubelet", "--backoff-ms", "500", "--repeat", "0", "rmdir-at", container, "0"]);
        let ebusy = format!("rmdir-at errno {}", libc::EBUSY);
        all_say(&kubelet.wait_for_lines(3, secs(10)), &ebusy);

        if let Some(mut watch) = watch.take() {
            let finding = watch.await_finding(
                FINDING_TIMEOUT,
                |f| f["kind"] == "subpath-left",
                |e| {
                    e.eq("/paths/0", text(&index));
                    e.eq("/pod_uid", uid);
                    e.eq("/actor/comm", "kubelet");
                    e.eq("/errno", "EBUSY");
                    e.eq("/fix", format!("umount -- {}", shell_word(&index)));
                },
            );
            all_say(&kubelet.lines(), &ebusy);
            assert!(is_mountpoint(&index), "the fixture must still be mounted");
            apply_fix(&finding);
            assert!(!is_mountpoint(&index), "the fix should unmount {}", index.display());
            stop(watch, &finding);
            return;
        }
        all_say(&kubelet.lines(), &ebusy);
        assert!(is_mountpoint(&index), "the fixture must still be mounted");
    }
}

// Background ------------------------------------------------------------

/// One pod's directory as kubelet leaves it after its containers stopped:
/// an emptyDir with files, a projected token dir, an empty plugin dir.
fn terminated_pod(pod: &Pod) {
    for d in 0..4 {
        let dir = pod.empty_dir("cache").join(format!("d{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..25 {
            std::fs::write(dir.join(format!("f{f}")), "x").unwrap();
        }
    }
    std::fs::create_dir_all(pod.projected("token")).unwrap();
    std::fs::create_dir_all(pod.empty_dir_plugin("cache")).unwrap();
    let containers = pod.dir().join("containers/app");
    std::fs::create_dir_all(&containers).unwrap();
    std::fs::write(containers.join("0a1b2c3d"), "").unwrap();
    std::fs::write(pod.dir().join("etc-hosts"), "127.0.0.1 localhost\n").unwrap();
}

/// kubelet tearing one pod down normally; returns what each call printed.
fn tear_down(pod: &Pod) -> Vec<String> {
    let steps = [
        os!["--comm", "kubelet", "remove-all", pod.empty_dir("cache")],
        os!["--comm", "kubelet", "unlink-many", pod.projected("token"), "200"],
        os!["--comm", "kubelet", "rmdir", pod.empty_dir_plugin("cache")],
        os!["--comm", "kubelet", "remove-all", pod.dir()],
    ];
    steps.into_iter().flat_map(|args| start_actor(args).finish(secs(60)).1).collect()
}

kernel_test! {
    fn a_busy_background_of_normal_deletions_yields_no_finding(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pods: Vec<Pod> = (0..8).map(|_| root.new_pod()).collect();
        let mut watch = podstuck(&root, &[]);

        // Three waves of eight pods torn down at once.
        for _wave in 0..3 {
            for pod in &pods {
                terminated_pod(pod);
            }
            let waves: Vec<_> = pods
                .iter()
                .map(|pod| {
                    let pod = pod.clone();
                    std::thread::spawn(move || tear_down(&pod))
                })
                .collect();
            for outcome in waves {
                let lines = outcome.join().expect("teardown thread");
                assert_eq!(lines, ["remove-all done", "unlink-many 200 unlinked, 0 failed", "rmdir ok", "remove-all done"]);
            }
        }
        for pod in &pods {
            assert!(!pod.dir().exists());
        }

        if let Some(watch) = watch.take() {
            // Nothing is awaited here but time itself: longer than
            // --hung-after and a few backoff steps, for any detector that
            // would fire (wrongly) to do so.
            std::thread::sleep(secs(6));
            let done = watch.stop(libc::SIGINT);
            assert!(done.status.success(), "podstuck failed: {}", done.stderr);
            let ours: Vec<&Value> = done
                .finding_lines
                .iter()
                .filter(|f| {
                    let line = f.to_string();
                    line.contains(text(scratch.path())) || pods.iter().any(|pod| line.contains(pod.uid()))
                })
                .collect();
            assert!(ours.is_empty(), "normal deletions produced findings: {ours:#?}");
        }
    }
}
