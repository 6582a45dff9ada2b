//! End-to-end: node reads that heal, a collector that never stops
//! draining, a reader a workload cannot redirect (issue 50), a lifecycle
//! ring read fairly beside a call storm, a filesystem avoided until its
//! stuck reader returns (issue 61). Each trial is made real: a FUSE volume
//! whose server (Debian's bindfs, or the tests' own) stalls and answers
//! again, or answers statfs while an earlier statfs stays stuck, removal
//! and fork/exec storms beside eight reads hung on stalled servers, a
//! fork/exec storm beside a removal storm that outruns a loop slowed on
//! purpose (`--slow-pipeline`, a test knob), a directory swapped for a
//! link to a device while podstuck reads it.
//!
//! Runs as root; see `kernel_test!` for the skip rule. The trials are
//! isolated by path and pod UID, so they run side by side; each waits for
//! what it waits for (a finding, a state polled to a deadline), and the
//! one sleep left is the stall itself, whose length is the trial.

use std::ffi::{CString, OsStr};
use std::net::SocketAddr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use podstuck_tests::scrape::{free_port, get};
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

kernel_test! {
    fn a_filesystem_answering_statfs_while_a_read_stays_stuck_stays_avoided_until_that_read_returns(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let mount = pod.create_csi_volume("pvc-stall-once").join("mount");
        // Its server holds the first statfs unanswered and answers the rest,
        // later statfses too, until the test has it answer the first.
        let server = FuseMount::start_stalling_first_statfs(&mount);
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let listen = addr.to_string();
        let mut watch = Watch::start(&["--findings", "--listen", &listen, "--kubelet-root", root.arg(), "--pod", pod.uid()]);
        // kubelet's removal fails with EROFS once a second: podstuck's look
        // at it is a statfs of the volume, the first of which is held.
        let kubelet = start_actor(os!["--comm", "kubelet", "--repeat", "0", "--every-ms", "1000", "rmdir", mount.join("ro")]);
        let point = text(&mount);
        poll_until_else("podstuck's statfs stuck, its filesystem avoided", secs(60), || {
            let (readers, page) = (stuck_readers(watch.pid()), get(addr, "/metrics").body);
            match (readers, avoided(&page, point)) {
                (1, true) => Ok(()),
                (readers, avoided) => Err(format!("{readers} readers stuck, the volume avoided: {avoided}")),
            }
        });
        // Past its backoff podstuck tries the filesystem again, and the
        // server answers that statfs: the finding shows it.
        watch.await_finding(secs(90), |f| f["kind"] == "read-only-fs", |e| {
            e.that(e.mentions("/evidence", "ST_RDONLY"), "evidence should hold the statfs the server answered");
        });
        // Its first reader is still stuck: the filesystem stays avoided, its
        // next reads refused (counted), none lifted, no reader piled up.
        let refused_before = sample(&get(addr, "/metrics").body, "podstuck_node_read_failures_total{kind=\"avoided\"}");
        poll_until_else("a read refused after the statfs that answered", secs(30), || {
            let page = get(addr, "/metrics").body;
            let recovered = sample(&page, "podstuck_mount_recoveries_total");
            assert_eq!(recovered, 0.0, "the volume was read again while podstuck's statfs on it is still stuck:\n{page}");
            let refused = sample(&page, "podstuck_node_read_failures_total{kind=\"avoided\"}");
            match (avoided(&page, point), refused > refused_before) {
                (true, true) => Ok(()),
                seen => Err(format!("(avoided, refused since) {seen:?}")),
            }
        });
        assert_eq!(stuck_readers(watch.pid()), 1, "a reader piled up beside the stuck one");
        // The server answers the statfs held: the reader returns, and the
        // filesystem is read again, counted as recovered.
        server.answer_stalled_statfs();
        poll_until_else("the volume read again once its reader returned", secs(30), || {
            let page = get(addr, "/metrics").body;
            match (avoided(&page, point), sample(&page, "podstuck_mount_recoveries_total")) {
                (false, recovered) if recovered >= 1.0 => Ok(()),
                seen => Err(format!("(avoided, recovered) {seen:?}")),
            }
        });
        drop(kubelet);
        let finished = watch.stop(libc::SIGINT);
        let end = finished.end.unwrap_or_else(|| panic!("no end line: {}", finished.stderr));
        assert_eq!(end["avoided_mounts"], Value::Array(vec![]), "nothing avoided at the end: {end}");
        assert!(end_number(&end, "mounts_recovered") >= 1, "{end}");
        drop(server);
    }
}

/// Whether a `/metrics` page says the filesystem at `point` is avoided.
fn avoided(page: &str, point: &str) -> bool {
    page.lines()
        .any(|l| l.starts_with(&format!("podstuck_mount_avoided{{mount_point=\"{point}\"")) && l.ends_with(" 1"))
}

/// A sample of a `/metrics` page, by its name and labels as printed; 0
/// when the page has none.
fn sample(page: &str, series: &str) -> f64 {
    page.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok()).unwrap_or(0.0)
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

/// The removal storm beside the slowed loop: more calls than it makes in
/// the trial's time, so it lasts until the trial drops it.
const ENDLESS_STORM: &str = "1000000000";
/// The lifecycle's load beside it: a SIGKILL and an exit record per fork,
/// several times what the lifecycle ring (256 KiB) holds at once.
const FAIR_FORKS: usize = 3_000;

kernel_test! {
    fn the_lifecycle_ring_loses_nothing_while_a_call_storm_outruns_a_slow_loop(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        std::fs::create_dir_all(pod.dir()).expect("create the pod's directory");
        // Every call streamed, and each costs the loop 200 µs more than its
        // own work (the test knob): the storm writes calls far faster than
        // the loop takes them, as behind an identify slowed by a busy /proc.
        let watch = Watch::start(&[
            "--findings", "--every-call", "--slow-pipeline", "200us", "--ring-buffer-kib", "1024",
            "--kubelet-root", root.arg(), "--pod", pod.uid(),
        ]);
        let storm_dir = scratch.path().join("storm");
        let _tmpfs = TmpfsMount::new(&storm_dir, "size=1m");
        // The storm fills the loop's queue of calls within a fraction of a
        // second, and lasts until dropped, after the forks: the end line's
        // queue_full says the loop was behind it (a look at /metrics
        // meanwhile would wait on the same busy loop).
        let storm = start_actor(os!["churn-unlink", storm_dir, ENDLESS_STORM]);
        let (_, said) = start_actor(os!["fork-kill", FAIR_FORKS.to_string()]).finish(secs(300));
        assert_eq!(said, vec![format!("fork-kill {FAIR_FORKS} killed")]);
        drop(storm);
        let finished = watch.stop(libc::SIGINT);
        let end = finished.end.unwrap_or_else(|| panic!("no end line: {}", finished.stderr));
        eprintln!("{FAIR_FORKS} forks killed beside a removal storm the loop could not keep up with; end line: {end}");
        // The kernel kept every record of the lifecycle's ring...
        assert_eq!(end_number(&end, "lifecycle_lost"), 0, "lifecycle records lost beside the storm: {end}\n{}", finished.stderr);
        // ... and podstuck took them all: at least the kills and exits the
        // test made (the node's other processes may add theirs).
        let seen = |kind: &str| end["lifecycle_seen"][kind].as_u64().unwrap_or(0);
        assert!(seen("signal") >= FAIR_FORKS as u64 && seen("exit") >= FAIR_FORKS as u64, "{FAIR_FORKS} kills and exits made: {end}");
        // The trial was what it says: the loop fell behind the calls.
        assert!(end_number(&end, "queue_full") >= 1, "{end}");
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
