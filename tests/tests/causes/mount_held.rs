//! `mount-held` (P4): a container's rootfs that containerd cannot unmount
//! because a process holds it: from a leaked copy of the mount namespace,
//! by an open file, by its working directory. The finding names the
//! holder; its fix, run as printed, lets containerd's next try succeed.

use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use podstuck_tests::findings::apply_fix;
use podstuck_tests::node::make_shared;
use podstuck_tests::*;

use super::{all_say, fixtures_only, hex64, podstuck, secs, stop, succeeds_soon, FINDING_TIMEOUT};

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
            e.eq("/fix", findings::entered(pid, &format!("umount -l -- {}", shell_word(rootfs))));
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
