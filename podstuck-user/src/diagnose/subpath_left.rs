//! P10 `subpath-left`: subPath bind mounts of a pod left behind under
//! `pods/<uid>/volume-subpaths/<volume>/<container>/<index>`, so kubelet's
//! CleanSubPaths fails on every retry and the pod's directory stays.
//!
//! Signature: EBUSY, ENOENT or ENOTEMPTY on paths under `volume-subpaths/`.
//! Confirmed by the subpath mounts still in the host mountinfo.

use super::shell::{one_after_another, unmount};
use super::track::{Attempts, FailureLog};
use super::{removes, shown, unmounts, Confidence, Detector, Finding, Kind, Review, Severity};
use crate::event::CallEvent;
use crate::identify::pod::PathArea;
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
        let root = subpaths_dir(&a.path)?;
        // kubelet's namespace: its container's on kind, k3d, minikube, Talos, RKE1.
        let view = a.caller_view(review.node);
        let mounts = view.mounts().ok()?;
        let mut left: Vec<Mount> = mounts_under(mounts, &root).into_iter().cloned().collect();
        if left.is_empty() {
            // Nothing mounted there: not this (ENOENT of something already gone).
            return None;
        }
        left.sort_by_key(|m| std::cmp::Reverse(m.mount_point.len()));
        let key_mount = left
            .iter()
            .find(|m| is_at_or_below(&m.mount_point, &a.path) || is_at_or_below(&a.path, &m.mount_point))
            .unwrap_or(&left[0])
            .clone();
        let mut f = Finding::new(Kind::SubpathLeft, &shown(&root), Severity::Critical, a.first);
        a.stamp(&mut f);
        f.paths = vec![key_mount.mount_point.clone()];
        f.paths.extend(left.iter().filter(|m| m.mount_point != key_mount.mount_point).map(|m| m.mount_point.clone()));
        f.confidence = Confidence::Confirmed;
        let rhythm = a.rhythm_words();
        f.evidence("trace", a.trace_words());
        for m in &left {
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
            "{} subPath bind mount(s){pod} are left under {}, so {} cannot clean them up: {}{rhythm}.",
            left.len(),
            shown(&root),
            a.actor.description,
            a.failed_words()
        );
        f.fix = view.fix(one_after_another(left.iter().map(|m| unmount(&m.mount_point))));
        f.advice.push("kubelet removes the directories itself on its next retry".into());
        Some(f)
    }
}

impl Detector for SubpathLeft {
    fn observe(&mut self, event: &CallEvent, identity: &Identity) {
        if identity.path_area == Some(PathArea::VolumeSubpath) && (removes(event) || unmounts(event)) {
            self.failures
                .observe(event, identity, |errno| matches!(errno, libc::EBUSY | libc::ENOENT | libc::ENOTEMPTY));
        }
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
        assert_eq!(f.fix, format!("nsenter -t 812 -m -- umount -- {index}"));
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
