//! Opening a path below a root so that nothing a workload controls can
//! redirect it. A pod's volume is the workload's: between podstuck's look
//! and its open, any directory on the way may become a symbolic link to
//! `/dev`, and root opening `/dev/watchdog` or a tape device has effects of
//! its own. So no symbolic link is followed anywhere on the way (a link as
//! the last component is opened as the link itself, for `lstat`), nor a
//! `/proc` magic link, nor a `..` above the root; and nothing but a regular
//! file or a directory is ever opened for reading: everything else is
//! looked at through an `O_PATH` descriptor, which opens no device.
//!
//! `openat2(2)` with `RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS |
//! RESOLVE_BENEATH` does it in one call where the kernel has it (5.6+);
//! before, the path is walked one component at a time, each opened
//! `O_PATH | O_NOFOLLOW` below the one before and checked with `fstat`.
//! openat2 is called through `syscall(2)`: the C library a release binary
//! is linked with (an old glibc, musl) may have no wrapper for it.
//!
//! What is resolved here is a string a detector was given; following a
//! path's links on purpose (as a caller's kernel did) is `resolve`'s job,
//! which reads links and opens none.

use std::ffi::CString;
use std::fs::File;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::atomic::{AtomicU8, Ordering};

/// openat2's number: one for every architecture, as for every system call
/// added since Linux 5.1 (asm-generic and x86 alike).
const SYS_OPENAT2: libc::c_long = 437;
// include/uapi/linux/openat2.h
const RESOLVE_NO_MAGICLINKS: u64 = 0x02;
const RESOLVE_NO_SYMLINKS: u64 = 0x04;
const RESOLVE_BENEATH: u64 = 0x08;

/// `struct open_how` of include/uapi/linux/openat2.h.
#[repr(C)]
struct OpenHow {
    flags: u64,
    mode: u64,
    resolve: u64,
}

/// Whether this kernel has openat2: unknown, yes, no.
static OPENAT2: AtomicU8 = AtomicU8::new(UNKNOWN);
const UNKNOWN: u8 = 0;
const HAS: u8 = 1;
const HAS_NOT: u8 = 2;

/// How a path is opened: in one call where the kernel can, else a
/// component at a time. Tests pick the walk to test it on any kernel.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Resolver {
    Openat2,
    Walk,
}

impl Resolver {
    /// openat2 where the kernel has it (found at its first use).
    pub(super) fn best() -> Resolver {
        match OPENAT2.load(Ordering::Relaxed) {
            HAS_NOT => Resolver::Walk,
            _ => Resolver::Openat2,
        }
    }
}

/// The directory every path is opened below, and how.
pub(super) struct Beneath {
    root: OwnedFd,
    resolver: Resolver,
}

impl Beneath {
    /// Paths below `root` (the node's `/`, `--host-root`, or a process's
    /// `/proc/<pid>/root`, each followed: they are podstuck's to choose).
    pub(super) fn new(root: &Path, resolver: Resolver) -> io::Result<Beneath> {
        let root = open_plain(root, libc::O_PATH | libc::O_DIRECTORY)?;
        Ok(Beneath { root, resolver })
    }

    /// The root itself, an `O_PATH` descriptor.
    pub(super) fn root(&self) -> &OwnedFd {
        &self.root
    }

    /// `path` (absolute below the root, or relative to it) as an `O_PATH`
    /// descriptor: for `fstat`, `fstatfs`, and a reopen of what it turns
    /// out to be. A symbolic link as the last component is the link itself.
    pub(super) fn path(&self, path: &[u8]) -> io::Result<OwnedFd> {
        self.open(path, libc::O_PATH | libc::O_NOFOLLOW)
    }

    /// The directory at `path`, open for reading its entries. Never a
    /// symbolic link, never anything but a directory.
    pub(super) fn dir(&self, path: &[u8]) -> io::Result<OwnedFd> {
        self.open(path, libc::O_RDONLY | libc::O_DIRECTORY | libc::O_NOFOLLOW | libc::O_NONBLOCK)
    }

    fn open(&self, path: &[u8], flags: i32) -> io::Result<OwnedFd> {
        let rel = relative(path)?;
        if self.resolver == Resolver::Openat2 {
            match openat2(&self.root, &rel, flags) {
                Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {}
                done => return done,
            }
        }
        walk(&self.root, &rel, flags)
    }
}

/// `path` without its leading slashes, as a C string ("." for the root).
fn relative(path: &[u8]) -> io::Result<CString> {
    let start = path.iter().position(|b| *b != b'/').unwrap_or(path.len());
    let rel = if start == path.len() { b"." } else { &path[start..] };
    CString::new(rel).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))
}

/// A plain open of a path podstuck chose itself.
fn open_plain(path: &Path, flags: i32) -> io::Result<OwnedFd> {
    let c = CString::new(path.as_os_str().as_bytes()).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a valid C string; the descriptor returned is owned here.
    let fd = unsafe { libc::open(c.as_ptr(), flags | libc::O_CLOEXEC) };
    owned(fd)
}

fn owned(fd: libc::c_int) -> io::Result<OwnedFd> {
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned, owned by no one else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// openat2 below `dir`, nothing followed; ENOSYS where the kernel has none.
fn openat2(dir: &OwnedFd, rel: &CString, flags: i32) -> io::Result<OwnedFd> {
    if OPENAT2.load(Ordering::Relaxed) == HAS_NOT {
        return Err(io::Error::from_raw_os_error(libc::ENOSYS));
    }
    let how = OpenHow {
        flags: (flags | libc::O_CLOEXEC) as u64,
        mode: 0,
        resolve: RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_BENEATH,
    };
    // A rename anywhere on the node while `..` is resolved makes the
    // kernel answer EAGAIN rather than risk a wrong answer: try again.
    for _ in 0..16 {
        // SAFETY: a valid descriptor, C string and open_how, with its size.
        let fd = unsafe {
            libc::syscall(SYS_OPENAT2, dir.as_raw_fd(), rel.as_ptr(), &how as *const OpenHow, size_of::<OpenHow>())
        };
        match owned(fd as libc::c_int) {
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) => continue,
            Err(e) if e.raw_os_error() == Some(libc::ENOSYS) => {
                OPENAT2.store(HAS_NOT, Ordering::Relaxed);
                return Err(e);
            }
            done => {
                OPENAT2.store(HAS, Ordering::Relaxed);
                return done;
            }
        }
    }
    Err(io::Error::from_raw_os_error(libc::EAGAIN))
}

/// The walk of kernels without openat2: each component opened `O_PATH |
/// O_NOFOLLOW` below the last (so the kernel follows nothing), a link
/// refused (ELOOP) unless it is the last component and `flags` ask for
/// the link itself, `..` never above the root (EXDEV, as RESOLVE_BENEATH).
fn walk(root: &OwnedFd, rel: &CString, flags: i32) -> io::Result<OwnedFd> {
    let parts: Vec<&[u8]> = rel.as_bytes().split(|b| *b == b'/').filter(|p| !p.is_empty() && *p != b".").collect();
    let mut stack: Vec<OwnedFd> = Vec::new();
    let step = |at: &OwnedFd, name: &[u8], flags: i32| -> io::Result<OwnedFd> {
        let name = CString::new(name).map_err(|_| io::Error::from_raw_os_error(libc::EINVAL))?;
        // SAFETY: a valid descriptor and C string.
        owned(unsafe { libc::openat(at.as_raw_fd(), name.as_ptr(), flags | libc::O_CLOEXEC) })
    };
    let Some((last, on_the_way)) = parts.split_last() else {
        // The root itself.
        return step(root, b".", flags & !libc::O_NOFOLLOW);
    };
    for part in on_the_way {
        if *part == b".." {
            if stack.pop().is_none() {
                return Err(io::Error::from_raw_os_error(libc::EXDEV));
            }
            continue;
        }
        let at = stack.last().unwrap_or(root);
        let next = step(at, part, libc::O_PATH | libc::O_NOFOLLOW)?;
        let kind = fstat(&next)?.st_mode & libc::S_IFMT;
        match kind {
            libc::S_IFDIR => stack.push(next),
            libc::S_IFLNK => return Err(io::Error::from_raw_os_error(libc::ELOOP)),
            _ => return Err(io::Error::from_raw_os_error(libc::ENOTDIR)),
        }
    }
    if *last == b".." {
        if stack.pop().is_none() {
            return Err(io::Error::from_raw_os_error(libc::EXDEV));
        }
        return step(stack.last().unwrap_or(root), b".", flags & !libc::O_NOFOLLOW);
    }
    let at = stack.last().unwrap_or(root);
    // O_NOFOLLOW is in every flags this module opens with: the last
    // component is never followed either (O_PATH: the link itself; any
    // other open of a link: ELOOP).
    step(at, last, flags | libc::O_NOFOLLOW)
}

/// fstat of a descriptor, `O_PATH` ones included.
pub(super) fn fstat(fd: &OwnedFd) -> io::Result<libc::stat> {
    // SAFETY: stat is plain data; the kernel fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and a stat buffer of the right size.
    if unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(st)
}

/// What an `O_PATH` descriptor names, opened for reading: only a regular
/// file or a directory (a device, FIFO or socket is never opened), and
/// the very inode the descriptor names, through `/proc/self/fd` (whatever
/// the path names by now). `O_NONBLOCK`: nothing waits for a writer.
pub(super) fn reopen(fd: &OwnedFd) -> io::Result<File> {
    let st = fstat(fd)?;
    let kind = st.st_mode & libc::S_IFMT;
    if kind != libc::S_IFREG && kind != libc::S_IFDIR {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, NotOpened(kind_words(kind))));
    }
    let link = format!("/proc/self/fd/{}", fd.as_raw_fd());
    let reopened = open_plain(Path::new(&link), libc::O_RDONLY | libc::O_NONBLOCK)?;
    // The same inode, or nothing: a /proc that is not this process's
    // (a test's, a container's odd mount) must not hand another file.
    let again = fstat(&reopened)?;
    if (again.st_dev, again.st_ino) != (st.st_dev, st.st_ino) {
        return Err(io::Error::from_raw_os_error(libc::ESTALE));
    }
    Ok(File::from(reopened))
}

/// Why `reopen` refused: the kind of file it is.
#[derive(Debug)]
pub(super) struct NotOpened(pub &'static str);

impl std::fmt::Display for NotOpened {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "a {} is never opened by podstuck (only regular files and directories)", self.0)
    }
}

impl std::error::Error for NotOpened {}

/// A file kind by its `S_IFMT` bits, in words.
pub(super) fn kind_words(kind: libc::mode_t) -> &'static str {
    match kind {
        libc::S_IFREG => "regular file",
        libc::S_IFDIR => "directory",
        libc::S_IFLNK => "symbolic link",
        libc::S_IFCHR => "character device",
        libc::S_IFBLK => "block device",
        libc::S_IFIFO => "FIFO",
        libc::S_IFSOCK => "socket",
        _ => "file of unknown kind",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::TempDir;
    use std::fs;
    use std::os::unix::fs::symlink;

    fn both(test: impl Fn(Resolver)) {
        test(Resolver::Openat2);
        test(Resolver::Walk);
    }

    fn errno<T: std::fmt::Debug>(r: io::Result<T>) -> i32 {
        r.unwrap_err().raw_os_error().unwrap_or(-1)
    }

    #[test]
    fn nothing_on_the_way_is_followed_and_nothing_leaves_the_root() {
        let tmp = TempDir::new("beneath");
        fs::create_dir_all(tmp.0.join("vol/dir")).unwrap();
        fs::write(tmp.0.join("vol/dir/file"), b"x").unwrap();
        symlink("/dev", tmp.0.join("vol/swapped")).unwrap();
        symlink("dir", tmp.0.join("vol/relative")).unwrap();
        both(|resolver| {
            let b = Beneath::new(&tmp.0, resolver).unwrap();
            let file = b.path(b"/vol/dir/file").unwrap();
            assert_eq!(fstat(&file).unwrap().st_mode & libc::S_IFMT, libc::S_IFREG, "{resolver:?}");
            let mut text = String::new();
            io::Read::read_to_string(&mut reopen(&file).unwrap(), &mut text).unwrap();
            assert_eq!(text, "x");
            // A link on the way, to /dev or next door: refused.
            assert_eq!(errno(b.path(b"/vol/swapped/null")), libc::ELOOP, "{resolver:?}");
            assert_eq!(errno(b.path(b"/vol/relative/file")), libc::ELOOP, "{resolver:?}");
            // The link itself as a directory: ELOOP or ENOTDIR, as the kernel words it.
            assert!(matches!(errno(b.dir(b"/vol/swapped")), libc::ELOOP | libc::ENOTDIR), "{resolver:?}");
            // A link as the last component, for lstat: the link itself.
            let link = b.path(b"/vol/swapped").unwrap();
            assert_eq!(fstat(&link).unwrap().st_mode & libc::S_IFMT, libc::S_IFLNK, "{resolver:?}");
            assert!(reopen(&link).is_err());
            // `..` within the root is fine; above it, refused.
            assert!(b.dir(b"/vol/dir/../dir").is_ok(), "{resolver:?}");
            assert_eq!(errno(b.path(b"/../etc")), libc::EXDEV, "{resolver:?}");
            assert!(b.dir(b"/").is_ok());
            assert_eq!(errno(b.dir(b"/vol/dir/file")), libc::ENOTDIR, "{resolver:?}");
            assert_eq!(errno(b.path(b"/vol/none/x")), libc::ENOENT, "{resolver:?}");
        });
    }

    #[test]
    fn a_device_is_never_opened_for_reading() {
        let b = Beneath::new(Path::new("/"), Resolver::best()).unwrap();
        let null = b.path(b"/dev/null").unwrap();
        let refused = reopen(&null).unwrap_err();
        assert!(refused.to_string().contains("character device"), "{refused}");
    }
}
