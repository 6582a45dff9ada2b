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
