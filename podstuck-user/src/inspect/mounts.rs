//! Mount tables: answering "which mount is this path on" and "what is
//! mounted below it" over a parsed `/proc/<pid>/mountinfo`
//! ([`crate::mountinfo`]). Pure; the files are read by the live inspector.

pub use crate::mountinfo::{is_at_or_below, parse_mountinfo, DirLocation};
use crate::mountinfo::{rebase, Mount};

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

/// Path depth, for parents-first and deepest-first orders.
pub fn depth(path: &[u8]) -> usize {
    path.iter().filter(|b| **b == b'/').count()
}

/// Mounts strictly below `path`.
pub fn mounts_under<'a>(mounts: &'a [Mount], path: &[u8]) -> Vec<&'a Mount> {
    mounts.iter().filter(|m| m.mount_point != path && is_at_or_below(&m.mount_point, path)).collect()
}

/// The location of `path` as a directory of the filesystem it lies on,
/// ignoring anything mounted on `path` itself: the dentry that a mount on
/// it would sit on.
pub fn location_under(mounts: &[Mount], path: &[u8]) -> Option<DirLocation> {
    let beneath = mounts
        .iter()
        .filter(|m| m.mount_point != path && is_at_or_below(path, &m.mount_point))
        .max_by_key(|m| m.mount_point.len())?;
    Some(DirLocation { dev: beneath.dev, path_in_fs: rebase(&beneath.root, path, &beneath.mount_point) })
}

/// Where the mount point of `mount` lies: the directory it covers, in the
/// filesystem of its parent mount.
pub fn mount_point_location(mounts: &[Mount], mount: &Mount) -> Option<DirLocation> {
    let parent = mounts.iter().find(|m| m.id == mount.parent_id && m.id != mount.id)?;
    if !is_at_or_below(&mount.mount_point, &parent.mount_point) {
        return None;
    }
    Some(DirLocation { dev: parent.dev, path_in_fs: rebase(&parent.root, &mount.mount_point, &parent.mount_point) })
}

/// Mounts on the same directory as `path` but reached by another path:
/// with a bind view of a parent directory (`mount --rbind /a /b`), a mount
/// on `/a/x` has a twin on `/b/x`, and while the twin stays `/a/x` is still
/// a mountpoint to the kernel (rmdir fails with EBUSY) though nothing is
/// mounted at that path any more.
pub fn mounts_on_same_dir<'a>(mounts: &'a [Mount], path: &[u8]) -> Vec<&'a Mount> {
    let Some(here) = location_under(mounts, path) else { return Vec::new() };
    mounts
        .iter()
        .filter(|m| m.mount_point != path)
        .filter(|m| mount_point_location(mounts, m).is_some_and(|l| l == here))
        .collect()
}

/// A cgroup directory placed in its hierarchy: on v1 each controller (or
/// group of them) is a hierarchy of its own, mounted on its own, and a pod
/// has one directory in each at the same path relative to the mount.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CgroupPlace {
    /// The hierarchy's mount point.
    pub mount_point: Vec<u8>,
    /// The path below the mount point, without a leading `/` ("" for the root).
    pub relative: Vec<u8>,
    /// 1 or 2.
    pub version: u8,
    /// "memory", "cpu,cpuacct", "name=systemd"; "unified" for v2.
    pub hierarchy: String,
}

/// Per-superblock options of a v1 cgroup mount that are not controllers.
const NOT_CONTROLLERS: [&str; 6] = ["rw", "ro", "xattr", "noprefix", "clone_children", "cpuset_v2_mode"];

/// The controllers (or `name=`) a v1 cgroup mount holds, from its
/// per-superblock options: "rw,cpu,cpuacct" is "cpu,cpuacct".
pub fn v1_controllers(mount: &Mount) -> String {
    let names: Vec<&str> = mount
        .super_options
        .split(',')
        .filter(|o| !NOT_CONTROLLERS.contains(o) && !o.starts_with("release_agent=") && !o.is_empty())
        .collect();
    names.join(",")
}

/// Which hierarchy `path` is a cgroup of, and where in it; None when it
/// is on no cgroup filesystem.
pub fn cgroup_place(mounts: &[Mount], path: &[u8]) -> Option<CgroupPlace> {
    let m = mount_containing(mounts, path)?;
    let version = match m.fstype.as_str() {
        "cgroup" => 1,
        "cgroup2" => 2,
        _ => return None,
    };
    let rest = if m.mount_point == b"/" { path } else { &path[m.mount_point.len()..] };
    let relative = rest.strip_prefix(b"/").unwrap_or(rest).to_vec();
    let hierarchy = if version == 2 { "unified".to_string() } else { v1_controllers(m) };
    Some(CgroupPlace { mount_point: m.mount_point.clone(), relative, version, hierarchy })
}

/// The twin of v1 cgroup `path` in the freezer hierarchy: the same
/// relative path under the mount whose controllers include `freezer`.
/// None when `path` is no v1 cgroup or no freezer hierarchy is mounted.
pub fn freezer_twin(mounts: &[Mount], path: &[u8]) -> Option<Vec<u8>> {
    let place = cgroup_place(mounts, path).filter(|p| p.version == 1)?;
    let freezer =
        mounts.iter().rev().find(|m| m.fstype == "cgroup" && v1_controllers(m).split(',').any(|c| c == "freezer"))?;
    let mut twin = freezer.mount_point.clone();
    if !place.relative.is_empty() {
        if twin != b"/" {
            twin.push(b'/');
        }
        twin.extend_from_slice(&place.relative);
    }
    Some(twin)
}

/// The number of a propagation tag ("shared:12" -> 12 for "shared").
fn peer_group(propagation: &[String], tag: &str) -> Option<u32> {
    propagation.iter().find_map(|p| p.strip_prefix(tag)?.strip_prefix(':')?.parse().ok())
}

/// Whether a copy of `mount` in another mount namespace, with propagation
/// `copy_propagation`, can make a (non-lazy) unmount of `mount` fail with
/// EBUSY. The kernel checks the copies that unmount propagation reaches
/// (the mount's peers and their slaves: propagate_mount_busy); a copy in a
/// private namespace (`unshare -m`'s default) is not reached and never
/// blocks. Removing a directory is never blocked by another namespace's
/// copy (since Linux 3.18 such copies are detached).
pub fn copy_can_block_unmount(mount: &Mount, copy_propagation: &[String]) -> bool {
    let Some(group) = peer_group(&mount.propagation, "shared") else { return false };
    peer_group(copy_propagation, "shared") == Some(group) || peer_group(copy_propagation, "master") == Some(group)
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
        assert_eq!(
            mount_containing(&mounts, b"/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/pv one/mount/f").unwrap().id,
            40
        );
        assert_eq!(
            mount_containing(&mounts, b"/var/lib/kubelet/pods/p/volumes/kubernetes.io~csi/pv one/mountain").unwrap().id,
            22
        );
        assert_eq!(mount_at(&mounts, b"/mnt/bind").unwrap().id, 43);
        assert_eq!(mount_containing(&mounts, b"/mnt/bind/x").unwrap().id, 43);
        assert!(mount_at(&mounts, b"/var/lib/kubelet").is_none());
        let under: Vec<u32> = mounts_under(&mounts, vol).iter().map(|m| m.id).collect();
        assert_eq!(under, vec![42]);
        let under_pod: Vec<u32> = mounts_under(&mounts, b"/var/lib/kubelet/pods/p").iter().map(|m| m.id).collect();
        assert_eq!(under_pod, vec![40, 42]);
    }
    #[test]
    fn a_bind_view_of_a_parent_shows_the_same_directory_twice() {
        // /data/layer/merged has an overlay; /data/layer was then rbound at
        // /backup/view, so /backup/view/merged holds a twin of that overlay.
        // dockerd later detached the original: /data/layer/merged is no
        // mountpoint by its path, yet its directory still has a mount.
        let table = b"\
1 0 8:1 / / rw shared:1 - ext4 /dev/sda1 rw
50 1 8:1 /data/layer /backup/view rw shared:1 - ext4 /dev/sda1 rw
51 50 0:60 / /backup/view/merged rw shared:7 - overlay overlay rw
60 1 0:61 / /srv rw - tmpfs tmpfs rw
61 60 0:61 /sub /srv/sub2 rw - tmpfs tmpfs rw
62 61 0:62 / /srv/sub2/x rw - tmpfs tmpfs rw
";
        let mounts = parse_mountinfo(table);
        let twins: Vec<u32> = mounts_on_same_dir(&mounts, b"/data/layer/merged").iter().map(|m| m.id).collect();
        assert_eq!(twins, vec![51]);
        assert_eq!(
            location_under(&mounts, b"/data/layer/merged"),
            Some(DirLocation { dev: (8, 1), path_in_fs: b"/data/layer/merged".to_vec() })
        );
        // The view itself is not a twin of anything at /data/layer.
        assert!(mounts_on_same_dir(&mounts, b"/data/other").is_empty());
        // A bind of a subdirectory: /srv/sub/x is the directory /sub/x of
        // tmpfs 0:61, where /srv/sub2/x is mounted.
        let twins: Vec<u32> = mounts_on_same_dir(&mounts, b"/srv/sub/x").iter().map(|m| m.id).collect();
        assert_eq!(twins, vec![62]);
        // The path a mount is at is not its own twin.
        assert!(mounts_on_same_dir(&mounts, b"/srv/sub2/x").is_empty());
    }

    #[test]
    fn only_copies_that_unmount_propagation_reaches_can_block_it() {
        let mounts = parse_mountinfo(SAMPLE);
        let csi = &mounts[3];
        assert!(copy_can_block_unmount(csi, &["shared:20".into()]));
        assert!(copy_can_block_unmount(csi, &["master:20".into()]));
        assert!(!copy_can_block_unmount(csi, &[]), "a private copy");
        assert!(!copy_can_block_unmount(csi, &["shared:21".into()]));
        let private = &mounts[6];
        assert!(!copy_can_block_unmount(private, &["shared:20".into()]), "a private mount propagates nothing");
    }

    /// A field as mountinfo writes it: space, tab, newline and backslash
    /// in octal.
    fn escaped(field: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        for &b in field {
            match b {
                b' ' | b'\t' | b'\n' | b'\\' => out.extend_from_slice(format!("\\{b:03o}").as_bytes()),
                _ => out.push(b),
            }
        }
        out
    }

    fn path_bytes() -> impl proptest::strategy::Strategy<Value = Vec<u8>> {
        use proptest::prelude::*;
        prop_oneof![
            proptest::collection::vec(any::<u8>(), 1..40).prop_map(|mut p| {
                p.insert(0, b'/');
                p
            }),
            proptest::collection::vec(
                prop_oneof![
                    Just(b"/".to_vec()),
                    Just(b"a".to_vec()),
                    Just(b" ".to_vec()),
                    Just(b"\\".to_vec()),
                    Just(b"\\040".to_vec())
                ],
                1..8
            )
            .prop_map(|parts| parts.concat()),
        ]
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 1024, failure_persistence: None, ..Default::default() })]

        /// Any bytes: mounts or nothing, never a panic; and every question
        /// about the table answered without one.
        #[test]
        fn any_bytes_parse_without_a_panic(text in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600), path in path_bytes()) {
            let mounts = parse_mountinfo(&text);
            proptest::prop_assert!(mounts.len() <= text.split(|b| *b == b'\n').count());
            let _ = mount_at(&mounts, &path);
            let _ = mount_containing(&mounts, &path);
            let _ = mounts_under(&mounts, &path);
            let _ = location_under(&mounts, &path);
            let _ = mounts_on_same_dir(&mounts, &path);
            for m in &mounts {
                let _ = mount_point_location(&mounts, m);
                let _ = copy_can_block_unmount(m, &m.propagation);
            }
        }

        /// Lines as the kernel writes them, with any paths in them: read
        /// back byte for byte.
        #[test]
        fn written_lines_read_back_the_same(
            mounts in proptest::collection::vec((proptest::prelude::any::<u32>(), proptest::prelude::any::<u32>(), 0u32..4096, 0u32..1 << 20, path_bytes(), path_bytes(), "[a-z0-9,=]{1,30}", proptest::collection::vec("(shared|master):[0-9]{1,4}", 0..3)), 0..12),
            junk in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..50),
        ) {
            let mut text = Vec::new();
            for (id, parent, major, minor, root, point, options, propagation) in &mounts {
                text.extend_from_slice(format!("{id} {parent} {major}:{minor} ").as_bytes());
                text.extend(escaped(root));
                text.push(b' ');
                text.extend(escaped(point));
                text.extend_from_slice(format!(" {options}").as_bytes());
                for p in propagation {
                    text.extend_from_slice(format!(" {p}").as_bytes());
                }
                text.extend_from_slice(format!(" - tmpfs src {options}\n").as_bytes());
            }
            // A line of junk after them (no newline in it) spoils nothing before.
            text.extend(junk.iter().filter(|b| **b != b'\n'));
            let parsed = parse_mountinfo(&text);
            proptest::prop_assert!(parsed.len() >= mounts.len());
            for (m, (id, parent, major, minor, root, point, options, propagation)) in parsed.iter().zip(&mounts) {
                proptest::prop_assert_eq!((m.id, m.parent_id, m.dev), (*id, *parent, (*major, *minor)));
                proptest::prop_assert_eq!(&m.root, root);
                proptest::prop_assert_eq!(&m.mount_point, point);
                proptest::prop_assert_eq!(&m.options, options);
                proptest::prop_assert_eq!(&m.propagation, propagation);
                proptest::prop_assert_eq!(&m.super_options, options);
            }
        }
    }

    #[test]
    fn a_v1_cgroup_is_placed_in_its_hierarchy_and_has_a_freezer_twin() {
        let v1 = b"\
30 22 0:25 / /sys/fs/cgroup rw - tmpfs tmpfs rw,mode=755
32 30 0:29 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct
35 30 0:32 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory
37 30 0:34 / /sys/fs/cgroup/freezer rw - cgroup cgroup rw,freezer
40 30 0:37 / /sys/fs/cgroup/systemd rw - cgroup cgroup rw,xattr,release_agent=/x,name=systemd
";
        let mounts = parse_mountinfo(v1);
        let place = cgroup_place(&mounts, b"/sys/fs/cgroup/cpu,cpuacct/kubepods/podX/c1").unwrap();
        assert_eq!(
            (place.version, place.hierarchy.as_str(), place.relative.as_slice()),
            (1, "cpu,cpuacct", &b"kubepods/podX/c1"[..])
        );
        assert_eq!(cgroup_place(&mounts, b"/sys/fs/cgroup/systemd/kubepods").unwrap().hierarchy, "name=systemd");
        assert_eq!(
            freezer_twin(&mounts, b"/sys/fs/cgroup/memory/kubepods/podX").unwrap(),
            b"/sys/fs/cgroup/freezer/kubepods/podX"
        );
        assert_eq!(
            freezer_twin(&mounts, b"/sys/fs/cgroup/freezer/kubepods").unwrap(),
            b"/sys/fs/cgroup/freezer/kubepods"
        );
        assert_eq!(freezer_twin(&mounts, b"/sys/fs/cgroup/memory").unwrap(), b"/sys/fs/cgroup/freezer");
        assert_eq!(cgroup_place(&mounts, b"/sys/fs/cgroup/x"), None, "the tmpfs under the hierarchies is no cgroup");
        // v2 has no freezer twin: cgroup.freeze sits in every cgroup.
        let mounts = parse_mountinfo(SAMPLE);
        assert_eq!(cgroup_place(&mounts, b"/sys/fs/cgroup/unified/a").unwrap().hierarchy, "unified");
        assert_eq!(freezer_twin(&mounts, b"/sys/fs/cgroup/unified/a"), None);
    }
}
