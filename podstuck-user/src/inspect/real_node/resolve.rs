//! A path as another process sees it: resolved inside that process's root
//! (`/proc/<pid>/root`), so a container's symlinks lead where they lead
//! for the container, never into podstuck's own root. On a reader with a
//! deadline: a lookup walks through every mount on the way.

use std::collections::VecDeque;
use std::ffi::OsStr;
use std::fs;
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::Path;

use crate::inspect::{Probe, Unreadable};

use super::{unreadable, RealNode};

impl RealNode {
    /// `path` as process `pid` reaches it, links followed inside its root.
    pub(super) fn resolve_for(&mut self, pid: u32, path: &[u8]) -> Probe<Vec<u8>> {
        // A short-lived caller (kubelet's umount child) may be gone: its
        // root was the host's, which is podstuck's own.
        let proc_root = self.proc_file(pid, "root");
        let root = if proc_root.exists() { proc_root } else { self.node.path("/") };
        let wait = self.deadline;
        // The path is the caller's, under its own root: never the node's
        // path that on_worker reaches under --host-root.
        let in_caller_root = path.to_vec();
        self.on_worker(path, wait, move |_| resolve_in_root(&root, &in_caller_root))
    }
}

/// Symlinks followed in one resolution before it is called a loop, as the kernel does.
const MAX_SYMLINKS: u32 = 40;

/// `path` resolved component by component under `root` (a process's
/// `/proc/<pid>/root`): each component is looked up as a link below the
/// already resolved part, so an absolute link target restarts at that
/// root, never at podstuck's own. The part from the first component that
/// does not exist on is kept as written.
fn resolve_in_root(root: &Path, path: &[u8]) -> Probe<Vec<u8>> {
    let mut done: Vec<u8> = Vec::new();
    let mut todo: VecDeque<Vec<u8>> = path.split(|b| *b == b'/').map(<[u8]>::to_vec).collect();
    let mut links = 0;
    while let Some(part) = todo.pop_front() {
        match part.as_slice() {
            b"" | b"." => continue,
            b".." => {
                let cut = done.iter().rposition(|b| *b == b'/').unwrap_or(0);
                done.truncate(cut);
                continue;
            }
            _ => {}
        }
        let mut candidate = done.clone();
        candidate.push(b'/');
        candidate.extend_from_slice(&part);
        match fs::read_link(root.join(OsStr::from_bytes(&candidate[1..]))) {
            Ok(target) => {
                links += 1;
                if links > MAX_SYMLINKS {
                    return Err(Unreadable("too many levels of symbolic links".into()));
                }
                let target = target.into_os_string().into_vec();
                if target.first() == Some(&b'/') {
                    done.clear();
                }
                for piece in target.split(|b| *b == b'/').rev() {
                    todo.push_front(piece.to_vec());
                }
            }
            // Not a link: a directory or file, keep it as it is.
            Err(e) if e.raw_os_error() == Some(libc::EINVAL) => done = candidate,
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
                done = candidate;
                for rest in todo.drain(..).filter(|p| !p.is_empty()) {
                    done.push(b'/');
                    done.extend_from_slice(&rest);
                }
            }
            Err(e) => return Err(unreadable(e)),
        }
    }
    if done.is_empty() {
        done.push(b'/');
    }
    Ok(done)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::TempDir;

    #[test]
    fn paths_resolve_through_symlinks_inside_the_given_root() {
        let tmp = TempDir::new("resolve");
        let root = tmp.0.clone();
        fs::create_dir_all(root.join("run/docker/task")).unwrap();
        std::os::unix::fs::symlink("/run", root.join("var-run")).unwrap();
        std::os::unix::fs::symlink("../run/docker", root.join("run/up")).unwrap();
        std::os::unix::fs::symlink("loop2", root.join("loop1")).unwrap();
        std::os::unix::fs::symlink("loop1", root.join("loop2")).unwrap();
        // An absolute target restarts at the given root, not at /.
        assert_eq!(resolve_in_root(&root, b"/var-run/docker/task/rootfs").unwrap(), b"/run/docker/task/rootfs");
        assert_eq!(resolve_in_root(&root, b"/run/up/task").unwrap(), b"/run/docker/task");
        assert_eq!(resolve_in_root(&root, b"/run/./docker/../docker//task/").unwrap(), b"/run/docker/task");
        assert_eq!(resolve_in_root(&root, b"/").unwrap(), b"/");
        assert!(resolve_in_root(&root, b"/loop1/x").unwrap_err().0.contains("symbolic links"));
    }
}
