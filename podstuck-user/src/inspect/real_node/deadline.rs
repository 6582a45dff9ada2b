//! The reader with a deadline: every call that touches a path on the
//! node runs in a `podstuck-read` process of its own, and the caller waits
//! for its answer no longer than a deadline, and no longer than what is
//! left of the review's time. Past that the reader is left to end when the
//! kernel lets it, and the filesystem it was on is avoided while it is
//! stuck there, whatever else the filesystem answers meanwhile
//! ([`super::avoidance`]: it heals once the reader returns).
//!
//! Why a process and not a thread is said in the [`super`] module's doc.
//! The reader opens what it reads below a root it is given, following no
//! link a workload could have put there ([`super::beneath`]).

use std::collections::HashMap;
use std::fs;
use std::io;
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::inspect::mounts::mount_containing;
use crate::inspect::{Mount, Probe, Unreadable};
use crate::words::io_words as words;

use super::avoidance::{AvoidedNow, Place, Recovered, Spot, Stuck};
use super::beneath::{Beneath, Resolver};
use super::RealNode;

/// How long a caller waits for one path-touching call by default.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(1);
/// How many readers may be stuck in the kernel at once before podstuck stops
/// starting new ones: each is a process left until its filesystem answers.
pub const DEFAULT_MAX_STUCK_WORKERS: usize = 8;

/// What a read refused while podstuck stops says.
pub const NOT_READ_STOPPING: &str = "not read: podstuck is stopping";

/// How long a probe of a filesystem a call hangs on waits: one that
/// answers at once is not avoided.
const PROBE_WAIT: Duration = Duration::from_millis(50);

/// The root a read resolves its path below.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Root {
    /// The node's `/` (`--host-root` in a container).
    Node,
    /// Process `pid`'s root (`/proc/<pid>/root`), in its mount namespace;
    /// the node's when it is gone (a short-lived caller's root was).
    Process(u32),
    /// The root of process `pid`, a member of the mount namespace a path
    /// is proven in: when it is gone, nothing is read (the node's root is
    /// another place, where the same path may be another pod's).
    Member(u32),
}

impl Root {
    /// A question's `root`: the node's for [`NODE_ROOT`](crate::inspect::NODE_ROOT), else the member's.
    pub(super) fn of(root: u32) -> Root {
        match root {
            crate::inspect::NODE_ROOT => Root::Node,
            pid => Root::Member(pid),
        }
    }
}

/// A reader the caller gave up on, not ended yet.
#[derive(Debug)]
pub(super) struct StuckReader {
    pid: Pid,
    /// The node path it was reading.
    path: Vec<u8>,
    /// The filesystem it is stuck on; None for one that answered and is
    /// on its way out (reaped later, never waited for).
    spot: Option<Spot>,
}

/// What podstuck's node reads stand at: the filesystems avoided now, the
/// last that recovered, and the failures by kind.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ReadsNow {
    pub avoided: Vec<AvoidedNow>,
    pub recovered_total: u64,
    pub recovered: Vec<Recovered>,
    /// Reads that failed, by kind ([`crate::inspect::unreadable::KINDS`]).
    pub failed: Vec<(&'static str, u64)>,
}

impl RealNode {
    /// The filesystems avoided now, the recoveries and the failures by
    /// kind (for the summary and /metrics).
    pub fn reads_now(&mut self) -> ReadsNow {
        self.reap();
        let now = Instant::now();
        let stuck = stuck_view(&self.stuck, self.max_stuck_workers);
        self.avoidance.lift_answered(&stuck, now);
        ReadsNow {
            avoided: self.avoidance.now(&stuck),
            recovered_total: self.avoidance.recovered_total,
            recovered: self.avoidance.recovered(),
            failed: self.failed.iter().map(|(k, n)| (*k, *n)).collect(),
        }
    }

    /// The mount points avoided now.
    pub fn avoided_mount_points(&mut self) -> Vec<Vec<u8>> {
        self.reads_now().avoided.into_iter().map(|a| a.mount_point).collect()
    }

    /// podstuck is stopping: every read must be over by `by`. Reads wait
    /// no later than that, and none starts after it.
    pub fn stopping(&mut self, by: Instant) {
        self.stop_by = Some(by);
    }

    /// A look at the node (a review) starts, with `budget` for all its
    /// reads together: a read waits no longer than what is left, and
    /// none starts once it is spent.
    pub fn look_within(&mut self, budget: Duration) {
        self.look_by = Some(Instant::now() + budget);
    }

    /// Readers still in the kernel on a path that did not answer (for the
    /// last words: what podstuck leaves behind, and where).
    pub fn readers_left(&mut self) -> Vec<(u32, Vec<u8>)> {
        self.reap();
        self.stuck.iter().filter(|r| r.spot.is_some()).map(|r| (r.pid.as_raw() as u32, r.path.clone())).collect()
    }

    /// Runs `op` on `path` below `root` in a reader process, waiting the usual deadline.
    pub(super) fn within_deadline_in<T: Serialize + DeserializeOwned>(
        &mut self,
        root: Root,
        path: &[u8],
        op: impl FnOnce(&Beneath, &[u8]) -> Probe<T>,
    ) -> Probe<T> {
        let wait = self.deadline;
        self.on_worker(root, path, wait, op)
    }

    /// Runs `op` on `path` below `root` in a reader process of its own and
    /// waits at most `wait` for its answer. Past that the reader is left to
    /// end when its call returns (or with podstuck), and its filesystem is
    /// avoided while it is stuck.
    pub(super) fn on_worker<T: Serialize + DeserializeOwned>(
        &mut self,
        root: Root,
        path: &[u8],
        wait: Duration,
        op: impl FnOnce(&Beneath, &[u8]) -> Probe<T>,
    ) -> Probe<T> {
        self.reap();
        let now = Instant::now();
        if !self.avoidance.is_empty() {
            let place = self.place_of(root, path);
            let stuck = stuck_view(&self.stuck, self.max_stuck_workers);
            if let Some(refused) = self.avoidance.refuses(&place, &stuck, now) {
                return Err(refused);
            }
        }
        let wait = self.wait_left(wait, now)?;
        let stuck = self.stuck.iter().filter(|r| r.spot.is_some()).count();
        if stuck >= self.max_stuck_workers {
            return Err(Unreadable::Avoided(format!(
                "not touched: too many earlier reads ({stuck}) are still hung; podstuck starts no more until one returns"
            )));
        }
        let node_root = self.node.path("/");
        let root_dir = match root {
            Root::Node => node_root.clone(),
            Root::Process(pid) | Root::Member(pid) => self.proc_file(pid, "root"),
        };
        let (answer, written) = io::pipe().map_err(|e| cannot_start(&e))?;
        let parent = std::process::id();
        let path_owned = path.to_vec();
        // SAFETY: the child only reads (the op), writes its answer to the
        // pipe and leaves with _exit, closing podstuck's files first: it
        // touches no lock another thread may have held at the fork but the
        // allocator's, which glibc and musl make whole again in the child.
        match unsafe { fork() } {
            Ok(ForkResult::Child) => reader(OwnedFd::from(written), parent, move || {
                let beneath = match Beneath::new(&root_dir, Resolver::best()) {
                    Ok(b) => b,
                    // A caller gone: its root was the node's.
                    Err(e) if e.kind() == io::ErrorKind::NotFound && matches!(root, Root::Process(_)) => {
                        Beneath::new(&node_root, Resolver::best()).map_err(|e| Unreadable::io(&e))?
                    }
                    Err(e) => return Err(Unreadable::io(&e)),
                };
                op(&beneath, &path_owned)
            }),
            Ok(ForkResult::Parent { child }) => {
                drop(written);
                match answer_within(OwnedFd::from(answer), wait) {
                    Some(bytes) => {
                        // It has closed its end: it is exiting. Reaped
                        // later if it is not gone yet, never waited for.
                        if matches!(waitpid(child, Some(WaitPidFlag::WNOHANG)), Ok(WaitStatus::StillAlive)) {
                            self.stuck.push(StuckReader { pid: child, path: path.to_vec(), spot: None });
                        }
                        if !self.avoidance.is_empty() {
                            let place = self.place_of(root, path);
                            let stuck = stuck_view(&self.stuck, self.max_stuck_workers);
                            self.avoidance.answered(&place, &stuck, Instant::now());
                        }
                        serde_json::from_slice(&bytes)
                            .unwrap_or_else(|_| Err(Unreadable::Other("the reader ended without an answer".into())))
                    }
                    None => {
                        let place = self.place_of(root, path);
                        let spot = self.avoidance.hung(&place, Instant::now());
                        self.stuck.push(StuckReader { pid: child, path: path.to_vec(), spot: Some(spot) });
                        Err(Unreadable::timed_out(wait))
                    }
                }
            }
            Err(e) => Err(cannot_start(&io::Error::from(e))),
        }
    }

    /// How long a read may wait: `wait`, cut to what is left before the
    /// stop and of the review's time; refused when nothing is left.
    fn wait_left(&self, wait: Duration, now: Instant) -> Probe<Duration> {
        let mut wait = wait;
        let limits = [(self.stop_by, None), (self.look_by, Some(self.look_budget_words()))];
        for (by, words) in limits {
            let Some(by) = by else { continue };
            match by.checked_duration_since(now).filter(|left| !left.is_zero()) {
                Some(left) => wait = wait.min(left),
                None => return Err(Unreadable::Avoided(words.unwrap_or_else(|| NOT_READ_STOPPING.into()))),
            }
        }
        Ok(wait)
    }

    fn look_budget_words(&self) -> String {
        "not read: this look at the node has used its time; the next look reads it".into()
    }

    /// Forgets the stuck readers that have ended.
    fn reap(&mut self) {
        self.stuck.retain(|r| matches!(waitpid(r.pid, Some(WaitPidFlag::WNOHANG)), Ok(WaitStatus::StillAlive)));
    }

    /// Where `path` below `root` lies, for avoidance: the filesystems a
    /// lookup crosses, in the table of the namespace it is read in (the
    /// node's, or the process's when it lives in another); the path
    /// itself, in that namespace, when no table says.
    fn place_of(&self, root: Root, path: &[u8]) -> Place {
        let own = self.own_mntns();
        let (ns, table) = match root {
            Root::Process(pid) | Root::Member(pid) => match self.mntns_of(pid) {
                Some(ns) if Some(ns) != own => (ns, self.table_of(pid)),
                _ => (0, self.host_table()),
            },
            Root::Node => (0, self.host_table()),
        };
        let Ok(mounts) = table else {
            return Place {
                spots: vec![Spot::Path { ns, path: path.to_vec() }],
                mount_point: path.to_vec(),
                fstype: String::new(),
            };
        };
        let by_id: HashMap<u32, &Mount> = mounts.iter().map(|m| (m.id, m)).collect();
        let first = mount_containing(&mounts, path);
        let mut spots = Vec::new();
        let mut next = first;
        let mut hops = 0;
        while let Some(m) = next {
            if !spots.contains(&Spot::Device(m.dev)) {
                spots.push(Spot::Device(m.dev));
            }
            hops += 1;
            if m.parent_id == m.id || hops > mounts.len() {
                break;
            }
            next = by_id.get(&m.parent_id).copied();
        }
        match first {
            Some(m) => Place { spots, mount_point: m.mount_point.clone(), fstype: m.fstype.clone() },
            None => Place {
                spots: vec![Spot::Path { ns, path: path.to_vec() }],
                mount_point: path.to_vec(),
                fstype: String::new(),
            },
        }
    }

    /// A call hangs on `path`: its filesystem is probed by a reader that
    /// looks it up, and avoided while that probe is stuck (so exactly
    /// until the filesystem answers again). One that answers at once is
    /// not avoided: the call waits on something else.
    pub(super) fn avoid_mount_of(&mut self, path: &[u8]) {
        let _ = self.on_worker(Root::Node, path, PROBE_WAIT, |beneath, p| {
            beneath.path(p).map(|_| ()).map_err(|e| Unreadable::io(&e))
        });
    }
}

/// The readers stuck, as [`super::avoidance`] weighs them.
fn stuck_view(stuck: &[StuckReader], max: usize) -> Stuck<'_> {
    Stuck { spots: stuck.iter().map(|r| r.spot.as_ref()).collect(), max }
}

fn cannot_start(e: &io::Error) -> Unreadable {
    let why = format!("cannot start a reader: {}", words(e));
    match Unreadable::io(e) {
        Unreadable::TooMany(_) => Unreadable::TooMany(why),
        _ => Unreadable::Other(why),
    }
}

/// The reader process: runs `op`, writes its answer to `out` and exits.
/// It first lets go of every file podstuck holds: a reader stuck in the
/// kernel must keep neither its programs attached nor its output open
/// after podstuck ends. It dies with podstuck, as soon as the kernel lets
/// it, and is named for `ps`.
fn reader<T: Serialize>(out: OwnedFd, parent: u32, op: impl FnOnce() -> Probe<T>) -> ! {
    let keep = out.as_raw_fd();
    close_all_but(keep);
    // SAFETY: prctl, getppid, sigaction and _exit on this process alone,
    // no memory shared.
    unsafe {
        libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong);
        // podstuck may have died between the fork and the prctl, and the
        // death signal comes only for a death after it: then the reader
        // is init's child already, and reads for no one.
        if libc::getppid() as u32 != parent {
            libc::_exit(0);
        }
        libc::prctl(libc::PR_SET_NAME, c"podstuck-read".as_ptr());
        // podstuck's handlers would write to its event pipe, closed here.
        for signal in [libc::SIGINT, libc::SIGTERM, libc::SIGHUP] {
            libc::signal(signal, libc::SIG_DFL);
        }
    }
    let answer = std::panic::catch_unwind(std::panic::AssertUnwindSafe(op))
        .unwrap_or_else(|_| Err(Unreadable::Other("the reader failed".into())));
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
    use crate::inspect::real_node::tests::{b, WAIT};
    use crate::inspect::NodeInspector;
    use crate::node_access::Node;
    use crate::test_support::{is_root, TempDir};
    use crate::words::exact_duration;
    use nix::sys::signal::Signal;
    use podstuck_tests::{poll_until, Process, TmpfsMount};
    use std::path::{Path, PathBuf};
    use std::process::Command;

    fn hang_until<'a>(release: &'a Release) -> impl FnOnce(&Beneath, &[u8]) -> Probe<()> + 'a {
        move |_, _| release.wait()
    }

    fn avoided(r: Probe<impl std::fmt::Debug>) -> String {
        let e = r.unwrap_err();
        assert_eq!(e.kind(), "avoided", "{e}");
        e.why().to_string()
    }

    #[test]
    fn a_read_past_its_deadline_avoids_its_filesystem_until_its_reader_returns() {
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
        let hung = node.on_worker(Root::Node, b(&file), node.deadline, hang_until(&release));
        assert!(!release.released(), "the caller waited for the hung read");
        let hung = hung.unwrap_err();
        assert_eq!((hung.kind(), hung.why()), ("timed-out", "timed out after 100 ms: the filesystem may be hung"));
        assert_eq!(node.avoided_mount_points(), vec![b(&mnt).to_vec()]);

        assert!(avoided(node.file_facts(b(&file), 0)).starts_with("not touched: an earlier read on "));
        avoided(node.dir_sample(b(&mnt), 1, 0));
        // Reaching the submount walks through the hung one.
        avoided(node.fs_usage(b(&sub), 0));
        assert!(node.file_facts(b(&tmp.0), 0).is_ok(), "other filesystems are still read");
        // Its reader returns: the filesystem answers, and is read again.
        release.now();
        poll_until("the filesystem read again once its reader returned", WAIT, || node.file_facts(b(&file), 0).ok());
        let reads = node.reads_now();
        assert!(reads.avoided.is_empty(), "{reads:?}");
        assert_eq!(reads.recovered_total, 1);
        assert_eq!(reads.recovered[0].mount_point, b(&mnt));
        assert_eq!(exact_duration(DEFAULT_DEADLINE), "1 s");
    }

    #[test]
    fn a_call_said_to_hang_on_a_filesystem_that_answers_avoids_nothing() {
        if !is_root() {
            return;
        }
        let tmp = TempDir::new("avoid");
        let mnt = tmp.0.join("mnt");
        let _tmpfs = TmpfsMount::new(&mnt, "size=1m");
        fs::write(mnt.join("f"), b"x").unwrap();
        let mut node = RealNode::new(Node::direct());
        node.avoid(b(&mnt.join("f")));
        assert!(node.avoided_mount_points().is_empty(), "its probe answered at once");
        assert!(node.inode_flags(b(&mnt.join("f")), 0).is_ok());
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
        let r = node.on_worker(Root::Node, b(&hung), node.deadline, hang_until(&release));
        assert_eq!(r.unwrap_err().kind(), "timed-out");
        let refused = avoided(node.file_facts(b(&other), 0));
        assert!(refused.starts_with("not touched: too many earlier reads (1) are still hung"), "{refused}");
        // Once the stuck read returns, a new one may start.
        release.now();
        poll_until("the stuck reader to return", WAIT, || node.file_facts(b(&other), 0).ok());
    }

    /// Each look at the node has one budget for all its reads: a read
    /// waits no longer than what is left of it, and none starts after.
    #[test]
    fn a_look_at_the_node_has_one_budget_for_all_its_reads() {
        let tmp = TempDir::new("budget");
        let mut node = RealNode::new(Node::direct()).with_deadline(Duration::from_secs(10));
        node.look_within(Duration::from_millis(300));
        let start = Instant::now();
        let hung: Probe<()> = node.on_worker(Root::Node, b(&tmp.0), node.deadline, |_, _| {
            std::thread::sleep(Duration::from_secs(30));
            Ok(())
        });
        assert!(start.elapsed() < Duration::from_secs(5), "the read waited {:?}", start.elapsed());
        assert_eq!(hung.unwrap_err().kind(), "timed-out");
        for (pid, _) in node.readers_left() {
            drop(Abandoned(pid));
        }
        poll_until("the budget spent", WAIT, || (start.elapsed() > Duration::from_millis(300)).then_some(()));
        let spent = avoided(node.file_facts(b"/", 0));
        assert!(spent.contains("this look at the node has used its time"), "{spent}");
        node.look_within(Duration::from_secs(5));
        assert!(node.file_facts(b"/", 0).is_ok(), "the next look reads");
    }

    /// A read that hangs in another process's root is placed in that
    /// process's mount table: it never avoids a host filesystem it does
    /// not lie on (the host's own spelling of the same path included).
    #[test]
    fn a_read_hung_in_another_mount_namespace_never_avoids_a_host_filesystem() {
        if !is_root() {
            return;
        }
        let tmp = TempDir::new("otherns-hang");
        let dir = tmp.0.join("vol");
        fs::create_dir(&dir).unwrap();
        fs::write(dir.join("f"), b"x").unwrap();
        let ready = tmp.0.join("ready");
        // A tmpfs at `dir` in a namespace of its own only.
        let kid = Process::spawn(
            Command::new("unshare")
                .args([
                    "-m",
                    "--propagation",
                    "private",
                    "sh",
                    "-c",
                    "mount -t tmpfs none \"$0\" && : > \"$1\" && exec sleep 30",
                ])
                .arg(&dir)
                .arg(&ready),
        );
        poll_until("the namespace's tmpfs", WAIT, || ready.exists().then_some(()));
        let mut node = RealNode::new(Node::direct()).with_deadline(Duration::from_millis(100));
        let release = Release::new(&tmp);
        let hung = node.on_worker(Root::Process(kid.pid()), b(&dir), node.deadline, hang_until(&release));
        assert_eq!(hung.unwrap_err().kind(), "timed-out");
        let now = node.reads_now();
        assert_eq!(now.avoided.len(), 1);
        assert_eq!((now.avoided[0].mount_point.as_slice(), now.avoided[0].fstype.as_str()), (b(&dir), "tmpfs"));
        // The host's `dir`, a directory of the host's filesystem: read.
        assert!(
            node.file_facts(b(&dir.join("f")), 0).is_ok(),
            "a host filesystem avoided for another namespace's hang"
        );
        release.now();
    }

    /// A reader whose podstuck died before it asked for the death signal
    /// reads for no one: it leaves at once.
    #[test]
    fn a_reader_whose_parent_is_not_podstuck_any_more_leaves_at_once() {
        let tmp = TempDir::new("orphan");
        let marker = tmp.0.join("read");
        let (answer, written) = io::pipe().unwrap();
        // SAFETY: the child only runs `reader`, which ends in _exit.
        match unsafe { fork() }.unwrap() {
            ForkResult::Child => {
                reader(OwnedFd::from(written), 1, || fs::write(&marker, b"").map_err(|e| Unreadable::io(&e)))
            }
            ForkResult::Parent { child } => {
                drop(written);
                let _ = answer_within(OwnedFd::from(answer), WAIT);
                let _ = waitpid(child, None);
                assert!(!marker.exists(), "the orphaned reader read");
            }
        }
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
        let hung: Probe<()> = node.on_worker(Root::Node, b(&tmp.0), node.deadline, |_, _| {
            std::thread::sleep(Duration::from_secs(30));
            Ok(())
        });
        assert_eq!(hung.unwrap_err().why(), "timed out after 200 ms: the filesystem may be hung");
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
        // Its answer's pipe, and the root it reads below.
        assert!(fds <= 2, "the reader keeps {fds} files");
        // Once it ends, it is no longer said to be left, nor its filesystem avoided.
        drop(_reader);
        assert!(node.readers_left().is_empty());
        assert!(node.file_facts(b(&tmp.0), 0).is_ok());
    }

    /// Once podstuck stops, reads wait no later than it said, and none
    /// starts after.
    #[test]
    fn reads_end_by_the_stop() {
        let tmp = TempDir::new("stopping");
        let mut node = RealNode::new(Node::direct()).with_deadline(Duration::from_secs(10));
        node.stopping(Instant::now() + Duration::from_millis(300));
        let start = Instant::now();
        let hung: Probe<()> = node.on_worker(Root::Node, b(&tmp.0), node.deadline, |_, _| {
            std::thread::sleep(Duration::from_secs(30));
            Ok(())
        });
        assert!(start.elapsed() < Duration::from_secs(5), "the read waited {:?}", start.elapsed());
        assert!(hung.unwrap_err().why().starts_with("timed out after"));
        for (pid, _) in node.readers_left() {
            drop(Abandoned(pid));
        }
        // Past the stop, a filesystem never avoided is not read either.
        let mut stopped = RealNode::new(Node::direct());
        stopped.stopping(Instant::now());
        assert_eq!(avoided(stopped.file_facts(b(&tmp.0), 0)), NOT_READ_STOPPING);
    }

    #[test]
    fn waits_and_errors_are_said_in_words() {
        assert_eq!(words(&io::Error::from_raw_os_error(libc::EACCES)), "permission denied");
        assert_eq!(exact_duration(Duration::from_millis(1500)), "1500 ms");
    }
}
