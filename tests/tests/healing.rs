//! End-to-end: node reads that heal, a collector that never stops
//! draining, a reader a workload cannot redirect (issue 50). Each trial is
//! made real: a FUSE volume whose server (Debian's bindfs, or the tests'
//! own) stalls and answers again, removal and fork/exec storms beside
//! eight reads hung on stalled servers, a directory swapped for a link to
//! a device while podstuck reads it.
//!
//! Runs as root; see `kernel_test!` for the skip rule. The trials are
//! isolated by path and pod UID, so they run side by side; each waits for
//! what it waits for (a finding, a state polled to a deadline), and the
//! one sleep left is the stall itself, whose length is the trial.

use std::ffi::{CString, OsStr};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use podstuck_tests::*;
use serde_json::Value;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// Arguments of mixed kinds (text, paths) for a helper process.
macro_rules! os {
    ($($arg:expr),* $(,)?) => {
        vec![$(AsRef::<OsStr>::as_ref(&$arg).to_os_string()),*]
    };
}

/// How long the trial's FUSE server stalls: the 12 s.
const STALL: Duration = Duration::from_secs(12);
/// How long podstuck may take to confirm the finding again once the
/// filesystem answers: "within a few seconds" (a review every 0.5 s, a
/// look again 1 s after a look that could not read).
const CONFIRMED_AGAIN_WITHIN: Duration = Duration::from_secs(15);

/// The closing JSON line's field, as a number.
fn end_number(end: &Value, field: &str) -> u64 {
    end[field].as_u64().unwrap_or_else(|| panic!("no {field} in the end line: {end}"))
}

kernel_test! {
    fn a_volume_whose_fuse_server_stalls_then_answers_is_confirmed_again_within_seconds(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let uid = pod.uid();
        let pv = pod.create_csi_volume("pvc-bindfs");
        // The volume's server side (an NFS export, a bucket): a directory
        // kubelet cannot remove, something written into it.
        let export = scratch.path().join("export");
        std::fs::create_dir_all(export.join("data")).unwrap();
        std::fs::write(export.join("data/stray.log"), b"written while nothing was mounted").unwrap();
        let mount = pv.join("mount");
        let Some(bindfs) = Bindfs::start(test.name(), &export, &mount) else { return };
        let data = mount.join("data");
        let mut watch = Watch::start(&["--findings", "--hung-after", "3s", "--kubelet-root", root.arg(), "--pod", uid]);
        // kubelet fails to remove it once a second, through the stall and after.
        let kubelet = start_actor(os!["--comm", "kubelet", "--repeat", "0", "--every-ms", "1000", "rmdir", data]);
        let stray = data.join("stray.log");
        let removal = format!("rm -r --one-file-system -- {}", stray.display());
        let before = watch.await_finding(secs(60), |f| f["kind"] == "dir-not-empty", |e| {
            e.eq("/confidence", "confirmed");
            e.that(e.text("/fix") == removal, format!("/fix should be {removal}"));
        });

        bindfs.stall();
        let stalled = Instant::now();
        // kubelet's rmdir waits on the server: a hung call, named.
        let hung = watch.await_finding(secs(30), |f| f["kind"] == "hung-call", |e| {
            e.eq("/actor/comm", "kubelet");
            e.eq("/actor/pid", kubelet.pid());
        });
        // podstuck's own look at the directory did not return (or was not
        // made, the filesystem being avoided): said, and the removal no
        // longer the fix.
        let during = watch.await_finding(secs(30), |f| f["kind"] == "dir-not-empty" && f["revision"].as_u64() > before["revision"].as_u64(), |e| {
            e.that(e.text("/confidence") != "confirmed", "not confirmed while the directory cannot be read");
            e.that(e.mentions("/evidence", "did not answer") || e.mentions("/evidence", "not touched"), "evidence should say podstuck's read did not answer");
        });
        assert!(during["fix"].as_str().is_some_and(|f| f.starts_with("ls -la")), "{during}");
        // The stall is the trial: the server answers again after it.
        if let Some(left) = STALL.checked_sub(stalled.elapsed()) {
            std::thread::sleep(left);
        }
        bindfs.answer_again();
        let answered = Instant::now();
        let after = watch.await_finding(CONFIRMED_AGAIN_WITHIN, |f| f["kind"] == "dir-not-empty" && f["revision"].as_u64() > during["revision"].as_u64(), |e| {
            e.eq("/confidence", "confirmed");
            e.that(e.text("/fix") == removal, format!("/fix should be {removal} again"));
            e.that(e.mentions("/evidence", "stray.log"), "evidence should name what is left");
        });
        let took = answered.elapsed();
        eprintln!("confirmed again {took:?} after the filesystem answered (a stall of {STALL:?})");
        assert_eq!(after["id"], before["id"], "the same finding, revised");
        // kubelet's call returned: the hung call is over.
        watch.await_finding(secs(30), |f| f["kind"] == "hung-call" && f["id"] == hung["id"], |e| e.eq("/status", "resolved"));
        let finished = watch.stop(libc::SIGINT);
        let end = finished.end.expect("an end line");
        assert_eq!(end["avoided_mounts"], Value::Array(vec![]), "nothing avoided at the end: {end}");
        assert!(end_number(&end, "mounts_recovered") >= 1, "the filesystem said recovered: {end}");
        assert_eq!(end_number(&end, "events_lost"), 0, "{end}");
        drop(kubelet);
        drop(bindfs);
    }
}

/// Calls of the removal storm, in four processes (four series of the
/// kernel's, each streaming its budget).
const STORM_CALLS: usize = 1_000_000;
const STORM_PROCESSES: usize = 4;
/// Processes of the fork/exec storm, each SIGKILLed at once: a signal and
/// an exit record each.
const FORKS: usize = 3_000;
/// Filesystems stalled, each with a read of podstuck's hung on it.
const HUNG_READS: usize = 8;

kernel_test! {
    fn storms_beside_eight_reads_hung_on_stalled_servers_lose_no_record(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let uid = pod.uid();
        let mut servers = Vec::new();
        let mut kubelets = Vec::new();
        for i in 0..HUNG_READS {
            let mount = pod.create_csi_volume(&format!("pvc-fuse-{i}")).join("mount");
            servers.push(FuseMount::start(&mount));
            // `full` holds a file: its rmdir fails with ENOTEMPTY, and
            // podstuck looks into it at every check of the finding.
            kubelets.push(start_actor(os!["--comm", "kubelet", "--repeat", "0", "--every-ms", "1000", "rmdir", mount.join("full")]));
        }
        // A ring of 256 KiB: a few seconds of these storms fill it when
        // nothing reads it. --hung-after past the trial: podstuck's own
        // reads, not a probe of the hung calls, meet the stalled servers.
        let watch = Watch::start(&["--findings", "--hung-after", "10m", "--ring-buffer-kib", "256", "--kubelet-root", root.arg(), "--pod", uid]);
        poll_until_else("the eight dir-not-empty findings, confirmed", secs(90), || {
            let confirmed = watch.findings_so_far().iter().filter(|f| f["kind"] == "dir-not-empty" && f["confidence"] == "confirmed").count();
            if confirmed == HUNG_READS { Ok(()) } else { Err(format!("{confirmed} confirmed")) }
        });
        let storm_dirs: Vec<PathBuf> = (0..STORM_PROCESSES).map(|i| scratch.path().join(format!("storm-{i}"))).collect();
        let _tmpfs: Vec<TmpfsMount> = storm_dirs.iter().map(|d| TmpfsMount::new(d, "size=1m")).collect();
        let started = Instant::now();
        for server in &servers {
            server.stop_server();
        }
        let storms: Vec<Process> = storm_dirs
            .iter()
            .map(|d| start_actor(os!["churn-unlink", d, (STORM_CALLS / STORM_PROCESSES).to_string()]))
            .collect();
        let forks = start_actor(os!["fork-kill", FORKS.to_string()]);
        // podstuck's reads hang on the eight stalled servers meanwhile.
        let readers = poll_until_else("eight podstuck-read processes stuck", secs(60), || {
            let stuck = stuck_readers(watch.pid());
            if stuck >= HUNG_READS { Ok(stuck) } else { Err(format!("{stuck} stuck")) }
        });
        let mut lines = Vec::new();
        for storm in storms.into_iter().chain([forks]) {
            let (_, said) = storm.finish(secs(300));
            lines.extend(said);
        }
        let stormed = started.elapsed();
        let unlinked = format!("churn-unlink {} unlinked, 0 failed", STORM_CALLS / STORM_PROCESSES);
        assert_eq!(lines.iter().filter(|l| **l == unlinked).count(), STORM_PROCESSES, "{lines:?}");
        assert!(lines.contains(&format!("fork-kill {FORKS} killed")), "{lines:?}");
        for server in &servers {
            server.continue_server();
        }
        drop(kubelets);
        let finished = watch.stop(libc::SIGINT);
        let end = finished.end.unwrap_or_else(|| panic!("no end line: {}", finished.stderr));
        eprintln!("storms of {STORM_CALLS} calls and {FORKS} forks took {stormed:?} beside {readers} stuck readers; end line: {end}");
        assert_eq!(end_number(&end, "events_lost"), 0, "records lost beside hung reads: {end}\n{}", finished.stderr);
        // The reads did wait on the stalled servers: reads ran to their
        // deadline, and every stalled mount was met by a read, timed out or
        // (a mount whose first reader is still stuck, or a review whose
        // budget the others spent) avoided, never read as if it answered.
        let failed = &end["node_reads_failed"];
        let (timed_out, avoided) = (failed["timed-out"].as_u64().unwrap_or(0), failed["avoided"].as_u64().unwrap_or(0));
        assert!(timed_out >= 1 && timed_out + avoided >= HUNG_READS as u64, "{timed_out} reads timed out, {avoided} avoided: {end}");
        // Every kill and every exit of the fork storm came through.
        assert!(end_number(&end, "events_seen") >= 2 * FORKS as u64, "{end}");
        drop(servers);
    }
}

/// podstuck's readers (`podstuck-read`, its children) now in the kernel.
fn stuck_readers(podstuck: i32) -> usize {
    let Ok(entries) = std::fs::read_dir("/proc") else { return 0 };
    entries
        .flatten()
        .filter_map(|e| std::fs::read_to_string(e.path().join("stat")).ok())
        .filter(|stat| {
            let Some((name, rest)) = stat.split_once(") ") else { return false };
            let ppid = rest.split(' ').nth(1).and_then(|p| p.parse::<i32>().ok());
            name.ends_with("(podstuck-read") && ppid == Some(podstuck)
        })
        .count()
}

/// Victims of the swap trial: immutable files kubelet fails to delete.
const VICTIMS: usize = 20;
/// Finding lines (first tellings and revisions) the swap trial waits for:
/// each is a look of podstuck's at a path the swapper changes under it.
const LOOKS: usize = 60;

kernel_test! {
    fn a_directory_swapped_for_a_link_to_devices_never_makes_podstuck_open_one(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let uid = pod.uid();
        let volume = pod.create_csi_volume("pvc-swap").join("mount");
        // The workload's volume: a directory `sw` of immutable files, and a
        // link `swap` to a directory of device nodes of the same names
        // (/dev's null), itself immutable so nothing in it is removed.
        let real = volume.join("sw");
        let devices = scratch.path().join("devices");
        std::fs::create_dir_all(&real).unwrap();
        std::fs::create_dir_all(&devices).unwrap();
        let mut guards = Vec::new();
        for i in 0..VICTIMS {
            let file = real.join(format!("victim-{i}"));
            std::fs::write(&file, b"x").unwrap();
            guards.push(Immutable::set(&file));
            mknod_null(&devices.join(format!("victim-{i}")));
        }
        let opened = OpenWatch::on(&(0..VICTIMS).map(|i| devices.join(format!("victim-{i}"))).collect::<Vec<_>>());
        guards.push(Immutable::set(&devices));
        std::os::unix::fs::symlink(&devices, volume.join("swap")).unwrap();
        let watch = Watch::start(&["--findings", "--kubelet-root", root.arg(), "--pod", uid]);
        let kubelets: Vec<Process> = (0..VICTIMS)
            .map(|i| start_actor(os!["--comm", "kubelet", "--repeat", "0", "--every-ms", "500", "unlink", real.join(format!("victim-{i}"))]))
            .collect();
        // The swapper: `sw` and `swap` exchanged, over and over, until told to stop.
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let swaps = {
            let (stop, a, b) = (stop.clone(), cstring(&real), cstring(&volume.join("swap")));
            std::thread::spawn(move || {
                let mut swaps = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    // SAFETY: two valid C paths; RENAME_EXCHANGE swaps them atomically.
                    let rc = unsafe { libc::syscall(libc::SYS_renameat2, libc::AT_FDCWD, a.as_ptr(), libc::AT_FDCWD, b.as_ptr(), libc::RENAME_EXCHANGE) };
                    assert_eq!(rc, 0, "renameat2: {}", std::io::Error::last_os_error());
                    swaps += 1;
                }
                swaps
            })
        };
        let looks = poll_until_else("podstuck to look at the victims again and again", secs(120), || {
            let lines = watch.json_so_far().iter().filter(|l| l["kind"] == "immutable-file").count();
            if lines >= LOOKS { Ok(lines) } else { Err(format!("{lines} immutable-file finding lines")) }
        });
        stop.store(true, std::sync::atomic::Ordering::Relaxed);
        let swaps = swaps.join().unwrap();
        // Left as it began, so the guards undo what they set.
        if real.symlink_metadata().is_ok_and(|m| m.file_type().is_symlink()) {
            // SAFETY: as above.
            unsafe { libc::syscall(libc::SYS_renameat2, libc::AT_FDCWD, cstring(&real).as_ptr(), libc::AT_FDCWD, cstring(&volume.join("swap")).as_ptr(), libc::RENAME_EXCHANGE) };
        }
        drop(kubelets);
        let finished = watch.stop(libc::SIGINT);
        let opens = opened.opens();
        eprintln!("{swaps} swaps while podstuck told {looks} finding lines; device nodes opened {opens} times");
        assert_eq!(opens, 0, "a device node was opened while podstuck read the swapped directory\n{}", finished.stderr);
        // What it read, it read from the files themselves.
        assert!(finished.findings.iter().any(|f| f["kind"] == "immutable-file" && f["confidence"] == "confirmed"), "{:#?}", finished.findings);
        drop(guards);
    }
}

fn cstring(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

/// A character device like /dev/null (1:3) at `path`.
fn mknod_null(path: &Path) {
    // SAFETY: a valid C path; mknod creates a node and opens nothing.
    let rc = unsafe { libc::mknod(cstring(path).as_ptr(), libc::S_IFCHR | 0o666, libc::makedev(1, 3)) };
    assert_eq!(rc, 0, "mknod {}: {}", path.display(), std::io::Error::last_os_error());
}

/// An inotify watch of IN_OPEN on each of some files: says how often any
/// of them was opened (an `O_PATH` descriptor is no open of the file).
struct OpenWatch(std::os::fd::OwnedFd);

impl OpenWatch {
    fn on(paths: &[PathBuf]) -> OpenWatch {
        use std::os::fd::FromRawFd;
        // SAFETY: inotify_init1 returns a new descriptor, owned here.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        assert!(fd >= 0, "inotify_init1: {}", std::io::Error::last_os_error());
        // SAFETY: as said.
        let fd = unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) };
        for path in paths {
            use std::os::fd::AsRawFd;
            // SAFETY: a valid descriptor and C path.
            let wd = unsafe { libc::inotify_add_watch(fd.as_raw_fd(), cstring(path).as_ptr(), libc::IN_OPEN) };
            assert!(wd >= 0, "inotify_add_watch {}: {}", path.display(), std::io::Error::last_os_error());
        }
        OpenWatch(fd)
    }

    /// The opens seen so far.
    fn opens(&self) -> usize {
        use std::os::fd::AsRawFd;
        let mut buf = [0u8; 64 << 10];
        let mut opens = 0;
        loop {
            // SAFETY: reading into our own buffer.
            let n = unsafe { libc::read(self.0.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return opens;
            }
            let mut at = 0;
            while at + size_of::<libc::inotify_event>() <= n as usize {
                // SAFETY: the kernel wrote whole events; read unaligned.
                let event: libc::inotify_event = unsafe { std::ptr::read_unaligned(buf[at..].as_ptr().cast()) };
                if event.mask & libc::IN_OPEN != 0 {
                    opens += 1;
                }
                at += size_of::<libc::inotify_event>() + event.len as usize;
            }
        }
    }
}
