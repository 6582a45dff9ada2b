//! P14, unkillable-task: SIGKILL was sent to a pod's process and the task
//! is still there seconds later. A task in uninterruptible sleep (D) takes
//! no signal until the kernel call it waits in returns: a FUSE request its
//! server read and never answered, a dead NFS server, a stuck disk. Another
//! kill does nothing; what ends it is the wait's end (the FUSE connection
//! aborted, the NFS mount forced off). Before this, cgroup-busy saw it only
//! once kubelet tried the pod cgroup's rmdir.

use std::time::{Duration, SystemTime};

use super::signalled::{Followed, Signalled, Standing};
use super::stuck_on::{fuse_mounts, fuse_wait, is_network_fs, on_fuse, on_network_fs, on_unproven_fuse, FuseWait};
use super::{human_duration, Confidence, Detector, Finding, FindingActor, Kind, Review, Severity, Status};
use crate::identify::LifecycleIdentity;
use crate::inspect::{Mount, MountNamespace, NodeInspector, Probe, TaskState, Unreadable};
use crate::lifecycle::{Lifecycle, LifecycleEvent};

/// How long a task may outlive its SIGKILL before it is told: dying takes
/// a task a few milliseconds, unless it waits in the kernel.
pub const DEAD_WITHIN: Duration = Duration::from_secs(3);
/// Stack frames quoted.
const FRAMES_QUOTED: usize = 6;
/// Where an exiting init waits for every other task of its PID namespace.
const ZAP: &str = "zap_pid_ns_processes";

#[derive(Default)]
pub struct UnkillableTask {
    killed: Signalled<()>,
}

/// Whether the task's kernel stack or wait channel names `what`.
fn waits_in(task: &TaskState, what: &[&str]) -> bool {
    task.stack.iter().chain(task.wchan.iter()).any(|frame| what.iter().any(|w| frame.contains(w)))
}

impl UnkillableTask {
    /// The finding of process `pid` as it stands (gone: told before, now
    /// resolved; unreadable: said, with no fix).
    fn finding(
        pid: u32,
        k: &Followed<()>,
        standing: Standing<'_>,
        now: SystemTime,
        node: &mut dyn NodeInspector,
    ) -> Option<Finding> {
        let key = match k.start {
            Some(start) => format!("{pid}@{}", start.ticks()),
            None => pid.to_string(),
        };
        let mut f = Finding::new(Kind::UnkillableTask, &key, Severity::Critical, k.at);
        f.last_seen = now;
        f.pod_uid = Some(k.pod.clone());
        f.pods = vec![k.pod.clone()];
        f.actor = Some(FindingActor::of(k.sender_pid, &k.sender));
        f.count = 1;
        f.detail("pid", pid);
        if let Some(start) = k.start {
            f.detail("start", start.ticks());
        }
        let waited = human_duration(now.duration_since(k.at).unwrap_or_default());
        let who = format!("{} (pid {pid})", k.comm);
        f.evidence(
            "signal_generate",
            format!("SIGKILL from {} (pid {}) to {who}, {waited} ago", k.sender.description, k.sender_pid),
        );
        let process = match standing {
            Standing::Ended => {
                f.status = Status::Resolved;
                f.summary = format!("{who} outlived its SIGKILL, then ended.");
                return Some(f);
            }
            Standing::Unreadable(why) => {
                f.confidence = Confidence::Possible;
                f.severity = Severity::Warning;
                f.summary = format!(
                    "{who} got SIGKILL {waited} ago and podstuck cannot say whether it is still there: /proc/{pid}: {}.",
                    why.said()
                );
                return Some(f);
            }
            Standing::There(process) => process,
        };
        let task = process.stuck_thread()?;
        let tid = task.tid;
        // A thread other than the leader keeps it there: the leader may be a
        // zombie already, which alone would read as "exited".
        let thread = match tid == pid {
            true => String::new(),
            false => format!(
                "its thread {tid} ({}) is still there while {}",
                task.comm,
                match process.leader() {
                    Some(l) if l.state == 'Z' => "its leader has exited (a zombie)".to_string(),
                    Some(l) => format!("its leader is {}", l.state_words()),
                    None => "its leader is gone".to_string(),
                }
            ),
        };
        let stack_file = match tid == pid {
            true => format!("/proc/{pid}/stack"),
            false => format!("/proc/{pid}/task/{tid}/stack"),
        };
        f.detail("tid", tid);
        if task.state != 'D' && waits_in(task, &[ZAP]) {
            // An init that has exited: what keeps it is another task of its
            // namespace, told on its own; this one ends with it.
            f.severity = Severity::Warning;
            f.evidence(format!("/proc/{pid}/task/{tid}/stat"), format!("thread {tid} is {}", task.waiting_words()));
            f.summary = format!(
                "{who} got SIGKILL {waited} ago and has exited, but as the init (pid 1) of its PID namespace it waits in zap_pid_ns_processes until every other task there has ended: the one that does not is told on its own (unkillable-task), and the container cannot end meanwhile."
            );
            f.fix = format!("ps -o pid,stat,wchan:32,comm --ppid {pid}");
            return Some(f);
        }
        f.evidence(
            format!("/proc/{pid}/task/{tid}/stat"),
            format!("thread {tid} ({}) of process {pid} is {}", task.comm, task.waiting_words()),
        );
        if !thread.is_empty() {
            f.evidence(
                format!("/proc/{pid}/status"),
                format!("{} thread(s); {thread}", process.thread_count.max(process.threads.len() as u32)),
            );
        }
        if !task.stack.is_empty() {
            let frames: Vec<&str> = task.stack.iter().take(FRAMES_QUOTED).map(String::as_str).collect();
            f.evidence(stack_file.clone(), frames.join(" <- "));
        }
        let still = match thread.is_empty() {
            true => format!("is still there, {}", task.waiting_words()),
            false => format!("is still there: {thread}; the thread is {}", task.waiting_words()),
        };
        let waiting = format!("{who} got SIGKILL {waited} ago and {still}");
        let namespace = match process.mntns {
            Some(ns) => node.mount_namespace(ns),
            None => Err(Unreadable::Other("its mount namespace could not be read".into())),
        };
        let verdict = Self::judge(node, &namespace, task);
        Self::tell(&mut f, node, &namespace, &verdict, &waiting, &stack_file);
        if let Some(init) = Self::init_held(node, pid) {
            Self::container_cannot_end(&mut f, &init);
        }
        Some(f)
    }

    /// The init of the task's PID namespace, where it has exited and waits
    /// for this task: the kernel keeps an exiting init in
    /// `zap_pid_ns_processes` until every task of its namespace has ended,
    /// so the runtime's shim never sees the container exit.
    fn init_held(node: &mut dyn NodeInspector, pid: u32) -> Option<TaskState> {
        node.pid_namespace_init(pid).into_iter().find(|init| waits_in(init, &[ZAP]))
    }

    /// Why the container cannot end, said on the finding of the task that
    /// keeps it: its fix (the wait's end) ends both.
    fn container_cannot_end(f: &mut Finding, init: &TaskState) {
        f.detail("init_pid", init.pid);
        let frames: Vec<&str> = init.stack.iter().take(FRAMES_QUOTED).map(String::as_str).collect();
        let stack = match frames.is_empty() {
            true => init.wchan.clone().unwrap_or_default(),
            false => frames.join(" <- "),
        };
        f.evidence(
            format!("/proc/{}/stack", init.pid),
            format!(
                "{} (pid {}), the init (pid 1) of its PID namespace, has exited and is {}: {stack}",
                init.comm,
                init.pid,
                init.state_words()
            ),
        );
        f.summary.push_str(&format!(
            " It is why its container cannot end: the container's init, {} (pid {}), has exited and waits in zap_pid_ns_processes for every task of its PID namespace, this one among them, so the runtime never sees the container exit (StopContainer times out, `ctr task rm` fails).",
            init.comm, init.pid
        ));
        f.advice.push(format!(
            "once this task ends, the init {} (pid {}) finishes its exit and the runtime can delete the container; a kill of the init does nothing more",
            init.comm, init.pid
        ));
    }

    /// What the stuck thread waits on: a FUSE connection (proven by the
    /// kernel's count, or not), its namespace's only network filesystem's
    /// server, the kernel otherwise; read in the task's own namespace.
    fn judge(node: &mut dyn NodeInspector, namespace: &Probe<MountNamespace>, task: &TaskState) -> Verdict {
        // The mounts of the task's own namespace: what it can wait on. A
        // pod's FUSE mount is not the node's only one, and the node's table
        // in its place would name another connection to abort.
        let mounts: &[Mount] = namespace.as_ref().map(|ns| ns.mounts.as_slice()).unwrap_or_default();
        let network: Vec<&Mount> = mounts.iter().filter(|m| is_network_fs(m)).collect();
        if waits_in(task, &["fuse"]) {
            return match (fuse_wait(node, &fuse_mounts(mounts)), namespace) {
                (FuseWait::Proven(m, requests), Ok(_)) => Verdict::Fuse { mount: m.clone(), requests },
                (FuseWait::Unproven(candidates), _) => {
                    Verdict::UnprovenFuse(candidates.into_iter().map(|(m, n)| (m.clone(), n)).collect())
                }
                (FuseWait::Proven(..), Err(_)) => Verdict::UnprovenFuse(Vec::new()),
            };
        }
        match (waits_in(task, &["nfs", "rpc_", "cifs", "ceph"]), network.as_slice(), namespace) {
            (true, [m], Ok(_)) => Verdict::NetworkFs((*m).clone()),
            _ if task.state == 'D' => Verdict::InTheKernel,
            _ => Verdict::MayBeDying,
        }
    }

    /// The verdict in words: cause, fix and advice.
    fn tell(
        f: &mut Finding,
        node: &mut dyn NodeInspector,
        namespace: &Probe<MountNamespace>,
        verdict: &Verdict,
        waiting: &str,
        stack_file: &str,
    ) {
        match (verdict, namespace) {
            (Verdict::Fuse { mount, requests }, Ok(ns)) => {
                on_fuse(f, node, (ns, mount), Some(*requests), &mount.mount_point, waiting);
                f.summary.push_str(" SIGKILL cannot end it until the request is answered or the connection aborted.");
            }
            (Verdict::UnprovenFuse(candidates), _) => {
                let candidates: Vec<(&Mount, Probe<u64>)> = candidates.iter().map(|(m, n)| (m, n.clone())).collect();
                on_unproven_fuse(f, &candidates, waiting, stack_file);
            }
            (Verdict::NetworkFs(m), Ok(ns)) => {
                on_network_fs(f, ns, m, waiting);
                f.summary = format!(
                    "{waiting}: it waits on the {} server {}, the only network filesystem of its mount namespace, which does not answer; SIGKILL cannot end it until it does.",
                    m.fstype, m.source
                );
            }
            (Verdict::InTheKernel, _) => {
                f.summary = format!("{waiting}: it waits in the kernel (a storage device, a network filesystem or a kernel lock), and SIGKILL cannot end it until that wait ends.");
                f.fix = format!("cat {stack_file}");
                f.advice.push(
                    "check the device and the kernel's log: dmesg | tail -n 50 (I/O errors, hung task warnings)".into(),
                );
            }
            _ => {
                f.severity = Severity::Warning;
                f.summary = format!(
                    "{waiting}; a task in that state dies at its next return from the kernel, so it may be on its way out."
                );
                f.fix = format!("cat {stack_file}");
            }
        }
        if let (Verdict::Fuse { .. } | Verdict::UnprovenFuse(_), Err(why)) = (verdict, namespace) {
            f.evidence("mountinfo", format!("its mount namespace: {}", why.said()));
        }
        f.confidence = verdict.confidence();
    }
}

/// What unkillable-task decides a thread that outlived its SIGKILL waits on.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// A FUSE connection the kernel counts `requests` waiting on, and no other.
    Fuse { mount: Mount, requests: u64 },
    /// FUSE, no single connection proven: the candidates and their counts as read.
    UnprovenFuse(Vec<(Mount, Probe<u64>)>),
    /// The server of the only network filesystem of its namespace.
    NetworkFs(Mount),
    /// Something else in the kernel (D): a device, a lock.
    InTheKernel,
    /// Not in D: it dies at its next return from the kernel.
    MayBeDying,
}

impl Verdict {
    pub fn confidence(&self) -> Confidence {
        match self {
            Verdict::Fuse { .. } | Verdict::NetworkFs(_) => Confidence::Confirmed,
            Verdict::UnprovenFuse(_) | Verdict::InTheKernel => Confidence::Likely,
            Verdict::MayBeDying => Confidence::Possible,
        }
    }
}

impl Detector for UnkillableTask {
    fn lifecycle(&mut self, event: &LifecycleEvent, identity: &LifecycleIdentity) {
        match &event.what {
            Lifecycle::Signal(sent) if sent.sig == libc::SIGKILL => {
                self.killed.sent(event, identity, sent, || ());
            }
            Lifecycle::Exit { .. } => self.killed.exited(event.pid, event.start, event.time),
            _ => {}
        }
    }

    fn review(&mut self, review: &mut Review<'_>) -> Vec<Finding> {
        let now = review.now;
        self.killed.review(
            now,
            |_| Some(DEAD_WITHIN),
            review.node,
            |pid, k, standing, node| Self::finding(pid, k, standing, now, node),
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::fake::{t, task, FakeNode};
    use crate::diagnose::signalled::tests::{exit, sender, signal};
    use crate::identify::actor::Role;
    use crate::lifecycle::SignalResult;

    fn runc() -> LifecycleIdentity {
        sender("runc", "containerd-shim", Role::Runc)
    }

    fn kill(at: f64, target: u32) -> LifecycleEvent {
        signal(at, (60, "runc"), libc::SIGKILL, SignalResult::Delivered, (target, "cat"))
    }

    #[test]
    fn a_task_stuck_on_fuse_after_sigkill_is_told_with_the_connection_to_abort() {
        let mut d = UnkillableTask::default();
        let mut node = FakeNode::with_mounts(&["77 /mnt/fuse fuse.sshfs", "20 /sys/fs/fuse/connections fusectl"]);
        let mut stuck = task(800, "cat", 'D');
        stuck.wchan = Some("request_wait_answer".into());
        stuck.stack = vec!["request_wait_answer".into(), "fuse_simple_request".into(), "fuse_lookup_name".into()];
        node.tasks.insert(800, stuck);
        node.fuse.push(task(900, "sshfs", 'S'));
        node.fuse_waiting.insert(77, 1);
        d.lifecycle(&kill(0.0, 800), &runc());
        assert!(d.review(&mut Review { now: t(1.0), in_flight: &[], node: &mut node }).is_empty());
        let told = d.review(&mut Review { now: t(4.0), in_flight: &[], node: &mut node });
        let [f] = &told[..] else { panic!("{told:?}") };
        assert_eq!(
            (f.kind, f.severity, f.confidence),
            (Kind::UnkillableTask, Severity::Critical, Confidence::Confirmed)
        );
        assert_eq!(f.fix, "echo 1 > /sys/fs/fuse/connections/77/abort");
        assert!(
            f.summary.starts_with("cat (pid 800) got SIGKILL 4.0 s ago and is still there, D (uninterruptible sleep)"),
            "{}",
            f.summary
        );
        assert!(f.evidence.iter().any(|e| e.fact.contains("request_wait_answer <- fuse_simple_request")));
        // The abort ends it: its exit is seen, told once as resolved.
        d.lifecycle(&exit(5.0, 800, "cat"), &runc());
        let over = d.review(&mut Review { now: t(5.5), in_flight: &[], node: &mut node });
        assert!(matches!(&over[..], [f] if f.status == Status::Resolved), "{over:?}");
        assert!(d.review(&mut Review { now: t(6.0), in_flight: &[], node: &mut node }).is_empty());
    }

    #[test]
    fn a_survivor_that_keeps_its_containers_init_in_zap_pid_ns_processes_says_the_container_cannot_end() {
        let mut d = UnkillableTask::default();
        let mut node = FakeNode::with_mounts(&["77 /mnt/fuse fuse.sshfs", "20 /sys/fs/fuse/connections fusectl"]);
        let mut stuck = task(800, "cat", 'D');
        stuck.wchan = Some("request_wait_answer".into());
        stuck.stack = vec!["request_wait_answer".into(), "fuse_simple_request".into()];
        node.tasks.insert(800, stuck);
        node.fuse_waiting.insert(77, 1);
        let mut init = task(700, "app", 'S');
        init.wchan = Some("zap_pid_ns_processes".into());
        init.stack = vec!["zap_pid_ns_processes".into(), "do_exit".into(), "do_group_exit".into()];
        node.pid_inits.insert(800, init.clone());
        d.lifecycle(&kill(0.0, 800), &runc());
        let told = d.review(&mut Review { now: t(4.0), in_flight: &[], node: &mut node });
        let [f] = &told[..] else { panic!("{told:?}") };
        assert_eq!(f.fix, "echo 1 > /sys/fs/fuse/connections/77/abort", "the survivor's wait is what ends both");
        assert!(f.summary.contains("It is why its container cannot end: the container's init, app (pid 700), has exited and waits in zap_pid_ns_processes"), "{}", f.summary);
        assert_eq!(f.details["init_pid"], 700);
        assert!(
            f.evidence
                .iter()
                .any(|e| e.source == "/proc/700/stack" && e.fact.contains("zap_pid_ns_processes <- do_exit")),
            "{:?}",
            f.evidence
        );
        // An init that is alive and well says nothing of the sort.
        init.wchan = Some("do_wait".into());
        init.stack = vec!["do_wait".into()];
        node.pid_inits.insert(800, init);
        let mut d = UnkillableTask::default();
        d.lifecycle(&kill(0.0, 800), &runc());
        let told = d.review(&mut Review { now: t(4.0), in_flight: &[], node: &mut node });
        assert!(!told[0].summary.contains("its container cannot end"), "{}", told[0].summary);
        assert!(!told[0].details.contains_key("init_pid"));
    }

    /// The kernel reports an init's exit before it waits for the rest of
    /// its namespace; where that report was lost, the init is still told
    /// for what it is: waiting for the others, not stuck itself.
    #[test]
    fn an_init_waiting_for_its_namespace_to_empty_is_a_warning_pointing_at_the_others() {
        let mut d = UnkillableTask::default();
        let mut node = FakeNode::with_mounts(&[]);
        let mut init = task(700, "app", 'S');
        init.wchan = Some("zap_pid_ns_processes".into());
        node.tasks.insert(700, init);
        d.lifecycle(&kill(0.0, 700), &runc());
        let told = d.review(&mut Review { now: t(4.0), in_flight: &[], node: &mut node });
        let [f] = &told[..] else { panic!("{told:?}") };
        assert_eq!(f.severity, Severity::Warning);
        assert!(
            f.summary.contains("as the init (pid 1) of its PID namespace it waits in zap_pid_ns_processes"),
            "{}",
            f.summary
        );
        assert_eq!(f.fix, "ps -o pid,stat,wchan:32,comm --ppid 700");
    }

    #[test]
    fn what_a_task_outliving_its_sigkill_waits_on_is_decided_before_it_is_said() {
        const POD_NS: u64 = 4026532777;
        let mut node = FakeNode::with_mounts(&[]).with_namespace(
            POD_NS,
            800,
            "cat",
            &["88 /data fuse.gcsfuse", "89 /more fuse.sshfs", "90 /nfs nfs4"],
        );
        let namespace = node.mount_namespace(POD_NS);
        let waits = |node: &mut FakeNode, state: char, frame: &str| {
            let mut stuck = task(800, "cat", state);
            stuck.stack = vec![frame.into()];
            UnkillableTask::judge(node, &namespace, &stuck)
        };
        node.fuse_waiting.extend([(88, 0), (89, 3)]);
        assert!(
            matches!(waits(&mut node, 'D', "fuse_simple_request"), Verdict::Fuse { mount, requests: 3 } if mount.mount_point == b"/more")
        );
        node.fuse_waiting.insert(88, 1);
        assert!(matches!(waits(&mut node, 'D', "fuse_simple_request"), Verdict::UnprovenFuse(c) if c.len() == 2));
        assert!(matches!(waits(&mut node, 'D', "rpc_wait_bit_killable"), Verdict::NetworkFs(m) if m.fstype == "nfs4"));
        assert_eq!(waits(&mut node, 'D', "io_schedule"), Verdict::InTheKernel);
        assert_eq!(waits(&mut node, 'R', "io_schedule"), Verdict::MayBeDying);
        // Its namespace unreadable: no connection is proven from the node's table.
        let unread = Err(Unreadable::Other("gone".into()));
        let mut stuck = task(800, "cat", 'D');
        stuck.stack = vec!["fuse_simple_request".into()];
        assert_eq!(UnkillableTask::judge(&mut node, &unread, &stuck), Verdict::UnprovenFuse(Vec::new()));
    }

    /// A pod's task waits on its own FUSE mount, in its own namespace;
    /// the node has one FUSE mount of its own. The node's is never named:
    /// the pod's connection is, by its count of waiting requests.
    #[test]
    fn a_task_in_its_own_namespace_waits_on_its_own_fuse_connection_never_the_nodes() {
        const POD_NS: u64 = 4026532777;
        let mut d = UnkillableTask::default();
        let mut node = FakeNode::with_mounts(&["77 /mnt/fuse fuse.sshfs", "20 /sys/fs/fuse/connections fusectl"])
            .with_namespace(POD_NS, 800, "cat", &["88 /data fuse.gcsfuse"]);
        let mut stuck = task(800, "cat", 'D');
        stuck.stack = vec!["request_wait_answer".into(), "fuse_simple_request".into()];
        let mut process = crate::diagnose::fake::one_thread(stuck);
        process.mntns = Some(POD_NS);
        node.processes.insert(800, process);
        node.fuse_waiting.insert(77, 0);
        node.fuse_waiting.insert(88, 2);
        d.lifecycle(&kill(0.0, 800), &runc());
        let told = d.review(&mut Review { now: t(4.0), in_flight: &[], node: &mut node });
        let [f] = &told[..] else { panic!("{told:?}") };
        assert_eq!(f.confidence, Confidence::Confirmed);
        assert_eq!(f.fix, "echo 1 > /sys/fs/fuse/connections/88/abort");
        assert!(f.evidence.iter().any(|e| e.fact.contains("2 request(s) wait for an answer on connection 88")));
        // Two of its connections with requests waiting: which one is not
        // proven, so nothing is aborted.
        let mut d = UnkillableTask::default();
        let mut node = FakeNode::with_mounts(&["20 /sys/fs/fuse/connections fusectl"]).with_namespace(
            POD_NS,
            800,
            "cat",
            &["88 /data fuse.gcsfuse", "89 /more fuse.sshfs"],
        );
        let mut process = crate::diagnose::fake::one_thread(task(800, "cat", 'D'));
        process.threads[0].stack = vec!["fuse_simple_request".into()];
        process.mntns = Some(POD_NS);
        node.processes.insert(800, process);
        node.fuse_waiting.extend([(88, 1), (89, 1)]);
        d.lifecycle(&kill(0.0, 800), &runc());
        let told = d.review(&mut Review { now: t(4.0), in_flight: &[], node: &mut node });
        let [f] = &told[..] else { panic!("{told:?}") };
        assert_eq!(f.confidence, Confidence::Likely);
        assert!(!f.fix.contains("abort"), "{}", f.fix);
        assert!(
            f.summary.contains(
                "which connection cannot be proven: /data (connection 88, 1 waiting), /more (connection 89, 1 waiting)"
            ),
            "{}",
            f.summary
        );
    }

    #[test]
    fn a_task_that_dies_of_sigkill_gives_nothing() {
        let mut d = UnkillableTask::default();
        let mut node = FakeNode::default();
        d.lifecycle(&kill(0.0, 801), &runc());
        // Gone from /proc by the first review past the wait.
        assert!(d.review(&mut Review { now: t(4.0), in_flight: &[], node: &mut node }).is_empty());
        node.tasks.insert(802, task(802, "cat", 'Z'));
        d.lifecycle(&kill(5.0, 802), &runc());
        assert!(d.review(&mut Review { now: t(9.0), in_flight: &[], node: &mut node }).is_empty(), "a zombie is dead");
    }

    #[test]
    fn a_zombie_leader_whose_thread_waits_on_fuse_is_a_process_still_there_and_the_thread_is_named() {
        let mut d = UnkillableTask::default();
        let mut node = FakeNode::with_mounts(&["77 /mnt/fuse fuse.sshfs", "20 /sys/fs/fuse/connections fusectl"]);
        let mut worker = task(811, "worker", 'D');
        worker.pid = 810;
        worker.wchan = Some("request_wait_answer".into());
        worker.stack = vec!["request_wait_answer".into(), "fuse_simple_request".into()];
        let mut process = crate::diagnose::fake::one_thread(task(810, "java", 'Z'));
        process.threads.push(worker);
        process.thread_count = 2;
        node.processes.insert(810, process);
        node.fuse.push(task(900, "sshfs", 'S'));
        node.fuse_waiting.insert(77, 1);
        d.lifecycle(&kill(0.0, 810), &runc());
        let told = d.review(&mut Review { now: t(4.0), in_flight: &[], node: &mut node });
        let [f] = &told[..] else { panic!("a zombie leader with a thread left is no exit: {told:?}") };
        assert_eq!((f.kind, f.confidence), (Kind::UnkillableTask, Confidence::Confirmed));
        assert!(
            f.summary.contains("its thread 811 (worker) is still there while its leader has exited (a zombie)"),
            "{}",
            f.summary
        );
        assert!(f.evidence.iter().any(|e| e.source == "/proc/810/task/811/stack"), "{:?}", f.evidence);
        assert_eq!(f.fix, "echo 1 > /sys/fs/fuse/connections/77/abort");
        // The last thread's exit ends it.
        d.lifecycle(&exit(5.0, 810, "java"), &runc());
        let over = d.review(&mut Review { now: t(5.5), in_flight: &[], node: &mut node });
        assert!(matches!(&over[..], [f] if f.status == Status::Resolved), "{over:?}");
    }

    #[test]
    fn a_proc_that_cannot_be_read_is_no_exit() {
        let mut d = UnkillableTask::default();
        let mut node = FakeNode::default();
        node.unreadable_processes.push(820);
        d.lifecycle(&kill(0.0, 820), &runc());
        let told = d.review(&mut Review { now: t(4.0), in_flight: &[], node: &mut node });
        assert!(
            matches!(&told[..], [f] if f.status == Status::Active && f.summary.contains("/proc/820: podstuck could not read it now (too many open files)")),
            "{told:?}"
        );
    }
}
