//! P8 `dir-not-empty`: a pod's volume directory cannot be removed because
//! files were written into it while it was not mounted (or after the
//! unmount), so rmdir fails with ENOTEMPTY on every retry.
//!
//! Signature: rmdir or unlinkat(AT_REMOVEDIR) of a pod's directory failing
//! with ENOTEMPTY, again (Go's RemoveAll meets one ENOTEMPTY on the way and
//! then succeeds: that is not this). Confirmed by listing the directory.

use super::shell::{empty_dir, file_in, list, one_after_another, remove_dirs, remove_entries, unmount};
use super::track::{Attempts, FailureLog};
use super::{removes, removes_dir, shown, Confidence, Detector, Finding, Kind, Review, Severity, Status};
use crate::event::CallEvent;
use crate::identify::Identity;
use crate::inspect::mounts::mounts_under;

/// Entries named in the evidence and in the fix.
const ENTRIES_NAMED: usize = 5;

pub struct DirNotEmpty {
    failures: FailureLog,
}

impl Default for DirNotEmpty {
    /// Looked at from kubelet's (or a runtime's) retry, reviewed as soon as
    /// it comes. Not from the first ENOTEMPTY: every RemoveAll (Go's, rm
    /// -r's) of a directory that holds anything starts with one, then
    /// empties it and succeeds; a look in between would find entries and
    /// tell a removal in progress as stuck.
    fn default() -> Self {
        DirNotEmpty { failures: FailureLog::looked_at_from_the_retry() }
    }
}

impl DirNotEmpty {
    fn decide(a: &mut Attempts, review: &mut Review<'_>) -> Option<Finding> {
        let node = &mut *review.node;
        let path = a.path.clone();
        let mut f = Finding::new(Kind::DirNotEmpty, &shown(&path), Severity::Critical, a.first);
        a.stamp(&mut f);
        let rhythm = a.rhythm_words();
        f.evidence("trace", a.trace_words());
        let whose = a.pod.as_ref().map(|p| format!(" of pod {p}")).unwrap_or_default();
        let what = format!("{} cannot remove {}{whose}", a.actor.description, shown(&path));
        let below: Vec<Vec<u8>> = node
            .host_mounts()
            .map(|m| mounts_under(&m, &path).into_iter().map(|m| m.mount_point.clone()).collect())
            .unwrap_or_default();
        if !below.is_empty() {
            // Never print an rm for a tree with a mount inside: it would delete the volume's data.
            f.confidence = Confidence::Confirmed;
            for m in &below {
                f.evidence("mountinfo", format!("{} is mounted inside it", shown(m)));
            }
            f.summary = format!(
                "{what}: it is not empty because something is still mounted inside it. {}{rhythm}.",
                a.failed_words()
            );
            f.fix = one_after_another(below.iter().rev().map(|m| unmount(m)));
            return Some(f);
        }
        let sample = match node.dir_sample(&path, ENTRIES_NAMED) {
            Ok(s) => s,
            // Removed since by a path the trace did not see succeed (a
            // runtime that renames a layer before removing it): over.
            Err(why) if why.is_gone() => {
                a.succeeded = Some(review.now);
                f.status = Status::Resolved;
                f.evidence("readdir", format!("{} no longer exists", shown(&path)));
                f.summary = format!("{what}: {}; it is gone now.", a.failed_words());
                return Some(f);
            }
            Err(why) => {
                a.read_again_soon_if(&why);
                f.confidence = Confidence::Likely;
                f.evidence("readdir", format!("{}: {}", shown(&path), why.said()));
                f.summary = format!(
                    "{what}: {}{rhythm}; what is left in it is not known yet: {}.",
                    a.failed_words(),
                    why.said()
                );
                f.fix = list(&path);
                return Some(f);
            }
        };
        if sample.counted == 0 {
            f.confidence = Confidence::Possible;
            f.evidence("readdir", format!("{} is empty now", shown(&path)));
            f.summary = format!("{what}: {}, but it is empty now: the next retry should succeed.", a.failed_words());
            f.fix = remove_dirs([&path]);
            return Some(f);
        }
        f.confidence = Confidence::Confirmed;
        let names: Vec<String> = sample.names.iter().map(|n| shown(n)).collect();
        let more = if sample.counted as usize > names.len() {
            format!(" and {} more", sample.counted as usize - names.len())
        } else {
            String::new()
        };
        f.evidence(
            "readdir",
            format!(
                "{} holds {} entr{}: {}{more}",
                shown(&path),
                sample.counted,
                if sample.counted == 1 { "y" } else { "ies" },
                names.join(", ")
            ),
        );
        f.detail("entries", sample.counted);
        f.summary = format!(
            "{what}: it is not empty ({}{more}), files written into the volume directory while nothing was mounted there. {}{rhythm}.",
            names.join(", "),
            a.failed_words()
        );
        let named = sample.complete && sample.counted as usize <= ENTRIES_NAMED;
        f.fix = match (named, empty_dir(&path)) {
            (true, _) => remove_entries(sample.names.iter().map(|n| file_in(&path, n))),
            (false, Some(find)) => find,
            (false, None) => {
                f.advice.push(format!("no find ... -delete is printed: {} is not an absolute path, and find would read it as part of its expression", shown(&path)));
                list(&path)
            }
        };
        f.advice.push(format!("look before you delete: {}", list(&path)));
        Some(f)
    }
}

impl Detector for DirNotEmpty {
    fn wants_review(&self) -> bool {
        self.failures.wants_a_look()
    }

    fn observe(&mut self, event: &CallEvent, identity: &Identity) {
        if removes(event) && identity.pod_uid.is_some() {
            self.failures.observe(event, identity, |errno| errno == libc::ENOTEMPTY && removes_dir(event));
        }
    }

    fn review(&mut self, review: &mut Review<'_>) -> Vec<Finding> {
        self.failures.review(review, |a, review| {
            // A single ENOTEMPTY is how RemoveAll starts; wait for a retry.
            if a.failures < 2 {
                return None;
            }
            Self::decide(a, review)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::*;
    use super::*;

    /// A directory removed by a path the trace never saw succeed (renamed
    /// first, then removed): the finding ends, it is not left active.
    #[test]
    fn a_directory_gone_since_ends_its_finding() {
        let mut d = DirNotEmpty::default();
        let mut node = FakeNode::with_mounts(&[]);
        let m = csi_mount();
        node.dirs.insert(m.clone().into_bytes(), vec!["stray.log"]);
        let calls = [rmdir(0.0, "kubelet", &m, -libc::ENOTEMPTY), rmdir(0.5, "kubelet", &m, -libc::ENOTEMPTY)];
        assert_eq!(run(&mut d, &mut node, &calls, 1.0)[0].status, Status::Active);
        node.dirs.clear();
        let later = run(&mut d, &mut node, &[], 7.0);
        assert_eq!(later[0].status, Status::Resolved, "{:?}", later[0].summary);
        assert!(later[0].evidence.iter().any(|e| e.fact.contains("no longer exists")), "{:?}", later[0].evidence);
        assert!(run(&mut d, &mut node, &[], 14.0).iter().all(|f| f.status == Status::Resolved));
    }

    #[test]
    fn stray_files_in_a_volume_dir() {
        let mut d = DirNotEmpty::default();
        let mut node = FakeNode::with_mounts(&[]);
        let m = csi_mount();
        node.dirs.insert(m.clone().into_bytes(), vec!["stray.log"]);
        let calls = [rmdir(0.0, "kubelet", &m, -libc::ENOTEMPTY), rmdir(0.5, "kubelet", &m, -libc::ENOTEMPTY)];
        let f = &run(&mut d, &mut node, &calls, 1.0)[0];
        assert_eq!(f.kind, Kind::DirNotEmpty);
        assert_eq!(f.fix, format!("rm -r --one-file-system -- {m}/stray.log"));
        assert!(f.evidence.iter().any(|e| e.fact.contains("stray.log")));
    }

    #[test]
    fn remove_all_meeting_one_enotempty_then_succeeding_is_not_a_finding() {
        let mut d = DirNotEmpty::default();
        let mut node = FakeNode::with_mounts(&[]);
        let dir = format!("{KUBELET}/pods/{POD}/volumes/kubernetes.io~empty-dir/cache");
        let calls = [
            rmdir(0.0, "kubelet", &dir, -libc::ENOTEMPTY),
            unlink(0.01, "kubelet", &format!("{dir}/f"), 0),
            rmdir(0.02, "kubelet", &dir, 0),
        ];
        assert!(run(&mut d, &mut node, &calls, 10.0).is_empty());
        // A lone ENOTEMPTY that is never retried is not told either.
        let calls = [rmdir(20.0, "kubelet", &dir, -libc::ENOTEMPTY)];
        assert!(run(&mut d, &mut node, &calls, 40.0).is_empty());
    }

    /// Go's RemoveAll of a directory that holds files: its first
    /// unlinkat(AT_REMOVEDIR) fails ENOTEMPTY, then it removes the entries
    /// and the directory. A review soon after that first failure finds the
    /// entries still there: it must not tell it, nor ask for that review.
    #[test]
    fn a_removal_in_progress_after_its_first_enotempty_is_not_told() {
        let mut d = DirNotEmpty::default();
        let mut node = FakeNode::with_mounts(&[]);
        let dir = format!("{KUBELET}/pods/{POD}/volumes/kubernetes.io~empty-dir/cache");
        node.dirs.insert(dir.clone().into_bytes(), vec!["a", "b"]);
        let first = rmdir(0.0, "dockerd", &dir, -libc::ENOTEMPTY);
        d.observe(&first.event, &first.identity);
        assert!(!d.wants_review(), "one ENOTEMPTY is how every RemoveAll starts");
        assert!(run(&mut d, &mut node, &[], 0.025).is_empty());
        node.dirs.clear();
        let done = [unlink(0.03, "dockerd", &format!("{dir}/a"), 0), rmdir(0.04, "dockerd", &dir, 0)];
        assert!(run(&mut d, &mut node, &done, 1.0).is_empty());
        // kubelet's retry of a directory still holding a file asks for a
        // review at once, and is told confirmed there.
        let m = csi_mount();
        node.dirs.insert(m.clone().into_bytes(), vec!["data.db"]);
        let first = rmdir(10.0, "kubelet", &m, -libc::ENOTEMPTY);
        d.observe(&first.event, &first.identity);
        assert!(!d.wants_review());
        let retry = rmdir(12.0, "kubelet", &m, -libc::ENOTEMPTY);
        d.observe(&retry.event, &retry.identity);
        assert!(d.wants_review());
        let told = run(&mut d, &mut node, &[], 12.025);
        assert!(matches!(&told[..], [f] if f.confidence == Confidence::Confirmed), "{told:?}");
    }

    #[test]
    fn a_mount_inside_is_unmounted_never_deleted() {
        let mut d = DirNotEmpty::default();
        let m = csi_mount();
        let mut node = FakeNode::with_mounts(&[&format!("90 {m}/data tmpfs")]);
        let calls = [rmdir(0.0, "kubelet", &m, -libc::ENOTEMPTY), rmdir(0.5, "kubelet", &m, -libc::ENOTEMPTY)];
        let f = &run(&mut d, &mut node, &calls, 1.0)[0];
        assert_eq!(f.fix, format!("umount -- {m}/data"));
    }
}
