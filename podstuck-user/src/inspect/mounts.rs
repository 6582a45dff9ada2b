//! Mount tables: parsing `/proc/<pid>/mountinfo` and answering "which mount
//! is this path on" and "what is mounted below it". Pure text work; the
//! files are read by the live inspector.

use super::Mount;

/// Undoes mountinfo's octal escapes (`\040` space, `\011` tab, `\012`
/// newline, `\134` backslash).
fn unescape(field: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(field.len());
    let mut i = 0;
    while i < field.len() {
        if field[i] == b'\\' && i + 3 < field.len() && field[i + 1..i + 4].iter().all(|d| (b'0'..=b'7').contains(d)) {
            let v = (field[i + 1] - b'0') as u32 * 64 + (field[i + 2] - b'0') as u32 * 8 + (field[i + 3] - b'0') as u32;
            out.push(v as u8);
            i += 4;
        } else {
            out.push(field[i]);
            i += 1;
        }
    }
    out
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
        root: unescape(fields[3]),
        mount_point: unescape(fields[4]),
        options: text(fields[5]),
        propagation: fields[6..dash].iter().map(|f| text(f)).collect(),
        fstype: text(fields[dash + 1]),
        source: text(fields[dash + 2]),
        super_options: fields.get(dash + 3).map(|f| text(f)).unwrap_or_default(),
    })
}

/// Every mount in a mountinfo file, in its order (later lines are mounted
/// on top of earlier ones at the same place).
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

/// The mount whose mount point is exactly `path` (the topmost when several
/// are stacked there).
pub fn mount_at<'a>(mounts: &'a [Mount], path: &[u8]) -> Option<&'a Mount> {
    mounts.iter().rev().find(|m| m.mount_point == path)
}

/// The mount `path` lies on: the longest mount point above it, the topmost
/// when several are stacked there.
pub fn mount_containing<'a>(mounts: &'a [Mount], path: &[u8]) -> Option<&'a Mount> {
    // max_by_key keeps the last of equals: the line mounted last, on top.
    mounts.iter().filter(|m| is_at_or_below(path, &m.mount_point)).max_by_key(|m| m.mount_point.len())
}

/// Mounts strictly below `path`.
pub fn mounts_under<'a>(mounts: &'a [Mount], path: &[u8]) -> Vec<&'a Mount> {
    mounts.iter().filter(|m| m.mount_point != path && is_at_or_below(&m.mount_point, path)).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    const SAMPLE: &[u8] = b"\
22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro
30 22 0:25 / /sys/fs/cgroup ro,nosuid shared:9 - tmpfs tmpfs ro,mode=755
31 30 0:26 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw
40 22 0:50 / /var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/pv\\040one/mount rw,relatime shared:20 - tmpfs tmpfs rw,size=1024k
41 22 8:1 /data /mnt/bind ro,relatime master:1 - ext4 /dev/sda1 rw
42 40 0:51 / /var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/pv\\040one/mount/sub rw - tmpfs tmpfs rw
43 22 0:52 / /mnt/bind rw - tmpfs tmpfs rw
";

    #[test]
    fn parses_fields_escapes_and_optional_fields() {
        let mounts = parse_mountinfo(SAMPLE);
        assert_eq!(mounts.len(), 7);
        let csi = &mounts[3];
        assert_eq!(csi.id, 40);
        assert_eq!(csi.dev, (0, 50));
        assert_eq!(csi.mount_point, b"/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/pv one/mount");
        assert_eq!(csi.propagation, vec!["shared:20"]);
        assert_eq!(csi.fstype, "tmpfs");
        assert_eq!(csi.super_options, "rw,size=1024k");
        let bind = &mounts[4];
        assert_eq!(bind.root, b"/data");
        assert!(bind.read_only());
        assert!(!csi.read_only());
    }

    #[test]
    fn finds_the_mount_of_a_path_topmost_first() {
        let mounts = parse_mountinfo(SAMPLE);
        let vol = b"/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/pv one/mount";
        assert_eq!(mount_at(&mounts, vol).unwrap().id, 40);
        assert_eq!(mount_containing(&mounts, b"/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/pv one/mount/f").unwrap().id, 40);
        assert_eq!(mount_containing(&mounts, b"/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/pv one/mountain").unwrap().id, 22);
        assert_eq!(mount_at(&mounts, b"/mnt/bind").unwrap().id, 43);
        assert_eq!(mount_containing(&mounts, b"/mnt/bind/x").unwrap().id, 43);
        assert!(mount_at(&mounts, b"/var/lib/kubelet").is_none());
        let under: Vec<u32> = mounts_under(&mounts, vol).iter().map(|m| m.id).collect();
        assert_eq!(under, vec![42]);
        let under_pod: Vec<u32> = mounts_under(&mounts, b"/var/lib/kubelet/pods/p").iter().map(|m| m.id).collect();
        assert_eq!(under_pod, vec![40, 42]);
    }
}
