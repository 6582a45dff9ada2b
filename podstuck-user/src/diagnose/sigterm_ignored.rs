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
//!
//! Nor is a SIGTERM to a process already dying: once a fatal signal or
//! exit_group has begun ending it (SIGKILL first, a thread left waiting in
//! D), the kernel drops any later signal ("ignored" from 5.17, queued for
//! nothing before), and its verdict would read as a process that ignores
//! SIGTERM. Whether the process was exiting is the kernel's own reading at
//! the signal (`SignalSent::group_exiting`); where it could not read it
//! (lockdown, an older record), a SIGKILL to the whole process that the
//! kernel delivered before proves it, as delivering one starts the group
//! exit before the kernel reports it. What keeps a dying process there is
//! unkillable-task's to tell.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::pod_shutdown::PodShutdown;
use super::shell::kill_if_same;
use super::signalled::{make_room, Followed, Reached, Signalled, Standing};
use super::{human_duration, Confidence, Detector, Finding, FindingActor, Kind, Review, Severity, Status};
use crate::event::ProcessStart;
use crate::identify::pod::PodUid;
use crate::identify::LifecycleIdentity;
use crate::inspect::{ProcessState, Unreadable};
use crate::lifecycle::{Lifecycle, LifecycleEvent, SignalResult, SignalSent};

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
    /// Processes a SIGKILL to the whole process reached (the kernel said
    /// delivered), by pid: their start, and when. Dying since, until their
    /// exit; at most [`FOLLOWED_MAX`], the oldest forgotten.
    killed: Reached,
}

/// Why the kernel dropped a SIGTERM, as /proc shows it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dropped {
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
    /// Whether the target of `sent` was already exiting when it came: as
    /// the kernel read it at the signal, else by a SIGKILL it delivered
    /// to that process before.
    fn already_exiting(&self, sent: &SignalSent, start: Option<ProcessStart>) -> bool {
        sent.group_exiting.unwrap_or_else(|| self.killed.when(sent.target_pid, start).is_some())
    }

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
        let (end, grace_from) = self.grace_end(sent);
        let verdict = Self::judge(sent, now, (end, grace_from), &standing)?;
        Some(Self::tell(pid, sent, now, (end, grace_from), &standing, &verdict))
    }

    /// What the SIGTERM left, from the kernel's result, whether SIGKILL
    /// followed, the process as /proc shows it and the grace period that
    /// ends at `end`. None: nothing of sigterm-ignored's (a delivered
    /// SIGTERM to a process podstuck cannot read, or one SIGKILL followed).
    fn judge(
        sent: &Followed<Sent>,
        now: SystemTime,
        (end, grace_from): (SystemTime, GraceFrom),
        standing: &Standing<'_>,
    ) -> Option<Verdict> {
        let s = &sent.more;
        let dropped = s.result == SignalResult::Ignored;
        let process = match standing {
            Standing::Ended => return Some(Verdict::Exited { drain: !dropped && sent.ended.unwrap_or(now) < end }),
            Standing::Unreadable(why) if dropped => return Some(Verdict::DroppedUnread((*why).clone())),
            Standing::Unreadable(_) => return None,
            Standing::There(process) => process,
        };
        if dropped {
            return Some(Verdict::Dropped(dropped_why(process)));
        }
        // It takes SIGTERM. Once SIGKILL came, a process still there is
        // unkillable-task's.
        if s.killed_at.is_some() {
            return None;
        }
        if now < end {
            return Some(Verdict::Draining { left: end.duration_since(now).unwrap_or_default() });
        }
        Some(Verdict::PastGrace {
            late: now.duration_since(end).unwrap_or_default(),
            assumed_grace: grace_from == GraceFrom::Default,
        })
    }

    /// The verdict in words: summary, evidence, fix and advice.
    fn tell(
        pid: u32,
        sent: &Followed<Sent>,
        now: SystemTime,
        (end, grace_from): (SystemTime, GraceFrom),
        standing: &Standing<'_>,
        verdict: &Verdict,
    ) -> Finding {
        let mut f = Self::head(pid, sent, now);
        f.confidence = verdict.confidence();
        f.severity = verdict.severity();
        let waited = human_duration(now.duration_since(sent.at).unwrap_or_default());
        let who = format!("{} (pid {pid})", sent.comm);
        let from = format!("SIGTERM from {} (pid {})", sent.sender.description, sent.sender_pid);
        let grace_words = grace_words(grace_from, end.duration_since(sent.at).unwrap_or_default());
        let kill = || kill_if_same("KILL", pid, sent.start).unwrap_or_default();
        let state = match standing {
            Standing::There(process) => {
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
                process.leader().map(|t| format!(" It is {}.", t.state_words())).unwrap_or_default()
            }
            _ => String::new(),
        };
        match verdict {
            Verdict::Exited { .. } => {
                // Said as it was last told: the end of a drain within its
                // grace period is an info line too.
                f.status = Status::Resolved;
                f.last_seen = sent.ended.unwrap_or(now);
                f.summary = format!("{who} got {from} and has exited since.");
            }
            Verdict::DroppedUnread(why) => {
                f.summary = format!(
                    "{who} got {from} {waited} ago and the kernel dropped it (ignored), so SIGTERM does nothing and the pod waits out {grace_words} until SIGKILL; why is not known: /proc/{pid}: {}.",
                    why.said()
                );
                f.fix = kill();
            }
            Verdict::Dropped(why) => {
                f.summary = match why {
                    Dropped::InitWithoutHandler => format!(
                        "{who} got {from} {waited} ago and the kernel dropped it: it is the init (PID 1) of its PID namespace with no SIGTERM handler, so SIGTERM does nothing and the pod waits out {grace_words} until SIGKILL.{state}"
                    ),
                    Dropped::SigIgn => format!(
                        "{who} got {from} {waited} ago and the kernel dropped it: the process ignores SIGTERM (SIG_IGN, set by the program or inherited from whatever started it), so SIGTERM does nothing and the pod waits out {grace_words} until SIGKILL.{state}"
                    ),
                    Dropped::Unexplained => format!(
                        "{who} got {from} {waited} ago and the kernel dropped it (ignored), so SIGTERM does nothing and the pod waits out {grace_words} until SIGKILL.{state}"
                    ),
                };
                f.fix = kill();
                f.advice.push("for good: handle SIGTERM in the program (exit when it comes), or run it under an init that forwards signals: tini or dumb-init as the entrypoint, `shareProcessNamespace: true` in the pod spec (the pause container is PID 1 then), docker run --init".into());
                f.advice.push("the kill ends the wait now, as SIGKILL at the grace period's end would: SIGTERM cannot end it whatever the wait".into());
            }
            Verdict::Draining { left } => {
                f.summary = format!(
                    "{who} got {from} {waited} ago and is shutting down (draining): normal within {grace_words}, which ends in {}; the runtime sends SIGKILL then.{state}",
                    human_duration(*left)
                );
            }
            Verdict::PastGrace { late, assumed_grace } => {
                f.summary = format!(
                    "{who} got {from} {waited} ago and is still running {} past {grace_words}, and no SIGKILL came: its shutdown does not end, and the runtime has not killed it.{state}",
                    human_duration(*late)
                );
                f.fix = kill();
                f.advice.push("the grace period is over: the kill is what the runtime should have done; check why it did not (journalctl -u containerd -u crio --since -15min)".into());
                if *assumed_grace {
                    f.advice.push("the 30 s is kubelet's default, assumed: a pod with a longer terminationGracePeriodSeconds is still within it (kubectl get pod -o jsonpath='{.metadata.deletionTimestamp}' says when it ends)".into());
                }
            }
        }
        f
    }
}

/// What sigterm-ignored decides of a SIGTERM to a pod's process, before a
/// word of it is said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The process has exited since; `drain`: it took the SIGTERM and
    /// ended within its grace period (an info line, as it was told).
    Exited { drain: bool },
    /// The kernel dropped the SIGTERM; /proc cannot say why (as read).
    DroppedUnread(Unreadable),
    /// The kernel dropped the SIGTERM, and /proc says why.
    Dropped(Dropped),
    /// It took SIGTERM and is shutting down, `left` of its grace period to go.
    Draining { left: Duration },
    /// It took SIGTERM, runs on `late` past its grace period and no SIGKILL
    /// came; `assumed_grace`: that grace period is kubelet's default.
    PastGrace { late: Duration, assumed_grace: bool },
}

impl Verdict {
    pub fn confidence(&self) -> Confidence {
        match self {
            Verdict::Dropped(Dropped::InitWithoutHandler | Dropped::SigIgn) => Confidence::Confirmed,
            Verdict::Exited { drain: false }
            | Verdict::DroppedUnread(_)
            | Verdict::Dropped(Dropped::Unexplained)
            | Verdict::PastGrace { assumed_grace: false, .. } => Confidence::Likely,
            Verdict::Exited { drain: true } | Verdict::Draining { .. } | Verdict::PastGrace { .. } => {
                Confidence::Possible
            }
        }
    }

    /// A drain within its grace period is normal: an info line.
    pub fn severity(&self) -> Severity {
        match self {
            Verdict::Exited { drain: true } | Verdict::Draining { .. } => Severity::Info,
            _ => Severity::Warning,
        }
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
    fn lifecycle(&mut self, event: &LifecycleEvent, identity: &LifecycleIdentity) {
        // A pod's own process signalling its own is no teardown.
        let from_the_pod = identity.sender_pod.is_some() && identity.sender_pod == identity.pod_uid;
        if let Lifecycle::Signal(sent) = &event.what {
            // Any sender's, the pod's own too: it ends the process all the same.
            if sent.sig == libc::SIGKILL && sent.group && sent.result == SignalResult::Delivered {
                self.killed.add(sent.target_pid, identity.target_start, event.time);
            }
        }
        match &event.what {
            // A process already dying takes no SIGTERM, whatever the verdict.
            Lifecycle::Signal(sent)
                if sent.sig == libc::SIGTERM && self.already_exiting(sent, identity.target_start) => {}
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
                        make_room(&mut self.learnt, &f.pod, LEARNT_MAX, |(at, _)| *at);
                        self.learnt.insert(f.pod.clone(), (event.time, grace));
                    }
                }
            }
            Lifecycle::Exit { .. } => {
                self.sent.exited(event.pid, event.start, event.time);
                self.killed.exited(event.pid, event.start);
            }
            _ => {}
        }
    }

    fn shutdowns(&mut self, shutdowns: &BTreeMap<PodUid, PodShutdown>) {
        self.api_ends = shutdowns.iter().map(|(pod, s)| (pod.clone(), s.grace_ends)).collect();
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
    fn what_a_sigterm_left_is_decided_before_it_is_said() {
        let verdict = |result: SignalResult, process: Option<&ProcessState>, now: f64, killed: bool| {
            let mut d = SigtermIgnored::default();
            d.lifecycle(&signal(0.0, libc::SIGTERM, 700, result), &shim());
            if killed {
                d.lifecycle(&signal(1.0, libc::SIGKILL, 700, SignalResult::Delivered), &shim());
            }
            let sent = d.sent.followed(700).expect("followed");
            let standing = process.map_or(Standing::Ended, Standing::There);
            SigtermIgnored::judge(sent, t(now), d.grace_end(sent), &standing)
        };
        let mut init = one_thread(task(700, "app", 'S'));
        init.ns_pid = Some(1);
        let dropped = Some(Verdict::Dropped(Dropped::InitWithoutHandler));
        assert_eq!(verdict(SignalResult::Ignored, Some(&init), 2.0, false), dropped);
        let mut ignoring = init.clone();
        ignoring.ns_pid = Some(7);
        ignoring.sig_ignored = 1 << (libc::SIGTERM - 1);
        assert_eq!(
            verdict(SignalResult::Ignored, Some(&ignoring), 2.0, false),
            Some(Verdict::Dropped(Dropped::SigIgn))
        );
        let secs = Duration::from_secs;
        // kubelet's default grace period of 30 s, assumed.
        let draining = verdict(SignalResult::Delivered, Some(&init), 10.0, false);
        assert_eq!(draining, Some(Verdict::Draining { left: secs(20) }));
        let late = verdict(SignalResult::Delivered, Some(&init), 45.0, false);
        assert_eq!(late, Some(Verdict::PastGrace { late: secs(15), assumed_grace: true }));
        assert_eq!(verdict(SignalResult::Delivered, Some(&init), 45.0, true), None, "unkillable-task's");
        // Gone within its grace period, a drain; past it, not.
        assert_eq!(verdict(SignalResult::Delivered, None, 10.0, false), Some(Verdict::Exited { drain: true }));
        assert_eq!(verdict(SignalResult::Delivered, None, 45.0, false), Some(Verdict::Exited { drain: false }));
        assert_eq!(Verdict::Draining { left: secs(1) }.severity(), Severity::Info);
        assert_eq!(Verdict::Dropped(Dropped::SigIgn).confidence(), Confidence::Confirmed);
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
        d.shutdowns(&BTreeMap::from([(
            pod(),
            PodShutdown { grace_ends: t(120.0), deleted_at: None, containers: vec![] },
        )]));
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

    /// A process of two threads SIGKILLed at 0 s: its leader a zombie, its
    /// worker waiting on an unanswered FUSE request, in D.
    fn dying_with_a_thread_in_d(node: &mut FakeNode, pid: u32) {
        node.fuse.push(task(900, "fuse_server", 'S'));
        let mut worker = task(pid + 1, "worker", 'D');
        worker.pid = pid;
        worker.wchan = Some("request_wait_answer".into());
        worker.stack = vec!["request_wait_answer".into(), "fuse_simple_request".into()];
        let mut p = one_thread(task(pid, "app", 'Z'));
        p.start = 4000;
        p.ns_pid = Some(1);
        p.threads.push(worker);
        p.thread_count = 2;
        node.processes.insert(pid, p);
    }

    /// A SIGTERM at `at` s whose target the kernel read as exiting, or not,
    /// or could not read (None).
    fn sigterm(at: f64, target: u32, result: SignalResult, exiting: Option<bool>) -> LifecycleEvent {
        let mut e = signal(at, libc::SIGTERM, target, result);
        if let Lifecycle::Signal(sent) = &mut e.what {
            sent.group_exiting = exiting;
        }
        e
    }

    #[test]
    fn a_sigterm_to_a_process_the_kernel_read_as_already_exiting_is_never_told_whatever_its_verdict() {
        // 6.x drops it ("ignored"), 5.10 queues it ("delivered"): neither is
        // a process that will not end, even an init with no handler.
        for result in [SignalResult::Ignored, SignalResult::Delivered, SignalResult::AlreadyPending] {
            let mut d = SigtermIgnored::default();
            let mut node = FakeNode::with_mounts(&["77 /mnt/fuse fuse", "20 /sys/fs/fuse/connections fusectl"]);
            dying_with_a_thread_in_d(&mut node, 750);
            d.lifecycle(&signal(0.0, libc::SIGKILL, 750, SignalResult::Delivered), &shim());
            d.lifecycle(&sigterm(0.5, 750, result, Some(true)), &shim());
            for at in [2.0, 10.0, 40.0, 120.0] {
                let told = review(&mut d, &mut node, at);
                assert!(told.is_empty(), "{result:?} at {at} s: {told:?}");
            }
        }
    }

    #[test]
    fn a_sigterm_before_the_process_was_exiting_is_told_as_ever() {
        let mut d = SigtermIgnored::default();
        let mut node = FakeNode::default();
        init_without_handler(&mut node, 760);
        d.lifecycle(&sigterm(0.0, 760, SignalResult::Ignored, Some(false)), &shim());
        let told = review(&mut d, &mut node, 2.0);
        assert!(matches!(&told[..], [f] if f.confidence == Confidence::Confirmed), "{told:?}");
        // The runtime's SIGKILL, then a SIGTERM to the dying process: the
        // first finding stands and is resolved at the exit, once.
        d.lifecycle(&signal(20.0, libc::SIGKILL, 760, SignalResult::Delivered), &shim());
        d.lifecycle(&sigterm(21.0, 760, SignalResult::Ignored, Some(true)), &shim());
        let told = review(&mut d, &mut node, 22.0);
        assert!(matches!(&told[..], [f] if f.count == 1 && f.status == Status::Active), "{told:?}");
        d.lifecycle(&exit(23.0, 760), &shim());
        let over = review(&mut d, &mut node, 24.0);
        assert!(matches!(&over[..], [f] if f.status == Status::Resolved), "{over:?}");
    }

    #[test]
    fn where_the_kernel_could_not_read_the_exit_state_a_sigkill_it_delivered_before_says_the_process_is_dying() {
        let mut d = SigtermIgnored::default();
        let mut node = FakeNode::default();
        dying_with_a_thread_in_d(&mut node, 770);
        d.lifecycle(&signal(0.0, libc::SIGKILL, 770, SignalResult::Delivered), &shim());
        d.lifecycle(&sigterm(0.5, 770, SignalResult::Ignored, None), &shim());
        assert!(review(&mut d, &mut node, 5.0).is_empty());
        // A SIGKILL the kernel dropped (sent from inside the init's own
        // namespace) ends nothing: the SIGTERM after it is told.
        init_without_handler(&mut node, 780);
        d.lifecycle(&signal(6.0, libc::SIGKILL, 780, SignalResult::Ignored), &shim());
        d.lifecycle(&sigterm(6.5, 780, SignalResult::Ignored, None), &shim());
        let told = review(&mut d, &mut node, 8.0);
        assert!(matches!(&told[..], [f] if f.id == "sigterm-ignored:780@4000"), "{told:?}");
        // Another process by now under the pid SIGKILL reached: not dying.
        let mut reused = shim();
        reused.target_start = Some(ProcessStart(5000));
        let mut again = one_thread(task(770, "app", 'S'));
        (again.start, again.ns_pid) = (5000, Some(1));
        node.processes.insert(770, again);
        d.lifecycle(&sigterm(9.0, 770, SignalResult::Ignored, None), &reused);
        let told = review(&mut d, &mut node, 11.0);
        assert!(told.iter().any(|f| f.id == "sigterm-ignored:770@5000"), "{told:?}");
    }

    #[test]
    fn a_dying_process_whose_thread_waits_in_d_is_unkillable_task_and_never_sigterm_ignored() {
        use crate::diagnose::unkillable_task::UnkillableTask;
        let mut detectors: [Box<dyn Detector>; 2] =
            [Box::new(SigtermIgnored::default()), Box::new(UnkillableTask::default())];
        let mut node = FakeNode::with_mounts(&["77 /mnt/fuse fuse", "20 /sys/fs/fuse/connections fusectl"]);
        dying_with_a_thread_in_d(&mut node, 790);
        for d in detectors.iter_mut() {
            d.lifecycle(&signal(0.0, libc::SIGKILL, 790, SignalResult::Delivered), &shim());
            d.lifecycle(&sigterm(1.0, 790, SignalResult::Ignored, Some(true)), &shim());
        }
        let told: Vec<Finding> = detectors
            .iter_mut()
            .flat_map(|d| d.review(&mut Review { now: t(5.0), in_flight: &[], node: &mut node }))
            .collect();
        let kinds: Vec<Kind> = told.iter().map(|f| f.kind).collect();
        assert_eq!(kinds, [Kind::UnkillableTask], "{told:?}");
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
