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

use super::holders::{holder_facts, process_words};
use super::route::{Attempt, Claim, Refusal, Target};
use super::shell::{in_mount_namespace_of, kill_if_same, list, one_after_another, remove_dirs, unmount};
use super::track::{Attempts, CallerView, FailureLog};
use super::{shown, Confidence, Detector, Finding, Kind, Review, Severity};
use crate::event::CallEvent;
use crate::identify::actor::Role;
use crate::identify::pod::PathArea;
use crate::identify::Identity;
use crate::inspect::mounts::{mount_at, mount_containing};
use crate::inspect::{MountElsewhere, MountHolder, NodeInspector, Unreadable};

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
    /// The path is not mounted in the caller's namespace but is in
    /// another (`elsewhere`, the host's first): say where and who uses
    /// it, and print no removal; the fix unmounts it where it is mounted,
    /// once its users are stopped (each kill checked against its start).
    fn mounted_elsewhere(f: &mut Finding, a: &Attempts, view: &CallerView, elsewhere: &[MountElsewhere], volume: bool) {
        f.confidence = Confidence::Confirmed;
        f.severity = Severity::Critical;
        for other in elsewhere {
            f.evidence("mountinfo", format!("{} is {}", shown(&view.path), other.words()));
            for fact in holder_facts(&other.holders) {
                f.evidence("/proc", fact);
            }
        }
        let there = &elsewhere[0];
        let holders: Vec<&MountHolder> = elsewhere.iter().flat_map(|e| &e.holders).collect();
        let used = match holders.first() {
            Some(h) => format!(", in use by {}", process_words(h.pid, &h.comm, h.owner.as_ref())),
            None => String::new(),
        };
        f.summary = format!(
            "{} keeps unmounting {}, which is not mounted in {}: umount2 fails with EINVAL {} times. But it is still mounted in {} ({} from {}){used}: the unmount reached only the caller's own copy (its namespace does not share the mounts below the kubelet directory), so the volume is still in use there. Removing the directory from the caller's namespace would detach that mount under whoever uses it: no removal is printed.",
            a.actor.description,
            shown(&a.path),
            view.whose(),
            a.failures,
            there.namespace.words(),
            there.mount.fstype,
            there.mount.source,
        );
        let unmount_there = match there.namespace.host {
            true => Some(unmount(&there.mount.mount_point)),
            false => in_mount_namespace_of(
                there.namespace.member,
                there.namespace.member_start,
                &unmount(&there.mount.mount_point),
            ),
        };
        let mut seen = std::collections::BTreeSet::new();
        let kills: Option<Vec<String>> =
            holders.iter().filter(|h| seen.insert(h.pid)).map(|h| kill_if_same("TERM", h.pid, h.start)).collect();
        match (kills, unmount_there) {
            (Some(kills), Some(unmount)) => f.fix = one_after_another(kills.into_iter().chain([unmount])),
            (None, _) => f.advice.push(
                "no fix is printed: the start of a process using it could not be read, so a kill by its pid could hit another process by the time it is pasted; stop its users, then unmount it where it is mounted".into(),
            ),
            (_, None) => f.advice.push(format!(
                "no fix is printed: when pid {}, through which {} would be entered, started could not be read",
                there.namespace.member,
                there.namespace.words()
            )),
        }
        if volume || a.actor.role == Role::CsiPlugin.as_str() {
            f.advice.push("give the CSI node plugin's pod the kubelet directory with mountPropagation: Bidirectional, so that its unmounts reach the node".into());
        }
    }

    fn decide(a: &mut Attempts, review: &mut Review<'_>) -> Option<Finding> {
        // One EINVAL may be a bad flag; only a repeat on the same path is this.
        if a.failures < 2 {
            return None;
        }
        let node = &mut *review.node;
        let view = a.caller_view(node);
        let verdict = Self::judge(node, &view);
        if let Verdict::NotMounted { table: Err(why), .. } = &verdict {
            a.read_again_soon_if(why);
        }
        Some(Self::tell(a, &view, &verdict))
    }

    /// Reads the caller's table, the other namespaces' and the directory,
    /// and decides.
    fn judge(node: &mut dyn NodeInspector, view: &CallerView) -> Verdict {
        let path = view.path.as_slice();
        let table = match view.mounts() {
            Ok(mounts) => match mount_at(mounts, path) {
                Some(m) => return Verdict::MountedAfterAll { fstype: m.fstype.clone() },
                None => Ok(mount_containing(mounts, path).map(|m| m.fstype.clone())),
            },
            Err(why) => Err(why),
        };
        // Where the same directory is still a mountpoint elsewhere (the
        // host's namespace, when the caller's is a private copy), the
        // unmount reached only the caller's copy.
        let elsewhere = node.mounts_elsewhere(path, view.mntns);
        let dir = match elsewhere.is_empty() {
            true => match view.reader().and_then(|root| node.dir_sample(path, 1, root)) {
                Ok(sample) if sample.counted == 0 => Dir::Empty,
                Ok(_) => Dir::NotEmpty,
                Err(_) => Dir::Unread,
            },
            false => Dir::Unread,
        };
        Verdict::NotMounted { table, elsewhere, dir }
    }

    /// The verdict in words: the finding, its evidence, its fix.
    fn tell(a: &Attempts, view: &CallerView, verdict: &Verdict) -> Finding {
        let path = view.path.as_slice();
        let volume = a.area == Some(PathArea::Volume);
        let severity = if volume { Severity::Critical } else { Severity::Warning };
        let mut f = Finding::new(Kind::NotMounted, &shown(&a.path), severity, a.first);
        a.stamp(&mut f);
        f.confidence = verdict.confidence();
        let rhythm = a.rhythm_words();
        f.evidence("trace", a.trace_words());
        a.resolution_evidence(view, &mut f);
        let pod = a.pod.as_ref().map(|p| format!(" of pod {p}")).unwrap_or_default();
        let whose = &view.whose();
        let (elsewhere, dir) = match verdict {
            Verdict::MountedAfterAll { fstype } => {
                f.evidence("mountinfo", format!("{} is a {fstype} mountpoint in {whose}", shown(path)));
                f.summary = format!("{} keeps failing to unmount {}{pod} with EINVAL although it is mounted: check the flags it passes.", a.actor.description, shown(&a.path));
                view.place_fix(&mut f, unmount(path));
                return f;
            }
            Verdict::NotMounted { table, elsewhere, dir } => {
                match table {
                    Ok(on) => {
                        let on =
                            on.as_ref().map(|fs| format!(" (it is a plain directory on {fs})")).unwrap_or_default();
                        f.evidence("mountinfo", format!("{} is not a mountpoint in {whose}{on}", shown(path)));
                    }
                    Err(why) => f.evidence("mountinfo", format!("the mount table: {}", why.said())),
                }
                (elsewhere, dir)
            }
        };
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
        // An rmdir in the caller's namespace would detach a mount still
        // there elsewhere, under whoever uses it.
        if !elsewhere.is_empty() {
            Self::mounted_elsewhere(&mut f, a, view, elsewhere, volume);
            return f;
        }
        // rmdir removes the target only when it is an empty directory, and
        // then only the retry's reason to fail: safe, and the way out.
        let fix = match dir {
            Dir::NotEmpty => {
                f.evidence("directory", format!("{} is not empty", shown(path)));
                f.advice.push(
                    "look at what is left there before removing it: it may be data that was never on the volume".into(),
                );
                list(path)
            }
            Dir::Empty | Dir::Unread => remove_dirs([path]),
        };
        view.place_fix(&mut f, fix);
        if volume || a.actor.role == Role::CsiPlugin.as_str() {
            f.advice
                .push("upgrade the CSI driver: NodeUnpublishVolume must succeed when the target is not mounted".into());
        }
        f
    }
}

/// What not-mounted decides of an unmount refused with EINVAL again and
/// again, before a word of it is said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Mounted after all (a filesystem of this type): a flag the kernel
    /// refused, not this cause.
    MountedAfterAll { fstype: String },
    /// Not a mountpoint in the caller's namespace (the filesystem the
    /// directory is on, when its table could be read); where it is still
    /// mounted in another namespace, and what is left in the directory.
    NotMounted { table: Result<Option<String>, Unreadable>, elsewhere: Vec<MountElsewhere>, dir: Dir },
}

/// What is in the directory that is not mounted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Dir {
    Empty,
    /// Files left: a removal would refuse, and they may be data.
    NotEmpty,
    /// Not read (or not needed: it is mounted elsewhere).
    Unread,
}

impl Verdict {
    pub fn confidence(&self) -> Confidence {
        match self {
            Verdict::MountedAfterAll { .. } => Confidence::Possible,
            Verdict::NotMounted { table: Ok(_), .. } => Confidence::Confirmed,
            Verdict::NotMounted { elsewhere, .. } if !elsewhere.is_empty() => Confidence::Confirmed,
            Verdict::NotMounted { .. } => Confidence::Likely,
        }
    }
}

impl Detector for NotMounted {
    fn claims(&self) -> &'static [Claim] {
        &[Claim {
            attempts: &[Attempt::Unmount, Attempt::Detach],
            refusals: &[Refusal::NotMounted],
            targets: &Target::ALL,
        }]
    }

    fn failed(&mut self, event: &CallEvent, identity: &Identity) {
        if !unmounts_idempotently(identity.actor.role) {
            self.failures.record(event, identity);
        }
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

    /// What not-mounted decides of `calls` on `node`.
    fn verdict(node: &mut FakeNode, calls: &[Call]) -> Verdict {
        let a = attempts_of(calls);
        let view = a.caller_view(node);
        NotMounted::judge(node, &view)
    }

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
        let plain = |dir| Verdict::NotMounted { table: Ok(Some("ext4".into())), elsewhere: vec![], dir };
        assert_eq!(verdict(&mut node, &calls), plain(Dir::Unread));
        node.dirs.insert(m.clone().into_bytes(), vec!["stray.log"]);
        assert_eq!(verdict(&mut node, &calls), plain(Dir::NotEmpty));
        node.dirs.insert(m.clone().into_bytes(), vec![]);
        assert_eq!(verdict(&mut node, &calls), plain(Dir::Empty));
        node.dirs.clear();
        let mut mounted = FakeNode::with_mounts(&[&format!("50 {m} tmpfs")]);
        assert_eq!(verdict(&mut mounted, &calls), Verdict::MountedAfterAll { fstype: "tmpfs".into() });
        let f = &run(&mut d, &mut node, &calls, 2.0)[0];
        assert_eq!(f.kind, Kind::NotMounted);
        assert_eq!(f.confidence, Confidence::Confirmed);
        assert_eq!(f.severity, Severity::Critical);
        assert_eq!(f.fix, format!("rmdir -- {m}"));
        assert!(f.summary.contains("fails with EINVAL 3 times"), "{}", f.summary);
    }

    /// A CSI node plugin in a mount namespace of its own, the kubelet
    /// directory a private copy of the node's: its unmount took its own
    /// copy of the volume away, the node's stays mounted with a process in
    /// it. An rmdir in the plugin's namespace would detach the node's
    /// mount under that process: none is printed; the node's user is named.
    #[test]
    fn a_plugins_private_copy_unmounted_leaves_the_nodes_mount_in_use_and_no_removal_is_printed() {
        const PLUGIN_NS: u64 = 4026532600;
        let m = csi_mount();
        let mut node =
            FakeNode::with_mounts(&[&format!("50 {m} tmpfs")]).with_namespace(PLUGIN_NS, 700, "csi-node", &[]);
        node.holders.push(backup_in_csi_mount());
        let calls: Vec<Call> = [0.0, 0.5, 1.5]
            .iter()
            .map(|s| umount(*s, "csi-node", &m, -libc::EINVAL).on_the_nodes_directory(PLUGIN_NS))
            .collect();
        let f = &run(&mut NotMounted::default(), &mut node, &calls, 2.0)[0];
        assert_eq!((f.confidence, f.severity), (Confidence::Confirmed, Severity::Critical));
        assert!(!f.fix.contains("rmdir"), "{}", f.fix);
        assert_eq!(
            f.fix,
            format!(
                "{} && umount -- {m}",
                kill_if_same("TERM", 4242, Some(crate::event::ProcessStart(4_242_000))).unwrap()
            )
        );
        assert!(
            f.summary.contains(
                "still mounted in the host's mount namespace (tmpfs from tmpfs), in use by pid 4242 (backup)"
            ),
            "{}",
            f.summary
        );
        assert!(f.summary.contains("no removal is printed"), "{}", f.summary);
        assert!(f.advice.iter().any(|a| a.contains("Bidirectional")), "{:?}", f.advice);
        // Unmounted on the node too: the plugin's rmdir is the way out, in its namespace.
        let mut gone = FakeNode::with_mounts(&[]).with_namespace(PLUGIN_NS, 700, "csi-node", &[]);
        let f = &run(&mut NotMounted::default(), &mut gone, &calls, 2.0)[0];
        assert_eq!(f.fix, entered(700, 10_700, &format!("rmdir -- {m}")));
    }

    /// The caller's namespace is gone before it could be read: nothing is
    /// printed for the node in its place.
    #[test]
    fn a_namespace_gone_gets_no_fix_on_the_node() {
        let m = csi_mount();
        let mut node = FakeNode::with_mounts(&[]);
        let calls: Vec<Call> =
            [0.0, 0.5].iter().map(|s| umount(*s, "csi-node", &m, -libc::EINVAL).in_namespace(4026532601)).collect();
        let f = &run(&mut NotMounted::default(), &mut node, &calls, 2.0)[0];
        assert_eq!(f.fix, "");
        assert!(f.advice.iter().any(|a| a.contains("can no longer be proven")), "{:?}", f.advice);
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
