//! Who holds a mount: podstuck's `fuser`. Every process is looked at for
//! a working directory or root, an open file (its fdinfo's `mnt_id` says
//! which mount) or a mapped file on the mount, in its own mount namespace
//! or as a copy of the mount in another; and which other namespaces hold a
//! copy at all. /proc links and text files only, read inline.

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::fs;

use crate::inspect::mounts::{is_at_or_below, mount_containing, mount_point_location};
use crate::inspect::{HoldKind, Mount, MountCopy, MountElsewhere, MountHolder, MountNamespace};
use crate::mountinfo::entry_location;

use super::{read_link, RealNode};

/// One mount namespace's table, and which of its mounts are `mount`.
struct NamespaceView {
    table: Vec<Mount>,
    targets: HashSet<u32>,
    mount_point: Vec<u8>,
    dev: (u32, u32),
}

impl RealNode {
    /// Every way a process holds `mount` of namespace `mntns` (0: the node's).
    pub(super) fn holders_of(&mut self, mount: &Mount, mntns: u64) -> Vec<MountHolder> {
        let host_ns = self.own_mntns();
        let asked_ns = if mntns == 0 { host_ns } else { Some(mntns) };
        let mut views: HashMap<u64, NamespaceView> = HashMap::new();
        let mut holders = Vec::new();
        for pid in self.pids() {
            // Processes that vanish mid-scan are simply not holders any more.
            let Some(ns) = self.mntns_of(pid) else { continue };
            let own = Some(ns) == asked_ns;
            let host = Some(ns) == host_ns;
            let Some(view) = self.view_for(&mut views, pid, ns, own, host, mount) else { continue };
            let holds = self.holds_of(pid, view);
            if holds.is_empty() {
                continue;
            }
            let comm = self.comm_of(pid);
            // Read after the holds: a pid reused since the scan began has
            // a later start, and the fix then names no process at all.
            let start = crate::identify::process::process_start(&self.proc_root, pid);
            let owner = self.runtimes.owner_of(&self.proc_root, pid);
            holders.extend(holds.into_iter().map(|(how, path)| MountHolder {
                pid,
                start,
                comm: comm.clone(),
                how,
                path,
                mntns: ns,
                other_namespace: !own,
                owner: owner.clone(),
            }));
        }
        holders
    }

    /// The mounts on the directory entry `path` names in namespace
    /// `mntns`, in every other namespace, the host's first, with who holds
    /// each: the entry is found in each table by where its mount point
    /// lies (the filesystem and directory under it), so a namespace that
    /// reaches the same directory by another path counts too.
    pub(super) fn elsewhere_of(&mut self, path: &[u8], mntns: u64) -> Vec<MountElsewhere> {
        let host_ns = self.own_mntns();
        let asked = if mntns == 0 { host_ns } else { Some(mntns) };
        let Ok(here) = self.namespace(asked.unwrap_or(0)) else { return Vec::new() };
        let Some(entry) = entry_location(&here.mounts, path) else { return Vec::new() };
        let mut seen: HashSet<u64> = asked.into_iter().collect();
        let mut namespaces: Vec<MountNamespace> = Vec::new();
        if let (Some(host), true) = (host_ns, asked != host_ns) {
            if let Ok(ns) = self.namespace(host) {
                seen.insert(host);
                namespaces.push(ns);
            }
        }
        for pid in self.pids() {
            let Some(ns) = self.mntns_of(pid) else { continue };
            if !seen.insert(ns) {
                continue;
            }
            if let Ok(namespace) = self.namespace(ns) {
                namespaces.push(namespace);
            }
        }
        let mut found = Vec::new();
        for namespace in namespaces {
            let on_entry: Vec<Mount> = namespace
                .mounts
                .iter()
                .filter(|m| mount_point_location(&namespace.mounts, m).as_ref() == Some(&entry))
                .cloned()
                .collect();
            for mount in on_entry {
                let holders = self.holders_of(&mount, namespace.mntns);
                let namespace = MountNamespace { mounts: Vec::new(), ..namespace.clone() };
                found.push(MountElsewhere { namespace, mount, holders });
            }
        }
        found
    }

    /// The copies of `mount` in namespaces other than its own.
    pub(super) fn copies_of(&mut self, mount: &Mount, mntns: u64) -> Vec<MountCopy> {
        let own_ns = if mntns == 0 { self.own_mntns() } else { Some(mntns) };
        let mut seen: HashSet<u64> = HashSet::new();
        let mut copies = Vec::new();
        for pid in self.pids() {
            let Some(ns) = self.mntns_of(pid) else { continue };
            if Some(ns) == own_ns || seen.contains(&ns) {
                continue;
            }
            let Ok(table) = self.table_of(pid) else { continue };
            seen.insert(ns);
            if let Some(copy) = table.iter().find(|m| is_copy(m, mount) || is_peer(m, mount)) {
                copies.push(MountCopy {
                    mntns: ns,
                    pid,
                    start: crate::identify::process::process_start(&self.proc_root, pid),
                    comm: self.comm_of(pid),
                    mount_point: copy.mount_point.clone(),
                    propagation: copy.propagation.clone(),
                    owner: self.runtimes.owner_of(&self.proc_root, pid),
                });
            }
        }
        copies
    }

    /// What the mount table of one namespace says about `mount`.
    fn namespace_view(&self, table: Vec<Mount>, mount: &Mount, own: bool) -> NamespaceView {
        let mut targets: HashSet<u32> = HashSet::new();
        // The exact mount: a process anywhere may hold it through an fd it
        // got before it changed namespace or over a socket.
        targets.insert(mount.id);
        let has_exact = own && table.iter().any(|m| m.id == mount.id);
        if !has_exact {
            targets.extend(table.iter().filter(|m| is_copy(m, mount)).map(|m| m.id));
        }
        NamespaceView { table, targets, mount_point: mount.mount_point.clone(), dev: mount.dev }
    }

    /// The first fd of `pid` open on a target mount, by its path.
    fn open_file_on(&self, pid: u32, view: &NamespaceView) -> Option<Vec<u8>> {
        let fd_dir = self.proc_file(pid, "fd");
        for entry in fs::read_dir(&fd_dir).ok()?.flatten() {
            let Ok(target) = read_link(&entry.path()) else { continue };
            // Sockets, pipes and anonymous inodes are not "/..." and never on a mount.
            if !is_at_or_below(strip_deleted(&target), &view.mount_point) {
                continue;
            }
            let info = self.proc_root.join(pid.to_string()).join("fdinfo").join(entry.file_name());
            let Ok(info) = fs::read(info) else { continue };
            if parse_fdinfo_mnt_id(&info).is_some_and(|id| view.targets.contains(&id)) {
                return Some(target);
            }
        }
        None
    }

    /// The first file of `pid` mapped from the mount.
    fn mapped_file_on(&self, pid: u32, view: &NamespaceView) -> Option<Vec<u8>> {
        let maps = fs::read(self.proc_file(pid, "maps")).ok()?;
        maps.split(|b| *b == b'\n').filter_map(parse_maps_line).find_map(|(dev, path)| {
            (dev == view.dev && is_at_or_below(strip_deleted(path), &view.mount_point)).then(|| path.to_vec())
        })
    }

    /// How `pid` holds the mount, one entry per way, with a path each.
    fn holds_of(&self, pid: u32, view: &NamespaceView) -> Vec<(HoldKind, Vec<u8>)> {
        let mut found = Vec::new();
        for (how, link) in [(HoldKind::Cwd, "cwd"), (HoldKind::Root, "root")] {
            let Ok(target) = read_link(&self.proc_file(pid, link)) else { continue };
            let seen = strip_deleted(&target);
            if is_at_or_below(seen, &view.mount_point)
                && mount_containing(&view.table, seen).is_some_and(|m| view.targets.contains(&m.id))
            {
                found.push((how, seen.to_vec()));
            }
        }
        if let Some(path) = self.open_file_on(pid, view) {
            found.push((HoldKind::OpenFile, path));
        }
        if let Some(path) = self.mapped_file_on(pid, view) {
            found.push((HoldKind::MappedFile, path));
        }
        found
    }

    /// Reads `pid`'s mount table once per namespace; None if the process is
    /// gone. `own`: the namespace `mount` is of; `host`: the host's.
    fn view_for<'v>(
        &self,
        views: &'v mut HashMap<u64, NamespaceView>,
        pid: u32,
        ns: u64,
        own: bool,
        host: bool,
        mount: &Mount,
    ) -> Option<&'v NamespaceView> {
        match views.entry(ns) {
            Entry::Occupied(known) => Some(known.into_mut()),
            Entry::Vacant(slot) => {
                let table = if host { self.host_table() } else { self.table_of(pid) };
                Some(slot.insert(self.namespace_view(table.ok()?, mount, own)))
            }
        }
    }
}

/// A mount in another namespace that is a copy of `mount`: what `unshare
/// -m` or a container runtime leaves there.
fn is_copy(candidate: &Mount, mount: &Mount) -> bool {
    candidate.dev == mount.dev && candidate.root == mount.root && candidate.mount_point == mount.mount_point
}

/// Whether `candidate` is `mount` in the same peer group (`shared:N`, the
/// kernel's number, the same in every namespace), wherever it is mounted:
/// a volume seen inside a container at its own path, with Bidirectional
/// propagation. A mount or unmount on either reaches the other.
fn is_peer(candidate: &Mount, mount: &Mount) -> bool {
    candidate.dev == mount.dev
        && candidate.root == mount.root
        && mount.peer_group().is_some()
        && candidate.peer_group() == mount.peer_group()
}

/// The kernel appends " (deleted)" to the path of an unlinked file.
fn strip_deleted(path: &[u8]) -> &[u8] {
    path.strip_suffix(b" (deleted)").unwrap_or(path)
}

fn parse_fdinfo_mnt_id(info: &[u8]) -> Option<u32> {
    let s = std::str::from_utf8(info).ok()?;
    s.lines().find_map(|l| l.strip_prefix("mnt_id:")?.trim().parse().ok())
}

/// One /proc/<pid>/maps line: "addr perms offset maj:min inode path" ->
/// (device, path), for lines that name a file.
fn parse_maps_line(line: &[u8]) -> Option<((u32, u32), &[u8])> {
    let mut rest = line;
    let mut fields: [&[u8]; 5] = [&[]; 5];
    for field in fields.iter_mut() {
        rest = trim_spaces(rest);
        let end = rest.iter().position(|b| *b == b' ').unwrap_or(rest.len());
        *field = &rest[..end];
        rest = &rest[end..];
    }
    let path = trim_spaces(rest);
    if path.first() != Some(&b'/') {
        return None;
    }
    let (major, minor) = std::str::from_utf8(fields[3]).ok()?.split_once(':')?;
    Some(((u32::from_str_radix(major, 16).ok()?, u32::from_str_radix(minor, 16).ok()?), path))
}

fn trim_spaces(b: &[u8]) -> &[u8] {
    let start = b.iter().position(|c| *c != b' ').unwrap_or(b.len());
    &b[start..]
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identify::process::parse_stat;
    use crate::inspect::mounts::mount_at;
    use crate::inspect::real_node::processes::parse_ns_link;
    use crate::inspect::real_node::tests::{b, fake_proc, WAIT};
    use crate::inspect::NodeInspector;
    use crate::node_access::Node;
    use crate::test_support::{is_root, TempDir};
    use podstuck_tests::{poll_until, Process, TmpfsMount};
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    use std::path::Path;
    use std::process::Command;

    fn host_mount_at(node: &mut RealNode, at: &Path) -> Mount {
        let mounts = node.host_mounts().unwrap();
        mount_at(&mounts, b(at)).cloned().expect("the test mount in the host table")
    }

    fn sleep_binary() -> &'static str {
        if Path::new("/usr/bin/sleep").exists() {
            "/usr/bin/sleep"
        } else {
            "/bin/sleep"
        }
    }

    #[test]
    fn a_process_whose_cwd_is_on_the_mount_holds_it() {
        if !is_root() {
            return;
        }
        let tmp = TempDir::new("cwd");
        let mnt = tmp.0.join("mnt");
        let _tmpfs = TmpfsMount::new(&mnt, "size=1m");
        let dir = mnt.join("work dir");
        fs::create_dir(&dir).unwrap();
        let kid = Process::spawn(Command::new("sleep").arg("30").current_dir(&dir));

        let mut node = RealNode::new(Node::direct());
        let mount = host_mount_at(&mut node, &mnt);
        let holders = poll_until("the child as a cwd holder", WAIT, || {
            let found = node.mount_holders(&mount, 0);
            found.iter().any(|h| h.pid == kid.pid() && h.how == HoldKind::Cwd).then_some(found)
        });
        let mine: Vec<&MountHolder> = holders.iter().filter(|h| h.pid == kid.pid()).collect();
        assert_eq!(mine.len(), 1, "only its cwd is on the mount: {mine:?}");
        assert_eq!(mine[0].path, b(&dir));
        assert_eq!(mine[0].comm, "sleep");
        assert!(!mine[0].other_namespace);
        assert_eq!(Some(mine[0].mntns), node.own_mntns());
        assert!(holders.iter().all(|h| h.pid != std::process::id()), "podstuck never reports itself");
    }

    #[test]
    fn open_and_mapped_files_on_the_mount_hold_it() {
        if !is_root() {
            return;
        }
        let tmp = TempDir::new("open");
        let mnt = tmp.0.join("mnt");
        let _tmpfs = TmpfsMount::new(&mnt, "size=8m");
        let file = mnt.join("held");
        fs::write(&file, b"x").unwrap();
        let exe = mnt.join("sleep-copy");
        fs::copy(sleep_binary(), &exe).unwrap();

        let opener =
            Process::spawn(Command::new("sh").args(["-c", "exec 3<\"$0\"; exec sleep 30"]).arg(&file).current_dir("/"));
        let mapper = Process::spawn(Command::new(&exe).arg("30").current_dir("/"));

        let mut node = RealNode::new(Node::direct());
        let mount = host_mount_at(&mut node, &mnt);
        let holders = poll_until("an open-file and a mapped-file holder", WAIT, || {
            let found = node.mount_holders(&mount, 0);
            // Until the opener's `exec sleep`, it holds the file as `sh`.
            let open = found.iter().any(|h| h.pid == opener.pid() && h.how == HoldKind::OpenFile && h.comm == "sleep");
            let mapped = found.iter().any(|h| h.pid == mapper.pid() && h.how == HoldKind::MappedFile);
            (open && mapped).then_some(found)
        });
        let open = holders.iter().find(|h| h.pid == opener.pid() && h.how == HoldKind::OpenFile).unwrap();
        assert_eq!(open.path, b(&file));
        assert_eq!(open.comm, "sleep");
        assert!(!holders.iter().any(|h| h.pid == opener.pid() && h.how != HoldKind::OpenFile));
        let mapped = holders.iter().find(|h| h.pid == mapper.pid() && h.how == HoldKind::MappedFile).unwrap();
        assert_eq!(mapped.path, b(&exe));
    }

    #[test]
    fn a_holder_in_another_mount_namespace_and_the_copy_it_lives_with() {
        if !is_root() {
            return;
        }
        let tmp = TempDir::new("otherns");
        let mnt = tmp.0.join("mnt");
        let _tmpfs = TmpfsMount::new(&mnt, "size=1m");
        let dir = mnt.join("d");
        fs::create_dir(&dir).unwrap();
        let kid = Process::spawn(
            Command::new("unshare")
                .args(["-m", "--propagation", "slave", "sh", "-c", "cd \"$0\" && exec sleep 30"])
                .arg(&dir)
                .current_dir("/"),
        );

        let mut node = RealNode::new(Node::direct());
        let own = node.own_mntns().expect("podstuck's own mount namespace");
        let mount = host_mount_at(&mut node, &mnt);
        let holder = poll_until("the child as a holder in its own namespace", WAIT, || {
            node.mount_holders(&mount, 0)
                .into_iter()
                .find(|h| h.pid == kid.pid() && h.how == HoldKind::Cwd && h.comm == "sleep")
        });
        assert!(holder.other_namespace);
        assert_ne!(holder.mntns, own);
        assert_eq!(holder.path, b(&dir));

        let copies = node.mount_copies(&mount, 0);
        let copy = copies.iter().find(|c| c.mntns == holder.mntns).expect("the child's namespace holds a copy");
        assert_eq!(copy.mount_point, b(&mnt));
        assert_eq!(node.mntns_of(copy.pid), Some(holder.mntns));
        assert!(!copy.comm.is_empty());
        assert!(copies.iter().all(|c| c.mntns != own));
    }

    #[test]
    fn holders_and_copies_from_a_fake_proc() {
        let tmp = TempDir::new("fakeproc");
        fake_proc(&tmp.0);
        let mut node = RealNode::with_proc_root(Node::direct(), tmp.0.clone());
        let mount = mount_at(&node.host_mounts().unwrap(), b"/vol").cloned().unwrap();
        let holders = node.mount_holders(&mount, 0);
        let seen: Vec<(u32, HoldKind, &[u8], bool, u64)> =
            holders.iter().map(|h| (h.pid, h.how, h.path.as_slice(), h.other_namespace, h.mntns)).collect();
        assert_eq!(
            seen,
            vec![
                (100, HoldKind::Cwd, &b"/vol/dir"[..], false, 1000),
                (100, HoldKind::OpenFile, &b"/vol/file"[..], false, 1000),
                (100, HoldKind::MappedFile, &b"/vol/lib.so (deleted)"[..], false, 1000),
                (200, HoldKind::Cwd, &b"/vol/x"[..], true, 2000),
            ]
        );
        assert_eq!(holders[0].comm, "holder");
        assert_eq!(
            node.mount_copies(&mount, 0),
            vec![MountCopy {
                mntns: 2000,
                pid: 200,
                start: None,
                comm: "other".into(),
                mount_point: b"/vol".to_vec(),
                propagation: vec!["master:5".into()],
                owner: None
            }]
        );
    }

    #[test]
    fn podstucks_own_container_holds_nothing() {
        let tmp = TempDir::new("fakeproc-own");
        fake_proc(&tmp.0);
        // podstuck runs in the container of pid 200, whose copy of /vol is its own.
        let mut node = RealNode::with_proc_root(Node::direct(), tmp.0.clone()).with_podstuck_namespace(2000);
        let mount = mount_at(&node.host_mounts().unwrap(), b"/vol").cloned().unwrap();
        let holders: Vec<u32> = node.mount_holders(&mount, 0).iter().map(|h| h.pid).collect();
        assert_eq!(holders, [100, 100, 100]);
        assert_eq!(node.mount_copies(&mount, 0), []);
        // Another container's copy is still named.
        let mut node = RealNode::with_proc_root(Node::direct(), tmp.0.clone()).with_podstuck_namespace(3000);
        assert!(node.mount_holders(&mount, 0).iter().any(|h| h.pid == 200 && h.other_namespace));
        assert_eq!(node.mount_copies(&mount, 0).len(), 1);
    }

    /// Why mount holders are found without `procfs` (docs/building.md):
    /// its `maps` reader refuses the whole file for one mapped file whose
    /// name is not UTF-8, and its `fd` reader passes each link through
    /// `to_string_lossy`, so such a file is named with U+FFFD instead of
    /// its bytes (and it reads no `fdinfo`, whose `mnt_id` tells which
    /// mount an fd is on). A workload chooses those names; podstuck's
    /// readers keep the bytes.
    #[test]
    fn procfs_refuses_a_hostile_maps_and_renames_a_hostile_fd_where_podstuck_keeps_the_bytes() {
        use procfs::FromBufRead;
        let line = &b"7f00-7f01 r--s 00000000 fd:01 33   /vol/x\xff"[..];
        let maps = [line, b"\n"].concat();
        assert!(procfs::process::MemoryMaps::from_buf_read(&maps[..]).is_err(), "procfs refuses the whole maps");
        assert_eq!(parse_maps_line(line), Some(((0xfd, 1), &b"/vol/x\xff"[..])));

        let tmp = TempDir::new("procfs-fd");
        let dir = tmp.0.join("4242");
        fs::create_dir_all(dir.join("fd")).unwrap();
        std::os::unix::fs::symlink(OsStr::from_bytes(b"/vol/x\xff"), dir.join("fd/3")).unwrap();
        let process = procfs::process::Process::new_with_root(dir.clone()).unwrap();
        let theirs: Vec<_> = process.fd().unwrap().map(|fd| fd.unwrap().target).collect();
        match &theirs[..] {
            [procfs::process::FDTarget::Path(named)] => {
                assert_eq!(named.as_os_str().as_bytes(), "/vol/x\u{fffd}".as_bytes())
            }
            other => panic!("{other:?}"),
        }
        assert_eq!(read_link(&dir.join("fd/3")).unwrap(), b"/vol/x\xff");
    }

    #[test]
    fn deleted_paths_and_maps_lines() {
        assert_eq!(strip_deleted(b"/a/b (deleted)"), b"/a/b");
        assert_eq!(
            parse_maps_line(b"7f00-7f01 r-xp 00000000 fd:01 33   /usr/lib/x y.so"),
            Some(((0xfd, 1), &b"/usr/lib/x y.so"[..]))
        );
        assert_eq!(parse_maps_line(b"7f00-7f01 rw-p 00000000 00:00 0"), None);
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 1024, failure_persistence: None, ..Default::default() })]

        /// The /proc parsers on any bytes: an answer or none, never a panic.
        #[test]
        fn proc_parsers_take_any_bytes(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..300)) {
            let _ = parse_stat(&bytes);
            let _ = parse_maps_line(&bytes);
            let _ = parse_fdinfo_mnt_id(&bytes);
            let _ = parse_ns_link(&bytes);
        }

        /// A task's comm holds what its process chose, ')' and spaces too.
        #[test]
        fn stat_reads_any_comm(comm in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..16), pid in 1u32.., state in "[RSDZTtXIP]") {
            let mut stat = format!("{pid} (").into_bytes();
            stat.extend_from_slice(&comm);
            stat.extend_from_slice(format!(") {state} 1 2 3 4 0 -1 4194560").as_bytes());
            let read = parse_stat(&stat).expect("a stat line");
            proptest::prop_assert_eq!(read.comm, crate::words::safe_text(&comm));
            proptest::prop_assert_eq!(read.state.to_string(), state);
            proptest::prop_assert_eq!(read.ppid, Some(1));
        }

        /// Map lines as the kernel writes them, any file name in them.
        #[test]
        fn maps_lines_give_device_and_path(
            (start, end, offset, major, minor, inode) in (proptest::prelude::any::<u64>(), proptest::prelude::any::<u64>(), proptest::prelude::any::<u64>(), 0u32..4096, 0u32..1 << 20, proptest::prelude::any::<u64>()),
            perms in "[r-][w-][x-][ps]",
            pad in 1usize..30,
            name in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..60),
        ) {
            let mut line = format!("{start:x}-{end:x} {perms} {offset:08x} {major:02x}:{minor:02x} {inode}{}", " ".repeat(pad)).into_bytes();
            let mut path = b"/".to_vec();
            path.extend_from_slice(&name);
            line.extend_from_slice(&path);
            proptest::prop_assert_eq!(parse_maps_line(&line), Some(((major, minor), &path[..])));
        }

        #[test]
        fn fdinfo_and_namespace_links_give_their_numbers(id in proptest::prelude::any::<u32>(), ns in proptest::prelude::any::<u64>(), before in "([a-z_]{1,8}:\t[0-9]{1,8}\n){0,4}") {
            let info = format!("{before}mnt_id:\t{id}\nino:\t12\n");
            proptest::prop_assert_eq!(parse_fdinfo_mnt_id(info.as_bytes()), Some(id));
            proptest::prop_assert_eq!(parse_ns_link(format!("mnt:[{ns}]").as_bytes()), Some(ns));
            proptest::prop_assert_eq!(parse_ns_link(format!("net:[{ns}]").as_bytes()), None);
        }
    }
}
