//! A path as another process sees it: resolved inside that process's root
//! (`/proc/<pid>/root`), so a container's symlinks lead where they lead
//! for the container, never into podstuck's own root. On a reader with a
//! deadline: a lookup walks through every mount on the way, and the root
//! itself is looked at there too (a process's root may be on a hung
//! filesystem). Links are read, one component at a time below a
//! descriptor of the part already resolved, and the kernel is never let
//! follow one: an absolute target restarts at the process's root.

use std::collections::VecDeque;
use std::ffi::{CString, OsStr};
use std::os::fd::{AsRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;

use crate::inspect::{Probe, Unreadable};

use super::beneath::{fstat, Beneath};
use super::deadline::Root;
use super::RealNode;

impl RealNode {
    /// `path` as process `pid` reaches it, links followed inside its root
    /// (the node's, when the process is gone: a short-lived caller's
    /// root, kubelet's umount child's, was the host's).
    pub(super) fn resolve_for(&mut self, pid: u32, path: &[u8]) -> Probe<Vec<u8>> {
        let wait = self.deadline;
        let root = if pid == 0 { Root::Node } else { Root::Process(pid) };
        self.on_worker(root, path, wait, resolve_in_root)
    }
}

/// Symlinks followed in one resolution before it is called a loop, as the kernel does.
const MAX_SYMLINKS: u32 = 40;

/// `path` resolved component by component below `beneath`'s root: each
/// component's link read below the descriptor of the part resolved so
/// far, so an absolute link target restarts at that root, never at
/// podstuck's own, and no lookup the kernel makes follows a link. The
/// part from the first component that does not exist on is kept as
/// written.
fn resolve_in_root(beneath: &Beneath, path: &[u8]) -> Probe<Vec<u8>> {
    resolve_with(beneath, path, open_at)
}

/// [`resolve_in_root`], each directory opened by `open`. podstuck must
/// not hold what it diagnoses: a descriptor of a mount's root, even an
/// `O_PATH` one, makes the mount busy, and kubelet's unmount of a volume
/// it is resolving fails with EBUSY (seen in the soak, once in thousands
/// of pods). So the last component, a volume's mountpoint in kubelet's
/// calls, is never opened (its link is read, which holds nothing after
/// the call), and only the directory looked up below is held, one at a
/// time, for the microseconds of the next lookup.
fn resolve_with(
    beneath: &Beneath,
    path: &[u8],
    mut open: impl FnMut(&OwnedFd, &[u8]) -> std::io::Result<OwnedFd>,
) -> Probe<Vec<u8>> {
    // The names resolved, and a descriptor of the last (None: the root).
    let mut done: Vec<Vec<u8>> = Vec::new();
    let mut at: Option<OwnedFd> = None;
    let mut todo: VecDeque<Vec<u8>> = path.split(|b| *b == b'/').map(<[u8]>::to_vec).collect();
    let mut links = 0;
    while let Some(part) = todo.pop_front() {
        match part.as_slice() {
            b"" | b"." => continue,
            b".." => {
                done.pop();
                at = None;
                if !done.is_empty() {
                    match open_again(beneath, &done, &mut open) {
                        Some(fd) => at = Some(fd),
                        None => return Ok(joined(&done, todo.into_iter().filter(|p| !p.is_empty()))),
                    }
                }
                continue;
            }
            _ => {}
        }
        let dir = at.as_ref().unwrap_or(beneath.root());
        match readlink_at(dir, &part) {
            Ok(target) => {
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(Unreadable::Other("too many levels of symbolic links".into()));
                }
                if target.first() == Some(&b'/') {
                    done.clear();
                    at = None;
                }
                for piece in target.split(|b| *b == b'/').rev() {
                    todo.push_front(piece.to_vec());
                }
            }
            // Not a link: a directory or file, kept as it is, and what
            // comes next is looked up below it.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => {
                if todo.iter().all(|p| matches!(p.as_slice(), b"" | b".")) {
                    done.push(part);
                    break;
                }
                match open(dir, &part) {
                    Ok(fd) => {
                        done.push(part);
                        at = Some(fd);
                    }
                    Err(_) => return Ok(kept_as_written(&done, part, todo)),
                }
            }
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
                return Ok(kept_as_written(&done, part, todo));
            }
            Err(e) => return Err(Unreadable::io(&e)),
        }
    }
    Ok(joined(&done, std::iter::empty()))
}

/// A descriptor of `done` (names already resolved, none a link), opened
/// again from the root one name at a time after a `..`; None when one of
/// them has changed since.
fn open_again(
    beneath: &Beneath,
    done: &[Vec<u8>],
    open: &mut impl FnMut(&OwnedFd, &[u8]) -> std::io::Result<OwnedFd>,
) -> Option<OwnedFd> {
    let mut at: Option<OwnedFd> = None;
    for name in done {
        let fd = open(at.as_ref().unwrap_or(beneath.root()), name).ok()?;
        at = Some(fd);
    }
    at
}

/// The names resolved, then `part` and what is left as written.
fn kept_as_written(done: &[Vec<u8>], part: Vec<u8>, todo: VecDeque<Vec<u8>>) -> Vec<u8> {
    joined(done, std::iter::once(part).chain(todo.into_iter().filter(|p| !p.is_empty())))
}

fn joined(done: &[Vec<u8>], rest: impl Iterator<Item = Vec<u8>>) -> Vec<u8> {
    let mut out = Vec::new();
    for name in done.iter().cloned().chain(rest) {
        out.push(b'/');
        out.extend_from_slice(&name);
    }
    if out.is_empty() {
        out.push(b'/');
    }
    out
}

/// The target of link `name` below `at`; EINVAL when it is no link.
fn readlink_at(at: &OwnedFd, name: &[u8]) -> std::io::Result<Vec<u8>> {
    nix::fcntl::readlinkat(at, OsStr::from_bytes(name)).map(|t| t.as_bytes().to_vec()).map_err(std::io::Error::from)
}

/// `name` below `at`, as an `O_PATH` descriptor of the thing itself: a
/// component swapped for a link since it was read is opened as the link,
/// and nothing can be looked up below it (the rest is kept as written).
fn open_at(at: &OwnedFd, name: &[u8]) -> std::io::Result<OwnedFd> {
    let c = CString::new(name).map_err(|_| std::io::Error::from_raw_os_error(libc::EINVAL))?;
    // SAFETY: a valid descriptor and C string; the descriptor returned is owned here.
    let fd = unsafe { libc::openat(at.as_raw_fd(), c.as_ptr(), libc::O_PATH | libc::O_NOFOLLOW | libc::O_CLOEXEC) };
    if fd < 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: a descriptor the kernel just returned.
    let fd = unsafe { <OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd) };
    match fstat(&fd)?.st_mode & libc::S_IFMT {
        libc::S_IFLNK => Err(std::io::Error::from_raw_os_error(libc::ENOTDIR)),
        _ => Ok(fd),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::real_node::beneath::Resolver;
    use crate::test_support::TempDir;
    use std::fs;

    #[test]
    fn paths_resolve_through_symlinks_inside_the_given_root() {
        let tmp = TempDir::new("resolve");
        let root = tmp.0.clone();
        fs::create_dir_all(root.join("run/docker/task")).unwrap();
        std::os::unix::fs::symlink("/run", root.join("var-run")).unwrap();
        std::os::unix::fs::symlink("../run/docker", root.join("run/up")).unwrap();
        std::os::unix::fs::symlink("loop2", root.join("loop1")).unwrap();
        std::os::unix::fs::symlink("loop1", root.join("loop2")).unwrap();
        let beneath = Beneath::new(&root, Resolver::best()).unwrap();
        // An absolute target restarts at the given root, not at /.
        assert_eq!(resolve_in_root(&beneath, b"/var-run/docker/task/rootfs").unwrap(), b"/run/docker/task/rootfs");
        assert_eq!(resolve_in_root(&beneath, b"/run/up/task").unwrap(), b"/run/docker/task");
        assert_eq!(resolve_in_root(&beneath, b"/run/./docker/../docker//task/").unwrap(), b"/run/docker/task");
        assert_eq!(resolve_in_root(&beneath, b"/").unwrap(), b"/");
        assert_eq!(resolve_in_root(&beneath, b"/../../run").unwrap(), b"/run");
        assert!(resolve_in_root(&beneath, b"/loop1/x").unwrap_err().why().contains("symbolic links"));
    }

    #[test]
    fn the_last_component_is_never_opened_and_one_directory_is_held_at_a_time() {
        let tmp = TempDir::new("resolve-held");
        let root = tmp.0.clone();
        fs::create_dir_all(root.join("pods/u/volumes/cache/sub")).unwrap();
        std::os::unix::fs::symlink("pods/u/volumes", root.join("vols")).unwrap();
        let beneath = Beneath::new(&root, Resolver::best()).unwrap();
        let opened = std::cell::RefCell::new(Vec::new());
        let open = |at: &OwnedFd, name: &[u8]| {
            opened.borrow_mut().push(String::from_utf8_lossy(name).into_owned());
            open_at(at, name)
        };
        // kubelet's rmdir of a volume's mountpoint: its parents are looked
        // up below, the mountpoint itself is never opened.
        assert_eq!(resolve_with(&beneath, b"/vols/cache/", open).unwrap(), b"/pods/u/volumes/cache");
        assert_eq!(*opened.borrow(), ["pods", "u", "volumes"]);
        opened.borrow_mut().clear();
        // A `..` opens the parent again from the root, one name at a time.
        assert_eq!(
            resolve_with(&beneath, b"/pods/u/volumes/cache/sub/../sub", open).unwrap(),
            b"/pods/u/volumes/cache/sub"
        );
        assert_eq!(*opened.borrow(), ["pods", "u", "volumes", "cache", "sub", "pods", "u", "volumes", "cache"]);
        // Open descriptors: the test's own, none left by the resolutions.
        let fds = || fs::read_dir("/proc/self/fd").unwrap().count();
        let before = fds();
        resolve_in_root(&beneath, b"/vols/cache/sub").unwrap();
        assert_eq!(fds(), before);
    }
}
