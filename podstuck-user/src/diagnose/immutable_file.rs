//! P3 `immutable-file`: a file (or its directory) carries `chattr +i` or
//! `+a`, so nobody, root included, can delete it: removal fails with EPERM
//! forever, in an image layer (`overlay2/<id>/diff`) or a volume.
//!
//! Confirmed by reading the inode flags (FS_IOC_GETFLAGS). EPERM has other
//! causes, and saying "immutable" for them would send the user the wrong
//! way: a sticky directory (only the owner may remove entries) or a security
//! module are reported as `permission-denied`, explained as such.

use super::route::{Attempt, Claim, Refusal, Target};
use super::shell::{clear_flags, remove_file, show_flags};
use super::track::{Attempts, CallerView, FailureLog};
use super::{shown, Confidence, Detector, Finding, Kind, Review, Severity};
use crate::event::CallEvent;
use crate::identify::pod::PathArea;
use crate::identify::Identity;
use crate::inspect::{FileFacts, InodeFlags, NodeInspector, Unreadable};

pub struct ImmutableFile {
    failures: FailureLog,
}

impl Default for ImmutableFile {
    /// Looked at from the first EPERM: the inode's flags prove it.
    fn default() -> Self {
        ImmutableFile { failures: FailureLog::looked_at_from_the_first_failure() }
    }
}

fn parent(path: &[u8]) -> Vec<u8> {
    match path.iter().rposition(|c| *c == b'/') {
        Some(0) | None => b"/".to_vec(),
        Some(i) => path[..i].to_vec(),
    }
}

/// `chattr -i`, `chattr -a` or both, for the flags set.
fn chattr(flags: &InodeFlags, path: &[u8]) -> String {
    clear_flags(flags.immutable, flags.append_only, path)
}

fn flag_words(flags: &InodeFlags) -> &'static str {
    match (flags.immutable, flags.append_only) {
        (true, true) => "immutable and append-only (lsattr: i, a)",
        (true, false) => "immutable (lsattr: i)",
        _ => "append-only (lsattr: a)",
    }
}

/// Where the file is, for the summary.
fn place(a: &Attempts) -> String {
    let text = String::from_utf8_lossy(&a.path);
    let pod = a.pod.as_ref().map(|p| format!(" of pod {p}")).unwrap_or_default();
    if text.contains("/overlay2/") && text.contains("/diff/") {
        format!("in a container image layer (docker overlay2){pod}")
    } else if text.contains("/overlay/") && text.contains("/diff/") {
        format!("in a container image layer (containers/storage overlay){pod}")
    } else if a.area == Some(PathArea::Volume) {
        format!("in a volume{pod}")
    } else if a.pod.is_some() {
        format!("in the directory{pod}")
    } else {
        "on this node".into()
    }
}

impl ImmutableFile {
    fn decide(a: &mut Attempts, review: &mut Review<'_>) -> Option<Finding> {
        // Read where the call was made, and fixed there: a runtime's own
        // namespace (kubelet in a container) has files of its own.
        let view = a.caller_view(review.node);
        let verdict = Self::judge(a, review.node, &view);
        if let Verdict::FlagsUnknown(why) = &verdict {
            a.read_again_soon_if(why);
        }
        Some(Self::tell(a, &view, &verdict))
    }

    /// Reads the file's flags, then its directory's, then both owners and
    /// modes, and decides.
    fn judge(a: &Attempts, node: &mut dyn NodeInspector, view: &CallerView) -> Verdict {
        let (path, dir) = (a.path.as_slice(), parent(&a.path));
        let root = match view.reader() {
            Ok(root) => root,
            Err(why) => return Verdict::NamespaceUnreadable(why),
        };
        let own = node.inode_flags(path, root);
        let flagged = |flags: &InodeFlags| flags.immutable || flags.append_only;
        if let Some(flags) = own.as_ref().ok().filter(|f| flagged(f)) {
            return Verdict::FileFlagged(*flags);
        }
        // Entries of an immutable or append-only directory cannot be removed either.
        if let Some(flags) = node.inode_flags(&dir, root).ok().filter(flagged) {
            return Verdict::DirectoryFlagged { file: own, directory: flags };
        }
        if let Err(why) = own {
            return Verdict::FlagsUnknown(why);
        }
        let facts = match (node.file_facts(path, root), node.file_facts(&dir, root)) {
            (Ok(file), Ok(directory)) => Some((file, directory)),
            _ => None,
        };
        match facts {
            Some((file, directory))
                if directory.sticky && a.uid != 0 && file.uid != a.uid && directory.uid != a.uid =>
            {
                Verdict::StickyDirectory { file, directory }
            }
            facts => Verdict::Refused(facts),
        }
    }

    /// The verdict in words: the finding, its evidence, its fix.
    fn tell(a: &Attempts, view: &CallerView, verdict: &Verdict) -> Finding {
        let (path, dir) = (a.path.as_slice(), parent(&a.path));
        let mut f = Finding::new(Kind::ImmutableFile, &shown(path), Severity::Critical, a.first);
        a.stamp(&mut f);
        f.evidence("trace", a.trace_words());
        f.confidence = verdict.confidence();
        let who = &a.actor.description;
        match verdict {
            Verdict::NamespaceUnreadable(why) => {
                f.evidence("mountinfo", format!("{}: {}", view.whose(), why.said()));
                f.summary = format!(
                    "{who} got EPERM deleting {} {}; {} can no longer be read, so why cannot be proven.",
                    shown(path),
                    place(a),
                    view.whose()
                );
                return f;
            }
            Verdict::FileFlagged(flags) => {
                f.evidence(
                    "FS_IOC_GETFLAGS",
                    format!("{} is {} (flags {:#x})", shown(path), flag_words(flags), flags.raw),
                );
                f.summary = format!(
                    "{who} cannot delete {} {}: the file is {}, so removal fails with EPERM for everyone, root included, and the pod's teardown retries forever.",
                    shown(path),
                    place(a),
                    flag_words(flags)
                );
                view.place_fix(&mut f, chattr(flags, path));
                f.advice.push("then let kubelet or the runtime retry; find who set the flag (an image build step or an agent running chattr) so it does not return".into());
                return f;
            }
            _ => {}
        }
        match verdict {
            Verdict::DirectoryFlagged { file: Err(why), .. } | Verdict::FlagsUnknown(why) => {
                f.evidence("FS_IOC_GETFLAGS", format!("{}: {}", shown(path), why.said()))
            }
            _ => f.evidence(
                "FS_IOC_GETFLAGS",
                format!("{} has neither the immutable nor the append-only flag", shown(path)),
            ),
        }
        match verdict {
            Verdict::DirectoryFlagged { directory: flags, .. } => {
                f.paths.push(dir.clone());
                f.evidence(
                    "FS_IOC_GETFLAGS",
                    format!("its directory {} is {} (flags {:#x})", shown(&dir), flag_words(flags), flags.raw),
                );
                f.summary = format!(
                    "{who} cannot delete {} {}: its directory is {}, so nothing in it can be removed, by root either.",
                    shown(path),
                    place(a),
                    flag_words(flags)
                );
                view.place_fix(&mut f, chattr(flags, &dir));
            }
            Verdict::FlagsUnknown(why) => {
                // Gone (removed meanwhile) or unreadable: nothing more to say yet.
                let now = match why.is_gone() {
                    true => "it is gone now: removed since".to_string(),
                    false => format!("its flags are not known: {}", why.said()),
                };
                f.summary = format!("{who} got EPERM deleting {} {}; {now}.", shown(path), place(a));
                view.place_fix(&mut f, show_flags(path));
            }
            _ => Self::other_reason(a, &mut f, view, verdict),
        }
        f
    }

    /// EPERM without any flag: a sticky directory, or a policy.
    fn other_reason(a: &Attempts, f: &mut Finding, view: &CallerView, verdict: &Verdict) {
        let (path, dir) = (a.path.as_slice(), parent(&a.path));
        f.id = format!("{}:{}", Kind::PermissionDenied.id(), shown(path));
        f.kind = Kind::PermissionDenied;
        f.severity = Severity::Warning;
        match verdict {
            Verdict::StickyDirectory { file, directory } => {
                f.evidence(
                    "lstat",
                    format!(
                        "{} is a sticky directory (mode {:o}, owner uid {}); the file belongs to uid {}; the caller ran as uid {}",
                        shown(&dir),
                        directory.mode & 0o7777,
                        directory.uid,
                        file.uid,
                        a.uid
                    ),
                );
                f.summary = format!(
                    "{} (uid {}) may not delete {}: not an immutable file, but a sticky directory: only the file's owner (uid {}) or the directory's owner (uid {}) may remove entries there.",
                    a.actor.description,
                    a.uid,
                    shown(path),
                    file.uid,
                    directory.uid
                );
                view.place_fix(f, remove_file(path));
                f.advice.push(
                    "run that removal as root or as the file's owner; or make the remover run as the owner".into(),
                );
                return;
            }
            Verdict::Refused(Some((file, directory))) => f.evidence(
                "lstat",
                format!(
                    "{} mode {:o} owner uid {}; directory mode {:o} owner uid {}; caller uid {}",
                    shown(path),
                    file.mode & 0o7777,
                    file.uid,
                    directory.mode & 0o7777,
                    directory.uid,
                    a.uid
                ),
            ),
            _ => {}
        }
        f.summary = format!(
            "{} got EPERM deleting {}, not explained by an immutable flag or a sticky directory: a security module (SELinux, AppArmor, a BPF LSM policy) or a missing capability refused it.",
            a.actor.description,
            shown(path)
        );
        f.fix = "journalctl -k --since -10min | grep -i -e avc -e apparmor -e denied".into();
    }
}

/// What immutable-file decides of a removal refused with EPERM, before a
/// word of it is said: immutable-file or, for a refusal no flag explains,
/// permission-denied.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// The caller's namespace cannot be read: nothing is proven.
    NamespaceUnreadable(Unreadable),
    /// The file is immutable or append-only.
    FileFlagged(InodeFlags),
    /// Its directory is (the file's own flags as read).
    DirectoryFlagged { file: Result<InodeFlags, Unreadable>, directory: InodeFlags },
    /// The file's flags could not be read (gone since, or unreadable).
    FlagsUnknown(Unreadable),
    /// permission-denied: a sticky directory owned by neither the caller
    /// nor the file's owner.
    StickyDirectory { file: FileFacts, directory: FileFacts },
    /// permission-denied: no flag, no sticky rule (the file's and its
    /// directory's owners and modes, when read): a policy refused it.
    Refused(Option<(FileFacts, FileFacts)>),
}

impl Verdict {
    pub fn confidence(&self) -> Confidence {
        match self {
            Verdict::FileFlagged(_) | Verdict::DirectoryFlagged { .. } | Verdict::StickyDirectory { .. } => {
                Confidence::Confirmed
            }
            Verdict::NamespaceUnreadable(_) | Verdict::FlagsUnknown(_) | Verdict::Refused(_) => Confidence::Possible,
        }
    }
}

impl Detector for ImmutableFile {
    fn wants_review(&self) -> bool {
        self.failures.wants_a_look()
    }

    fn claims(&self) -> &'static [Claim] {
        &[Claim {
            attempts: &[Attempt::RemoveDir, Attempt::RemoveFile],
            refusals: &[Refusal::NotPermitted],
            targets: &Target::ALL,
        }]
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

    /// What immutable-file decides of `calls` on `node`.
    fn verdict(node: &mut FakeNode, calls: &[Call]) -> Verdict {
        let a = attempts_of(calls);
        let view = a.caller_view(node);
        ImmutableFile::judge(&a, node, &view)
    }

    #[test]
    fn what_refused_a_removal_is_decided_before_it_is_said() {
        let file = format!("{}/logs/app.log", csi_mount());
        let dir = format!("{}/logs", csi_mount());
        let calls = [unlink(0.0, "kubelet", &file, -libc::EPERM)];
        let immutable = InodeFlags { immutable: true, append_only: false, raw: 0x10 };
        let mut node = FakeNode::default();
        node.flags.insert(file.clone().into_bytes(), immutable);
        assert_eq!(verdict(&mut node, &calls), Verdict::FileFlagged(immutable));
        let plain = InodeFlags { immutable: false, append_only: false, raw: 0 };
        node.flags.insert(file.clone().into_bytes(), plain);
        node.flags.insert(dir.clone().into_bytes(), immutable);
        assert_eq!(verdict(&mut node, &calls), Verdict::DirectoryFlagged { file: Ok(plain), directory: immutable });
        node.flags.clear();
        node.facts.insert(file.clone().into_bytes(), facts(false, 0o644, 0));
        node.facts.insert(dir.clone().into_bytes(), facts(true, 0o755, 0));
        assert!(matches!(verdict(&mut node, &calls), Verdict::Refused(Some(_))));
        let mut c = unlink(0.0, "cleaner", &file, -libc::EPERM);
        c.event.uid = 1002;
        node.facts.insert(file.clone().into_bytes(), facts(false, 0o644, 1001));
        node.facts.insert(dir.clone().into_bytes(), facts(true, 0o1777, 0));
        assert!(matches!(verdict(&mut node, &[c]), Verdict::StickyDirectory { .. }));
        assert_eq!(Verdict::Refused(None).confidence(), Confidence::Possible);
    }

    const LAYER: &str = "/var/lib/docker/overlay2/0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef/diff/etc/resolv.conf";

    #[test]
    fn an_immutable_file_in_an_image_layer() {
        let mut d = ImmutableFile::default();
        let mut node = FakeNode::default();
        node.flags.insert(LAYER.into(), InodeFlags { immutable: true, append_only: false, raw: 0x10 });
        let found = run(
            &mut d,
            &mut node,
            &[unlink(0.0, "dockerd", LAYER, -libc::EPERM), unlink(1.0, "dockerd", LAYER, -libc::EPERM)],
            1.0,
        );
        let f = &found[0];
        assert_eq!(f.kind, Kind::ImmutableFile);
        assert_eq!(f.confidence, Confidence::Confirmed);
        assert_eq!(f.fix, format!("chattr -i -- {LAYER}"));
        assert!(f.summary.contains("container image layer"), "{}", f.summary);
    }

    #[test]
    fn an_append_only_directory_blocks_its_entries() {
        let mut d = ImmutableFile::default();
        let mut node = FakeNode::default();
        let file = format!("{}/logs/app.log", csi_mount());
        let dir = format!("{}/logs", csi_mount());
        node.facts.insert(file.clone().into_bytes(), facts(false, 0o644, 0));
        node.flags.insert(dir.clone().into_bytes(), InodeFlags { immutable: false, append_only: true, raw: 0x20 });
        let f = &run(&mut d, &mut node, &[unlink(0.0, "kubelet", &file, -libc::EPERM)], 3.0)[0];
        assert_eq!(f.kind, Kind::ImmutableFile);
        assert_eq!(f.fix, format!("chattr -a -- {dir}"));
        assert_eq!(f.pod_uid, Some(pod()));
    }

    #[test]
    fn eperm_in_a_sticky_directory_is_explained_as_such_not_as_immutable() {
        let mut d = ImmutableFile::default();
        let mut node = FakeNode::default();
        node.facts.insert(b"/tmp/shared/x".to_vec(), facts(false, 0o644, 1001));
        node.facts.insert(b"/tmp/shared".to_vec(), facts(true, 0o1777, 0));
        let mut c = unlink(0.0, "cleaner", "/tmp/shared/x", -libc::EPERM);
        c.event.uid = 1002;
        let found = run(&mut d, &mut node, &[c], 3.0);
        assert_eq!(found.len(), 1);
        let f = &found[0];
        assert_eq!(f.kind, Kind::PermissionDenied);
        assert!(f.summary.contains("sticky directory"), "{}", f.summary);
        assert!(f.evidence.iter().any(|e| e.fact.contains("caller ran as uid 1002")));
    }

    #[test]
    fn eperm_with_no_flag_and_no_sticky_bit_points_at_a_policy() {
        let mut d = ImmutableFile::default();
        let mut node = FakeNode::default();
        node.facts.insert(b"/srv/f".to_vec(), facts(false, 0o644, 0));
        node.facts.insert(b"/srv".to_vec(), facts(true, 0o755, 0));
        let f = &run(&mut d, &mut node, &[unlink(0.0, "x", "/srv/f", -libc::EPERM)], 3.0)[0];
        assert_eq!(f.kind, Kind::PermissionDenied);
        assert_eq!(f.confidence, Confidence::Possible);
        assert!(f.summary.contains("security module"));
    }
}
