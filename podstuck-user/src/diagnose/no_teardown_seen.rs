//! P15, no-teardown-seen: with `--pod`, nothing on this node has worked on
//! the pod for a while: no removal, unmount or cgroup call concerning it,
//! no call in flight, no exec, signal or exit. A pod stuck in Terminating
//! while its node is silent is stuck elsewhere: kubelet never learnt of
//! the deletion, or the node's side is done and the API holds the pod (a
//! finalizer, a NotReady node). Said once in plain words, so that silence
//! never reads as "the node is fine", and at the run's end even when the
//! run was shorter than the wait: nothing seen at all is worth saying.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use super::{human_duration, Confidence, Detector, Finding, Kind, Review, Severity, Status};
use crate::event::CallEvent;
use crate::identify::pod::PodUid;
use crate::identify::Identity;
use crate::identify::LifecycleIdentity;
use crate::lifecycle::LifecycleEvent;

/// Quiet for this long, a pod's teardown is said to be not under way:
/// longer than the longest wait of the teardown it looks for, kubelet's
/// volume backoff (doubling up to 2m2s between retries).
pub const QUIET_FOR: Duration = Duration::from_secs(150);

struct Pod {
    /// The latest call, call in flight or lifecycle event concerning it.
    last_seen: Option<SystemTime>,
    /// Whether its finding is active (told), to tell its end once.
    active: bool,
}

pub struct NoTeardownSeen {
    pods: BTreeMap<PodUid, Pod>,
    /// The first review: when watching began.
    started: Option<SystemTime>,
    closing: bool,
}

impl NoTeardownSeen {
    /// The pods `--pod` names; none (the whole node): never says anything.
    pub fn new(pods: Vec<PodUid>) -> NoTeardownSeen {
        let pods = pods.into_iter().map(|uid| (uid, Pod { last_seen: None, active: false })).collect();
        NoTeardownSeen { pods, started: None, closing: false }
    }

    fn seen(&mut self, pod: Option<&PodUid>, at: SystemTime) {
        if let Some(p) = pod.and_then(|uid| self.pods.get_mut(uid)) {
            p.last_seen = Some(p.last_seen.map_or(at, |t| t.max(at)));
        }
    }

    /// Whether `pod` has been quiet long enough to say so, `now`.
    fn judge(pod: &Pod, started: SystemTime, now: SystemTime, closing: bool) -> Verdict {
        let since = pod.last_seen.unwrap_or(started).max(started);
        let quiet = now.duration_since(since).unwrap_or_default();
        // At the end, a run that saw nothing of the pod says so, however short.
        let nothing_at_all = closing && pod.last_seen.is_none() && quiet > Duration::ZERO;
        if quiet >= QUIET_FOR || nothing_at_all {
            Verdict::Quiet { since, quiet, seen_any: pod.last_seen.is_some() }
        } else {
            Verdict::Working { since, quiet }
        }
    }

    /// The verdict in words; `ended`: the end of a quiet spell once told.
    fn tell(uid: &PodUid, verdict: &Verdict, ended: bool) -> Finding {
        let (since, quiet, seen_any) = match *verdict {
            Verdict::Quiet { since, quiet, seen_any } => (since, quiet, seen_any),
            Verdict::Working { since, quiet } => (since, quiet, true),
        };
        let mut f = Finding::new(Kind::NoTeardownSeen, uid.as_str(), Severity::Warning, since);
        f.pod_uid = Some(uid.clone());
        f.pods = vec![uid.clone()];
        f.confidence = Confidence::Likely;
        let what = "no removal, unmount or cgroup call concerning it, no CNI plugin run for it, no signal to its processes and no exit of them";
        let when = match seen_any {
            true => format!("for the last {}", human_duration(quiet)),
            false => format!("in the {} podstuck watched", human_duration(quiet)),
        };
        f.summary = format!(
            "Nothing on this node is working on pod {}'s teardown: {what} {when}. If the pod is stuck in Terminating, the cause is not on this node's side: kubelet may never have learnt of the deletion, or the node's part is done and the API holds the pod (a finalizer, a NotReady node).",
            uid.as_str()
        );
        f.evidence("trace", format!("nothing concerning pod {} {when}", uid.as_str()));
        f.fix = format!("podstuck explain {}", uid.as_str());
        f.advice.push("explain reads the API side (finalizers, the node's readiness, volumes that do not detach, kubelet's warnings); run it where a kubeconfig reaches the cluster, or give watch --pod NAMESPACE/NAME to have it joined here".into());
        f.advice.push("if kubelet never acted: its log says whether it saw the deletion (journalctl -u kubelet --since -15min | grep <pod name>)".into());
        if ended {
            f.status = Status::Resolved;
            f.summary = format!("Work on pod {}'s teardown was seen again on this node.", uid.as_str());
        }
        f
    }
}

/// What no-teardown-seen decides of one watched pod at a review.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Nothing concerning the pod for `quiet` (past kubelet's longest
    /// backoff, or the whole of a run now ending), since `since`;
    /// `seen_any`: whether anything was seen of it at all.
    Quiet { since: SystemTime, quiet: Duration, seen_any: bool },
    /// Something worked on it `quiet` ago: not (or no longer) this.
    Working { since: SystemTime, quiet: Duration },
}

impl Detector for NoTeardownSeen {
    fn observe(&mut self, event: &CallEvent, identity: &Identity) {
        self.seen(identity.pod_uid.as_ref(), event.time);
    }

    fn lifecycle(&mut self, event: &LifecycleEvent, identity: &LifecycleIdentity) {
        self.seen(identity.pod_uid.as_ref(), event.time);
        // kubelet retrying a CSI plugin it cannot reach works on every pod
        // whose volume it is for.
        for volume in &identity.csi_volumes {
            self.seen(Some(&volume.pod), event.time);
        }
    }

    fn closing(&mut self) {
        self.closing = true;
    }

    fn review(&mut self, review: &mut Review<'_>) -> Vec<Finding> {
        let now = review.now;
        let started = *self.started.get_or_insert(now);
        for call in review.in_flight {
            // A call still in flight is work under way, however long it hangs.
            if let Some(p) = call.pod_uid.as_ref().and_then(|uid| self.pods.get_mut(uid)) {
                p.last_seen = Some(now);
            }
        }
        let mut out = Vec::new();
        for (uid, pod) in self.pods.iter_mut() {
            let verdict = Self::judge(pod, started, now, self.closing);
            match verdict {
                Verdict::Quiet { .. } => {
                    pod.active = true;
                    out.push(Self::tell(uid, &verdict, false));
                }
                Verdict::Working { .. } if pod.active => {
                    pod.active = false;
                    out.push(Self::tell(uid, &verdict, true));
                }
                Verdict::Working { .. } => {}
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::fake::{pod, rmdir, t, FakeNode};

    fn review(d: &mut NoTeardownSeen, at: f64) -> Vec<Finding> {
        d.review(&mut Review { now: t(at), in_flight: &[], node: &mut FakeNode::default() })
    }

    #[test]
    fn how_long_a_pod_was_left_alone_is_decided_before_it_is_said() {
        let quiet = |last_seen: Option<f64>, now: f64, closing: bool| {
            let pod = Pod { last_seen: last_seen.map(t), active: false };
            NoTeardownSeen::judge(&pod, t(10.0), t(now), closing)
        };
        let secs = Duration::from_secs_f64;
        assert_eq!(quiet(None, 100.0, false), Verdict::Working { since: t(10.0), quiet: secs(90.0) });
        assert_eq!(quiet(None, 160.0, false), Verdict::Quiet { since: t(10.0), quiet: secs(150.0), seen_any: false });
        assert_eq!(quiet(Some(20.0), 169.0, false), Verdict::Working { since: t(20.0), quiet: secs(149.0) });
        assert_eq!(
            quiet(Some(20.0), 170.0, false),
            Verdict::Quiet { since: t(20.0), quiet: secs(150.0), seen_any: true }
        );
        // A call before watching began counts from the start.
        assert_eq!(quiet(Some(1.0), 12.0, false), Verdict::Working { since: t(10.0), quiet: secs(2.0) });
        // The end of a run that saw nothing of the pod says so; one that saw something does not.
        assert_eq!(quiet(None, 12.0, true), Verdict::Quiet { since: t(10.0), quiet: secs(2.0), seen_any: false });
        assert!(matches!(quiet(Some(11.0), 12.0, true), Verdict::Working { .. }));
    }

    #[test]
    fn a_pod_nobody_touches_is_said_past_kubelets_longest_backoff_and_its_end_when_work_shows() {
        let mut d = NoTeardownSeen::new(vec![pod()]);
        assert!(review(&mut d, 0.0).is_empty());
        assert!(review(&mut d, 123.0).is_empty(), "kubelet may retry a volume 2m2s after its last try");
        let told = review(&mut d, 150.5);
        let [f] = &told[..] else { panic!("{told:?}") };
        assert_eq!((f.kind, f.status), (Kind::NoTeardownSeen, Status::Active));
        assert!(f
            .summary
            .starts_with(&format!("Nothing on this node is working on pod {}'s teardown", pod().as_str())));
        assert_eq!(f.fix, format!("podstuck explain {}", pod().as_str()));
        let call = rmdir(151.0, "kubelet", &format!("/var/lib/kubelet/pods/{}/volumes/x", pod().as_str()), -16);
        d.observe(&call.event, &call.identity);
        let back = review(&mut d, 151.5);
        assert!(matches!(&back[..], [f] if f.status == Status::Resolved), "{back:?}");
        assert!(review(&mut d, 160.0).is_empty(), "work seen 9 s ago");
    }

    #[test]
    fn a_short_run_says_it_at_its_end_only_when_it_saw_nothing_and_the_whole_node_never() {
        let mut d = NoTeardownSeen::new(vec![pod()]);
        review(&mut d, 0.0);
        d.closing();
        let told = review(&mut d, 5.0);
        assert!(matches!(&told[..], [f] if f.summary.contains("in the 5.0 s podstuck watched")), "{told:?}");
        let mut d = NoTeardownSeen::new(vec![pod()]);
        review(&mut d, 0.0);
        let call = rmdir(1.0, "kubelet", &format!("/var/lib/kubelet/pods/{}/volumes/x", pod().as_str()), 0);
        d.observe(&call.event, &call.identity);
        d.closing();
        assert!(review(&mut d, 5.0).is_empty(), "work was seen 4 s before the end");
        let mut whole = NoTeardownSeen::new(Vec::new());
        review(&mut whole, 0.0);
        whole.closing();
        assert!(review(&mut whole, 100.0).is_empty());
    }
}
