//! P10 `subpath-left`: subPath bind mounts of a pod left behind under
//! `pods/<uid>/volume-subpaths/<volume>/<container>/<index>`, so kubelet's
//! CleanSubPaths fails on every retry and the pod's directory stays.
//!
//! Signature: EBUSY, ENOENT or ENOTEMPTY on paths under `volume-subpaths/`.
//! Confirmed by the subpath mounts still in the host mountinfo.

use super::route::{Attempt, Claim, Refusal, Target};
use super::shell::{one_after_another, unmount};
use super::track::{Attempts, CallerView, FailureLog};
use super::{shown, Confidence, Detector, Finding, Kind, Review, Severity};
use crate::event::CallEvent;
use crate::identify::Identity;
use crate::inspect::mounts::{is_at_or_below, mounts_under};
use crate::inspect::Mount;

#[derive(Default)]
pub struct SubpathLeft {
    failures: FailureLog,
}

/// `.../pods/<uid>/volume-subpaths` of a path below it.
fn subpaths_dir(path: &[u8]) -> Option<Vec<u8>> {
    let marker = b"/volume-subpaths";
    let at = path.windows(marker.len()).position(|w| w == marker)?;
    let end = at + marker.len();
    (end == path.len() || path[end] == b'/').then(|| path[..end].to_vec())
}

impl SubpathLeft {
    fn decide(a: &mut Attempts, review: &mut Review<'_>) -> Option<Finding> {
        // kubelet's namespace: its container's on kind, k3d, minikube, Talos, RKE1.
        let view = a.caller_view(review.node);
        match Self::judge(a, &view)? {
            // Nothing mounted there: not this (ENOENT of something already gone).
            Verdict::NothingLeft => None,
            Verdict::Left { under, mounts, own } => {
                let mut f = Self::tell(a, &under, &mounts, own);
                view.place_fix(&mut f, one_after_another(mounts.iter().map(|m| unmount(&m.mount_point))));
                Some(f)
            }
        }
    }

    /// The subPath mounts still under the call's `volume-subpaths/`, in
    /// the caller's namespace. None where that cannot be read, or the path
    /// is not below a `volume-subpaths/`.
    fn judge(a: &Attempts, view: &CallerView) -> Option<Verdict> {
        let under = subpaths_dir(&a.path)?;
        let mut left: Vec<Mount> = mounts_under(view.mounts().ok()?, &under).into_iter().cloned().collect();
        // Deepest first: the order they unmount in.
        left.sort_by_key(|m| std::cmp::Reverse(m.mount_point.len()));
        let own = left
            .iter()
            .position(|m| is_at_or_below(&m.mount_point, &a.path) || is_at_or_below(&a.path, &m.mount_point))
            .unwrap_or(0);
        Some(if left.is_empty() { Verdict::NothingLeft } else { Verdict::Left { under, mounts: left, own } })
    }

    /// The verdict in words: the finding and its evidence (the fix is
    /// placed by the caller's view).
    fn tell(a: &Attempts, under: &[u8], left: &[Mount], own: usize) -> Finding {
        let mut f = Finding::new(Kind::SubpathLeft, &shown(under), Severity::Critical, a.first);
        a.stamp(&mut f);
        // The mount the call was about first: the finding's path.
        f.paths = vec![left[own].mount_point.clone()];
        f.paths.extend(left.iter().enumerate().filter(|(i, _)| *i != own).map(|(_, m)| m.mount_point.clone()));
        f.confidence = Confidence::Confirmed;
        f.evidence("trace", a.trace_words());
        for m in left {
            f.evidence(
                "mountinfo",
                format!(
                    "{} is still mounted ({} {}, from {})",
                    shown(&m.mount_point),
                    m.fstype,
                    m.source,
                    shown(&m.root)
                ),
            );
        }
        let pod = a.pod.as_ref().map(|p| format!(" of pod {p}")).unwrap_or_default();
        f.summary = format!(
            "{} subPath bind mount(s){pod} are left under {}, so {} cannot clean them up: {}{}.",
            left.len(),
            shown(under),
            a.actor.description,
            a.failed_words(),
            a.rhythm_words()
        );
        f.advice.push("kubelet removes the directories itself on its next retry".into());
        f
    }
}

/// What subpath-left decides of a failed cleanup below `volume-subpaths/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// subPath mounts still there, deepest first (the order they unmount
    /// in); `mounts[own]` is the one the call was about.
    Left { under: Vec<u8>, mounts: Vec<Mount>, own: usize },
    /// None: not this cause (an ENOENT of something already gone).
    NothingLeft,
}

impl Detector for SubpathLeft {
    /// What kubelet's CleanSubPaths trips on under `volume-subpaths/`;
    /// but an unmount refused busy, which is a holder's (mount-held).
    fn claims(&self) -> &'static [Claim] {
        &[
            Claim {
                attempts: &[Attempt::Detach, Attempt::RemoveDir, Attempt::RemoveFile],
                refusals: &[Refusal::Busy, Refusal::Missing, Refusal::NotEmpty],
                targets: &[Target::Subpath],
            },
            Claim {
                attempts: &[Attempt::Unmount],
                refusals: &[Refusal::Missing, Refusal::NotEmpty],
                targets: &[Target::Subpath],
            },
        ]
    }

    fn failed(&mut self, event: &CallEvent, identity: &Identity) {
        self.failures.record(event, identity);
    }

    fn observe(&mut self, event: &CallEvent, identity: &Identity) {
        self.failures.ended_by(event, identity);
    }

    fn review(&mut self, review: &mut Review<'_>) -> Vec<Finding> {
        self.failures.review(review, Self::decide)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::*;
    use super::*;

    #[test]
    fn the_mounts_left_are_decided_deepest_first_the_calls_own_named() {
        let subpaths = format!("{KUBELET}/pods/{POD}/volume-subpaths");
        let (own, other) = (format!("{subpaths}/config/app/0"), format!("{subpaths}/config/app/1/deeper"));
        let mut node = FakeNode::with_mounts(&[&format!("95 {own} ext4"), &format!("96 {other} ext4")]);
        let a = attempts_of(&[rmdir(0.0, "kubelet", &own, -libc::EBUSY)]);
        let view = a.caller_view(&mut node);
        let Some(Verdict::Left { under, mounts, own: at }) = SubpathLeft::judge(&a, &view) else { panic!("left") };
        assert_eq!(under, subpaths.as_bytes());
        let points: Vec<&[u8]> = mounts.iter().map(|m| m.mount_point.as_slice()).collect();
        assert_eq!((points, at), (vec![other.as_bytes(), own.as_bytes()], 1));
        let mut node = FakeNode::with_mounts(&[]);
        let view = a.caller_view(&mut node);
        assert_eq!(SubpathLeft::judge(&a, &view), Some(Verdict::NothingLeft));
        let elsewhere = attempts_of(&[rmdir(0.0, "kubelet", &csi_mount(), -libc::EBUSY)]);
        assert_eq!(SubpathLeft::judge(&elsewhere, &view), None);
    }

    #[test]
    fn a_leftover_subpath_bind_mount() {
        let mut d = SubpathLeft::default();
        let index = format!("{KUBELET}/pods/{POD}/volume-subpaths/config/app/0");
        let mut node = FakeNode::with_mounts(&[&format!("95 {index} ext4")]);
        let calls = [rmdir(0.0, "kubelet", &index, -libc::EBUSY), rmdir(0.5, "kubelet", &index, -libc::EBUSY)];
        let f = &run(&mut d, &mut node, &calls, 1.0)[0];
        assert_eq!(f.kind, Kind::SubpathLeft);
        assert_eq!(f.paths[0], index.as_bytes());
        assert_eq!(f.fix, format!("umount -- {index}"));
        assert_eq!(f.pod_uid, Some(pod()));
    }

    #[test]
    fn in_kubelets_container_the_subpath_is_found_there_and_unmounted_there() {
        let index = format!("{KUBELET}/pods/{POD}/volume-subpaths/config/app/0");
        let mut node =
            FakeNode::with_mounts(&[]).with_namespace(4026532500, 812, "kubelet", &[&format!("95 {index} ext4")]);
        let calls: Vec<Call> =
            [0.0, 0.5].iter().map(|at| rmdir(*at, "kubelet", &index, -libc::EBUSY).in_namespace(4026532500)).collect();
        let f = &run(&mut SubpathLeft::default(), &mut node, &calls, 1.0)[0];
        assert_eq!(f.fix, entered(812, 10_812, &format!("umount -- {index}")));
    }

    #[test]
    fn enoent_with_nothing_mounted_is_not_a_finding() {
        let mut d = SubpathLeft::default();
        let index = format!("{KUBELET}/pods/{POD}/volume-subpaths/config/app/0");
        let mut node = FakeNode::with_mounts(&[]);
        let calls = [rmdir(0.0, "kubelet", &index, -libc::ENOENT), rmdir(0.5, "kubelet", &index, -libc::ENOENT)];
        assert!(run(&mut d, &mut node, &calls, 3.0).is_empty());
        assert_eq!(subpaths_dir(b"/k/pods/u/volume-subpaths/v/c/0"), Some(b"/k/pods/u/volume-subpaths".to_vec()));
        assert_eq!(subpaths_dir(b"/k/pods/u/volume-subpathsX/v"), None);
    }
}
