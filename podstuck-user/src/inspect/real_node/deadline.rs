//! The reader with a deadline: every call that touches a path on the
//! node runs in a `podstuck-read` process of its own, and the caller waits
//! for its answer no longer than a deadline. Past that the reader is left
//! to end when the kernel lets it, and the mount it was on is avoided from
//! then on (a path lookup through a hung NFS or FUSE mount hangs too).
//!
//! Why a process and not a thread is said in the [`super`] module's doc.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::inspect::mounts::{is_at_or_below, mount_containing};
use crate::inspect::{Mount, Probe, Unreadable};
use crate::words::{exact_duration, io_words as words};

use super::{path_of, RealNode};

/// How long a caller waits for one path-touching call by default.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(1);
/// How many readers may be stuck in the kernel at once before podstuck stops
/// starting new ones: each is a process left until its filesystem answers.
pub const DEFAULT_MAX_STUCK_WORKERS: usize = 8;

const HUNG_MOUNT: &str = "not touched: an earlier read on this filesystem did not return";

/// What a read refused while podstuck stops says.
pub const NOT_READ_STOPPING: &str = "not read: podstuck is stopping";

/// A mount podstuck stays away from because a call on it did not return.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct AvoidedMount {
    /// None when the mount table could not be read: then the path itself
    /// is what is avoided.
    id: Option<u32>,
    mount_point: Vec<u8>,
}

/// A reader the caller gave up on, not ended yet.
#[derive(Debug)]
pub(super) struct StuckReader {
    pid: Pid,
    /// The node path it was reading.
    path: Vec<u8>,
}

impl RealNode {
    /// return (for the report: these facts are missing, and why).
    pub fn avoided_mount_points(&self) -> Vec<Vec<u8>> {
        self.avoided.iter().map(|a| a.mount_point.clone()).collect()
    }

    /// podstuck is stopping: every read must be over by `by`. Reads wait
    /// no later than that, and none starts after it.
    pub fn stopping(&mut self, by: Instant) {
        self.stop_by = Some(by);
    }

    /// Readers still in the kernel on a path that did not answer (for the
    /// last words: what podstuck leaves behind, and where).
    pub fn readers_left(&mut self) -> Vec<(u32, Vec<u8>)> {
        self.reap();
        self.stuck.iter().map(|r| (r.pid.as_raw() as u32, r.path.clone())).collect()
    }

    /// Runs `op` on `path` in a reader process, waiting the usual deadline.
    pub(super) fn within_deadline<T: Serialize + DeserializeOwned>(
        &mut self,
        path: &[u8],
        op: impl FnOnce(PathBuf) -> Probe<T>,
    ) -> Probe<T> {
        let wait = self.deadline;
        self.on_worker(path, wait, op)
    }

    /// Runs `op` on `path` in a reader process of its own and waits at most
    /// `wait` for its answer. Past that the reader is left to end when its
    /// call returns (or with podstuck), and the mount is avoided.
    pub(super) fn on_worker<T: Serialize + DeserializeOwned>(
        &mut self,
        path: &[u8],
        wait: Duration,
        op: impl FnOnce(PathBuf) -> Probe<T>,
    ) -> Probe<T> {
        if self.is_avoided(path) {
            return Err(Unreadable(HUNG_MOUNT.into()));
        }
        let wait = match self.stop_by {
            None => wait,
            Some(by) => match by.checked_duration_since(Instant::now()).filter(|left| !left.is_zero()) {
                Some(left) => wait.min(left),
                None => return Err(Unreadable(NOT_READ_STOPPING.into())),
            },
        };
        self.reap();
        let stuck = self.stuck.len();
        if stuck >= self.max_stuck_workers {
            return Err(Unreadable(format!(
                "not touched: too many earlier reads ({stuck}) are still hung; podstuck starts no more until one returns"
            )));
        }
        // Node paths, reached from where podstuck runs (under --host-root in a container).
        let target = self.node.path(path_of(path));
        let (answer, written) = io::pipe().map_err(|e| Unreadable(format!("cannot start a reader: {}", words(&e))))?;
        // SAFETY: the child only reads (the op), writes its answer to the
        // pipe and leaves with _exit, closing podstuck's files first: it
        // touches no lock another thread may have held at the fork but the
        // allocator's, which glibc and musl make whole again in the child.
        match unsafe { fork() } {
            Ok(ForkResult::Child) => reader(OwnedFd::from(written), move || op(target)),
            Ok(ForkResult::Parent { child }) => {
                drop(written);
                match answer_within(OwnedFd::from(answer), wait) {
                    Some(bytes) => {
                        // It has closed its end: it is exiting, or gone.
                        let _ = waitpid(child, None);
                        serde_json::from_slice(&bytes)
                            .unwrap_or_else(|_| Err(Unreadable("the reader ended without an answer".into())))
                    }
                    None => {
                        self.stuck.push(StuckReader { pid: child, path: path.to_vec() });
                        self.avoid_mount_of(path);
                        Err(Unreadable(format!("timed out after {}: the filesystem may be hung", exact_duration(wait))))
                    }
                }
            }
            Err(e) => Err(Unreadable(format!("cannot start a reader: {}", words(&io::Error::from(e))))),
        }
    }

    /// Forgets the stuck readers that have ended.
    fn reap(&mut self) {
        self.stuck.retain(|r| matches!(waitpid(r.pid, Some(WaitPidFlag::WNOHANG)), Ok(WaitStatus::StillAlive)));
    }

    /// Whether reaching `path` means walking through an avoided mount: the
    /// mount it lies on or any mount above it (a path lookup crosses them
    /// all, and a lookup on a dead NFS mount hangs too).
    fn is_avoided(&self, path: &[u8]) -> bool {
        if self.avoided.is_empty() {
            return false;
        }
        let by_path = |a: &AvoidedMount| a.id.is_none() && is_at_or_below(path, &a.mount_point);
        if self.avoided.iter().any(by_path) {
            return true;
        }
        let Ok(mounts) = self.host_table() else {
            return self.avoided.iter().any(|a| is_at_or_below(path, &a.mount_point));
        };
        let by_id: HashMap<u32, &Mount> = mounts.iter().map(|m| (m.id, m)).collect();
        let mut next = mount_containing(&mounts, path);
        let mut hops = 0;
        while let Some(m) = next {
            if self.avoided.iter().any(|a| a.id == Some(m.id)) {
                return true;
            }
            hops += 1;
            if m.parent_id == m.id || hops > mounts.len() {
                break;
            }
            next = by_id.get(&m.parent_id).copied();
        }
        false
    }

    /// Stays away from the mount `path` lies on from now on.
    pub(super) fn avoid_mount_of(&mut self, path: &[u8]) {
        let avoided = match self.host_table() {
            Ok(mounts) => match mount_containing(&mounts, path) {
                Some(m) => AvoidedMount { id: Some(m.id), mount_point: m.mount_point.clone() },
                None => AvoidedMount { id: None, mount_point: path.to_vec() },
            },
            Err(_) => AvoidedMount { id: None, mount_point: path.to_vec() },
        };
        if !self.avoided.contains(&avoided) {
            self.avoided.push(avoided);
        }
    }
}

/// The reader process: runs `op`, writes its answer to `out` and exits.
/// It first lets go of every file podstuck holds: a reader stuck in the
/// kernel must keep neither its programs attached nor its output open
/// after podstuck ends. It dies with podstuck, as soon as the kernel lets
/// it, and is named for `ps`.
fn reader<T: Serialize>(out: OwnedFd, op: impl FnOnce() -> Probe<T>) -> ! {
    let keep = out.as_raw_fd();
    close_all_but(keep);
    // SAFETY: prctl and sigaction on this process alone, no memory shared.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        libc::prctl(libc::PR_SET_NAME, c"podstuck-read".as_ptr());
        // podstuck's handlers would write to its event pipe, closed here.
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::signal(signal, libc::SIG_DFL);
        }
    }
    let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(op))
        .unwrap_or_else(|_| Err(Unreadable("the reader failed".into())));
    let bytes = serde_json::to_vec(&answer).unwrap_or_default();
    let mut file = fs::File::from(out);
    let _ = io::Write::write_all(&mut file, &bytes);
    // SAFETY: leaves at once, running none of podstuck's exit handlers.
    unsafe { libc::_exit(0) }
}

/// Closes every file descriptor but `keep`.
fn close_all_but(keep: i32) {
    let range = |first: u32, last: u32| {
        // SAFETY: close_range(2) closes descriptors only.
        unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) == 0 }
    };
    let keep = keep as u32;
    let closed = (keep == 0 || range(0, keep - 1)) && range(keep + 1, u32::MAX);
    if !closed {
        // Kernels before 5.9: those /proc lists.
        let open: Vec<i32> = fs::read_dir("/proc/self/fd")
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|e| e.file_name().to_str()?.parse().ok())
            .collect();
        for fd in open.into_iter().filter(|fd| *fd as u32 != keep) {
            // SAFETY: closes a descriptor of this process alone.
            unsafe { libc::close(fd) };
        }
    }
}

/// Everything the reader wrote to `answer` until it closed it, if that
/// came within `wait`.
fn answer_within(answer: OwnedFd, wait: Duration) -> Option<Vec<u8>> {
    let until = Instant::now() + wait;
    let mut got = Vec::new();
    let mut file = fs::File::from(answer);
    loop {
        let left = until.saturating_duration_since(Instant::now());
        let mut poll = libc::pollfd { fd: file.as_fd().as_raw_fd(), events: libc::POLLIN, revents: 0 };
        let ms = left.as_millis().min(i32::MAX as u128) as i32;
        // SAFETY: one pollfd, valid for the call.
        let ready = unsafe { libc::poll(&mut poll, 1, ms) };
        if ready < 0 {
            if io::Error::last_os_error().kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return None;
        }
        if ready == 0 {
            return None;
        }
        let mut buf = [0u8; 4096];
        match io::Read::read(&mut file, &mut buf) {
            Ok(0) => return Some(got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(_) => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::real_node::tests::b;
    use crate::inspect::NodeInspector;
    use crate::node_access::Node;
    use crate::test_support::{is_root, TempDir};
    use nix::sys::signal::Signal;
    use podstuck_tests::{poll_until, TmpfsMount};
    use std::path::Path;

    const WAIT: Duration = Duration::from_secs(10);

    #[test]
    fn a_call_past_its_deadline_gives_up_and_the_mount_is_avoided() {
        if !is_root() {
            return;
        }
        let tmp = TempDir::new("deadline");
        let mnt = tmp.0.join("mnt");
        let _tmpfs = TmpfsMount::new(&mnt, "size=1m");
        let sub = mnt.join("sub");
        let _sub = TmpfsMount::new(&sub, "size=1m");
        let file = mnt.join("f");
        fs::write(&file, b"x").unwrap();

        let mut node = RealNode::new(Node::direct()).with_deadline(Duration::from_millis(100));
        // The read hangs until the test releases it: the caller's answer
        // comes while it still hangs, however slow the machine.
        let release = Release::new(&tmp);
        let hung: Probe<()> = node.on_worker(b(&file), node.deadline, |_| release.wait());
        assert!(!release.released(), "the caller waited for the hung read");
        assert_eq!(hung.unwrap_err().0, "timed out after 100 ms: the filesystem may be hung");
        release.now();
        assert_eq!(node.avoided_mount_points(), vec![b(&mnt).to_vec()]);

        assert_eq!(node.file_facts(b(&file)).unwrap_err().0, HUNG_MOUNT);
        assert_eq!(node.dir_sample(b(&mnt), 1).unwrap_err().0, HUNG_MOUNT);
        // Reaching the submount walks through the hung one.
        assert_eq!(node.fs_usage(b(&sub)).unwrap_err().0, HUNG_MOUNT);
        assert!(node.file_facts(b(&tmp.0)).is_ok(), "other filesystems are still read");
        assert_eq!(exact_duration(DEFAULT_DEADLINE), "1 s");
    }

    #[test]
    fn avoid_marks_the_mount_of_a_path() {
        if !is_root() {
            return;
        }
        let tmp = TempDir::new("avoid");
        let mnt = tmp.0.join("mnt");
        let _tmpfs = TmpfsMount::new(&mnt, "size=1m");
        fs::write(mnt.join("f"), b"x").unwrap();
        let mut node = RealNode::new(Node::direct());
        assert!(node.file_facts(b(&mnt.join("f"))).is_ok());
        node.avoid(b(&mnt.join("f")));
        node.avoid(b(&mnt.join("f")));
        assert_eq!(node.avoided_mount_points().len(), 1);
        assert_eq!(node.inode_flags(b(&mnt.join("f"))).unwrap_err().0, HUNG_MOUNT);
        assert!(node.file_facts(b(&tmp.0)).is_ok());
    }

    #[test]
    fn stuck_workers_are_capped() {
        if !is_root() {
            return;
        }
        let tmp = TempDir::new("cap");
        let hung = tmp.0.join("hung");
        let _hung = TmpfsMount::new(&hung, "size=1m");
        let other = tmp.0.join("other");
        fs::create_dir(&other).unwrap();

        let mut node = RealNode::new(Node::direct()).with_deadline(Duration::from_millis(50)).with_max_stuck_workers(1);
        // Stuck until the test releases it, not for a time the test hopes
        // is long enough.
        let release = Release::new(&tmp);
        let r: Probe<()> = node.on_worker(b(&hung), node.deadline, |_| release.wait());
        assert!(r.unwrap_err().0.starts_with("timed out"));
        let refused = node.file_facts(b(&other)).unwrap_err();
        assert!(refused.0.starts_with("not touched: too many earlier reads (1) are still hung"), "{refused}");
        // Once the stuck read returns, a new one may start.
        release.now();
        poll_until("the stuck reader to return", WAIT, || node.file_facts(b(&other)).ok());
    }

    /// A read that hangs until the test says: the reader (a process of its
    /// own) waits for a file to appear. Released when dropped too.
    struct Release(PathBuf);

    impl Release {
        fn new(tmp: &TempDir) -> Release {
            Release(tmp.0.join("release-the-read"))
        }

        /// The hung read: returns once released.
        fn wait(&self) -> Probe<()> {
            while !self.0.exists() {
                std::thread::sleep(Duration::from_millis(10));
            }
            Ok(())
        }

        fn released(&self) -> bool {
            self.0.exists()
        }

        fn now(&self) {
            fs::write(&self.0, b"").unwrap();
        }
    }

    impl Drop for Release {
        fn drop(&mut self) {
            let _ = fs::write(&self.0, b"");
        }
    }

    /// A reader podstuck gave up on, killed and reaped when the test ends.
    struct Abandoned(u32);

    impl Drop for Abandoned {
        fn drop(&mut self) {
            let pid = Pid::from_raw(self.0 as i32);
            let _ = nix::sys::signal::kill(pid, Signal::SIGKILL);
            let _ = waitpid(pid, None);
        }
    }

    /// A read past its deadline is left in a process of its own, not in a
    /// thread of podstuck's: a thread asleep uninterruptibly in the kernel
    /// (a lookup behind a directory lock a hung call holds) would keep
    /// podstuck from ever exiting. The reader holds nothing of podstuck's
    /// but its answer's pipe, and is named for `ps`.
    #[test]
    fn a_read_past_its_deadline_is_left_in_a_reader_process_holding_nothing_of_podstucks() {
        let tmp = TempDir::new("reader");
        let mut node = RealNode::new(Node::direct()).with_deadline(Duration::from_millis(200));
        let hung: Probe<()> = node.on_worker(b(&tmp.0), node.deadline, |_| {
            std::thread::sleep(Duration::from_secs(30));
            Ok(())
        });
        assert_eq!(hung.unwrap_err().0, "timed out after 200 ms: the filesystem may be hung");
        let left = node.readers_left();
        assert_eq!(left.iter().map(|(_, p)| p.clone()).collect::<Vec<_>>(), vec![b(&tmp.0).to_vec()]);
        let pid = left[0].0;
        let _reader = Abandoned(pid);
        let own = std::process::id();
        assert!(!Path::new(&format!("/proc/self/task/{pid}")).exists(), "the reader is a thread of podstuck's");
        let status = fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let field = |name: &str| status.lines().find_map(|l| l.strip_prefix(name)).map(str::trim).unwrap_or_default();
        assert_eq!((field("Name:"), field("PPid:")), ("podstuck-read", own.to_string().as_str()), "{status}");
        let fds = fs::read_dir(format!("/proc/{pid}/fd")).unwrap().count();
        assert_eq!(fds, 1, "the reader keeps its answer's pipe alone");
        // Once it ends, it is no longer said to be left.
        drop(_reader);
        assert!(node.readers_left().is_empty());
        assert_eq!(node.file_facts(b(&tmp.0)).unwrap_err().0, HUNG_MOUNT);
    }

    /// Once podstuck stops, reads wait no later than it said, and none
    /// starts after.
    #[test]
    fn reads_end_by_the_stop() {
        let tmp = TempDir::new("stopping");
        let mut node = RealNode::new(Node::direct()).with_deadline(Duration::from_secs(10));
        node.stopping(Instant::now() + Duration::from_millis(300));
        let start = Instant::now();
        let hung: Probe<()> = node.on_worker(b(&tmp.0), node.deadline, |_| {
            std::thread::sleep(Duration::from_secs(30));
            Ok(())
        });
        assert!(start.elapsed() < Duration::from_secs(5), "the read waited {:?}", start.elapsed());
        assert!(hung.unwrap_err().0.starts_with("timed out after"));
        for (pid, _) in node.readers_left() {
            drop(Abandoned(pid));
        }
        // Past the stop, a filesystem never avoided is not read either.
        let mut stopped = RealNode::new(Node::direct());
        stopped.stopping(Instant::now());
        assert_eq!(stopped.file_facts(b(&tmp.0)).unwrap_err().0, NOT_READ_STOPPING);
    }

    #[test]
    fn waits_and_errors_are_said_in_words() {
        assert_eq!(words(&io::Error::from_raw_os_error(libc::EACCES)), "permission denied");
        assert_eq!(exact_duration(Duration::from_millis(1500)), "1500 ms");
    }
}
