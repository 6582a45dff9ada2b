//! `unkillable-task` (P14): a pod's process that SIGKILL does not end, its
//! one thread, or its second thread after its leader died, waiting on a
//! FUSE request the server read and never answers; the finding names the
//! connection to abort, and its fix, run as printed, ends the task and the
//! finding.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;

use podstuck_tests::findings::{apply_fix, assert_told_in_order};
use podstuck_tests::*;

use super::{secs, signal, start_of, watch_pods, StuckFuseLab, FINDING_TIMEOUT, FUSECTL};

kernel_test! {
    /// Issue 40's unkillable case: kubelet's SIGKILL to a pod's process
    /// waiting on a FUSE request its daemon read and never answers. The
    /// kernel waits for that answer uninterruptibly, SIGKILL or not; the
    /// finding names the connection to abort, and its fix, run as printed,
    /// ends the task and the finding.
    fn a_task_waiting_on_an_unanswered_fuse_request_is_unkillable_until_the_connection_is_aborted(test) {
        let lab = StuckFuseLab::new(&test);
        let (uid, cgroup, fuse) = (lab.pod.uid().to_string(), &lab.cgroup, &lab.fuse);
        let mut watch = watch_pods(&lab.root, &[&lab.pod]);

        let mountpoint = shell_word(&lab.fuse_dir());
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
        // Until the server has read the request, the kill takes it back.
        fuse.wait_held(1, secs(10));

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
        let lab = StuckFuseLab::new(&test);
        let (uid, fuse) = (lab.pod.uid().to_string(), &lab.fuse);
        let mut watch = watch_pods(&lab.root, &[&lab.pod]);

        let (stuck, tid) = lab.thread_waiting_on_fuse();
        let pid = stuck.pid();
        let start = start_of(pid);

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
    }
}

/// The children of `pid`, by the kernel's list.
fn children(pid: u32) -> Vec<u32> {
    let list = std::fs::read_to_string(format!("/proc/{pid}/task/{pid}/children")).unwrap_or_default();
    list.split_whitespace().filter_map(|c| c.parse().ok()).collect()
}

/// The survivor's finding, active and confirmed on pod `uid`, names the
/// held init as why its container cannot end; its fix is `abort`.
fn the_survivor_is_why_the_container_cannot_end(e: &mut Expect, uid: &str, init: u32, abort: &str) {
    e.eq("/status", "active");
    e.eq("/confidence", "confirmed");
    e.eq("/pod_uid", uid);
    e.eq("/details/init_pid", init);
    e.contains(
        "/summary",
        &format!("It is why its container cannot end: the container's init, sleep (pid {init}), has exited and waits in zap_pid_ns_processes"),
    );
    e.eq("/fix", abort);
}

/// The init's child `stat`, once it waits on the FUSE server.
fn survivor_waiting_on_fuse(init: u32) -> u32 {
    poll_until_else("stat, the init's child, to wait on the FUSE server", secs(10), || {
        let stat = children(init).into_iter().find(|c| comm(*c) == "stat");
        match stat {
            Some(pid) if wchan(pid).contains("request_wait_answer") => Ok(pid),
            other => Err(format!("children of {init}: {:?}, stat {other:?}", children(init))),
        }
    })
}

/// Waits for the SIGKILLed init to have reaped what it can: its stack is
/// do_wait's, under zap_pid_ns_processes, while `survivor` lives in D.
fn init_held_in_zap(init: u32, survivor: u32) {
    let stack = || std::fs::read_to_string(format!("/proc/{init}/stack")).unwrap_or_default();
    poll_until_else("the init to wait in zap_pid_ns_processes, stat in D", secs(10), || {
        match stack().contains("zap_pid_ns_processes") && task_state(survivor) == Some('D') {
            true => Ok(()),
            false => Err(format!("init stack {:?}, stat {:?}", stack(), task_state(survivor))),
        }
    });
}

fn comm(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default().trim().to_string()
}

kernel_test! {
    /// Issue 63's container that will not end (containerd #11133): the
    /// init of a container's PID namespace is SIGKILLed while another of
    /// its tasks waits on a FUSE request the server read and never
    /// answers. The init exits into zap_pid_ns_processes and stays there
    /// (the runtime never sees the container exit); the survivor is named
    /// as the reason, and the abort it prints ends both.
    fn a_survivor_in_d_keeps_the_containers_init_in_zap_pid_ns_processes_and_is_named_as_why(test) {
        let lab = StuckFuseLab::new(&test);
        let (uid, cgroup, fuse) = (lab.pod.uid().to_string(), &lab.cgroup, &lab.fuse);
        let mut watch = watch_pods(&lab.root, &[&lab.pod]);

        let inner = format!("cd {} && stat never & exec sleep 1000", shell_word(&lab.fuse_dir()));
        let unshare = cgroup.run(&format!("exec unshare --pid --fork sh -c {}", shell_word(Path::new(&inner))));
        let init = poll_until("the container's init (sleep, pid 1 of its namespace)", secs(10), || {
            children(unshare.pid()).into_iter().find(|c| comm(*c) == "sleep")
        });
        let survivor = survivor_waiting_on_fuse(init);
        let start = start_of(survivor);
        fuse.wait_held(1, secs(10));

        signal(init, libc::SIGKILL);
        init_held_in_zap(init, survivor);
        let id = format!("unkillable-task:{survivor}@{start}");
        let abort = format!("echo 1 > {FUSECTL}/{}/abort", fuse.connection());
        let finding = watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(), |f| f["id"] == id.as_str(), |e| {
            the_survivor_is_why_the_container_cannot_end(e, &uid, init, &abort);
            e.that(e.mentions("/evidence", "zap_pid_ns_processes"), "the evidence quotes where the init waits");
        });
        eprintln!("finding: {finding}");
        apply_fix(&finding);
        let (status, _) = unshare.finish(secs(10));
        assert!(!alive(init) && !alive(survivor), "the abort should end the survivor and so the init (unshare: {status})");
        watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(), |f| f["id"] == id.as_str(), |e| {
            e.eq("/status", "resolved");
        });
        let done = watch.stop(libc::SIGINT);
        assert!(done.status.success(), "podstuck failed: {}", done.stderr);
    }
}

kernel_test! {
    /// Issue 63's container that will not end, with the real runtime
    /// (Debian's containerd and runc): a container whose init's child
    /// waits on a FUSE request the server read and never answers (the
    /// FUSE mount bound in with `--mount`), in a pod's cgroups (`ctr run
    /// --cgroup`, as kubelet's cgroupfs driver names them). `ctr task kill
    /// -s SIGKILL` leaves the init in zap_pid_ns_processes, the task
    /// RUNNING, and `ctr task rm` failing; podstuck names the child as
    /// why, and the abort it prints lets `ctr task rm` work.
    fn a_real_containers_init_held_by_a_survivor_in_d_is_named_and_its_fix_lets_ctr_task_rm_work(test) {
        // Declared first, dropped last: the pod's cgroups in every
        // hierarchy, removed once the lab's FUSE server (dropped before
        // them) has let the container's tasks end.
        let mut cgroups: Vec<CgroupDirs> = Vec::new();
        let lab = StuckFuseLab::new(&test);
        let scratch = test.scratch();
        let Some(containerd) = Containerd::start(scratch.path(), test.name()) else { return };
        let uid = lab.pod.uid().to_string();
        let id = format!("zap-{}", containerd.name());
        let parent = scratch.path().file_name().unwrap().to_string_lossy().into_owned();
        let cgroup = format!("/{parent}/kubepods/besteffort/pod{uid}/{id}");
        for hierarchy in mountinfo::here().into_iter().filter(|m| m.fstype == "cgroup" || m.fstype == "cgroup2") {
            cgroups.push(CgroupDirs::create(&hierarchy.mount_point.join(&cgroup[1..])));
        }
        let mut watch = watch_pods(&lab.root, &[&lab.pod]);

        let fuse = format!("type=bind,src={},dst=/fuse,options=rbind:rw", lab.fuse_dir().display());
        let flags = ["--cgroup".to_string(), cgroup.clone(), "--mount".to_string(), fuse];
        containerd.run_detached_with(&flags, &id, &["sh", "-c", "stat /fuse/never & exec sleep 1000"]);
        containerd.wait_task_status(&id, "RUNNING", secs(20));
        let init = containerd.task_pid(&id).expect("ctr task ls lists the task's pid");
        let in_pod = std::fs::read_to_string(format!("/proc/{init}/cgroup")).unwrap_or_default();
        assert!(in_pod.contains(&format!("pod{uid}")), "fixture: the container runs in the pod's cgroups: {in_pod}");
        let survivor = survivor_waiting_on_fuse(init);
        let start = start_of(survivor);
        lab.fuse.wait_held(1, secs(10));

        containerd.ctr(&["task", "kill", "-s", "SIGKILL", &id]);
        init_held_in_zap(init, survivor);
        assert_eq!(containerd.task_status(&id).as_deref(), Some("RUNNING"), "the runtime never sees the exit");
        let refused = containerd.ctr_may_fail(&["task", "rm", &id]);
        assert!(!refused.status.success(), "ctr task rm should fail while the init is held: {refused:?}");

        let finding_id = format!("unkillable-task:{survivor}@{start}");
        let abort = format!("echo 1 > {FUSECTL}/{}/abort", lab.fuse.connection());
        let finding =
            watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(), |f| f["id"] == finding_id.as_str(), |e| {
                the_survivor_is_why_the_container_cannot_end(e, &uid, init, &abort);
            });
        eprintln!("finding: {finding}");
        apply_fix(&finding);
        containerd.wait_task_status(&id, "STOPPED", secs(20));
        containerd.ctr(&["task", "rm", &id]);
        containerd.ctr(&["containers", "rm", &id]);
        watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(), |f| f["id"] == finding_id.as_str(), |e| {
            e.eq("/status", "resolved");
        });
        let done = watch.stop(libc::SIGINT);
        assert!(done.status.success(), "podstuck failed: {}", done.stderr);
    }
}
