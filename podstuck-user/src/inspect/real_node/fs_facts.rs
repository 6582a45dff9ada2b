//! Facts of a file or filesystem on the node: inode flags (`chattr +i`,
//! `+a`), lstat, a sample of a directory, an estimate of the entries left
//! in a tree, and statfs. Each runs on a reader with a deadline
//! ([`super::deadline`]): any of them sleeps forever on a hung mount. Each
//! opens its path below the node's root following no link on the way
//! ([`super::beneath`]), looks at it through an `O_PATH` descriptor, and
//! opens for reading only a regular file or a directory: a pod's volume is
//! the workload's, and it may swap a directory for a link to `/dev` at any
//! moment.

use std::ffi::OsStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::time::{Duration, Instant};

use nix::dir::Dir;
use nix::fcntl::OFlag;
use nix::sys::stat::Mode;
use nix::sys::statfs::{self, FsType};

use crate::inspect::mounts::mount_containing;
use crate::inspect::{DirSample, EntryEstimate, FileFacts, FsUsage, InodeFlags, Probe, Unreadable};
use crate::words::{exact_duration, io_words as words};

use super::beneath::{fstat, kind_words, reopen, Beneath};
use super::deadline::Root;
use super::{unreadable, RealNode};

/// Past this many entries a directory is "huge" and counting more says nothing new.
const DIR_COUNT_CAP: u64 = 10_000_000;
/// Work allowed to a tree count; a removal storm's tree may be enormous.
/// Sampled (`WALK_DIRS_PER_LEVEL`), a tree of rows of thousands of
/// directories takes a few ms; the bounds are for trees that are not.
const WALK_BUDGET: Duration = Duration::from_millis(200);
const WALK_ENTRY_CAP: u64 = 1_000_000;
/// Directories a tree count lists per level before it samples the level.
const WALK_DIRS_PER_LEVEL: usize = 32;

// The inode flags FS_IOC_GETFLAGS reads (include/uapi/linux/fs.h): libc
// exports the ioctl but not its flags, and nix neither.
const FS_IMMUTABLE_FL: u32 = 0x10;
const FS_APPEND_FL: u32 = 0x20;

impl RealNode {
    /// How many entries are left below `path`, counted or estimated within
    /// `within_ms` (0: [`WALK_BUDGET`]).
    pub(super) fn entries_below(&mut self, root: Root, path: &[u8], within_ms: u32) -> Probe<EntryEstimate> {
        let budget = match within_ms {
            0 => WALK_BUDGET,
            ms => Duration::from_millis(ms.into()).min(WALK_BUDGET),
        };
        // The walk has its own budget; the deadline is for a call that never returns.
        let wait = budget + self.deadline;
        self.on_worker(root, path, wait, move |b, p| count_tree(b, p, budget, WALK_ENTRY_CAP))
    }

    /// statfs of the filesystem `path` is on, named as mountinfo names it.
    pub(super) fn usage_of(&mut self, root: Root, path: &[u8]) -> Probe<FsUsage> {
        let wait = self.deadline;
        let (mut usage, dev) = self.on_worker(root, path, wait, read_fs_usage)?;
        // mountinfo knows the exact name ("ext4", "nfs4", "fuse.sshfs")
        // where the magic number only knows a family: the table of the
        // namespace the path was read in.
        let table = match root {
            Root::Member(pid) => self.table_of(pid).map_err(unreadable),
            _ => self.host_table().map_err(unreadable),
        };
        if let Ok(mounts) = table {
            if let Some(m) = mount_containing(&mounts, path).filter(|m| m.dev == dev) {
                usage.fstype = m.fstype.clone();
            }
        }
        Ok(usage)
    }
}

/// The file at `path`, looked at without opening it.
fn looked_at(beneath: &Beneath, path: &[u8]) -> Probe<(OwnedFd, libc::stat)> {
    let fd = beneath.path(path).map_err(unreadable)?;
    let st = fstat(&fd).map_err(unreadable)?;
    Ok((fd, st))
}

pub(super) fn inode_flags(beneath: &Beneath, path: &[u8]) -> Probe<InodeFlags> {
    let (fd, st) = looked_at(beneath, path)?;
    let kind = st.st_mode & libc::S_IFMT;
    if kind != libc::S_IFREG && kind != libc::S_IFDIR {
        return Err(Unreadable::Other(format!(
            "a {} has no inode flags podstuck reads (only regular files and directories)",
            kind_words(kind)
        )));
    }
    // The very inode looked at, whatever the path names by now.
    let file = reopen(&fd).map_err(unreadable)?;
    // The ioctl is declared with a long but the kernel writes an int; a
    // long-sized buffer stays safe either way, and the int is its first bytes.
    let mut buf: u64 = 0;
    // SAFETY: FS_IOC_GETFLAGS writes at most sizeof(long) bytes into buf.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut buf as *mut u64) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::ENOTTY) | Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) => {
                Unreadable::Other(format!("this filesystem keeps no inode flags ({})", words(&e)))
            }
            _ => unreadable(e),
        });
    }
    let bytes = buf.to_ne_bytes();
    let raw = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    Ok(InodeFlags { immutable: raw & FS_IMMUTABLE_FL != 0, append_only: raw & FS_APPEND_FL != 0, raw })
}

/// lstat of `path`: never the target of a link.
#[allow(clippy::unnecessary_cast, reason = "st_nlink is u64 on x86_64 but u32 on arm64")]
pub(super) fn lstat(beneath: &Beneath, path: &[u8]) -> Probe<FileFacts> {
    let (_, st) = looked_at(beneath, path)?;
    Ok(FileFacts {
        mode: st.st_mode,
        uid: st.st_uid,
        gid: st.st_gid,
        nlink: st.st_nlink as u64,
        size: st.st_size as u64,
        is_dir: st.st_mode & libc::S_IFMT == libc::S_IFDIR,
        sticky: st.st_mode & libc::S_ISVTX != 0,
        dev: (libc::major(st.st_dev), libc::minor(st.st_dev)),
    })
}

/// A directory open for listing, from a descriptor it owns.
fn listing(fd: OwnedFd) -> Probe<Dir> {
    Dir::from_fd(fd).map_err(|e| unreadable(e.into()))
}

/// The names in a listing, "." and ".." left out; an error mid-way ends it.
fn names(dir: &mut Dir) -> impl Iterator<Item = (Vec<u8>, Option<nix::dir::Type>)> + '_ {
    dir.iter().map_while(Result::ok).filter_map(|e| {
        let name = e.file_name().to_bytes();
        (name != b"." && name != b"..").then(|| (name.to_vec(), e.file_type()))
    })
}

/// The first `limit` names in the directory `path`, and how many it holds.
pub(super) fn sample_dir(beneath: &Beneath, path: &[u8], limit: usize) -> Probe<DirSample> {
    let mut dir = listing(beneath.dir(path).map_err(unreadable)?)?;
    let mut sample = DirSample { names: Vec::new(), counted: 0, complete: true };
    for (name, _) in names(&mut dir) {
        if sample.counted >= DIR_COUNT_CAP {
            sample.complete = false;
            break;
        }
        sample.counted += 1;
        if sample.names.len() < limit {
            sample.names.push(name);
        }
    }
    Ok(sample)
}

/// A directory below `at` by its name, opened for listing: never a link,
/// never anything but a directory.
fn subdir(at: &impl AsFd, name: &[u8]) -> Option<OwnedFd> {
    let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC;
    nix::fcntl::openat(at, OsStr::from_bytes(name), flags, Mode::empty()).ok()
}

/// Whether `name` in the directory open as `dir` is a directory (not a
/// link to one).
fn is_dir_at(dir: std::os::fd::RawFd, name: &[u8]) -> bool {
    let Ok(name) = std::ffi::CString::new(name) else { return false };
    // SAFETY: stat is plain data; the kernel fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: an open directory, a C string and a stat buffer.
    let rc = unsafe { libc::fstatat(dir, name.as_ptr(), &mut st, libc::AT_SYMLINK_NOFOLLOW) };
    rc == 0 && st.st_mode & libc::S_IFMT == libc::S_IFDIR
}

/// Counts entries below `root` without following symlinks or leaving its
/// filesystem, level by level, each directory opened below the one that
/// lists it. The tree is often being deleted while counted, so entries
/// that vanish are skipped. A level of more than [`WALK_DIRS_PER_LEVEL`]
/// directories is sampled: evenly spaced ones are listed, each standing
/// for its share of the level, so a storm's tree of millions of
/// directories costs a few thousand listings per check, not millions of
/// them. Cut by `budget` or `cap`, what was found so far is a lower bound.
fn count_tree(beneath: &Beneath, root: &[u8], budget: Duration, cap: u64) -> Probe<EntryEstimate> {
    let start = Instant::now();
    let (fd, st) = looked_at(beneath, root)?;
    if st.st_mode & libc::S_IFMT != libc::S_IFDIR {
        return Err(Unreadable::Other("not a directory".into()));
    }
    let dev = st.st_dev;
    let top = beneath.dir(root).map_err(unreadable)?;
    drop(fd);
    let mut listed: u64 = 0;
    // Each entry listed counts for the directories its own stands for.
    let mut entries = 0.0f64;
    let mut sampled = false;
    let mut cut_by: Option<&str> = None;
    let mut level: Vec<(OwnedFd, f64)> = vec![(top, 1.0)];
    'walk: while !level.is_empty() {
        let mut below: Vec<(OwnedFd, f64)> = Vec::new();
        // Directories found at this level, opened only once sampled.
        let mut found: Vec<(usize, Vec<u8>, f64)> = Vec::new();
        let mut parents: Vec<Dir> = Vec::new();
        for (fd, weight) in level {
            if start.elapsed() >= budget {
                cut_by = Some("time");
                break 'walk;
            }
            let Ok(mut dir) = listing(fd) else { continue };
            let parent = parents.len();
            let raw = dir.as_raw_fd();
            for (name, kind) in names(&mut dir) {
                listed += 1;
                entries += weight;
                if listed >= cap {
                    cut_by = Some("cap");
                    break 'walk;
                }
                if listed & 0xff == 0 && start.elapsed() >= budget {
                    cut_by = Some("time");
                    break 'walk;
                }
                // A filesystem that keeps no type in its entries: lstat.
                let is_dir = match kind {
                    Some(kind) => kind == nix::dir::Type::Directory,
                    None => is_dir_at(raw, &name),
                };
                if is_dir {
                    found.push((parent, name, weight));
                }
            }
            parents.push(dir);
        }
        let many = found.len();
        if many > WALK_DIRS_PER_LEVEL {
            sampled = true;
            let scale = many as f64 / WALK_DIRS_PER_LEVEL as f64;
            found = (0..WALK_DIRS_PER_LEVEL)
                .map(|i| found[i * many / WALK_DIRS_PER_LEVEL].clone())
                .map(|(p, n, w)| (p, n, w * scale))
                .collect();
        }
        for (parent, name, weight) in found {
            // Opened, not looked up by path: a mount point shows the
            // mounted filesystem's device, and is left out.
            let Some(sub) = subdir(&parents[parent], &name) else { continue };
            if fstat(&sub).is_ok_and(|s| s.st_dev == dev) {
                below.push((sub, weight));
            }
        }
        level = below;
    }
    let entries = entries.round() as u64;
    let method = match (cut_by, sampled) {
        (None, false) => "counted".to_string(),
        (None, true) => format!(
            "count of {listed} entries in evenly spaced directories of the tree (at most {WALK_DIRS_PER_LEVEL} a level), scaled up"
        ),
        (Some("time"), _) => format!("the count stopped after {}", exact_duration(budget)),
        (Some(_), _) => format!("the count stopped at {cap}"),
    };
    Ok(EntryEstimate { entries, at_least: cut_by.is_some(), method })
}

/// statfs and statvfs of `path`, and its device so the caller can name
/// the filesystem from the mount table: through an `O_PATH` descriptor.
fn read_fs_usage(beneath: &Beneath, path: &[u8]) -> Probe<(FsUsage, (u32, u32))> {
    let (fd, st) = looked_at(beneath, path)?;
    let fs_info = statfs::fstatfs(&fd).map_err(|e| unreadable(e.into()))?;
    let vfs = nix::sys::statvfs::fstatvfs(&fd).map_err(|e| unreadable(e.into()))?;
    let dev = (libc::major(st.st_dev), libc::minor(st.st_dev));
    // Block counts are in fragment units; f_frsize equals f_bsize on nearly
    // every filesystem, and is the right unit where it does not.
    let unit = if vfs.fragment_size() != 0 { vfs.fragment_size() } else { vfs.block_size() };
    let usage = FsUsage {
        fstype: fstype_name(fs_info.filesystem_type()),
        total_bytes: vfs.blocks() * unit,
        free_bytes: vfs.blocks_available() * unit,
        total_inodes: vfs.files(),
        free_inodes: vfs.files_free(),
        read_only: vfs.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY),
    };
    Ok((usage, dev))
}

/// Filesystems by their statfs magic number, as the kernel's
/// include/uapi/linux/magic.h names them. ext2, ext3 and ext4 share one.
const FILESYSTEMS: [(FsType, &str); 21] = [
    (statfs::TMPFS_MAGIC, "tmpfs"),
    (statfs::EXT4_SUPER_MAGIC, "ext2/3/4"),
    (XFS_SUPER_MAGIC, "xfs"),
    (statfs::BTRFS_SUPER_MAGIC, "btrfs"),
    (statfs::OVERLAYFS_SUPER_MAGIC, "overlay"),
    (statfs::NFS_SUPER_MAGIC, "nfs"),
    (statfs::FUSE_SUPER_MAGIC, "fuse"),
    (statfs::CGROUP2_SUPER_MAGIC, "cgroup2"),
    (statfs::CGROUP_SUPER_MAGIC, "cgroup"),
    (statfs::PROC_SUPER_MAGIC, "proc"),
    (statfs::SYSFS_MAGIC, "sysfs"),
    (SQUASHFS_MAGIC, "squashfs"),
    (ZFS_SUPER_MAGIC, "zfs"),
    (CEPH_SUPER_MAGIC, "ceph"),
    (statfs::NSFS_MAGIC, "nsfs"),
    (statfs::DEVPTS_SUPER_MAGIC, "devpts"),
    (statfs::BPF_FS_MAGIC, "bpf"),
    (statfs::TRACEFS_MAGIC, "tracefs"),
    (statfs::DEBUGFS_MAGIC, "debugfs"),
    (CIFS_SUPER_MAGIC, "cifs"),
    (SMB2_SUPER_MAGIC, "smb2"),
];

// The magic numbers nix does not export, with the kernel's (or, for ZFS,
// OpenZFS's) value: nix leaves XFS out on musl, and has no squashfs, ZFS,
// Ceph, CIFS or SMB2 at all.
const XFS_SUPER_MAGIC: FsType = magic(0x5846_5342);
const SQUASHFS_MAGIC: FsType = magic(0x7371_7368);
const ZFS_SUPER_MAGIC: FsType = magic(0x2FC1_2FC1);
const CEPH_SUPER_MAGIC: FsType = magic(0x00C3_6400);
const CIFS_SUPER_MAGIC: FsType = magic(0xFF53_4D42);
const SMB2_SUPER_MAGIC: FsType = magic(0xFE53_4D42);

/// A magic number as statfs's `f_type` holds it, a signed or unsigned
/// word by C library and word size: the kernel's 32 bits, widened without
/// a sign (as nix's own constants are).
const fn magic(number: u32) -> FsType {
    FsType(number as _)
}

/// The family name of filesystem type `magic`, or the number itself.
fn fstype_name(magic: FsType) -> String {
    match FILESYSTEMS.iter().find(|(known, _)| *known == magic) {
        Some((_, name)) => name.to_string(),
        None => format!("{:#x}", magic.0 as u32),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::real_node::beneath::Resolver;
    use crate::inspect::real_node::tests::b;
    use crate::inspect::NodeInspector;
    use crate::node_access::Node;
    use crate::test_support::{is_root, missing, this_test, TempDir};
    use podstuck_tests::{Chattr, TmpfsMount};
    use std::fs;
    use std::os::unix::fs::MetadataExt;
    use std::process::Command;

    #[test]
    fn inode_flags_show_chattr_i_and_a() {
        if !is_root() {
            return;
        }
        let tmp = TempDir::new("flags");
        let plain = tmp.0.join("plain");
        let locked = tmp.0.join("locked");
        let appended = tmp.0.join("appended");
        for f in [&plain, &locked, &appended] {
            fs::write(f, b"x").unwrap();
        }
        let (Some(_unlock), Some(_unappend)) = (Chattr::set(&locked, 'i'), Chattr::set(&appended, 'a')) else {
            return missing(
                &this_test(),
                &format!("chattr +i and +a on {} (its filesystem refuses inode flags)", tmp.0.display()),
                "set TMPDIR to a directory on ext4, xfs, btrfs or a tmpfs of Linux 6.0+",
            );
        };

        let mut node = RealNode::new(Node::direct());
        let flags = node.inode_flags(b(&locked), 0).unwrap();
        assert!(flags.immutable && !flags.append_only, "{flags:?}");
        assert_ne!(flags.raw & FS_IMMUTABLE_FL, 0);
        let flags = node.inode_flags(b(&appended), 0).unwrap();
        assert!(flags.append_only && !flags.immutable, "{flags:?}");
        let flags = node.inode_flags(b(&plain), 0).unwrap();
        assert!(!flags.immutable && !flags.append_only, "{flags:?}");
        assert!(node.inode_flags(b(&tmp.0), 0).is_ok(), "directories have flags too");

        let link = tmp.0.join("link");
        std::os::unix::fs::symlink(&locked, &link).unwrap();
        let err = node.inode_flags(b(&link), 0).unwrap_err();
        assert!(err.why().contains("symbolic link"), "{err}");
        let fifo = tmp.0.join("fifo");
        assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let err = node.inode_flags(b(&fifo), 0).unwrap_err();
        assert!(err.why().contains("FIFO"), "{err}");
        assert_eq!(node.inode_flags(b(&tmp.0.join("missing")), 0).unwrap_err().why(), "no such file or directory");
    }

    #[test]
    fn file_facts_are_lstat() {
        if !is_root() {
            return;
        }
        let tmp = TempDir::new("facts");
        let dir = tmp.0.join("sticky");
        fs::create_dir(&dir).unwrap();
        fs::set_permissions(&dir, std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
        let file = dir.join("f");
        fs::write(&file, b"hello").unwrap();
        let mut node = RealNode::new(Node::direct());
        let facts = node.file_facts(b(&dir), 0).unwrap();
        assert!(facts.is_dir && facts.sticky, "{facts:?}");
        let facts = node.file_facts(b(&file), 0).unwrap();
        assert!(!facts.is_dir && !facts.sticky);
        assert_eq!((facts.size, facts.nlink, facts.uid), (5, 1, 0));
        let meta = fs::metadata(&file).unwrap();
        assert_eq!(facts.dev, (libc::major(meta.dev()), libc::minor(meta.dev())));
    }

    #[test]
    fn fs_usage_of_a_small_tmpfs() {
        if !is_root() {
            return;
        }
        let tmp = TempDir::new("usage");
        let mnt = tmp.0.join("mnt");
        let _tmpfs = TmpfsMount::new(&mnt, "size=1m,nr_inodes=100");
        let ro = tmp.0.join("ro");
        let _ro = TmpfsMount::read_only(&ro, "size=1m");
        fs::write(mnt.join("f"), vec![0u8; 64 * 1024]).unwrap();

        let mut node = RealNode::new(Node::direct());
        let usage = node.fs_usage(b(&mnt), 0).unwrap();
        assert_eq!(usage.fstype, "tmpfs");
        assert_eq!(usage.total_bytes, 1 << 20);
        assert!(usage.free_bytes <= usage.total_bytes - 64 * 1024, "{usage:?}");
        assert_eq!(usage.total_inodes, 100);
        assert!(usage.free_inodes < 100);
        assert!(!usage.read_only);
        assert!(node.fs_usage(b(&ro), 0).unwrap().read_only);
        assert_eq!(node.fs_usage(b(&tmp.0.join("missing")), 0).unwrap_err().why(), "no such file or directory");
    }

    #[test]
    fn directory_sample_and_tree_count_stay_on_one_filesystem() {
        if !is_root() {
            return;
        }
        let tmp = TempDir::new("count");
        let mnt = tmp.0.join("mnt");
        let _tmpfs = TmpfsMount::new(&mnt, "size=1m");
        let tree = mnt.join("tree");
        fs::create_dir_all(tree.join("a/b")).unwrap();
        for i in 0..10 {
            fs::write(tree.join(format!("f{i}")), b"").unwrap();
        }
        for i in 0..5 {
            fs::write(tree.join(format!("a/a{i}")), b"").unwrap();
        }
        for i in 0..2 {
            fs::write(tree.join(format!("a/b/b{i}")), b"").unwrap();
        }
        std::os::unix::fs::symlink("/", tree.join("link")).unwrap();
        let sub = tree.join("sub");
        let _sub = TmpfsMount::new(&sub, "size=1m");
        for i in 0..3 {
            fs::write(sub.join(format!("s{i}")), b"").unwrap();
        }

        let mut node = RealNode::new(Node::direct());
        let sample = node.dir_sample(b(&tree), 3, 0).unwrap();
        assert_eq!(sample.names.len(), 3);
        // f0..f9, a, link, sub
        assert_eq!(sample.counted, 13);
        assert!(sample.complete);
        assert!(sample.names.iter().all(|n| n != b"." && n != b".."));

        // top 13 + a's 5 files and b + b's 2 files; nothing under sub or link.
        let estimate = node.remaining_entries(b(&tree), 0, 0).unwrap();
        assert_eq!(estimate, EntryEstimate { entries: 21, at_least: false, method: "counted".into() });

        let beneath = Beneath::new(std::path::Path::new("/"), Resolver::best()).unwrap();
        let capped = count_tree(&beneath, b(&tree), WALK_BUDGET, 5).unwrap();
        assert!(capped.at_least && capped.entries == 5, "{capped:?}");
        let timed = count_tree(&beneath, b(&tree), Duration::ZERO, WALK_ENTRY_CAP).unwrap();
        assert!(timed.at_least && timed.method.contains("the count stopped after"), "{timed:?}");

        assert_eq!(node.remaining_entries(b(&tree.join("f0")), 0, 0).unwrap_err().why(), "not a directory");
        assert_eq!(node.dir_sample(b(&tree.join("gone")), 3, 0).unwrap_err().why(), "no such file or directory");
    }

    #[test]
    fn a_tree_of_many_directories_is_sampled_a_level_at_a_time() {
        let tmp = TempDir::new("sampled");
        let tree = tmp.0.join("tree");
        // Rows of directories, as a leaked volume's: 100 rows of 40.
        for row in 0..100 {
            for i in 0..40 {
                fs::create_dir_all(tree.join(format!("r{row}/{i}"))).unwrap();
            }
        }
        let beneath = Beneath::new(std::path::Path::new("/"), Resolver::best()).unwrap();
        let estimate = count_tree(&beneath, b(&tree), WALK_BUDGET, WALK_ENTRY_CAP).unwrap();
        // Even rows: the sample stands for the whole, exactly.
        assert_eq!(estimate.entries, 100 + 100 * 40, "{estimate:?}");
        assert!(!estimate.at_least && estimate.method.contains("scaled up"), "{estimate:?}");
    }

    #[test]
    fn filesystem_names_from_their_magic_numbers() {
        assert_eq!(fstype_name(statfs::EXT4_SUPER_MAGIC), "ext2/3/4");
        assert_eq!(fstype_name(statfs::EXT2_SUPER_MAGIC), "ext2/3/4");
        assert_eq!(fstype_name(magic(0x1234)), "0x1234");
        // Past 0x7fffffff: still a positive word.
        assert_eq!(fstype_name(magic(0xFF53_4D42)), "cifs");
        assert_eq!(fstype_name(magic(0xCAFE_4A12)), "0xcafe4a12");
    }
}
