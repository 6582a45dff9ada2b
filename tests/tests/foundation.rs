//! End-to-end: the real `podstuck watch --json` on the real kernel sees the
//! calls that keep pods stuck, with the right errno, path, actor and flags;
//! it reports what it cannot do; and it leaves no program loaded when it
//! stops. Runs as root; see `kernel_test!` for the skip rule.

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use podstuck_tests::*;
use serde_json::Value;

fn by_thread<'a>(events: &'a [Value], tid: i32, syscall: &str) -> Vec<&'a Value> {
    events.iter().filter(|e| e["tid"] == tid && e["syscall"] == syscall).collect()
}

fn has(events: &[Value], tid: i32, syscall: &str, count: usize) -> bool {
    by_thread(events, tid, syscall).len() >= count
}

/// This process's mount namespace inode and cgroup v2 id, as the kernel
/// programs should report them.
fn own_mntns_and_cgroup() -> (u64, u64) {
    let mntns = std::fs::metadata("/proc/self/ns/mnt").unwrap().ino();
    let cgroups = std::fs::read_to_string("/proc/self/cgroup").unwrap();
    let v2 = cgroups.lines().find_map(|l| l.strip_prefix("0::")).expect("a cgroup v2 line");
    let cgroup_id = std::fs::metadata(format!("{}{v2}", cgroup2_root().display())).unwrap().ino();
    (mntns, cgroup_id)
}

fn parent_comm() -> (u32, String) {
    let ppid = std::os::unix::process::parent_id();
    let comm = std::fs::read_to_string(format!("/proc/{ppid}/comm")).unwrap().trim_end().to_string();
    (ppid, comm)
}

kernel_test! {
    fn removing_a_mountpoint_gives_ebusy_for_rmdir_and_unlinkat(test) {
        let dir = test.scratch();
        let mountpoint = dir.path().join("mount");
        let _mount = TmpfsMount::new(&mountpoint, "size=1m");
        let parent = std::fs::File::open(dir.path()).unwrap();
        let watch = Watch::start(&[]);
        let (tid, comm) = this_thread();

        assert_eq!(sys_rmdir(&cstring(&mountpoint)), libc::EBUSY);
        let name = CString::new("mount").unwrap();
        assert_eq!(sys_unlinkat(parent.as_raw_fd(), &name, libc::AT_REMOVEDIR), libc::EBUSY);

        let done = stop_when(watch, |e| has(e, tid, "rmdir", 1) && has(e, tid, "unlinkat", 1));
        assert!(done.status.success(), "podstuck failed: {}", done.stderr);
        let (mntns, cgroup_id) = own_mntns_and_cgroup();
        let (ppid, pcomm) = parent_comm();

        let rmdir = by_thread(&done.events, tid, "rmdir");
        assert_eq!(rmdir.len(), 1, "{rmdir:?}");
        let rmdir = rmdir[0];
        assert_eq!(path_bytes(rmdir), mountpoint.as_os_str().as_encoded_bytes());
        assert_eq!(rmdir["errno"], "EBUSY");
        assert_eq!(rmdir["ret"], -16);
        assert_eq!(rmdir["pid"], std::process::id());
        assert_eq!(rmdir["comm"], comm.as_str());
        assert_eq!(rmdir["ppid"], ppid);
        assert_eq!(rmdir["pcomm"], pcomm.as_str());
        assert_eq!(rmdir["dfd"], "AT_FDCWD");
        assert_eq!(rmdir["mntns"], mntns);
        assert_eq!(rmdir["cgroup_id"], cgroup_id);
        assert_eq!(rmdir["path_status"], "whole");

        let unlinkat = by_thread(&done.events, tid, "unlinkat");
        assert_eq!(unlinkat.len(), 1, "{unlinkat:?}");
        let unlinkat = unlinkat[0];
        assert_eq!(unlinkat["path"], "mount");
        assert_eq!(unlinkat["dfd"], parent.as_raw_fd());
        assert_eq!(unlinkat["flags"], serde_json::json!(["AT_REMOVEDIR"]));
        assert_eq!(unlinkat["errno"], "EBUSY");
        assert!(is_mountpoint(&mountpoint), "podstuck must not change the node");
    }
}

kernel_test! {
    fn unlinking_an_immutable_file_gives_eperm(test) {
        let dir = test.scratch();
        let file = dir.path().join("diff-locked");
        std::fs::write(&file, b"layer content").unwrap();
        let _flag = Immutable::set(&file);
        let watch = Watch::start(&[]);
        let (tid, _) = this_thread();

        assert_eq!(sys_unlinkat(libc::AT_FDCWD, &cstring(&file), 0), libc::EPERM);

        let done = stop_when(watch, |e| has(e, tid, "unlinkat", 1));
        let events = by_thread(&done.events, tid, "unlinkat");
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(path_bytes(events[0]), file.as_os_str().as_encoded_bytes());
        assert_eq!(events[0]["errno"], "EPERM");
        assert_eq!(events[0]["ret"], -1);
        assert_eq!(events[0]["flags"], serde_json::json!([]));
        assert!(file.exists());
    }
}

kernel_test! {
    fn umount2_busy_not_mounted_and_detach(test) {
        let dir = test.scratch();
        let mountpoint = dir.path().join("held");
        let plain = dir.path().join("plain");
        std::fs::create_dir(&plain).unwrap();
        let _mount = TmpfsMount::new(&mountpoint, "size=1m");
        let held_open = std::fs::File::create(mountpoint.join("open-file")).unwrap();
        let watch = Watch::start(&[]);
        let (tid, _) = this_thread();

        assert_eq!(sys_umount2(&cstring(&mountpoint), 0), libc::EBUSY);
        assert_eq!(sys_umount2(&cstring(&plain), 0), libc::EINVAL);
        assert_eq!(sys_umount2(&cstring(&mountpoint), libc::MNT_DETACH), 0);
        drop(held_open);

        let done = stop_when(watch, |e| has(e, tid, "umount2", 3));
        let calls = by_thread(&done.events, tid, "umount2");
        assert_eq!(calls.len(), 3, "{calls:?}");
        assert_eq!(path_bytes(calls[0]), mountpoint.as_os_str().as_encoded_bytes());
        assert_eq!(calls[0]["errno"], "EBUSY");
        assert_eq!(calls[0]["flags"], serde_json::json!([]));
        assert_eq!(path_bytes(calls[1]), plain.as_os_str().as_encoded_bytes());
        assert_eq!(calls[1]["errno"], "EINVAL");
        assert_eq!(calls[2]["flags"], serde_json::json!(["MNT_DETACH"]));
        assert_eq!(calls[2]["flags_raw"], 2);
        assert_eq!(calls[2]["ret"], 0);
        assert_eq!(calls[2]["errno"], Value::Null);
    }
}

kernel_test! {
    fn a_successful_unlink_has_ret_zero_and_a_latency(test) {
        let dir = test.scratch();
        let file = dir.path().join("file");
        std::fs::write(&file, b"x").unwrap();
        let watch = Watch::start(&[]);
        let (tid, _) = this_thread();

        assert_eq!(sys_unlink(cstring(&file).as_ptr()), 0);

        let done = stop_when(watch, |e| has(e, tid, "unlink", 1));
        let events = by_thread(&done.events, tid, "unlink");
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!(events[0]["ret"], 0);
        assert_eq!(events[0]["errno"], Value::Null);
        assert!(events[0]["latency_ns"].as_u64().unwrap() > 0);
        let ts = humantime_ok(events[0]["ts"].as_str().unwrap());
        assert!(ts, "ts is RFC 3339 with nanoseconds: {}", events[0]["ts"]);
        let end = done.end.expect("closing line");
        assert!(end["calls"]["unlink"].as_u64().unwrap() >= 1);
        assert!(end["events_seen"].as_u64().unwrap() >= 1);
    }
}

fn humantime_ok(ts: &str) -> bool {
    // 2026-11-22T14:59:41.626844571Z
    ts.len() == 30 && ts.ends_with('Z') && ts.as_bytes()[10] == b'T' && ts.as_bytes()[19] == b'.'
}

kernel_test! {
    fn long_paths_arrive_whole_and_too_long_ones_are_flagged(test) {
        let dir = test.scratch();
        // Build a real 4000-byte path out of 250-byte components.
        let mut path = dir.path().to_path_buf();
        while path.as_os_str().len() + 1 + 250 < 4000 - 20 {
            path.push("d".repeat(250));
            std::fs::create_dir(&path).unwrap();
        }
        let leaf_len = 4000 - path.as_os_str().len() - 1;
        path.push("f".repeat(leaf_len));
        assert_eq!(path.as_os_str().len(), 4000);
        std::fs::write(&path, b"x").unwrap();
        let too_long = format!("{}/{}", dir.path().display(), "x/".repeat(2600));
        let watch = Watch::start(&[]);
        let (tid, _) = this_thread();

        assert_eq!(sys_unlink(cstring(&path).as_ptr()), 0);
        assert_eq!(sys_unlink(CString::new(too_long.clone()).unwrap().as_ptr()), libc::ENAMETOOLONG);
        // A pointer the kernel cannot read: EFAULT, and podstuck says why the path is missing.
        assert_eq!(sys_unlink(8 as *const libc::c_char), libc::EFAULT);

        let done = stop_when(watch, |e| has(e, tid, "unlink", 3));
        let calls = by_thread(&done.events, tid, "unlink");
        assert_eq!(calls.len(), 3, "{calls:?}");
        assert_eq!(path_bytes(calls[0]), path.as_os_str().as_encoded_bytes(), "the 4000-byte path arrives whole");
        assert_eq!(calls[0]["path_status"], "whole");
        assert_eq!(calls[0]["ret"], 0);
        assert_eq!(calls[1]["errno"], "ENAMETOOLONG");
        assert_eq!(calls[1]["path_status"], "too-long");
        assert_eq!(path_bytes(calls[1]), &too_long.as_bytes()[..4095]);
        assert_eq!(calls[2]["errno"], "EFAULT");
        assert_eq!(calls[2]["path_status"], "unreadable");
        assert!(done.end.unwrap()["paths_unreadable"].as_u64().unwrap() >= 1);
    }
}

fn assert_programs_unloaded(ids: &[u32]) {
    // Program memory is freed after an RCU grace period: allow a moment.
    wait_until(&format!("programs {ids:?} to be unloaded once podstuck exited"), Duration::from_secs(10), || {
        !ids.iter().any(|&id| program_loaded(id))
    });
}

fn program_ids(start: &Value) -> Vec<u32> {
    let ids: Vec<u32> = start["program_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    let attach = start["attach"].as_str().unwrap_or_default();
    assert_eq!(
        ids.len(),
        programs_attached(attach),
        "four syscalls, enter and exit each, the lifecycle's three (exec, exit, signal) and kubelet's connects, on {attach}"
    );
    ids
}

kernel_test! {
    fn signals_detach_every_program() {
        for (signal, name) in [(libc::SIGINT, "SIGINT"), (libc::SIGTERM, "SIGTERM")] {
            let watch = Watch::start(&[]);
            let ids = program_ids(&watch.start);
            assert!(ids.iter().all(|&id| program_loaded(id)));
            let done = watch.stop(signal);
            assert!(done.status.success(), "{name}: {:?} {}", done.status, done.stderr);
            let end = done.end.unwrap_or_else(|| panic!("{name}: no closing line"));
            assert_eq!(end["stopped_by"], name);
            assert!(end["events_lost"].is_u64() && end["events_seen"].is_u64());
            assert_programs_unloaded(&ids);
        }
        // Even SIGKILL leaves nothing behind: nothing is pinned.
        let watch = Watch::start(&[]);
        let ids = program_ids(&watch.start);
        let _ = watch.stop(libc::SIGKILL);
        assert_programs_unloaded(&ids);
    }
}

kernel_test! {
    fn text_mode_prints_one_plain_line_per_call_and_stops_after_duration(test) {
        let dir = test.scratch();
        let mountpoint = dir.path().join("vol");
        let _mount = TmpfsMount::new(&mountpoint, "size=1m");
        // Text mode has no start line on stdout: attached once its banner,
        // on stderr, says "Ctrl-C to stop".
        let podstuck = Attached::spawn(Command::new(podstuck_binary()).args(["watch", "--calls", "--concurrent", "--duration", "4s"]));
        assert_eq!(sys_rmdir(&cstring(&mountpoint)), libc::EBUSY);
        let out = podstuck.finish(Duration::from_secs(60));
        // The directory is still mounted when --duration ends, its failed
        // rmdir seen: a critical finding still active, exit 3, and the
        // finding's block among the call lines.
        assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8_lossy(&out.stdout);
        assert!(stdout.contains(&format!("  fix:      umount -- {}\n", shell_word(&mountpoint))), "{stdout}");
        let line = stdout
            .lines()
            .find(|l| l.ends_with(mountpoint.to_str().unwrap()) && l.contains(" rmdir "))
            .unwrap_or_else(|| panic!("no rmdir line in:\n{stdout}"));
        assert!(line.contains("EBUSY"), "{line}");
        assert!(stdout.lines().last().unwrap().starts_with("podstuck: "), "summary last:\n{stdout}");
        assert!(String::from_utf8_lossy(&out.stderr).contains("Ctrl-C to stop"));
    }
}

/// Runs podstuck in a private mount namespace prepared by `setup` (a shell
/// snippet), so a missing tracefs or BTF can be staged without touching the
/// node; returns (exit code, stderr).
fn podstuck_in_private_namespace(setup: &str) -> (i32, String) {
    let script = format!("{setup}; exec \"$0\" watch --json --duration 1s");
    let out = Command::new("unshare")
        .args(["--mount", "--propagation", "private", "sh", "-c", &script])
        .arg(podstuck_binary())
        .output()
        .expect("run unshare");
    (out.status.code().unwrap_or(-1), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// A copy of `binary` in `dir` that nobody may run: the binary under test
/// may lie where only root can enter (a clone under /root, which is
/// 0700), and exec as nobody would fail there with "permission denied"
/// before podstuck says anything. `dir` and the copy are made 0755, and
/// every directory above `dir` must let others through.
fn copy_for_nobody(binary: &Path, dir: &Path) -> PathBuf {
    use std::os::unix::fs::PermissionsExt;
    let everyone = std::fs::Permissions::from_mode(0o755);
    std::fs::set_permissions(dir, everyone.clone()).unwrap();
    for above in dir.ancestors().skip(1) {
        let mode = std::fs::metadata(above).unwrap().mode();
        assert!(mode & 0o001 != 0, "{} (mode {mode:o}) keeps nobody out of {}", above.display(), dir.display());
    }
    let copy = dir.join("podstuck");
    std::fs::copy(binary, &copy).unwrap_or_else(|e| panic!("copy {} to {}: {e}", binary.display(), copy.display()));
    std::fs::set_permissions(&copy, everyone).unwrap();
    copy
}

kernel_test! {
    fn missing_tracefs_btf_or_privileges_are_explained(test) {
        let (code, stderr) =
            podstuck_in_private_namespace("umount /sys/kernel/tracing 2>/dev/null; umount /sys/kernel/debug 2>/dev/null; true");
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains("tracefs is not mounted"), "{stderr}");
        assert!(stderr.contains("mount -t tracefs nodev /sys/kernel/tracing"), "{stderr}");

        let (code, stderr) = podstuck_in_private_namespace("mount -t tmpfs none /sys/kernel/btf");
        assert_eq!(code, 2, "{stderr}");
        assert!(stderr.contains("no BTF"), "{stderr}");

        // Without root: setuid to nobody drops every capability. nobody
        // runs a copy it can reach, from where it can reach it.
        let scratch = test.scratch();
        let binary = copy_for_nobody(&podstuck_binary(), scratch.path());
        let out = Command::new(&binary)
            .args(["watch", "--json"])
            .current_dir(scratch.path())
            .uid(65534)
            .gid(65534)
            .output()
            .expect("run podstuck as nobody");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("run as root") && stderr.contains("CAP_BPF"), "{stderr}");
        assert!(out.stdout.is_empty());
        assert!(Path::new("/sys/kernel/btf/vmlinux").exists(), "the host namespace is untouched");
    }
}

use std::os::unix::process::CommandExt;

kernel_test! {
    fn a_second_podstuck_is_refused_unless_concurrent() {
        let first = Watch::start(&[]);
        let out = Command::new(podstuck_binary()).args(["watch", "--duration", "1s"]).output().expect("run podstuck");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(2), "{stderr}");
        assert!(stderr.contains("already tracing this node"), "{stderr}");
        assert!(stderr.contains("--concurrent"), "{stderr}");
        // The pid of one podstuck already tracing is named (tests run side by side: any of them).
        assert!(stderr.contains("(pid "), "{stderr}");
        let both = Command::new(podstuck_binary()).args(["watch", "--json", "--concurrent", "--duration", "1s"]).output().expect("run podstuck");
        // The whole node: another test's still-mounted volume may be active
        // at the end (exit 3); refusing to run would be exit 2.
        let ran = both.status.success() || both.status.code() == Some(3);
        assert!(ran, "{:?}: {}", both.status, String::from_utf8_lossy(&both.stderr));
        first.stop(libc::SIGTERM);
    }
}

kernel_test! {
    /// `--btf` for kernels without /sys/kernel/btf/vmlinux: a missing, empty or
    /// foreign file is refused before anything loads; a real one is used.
    fn a_bad_btf_file_is_refused_before_anything_loads_and_a_good_one_is_used(test) {
        let scratch = test.scratch();
        let empty = scratch.path().join("empty.btf");
        std::fs::write(&empty, b"").unwrap();
        for bad in [scratch.path().join("missing.btf"), empty, PathBuf::from("/bin/sh")] {
            let out = Command::new(podstuck_binary()).args(["watch", "--json", "--concurrent", "--btf"]).arg(&bad).output().unwrap();
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{}: {stderr}", bad.display());
            assert!(stderr.contains("is no usable kernel BTF file") && stderr.contains("this very kernel"), "{stderr}");
            assert!(out.stdout.is_empty(), "nothing traced with {}", bad.display());
        }
        let copy = scratch.path().join("vmlinux.btf");
        std::fs::copy("/sys/kernel/btf/vmlinux", &copy).unwrap();
        let copy_arg = copy.to_str().unwrap().to_string();
        let watch = Watch::start(&["--btf", &copy_arg]);
        assert!(
            watch.start["degraded"].as_array().unwrap().iter().any(|d| d.as_str().unwrap().contains(&copy_arg)),
            "{}",
            watch.start
        );
        let done = watch.stop(libc::SIGINT);
        assert!(done.status.success(), "{}", done.stderr);
    }
}

/// The tasks that read for podstuck `pid`, with their states: its own
/// threads and its children (its readers, named podstuck-read).
fn readers_of(pid: i32) -> Vec<(u32, char)> {
    let mut readers = Vec::new();
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).into_iter().flatten().flatten().map(|e| e.path());
    let processes = std::fs::read_dir("/proc").unwrap().flatten().map(|e| e.path());
    for dir in tasks.chain(processes) {
        let Some(id) = dir.file_name().and_then(|n| n.to_str()?.parse::<u32>().ok()) else { continue };
        let Ok(stat) = std::fs::read_to_string(dir.join("stat")) else { continue };
        // "pid (comm) state ppid ...": the name may hold spaces and parentheses.
        let Some((head, rest)) = stat.rsplit_once(") ") else { continue };
        let mut fields = rest.split_whitespace();
        let state = fields.next().and_then(|s| s.chars().next()).unwrap_or('?');
        let parent: i32 = fields.next().and_then(|p| p.parse().ok()).unwrap_or(0);
        let thread = dir.parent().is_some_and(|p| p.ends_with("task"));
        if thread || (parent == pid && head.ends_with("(podstuck-read")) {
            readers.push((id, state));
        }
    }
    readers
}

/// Whether process `pid` has exited, every thread of it, its status not yet
/// collected: a leader that has exited shows as a zombie while a thread of
/// its own still sleeps in the kernel.
fn exited(pid: i32) -> bool {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).map(|t| t.count()).unwrap_or(0);
    tasks <= 1 && task_state(pid as u32).is_none_or(|state| state == 'Z')
}

kernel_test! {
    /// Issue 38: a stop while a read of the node is stuck in the kernel
    /// ends, within 20 s on a loaded machine, and says which read it left.
    /// The read is a lookup in a FUSE directory that a call hung on the
    /// stopped daemon holds locked: it sleeps uninterruptibly (D), and a
    /// process is not reaped while a thread of its own sleeps so, so
    /// podstuck reads in processes of their own. Both cores are kept busy.
    fn a_stop_with_a_read_of_the_node_stuck_in_the_kernel_ends_and_says_what_it_left(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let uid = pod.uid();
        let mount = pod.create_csi_volume("pvc-fuse").join("mount");
        // The root's attributes kept: podstuck's reader stats each
        // directory it walks through (it follows no link), and a stat of
        // the root asking the stopped server would wait interruptibly;
        // kept, the reader goes on to the lookup of `d`, and sleeps there.
        let fuse = FuseMount::start_keeping_root_attributes(&mount);
        let dir = mount.join("d");
        // The same directory by a path outside the pod, which podstuck (--pod) does not follow.
        let alias = scratch.path().join("alias");
        std::os::unix::fs::symlink(&mount, &alias).unwrap();
        // --hung-after 60s: no hung call is named, which would keep podstuck
        // away from the mount, before its next check reads there.
        let mut watch = Watch::start(&["--findings", "--hung-after", "60s", "--kubelet-root", root.arg(), "--pod", uid]);
        // A driver unmounting what is no mount: each check of it (every 5 s) reads the directory.
        let driver = start_actor(["--comm", "hostpathplugin", "--backoff-ms", "500", "--repeat", "0", "umount", text(&dir)]);
        watch.await_finding(Duration::from_secs(60), |f| f["kind"] == "not-mounted", |e| e.eq("/paths/0", text(&dir)));
        drop(driver);
        // Removed once while the daemon answers (it keeps the directory), the
        // kernel forgets `d`: the next lookup of it asks the daemon afresh.
        let (_, removed) = start_actor(["rmdir", text(&alias.join("d"))]).finish(Duration::from_secs(10));
        assert_eq!(removed, vec!["rmdir ok".to_string()]);
        // The removal made the kernel forget the root's attributes: asked
        // once more while the daemon answers, and kept from now on.
        std::fs::metadata(&mount).unwrap();
        // The daemon stops; kubelet's removal then waits for its lookup of
        // `d` with the mount's root locked, and every other lookup there
        // waits for that lock, uninterruptibly.
        fuse.stop_server();
        let kubelet = start_actor(["--comm", "kubelet", "rmdir", text(&alias.join("d"))]);
        poll_until("kubelet's rmdir to wait for the daemon", Duration::from_secs(10), || {
            (wchan(kubelet.pid()) == "request_wait_answer").then_some(())
        });
        // podstuck's next check of the driver's unmounts reads the directory:
        // that read sleeps uninterruptibly.
        let mut seen = std::collections::BTreeSet::new();
        let reader = poll_until("a read of podstuck's to sleep uninterruptibly in the kernel", Duration::from_secs(30), || {
            let readers = readers_of(watch.pid());
            seen.extend(readers.iter().copied());
            readers.into_iter().find(|(_, state)| *state == 'D').map(|(pid, _)| pid)
        });
        let hogs: Vec<Process> = (0..2).map(|_| Process::spawn(Command::new("sh").args(["-c", "while :; do :; done"]))).collect();
        // Waited for here, not in watch.stop: if podstuck cannot exit, the
        // panic drops kubelet (declared after watch) first, which frees the
        // lock and lets podstuck be reaped.
        // SAFETY: kill(2) on our own child.
        unsafe { libc::kill(watch.pid(), libc::SIGINT) };
        wait_until("podstuck to exit within 20 s of SIGINT", Duration::from_secs(20), || exited(watch.pid()));
        drop(hogs);
        let done = watch.stop(libc::SIGINT);
        assert!(done.status.success(), "{:?} {}", done.status, done.stderr);
        let left = format!("left its read of {} unanswered, in reader process {reader}", dir.display());
        assert!(done.stderr.contains(&left), "podstuck should say it left the read ({left}): {}", done.stderr);
        assert_eq!(task_state(reader), Some('D'), "the reader outlives podstuck, asleep in the kernel (readers seen: {seen:?})");
        // kubelet's rmdir killed, the lock is free: the reader ends, and the connection is aborted.
        drop(kubelet);
        drop(fuse);
    }
}

kernel_test! {
    fn attach_cost_variants_count_every_call_and_carry_the_entry(test) {
        // The bench's variants (the clocks; the clocks and the per-thread
        // entry) price an exact latency: they must see every call, and the
        // entry's exit counts only a call whose entry came back.
        let dir = test.scratch();
        let calls = 300;
        for mechanism in ["tracepoint", "tracepoint-clocks", "tracepoint-entry"] {
            let mut child = Command::new(podstuck_binary())
                .args(["attach-cost", mechanism, "--kernel-cost"])
                .stdout(std::process::Stdio::piped())
                .stderr(std::process::Stdio::piped())
                .spawn()
                .expect("spawn podstuck attach-cost");
            let mut stderr = std::io::BufReader::new(child.stderr.take().unwrap());
            let mut said = String::new();
            std::io::BufRead::read_line(&mut stderr, &mut said).unwrap();
            assert!(said.contains("attached"), "{mechanism}: {said}");
            for i in 0..calls {
                let path = dir.path().join(format!("d{i}"));
                std::fs::create_dir(&path).unwrap();
                assert_eq!(sys_unlinkat(libc::AT_FDCWD, &cstring(&path), libc::AT_REMOVEDIR), 0);
            }
            // SAFETY: a signal to our own child.
            unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
            let out = child.wait_with_output().unwrap();
            assert!(out.status.success(), "{mechanism}: {:?}", out.status);
            let line: Value = serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{mechanism}: {e}"));
            for counted in ["entries", "exits"] {
                assert!(line[counted].as_u64().unwrap() >= calls, "{mechanism}: {line}");
            }
            let programs = line["programs"].as_array().unwrap();
            assert_eq!(programs.len(), 2, "{mechanism}: {line}");
            for program in programs {
                assert!(program["runs"].as_u64().unwrap() >= calls, "{mechanism}: {line}");
                assert!(program["run_time_ns"].as_u64().unwrap() > 0, "{mechanism}: {line}");
            }
        }
    }
}
