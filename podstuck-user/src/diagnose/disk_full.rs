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

use super::shell::{find_mount, free_space, remount, space_used};
use super::track::{Attempts, FailureLog};
use super::{shown, Confidence, Detector, Finding, Kind, Review, Severity, Status};
use crate::event::CallEvent;
use crate::identify::Identity;
use crate::inspect::mounts::mount_containing;
use crate::inspect::{FsUsage, Mount, NodeInspector};

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
        let node = &mut *review.node;
        let path = a.path.clone();
        let mounts = node.host_mounts().ok()?;
        let mount = mount_containing(&mounts, &path)?.clone();
        let mut f = Finding::new(kind, &shown(&mount.mount_point), Severity::Critical, a.first);
        a.stamp(&mut f);
        f.paths.push(mount.mount_point.clone());
        f.evidence("trace", a.trace_words());
        let what = format!("{} of {}", a.syscall_name(), shown(&path));
        if kind == Kind::DiskFull {
            Self::full(&mut f, a, node, &mounts, &mount, &what);
        } else {
            Self::read_only(&mut f, node, &mount, &what);
        }
        Some(f)
    }

    /// ENOSPC or EDQUOT: which filesystem is full (an overlay's upper
    /// layer, not the overlay), how full, and how to make room.
    fn full(f: &mut Finding, a: &Attempts, node: &mut dyn NodeInspector, mounts: &[Mount], mount: &Mount, what: &str) {
        let target = full_mount(mounts, mount);
        if target.mount_point != mount.mount_point {
            f.evidence(
                "mountinfo",
                format!(
                    "{} is an overlay whose upper layer is on {} ({})",
                    shown(&mount.mount_point),
                    shown(&target.mount_point),
                    target.fstype
                ),
            );
            f.paths.push(target.mount_point.clone());
        }
        let quota = a.errno == libc::EDQUOT;
        let usage = node.fs_usage(&target.mount_point);
        let (state, fix) = match &usage {
            Ok(u) => {
                f.evidence("statfs", format!("{}: {}", shown(&target.mount_point), usage_words(u)));
                f.detail("free_bytes", u.free_bytes);
                f.detail("free_inodes", u.free_inodes);
                let no_inodes = u.total_inodes > 0 && u.free_inodes == 0;
                let no_space = u.free_bytes == 0 || (u.total_bytes > 0 && u.free_bytes * 100 < u.total_bytes);
                f.confidence =
                    if no_inodes || no_space || quota { Confidence::Confirmed } else { Confidence::Possible };
                let mp = &target.mount_point;
                let grow = match (target.fstype.as_str(), no_inodes) {
                    ("tmpfs", true) => remount(&format!("nr_inodes={}", u.total_inodes.max(1) * 2), mp),
                    ("tmpfs", false) => remount(&format!("size={}k", (u.total_bytes / 1024).max(1) * 2), mp),
                    _ => None,
                };
                let fix = grow.unwrap_or_else(|| space_used(mp));
                let state = if quota {
                    "over its disk quota".to_string()
                } else if no_inodes {
                    "out of inodes".to_string()
                } else if no_space {
                    "out of space".to_string()
                } else {
                    "not full now (space was freed since)".to_string()
                };
                (state, fix)
            }
            Err(why) => {
                f.evidence("statfs", format!("{}: {}", shown(&target.mount_point), why.said()));
                ("full".to_string(), free_space(&target.mount_point))
            }
        };
        let overlay = if target.mount_point != mount.mount_point {
            " (deleting a file of a lower layer needs a whiteout inode in the upper layer)"
        } else {
            ""
        };
        f.summary = format!(
            "{what} fails with {}: the {} filesystem at {} is {state}{overlay}; every pod whose teardown writes there is stuck.",
            a.errno_name(),
            target.fstype,
            shown(&target.mount_point)
        );
        f.fix = fix;
        if target.fstype != "tmpfs" {
            f.advice.push("free space on it (old images: crictl rmi --prune; logs), or replace the disk; then kubelet's retries succeed".into());
        }
    }

    /// EROFS: a read-only bind mount, or a filesystem read-only as a whole.
    fn read_only(f: &mut Finding, node: &mut dyn NodeInspector, mount: &Mount, what: &str) {
        let per_mount_ro = mount.read_only();
        let super_ro = mount.super_options.split(',').any(|o| o == "ro");
        let usage = node.fs_usage(&mount.mount_point);
        let statfs_ro = usage.as_ref().map(|u| u.read_only).unwrap_or(false);
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
        if let Ok(u) = &usage {
            f.evidence("statfs", format!("ST_RDONLY {}", if u.read_only { "set" } else { "not set" }));
        }
        f.confidence = if per_mount_ro || super_ro || statfs_ro { Confidence::Confirmed } else { Confidence::Possible };
        if per_mount_ro && !super_ro {
            f.summary = format!(
                "{what} fails with EROFS: {} is a read-only mount of a writable filesystem (a read-only bind mount).",
                shown(&mount.mount_point)
            );
            f.fix = remount("bind,rw", &mount.mount_point).unwrap_or_else(|| find_mount(&mount.mount_point));
        } else {
            f.summary = format!(
                "{what} fails with EROFS: the {} filesystem at {} is read-only{}.",
                mount.fstype,
                shown(&mount.mount_point),
                if super_ro { " (the kernel may have remounted it after errors)" } else { "" }
            );
            f.fix = remount("rw", &mount.mount_point).unwrap_or_else(|| find_mount(&mount.mount_point));
            f.advice.push("if the kernel made it read-only after I/O errors, read dmesg and run fsck before remounting, or replace the disk".into());
        }
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

impl Detector for DiskFull {
    fn observe(&mut self, event: &CallEvent, identity: &Identity) {
        let Ok(path) = &identity.abs_path else { return };
        match event.errno() {
            None => {
                self.full.succeeded(path, event.time);
                self.read_only.succeeded(path, event.time);
            }
            Some(libc::ENOSPC | libc::EDQUOT) => self.full.failed(path, event, identity),
            Some(libc::EROFS) => self.read_only.failed(path, event, identity),
            Some(_) => {}
        }
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
