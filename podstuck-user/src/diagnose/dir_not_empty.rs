//! P8 `dir-not-empty`: a pod's volume directory cannot be removed because
//! files were written into it while it was not mounted (or after the
//! unmount), so rmdir fails with ENOTEMPTY on every retry.
//!
//! Signature: rmdir or unlinkat(AT_REMOVEDIR) of a pod's directory failing
//! with ENOTEMPTY, again (Go's RemoveAll meets one ENOTEMPTY on the way and
//! then succeeds: that is not this). Confirmed by listing the directory.

use super::route::{Attempt, Claim, Refusal, Target};
use super::shell::{empty_dir, file_in, find_mount, list, one_after_another, remove_dirs, remove_entries, unmount};
use super::track::{Attempts, CallerView, FailureLog};
use super::{shown, Confidence, Detector, Finding, Kind, Review, Severity, Status};
use crate::event::CallEvent;
use crate::identify::Identity;
use crate::inspect::mounts::mounts_under;
use crate::inspect::{DirSample, MountElsewhere, NodeInspector, Unreadable};

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

/// What dir-not-empty decides of a pod's directory refused as not
/// empty, before a word of it is said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The caller's mount table cannot be read: nothing is proven.
    TableUnreadable(Unreadable),
    /// Something is still mounted inside it (the mount points, deepest
    /// last): never a removal, which would delete a volume's data.
    MountedInside(Vec<Vec<u8>>),
    /// The directory itself is a mountpoint in another namespace.
    MountedElsewhere(Vec<MountElsewhere>),
    /// It was removed since, by a path the trace did not see.
    Gone,
    /// Its entries could not be read now.
    EntriesUnread(Unreadable),
    /// Empty now: the next retry should work.
    EmptyNow,
    /// It holds these entries (some, and how many).
    Holds(DirSample),
}

impl Verdict {
    pub fn confidence(&self) -> Confidence {
        match self {
            Verdict::MountedInside(_) | Verdict::MountedElsewhere(_) | Verdict::Holds(_) => Confidence::Confirmed,
            Verdict::Gone | Verdict::EntriesUnread(_) => Confidence::Likely,
            Verdict::TableUnreadable(_) | Verdict::EmptyNow => Confidence::Possible,
        }
    }
}

impl DirNotEmpty {
    fn decide(a: &mut Attempts, review: &mut Review<'_>) -> Option<Finding> {
        // The caller's namespace: its mounts inside the directory, and
        // where the directory is a mountpoint in another (the host's).
        let view = a.caller_view(review.node);
        let verdict = Self::judge(a, review.node, &view);
        match &verdict {
            Verdict::TableUnreadable(why) | Verdict::EntriesUnread(why) => a.read_again_soon_if(why),
            Verdict::Gone => a.succeeded = Some(review.now),
            _ => {}
        }
        Some(Self::tell(a, &view, &verdict))
    }

    /// Reads the mounts in and on the directory, then its entries, and decides.
    fn judge(a: &Attempts, node: &mut dyn NodeInspector, view: &CallerView) -> Verdict {
        let path = a.path.as_slice();
        let mounts = match view.mounts() {
            Ok(mounts) => mounts,
            Err(why) => return Verdict::TableUnreadable(why),
        };
        let below: Vec<Vec<u8>> = mounts_under(mounts, path).into_iter().map(|m| m.mount_point.clone()).collect();
        if !below.is_empty() {
            return Verdict::MountedInside(below);
        }
        let elsewhere = node.mounts_elsewhere(path, view.mntns);
        if !elsewhere.is_empty() {
            return Verdict::MountedElsewhere(elsewhere);
        }
        match view.reader().and_then(|root| node.dir_sample(path, ENTRIES_NAMED, root)) {
            Ok(sample) if sample.counted == 0 => Verdict::EmptyNow,
            Ok(sample) => Verdict::Holds(sample),
            Err(why) if why.is_gone() => Verdict::Gone,
            Err(why) => Verdict::EntriesUnread(why),
        }
    }

    /// The verdict in words: the finding, its evidence, its fix.
    fn tell(a: &Attempts, view: &CallerView, verdict: &Verdict) -> Finding {
        let path = a.path.as_slice();
        let mut f = Finding::new(Kind::DirNotEmpty, &shown(path), Severity::Critical, a.first);
        a.stamp(&mut f);
        f.confidence = verdict.confidence();
        let (rhythm, failed) = (a.rhythm_words(), a.failed_words());
        f.evidence("trace", a.trace_words());
        let whose = a.pod.as_ref().map(|p| format!(" of pod {p}")).unwrap_or_default();
        let what = format!("{} cannot remove {}{whose}", a.actor.description, shown(path));
        match verdict {
            Verdict::TableUnreadable(why) => {
                f.evidence("mountinfo", format!("{}: {}", view.whose(), why.said()));
                f.summary = format!(
                    "{what}: {failed}{rhythm}; {} cannot be read, so what is in it can no longer be proven.",
                    view.whose()
                );
            }
            Verdict::MountedInside(below) => {
                for m in below {
                    f.evidence("mountinfo", format!("{} is mounted inside it", shown(m)));
                }
                f.summary =
                    format!("{what}: it is not empty because something is still mounted inside it. {failed}{rhythm}.");
                view.place_fix(&mut f, one_after_another(below.iter().rev().map(|m| unmount(m))));
            }
            Verdict::MountedElsewhere(elsewhere) => {
                for other in elsewhere {
                    f.evidence("mountinfo", format!("{} is {}", shown(path), other.words()));
                }
                f.summary = format!(
                    "{what}: {failed}{rhythm}, and the directory is {}: whatever is removed in it may be that volume's data, so no removal is printed.",
                    elsewhere[0].words()
                );
                f.fix = find_mount(path);
            }
            Verdict::Gone => {
                f.status = Status::Resolved;
                f.evidence("readdir", format!("{} no longer exists", shown(path)));
                f.summary = format!("{what}: {failed}; it is gone now.");
            }
            Verdict::EntriesUnread(why) => {
                f.evidence("readdir", format!("{}: {}", shown(path), why.said()));
                f.summary = format!("{what}: {failed}{rhythm}; what is left in it is not known yet: {}.", why.said());
                view.place_fix(&mut f, list(path));
            }
            Verdict::EmptyNow => {
                f.evidence("readdir", format!("{} is empty now", shown(path)));
                f.summary = format!("{what}: {failed}, but it is empty now: the next retry should succeed.");
                view.place_fix(&mut f, remove_dirs([path]));
            }
            Verdict::Holds(sample) => Self::holds(a, &mut f, view, sample, &what),
        }
        f
    }

    /// A directory that holds entries, in words: what, and their removal.
    fn holds(a: &Attempts, f: &mut Finding, view: &CallerView, sample: &DirSample, what: &str) {
        let path = a.path.as_slice();
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
                shown(path),
                sample.counted,
                if sample.counted == 1 { "y" } else { "ies" },
                names.join(", ")
            ),
        );
        f.detail("entries", sample.counted);
        f.summary = format!(
            "{what}: it is not empty ({}{more}), files written into the volume directory while nothing was mounted there. {}{}.",
            names.join(", "),
            a.failed_words(),
            a.rhythm_words()
        );
        let named = sample.complete && sample.counted as usize <= ENTRIES_NAMED;
        let fix = match (named, empty_dir(path)) {
            (true, _) => remove_entries(sample.names.iter().map(|n| file_in(path, n))),
            (false, Some(find)) => find,
            (false, None) => {
                f.advice.push(format!("no find ... -delete is printed: {} is not an absolute path, and find would read it as part of its expression", shown(path)));
                list(path)
            }
        };
        view.place_fix(f, fix);
        if let Ok(look) = view.fix(list(path)) {
            f.advice.push(format!("look before you delete: {look}"));
        }
    }
}

impl Detector for DirNotEmpty {
    fn wants_review(&self) -> bool {
        self.failures.wants_a_look()
    }

    /// A directory refused as not empty, but a subPath's (subpath-left's:
    /// what is left there is its bind mounts).
    fn claims(&self) -> &'static [Claim] {
        &[Claim {
            attempts: &[Attempt::RemoveDir],
            refusals: &[Refusal::NotEmpty],
            targets: &[
                Target::Volume,
                Target::BlockVolume,
                Target::PodDir,
                Target::Cgroup,
                Target::RuntimeDir,
                Target::Cni,
                Target::Other,
            ],
        }]
    }

    fn failed(&mut self, event: &CallEvent, identity: &Identity) {
        // A pod's directory: what is left in it is the pod's.
        if identity.pod_uid.is_some() {
            self.failures.record(event, identity);
        }
    }

    fn observe(&mut self, event: &CallEvent, identity: &Identity) {
        if identity.pod_uid.is_some() {
            self.failures.ended_by(event, identity);
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

    /// What dir-not-empty decides of `calls` on `node`.
    fn verdict(node: &mut FakeNode, calls: &[Call]) -> Verdict {
        let a = attempts_of(calls);
        let view = a.caller_view(node);
        DirNotEmpty::judge(&a, node, &view)
    }

    #[test]
    fn what_keeps_a_directory_from_going_is_decided_before_it_is_said() {
        let m = csi_mount();
        let calls = [rmdir(0.0, "kubelet", &m, -libc::ENOTEMPTY), rmdir(0.5, "kubelet", &m, -libc::ENOTEMPTY)];
        let mut node = FakeNode::with_mounts(&[]);
        node.dirs.insert(m.clone().into_bytes(), vec!["stray.log"]);
        let Verdict::Holds(sample) = verdict(&mut node, &calls) else { panic!("holds entries") };
        assert_eq!((sample.counted, sample.names), (1, vec![b"stray.log".to_vec()]));
        node.dirs.insert(m.clone().into_bytes(), vec![]);
        assert_eq!(verdict(&mut node, &calls), Verdict::EmptyNow);
        node.dirs.clear();
        assert_eq!(verdict(&mut node, &calls), Verdict::Gone);
        let inside = format!("{m}/data");
        let mut node = FakeNode::with_mounts(&[&format!("60 {inside} tmpfs")]);
        assert_eq!(verdict(&mut node, &calls), Verdict::MountedInside(vec![inside.into_bytes()]));
        let mut node =
            FakeNode::with_mounts(&[]).with_namespace(4026532600, 700, "csi-node", &[&format!("60 {m} ext4")]);
        assert!(matches!(verdict(&mut node, &calls), Verdict::MountedElsewhere(e) if e.len() == 1));
    }

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

    /// The directory kubelet's namespace sees empty of mounts is a
    /// mountpoint in another (a CSI plugin's copy): what is in it may be
    /// that volume's data, so no removal is printed.
    #[test]
    fn a_directory_mounted_in_another_namespace_gets_no_removal() {
        let m = csi_mount();
        let mut node =
            FakeNode::with_mounts(&[]).with_namespace(4026532600, 700, "csi-node", &[&format!("60 {m} ext4")]);
        node.dirs.insert(m.clone().into_bytes(), vec!["data.db"]);
        let calls = [rmdir(0.0, "kubelet", &m, -libc::ENOTEMPTY), rmdir(0.5, "kubelet", &m, -libc::ENOTEMPTY)];
        let f = &run(&mut DirNotEmpty::default(), &mut node, &calls, 1.0)[0];
        assert!(!f.fix.contains("rm ") && !f.fix.contains("-delete"), "{}", f.fix);
        assert_eq!(f.fix, format!("findmnt -- {m}"));
        assert!(f.summary.contains("mount namespace mnt:[4026532600] of pid 700 (csi-node)"), "{}", f.summary);
    }

    /// kubelet in a container: the directory is read below its member's
    /// root, and the fix enters its namespace.
    #[test]
    fn in_kubelets_container_the_directory_is_read_and_emptied_there() {
        let m = csi_mount();
        let mut node = FakeNode::with_mounts(&[]).with_namespace(4026532500, 900, "kubelet", &[]);
        node.dirs.insert(m.clone().into_bytes(), vec!["stray.log"]);
        let calls: Vec<Call> =
            [0.0, 0.5].iter().map(|s| rmdir(*s, "kubelet", &m, -libc::ENOTEMPTY).in_namespace(4026532500)).collect();
        let f = &run(&mut DirNotEmpty::default(), &mut node, &calls, 1.0)[0];
        assert_eq!(node.roots_read, vec![900]);
        assert_eq!(f.fix, entered(900, 10_900, &format!("rm -r --one-file-system -- {m}/stray.log")));
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
        feed(&mut d, &first);
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
        feed(&mut d, &first);
        assert!(!d.wants_review());
        let retry = rmdir(12.0, "kubelet", &m, -libc::ENOTEMPTY);
        feed(&mut d, &retry);
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
