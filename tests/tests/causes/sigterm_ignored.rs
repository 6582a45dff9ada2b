//! `sigterm-ignored` (P13): a pod's process that SIGTERM does not end, a
//! PID namespace's init with no handler, told until SIGKILL; and its near
//! misses, never told: a process that exits on SIGTERM, a graceful drain
//! within its grace period, and a SIGTERM to a process already dying (of a
//! SIGKILL, or of a signal podstuck does not follow), its thread in D on a
//! FUSE request: `unkillable-task`, never `sigterm-ignored`.

use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use podstuck_tests::findings::assert_told_in_order;
use podstuck_tests::*;
use serde_json::Value;

use super::{secs, signal, start_of, watch_pods, StuckFuseLab, FINDING_TIMEOUT, FUSECTL};

/// The grace period of the scenario of issue 40: kubelet's SIGKILL comes
/// 20 s after its SIGTERM. The time itself is what is under test here: the
/// init must survive all of it and the finding stay active.
const GRACE_PERIOD: Duration = Duration::from_secs(20);

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

/// The id podstuck gives a lifecycle finding about process `pid`, which
/// must be alive to be read: a pid and its start.
fn finding_id(kind: &str, pid: u32) -> String {
    format!("{kind}:{pid}@{}", start_of(pid))
}

/// The kill fix podstuck prints for process `pid`: it checks the start.
fn kill_fix(pid: u32) -> String {
    format!("[ \"$(sed 's/.*) //' /proc/{pid}/stat | cut -d' ' -f20)\" = {} ] && kill -KILL {pid}", start_of(pid))
}

/// Aborts FUSE connection N on drop. Made after the process a FUSE
/// request holds, it is dropped before it, pass or fail: the process is
/// freed first, so its own guard reaps it at once rather than giving up
/// on a task in D.
struct AbortOnDrop(u32);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::write(format!("{FUSECTL}/{}/abort", self.0), "1");
    }
}

/// Waits until process `pid` is dying with its thread `tid` left: the
/// leader exited (a zombie), the thread in D, as a fatal signal leaves a
/// process whose thread waits on an unanswered FUSE request.
fn wait_dying_with_thread_in_d(pid: u32, tid: u32) {
    poll_until_else("the leader to exit (a zombie) and its thread to wait in D", secs(10), || {
        let thread = std::fs::read_to_string(format!("/proc/{pid}/task/{tid}/stat")).unwrap_or_default();
        let thread = thread.rsplit_once(')').and_then(|(_, rest)| rest.trim_start().chars().next());
        match (task_state(pid), thread) {
            (Some('Z'), Some('D')) => Ok(()),
            other => Err(format!("leader, thread: {other:?}")),
        }
    });
}

/// The sigterm-ignored findings `done` told of process `pid`.
fn sigterm_ignored_of(done: &Finished, pid: u32) -> Vec<Value> {
    let lines = done.finding_lines.iter().chain(&done.findings);
    lines.filter(|f| f["kind"] == "sigterm-ignored" && f["details"]["pid"] == pid).cloned().collect()
}

/// `podstuck record FILE --json --findings --kubelet-root ROOT --pod UID`:
/// a watch that also saves each lifecycle event the detectors saw, as
/// the kernel program sent it.
fn record_pod(root: &KubeletRoot, pod: &Pod, file: &Path) -> Watch {
    std::fs::create_dir_all(pod.dir()).expect("create the pod's directory");
    let mut command = Command::new(podstuck_binary());
    command.arg("record").arg(file).args(["--json", "--findings", "--concurrent", "--kubelet-root", root.arg()]);
    Watch::spawn(command.args(["--pod", pod.uid()]))
}

/// Each `signal` the record at `file` holds of signal `sig` to process
/// `pid` (`tail -n +3 FILE | zcat`: one JSON entry a line).
fn recorded_signals(file: &Path, sig: i32, pid: u32) -> Vec<Value> {
    use std::io::{BufRead, Read};
    let mut reader = std::io::BufReader::new(std::fs::File::open(file).expect("open the record"));
    for _ in 0..2 {
        reader.read_line(&mut String::new()).expect("the record's two plain lines");
    }
    let mut entries = String::new();
    flate2::bufread::MultiGzDecoder::new(reader).read_to_string(&mut entries).expect("the record's entries");
    let entries = entries.lines().filter_map(|l| serde_json::from_str::<Value>(l).ok());
    let signals = entries.map(|e| e["lifecycle"]["what"]["signal"].clone());
    signals.filter(|s| s["sig"] == sig && s["target_pid"] == pid).collect()
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
        let cgroup = PodCgroup::create(scratch.path(), pod.uid());
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
        let cgroup = PodCgroup::create(scratch.path(), pod.uid());
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
        let cgroup = PodCgroup::create(scratch.path(), pod.uid());
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
    /// Issue 61: a SIGTERM to a process already dying is no sigterm-ignored.
    /// A process of two threads, its second waiting on a FUSE request the
    /// server read and never answers, is SIGKILLed: the leader exits, the
    /// thread stays in D. The SIGTERM that follows finds the process in
    /// group exit, and the kernel drops it (signal_generate says
    /// "ignored" from 5.17): that is no process that ignores SIGTERM.
    /// unkillable-task tells what keeps it; sigterm-ignored never does. A
    /// namespace init of the same pod, signalled after, is the barrier:
    /// once its sigterm-ignored is told, the dying process's SIGTERM was
    /// reviewed past the second it is given to exit.
    fn a_sigterm_to_a_process_already_dying_of_sigkill_is_unkillable_task_and_never_sigterm_ignored(test) {
        let lab = StuckFuseLab::new(&test);
        let cgroup = &lab.cgroup;
        let record = lab.scratch.path().join("incident.podstuck");
        let mut watch = record_pod(&lab.root, &lab.pod, &record);

        let (stuck, tid) = lab.thread_waiting_on_fuse();
        let _abort = AbortOnDrop(lab.fuse.connection());
        let pid = stuck.pid();
        let start = start_of(pid);
        signal(pid, libc::SIGKILL);
        wait_dying_with_thread_in_d(pid, tid);
        signal(pid, libc::SIGTERM);
        let (_unshare, init, _guard) = namespace_init(cgroup);
        signal(init, libc::SIGTERM);

        let id = format!("unkillable-task:{pid}@{start}");
        watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(), |f| f["id"] == id.as_str(), |e| {
            e.eq("/status", "active");
            e.eq("/confidence", "confirmed");
            e.eq("/details/tid", tid);
            e.contains("/summary", &format!("its thread {tid}"));
        });
        let barrier = finding_id("sigterm-ignored", init);
        watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(), |f| f["id"] == barrier.as_str(), |e| {
            e.eq("/confidence", "confirmed");
        });
        let done = watch.stop(libc::SIGINT);
        assert!(done.status.success(), "podstuck failed: {}", done.stderr);
        let wrong = sigterm_ignored_of(&done, pid);
        assert!(wrong.is_empty(), "a SIGTERM to a process already dying was told as sigterm-ignored: {wrong:?}");
        // Seen, and the kernel's reading at the signal: already exiting.
        let sigterms = recorded_signals(&record, libc::SIGTERM, pid);
        eprintln!("recorded SIGTERM: {sigterms:?}");
        assert!(matches!(&sigterms[..], [s] if s["group_exiting"] == true), "the record's SIGTERM to {pid}: {sigterms:?}");
        let sigkills = recorded_signals(&record, libc::SIGKILL, pid);
        assert!(matches!(&sigkills[..], [s] if s["group_exiting"] == false), "the record's SIGKILL to {pid}: {sigkills:?}");
        drop(_abort);
        let (status, _) = stuck.finish(secs(10));
        assert_eq!(status.signal(), Some(libc::SIGKILL), "the actor should end of its SIGKILL once aborted: {status}");
    }
}

kernel_test! {
    /// The same, the process's exit begun by a signal podstuck does not
    /// follow (SIGUSR1 at its default action: a fatal signal, the group
    /// exit under way, as a crash or an exit_group begins it): no SIGKILL
    /// was seen to say it is dying, so only the kernel's own reading of
    /// the target at the SIGTERM (`SIGNAL_GROUP_EXIT`) keeps sigterm-ignored
    /// silent.
    fn a_sigterm_to_a_process_whose_exit_no_sigkill_began_is_never_sigterm_ignored_by_the_kernels_reading(test) {
        let lab = StuckFuseLab::new(&test);
        let cgroup = &lab.cgroup;
        let record = lab.scratch.path().join("incident.podstuck");
        let mut watch = record_pod(&lab.root, &lab.pod, &record);

        let (stuck, tid) = lab.thread_waiting_on_fuse();
        let _abort = AbortOnDrop(lab.fuse.connection());
        let pid = stuck.pid();
        signal(pid, libc::SIGUSR1);
        wait_dying_with_thread_in_d(pid, tid);
        signal(pid, libc::SIGTERM);
        let (_unshare, init, _guard) = namespace_init(cgroup);
        signal(init, libc::SIGTERM);

        let barrier = finding_id("sigterm-ignored", init);
        watch.await_finding_shaped(FINDING_TIMEOUT, |e| e.shape_of_no_call(), |f| f["id"] == barrier.as_str(), |e| {
            e.eq("/confidence", "confirmed");
        });
        let done = watch.stop(libc::SIGINT);
        assert!(done.status.success(), "podstuck failed: {}", done.stderr);
        let wrong = sigterm_ignored_of(&done, pid);
        assert!(wrong.is_empty(), "a SIGTERM to a process already dying was told as sigterm-ignored: {wrong:?}");
        // The SIGTERM reached the detectors (the process is the pod's), and
        // the kernel read its process as exiting: that alone kept it silent.
        let sigterms = recorded_signals(&record, libc::SIGTERM, pid);
        eprintln!("recorded SIGTERM: {sigterms:?}");
        assert!(matches!(&sigterms[..], [s] if s["group_exiting"] == true), "the record's SIGTERM to {pid}: {sigterms:?}");
        assert!(recorded_signals(&record, libc::SIGKILL, pid).is_empty(), "no SIGKILL was sent");
        drop(_abort);
        let (status, _) = stuck.finish(secs(10));
        assert_eq!(status.signal(), Some(libc::SIGUSR1), "the actor should end of its SIGUSR1 once aborted: {status}");
    }
}
