//! P13, sigterm-ignored: the grace period is being spent for nothing. The
//! runtime sent a container's process SIGTERM, and either the kernel
//! dropped it (a PID namespace's init with no SIGTERM handler: the
//! container's PID 1; or a process that set SIGTERM to SIG_IGN), so the
//! pod waits out its whole grace period for a signal that can do nothing;
//! or the process handles it and is still there past its grace period,
//! with no SIGKILL come to end it.
//!
//! A process that handles SIGTERM and shuts down within its grace period
//! is draining, as every web server does: that is told at most as an info
//! line ("draining since ..."), never with a kill, which would cut a
//! normal shutdown short. The grace period is the API's
//! (`deletionTimestamp`, with `--pod NS/NAME`), else the one the runtime
//! showed by its own SIGKILL to another of the pod's processes, else
//! kubelet's default of 30 s (said as an assumption). SIGTERMs a pod's
//! own processes send each other (a supervisor restarting its workers) are
//! not this cause. Once SIGKILL came, a process still there is
//! unkillable-task's to tell.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::shell::kill_if_same;
use super::signalled::{Followed, Signalled, Standing};
use super::{human_duration, Confidence, Detector, Finding, FindingActor, Kind, Review, Severity, Status};
use crate::event::CallEvent;
use crate::identify::pod::PodUid;
use crate::identify::Identity;
use crate::inspect::ProcessState;
use crate::lifecycle::{Lifecycle, LifecycleEvent, LifecycleIdentity, SignalResult};

/// How long a process may take to exit after SIGTERM before anything is
/// said of it (the kernel's drop is read from /proc then).
pub const EXIT_WITHIN: Duration = Duration::from_secs(1);

/// kubelet's default `terminationGracePeriodSeconds`.
pub const DEFAULT_GRACE: Duration = Duration::from_secs(30);

/// Grace periods learnt from the runtime's SIGKILLs, pods at most.
const LEARNT_MAX: usize = 256;

/// What is kept of a SIGTERM beside its process.
struct Sent {
    result: SignalResult,
    /// SIGTERMs sent to it so far (at most one a second is streamed).
    times: u64,
    /// When SIGKILL followed, if it did.
    killed_at: Option<SystemTime>,
}

/// Where a grace period's end comes from, as the finding says it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum GraceFrom {
    Api,
    Runtime,
    Default,
}

#[derive(Default)]
pub struct SigtermIgnored {
    sent: Signalled<Sent>,
    /// When each pod's grace period ends, as the API says (deletionTimestamp).
    api_ends: BTreeMap<PodUid, SystemTime>,
    /// How long the runtime waited between SIGTERM and SIGKILL for a
    /// process of each pod: its grace period, as it showed it.
    learnt: BTreeMap<PodUid, (SystemTime, Duration)>,
}

/// Why the kernel dropped a SIGTERM, as /proc shows it.
enum Dropped {
    /// A PID namespace's init (NSpid 1) with no handler.
    InitWithoutHandler,
    /// SIG_IGN: set by the program, or inherited from its parent.
    SigIgn,
    /// The kernel said "ignored", /proc does not say why.
    Unexplained,
}

fn dropped_why(process: &ProcessState) -> Dropped {
    if process.ignores(libc::SIGTERM) {
        Dropped::SigIgn
    } else if process.ns_pid == Some(1) && !process.handles(libc::SIGTERM) {
        Dropped::InitWithoutHandler
    } else {
        Dropped::Unexplained
    }
}

impl SigtermIgnored {
    /// When `f`'s grace period ends, and where that comes from.
    fn grace_end(&self, f: &Followed<Sent>) -> (SystemTime, GraceFrom) {
        if let Some(end) = self.api_ends.get(&f.pod) {
            return (*end, GraceFrom::Api);
        }
        if let Some((_, grace)) = self.learnt.get(&f.pod) {
            return (f.at + *grace, GraceFrom::Runtime);
        }
        (f.at + DEFAULT_GRACE, GraceFrom::Default)
    }

    /// What every revision says: the process, its pod, the SIGTERMs and
    /// the SIGKILL the kernel saw.
    fn head(pid: u32, sent: &Followed<Sent>, now: SystemTime) -> Finding {
        let s = &sent.more;
        let key = match sent.start {
            Some(start) => format!("{pid}@{}", start.ticks()),
            None => pid.to_string(),
        };
        let mut f = Finding::new(Kind::SigtermIgnored, &key, Severity::Warning, sent.at);
        f.last_seen = now;
        f.pod_uid = Some(sent.pod.clone());
        f.pods = vec![sent.pod.clone()];
        f.actor = Some(FindingActor::of(sent.sender_pid, &sent.sender));
        f.count = s.times;
        f.detail("pid", pid);
        if let Some(start) = sent.start {
            f.detail("start", start.ticks());
        }
        f.detail("ignored_by_kernel", s.result == SignalResult::Ignored);
        let from = format!("SIGTERM from {} (pid {})", sent.sender.description, sent.sender_pid);
        f.evidence("signal_generate", format!("{from} to {} (pid {pid}): {}", sent.comm, result_words(s.result)));
        if let Some(killed) = s.killed_at {
            let after = human_duration(killed.duration_since(sent.at).unwrap_or_default());
            f.evidence("signal_generate", format!("SIGKILL followed {after} after SIGTERM"));
        }
        f
    }

    fn finding(&self, pid: u32, sent: &Followed<Sent>, now: SystemTime, standing: Standing<'_>) -> Option<Finding> {
        let s = &sent.more;
        let mut f = Self::head(pid, sent, now);
        let waited = human_duration(now.duration_since(sent.at).unwrap_or_default());
        let who = format!("{} (pid {pid})", sent.comm);
        let from = format!("SIGTERM from {} (pid {})", sent.sender.description, sent.sender_pid);
        let (end, grace_from) = self.grace_end(sent);
        let grace_words = grace_words(grace_from, end.duration_since(sent.at).unwrap_or_default());
        let process = match standing {
            Standing::Ended => {
                // Said as it was last told: the end of a drain within its
                // grace period is an info line too.
                if s.result != SignalResult::Ignored && sent.ended.unwrap_or(now) < end {
                    f.severity = Severity::Info;
                    f.confidence = Confidence::Possible;
                }
                f.status = Status::Resolved;
                f.last_seen = sent.ended.unwrap_or(now);
                f.summary = format!("{who} got {from} and has exited since.");
                return Some(f);
            }
            Standing::Unreadable(why) => {
                if s.result != SignalResult::Ignored {
                    return None;
                }
                f.confidence = Confidence::Likely;
                f.summary = format!(
                    "{who} got {from} {waited} ago and the kernel dropped it (ignored), so SIGTERM does nothing and the pod waits out {grace_words} until SIGKILL; why is not known: /proc/{pid}: {}.",
                    why.said()
                );
                f.fix = kill_if_same("KILL", pid, sent.start).unwrap_or_default();
                return Some(f);
            }
            Standing::There(process) => process,
        };
        let state = process.leader().map(|t| format!(" It is {}.", t.state_words())).unwrap_or_default();
        f.evidence(
            format!("/proc/{pid}/status"),
            format!(
                "pid {} in its own PID namespace; SigIgn {:016x}, SigCgt {:016x}: SIGTERM {}",
                process.ns_pid.map_or("unknown".to_string(), |p| p.to_string()),
                process.sig_ignored,
                process.sig_caught,
                if process.ignores(libc::SIGTERM) {
                    "ignored (SIG_IGN)"
                } else if process.handles(libc::SIGTERM) {
                    "handled"
                } else {
                    "at its default action"
                }
            ),
        );
        if s.result == SignalResult::Ignored {
            f.confidence = Confidence::Confirmed;
            f.summary = match dropped_why(process) {
                Dropped::InitWithoutHandler => format!(
                    "{who} got {from} {waited} ago and the kernel dropped it: it is the init (PID 1) of its PID namespace with no SIGTERM handler, so SIGTERM does nothing and the pod waits out {grace_words} until SIGKILL.{state}"
                ),
                Dropped::SigIgn => format!(
                    "{who} got {from} {waited} ago and the kernel dropped it: the process ignores SIGTERM (SIG_IGN, set by the program or inherited from whatever started it), so SIGTERM does nothing and the pod waits out {grace_words} until SIGKILL.{state}"
                ),
                Dropped::Unexplained => {
                    f.confidence = Confidence::Likely;
                    format!(
                        "{who} got {from} {waited} ago and the kernel dropped it (ignored), so SIGTERM does nothing and the pod waits out {grace_words} until SIGKILL.{state}"
                    )
                }
            };
            f.fix = kill_if_same("KILL", pid, sent.start).unwrap_or_default();
            f.advice.push("for good: handle SIGTERM in the program (exit when it comes), or run it under an init that forwards signals: tini or dumb-init as the entrypoint, `shareProcessNamespace: true` in the pod spec (the pause container is PID 1 then), docker run --init".into());
            f.advice.push("the kill ends the wait now, as SIGKILL at the grace period's end would: SIGTERM cannot end it whatever the wait".into());
            return Some(f);
        }
        // It takes SIGTERM. Once SIGKILL came, a process still there is
        // unkillable-task's.
        if s.killed_at.is_some() {
            return None;
        }
        if now < end {
            f.severity = Severity::Info;
            f.confidence = Confidence::Possible;
            f.summary = format!(
                "{who} got {from} {waited} ago and is shutting down (draining): normal within {grace_words}, which ends in {}; the runtime sends SIGKILL then.{state}",
                human_duration(end.duration_since(now).unwrap_or_default())
            );
            return Some(f);
        }
        f.confidence = match grace_from {
            GraceFrom::Default => Confidence::Possible,
            _ => Confidence::Likely,
        };
        let late = human_duration(now.duration_since(end).unwrap_or_default());
        f.summary = format!(
            "{who} got {from} {waited} ago and is still running {late} past {grace_words}, and no SIGKILL came: its shutdown does not end, and the runtime has not killed it.{state}"
        );
        f.fix = kill_if_same("KILL", pid, sent.start).unwrap_or_default();
        f.advice.push("the grace period is over: the kill is what the runtime should have done; check why it did not (journalctl -u containerd -u crio --since -15min)".into());
        if grace_from == GraceFrom::Default {
            f.advice.push("the 30 s is kubelet's default, assumed: a pod with a longer terminationGracePeriodSeconds is still within it (kubectl get pod -o jsonpath='{.metadata.deletionTimestamp}' says when it ends)".into());
        }
        Some(f)
    }
}

/// "kubelet's default grace period of 30.0 s (...)": the grace period and
/// where it comes from.
fn grace_words(from: GraceFrom, grace: Duration) -> String {
    match from {
        GraceFrom::Api => format!("its grace period of {} (the API's deletionTimestamp)", human_duration(grace)),
        GraceFrom::Runtime => format!(
            "its grace period of {} (as the runtime showed it, killing another of the pod's processes that long after SIGTERM)",
            human_duration(grace)
        ),
        GraceFrom::Default => format!(
            "kubelet's default grace period of {} (the pod's own is the API's to say: watch --pod NAMESPACE/NAME reads it)",
            human_duration(grace)
        ),
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
        // A pod's own process signalling its own is no teardown.
        let from_the_pod = identity.sender_pod.is_some() && identity.sender_pod == identity.pod_uid;
        match &event.what {
            Lifecycle::Signal(sent) if sent.sig == libc::SIGTERM && !from_the_pod => {
                let new = || Sent { result: sent.result, times: 0, killed_at: None };
                if let Some((f, _)) = self.sent.sent(event, identity, sent, new) {
                    f.more.times += 1;
                    // The kernel's verdict on the latest says most.
                    f.more.result = sent.result;
                }
            }
            Lifecycle::Signal(sent) if sent.sig == libc::SIGKILL && !from_the_pod => {
                if let Some(f) = self.sent.get_mut(sent.target_pid, identity.target_start) {
                    if f.more.killed_at.is_none() {
                        f.more.killed_at = Some(event.time);
                        let grace = event.time.duration_since(f.at).unwrap_or_default();
                        if self.learnt.len() >= LEARNT_MAX && !self.learnt.contains_key(&f.pod) {
                            let oldest = self.learnt.iter().min_by_key(|(_, (at, _))| *at).map(|(p, _)| p.clone());
                            oldest.map(|p| self.learnt.remove(&p));
                        }
                        self.learnt.insert(f.pod.clone(), (event.time, grace));
                    }
                }
            }
            Lifecycle::Exit { .. } => self.sent.exited(event.pid, event.start, event.time),
            _ => {}
        }
    }

    fn grace_ends(&mut self, ends: &BTreeMap<PodUid, SystemTime>) {
        self.api_ends = ends.clone();
    }

    fn review(&mut self, review: &mut Review<'_>) -> Vec<Finding> {
        let now = review.now;
        let mut sent = std::mem::take(&mut self.sent);
        let told = sent.review(
            now,
            |_| Some(EXIT_WITHIN),
            review.node,
            |pid, f, standing, _| self.finding(pid, f, now, standing),
        );
        self.sent = sent;
        told
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::fake::{one_thread, pod, t, task, FakeNode};
    use crate::diagnose::signalled::tests::{self as fixtures, sender};
    use crate::event::ProcessStart;
    use crate::identify::actor::Role;

    fn shim() -> LifecycleIdentity {
        let mut shim = sender("containerd-shim", "systemd", Role::Shim);
        shim.target_start = Some(ProcessStart(4000));
        shim
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

    /// A container's PID 1 (pid 700 on the node) with no SIGTERM handler.
    fn init_without_handler(node: &mut FakeNode, pid: u32) {
        let mut p = one_thread(task(pid, "app", 'S'));
        p.start = 4000;
        p.ns_pid = Some(1);
        node.processes.insert(pid, p);
    }

    #[test]
    fn an_init_that_drops_sigterm_is_confirmed_from_proc_told_at_once_and_resolved_when_it_dies() {
        let mut d = SigtermIgnored::default();
        let mut node = FakeNode::default();
        init_without_handler(&mut node, 700);
        d.lifecycle(&signal(0.0, libc::SIGTERM, 700, SignalResult::Ignored), &shim());
        assert!(review(&mut d, &mut node, 0.5).is_empty(), "it may still exit within a second");
        let told = review(&mut d, &mut node, 2.0);
        let [f] = &told[..] else { panic!("{told:?}") };
        assert_eq!((f.kind, f.confidence, f.status), (Kind::SigtermIgnored, Confidence::Confirmed, Status::Active));
        assert!(f.summary.contains("init (PID 1) of its PID namespace with no SIGTERM handler"), "{}", f.summary);
        assert!(f.summary.contains("from containerd-shim (pid 50)"), "{}", f.summary);
        assert!(f.summary.contains("kubelet's default grace period of 30"), "{}", f.summary);
        assert_eq!(f.fix, kill_if_same("KILL", 700, Some(ProcessStart(4000))).unwrap());
        assert_eq!(f.id, "sigterm-ignored:700@4000", "a pid and its start");
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
    fn a_process_that_ignores_sigterm_with_sig_ign_has_its_own_words() {
        let mut d = SigtermIgnored::default();
        let mut node = FakeNode::default();
        let mut p = one_thread(task(710, "app", 'S'));
        p.start = 4000;
        p.sig_ignored = 1 << (libc::SIGTERM - 1);
        p.ns_pid = Some(7);
        node.processes.insert(710, p);
        d.lifecycle(&signal(0.0, libc::SIGTERM, 710, SignalResult::Ignored), &shim());
        let told = review(&mut d, &mut node, 2.0);
        assert!(
            matches!(&told[..], [f] if f.confidence == Confidence::Confirmed && f.summary.contains("ignores SIGTERM (SIG_IGN")),
            "{told:?}"
        );
    }

    #[test]
    fn a_graceful_drain_is_an_info_line_without_a_kill_and_only_its_grace_periods_end_is_a_warning() {
        let mut d = SigtermIgnored::default();
        let mut node = FakeNode::default();
        let mut p = one_thread(task(720, "web", 'S'));
        (p.start, p.sig_caught) = (4000, 1 << (libc::SIGTERM - 1));
        node.processes.insert(720, p);
        d.lifecycle(&signal(0.0, libc::SIGTERM, 720, SignalResult::Delivered), &shim());
        for at in [1.5, 8.0, 29.0] {
            let told = review(&mut d, &mut node, at);
            let [f] = &told[..] else { panic!("{told:?}") };
            assert_eq!((f.severity, f.confidence), (Severity::Info, Confidence::Possible), "{}", f.summary);
            assert!(f.summary.contains("draining"), "{}", f.summary);
            assert!(f.fix.is_empty(), "a drain is never cut short: {}", f.fix);
        }
        let told = review(&mut d, &mut node, 31.0);
        let [f] = &told[..] else { panic!("{told:?}") };
        assert_eq!((f.severity, f.confidence), (Severity::Warning, Confidence::Possible), "the default is assumed");
        assert!(f.summary.contains("past kubelet's default grace period"), "{}", f.summary);
        assert!(f.fix.ends_with("&& kill -KILL 720"), "{}", f.fix);
        // It exits: told resolved.
        d.lifecycle(&exit(32.0, 720), &shim());
        assert!(matches!(&review(&mut d, &mut node, 32.5)[..], [f] if f.status == Status::Resolved));
    }

    #[test]
    fn the_apis_grace_period_and_the_runtimes_sigkill_say_when_a_drain_ends() {
        let mut d = SigtermIgnored::default();
        let mut node = FakeNode::default();
        for pid in [730, 731] {
            let mut p = one_thread(task(pid, "web", 'S'));
            p.sig_caught = 1 << (libc::SIGTERM - 1);
            node.processes.insert(pid, p);
        }
        // The API: this pod's deletion is due 120 s after the SIGTERM.
        d.grace_ends(&BTreeMap::from([(pod(), t(120.0))]));
        d.lifecycle(&signal(0.0, libc::SIGTERM, 730, SignalResult::Delivered), &shim());
        let told = review(&mut d, &mut node, 60.0);
        assert!(
            matches!(&told[..], [f] if f.severity == Severity::Info && f.summary.contains("deletionTimestamp")),
            "{told:?}"
        );
        let told = review(&mut d, &mut node, 121.0);
        assert!(
            matches!(&told[..], [f] if f.severity == Severity::Warning && f.confidence == Confidence::Likely),
            "{told:?}"
        );
        // The runtime's SIGKILL 45 s after SIGTERM: the pod's grace, for its next process.
        let mut d = SigtermIgnored::default();
        d.lifecycle(&signal(0.0, libc::SIGTERM, 730, SignalResult::Delivered), &shim());
        d.lifecycle(&signal(45.0, libc::SIGKILL, 730, SignalResult::Delivered), &shim());
        assert!(review(&mut d, &mut node, 46.0).iter().all(|f| f.severity == Severity::Info), "unkillable-task's now");
        d.lifecycle(&signal(50.0, libc::SIGTERM, 731, SignalResult::Delivered), &shim());
        let told = review(&mut d, &mut node, 80.0);
        assert!(
            told.iter().any(|f| f.id.starts_with("sigterm-ignored:731")
                && f.severity == Severity::Info
                && f.summary.contains("as the runtime showed it")),
            "{told:?}"
        );
    }

    #[test]
    fn signals_a_pod_sends_itself_and_processes_in_no_pod_are_none_of_this() {
        let mut d = SigtermIgnored::default();
        let mut node = FakeNode::default();
        init_without_handler(&mut node, 740);
        let mut supervisor = shim();
        supervisor.sender_pod = Some(pod());
        d.lifecycle(&signal(0.0, libc::SIGTERM, 740, SignalResult::Ignored), &supervisor);
        assert!(review(&mut d, &mut node, 5.0).is_empty(), "a supervisor restarting its worker");
        let mut nobody = shim();
        nobody.pod_uid = None;
        d.lifecycle(&signal(6.0, libc::SIGTERM, 740, SignalResult::Ignored), &nobody);
        assert!(review(&mut d, &mut node, 9.0).is_empty());
        // Gone from /proc without its exit seen (reaped between reviews): nothing.
        d.lifecycle(&signal(10.0, libc::SIGTERM, 741, SignalResult::Delivered), &shim());
        assert!(review(&mut d, &mut node, 12.0).is_empty());
        // A pid that names another process by now (another start): gone.
        let mut other = one_thread(task(742, "app", 'S'));
        (other.start, other.ns_pid) = (9999, Some(1));
        node.processes.insert(742, other);
        d.lifecycle(&signal(13.0, libc::SIGTERM, 742, SignalResult::Ignored), &shim());
        assert!(review(&mut d, &mut node, 15.0).is_empty(), "pid 742 started at 4000 is gone");
    }
}
