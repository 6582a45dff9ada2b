//! P3 `immutable-file`: a file (or its directory) carries `chattr +i` or
//! `+a`, so nobody, root included, can delete it: removal fails with EPERM
//! forever, in an image layer (`overlay2/<id>/diff`) or a volume.
//!
//! Confirmed by reading the inode flags (FS_IOC_GETFLAGS). EPERM has other
//! causes, and saying "immutable" for them would send the user the wrong
//! way: a sticky directory (only the owner may remove entries) or a security
//! module are reported as `permission-denied`, explained as such.

use super::shell::{clear_flags, remove_file, show_flags};
use super::track::{Attempts, FailureLog};
use super::{removes, shown, Confidence, Detector, Finding, Kind, Review, Severity};
use crate::event::CallEvent;
use crate::identify::pod::PathArea;
use crate::identify::Identity;
use crate::inspect::InodeFlags;

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
        let path = a.path.clone();
        let dir = parent(&path);
        let node = &mut *review.node;
        let mut f = Finding::new(Kind::ImmutableFile, &shown(&path), Severity::Critical, a.first);
        a.stamp(&mut f);
        f.evidence("trace", a.trace_words());
        let own = node.inode_flags(&path);
        match &own {
            Ok(flags) if flags.immutable || flags.append_only => {
                f.confidence = Confidence::Confirmed;
                f.evidence(
                    "FS_IOC_GETFLAGS",
                    format!("{} is {} (flags {:#x})", shown(&path), flag_words(flags), flags.raw),
                );
                f.summary = format!(
                    "{} cannot delete {} {}: the file is {}, so removal fails with EPERM for everyone, root included, and the pod's teardown retries forever.",
                    a.actor.description,
                    shown(&path),
                    place(a),
                    flag_words(flags)
                );
                f.fix = chattr(flags, &path);
                f.advice.push("then let kubelet or the runtime retry; find who set the flag (an image build step or an agent running chattr) so it does not return".into());
                return Some(f);
            }
            Ok(_) => f.evidence(
                "FS_IOC_GETFLAGS",
                format!("{} has neither the immutable nor the append-only flag", shown(&path)),
            ),
            Err(why) => {
                a.read_again_soon_if(why);
                f.evidence("FS_IOC_GETFLAGS", format!("{}: {}", shown(&path), why.said()))
            }
        }
        // Entries of an immutable or append-only directory cannot be removed either.
        if let Ok(flags) = node.inode_flags(&dir) {
            if flags.immutable || flags.append_only {
                f.confidence = Confidence::Confirmed;
                f.paths.push(dir.clone());
                f.evidence(
                    "FS_IOC_GETFLAGS",
                    format!("its directory {} is {} (flags {:#x})", shown(&dir), flag_words(&flags), flags.raw),
                );
                f.summary = format!(
                    "{} cannot delete {} {}: its directory is {}, so nothing in it can be removed, by root either.",
                    a.actor.description,
                    shown(&path),
                    place(a),
                    flag_words(&flags)
                );
                f.fix = chattr(&flags, &dir);
                return Some(f);
            }
        }
        if let Err(why) = &own {
            // Gone (removed meanwhile) or unreadable: nothing more to say yet.
            f.confidence = Confidence::Possible;
            let now = match why.is_gone() {
                true => "it is gone now: removed since".to_string(),
                false => format!("its flags are not known: {}", why.said()),
            };
            f.summary = format!("{} got EPERM deleting {} {}; {now}.", a.actor.description, shown(&path), place(a));
            f.fix = show_flags(&path);
            return Some(f);
        }
        Some(Self::other_reason(a, f, &path, &dir, review))
    }

    /// EPERM without any flag: a sticky directory, or a policy.
    fn other_reason(a: &Attempts, mut f: Finding, path: &[u8], dir: &[u8], review: &mut Review<'_>) -> Finding {
        let node = &mut *review.node;
        f.id = format!("{}:{}", Kind::PermissionDenied.id(), shown(path));
        f.kind = Kind::PermissionDenied;
        f.severity = Severity::Warning;
        let file = node.file_facts(path);
        let directory = node.file_facts(dir);
        if let (Ok(file), Ok(directory)) = (&file, &directory) {
            if directory.sticky && a.uid != 0 && file.uid != a.uid && directory.uid != a.uid {
                f.confidence = Confidence::Confirmed;
                f.evidence(
                    "lstat",
                    format!(
                        "{} is a sticky directory (mode {:o}, owner uid {}); the file belongs to uid {}; the caller ran as uid {}",
                        shown(dir),
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
                f.fix = remove_file(path);
                f.advice.push(
                    "run that removal as root or as the file's owner; or make the remover run as the owner".into(),
                );
                return f;
            }
            f.evidence(
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
            );
        }
        f.confidence = Confidence::Possible;
        f.summary = format!(
            "{} got EPERM deleting {}, not explained by an immutable flag or a sticky directory: a security module (SELinux, AppArmor, a BPF LSM policy) or a missing capability refused it.",
            a.actor.description,
            shown(path)
        );
        f.fix = "journalctl -k --since -10min | grep -i -e avc -e apparmor -e denied".into();
        f
    }
}

impl Detector for ImmutableFile {
    fn wants_review(&self) -> bool {
        self.failures.wants_a_look()
    }

    fn observe(&mut self, event: &CallEvent, identity: &Identity) {
        if removes(event) {
            self.failures.observe(event, identity, |errno| errno == libc::EPERM);
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
