//! The tests' one reader of `/proc/PID/mountinfo`: what is mounted where,
//! for fixtures (where cgroups are mounted, whether `/` propagates), for
//! cleanup (every mount below a daemon's directories) and for checks that
//! podstuck changed nothing. Apart from podstuck's own parser on purpose:
//! the tests judge what podstuck says about mounts, so they do not read
//! mounts with the code they judge.
//!
//! Fields are split as proc_pid_mountinfo(5) writes them: a mount point
//! has its octal escapes undone (`\040` for a space, `\134` for a
//! backslash), and `\4xx` is never an escape (no byte is that large).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

/// One line of mountinfo.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    /// The filesystem's device number: stat(2) of a FUSE mount whose daemon
    /// stopped would hang, mountinfo does not.
    pub device: (u32, u32),
    /// Where it is mounted, unescaped.
    pub mount_point: PathBuf,
    /// The optional fields: `shared:N`, `master:N`, `propagate_from:N`...
    pub optional: Vec<String>,
    pub fstype: String,
    /// The superblock options (`rw,memory` for the v1 memory hierarchy).
    pub super_options: String,
}

impl Mount {
    /// A line of mountinfo; None for one that is not.
    pub fn parse(line: &str) -> Option<Mount> {
        let (left, right) = line.split_once(" - ")?;
        let left: Vec<&str> = left.split(' ').collect();
        let mut right = right.split(' ');
        let (major, minor) = left.get(2)?.split_once(':')?;
        let fstype = right.next()?.to_string();
        let _source = right.next()?;
        Some(Mount {
            device: (major.parse().ok()?, minor.parse().ok()?),
            mount_point: unescape(left.get(4)?),
            optional: left.get(6..).unwrap_or_default().iter().map(|f| f.to_string()).collect(),
            fstype,
            super_options: right.next()?.to_string(),
        })
    }

    /// Whether mounts and unmounts below it propagate to or from another
    /// namespace: a shared mount (every systemd node's `/`), or a slave of one.
    pub fn propagates(&self) -> bool {
        self.optional.iter().any(|f| f.starts_with("shared:") || f.starts_with("master:"))
    }

    /// Whether it is a v1 cgroup hierarchy holding `controller` (`memory`,
    /// `freezer`, `name=systemd`).
    pub fn is_v1_hierarchy_of(&self, controller: &str) -> bool {
        self.fstype == "cgroup" && self.super_options.split(',').any(|o| o == controller)
    }
}

/// The mounts of `pid`'s mount namespace (`"self"` for this process's), in
/// mountinfo's order: a later mount on the same point hides the earlier.
/// None if they cannot be read (the process is gone).
pub fn of(pid: &str) -> Option<Vec<Mount>> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).ok()?;
    Some(text.lines().filter_map(Mount::parse).collect())
}

/// This process's mounts (none if /proc cannot be read: for a drop).
pub fn here() -> Vec<Mount> {
    of("self").unwrap_or_default()
}

/// The mount that is seen at `path` in `pid`'s mount namespace: the last
/// one mounted on it.
pub fn at_in(pid: &str, path: &Path) -> Option<Mount> {
    of(pid)?.into_iter().rev().find(|m| m.mount_point == path)
}

/// The mount that is seen at `path` here.
pub fn at(path: &Path) -> Option<Mount> {
    at_in("self", path)
}

/// Whether `path` is a mount point in this process's mount namespace.
pub fn is_mountpoint(path: &Path) -> bool {
    at(path).is_some()
}

/// Every mount point here at or below one of `dirs`, in mountinfo's order.
pub fn below<P: AsRef<Path>>(dirs: &[P]) -> Vec<PathBuf> {
    here().into_iter().map(|m| m.mount_point).filter(|m| dirs.iter().any(|d| m.starts_with(d))).collect()
}

/// A mountinfo path field with its octal escapes undone.
pub fn unescape(field: &str) -> PathBuf {
    let bytes = field.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\'
            && i + 3 < bytes.len()
            && bytes[i + 1] <= b'3'
            && bytes[i + 1..i + 4].iter().all(|b| (b'0'..=b'7').contains(b))
        {
            out.push((bytes[i + 1] - b'0') * 64 + (bytes[i + 2] - b'0') * 8 + (bytes[i + 3] - b'0'));
            i += 4;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    PathBuf::from(OsStr::from_bytes(&out))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_are_undone_and_4xx_is_not_one() {
        assert_eq!(unescape(r"/var/tmp/a\040b"), PathBuf::from("/var/tmp/a b"));
        assert_eq!(unescape(r"/x\134y"), PathBuf::from(r"/x\y"));
        assert_eq!(unescape(r"/x\400"), PathBuf::from(r"/x\400"));
        assert_eq!(unescape("/plain"), PathBuf::from("/plain"));
    }

    #[test]
    fn a_line_is_split_into_its_fields() {
        let line = r"36 35 98:0 /mnt1 /mnt\040two rw,noatime master:1 shared:7 - ext3 /dev/root rw,errors=continue";
        let m = Mount::parse(line).unwrap();
        assert_eq!(m.device, (98, 0));
        assert_eq!(m.mount_point, PathBuf::from("/mnt two"));
        assert_eq!(m.optional, vec!["master:1", "shared:7"]);
        assert_eq!((m.fstype.as_str(), m.super_options.as_str()), ("ext3", "rw,errors=continue"));
        assert!(m.propagates());
        let memory = Mount::parse("30 25 0:26 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory").unwrap();
        assert!(memory.optional.is_empty() && !memory.propagates());
        assert!(memory.is_v1_hierarchy_of("memory") && !memory.is_v1_hierarchy_of("mem"));
        assert_eq!(Mount::parse("not a mountinfo line"), None);
    }
}
