//! P13, sigterm-ignored: the runtime sent a container's process SIGTERM
//! and it did not exit, so the pod waits out its whole grace period
//! (minutes, sometimes an hour) before the runtime's SIGKILL. Most often a
//! container's PID 1 with no handler: the kernel drops SIGTERM for a PID
//! namespace's init whose action is the default, which `signal_generate`
//! reports as "ignored" the moment it is sent. A process that handles
//! SIGTERM and is still running a second later is told too, as slow.
//! A process that exits within a second of SIGTERM gives nothing.

use std::time::{Duration, SystemTime};

use super::signalled::{Followed, Signalled};
use super::{human_duration, Confidence, Detector, Finding, FindingActor, Kind, Review, Severity, Status};
use crate::event::CallEvent;
use crate::identify::Identity;
use crate::lifecycle::{Lifecycle, LifecycleEvent, LifecycleIdentity, SignalResult};

/// How long a process may take to exit after SIGTERM before it is told.
pub const EXIT_WITHIN: Duration = Duration::from_secs(1);

/// What is kept of a SIGTERM beside its process.
struct Sent {
    result: SignalResult,
    /// SIGTERMs sent to it so far (at most one a second is streamed).
    times: u64,
    /// When SIGKILL followed, if it did.
    killed_at: Option<SystemTime>,
}

#[derive(Default)]
pub struct SigtermIgnored {
    sent: Signalled<Sent>,
}

impl SigtermIgnored {
    fn finding(pid: u32, sent: &Followed<Sent>, now: SystemTime, state: Option<String>) -> Finding {
        let s = &sent.more;
        let mut f = Finding::new(Kind::SigtermIgnored, &pid.to_string(), Severity::Warning, sent.at);
        f.last_seen = now;
        f.pod_uid = Some(sent.pod.clone());
        f.pods = vec![sent.pod.clone()];
        f.actor = Some(FindingActor::of(sent.sender_pid, &sent.sender));
        f.count = s.times;
        let waited = human_duration(now.duration_since(sent.at).unwrap_or_default());
        let who = format!("{} (pid {pid})", sent.comm);
        let from = format!("SIGTERM from {} (pid {})", sent.sender.description, sent.sender_pid);
        let state = state.map(|s| format!(" It is {s}.")).unwrap_or_default();
        f.evidence("signal_generate", format!("{from} to {who}: {}", result_words(s.result)));
        match s.result {
            SignalResult::Ignored => {
                f.confidence = Confidence::Confirmed;
                f.summary = format!(
                    "{who} got {from} {waited} ago and the kernel dropped it: it is the init (PID 1) of its PID namespace with no SIGTERM handler, so SIGTERM does nothing and the pod waits out its grace period until SIGKILL.{state}"
                );
            }
            _ => {
                f.confidence = Confidence::Likely;
                f.summary = format!(
                    "{who} got {from} {waited} ago and is still running: it handles or blocks SIGTERM and its shutdown has not finished, so the pod waits until it exits or its grace period ends in SIGKILL.{state}"
                );
            }
        }
        if let Some(killed) = s.killed_at {
            f.evidence(
                "signal_generate",
                format!(
                    "SIGKILL followed {} after SIGTERM",
                    human_duration(killed.duration_since(sent.at).unwrap_or_default())
                ),
            );
        }
        f.detail("pid", pid);
        f.detail("ignored_by_kernel", s.result == SignalResult::Ignored);
        f.fix = format!("kill -KILL {pid}");
        f.advice.push("for good: handle SIGTERM in the program (exit when it comes), or run it under an init that forwards signals: tini or dumb-init as the entrypoint, `shareProcessNamespace: true` in the pod spec (the pause container is PID 1 then), docker run --init".into());
        f.advice.push(
            "the kill ends the wait now; a lower terminationGracePeriodSeconds shortens it for every later deletion"
                .into(),
        );
        f.advice.push("how much of the grace period is left is the API's to say: watch --pod NAMESPACE/NAME joins it (grace-period-past once it is over), or kubectl get pod -o jsonpath='{.metadata.deletionTimestamp}'".into());
        if let Some(ended) = sent.ended {
            f.status = Status::Resolved;
            f.last_seen = ended;
        }
        f
    }
}

fn result_words(result: SignalResult) -> String {
    match result {
        SignalResult::Delivered => "delivered".into(),
        SignalResult::Ignored => "ignored by the kernel (result 1)".into(),
        SignalResult::AlreadyPending => "already pending (it blocks SIGTERM)".into(),
        SignalResult::Other(code) => format!("not delivered (result {code})"),
    }
}

impl Detector for SigtermIgnored {
    fn observe(&mut self, _event: &CallEvent, _identity: &Identity) {}

    fn lifecycle(&mut self, event: &LifecycleEvent, identity: &LifecycleIdentity) {
        match &event.what {
            Lifecycle::Signal(sent) if sent.sig == libc::SIGTERM => {
                let new = || Sent { result: sent.result, times: 0, killed_at: None };
                if let Some((f, _)) = self.sent.sent(event, identity, sent, new) {
                    f.more.times += 1;
                    // The kernel's verdict on the latest says most.
                    f.more.result = sent.result;
                }
            }
            Lifecycle::Signal(sent) if sent.sig == libc::SIGKILL => {
                if let Some(f) = self.sent.get_mut(sent.target_pid) {
                    f.more.killed_at.get_or_insert(event.time);
                }
            }
            Lifecycle::Exit { .. } => self.sent.exited(event.pid, event.time),
            _ => {}
        }
    }

    fn review(&mut self, review: &mut Review<'_>) -> Vec<Finding> {
        let now = review.now;
        self.sent.review(now, EXIT_WITHIN, review.node, |pid, f, task, _| {
            Self::finding(pid, f, now, task.map(|t| t.state_words().to_string()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::fake::{pod, t, task, FakeNode};
    use crate::diagnose::signalled::tests::{self as fixtures, sender};
    use crate::identify::actor::Role;

    fn shim() -> LifecycleIdentity {
        sender("containerd-shim", "systemd", Role::Shim)
    }

    fn signal(at: f64, sig: i32, target: u32, result: SignalResult) -> LifecycleEvent {
        fixtures::signal(at, (50, "containerd-shim"), sig, result, (target, "app"))
    }

    fn exit(at: f64, pid: u32) -> LifecycleEvent {
        fixtures::exit(at, pid, "app")
    }

    fn review(d: &mut SigtermIgnored, node: &mut FakeNode, at: f64) -> Vec<Finding> {
        d.review(&mut Review { now: t(at), in_flight: &[], node })
    }

    #[test]
    fn an_init_that_drops_sigterm_is_told_at_once_and_resolved_when_it_dies() {
        let mut d = SigtermIgnored::default();
        let mut node = FakeNode::default();
        node.tasks.insert(700, task(700, "app", 'S'));
        d.lifecycle(&signal(0.0, libc::SIGTERM, 700, SignalResult::Ignored), &shim());
        assert!(review(&mut d, &mut node, 0.5).is_empty(), "it may still exit within a second");
        let told = review(&mut d, &mut node, 2.0);
        let [f] = &told[..] else { panic!("{told:?}") };
        assert_eq!((f.kind, f.confidence, f.status), (Kind::SigtermIgnored, Confidence::Confirmed, Status::Active));
        assert!(f.summary.contains("init (PID 1) of its PID namespace with no SIGTERM handler"), "{}", f.summary);
        assert!(f.summary.contains("from containerd-shim (pid 50)"), "{}", f.summary);
        assert_eq!(f.fix, "kill -KILL 700");
        assert_eq!(f.pod_uid, Some(pod()));
        d.lifecycle(&signal(20.0, libc::SIGKILL, 700, SignalResult::Delivered), &shim());
        d.lifecycle(&exit(20.0, 700), &shim());
        let over = review(&mut d, &mut node, 20.5);
        let [f] = &over[..] else { panic!("{over:?}") };
        assert_eq!(f.status, Status::Resolved);
        assert!(f.evidence.iter().any(|e| e.fact.starts_with("SIGKILL followed 20")), "{:?}", f.evidence);
        assert!(review(&mut d, &mut node, 21.0).is_empty(), "told once, then forgotten");
    }

    #[test]
    fn a_process_that_exits_on_sigterm_gives_nothing_and_one_that_lingers_is_likely() {
        let mut d = SigtermIgnored::default();
        let mut node = FakeNode::default();
        d.lifecycle(&signal(0.0, libc::SIGTERM, 701, SignalResult::Delivered), &shim());
        d.lifecycle(&exit(0.2, 701), &shim());
        assert!(review(&mut d, &mut node, 2.0).is_empty());
        // Gone from /proc without its exit seen (it was reaped between reviews): nothing.
        d.lifecycle(&signal(3.0, libc::SIGTERM, 702, SignalResult::Delivered), &shim());
        assert!(review(&mut d, &mut node, 5.0).is_empty());
        node.tasks.insert(703, task(703, "app", 'S'));
        d.lifecycle(&signal(6.0, libc::SIGTERM, 703, SignalResult::Delivered), &shim());
        let told = review(&mut d, &mut node, 8.0);
        assert!(
            matches!(&told[..], [f] if f.confidence == Confidence::Likely && f.summary.contains("handles or blocks SIGTERM")),
            "{told:?}"
        );
        // A signal to a process in no pod is none of this detector's.
        let mut nobody = shim();
        nobody.pod_uid = None;
        d.lifecycle(&signal(9.0, libc::SIGTERM, 704, SignalResult::Ignored), &nobody);
        node.tasks.insert(704, task(704, "x", 'S'));
        assert!(review(&mut d, &mut node, 12.0).iter().all(|f| f.id != "sigterm-ignored:704"));
    }
}
