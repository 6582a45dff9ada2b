//! P7 `not-mounted`: something keeps unmounting a path that is not mounted,
//! typically a CSI driver whose NodeUnpublishVolume is not idempotent: the
//! volume was unmounted already, the driver fails the retry with EINVAL,
//! kubelet retries forever and the pod never finishes.
//!
//! Signature: umount2 failing with EINVAL again and again on one path.
//! Confirmed when the path is absent from the caller's mount table.

use super::shell::word;
use super::track::{Attempts, FailureLog};
use super::{removes, shown, unmounts, Confidence, Detector, Finding, Kind, Review, Severity};
use crate::event::CallEvent;
use crate::identify::pod::PathArea;
use crate::identify::Identity;
use crate::inspect::mounts::{mount_at, mount_containing};

pub struct NotMounted {
    host_mntns: u32,
    failures: FailureLog,
}

impl NotMounted {
    pub fn new(host_mntns: u32) -> NotMounted {
        NotMounted { host_mntns, failures: FailureLog::default() }
    }

    fn decide(host_mntns: u32, a: &mut Attempts, review: &mut Review<'_>) -> Option<Finding> {
        // One EINVAL may be a bad flag; only a repeat on the same path is this.
        if a.failures < 2 {
            return None;
        }
        let node = &mut *review.node;
        let path = a.path.clone();
        let (mounts, whose) = a.caller_mounts(host_mntns, node);
        let severity = if a.area == Some(PathArea::Volume) { Severity::Critical } else { Severity::Warning };
        let mut f = Finding::new(Kind::NotMounted, &shown(&path), severity, a.first);
        a.stamp(&mut f);
        let rhythm = a.rhythm_words();
        f.evidence("trace", a.trace_words());
        let pod = a.pod.as_ref().map(|p| format!(" of pod {p}")).unwrap_or_default();
        match mounts {
            Ok(mounts) => {
                if let Some(m) = mount_at(&mounts, &path) {
                    // Mounted, yet EINVAL: a flag the kernel refused, not this.
                    f.confidence = Confidence::Possible;
                    f.evidence("mountinfo", format!("{} is a {} mountpoint in {whose}", shown(&path), m.fstype));
                    f.summary = format!("{} keeps failing to unmount {}{pod} with EINVAL although it is mounted: check the flags it passes.", a.actor.description, shown(&path));
                    f.fix = format!("umount {}", word(&path));
                    return Some(f);
                }
                f.confidence = Confidence::Confirmed;
                let on = mount_containing(&mounts, &path).map(|m| format!(" (it is a plain directory on {})", m.fstype)).unwrap_or_default();
                f.evidence("mountinfo", format!("{} is not a mountpoint in {whose}{on}", shown(&path)));
            }
            Err(why) => f.evidence("mountinfo", format!("unreadable: {why}")),
        }
        f.summary = format!(
            "{} keeps unmounting {}{pod}, which is not mounted: umount2 fails with EINVAL {} times{rhythm}. The unmount is not idempotent (a CSI driver's NodeUnpublishVolume failing for a volume already unmounted), so teardown never finishes.",
            a.actor.description,
            shown(&path),
            a.failures
        );
        f.fix = format!("rmdir {}", word(&path));
        f.advice.push("upgrade the CSI driver: NodeUnpublishVolume must succeed when the target is not mounted".into());
        Some(f)
    }
}

impl Detector for NotMounted {
    fn observe(&mut self, event: &CallEvent, identity: &Identity) {
        let Ok(path) = &identity.abs_path else { return };
        match event.errno() {
            None if unmounts(event) || removes(event) => self.failures.succeeded(path, event.time),
            Some(libc::EINVAL) if unmounts(event) => self.failures.failed(path, event, identity),
            _ => {}
        }
    }

    fn review(&mut self, review: &mut Review<'_>) -> Vec<Finding> {
        let host = self.host_mntns;
        self.failures.review(review.now, |a| Self::decide(host, a, review))
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::*;
    use super::*;

    #[test]
    fn repeated_einval_on_a_plain_directory() {
        let mut d = NotMounted::new(0);
        let mut node = FakeNode::with_mounts(&[]);
        let m = csi_mount();
        let calls = [umount(0.0, "umount", &m, -libc::EINVAL), umount(0.5, "umount", &m, -libc::EINVAL), umount(1.5, "umount", &m, -libc::EINVAL)];
        let f = &run(&mut d, &mut node, &calls, 2.0)[0];
        assert_eq!(f.kind, Kind::NotMounted);
        assert_eq!(f.confidence, Confidence::Confirmed);
        assert_eq!(f.severity, Severity::Critical);
        assert_eq!(f.fix, format!("rmdir {m}"));
        assert!(f.summary.contains("fails with EINVAL 3 times"), "{}", f.summary);
    }

    #[test]
    fn a_single_einval_is_not_enough() {
        let mut d = NotMounted::new(0);
        let mut node = FakeNode::with_mounts(&[]);
        assert!(run(&mut d, &mut node, &[umount(0.0, "umount", "/mnt/x", -libc::EINVAL)], 10.0).is_empty());
    }
}
