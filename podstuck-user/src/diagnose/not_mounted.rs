//! P7 `not-mounted`: something keeps unmounting a path that is not mounted,
//! typically a CSI driver whose NodeUnpublishVolume is not idempotent: the
//! volume was unmounted already, the driver fails the retry with EINVAL,
//! kubelet retries forever and the pod never finishes.
//!
//! Signature: umount2 failing with EINVAL again and again on one path,
//! with no later success there. Confirmed when the path is absent from the
//! caller's mount table (its own spelling resolved: symlinks followed).
//!
//! Not a finding: the container runtimes' unmounts (dockerd, containerd,
//! their shims, runc). They unmount before removing as a matter of course
//! and treat EINVAL as "already unmounted" (dockerd starts every container
//! and layer removal with `umount2(<dir>, MNT_DETACH)` on a plain
//! directory, again on each retry), so their EINVAL never keeps anything
//! from finishing. When their teardown does fail, the cause is another
//! finding (EBUSY, EPERM, ...). An EINVAL retried by an actor that has
//! another finding is told under that one (see [`super::consequences`]).

use super::shell::{list, remove_dirs, unmount};
use super::track::{Attempts, FailureLog};
use super::{removes, shown, unmounts, Confidence, Detector, Finding, Kind, Review, Severity};
use crate::event::CallEvent;
use crate::identify::actor::Role;
use crate::identify::pod::PathArea;
use crate::identify::Identity;
use crate::inspect::mounts::{mount_at, mount_containing};

#[derive(Default)]
pub struct NotMounted {
    failures: FailureLog,
}

/// Whether the actor is a container runtime, for which EINVAL from an
/// unmount means "nothing to do".
fn unmounts_idempotently(role: Role) -> bool {
    matches!(role, Role::Runtime | Role::Shim | Role::Runc)
}

impl NotMounted {
    fn decide(a: &mut Attempts, review: &mut Review<'_>) -> Option<Finding> {
        // One EINVAL may be a bad flag; only a repeat on the same path is this.
        if a.failures < 2 {
            return None;
        }
        let node = &mut *review.node;
        let view = a.caller_view(node);
        let path = view.path.clone();
        let volume = a.area == Some(PathArea::Volume);
        let severity = if volume { Severity::Critical } else { Severity::Warning };
        let mut f = Finding::new(Kind::NotMounted, &shown(&a.path), severity, a.first);
        a.stamp(&mut f);
        let rhythm = a.rhythm_words();
        f.evidence("trace", a.trace_words());
        a.resolution_evidence(&view, &mut f);
        let pod = a.pod.as_ref().map(|p| format!(" of pod {p}")).unwrap_or_default();
        let whose = &view.whose();
        match view.mounts() {
            Ok(mounts) => {
                if let Some(m) = mount_at(mounts, &path) {
                    // Mounted, yet EINVAL: a flag the kernel refused, not this.
                    f.confidence = Confidence::Possible;
                    f.evidence("mountinfo", format!("{} is a {} mountpoint in {whose}", shown(&path), m.fstype));
                    f.summary = format!("{} keeps failing to unmount {}{pod} with EINVAL although it is mounted: check the flags it passes.", a.actor.description, shown(&a.path));
                    f.fix = view.fix(unmount(&path));
                    return Some(f);
                }
                f.confidence = Confidence::Confirmed;
                let on = mount_containing(mounts, &path)
                    .map(|m| format!(" (it is a plain directory on {})", m.fstype))
                    .unwrap_or_default();
                f.evidence("mountinfo", format!("{} is not a mountpoint in {whose}{on}", shown(&path)));
            }
            Err(why) => {
                a.read_again_soon_if(&why);
                f.evidence("mountinfo", format!("the mount table: {}", why.said()))
            }
        }
        let why = if volume || a.actor.role == Role::CsiPlugin.as_str() {
            "The unmount is not idempotent (a CSI driver's NodeUnpublishVolume failing for a volume already unmounted), so teardown never finishes."
        } else {
            "Whatever it is tearing down waits for an unmount that can never succeed."
        };
        f.summary = format!(
            "{} keeps unmounting {}{pod}, which is not mounted: umount2 fails with EINVAL {} times{rhythm}. {why}",
            a.actor.description,
            shown(&a.path),
            a.failures
        );
        // rmdir removes the target only when it is an empty directory, and
        // then only the retry's reason to fail: safe, and the way out.
        // Another namespace's path is not the node's: not looked into, and
        // rmdir is safe unlooked.
        let host = view.namespace.as_ref().is_ok_and(|ns| ns.host);
        let empty = if host { node.dir_sample(&path, 1).map(|d| d.counted == 0) } else { Ok(true) };
        match empty {
            Ok(false) => {
                f.evidence("directory", format!("{} is not empty", shown(&path)));
                f.fix = list(&path);
                f.advice.push(
                    "look at what is left there before removing it: it may be data that was never on the volume".into(),
                );
            }
            _ => f.fix = remove_dirs([&path]),
        }
        f.fix = view.fix(std::mem::take(&mut f.fix));
        if volume || a.actor.role == Role::CsiPlugin.as_str() {
            f.advice
                .push("upgrade the CSI driver: NodeUnpublishVolume must succeed when the target is not mounted".into());
        }
        Some(f)
    }
}

impl Detector for NotMounted {
    fn observe(&mut self, event: &CallEvent, identity: &Identity) {
        if unmounts(event) || removes(event) {
            self.failures.observe(event, identity, |errno| {
                errno == libc::EINVAL && unmounts(event) && !unmounts_idempotently(identity.actor.role)
            });
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
    fn repeated_einval_on_a_plain_directory() {
        let mut d = NotMounted::default();
        let mut node = FakeNode::with_mounts(&[]);
        let m = csi_mount();
        let calls = [
            umount(0.0, "umount", &m, -libc::EINVAL),
            umount(0.5, "umount", &m, -libc::EINVAL),
            umount(1.5, "umount", &m, -libc::EINVAL),
        ];
        let f = &run(&mut d, &mut node, &calls, 2.0)[0];
        assert_eq!(f.kind, Kind::NotMounted);
        assert_eq!(f.confidence, Confidence::Confirmed);
        assert_eq!(f.severity, Severity::Critical);
        assert_eq!(f.fix, format!("rmdir -- {m}"));
        assert!(f.summary.contains("fails with EINVAL 3 times"), "{}", f.summary);
    }

    #[test]
    fn a_single_einval_is_not_enough() {
        let mut d = NotMounted::default();
        let mut node = FakeNode::with_mounts(&[]);
        assert!(run(&mut d, &mut node, &[umount(0.0, "umount", "/mnt/x", -libc::EINVAL)], 10.0).is_empty());
    }

    #[test]
    fn a_runtimes_routine_unmount_before_removal_is_never_a_finding() {
        let mut d = NotMounted::default();
        let mut node = FakeNode::with_mounts(&[]);
        let dir = "/var/lib/docker/containers/0123abcd";
        let calls: Vec<Call> = ["dockerd", "containerd", "containerd-shim", "runc"]
            .iter()
            .flat_map(|comm| {
                (0..5).map(move |i| {
                    call(i as f64, comm, podstuck_common::Syscall::Umount2, libc::MNT_DETACH as u64, dir, -libc::EINVAL)
                })
            })
            .collect();
        assert!(run(&mut d, &mut node, &calls, 10.0).is_empty());
    }

    #[test]
    fn a_symlinked_spelling_is_judged_by_the_path_it_resolves_to() {
        let mut d = NotMounted::default();
        let mut node = FakeNode::with_mounts(&["60 /run/x/rootfs overlay"]);
        node.symlinks.push(("/var/run".into(), "/run".into()));
        let calls = [
            umount(0.0, "umount", "/var/run/x/rootfs", -libc::EINVAL),
            umount(0.5, "umount", "/var/run/x/rootfs", -libc::EINVAL),
        ];
        let f = &run(&mut d, &mut node, &calls, 1.0)[0];
        assert_eq!(f.confidence, Confidence::Possible, "it is mounted: {}", f.summary);
        assert!(f.evidence.iter().any(|e| e.fact.contains("/var/run/x/rootfs is /run/x/rootfs")), "{:?}", f.evidence);
    }

    #[test]
    fn words_fit_the_actor_and_a_full_directory_is_not_rmdired() {
        let mut d = NotMounted::default();
        let mut node = FakeNode::with_mounts(&[]);
        node.dirs.insert(b"/srv/app/data".to_vec(), vec!["keep.db"]);
        let calls = [
            umount(0.0, "backup-agent", "/srv/app/data", -libc::EINVAL),
            umount(5.0, "backup-agent", "/srv/app/data", -libc::EINVAL),
        ];
        let f = &run(&mut d, &mut node, &calls, 6.0)[0];
        assert!(!f.summary.contains("CSI"), "{}", f.summary);
        assert_eq!(f.fix, "ls -la -- /srv/app/data");
    }
}
