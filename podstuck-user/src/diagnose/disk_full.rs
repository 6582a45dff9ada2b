//! P9 `disk-full` and `read-only-fs`: removals and unmounts fail because the
//! filesystem has no space or inodes left (ENOSPC, EDQUOT: on overlay, even
//! deleting a lower file needs a whiteout inode in the upper layer) or is
//! read-only (EROFS: a read-only bind, or the kernel remounted it after
//! errors). Usually every pod on that filesystem is hit at once, so there is
//! one finding per filesystem, listing the pods.
//!
//! Confirmed by statfs (free space and inodes, ST_RDONLY) and the mount's
//! options.

use std::collections::BTreeMap;

use super::route::{Attempt, Claim, Refusal, Target};
use super::shell::{find_mount, free_space, remount, space_used};
use super::track::{Attempts, CallerView, FailureLog};
use super::{shown, Confidence, Detector, Finding, Kind, Review, Severity, Status};
use crate::event::CallEvent;
use crate::identify::Identity;
use crate::inspect::mounts::mount_containing;
use crate::inspect::{FsUsage, Mount, NodeInspector, Probe};

/// Paths quoted in one finding.
const PATHS_KEPT: usize = 10;

#[derive(Default)]
pub struct DiskFull {
    full: FailureLog,
    read_only: FailureLog,
}

/// The `upperdir=` of an overlay mount: where its writes (and whiteouts) go.
fn overlay_upper(mount: &Mount) -> Option<Vec<u8>> {
    mount.super_options.split(',').find_map(|o| o.strip_prefix("upperdir=")).map(|u| u.as_bytes().to_vec())
}

fn usage_words(u: &FsUsage) -> String {
    format!("{} free of {} bytes, {} free of {} inodes", u.free_bytes, u.total_bytes, u.free_inodes, u.total_inodes)
}

/// The mount that actually ran out: for overlay, the one holding its upper layer.
fn full_mount(mounts: &[Mount], mount: &Mount) -> Mount {
    if mount.fstype == "overlay" {
        if let Some(upper) = overlay_upper(mount).and_then(|u| mount_containing(mounts, &u).cloned()) {
            return upper;
        }
    }
    mount.clone()
}

impl DiskFull {
    fn decide(kind: Kind, a: &mut Attempts, review: &mut Review<'_>) -> Option<Finding> {
        // The filesystem of the caller's namespace, read and fixed there:
        // a runtime's own (kubelet in a container) has mounts of its own.
        let view = a.caller_view(review.node);
        let verdict = Self::judge(kind, a, review.node, &view)?;
        let mut f = Self::tell(a, &verdict);
        let fix = std::mem::take(&mut f.fix);
        view.place_fix(&mut f, fix);
        Some(f)
    }

    /// Finds the filesystem the call failed on (for ENOSPC, the one that
    /// ran out: an overlay's upper layer's) and reads it. None where the
    /// caller's namespace cannot be read or no mount holds the path.
    fn judge(kind: Kind, a: &Attempts, node: &mut dyn NodeInspector, view: &CallerView) -> Option<Verdict> {
        let mounts = view.mounts().ok()?;
        let root = view.reader().ok()?;
        let mount = mount_containing(mounts, &a.path)?.clone();
        if kind == Kind::ReadOnlyFs {
            let usage = node.fs_usage(&mount.mount_point, root);
            let super_ro = mount.super_options.split(',').any(|o| o == "ro");
            let statfs_ro = usage.as_ref().is_ok_and(|u| u.read_only);
            let how = if mount.read_only() && !super_ro {
                ReadOnly::BindMount
            } else if super_ro || mount.read_only() || statfs_ro {
                ReadOnly::Filesystem { after_errors: super_ro }
            } else {
                ReadOnly::NotSeen
            };
            return Some(Verdict::ReadOnly { mount, usage, how });
        }
        let full = full_mount(mounts, &mount);
        let usage = node.fs_usage(&full.mount_point, root);
        let state = match &usage {
            _ if a.errno == libc::EDQUOT => Fullness::OverQuota,
            Ok(u) if u.total_inodes > 0 && u.free_inodes == 0 => Fullness::NoInodes,
            Ok(u) if u.free_bytes == 0 || (u.total_bytes > 0 && u.free_bytes * 100 < u.total_bytes) => {
                Fullness::NoSpace
            }
            Ok(_) => Fullness::NotFullNow,
            Err(_) => Fullness::Unread,
        };
        Some(Verdict::Full { mount, full, usage, state })
    }

    /// The verdict in words: the finding, its evidence, its fix.
    fn tell(a: &Attempts, verdict: &Verdict) -> Finding {
        let (kind, mount) = match verdict {
            Verdict::Full { mount, .. } => (Kind::DiskFull, mount),
            Verdict::ReadOnly { mount, .. } => (Kind::ReadOnlyFs, mount),
        };
        let mut f = Finding::new(kind, &shown(&mount.mount_point), Severity::Critical, a.first);
        a.stamp(&mut f);
        f.paths.push(mount.mount_point.clone());
        f.evidence("trace", a.trace_words());
        f.confidence = verdict.confidence();
        let what = format!("{} of {}", a.syscall_name(), shown(&a.path));
        match verdict {
            Verdict::Full { mount, full, usage, state } => {
                Self::tell_full(&mut f, a, mount, full, usage, *state, &what)
            }
            Verdict::ReadOnly { mount, usage, how } => Self::tell_read_only(&mut f, mount, usage, *how, &what),
        }
        f
    }

    /// ENOSPC or EDQUOT: which filesystem is full, how full, and how to
    /// make room.
    fn tell_full(
        f: &mut Finding,
        a: &Attempts,
        mount: &Mount,
        full: &Mount,
        usage: &Probe<FsUsage>,
        state: Fullness,
        what: &str,
    ) {
        let overlay = full.mount_point != mount.mount_point;
        if overlay {
            f.evidence(
                "mountinfo",
                format!(
                    "{} is an overlay whose upper layer is on {} ({})",
                    shown(&mount.mount_point),
                    shown(&full.mount_point),
                    full.fstype
                ),
            );
            f.paths.push(full.mount_point.clone());
        }
        let mp = &full.mount_point;
        f.fix = match usage {
            Ok(u) => {
                f.evidence("statfs", format!("{}: {}", shown(mp), usage_words(u)));
                f.detail("free_bytes", u.free_bytes);
                f.detail("free_inodes", u.free_inodes);
                let grow = match (full.fstype.as_str(), state) {
                    ("tmpfs", Fullness::NoInodes) => remount(&format!("nr_inodes={}", u.total_inodes.max(1) * 2), mp),
                    ("tmpfs", _) => remount(&format!("size={}k", (u.total_bytes / 1024).max(1) * 2), mp),
                    _ => None,
                };
                grow.unwrap_or_else(|| space_used(mp))
            }
            Err(why) => {
                f.evidence("statfs", format!("{}: {}", shown(mp), why.said()));
                free_space(mp)
            }
        };
        let state = match state {
            Fullness::OverQuota => "over its disk quota",
            Fullness::NoInodes => "out of inodes",
            Fullness::NoSpace => "out of space",
            Fullness::NotFullNow => "not full now (space was freed since)",
            Fullness::Unread => "full",
        };
        let overlay =
            if overlay { " (deleting a file of a lower layer needs a whiteout inode in the upper layer)" } else { "" };
        f.summary = format!(
            "{what} fails with {}: the {} filesystem at {} is {state}{overlay}; every pod whose teardown writes there is stuck.",
            a.errno_name(),
            full.fstype,
            shown(mp)
        );
        if full.fstype != "tmpfs" {
            f.advice.push("free space on it (old images: crictl rmi --prune; logs), or replace the disk; then kubelet's retries succeed".into());
        }
    }

    /// EROFS: a read-only bind mount, or a filesystem read-only as a whole.
    fn tell_read_only(f: &mut Finding, mount: &Mount, usage: &Probe<FsUsage>, how: ReadOnly, what: &str) {
        f.evidence(
            "mountinfo",
            format!(
                "{} ({}) mount options {}; filesystem options {}",
                shown(&mount.mount_point),
                mount.fstype,
                mount.options,
                mount.super_options
            ),
        );
        if let Ok(u) = usage {
            f.evidence("statfs", format!("ST_RDONLY {}", if u.read_only { "set" } else { "not set" }));
        }
        if how == ReadOnly::BindMount {
            f.summary = format!(
                "{what} fails with EROFS: {} is a read-only mount of a writable filesystem (a read-only bind mount).",
                shown(&mount.mount_point)
            );
            f.fix = remount("bind,rw", &mount.mount_point).unwrap_or_else(|| find_mount(&mount.mount_point));
            return;
        }
        let after_errors = matches!(how, ReadOnly::Filesystem { after_errors: true });
        f.summary = format!(
            "{what} fails with EROFS: the {} filesystem at {} is read-only{}.",
            mount.fstype,
            shown(&mount.mount_point),
            if after_errors { " (the kernel may have remounted it after errors)" } else { "" }
        );
        f.fix = remount("rw", &mount.mount_point).unwrap_or_else(|| find_mount(&mount.mount_point));
        f.advice.push("if the kernel made it read-only after I/O errors, read dmesg and run fsck before remounting, or replace the disk".into());
    }

    /// One finding per filesystem: the calls of every path on it together.
    fn merge(findings: Vec<Finding>) -> Vec<Finding> {
        let mut by_id: BTreeMap<String, Finding> = BTreeMap::new();
        for f in findings {
            match by_id.get_mut(&f.id) {
                None => {
                    by_id.insert(f.id.clone(), f);
                }
                Some(m) => {
                    m.count += f.count;
                    m.first_seen = m.first_seen.min(f.first_seen);
                    m.last_seen = m.last_seen.max(f.last_seen);
                    for p in f.pods {
                        if !m.pods.contains(&p) {
                            m.pods.push(p);
                        }
                    }
                    if m.paths.len() < PATHS_KEPT && !m.paths.contains(&f.paths[0]) {
                        m.paths.push(f.paths[0].clone());
                    }
                    if f.status == Status::Active {
                        m.status = Status::Active;
                    }
                    m.confidence = m.confidence.max(f.confidence);
                }
            }
        }
        by_id.into_values().collect()
    }
}

/// What disk-full decides of a call refused for want of space or of
/// write access, before a word of it is said.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// ENOSPC or EDQUOT on `mount`; `full` is the filesystem that ran out
    /// (an overlay's upper layer's, else `mount` itself), as statfs read it.
    Full { mount: Mount, full: Mount, usage: Probe<FsUsage>, state: Fullness },
    /// EROFS on `mount`.
    ReadOnly { mount: Mount, usage: Probe<FsUsage>, how: ReadOnly },
}

/// How full the filesystem that ran out is now.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fullness {
    /// EDQUOT: the caller's quota, whatever the filesystem has left.
    OverQuota,
    NoInodes,
    /// No bytes left, or less than 1%.
    NoSpace,
    /// Room again: space was freed since the call.
    NotFullNow,
    /// statfs could not be read.
    Unread,
}

/// What made the filesystem refuse a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ReadOnly {
    /// A read-only mount of a writable filesystem.
    BindMount,
    /// The filesystem itself (`after_errors`: its own options say ro, as
    /// the kernel leaves them when it remounts after errors).
    Filesystem { after_errors: bool },
    /// Neither the mount, the filesystem nor statfs says read-only now.
    NotSeen,
}

impl Verdict {
    pub fn confidence(&self) -> Confidence {
        match self {
            // The kernel said ENOSPC; only how full it is now is unknown.
            Verdict::Full { state: Fullness::Unread, .. } => Confidence::Likely,
            Verdict::Full { state: Fullness::NotFullNow, .. } => Confidence::Possible,
            Verdict::Full { .. } => Confidence::Confirmed,
            Verdict::ReadOnly { how: ReadOnly::NotSeen, .. } => Confidence::Possible,
            Verdict::ReadOnly { .. } => Confidence::Confirmed,
        }
    }
}

impl Detector for DiskFull {
    fn claims(&self) -> &'static [Claim] {
        &[Claim { attempts: &Attempt::ALL, refusals: &[Refusal::NoSpace, Refusal::ReadOnly], targets: &Target::ALL }]
    }

    fn failed(&mut self, event: &CallEvent, identity: &Identity) {
        match event.errno() {
            Some(libc::EROFS) => self.read_only.record(event, identity),
            _ => self.full.record(event, identity),
        }
    }

    fn observe(&mut self, event: &CallEvent, identity: &Identity) {
        self.full.ended_by(event, identity);
        self.read_only.ended_by(event, identity);
    }

    fn review(&mut self, review: &mut Review<'_>) -> Vec<Finding> {
        let mut all = self.full.review(review, |a, review| Self::decide(Kind::DiskFull, a, review));
        all.extend(self.read_only.review(review, |a, review| Self::decide(Kind::ReadOnlyFs, a, review)));
        Self::merge(all)
    }
}

#[cfg(test)]
mod tests {
    use super::super::fake::*;
    use super::*;

    /// What disk-full decides of `calls` (refused as `kind`) on `node`.
    fn verdict(kind: Kind, node: &mut FakeNode, calls: &[Call]) -> Verdict {
        let a = attempts_of(calls);
        let view = a.caller_view(node);
        DiskFull::judge(kind, &a, node, &view).expect("a mount holds the path")
    }

    fn usage(free_bytes: u64, free_inodes: u64) -> FsUsage {
        FsUsage {
            fstype: "ext4".into(),
            total_bytes: 1000,
            free_bytes,
            total_inodes: 100,
            free_inodes,
            read_only: false,
        }
    }

    #[test]
    fn how_full_or_read_only_is_decided_before_it_is_said() {
        let calls = [unlink(0.0, "kubelet", "/scratch/d/f", -libc::ENOSPC)];
        let mut node = FakeNode::with_mounts(&["80 /scratch/d ext4"]);
        let state = |node: &mut FakeNode, calls: &[Call]| match verdict(Kind::DiskFull, node, calls) {
            Verdict::Full { state, full, .. } => {
                assert_eq!(full.mount_point, b"/scratch/d");
                state
            }
            other => panic!("{other:?}"),
        };
        assert_eq!(state(&mut node, &calls), Fullness::Unread);
        for (u, expected) in [
            (usage(0, 50), Fullness::NoSpace),
            (usage(9, 50), Fullness::NoSpace),
            (usage(500, 0), Fullness::NoInodes),
            (usage(500, 50), Fullness::NotFullNow),
        ] {
            node.usage.insert(b"/scratch/d".to_vec(), u);
            assert_eq!(state(&mut node, &calls), expected);
        }
        let quota = [unlink(0.0, "kubelet", "/scratch/d/f", -libc::EDQUOT)];
        assert_eq!(state(&mut node, &quota), Fullness::OverQuota);
        assert_eq!(verdict(Kind::DiskFull, &mut node, &calls).confidence(), Confidence::Possible);

        let erofs = [unlink(0.0, "kubelet", "/scratch/d/f", -libc::EROFS)];
        let how = |node: &mut FakeNode| match verdict(Kind::ReadOnlyFs, node, &erofs) {
            Verdict::ReadOnly { how, .. } => how,
            other => panic!("{other:?}"),
        };
        assert_eq!(how(&mut node), ReadOnly::NotSeen);
        node.usage.insert(b"/scratch/d".to_vec(), FsUsage { read_only: true, ..usage(500, 50) });
        assert_eq!(how(&mut node), ReadOnly::Filesystem { after_errors: false });
        let mut node = FakeNode::with_mounts(&["80 /scratch/d ext4 ro,relatime"]);
        assert_eq!(how(&mut node), ReadOnly::BindMount);
    }

    #[test]
    fn an_overlay_whose_upper_tmpfs_ran_out_of_inodes() {
        let mut d = DiskFull::default();
        let mut node = FakeNode::with_mounts(&["80 /scratch/upper tmpfs"]);
        node.mountinfo.push_str("81 1 0:81 / /scratch/merged rw,relatime - overlay overlay rw,lowerdir=/scratch/lower,upperdir=/scratch/upper/u,workdir=/scratch/upper/w\n");
        node.usage.insert(
            b"/scratch/upper".to_vec(),
            FsUsage {
                fstype: "tmpfs".into(),
                total_bytes: 1 << 20,
                free_bytes: 1 << 20,
                total_inodes: 16,
                free_inodes: 0,
                read_only: false,
            },
        );
        let calls = [
            unlink(0.0, "kubelet", "/scratch/merged/a", -libc::ENOSPC),
            unlink(1.0, "kubelet", "/scratch/merged/b", -libc::ENOSPC),
        ];
        let found = run(&mut d, &mut node, &calls, 3.0);
        assert_eq!(found.len(), 1, "{found:?}");
        let f = &found[0];
        assert_eq!(f.kind, Kind::DiskFull);
        assert_eq!(f.confidence, Confidence::Confirmed);
        assert_eq!(f.count, 2);
        assert_eq!(f.fix, "mount -o remount,nr_inodes=32 -- /scratch/upper");
        assert!(f.summary.contains("out of inodes"), "{}", f.summary);
        assert!(f.summary.contains("whiteout"), "{}", f.summary);
        assert_eq!(f.details["free_inodes"], 0);
    }

    #[test]
    fn a_read_only_bind_mount_and_a_read_only_filesystem() {
        let mut d = DiskFull::default();
        let mut node = FakeNode::with_mounts(&["82 /scratch/ro ext4 ro,relatime"]);
        let calls = [unlink(0.0, "kubelet", "/scratch/ro/f", -libc::EROFS)];
        let f = &run(&mut d, &mut node, &calls, 3.0)[0];
        assert_eq!(f.kind, Kind::ReadOnlyFs);
        assert_eq!(f.fix, "mount -o remount,bind,rw -- /scratch/ro");
        let mut d = DiskFull::default();
        let mut node = FakeNode {
            mountinfo: "1 0 8:1 / / ro,relatime - ext4 /dev/sda1 ro,errors=remount-ro\n".into(),
            ..Default::default()
        };
        let f = &run(&mut d, &mut node, &[unlink(0.0, "kubelet", "/var/x", -libc::EROFS)], 3.0)[0];
        assert_eq!(f.fix, "mount -o remount,rw -- /");
        assert!(f.summary.contains("after errors"));
    }
}
