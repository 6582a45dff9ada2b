//! P14, unkillable-task: SIGKILL was sent to a pod's process and the task
//! is still there seconds later. A task in uninterruptible sleep (D) takes
//! no signal until the kernel call it waits in returns: a FUSE request its
//! server read and never answered, a dead NFS server, a stuck disk. Another
//! kill does nothing; what ends it is the wait's end (the FUSE connection
//! aborted, the NFS mount forced off). Before this, cgroup-busy saw it only
//! once kubelet tried the pod cgroup's rmdir.

use std::time::{Duration, SystemTime};

use super::hung_call::HungCall;
use super::signalled::{Followed, Signalled, Standing};
use super::{human_duration, Confidence, Detector, Finding, FindingActor, Kind, Review, Severity, Status};
use crate::event::CallEvent;
use crate::identify::Identity;
use crate::inspect::{Mount, NodeInspector, TaskState};
use crate::lifecycle::{Lifecycle, LifecycleEvent, LifecycleIdentity};
use crate::words::shell_word;

/// How long a task may outlive its SIGKILL before it is told: dying takes
/// a task a few milliseconds, unless it waits in the kernel.
pub const DEAD_WITHIN: Duration = Duration::from_secs(3);
/// Stack frames quoted.
const FRAMES_QUOTED: usize = 6;

#[derive(Default)]
pub struct UnkillableTask {
    killed: Signalled<()>,
}

fn is_fuse(m: &Mount) -> bool {
    m.fstype == "fuse" || m.fstype.starts_with("fuse.") || m.fstype == "fuseblk"
}

fn is_network_fs(m: &Mount) -> bool {
    m.fstype.starts_with("nfs") || m.fstype == "cifs" || m.fstype == "smb3" || m.fstype == "ceph"
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
        let wchan = task.wchan.as_ref().map(|w| format!(", waiting in {w}")).unwrap_or_default();
        f.detail("tid", tid);
        f.evidence(
            format!("/proc/{pid}/task/{tid}/stat"),
            format!("thread {tid} ({}) of process {pid} is {}{wchan}", task.comm, task.state_words()),
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
            true => format!("is still there, {}{wchan}", task.state_words()),
            false => format!("is still there: {thread}; the thread is {}{wchan}", task.state_words()),
        };
        let waiting = format!("{who} got SIGKILL {waited} ago and {still}");
        Self::what_it_waits_on(&mut f, node, pid, task, &waiting, &stack_file);
        Some(f)
    }

    /// The cause, fix and advice, by what the stuck thread waits on: a FUSE
    /// server, a network filesystem's, the kernel otherwise.
    fn what_it_waits_on(
        f: &mut Finding,
        node: &mut dyn NodeInspector,
        pid: u32,
        task: &TaskState,
        waiting: &str,
        stack_file: &str,
    ) {
        let mounts = node.host_mounts().unwrap_or_default();
        let fuse: Vec<&Mount> = mounts.iter().filter(|m| is_fuse(m)).collect();
        let network: Vec<&Mount> = mounts.iter().filter(|m| is_network_fs(m)).collect();
        if waits_in(task, &["fuse"]) && !fuse.is_empty() {
            // The mount it waits on: one it holds (cwd, files), else the only one.
            let held = fuse.iter().find(|m| node.mount_holders(m, 0).iter().any(|h| h.pid == pid));
            match held.or((fuse.len() == 1).then(|| &fuse[0])) {
                Some(m) => {
                    HungCall::on_fuse(f, node, m, &m.mount_point, waiting);
                    f.summary
                        .push_str(" SIGKILL cannot end it until the request is answered or the connection aborted.");
                }
                None => {
                    f.confidence = Confidence::Likely;
                    let points: Vec<String> = fuse.iter().map(|m| shell_word(&m.mount_point)).collect();
                    f.summary = format!("{waiting}: it waits on a FUSE server, on one of {}.", points.join(", "));
                    f.fix = format!("cat /sys/fs/fuse/connections/*/waiting; cat {stack_file}");
                    f.advice.push(
                        "abort the connection whose waiting count is not 0: echo 1 > /sys/fs/fuse/connections/N/abort"
                            .into(),
                    );
                }
            }
        } else if waits_in(task, &["nfs", "rpc_", "cifs", "ceph"]) && network.len() == 1 {
            let m = network[0];
            f.confidence = Confidence::Confirmed;
            f.summary = format!(
                "{waiting}: it waits on the {} server {}, which does not answer; SIGKILL cannot end it until it does.",
                m.fstype, m.source
            );
            f.evidence("mountinfo", format!("{} mount of {} at {}", m.fstype, m.source, shell_word(&m.mount_point)));
            f.fix = super::shell::unmount_forced(&m.mount_point);
            f.advice.push(format!("better: bring {} back; the task then ends by itself", m.source));
        } else if task.state == 'D' {
            f.confidence = Confidence::Likely;
            f.summary = format!("{waiting}: it waits in the kernel (a storage device, a network filesystem or a kernel lock), and SIGKILL cannot end it until that wait ends.");
            f.fix = format!("cat {stack_file}");
            f.advice.push(
                "check the device and the kernel's log: dmesg | tail -n 50 (I/O errors, hung task warnings)".into(),
            );
        } else {
            f.confidence = Confidence::Possible;
            f.severity = Severity::Warning;
            f.summary = format!(
                "{waiting}; a task in that state dies at its next return from the kernel, so it may be on its way out."
            );
            f.fix = format!("cat {stack_file}");
        }
    }
}

impl Detector for UnkillableTask {
    fn observe(&mut self, _event: &CallEvent, _identity: &Identity) {}

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
