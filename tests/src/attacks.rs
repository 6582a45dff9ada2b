//! What another user on the node does to a root process that writes files:
//! plants links where it will write, as `nobody` or as root, and watches
//! which names it makes. Used by `tests/safe_files.rs`.

use std::ffi::OsStr;
use std::io::Write;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{ChildStdin, Command, ExitStatus, Output, Stdio};

use serde_json::Value;

use crate::podstuck::{parse_json, podstuck_binary, Exited, Running};

/// The unprivileged user the attacks run as.
pub const NOBODY: u32 = 65534;

/// `program args...` run as `nobody` (uid and gid 65534, no supplementary
/// groups): `setpriv` from util-linux, else `runuser`.
pub fn as_nobody(program: &str, args: &[&OsStr]) -> Output {
    let setpriv = ["/usr/bin/setpriv", "/bin/setpriv"].into_iter().find(|p| Path::new(p).exists());
    let mut command = match setpriv {
        Some(setpriv) => {
            let mut c = Command::new(setpriv);
            c.args(["--reuid", &NOBODY.to_string(), "--regid", &NOBODY.to_string(), "--clear-groups", "--"])
                .arg(program);
            c
        }
        None => {
            let mut c = Command::new("runuser");
            c.args(["-u", "nobody", "--", program]);
            c
        }
    };
    command.args(args).output().unwrap_or_else(|e| panic!("run {program} as nobody: {e}"))
}

/// `ln -s target link`, as `nobody`: the attack itself.
pub fn plant_link_as_nobody(target: &Path, link: &Path) {
    let out = as_nobody("ln", &[OsStr::new("-s"), target.as_os_str(), link.as_os_str()]);
    assert!(
        out.status.success(),
        "nobody could not plant {}: {}",
        link.display(),
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(std::fs::symlink_metadata(link).unwrap().uid(), NOBODY);
}

/// `ln -s target link`, as this process (root): what a planted link would
/// be if the directory let anyone plant one.
pub fn plant_link(target: &Path, link: &Path) {
    std::os::unix::fs::symlink(target, link).unwrap_or_else(|e| panic!("plant {}: {e}", link.display()));
}

/// A file of the test's own that a planted link points to: it must come
/// out of the test byte for byte as it went in, same inode, same mode.
pub struct Victim {
    pub path: PathBuf,
    bytes: Vec<u8>,
    ino: u64,
    mode: u32,
}

impl Victim {
    pub fn new(dir: &Path, name: &str) -> Victim {
        let path = dir.join(name);
        let mut bytes = format!("{name}: root's own file, which podstuck must never write\n").into_bytes();
        bytes.extend((0..=255u8).cycle().take(3000));
        std::fs::write(&path, &bytes).unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        Victim { path, bytes, ino: meta.ino(), mode: meta.mode() }
    }

    pub fn assert_intact(&self) {
        let meta =
            std::fs::symlink_metadata(&self.path).unwrap_or_else(|e| panic!("{} is gone: {e}", self.path.display()));
        assert!(meta.file_type().is_file(), "{} is no longer a file", self.path.display());
        assert_eq!(
            (meta.ino(), meta.mode()),
            (self.ino, self.mode),
            "{} was replaced or its mode changed",
            self.path.display()
        );
        let now = std::fs::read(&self.path).unwrap();
        assert!(
            now == self.bytes,
            "{} was written: {} bytes now, {} before",
            self.path.display(),
            now.len(),
            self.bytes.len()
        );
    }
}

/// A file's mode bits (permissions, setuid, setgid, sticky), the link
/// itself for a link.
pub fn mode_of(path: &Path) -> u32 {
    std::fs::symlink_metadata(path).unwrap_or_else(|e| panic!("{}: {e}", path.display())).mode() & 0o7777
}

/// The names in a directory, sorted.
pub fn names_in(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("{}: {e}", dir.display()))
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

/// The names made in a directory (created, linked or renamed there), as
/// inotify tells them: which temporary names a writer really used.
pub struct MadeNames {
    fd: OwnedFd,
}

impl MadeNames {
    pub fn watch(dir: &Path) -> MadeNames {
        // SAFETY: plain syscalls; the descriptor is owned at once.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        assert!(fd >= 0, "inotify_init1: {}", std::io::Error::last_os_error());
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let path = std::ffi::CString::new(dir.as_os_str().as_bytes()).unwrap();
        // SAFETY: a valid descriptor and C string.
        let wd = unsafe { libc::inotify_add_watch(fd.as_raw_fd(), path.as_ptr(), libc::IN_CREATE | libc::IN_MOVED_TO) };
        assert!(wd >= 0, "inotify_add_watch {}: {}", dir.display(), std::io::Error::last_os_error());
        MadeNames { fd }
    }

    /// Every name made since the last call, in order.
    pub fn take(&self) -> Vec<String> {
        let mut names = Vec::new();
        let mut buf = vec![0u8; 64 * 1024];
        loop {
            // SAFETY: reading into a buffer we own, of its size.
            let n = unsafe { libc::read(self.fd.as_raw_fd(), buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                return names;
            }
            let mut at = 0usize;
            while at + 16 <= n as usize {
                let len = u32::from_ne_bytes(buf[at + 12..at + 16].try_into().unwrap()) as usize;
                let name = &buf[at + 16..at + 16 + len];
                let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
                if !name.is_empty() {
                    names.push(String::from_utf8_lossy(name).into_owned());
                }
                at += 16 + len;
            }
        }
    }
}

/// A `podstuck watch --json --concurrent` started but held before it runs:
/// its pid is known before it creates anything, as an attacker who guessed
/// it would know it (a shell that `exec`s podstuck once released).
pub struct Held {
    podstuck: Running,
    go: Option<ChildStdin>,
}

/// What a stopped podstuck printed.
pub struct Stopped {
    pub status: ExitStatus,
    pub json: Vec<Value>,
    /// The `end` line, when it was printed last.
    pub end: Option<Value>,
    pub stderr: String,
}

impl Held {
    pub fn spawn(args: &[&str]) -> Held {
        let mut podstuck = Running::spawn(
            Command::new("sh")
                .arg("-c")
                .arg("read go && exec \"$0\" \"$@\"")
                .arg(podstuck_binary())
                .args(["watch", "--json", "--concurrent"])
                .args(args)
                .stdin(Stdio::piped()),
        );
        let go = podstuck.child.stdin.take();
        Held { podstuck, go }
    }

    /// The pid podstuck will run as.
    pub fn pid(&self) -> u32 {
        self.podstuck.pid()
    }

    /// Lets podstuck run and waits for its start line (attached).
    pub fn release(&mut self) -> Value {
        let mut go = self.go.take().expect("released once");
        go.write_all(b"go\n").unwrap();
        drop(go);
        let start = self.podstuck.await_start();
        assert_eq!(start["pid"], self.pid(), "podstuck runs as the pid planted for");
        start
    }

    /// What podstuck said on stderr so far.
    pub fn stderr_so_far(&self) -> String {
        self.podstuck.stderr()
    }

    /// Sends `signal`, waits for the exit and collects what was printed.
    pub fn stop(mut self, signal: i32) -> Stopped {
        let Exited { status, lines, stderr, .. } = self.podstuck.stop(signal);
        let json = parse_json(&lines);
        let end = json.last().filter(|v| v["type"] == "end").cloned();
        Stopped { status, json, end, stderr }
    }
}
