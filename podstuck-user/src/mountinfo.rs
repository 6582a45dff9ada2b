//! `/proc/<pid>/mountinfo`, parsed once for the whole crate: the [`Mount`]
//! model and the one reader of the kernel's octal escapes. On the ground
//! floor (it imports nothing from the crate) because both the inspector
//! (which mount a path is on, who holds it) and identify (where the cgroup
//! hierarchies are mounted) read it, and identify sits below inspect.
//!
//! Not the procfs crate's `MountInfo`: it reads the file as UTF-8 lines, so
//! one mount point with a byte that is not UTF-8 (a name a workload chose)
//! fails the whole table, and it keeps `\040` escapes in its paths; the
//! tests below hold both cases (docs/building.md says so too).

use std::borrow::Cow;

/// One line of a mountinfo file.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mount {
    pub id: u32,
    pub parent_id: u32,
    /// st_dev of the filesystem: (major, minor).
    pub dev: (u32, u32),
    /// Which directory of the filesystem is mounted (bind mounts: not "/").
    pub root: Vec<u8>,
    /// Where, unescaped (`\040` is a space).
    pub mount_point: Vec<u8>,
    /// Per-mount options: "rw,nosuid,relatime".
    pub options: String,
    /// Optional fields: "shared:12", "master:3".
    pub propagation: Vec<String>,
    pub fstype: String,
    pub source: String,
    /// Per-superblock options (v1 cgroups name their controllers here).
    pub super_options: String,
}

impl Mount {
    /// Its peer group (`shared:N`: the kernel's number, the same in every
    /// namespace holding a peer of it), where it has one.
    pub fn peer_group(&self) -> Option<&str> {
        self.propagation.iter().find(|p| p.starts_with("shared:")).map(String::as_str)
    }

    /// Whether the filesystem is a cgroup hierarchy (v1 or v2): its EBUSY
    /// is a cgroup's tasks, never a holder's open file.
    pub fn is_cgroup(&self) -> bool {
        self.fstype == "cgroup" || self.fstype == "cgroup2"
    }

    pub fn read_only(&self) -> bool {
        self.options.split(',').any(|o| o == "ro")
    }

    /// Its device as the kernel keeps a `dev_t` (`MKDEV`: major << 20 |
    /// minor): the superblock's `s_dev`, and the name of a FUSE
    /// connection's directory in fusectl (a block device's major for
    /// fuseblk, 0 for fuse, whose number is then its minor).
    pub fn kernel_dev(&self) -> u32 {
        kernel_dev(self.dev)
    }

    /// Whether this mounts the filesystem's whole tree (root `/`), not a
    /// bind mount of a directory inside it.
    pub fn whole(&self) -> bool {
        self.root == b"/"
    }
}

/// Undoes mountinfo's octal escapes: the kernel writes space, tab, newline
/// and backslash as `\ooo` (`\040`, `\011`, `\012`, `\134`). Only a byte's
/// value (`\000` to `\377`) is one; anything else stays as written.
/// A `major:minor` as the kernel keeps a `dev_t` (`MKDEV`).
pub fn kernel_dev((major, minor): (u32, u32)) -> u32 {
    (major << 20) | minor
}

pub fn unescape(field: &[u8]) -> Cow<'_, [u8]> {
    if !field.contains(&b'\\') {
        return Cow::Borrowed(field);
    }
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        let octal = field
            .get(i + 1..i + 4)
            .filter(|d| field[i] == b'\\' && d[0] <= b'3' && d.iter().all(|b| (b'0'..=b'7').contains(b)));
        match octal {
            Some(d) => {
                out.push((d[0] - b'0') * 64 + (d[1] - b'0') * 8 + (d[2] - b'0'));
                i += 4;
            }
            None => {
                out.push(field[i]);
                i += 1;
            }
        }
    }
    Cow::Owned(out)
}

fn text(field: &[u8]) -> String {
    String::from_utf8_lossy(&unescape(field)).into_owned()
}

/// One mountinfo line; None if it is not one.
fn parse_line(line: &[u8]) -> Option<Mount> {
    let fields: Vec<&[u8]> = line.split(|b| *b == b' ').filter(|f| !f.is_empty()).collect();
    let dash = fields.iter().position(|f| *f == b"-")?;
    if dash < 6 || fields.len() < dash + 3 {
        return None;
    }
    let number = |f: &[u8]| std::str::from_utf8(f).ok()?.parse::<u32>().ok();
    let (major, minor) = {
        let s = std::str::from_utf8(fields[2]).ok()?;
        let (a, b) = s.split_once(':')?;
        (a.parse().ok()?, b.parse().ok()?)
    };
    Some(Mount {
        id: number(fields[0])?,
        parent_id: number(fields[1])?,
        dev: (major, minor),
        root: unescape(fields[3]).into_owned(),
        mount_point: unescape(fields[4]).into_owned(),
        options: text(fields[5]),
        propagation: fields[6..dash].iter().map(|f| text(f)).collect(),
        fstype: text(fields[dash + 1]),
        source: text(fields[dash + 2]),
        super_options: fields.get(dash + 3).map(|f| text(f)).unwrap_or_default(),
    })
}

/// Every mount in a mountinfo file, in its order (later lines are mounted
/// on top of earlier ones at the same place). Lines that are not mounts
/// are passed over, so one strange line spoils nothing else.
pub fn parse_mountinfo(text: &[u8]) -> Vec<Mount> {
    text.split(|b| *b == b'\n').filter_map(parse_line).collect()
}

/// Whether `path` is `dir` or lies below it, by whole components.
pub fn is_at_or_below(path: &[u8], dir: &[u8]) -> bool {
    if dir == b"/" {
        return path.first() == Some(&b'/');
    }
    path.starts_with(dir) && (path.len() == dir.len() || path[dir.len()] == b'/')
}

/// Where a directory really is: the filesystem (device) and its path
/// inside that filesystem. Two paths with the same location are one
/// directory reached two ways (a bind mount shows it twice), in one mount
/// namespace or in two.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DirLocation {
    pub dev: (u32, u32),
    pub path_in_fs: Vec<u8>,
}

/// `base` + the part of `path` below `dir`, by whole components.
pub fn rebase(base: &[u8], path: &[u8], dir: &[u8]) -> Vec<u8> {
    let rest = if dir == b"/" { path } else { &path[dir.len()..] };
    let mut out = base.strip_suffix(b"/").unwrap_or(base).to_vec();
    out.extend_from_slice(rest);
    if out.is_empty() {
        out.push(b'/');
    }
    out
}

/// The directory entry an absolute `path` names in the namespace whose
/// table `mounts` is, as the kernel's lookup reaches it: from the root
/// mount, down the mount tree (each step onto the topmost mount stacked
/// at that directory, and only onto a mount whose parent is the mount
/// the lookup is on, so a mount hidden under a later one at a parent
/// directory is passed over), stopping at `path`'s parent directory:
/// whatever is mounted on `path` itself is not where its entry lies.
/// None for a relative path or a table with no root mount.
///
/// This, not the longest mount point above the path, decides whether a
/// path in one namespace is the same directory entry as in another: a
/// workload's namespace may hold any mounts it likes, hidden ones too.
pub fn entry_location(mounts: &[Mount], path: &[u8]) -> Option<DirLocation> {
    if path.first() != Some(&b'/') {
        return None;
    }
    let ids: std::collections::HashSet<u32> = mounts.iter().map(|m| m.id).collect();
    // The root: a mount on "/" whose parent is outside the table (a
    // namespace's root mount names a parent it cannot show).
    let root = mounts.iter().find(|m| m.mount_point == b"/" && (!ids.contains(&m.parent_id) || m.parent_id == m.id))?;
    fn topmost<'m>(mounts: &'m [Mount], mut on: &'m Mount, at: &[u8]) -> &'m Mount {
        while let Some(above) = mounts.iter().find(|m| m.parent_id == on.id && m.id != on.id && m.mount_point == at) {
            on = above;
        }
        on
    }
    let mut on = topmost(mounts, root, b"/");
    let parent_len = path.iter().rposition(|b| *b == b'/').unwrap_or(0);
    // Each directory above the entry, "/a", "/a/b", ..., by whole components.
    let mut end = 1;
    while end <= parent_len {
        let next = path[end..parent_len].iter().position(|b| *b == b'/').map_or(parent_len, |p| end + p);
        let dir = &path[..next];
        if let Some(child) = mounts.iter().find(|m| m.parent_id == on.id && m.id != on.id && m.mount_point == dir) {
            on = topmost(mounts, child, dir);
        }
        end = next + 1;
    }
    Some(DirLocation { dev: on.dev, path_in_fs: rebase(&on.root, path, &on.mount_point) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bytes_octal_value_is_an_escape() {
        assert_eq!(&*unescape(br"/var/tmp/a\040b"), b"/var/tmp/a b");
        assert_eq!(&*unescape(br"/x\134y\011z\012"), b"/x\\y\tz\n");
        assert_eq!(&*unescape(br"\377"), [0xff]);
        // Past a byte's value, short, or not octal: left as written.
        for kept in [&br"/a\400b"[..], br"/a\08", br"/a\04", br"/a\", br"\\"] {
            assert_eq!(&*unescape(kept), kept);
        }
        assert!(matches!(unescape(b"/plain"), Cow::Borrowed(_)));
    }

    /// The node: its root filesystem, and a pod's CSI volume mounted.
    const NODE: &[u8] = b"22 1 8:1 / / rw shared:1 - ext4 /dev/sda1 rw\n\
        90 22 0:70 / /var/lib/kubelet/pods/b/volumes/kubernetes.io~csi/pv/mount rw shared:40 - tmpfs tmpfs rw\n";
    const VOLUME: &[u8] = b"/var/lib/kubelet/pods/b/volumes/kubernetes.io~csi/pv/mount";

    fn location(table: &[u8], path: &[u8]) -> Option<DirLocation> {
        entry_location(&parse_mountinfo(table), path)
    }

    #[test]
    fn a_path_is_the_nodes_entry_where_its_directory_is_the_nodes_whatever_is_mounted_on_it() {
        let node = location(NODE, VOLUME).unwrap();
        assert_eq!(node, DirLocation { dev: (8, 1), path_in_fs: VOLUME.to_vec() });
        // A CSI plugin's namespace: its own root, and the node's kubelet
        // directory mounted from the node (the volume's copy unmounted there).
        let plugin = b"500 400 0:80 / / rw - overlay overlay rw\n\
            501 500 8:1 /var/lib/kubelet /var/lib/kubelet rw - ext4 /dev/sda1 rw\n";
        assert_eq!(location(plugin, VOLUME), Some(node.clone()));
    }

    #[test]
    fn a_namespaces_own_filesystem_at_the_nodes_path_is_not_the_nodes_entry() {
        let node = location(NODE, VOLUME).unwrap();
        // A tmpfs over /var/lib/kubelet, made in a pod's namespace.
        let tmpfs = b"500 400 0:80 / / rw - overlay overlay rw\n\
            502 500 0:81 / /var/lib/kubelet rw - tmpfs tmpfs rw\n";
        assert_ne!(location(tmpfs, VOLUME), Some(node.clone()));
        // The pod's own emptyDir (on the node's disk) bound over it: the
        // node's filesystem, another directory of it.
        let bound = b"500 400 0:80 / / rw - overlay overlay rw\n\
            503 500 8:1 /var/lib/kubelet/pods/a/volumes/kubernetes.io~empty-dir/d /var/lib/kubelet rw - ext4 /dev/sda1 rw\n";
        let there = location(bound, VOLUME).unwrap();
        assert_eq!(there.dev, (8, 1));
        assert_ne!(there, node);
    }

    #[test]
    fn a_mount_hidden_under_a_later_one_on_a_parent_directory_is_passed_over() {
        let node = location(NODE, VOLUME).unwrap();
        // The node's kubelet directory bound in, then a tmpfs mounted on
        // /var/lib over it: a lookup of /var/lib/kubelet lands in the tmpfs.
        let hidden = b"500 400 0:80 / / rw - overlay overlay rw\n\
            501 500 8:1 /var/lib/kubelet /var/lib/kubelet rw - ext4 /dev/sda1 rw\n\
            504 500 0:82 / /var/lib rw - tmpfs tmpfs rw\n";
        let there = location(hidden, VOLUME).unwrap();
        assert_eq!(there.dev, (0, 82));
        assert_ne!(there, node);
        // Stacked on the root itself: the topmost is the one looked up.
        let stacked = b"500 400 0:80 / / rw - overlay overlay rw\n505 500 8:1 / / rw - ext4 /dev/sda1 rw\n";
        assert_eq!(location(stacked, VOLUME), Some(node));
        assert_eq!(location(b"", VOLUME), None);
        assert_eq!(location(NODE, b"relative/path"), None);
    }

    #[test]
    fn a_mount_point_that_is_not_utf8_is_read_where_procfs_refuses_the_table() {
        let text = b"22 1 8:1 / / rw - ext4 /dev/sda1 rw\n40 22 0:50 / /var/lib/kubelet/pods/p/volumes/x\xff\\040y rw shared:5 - tmpfs tmpfs rw\n";
        let mounts = parse_mountinfo(text);
        assert_eq!(mounts.len(), 2);
        assert_eq!(mounts[1].mount_point, b"/var/lib/kubelet/pods/p/volumes/x\xff y");
        assert!(mounts[0].whole());
        // What the procfs crate makes of the same file: nothing at all.
        use procfs::FromBufRead;
        assert!(procfs::process::MountInfos::from_buf_read(&text[..]).is_err());
        let escaped = procfs::process::MountInfo::from_line("40 22 0:50 / /a\\040b rw - tmpfs tmpfs rw").unwrap();
        assert_eq!(escaped.mount_point, std::path::PathBuf::from("/a\\040b"), "procfs keeps the escape");
    }
}
