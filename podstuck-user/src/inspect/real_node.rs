//! The real node: answers [`NodeInspector`] from /proc, cgroupfs and the
//! filesystems themselves, on the machine podstuck runs on.
//!
//! It only reads. The one danger of reading is a filesystem whose server is
//! gone (hard NFS mount, dead FUSE daemon): any open, stat, statfs or
//! readdir there sleeps in the kernel forever, and a diagnosis tool that
//! hangs on exactly the fault it should report is worse than none. So every
//! call that touches a path runs in a reader process of its own (forked,
//! [`RealNode::on_worker`]); the caller waits up to a deadline, then reports
//! the filesystem as possibly hung and never touches that mount again.
//! Not a thread: a lookup that waits on a directory lock held by a hung call
//! sleeps uninterruptibly, SIGKILL cannot end it, and a process is not
//! reaped until its every thread has left the kernel, so one such thread
//! would keep podstuck from ever exiting. A reader process is left behind
//! instead, and ends when the kernel lets it. Reading /proc text files and
//! the /proc magic links (cwd, root, fd/N) never calls into the target
//! filesystem, so those run inline.
//!
//! It is not a parser of mount tables (that is [`super::mounts`]) and it
//! draws no conclusions (that is the diagnose stage).

use std::collections::hash_map::Entry;
use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::fs;
use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{fork, ForkResult, Pid};
use serde::de::DeserializeOwned;
use serde::Serialize;

use crate::identify::owner::RuntimeState;
use crate::identify::process::{parse_stat, TaskStat};
use crate::node_access::Node;
use crate::words::{exact_duration, io_words as words};

use super::mounts::{freezer_twin, is_at_or_below, mount_containing, parse_mountinfo};
use super::{
    namespace_gone, CgroupState, DirSample, EntryEstimate, FileFacts, FreezerLevel, FsUsage, HoldKind, InodeFlags,
    Mount, MountCopy, MountHolder, MountNamespace, NodeInspector, Probe, TaskState, Unreadable,
};

/// How long a caller waits for one path-touching call by default.
pub const DEFAULT_DEADLINE: Duration = Duration::from_secs(1);
/// How many readers may be stuck in the kernel at once before podstuck stops
/// starting new ones: each is a process left until its filesystem answers.
pub const DEFAULT_MAX_STUCK_WORKERS: usize = 8;

/// Past this many entries a directory is "huge" and counting more says nothing new.
const DIR_COUNT_CAP: u64 = 10_000_000;
/// Work allowed to a tree count; a removal storm's tree may be enormous,
/// and the collector's main loop waits meanwhile (the ring buffer fills).
/// Sampled (`WALK_DIRS_PER_LEVEL`), a tree of rows of thousands of
/// directories takes a few ms; the bounds are for trees that are not.
const WALK_BUDGET: Duration = Duration::from_millis(200);
const WALK_ENTRY_CAP: u64 = 1_000_000;
/// Directories a tree count lists per level before it samples the level.
const WALK_DIRS_PER_LEVEL: usize = 32;

const FS_IMMUTABLE_FL: u32 = 0x10;
const FS_APPEND_FL: u32 = 0x20;

const HUNG_MOUNT: &str = "not touched: an earlier read on this filesystem did not return";

/// The node podstuck runs on, read through /proc and the filesystems.
pub struct RealNode {
    /// How the node is reached from where podstuck runs.
    node: &'static Node,
    proc_root: PathBuf,
    /// Where the runtimes say whose a container is (a holder's pod name).
    runtimes: RuntimeState,
    /// podstuck's own container's mount namespace, when it runs in one:
    /// its processes are never holders.
    podstuck_mntns: Option<u64>,
    deadline: Duration,
    max_stuck_workers: usize,
    /// Readers the caller gave up on that have not ended yet.
    stuck: Vec<StuckReader>,
    /// Once podstuck is stopping: when its reads must be over by.
    stop_by: Option<Instant>,
    avoided: Vec<AvoidedMount>,
    self_pid: u32,
    /// A member found for each mount namespace asked about, tried first
    /// next time: finding one means reading every process's ns link.
    members: HashMap<u64, u32>,
}

/// Mount namespaces whose member is remembered; past this the memory
/// starts again (a node has a few hundred namespaces, not thousands).
const MEMBERS_KEPT: usize = 1024;

/// A mount podstuck stays away from because a call on it did not return.
#[derive(Clone, Debug, PartialEq, Eq)]
struct AvoidedMount {
    /// None when the mount table could not be read: then the path itself
    /// is what is avoided.
    id: Option<u32>,
    mount_point: Vec<u8>,
}

impl RealNode {
    /// The node as /proc shows it, reached as `node` says.
    pub fn new(node: &'static Node) -> RealNode {
        RealNode::with_proc_root(node, PathBuf::from("/proc"))
    }

    /// A node whose /proc is elsewhere (a recorded or fake /proc in tests).
    pub fn with_proc_root(node: &'static Node, proc_root: PathBuf) -> RealNode {
        RealNode {
            node,
            proc_root,
            runtimes: RuntimeState::of_this_node(node),
            podstuck_mntns: node.podstuck_mntns(),
            deadline: DEFAULT_DEADLINE,
            max_stuck_workers: DEFAULT_MAX_STUCK_WORKERS,
            stuck: Vec::new(),
            stop_by: None,
            avoided: Vec::new(),
            self_pid: std::process::id(),
            members: HashMap::new(),
        }
    }

    /// A node seen from a container whose mount namespace is `mntns`.
    pub fn with_podstuck_namespace(mut self, mntns: u64) -> RealNode {
        self.podstuck_mntns = Some(mntns);
        self
    }

    /// How long to wait for one call that touches a path.
    pub fn with_deadline(mut self, deadline: Duration) -> RealNode {
        self.deadline = deadline;
        self
    }

    /// How many hung workers to tolerate before refusing to touch any path.
    pub fn with_max_stuck_workers(mut self, max: usize) -> RealNode {
        self.max_stuck_workers = max.max(1);
        self
    }

    /// Mount points podstuck no longer touches because a call there did not
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

    // ---- the reader with a deadline ----

    /// Runs `op` on `path` in a reader process of its own and waits at most
    /// `wait` for its answer. Past that the reader is left to end when its
    /// call returns (or with podstuck), and the mount is avoided.
    fn on_worker<T: Serialize + DeserializeOwned>(
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
                        self.avoid(path);
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

    // ---- /proc ----

    fn proc_file(&self, pid: u32, name: &str) -> PathBuf {
        self.proc_root.join(pid.to_string()).join(name)
    }

    /// The node's own /proc entry: podstuck's, or PID 1's where podstuck
    /// reads the node from a container's mount namespace.
    fn node_entry(&self) -> PathBuf {
        self.proc_root.join(self.node.node_proc_entry())
    }

    fn host_table(&self) -> io::Result<Vec<Mount>> {
        Ok(parse_mountinfo(&fs::read(self.node_entry().join("mountinfo"))?))
    }

    fn table_of(&self, pid: u32) -> io::Result<Vec<Mount>> {
        Ok(parse_mountinfo(&fs::read(self.proc_file(pid, "mountinfo"))?))
    }

    /// Every process id in /proc, podstuck's own left out, and every
    /// process of its own container (they hold the copies of every mount
    /// a `kubectl debug node` pod is made with, and go with podstuck).
    fn pids(&self) -> Vec<u32> {
        let Ok(entries) = fs::read_dir(&self.proc_root) else {
            return Vec::new();
        };
        let mut pids: Vec<u32> = entries
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse().ok())
            .filter(|pid| *pid != self.self_pid)
            .filter(|pid| self.podstuck_mntns.is_none() || self.mntns_of(*pid) != self.podstuck_mntns)
            .collect();
        pids.sort_unstable();
        pids
    }

    fn mntns_of_link(&self, link: &Path) -> Option<u64> {
        parse_ns_link(&read_link(link).ok()?)
    }

    fn mntns_of(&self, pid: u32) -> Option<u64> {
        self.mntns_of_link(&self.proc_file(pid, "ns/mnt"))
    }

    /// The node's mount namespace: podstuck's own unless it reads the
    /// node from its container's.
    fn own_mntns(&self) -> Option<u64> {
        self.mntns_of_link(&self.node_entry().join("ns/mnt"))
    }

    /// A process living in mount namespace `ns`: the one remembered while
    /// it still lives there, else kubelet where it lives there, else the
    /// oldest (lowest pid: a container's init), which outlives the others.
    fn member_of(&mut self, ns: u64) -> Option<u32> {
        if let Some(&pid) = self.members.get(&ns) {
            if self.mntns_of(pid) == Some(ns) {
                return Some(pid);
            }
        }
        let members: Vec<u32> = self.pids().into_iter().filter(|pid| self.mntns_of(*pid) == Some(ns)).collect();
        let pid =
            members.iter().copied().find(|pid| self.comm_of(*pid) == "kubelet").or_else(|| members.first().copied())?;
        if self.members.len() >= MEMBERS_KEPT {
            self.members.clear();
        }
        self.members.insert(ns, pid);
        Some(pid)
    }

    fn comm_of(&self, pid: u32) -> String {
        fs::read(self.proc_file(pid, "comm"))
            .map(|b| crate::words::safe_text(b.strip_suffix(b"\n").unwrap_or(&b)))
            .unwrap_or_default()
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

    fn unreadable_proc(&self, e: io::Error) -> Unreadable {
        if e.kind() == io::ErrorKind::NotFound {
            Unreadable("no such process".into())
        } else {
            unreadable(e)
        }
    }
}

/// What a read refused while podstuck stops says.
pub const NOT_READ_STOPPING: &str = "not read: podstuck is stopping";

/// A reader the caller gave up on, not ended yet.
#[derive(Debug)]
struct StuckReader {
    pid: Pid,
    /// The node path it was reading.
    path: Vec<u8>,
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

/// One mount namespace's table, and which of its mounts are `mount`.
struct NamespaceView {
    table: Vec<Mount>,
    targets: HashSet<u32>,
    mount_point: Vec<u8>,
    dev: (u32, u32),
}

impl NodeInspector for RealNode {
    fn host_mounts(&mut self) -> Probe<Vec<Mount>> {
        self.host_table().map_err(unreadable)
    }

    fn mount_namespace(&mut self, mntns: u64) -> Probe<MountNamespace> {
        if mntns == 0 || Some(mntns) == self.own_mntns() {
            let mounts = self.host_table().map_err(unreadable)?;
            return Ok(MountNamespace {
                mntns,
                host: true,
                member: self.self_pid,
                member_comm: self.comm_of(self.self_pid),
                owner: None,
                mounts,
            });
        }
        // The member may leave between being found and being read: one more try.
        for _ in 0..2 {
            let member = self.member_of(mntns).ok_or_else(|| namespace_gone(mntns))?;
            match self.table_of(member) {
                Ok(mounts) if self.mntns_of(member) == Some(mntns) => {
                    let owner = self.runtimes.owner_of(&self.proc_root, member);
                    return Ok(MountNamespace {
                        mntns,
                        host: false,
                        member,
                        member_comm: self.comm_of(member),
                        owner,
                        mounts,
                    });
                }
                _ => {
                    self.members.remove(&mntns);
                }
            }
        }
        Err(namespace_gone(mntns))
    }

    fn resolved_path(&mut self, pid: u32, path: &[u8]) -> Probe<Vec<u8>> {
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

    fn mount_holders(&mut self, mount: &Mount, mntns: u64) -> Vec<MountHolder> {
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
            let owner = self.runtimes.owner_of(&self.proc_root, pid);
            holders.extend(holds.into_iter().map(|(how, path)| MountHolder {
                pid,
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

    fn mount_copies(&mut self, mount: &Mount, mntns: u64) -> Vec<MountCopy> {
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
            if let Some(copy) = table.iter().find(|m| is_copy(m, mount)) {
                copies.push(MountCopy {
                    mntns: ns,
                    pid,
                    comm: self.comm_of(pid),
                    mount_point: copy.mount_point.clone(),
                    propagation: copy.propagation.clone(),
                    owner: self.runtimes.owner_of(&self.proc_root, pid),
                });
            }
        }
        copies
    }

    fn inode_flags(&mut self, path: &[u8]) -> Probe<InodeFlags> {
        let wait = self.deadline;
        self.on_worker(path, wait, |p| read_inode_flags(&p))
    }

    fn file_facts(&mut self, path: &[u8]) -> Probe<FileFacts> {
        let wait = self.deadline;
        self.on_worker(path, wait, |p| {
            let meta = fs::symlink_metadata(&p).map_err(unreadable)?;
            Ok(FileFacts {
                mode: meta.mode(),
                uid: meta.uid(),
                gid: meta.gid(),
                nlink: meta.nlink(),
                size: meta.size(),
                is_dir: meta.file_type().is_dir(),
                sticky: meta.mode() & libc::S_ISVTX != 0,
                dev: (libc::major(meta.dev()), libc::minor(meta.dev())),
            })
        })
    }

    fn dir_sample(&mut self, path: &[u8], limit: usize) -> Probe<DirSample> {
        let wait = self.deadline;
        self.on_worker(path, wait, move |p| {
            let mut sample = DirSample { names: Vec::new(), counted: 0, complete: true };
            for entry in fs::read_dir(&p).map_err(unreadable)? {
                let entry = entry.map_err(unreadable)?;
                if sample.counted >= DIR_COUNT_CAP {
                    sample.complete = false;
                    break;
                }
                sample.counted += 1;
                if sample.names.len() < limit {
                    sample.names.push(entry.file_name().into_vec());
                }
            }
            Ok(sample)
        })
    }

    fn remaining_entries(&mut self, path: &[u8]) -> Probe<EntryEstimate> {
        // The walk has its own budget; the deadline is for a call that never returns.
        let wait = WALK_BUDGET + self.deadline;
        self.on_worker(path, wait, |p| count_tree(&p, WALK_BUDGET, WALK_ENTRY_CAP))
    }

    fn fs_usage(&mut self, path: &[u8]) -> Probe<FsUsage> {
        let wait = self.deadline;
        let (mut usage, dev) = self.on_worker(path, wait, |p| read_fs_usage(&p))?;
        // mountinfo knows the exact name ("ext4", "nfs4", "fuse.sshfs")
        // where the magic number only knows a family.
        if let Ok(mounts) = self.host_table() {
            if let Some(m) = mount_containing(&mounts, path).filter(|m| m.dev == dev) {
                usage.fstype = m.fstype.clone();
            }
        }
        Ok(usage)
    }

    fn cgroup(&mut self, path: &[u8]) -> Probe<CgroupState> {
        // The node's cgroupfs, reached from here: in a container read
        // through --host-root, its own /sys/fs/cgroup is its cgroup
        // namespace's, which holds none of the pods' cgroups.
        let reached = self.node.path(path_of(path));
        let dir = reached.as_path();
        let meta = fs::metadata(dir).map_err(unreadable)?;
        if !meta.is_dir() {
            return Err(Unreadable("not a directory".into()));
        }
        let has = |name: &str| dir.join(name).exists();
        let version = if has("cgroup.events") || (has("cgroup.procs") && has("cgroup.controllers")) {
            2
        } else if has("tasks") || has("cgroup.procs") {
            1
        } else {
            return Err(Unreadable("not a cgroup directory: no cgroup.procs or tasks file".into()));
        };
        let list = if version == 2 { "cgroup.procs" } else { "tasks" };

        let mut ids: Vec<u32> = Vec::new();
        let mut pending = vec![dir.to_path_buf()];
        while let Some(d) = pending.pop() {
            if let Ok(text) = fs::read_to_string(d.join(list)) {
                ids.extend(text.lines().filter_map(|l| l.trim().parse::<u32>().ok()));
            }
            if let Ok(entries) = fs::read_dir(&d) {
                pending.extend(entries.flatten().filter(|e| e.file_type().is_ok_and(|t| t.is_dir())).map(|e| e.path()));
            }
        }
        ids.sort_unstable();
        ids.dedup();
        // A task may exit between the list and its /proc entry.
        let tasks = ids.into_iter().filter_map(|id| self.task(id).ok()).collect();

        let mut children: Vec<String> = fs::read_dir(dir)
            .map_err(unreadable)?
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .collect();
        children.sort();

        let events = fs::read_to_string(dir.join("cgroup.events")).ok();
        let event = |key: &str| events.as_deref().and_then(|t| key_value(t, key)).map(|v| v == "1");
        let (populated, frozen) = if version == 2 {
            let freeze = fs::read_to_string(dir.join("cgroup.freeze")).ok().map(|t| t.trim() == "1");
            let frozen = match (event("frozen"), freeze) {
                (None, None) => None,
                (a, b) => Some(a.unwrap_or(false) || b.unwrap_or(false)),
            };
            (event("populated"), frozen)
        } else {
            // freezer.state exists only in the freezer hierarchy: a memory
            // or pids cgroup is frozen when its freezer twin is.
            let state = fs::read_to_string(dir.join("freezer.state")).ok().or_else(|| {
                let twin = freezer_twin(&self.host_table().ok()?, path)?;
                fs::read_to_string(self.node.path(path_of(&twin)).join("freezer.state")).ok()
            });
            (None, state.map(|s| matches!(s.trim(), "FROZEN" | "FREEZING")))
        };
        Ok(CgroupState { version, tasks, children, populated, frozen, has_kill: has("cgroup.kill") })
    }

    fn v1_freezer(&mut self, path: &[u8]) -> Probe<Vec<FreezerLevel>> {
        let mounts = self.host_table().map_err(unreadable)?;
        let Some(twin) = freezer_twin(&mounts, path) else {
            return Err(Unreadable("no v1 freezer hierarchy mounted, or not a v1 cgroup".into()));
        };
        let mut levels = Vec::new();
        // Parents first: a thaw must start at the top, where a freeze
        // applied to a parent holds its children. Read where podstuck
        // reaches the node's freezer, named as the node spells it: the
        // fix that thaws them runs there.
        let mut pending = std::collections::VecDeque::from([self.node.path(path_of(&twin))]);
        while let Some(dir) = pending.pop_front() {
            let shown = self.node.shown(&dir);
            let state = match fs::read_to_string(dir.join("freezer.state")) {
                Ok(state) => state.trim().to_string(),
                Err(e) if levels.is_empty() => return Err(Unreadable(format!("{}: {}", shown.display(), words(&e)))),
                // A child removed meanwhile.
                Err(_) => continue,
            };
            let pids = fs::read_to_string(dir.join("cgroup.procs"))
                .unwrap_or_default()
                .lines()
                .filter_map(|l| l.trim().parse().ok())
                .collect();
            let mut children: Vec<PathBuf> = fs::read_dir(&dir)
                .into_iter()
                .flatten()
                .flatten()
                .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
                .map(|e| e.path())
                .collect();
            children.sort();
            pending.extend(children);
            levels.push(FreezerLevel { dir: shown.into_os_string().into_vec(), state, pids });
        }
        Ok(levels)
    }

    fn task(&mut self, tid: u32) -> Probe<TaskState> {
        let stat = fs::read(self.proc_file(tid, "stat")).map_err(|e| self.unreadable_proc(e))?;
        let TaskStat { comm, state, .. } =
            parse_stat(&stat).ok_or_else(|| Unreadable(format!("cannot parse /proc/{tid}/stat")))?;
        // Bytes, not text: the Name line above holds what the process chose.
        let pid = fs::read(self.proc_file(tid, "status"))
            .ok()
            .and_then(|s| {
                s.split(|b| *b == b'\n')
                    .find_map(|l| std::str::from_utf8(l.strip_prefix(b"Tgid:")?).ok()?.trim().parse().ok())
            })
            .unwrap_or(tid);
        let wchan = fs::read_to_string(self.proc_file(tid, "wchan"))
            .ok()
            .map(|w| w.trim().to_string())
            .filter(|w| !w.is_empty() && w != "0");
        let stack = fs::read_to_string(self.proc_file(tid, "stack"))
            .map(|s| s.lines().filter_map(frame_name).collect())
            .unwrap_or_default();
        Ok(TaskState { tid, pid, comm, state, wchan, stack })
    }

    fn fuse_servers(&mut self) -> Vec<TaskState> {
        let mut servers = Vec::new();
        for pid in self.pids() {
            let Ok(fds) = fs::read_dir(self.proc_file(pid, "fd")) else { continue };
            let serves = fds.flatten().any(|e| read_link(&e.path()).is_ok_and(|t| t == b"/dev/fuse"));
            if serves {
                if let Ok(task) = self.task(pid) {
                    servers.push(task);
                }
            }
        }
        servers
    }

    fn avoid(&mut self, path: &[u8]) {
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

// ---- the operations run on workers ----

fn read_inode_flags(p: &Path) -> Probe<InodeFlags> {
    let meta = fs::symlink_metadata(p).map_err(unreadable)?;
    let kind = meta.file_type();
    if !kind.is_file() && !kind.is_dir() {
        return Err(Unreadable(format!(
            "a {} has no inode flags podstuck reads (only regular files and directories)",
            crate::words::file_kind(&kind)
        )));
    }
    // O_NONBLOCK: if the path was swapped for a FIFO since the lstat, the
    // open must not wait for a writer. std adds O_CLOEXEC.
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(p)
        .map_err(unreadable)?;
    // The ioctl is declared with a long but the kernel writes an int; a
    // long-sized buffer stays safe either way, and the int is its first bytes.
    let mut buf: u64 = 0;
    // SAFETY: FS_IOC_GETFLAGS writes at most sizeof(long) bytes into buf.
    let rc = unsafe { libc::ioctl(file.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut buf as *mut u64) };
    if rc < 0 {
        let e = io::Error::last_os_error();
        return Err(match e.raw_os_error() {
            Some(libc::ENOTTY) | Some(libc::EOPNOTSUPP) | Some(libc::EINVAL) => {
                Unreadable(format!("this filesystem keeps no inode flags ({})", words(&e)))
            }
            _ => unreadable(e),
        });
    }
    let bytes = buf.to_ne_bytes();
    let raw = u32::from_ne_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]);
    Ok(InodeFlags { immutable: raw & FS_IMMUTABLE_FL != 0, append_only: raw & FS_APPEND_FL != 0, raw })
}

/// Counts entries below `root` without following symlinks or leaving its
/// filesystem, level by level. The tree is often being deleted while
/// counted, so entries that vanish are skipped. A level of more than
/// [`WALK_DIRS_PER_LEVEL`] directories is sampled: evenly spaced ones are
/// listed, each standing for its share of the level, so a storm's tree of
/// millions of directories costs a few thousand listings per check, not
/// millions of them in the collector's process. Cut by `budget` or `cap`,
/// what was found so far is a lower bound.
fn count_tree(root: &Path, budget: Duration, cap: u64) -> Probe<EntryEstimate> {
    let start = Instant::now();
    let meta = fs::symlink_metadata(root).map_err(unreadable)?;
    if !meta.is_dir() {
        return Err(Unreadable("not a directory".into()));
    }
    let dev = meta.dev();
    let mut listed: u64 = 0;
    // Each entry listed counts for the directories its own stands for.
    let mut entries = 0.0f64;
    let mut sampled = false;
    let mut cut_by: Option<&str> = None;
    let mut level: Vec<(PathBuf, f64)> = vec![(root.to_path_buf(), 1.0)];
    'walk: while !level.is_empty() {
        let mut below = Vec::new();
        for (dir, weight) in level {
            if start.elapsed() >= budget {
                cut_by = Some("time");
                break 'walk;
            }
            let listing = match fs::read_dir(&dir) {
                Ok(l) => l,
                Err(e) if dir == root => return Err(unreadable(e)),
                Err(_) => continue,
            };
            for entry in listing {
                // An error mid-directory (it was removed under us) ends that directory.
                let Ok(entry) = entry else { break };
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
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    below.push((entry.path(), weight));
                }
            }
        }
        let many = below.len();
        if many > WALK_DIRS_PER_LEVEL {
            sampled = true;
            let scale = many as f64 / WALK_DIRS_PER_LEVEL as f64;
            below = (0..WALK_DIRS_PER_LEVEL)
                .map(|i| below[i * many / WALK_DIRS_PER_LEVEL].clone())
                .map(|(p, w)| (p, w * scale))
                .collect();
        }
        // lstat, so a mount point shows the mounted filesystem's device.
        below.retain(|(p, _)| fs::symlink_metadata(p).is_ok_and(|m| m.dev() == dev));
        level = below;
    }
    let entries = entries.round() as u64;
    let method = match (cut_by, sampled) {
        (None, false) => "counted".to_string(),
        (None, true) => format!(
            "count of {listed} entries in evenly spaced directories of the tree (at most {WALK_DIRS_PER_LEVEL} a level), scaled up"
        ),
        (Some("time"), _) => format!("counted for {} (a lower bound)", exact_duration(budget)),
        (Some(_), _) => format!("counted the first {cap} (a lower bound)"),
    };
    Ok(EntryEstimate { entries, at_least: cut_by.is_some(), method })
}

/// statfs and statvfs of `p`, and its device so the caller can name the
/// filesystem from the mount table.
fn read_fs_usage(p: &Path) -> Probe<(FsUsage, (u32, u32))> {
    let fs_info = nix::sys::statfs::statfs(p).map_err(|e| unreadable(e.into()))?;
    let vfs = nix::sys::statvfs::statvfs(p).map_err(|e| unreadable(e.into()))?;
    let dev = fs::metadata(p).map(|m| (libc::major(m.dev()), libc::minor(m.dev()))).unwrap_or((u32::MAX, u32::MAX));
    // Block counts are in fragment units; f_frsize equals f_bsize on nearly
    // every filesystem, and is the right unit where it does not.
    let unit = if vfs.fragment_size() != 0 { vfs.fragment_size() } else { vfs.block_size() };
    let usage = FsUsage {
        fstype: fstype_name(fs_info.filesystem_type().0 as u32),
        total_bytes: vfs.blocks() * unit,
        free_bytes: vfs.blocks_available() * unit,
        total_inodes: vfs.files(),
        free_inodes: vfs.files_free(),
        read_only: vfs.flags().contains(nix::sys::statvfs::FsFlags::ST_RDONLY),
    };
    Ok((usage, dev))
}

// ---- small pure helpers ----

fn fstype_name(magic: u32) -> String {
    let name = match magic {
        0x0102_1994 => "tmpfs",
        0xEF53 => "ext2/3/4",
        0x5846_5342 => "xfs",
        0x9123_683E => "btrfs",
        0x794C_7630 => "overlay",
        0x6969 => "nfs",
        0x6573_5546 => "fuse",
        0x6367_7270 => "cgroup2",
        0x0027_E0EB => "cgroup",
        0x9FA0 => "proc",
        0x6265_6572 => "sysfs",
        0x7371_7368 => "squashfs",
        0x2FC1_2FC1 => "zfs",
        0x00C3_6400 => "ceph",
        0x6E73_6673 => "nsfs",
        0x1CD1 => "devpts",
        0xCAFE_4A11 => "bpf",
        0x7472_6163 => "tracefs",
        0x6462_6720 => "debugfs",
        0xFF53_4D42 => "cifs",
        0xFE53_4D42 => "smb2",
        _ => return format!("{magic:#x}"),
    };
    name.to_string()
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
    let mut todo: std::collections::VecDeque<Vec<u8>> = path.split(|b| *b == b'/').map(<[u8]>::to_vec).collect();
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

/// A mount in another namespace that is a copy of `mount`: what `unshare
/// -m` or a container runtime leaves there.
fn is_copy(candidate: &Mount, mount: &Mount) -> bool {
    candidate.dev == mount.dev && candidate.root == mount.root && candidate.mount_point == mount.mount_point
}

fn path_of(bytes: &[u8]) -> &Path {
    Path::new(OsStr::from_bytes(bytes))
}

fn read_link(p: &Path) -> io::Result<Vec<u8>> {
    Ok(fs::read_link(p)?.into_os_string().into_vec())
}

/// The kernel appends " (deleted)" to the path of an unlinked file.
fn strip_deleted(path: &[u8]) -> &[u8] {
    path.strip_suffix(b" (deleted)").unwrap_or(path)
}

/// "mnt:[4026531841]" -> 4026531841.
fn parse_ns_link(link: &[u8]) -> Option<u64> {
    let s = std::str::from_utf8(link).ok()?;
    s.strip_prefix("mnt:[")?.strip_suffix(']')?.parse().ok()
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

/// "[<0>] fuse_simple_request+0x1a0/0x2c0 [fuse]" -> "fuse_simple_request".
fn frame_name(line: &str) -> Option<String> {
    let rest = line.find("] ").map_or(line, |i| &line[i + 2..]);
    let name = rest.trim_start().split(|c: char| c == '+' || c.is_whitespace()).next()?;
    (!name.is_empty()).then(|| name.to_string())
}

/// The value of `key` in a "key value" per line file (cgroup.events).
fn key_value<'t>(text: &'t str, key: &str) -> Option<&'t str> {
    text.lines().find_map(|l| {
        let (k, v) = l.split_once(' ')?;
        (k == key).then(|| v.trim())
    })
}

fn unreadable(e: io::Error) -> Unreadable {
    Unreadable(words(&e))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::inspect::mounts::mount_at;
    use crate::test_support::{is_root, missing, this_test, TempDir};
    use nix::mount::{mount, umount2, MntFlags, MsFlags};
    use nix::sys::signal::Signal;
    use podstuck_tests::{poll_until, CgroupDirs, Chattr, Process, TmpfsMount};
    use std::process::Command;

    fn b(p: &Path) -> &[u8] {
        p.as_os_str().as_bytes()
    }

    /// How long a test waits for the node to show what it made.
    const WAIT: Duration = Duration::from_secs(10);

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
        let flags = node.inode_flags(b(&locked)).unwrap();
        assert!(flags.immutable && !flags.append_only, "{flags:?}");
        assert_ne!(flags.raw & FS_IMMUTABLE_FL, 0);
        let flags = node.inode_flags(b(&appended)).unwrap();
        assert!(flags.append_only && !flags.immutable, "{flags:?}");
        let flags = node.inode_flags(b(&plain)).unwrap();
        assert!(!flags.immutable && !flags.append_only, "{flags:?}");
        assert!(node.inode_flags(b(&tmp.0)).is_ok(), "directories have flags too");

        let link = tmp.0.join("link");
        std::os::unix::fs::symlink(&locked, &link).unwrap();
        let err = node.inode_flags(b(&link)).unwrap_err();
        assert!(err.0.contains("symbolic link"), "{err}");
        let fifo = tmp.0.join("fifo");
        assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
        let err = node.inode_flags(b(&fifo)).unwrap_err();
        assert!(err.0.contains("FIFO"), "{err}");
        assert_eq!(node.inode_flags(b(&tmp.0.join("missing"))).unwrap_err().0, "no such file or directory");
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
        let facts = node.file_facts(b(&dir)).unwrap();
        assert!(facts.is_dir && facts.sticky, "{facts:?}");
        let facts = node.file_facts(b(&file)).unwrap();
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
        let usage = node.fs_usage(b(&mnt)).unwrap();
        assert_eq!(usage.fstype, "tmpfs");
        assert_eq!(usage.total_bytes, 1 << 20);
        assert!(usage.free_bytes <= usage.total_bytes - 64 * 1024, "{usage:?}");
        assert_eq!(usage.total_inodes, 100);
        assert!(usage.free_inodes < 100);
        assert!(!usage.read_only);
        assert!(node.fs_usage(b(&ro)).unwrap().read_only);
        assert_eq!(node.fs_usage(b(&tmp.0.join("missing"))).unwrap_err().0, "no such file or directory");
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
        let sample = node.dir_sample(b(&tree), 3).unwrap();
        assert_eq!(sample.names.len(), 3);
        // f0..f9, a, link, sub
        assert_eq!(sample.counted, 13);
        assert!(sample.complete);
        assert!(sample.names.iter().all(|n| n != b"." && n != b".."));

        // top 13 + a's 5 files and b + b's 2 files; nothing under sub or link.
        let estimate = node.remaining_entries(b(&tree)).unwrap();
        assert_eq!(estimate, EntryEstimate { entries: 21, at_least: false, method: "counted".into() });

        let capped = count_tree(&tree, WALK_BUDGET, 5).unwrap();
        assert!(capped.at_least && capped.entries == 5, "{capped:?}");
        let timed = count_tree(&tree, Duration::ZERO, WALK_ENTRY_CAP).unwrap();
        assert!(timed.at_least && timed.method.contains("lower bound"), "{timed:?}");

        assert_eq!(node.remaining_entries(b(&tree.join("f0"))).unwrap_err().0, "not a directory");
        assert_eq!(node.dir_sample(b(&tree.join("gone")), 3).unwrap_err().0, "no such file or directory");
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
        let estimate = count_tree(&tree, WALK_BUDGET, WALK_ENTRY_CAP).unwrap();
        // Even rows: the sample stands for the whole, exactly.
        assert_eq!(estimate.entries, 100 + 100 * 40, "{estimate:?}");
        assert!(!estimate.at_least && estimate.method.contains("scaled up"), "{estimate:?}");
    }

    /// The cgroup2 mount point, found from the mount table as on any node.
    fn cgroup_mount(node: &mut RealNode, fstype: &str, option: Option<&str>) -> Option<PathBuf> {
        node.host_mounts().ok()?.into_iter().find_map(|m| {
            let fits = m.fstype == fstype && option.is_none_or(|o| m.super_options.split(',').any(|x| x == o));
            fits.then(|| PathBuf::from(OsStr::from_bytes(&m.mount_point)))
        })
    }

    #[test]
    fn cgroup_v2_with_a_task_in_a_child_cgroup() {
        if !is_root() {
            return;
        }
        let mut node = RealNode::new(Node::direct());
        let Some(root) = cgroup_mount(&mut node, "cgroup2", None) else {
            return missing(
                &this_test(),
                "a cgroup2 mount",
                "mount -t cgroup2 none /sys/fs/cgroup/unified (or run on a cgroup v2 node)",
            );
        };
        let cg = root.join(format!("podstuck-test-{}", std::process::id()));
        let sub = cg.join("sub");
        let _dirs = CgroupDirs::create(&sub);
        let kid = Process::spawn(Command::new("sleep").arg("30"));
        fs::write(sub.join("cgroup.procs"), kid.pid().to_string()).unwrap();

        let state = node.cgroup(b(&cg)).unwrap();
        assert_eq!(state.version, 2);
        let task = state.tasks.iter().find(|t| t.pid == kid.pid()).expect("the child, found below");
        assert_eq!(task.comm, "sleep");
        assert_eq!(state.children, vec!["sub".to_string()]);
        assert_eq!(state.populated, Some(true));
        assert_eq!(state.frozen, Some(false));
        assert!(state.has_kill, "kernel 5.14+ has cgroup.kill");

        let inner = node.cgroup(b(&sub)).unwrap();
        assert!(inner.children.is_empty());
        assert_eq!(inner.tasks.iter().map(|t| t.pid).collect::<Vec<_>>(), vec![kid.pid()]);

        let err = node.cgroup(b(&std::env::temp_dir())).unwrap_err();
        assert!(err.0.starts_with("not a cgroup directory"), "{err}");
        drop(kid);
        let empty =
            poll_until("the cgroup to empty", WAIT, || node.cgroup(b(&cg)).ok().filter(|s| s.populated == Some(false)));
        assert!(empty.tasks.is_empty());
    }

    /// A v1 hierarchy mounted for a test where the node mounts none with
    /// the freezer (a cgroup v2 node still offers the v1 freezer), detached
    /// on drop.
    struct OwnHierarchy(TempDir);

    impl Drop for OwnHierarchy {
        fn drop(&mut self) {
            let _ = umount2(&self.0 .0, MntFlags::MNT_DETACH);
        }
    }

    /// A v1 freezer cgroup thawed on drop, also when the test fails: a
    /// frozen task is neither killed nor its cgroup removed.
    struct Thaw(PathBuf);

    impl Drop for Thaw {
        fn drop(&mut self) {
            let _ = fs::write(self.0.join("freezer.state"), "THAWED");
        }
    }

    #[test]
    fn cgroup_v1_freezer_says_frozen_and_thawed() {
        if !is_root() {
            return;
        }
        let mut node = RealNode::new(Node::direct());
        let mut own = None;
        let root = match cgroup_mount(&mut node, "cgroup", Some("freezer")) {
            Some(root) => root,
            None => {
                let dir = TempDir::new("freezer-v1");
                if let Err(e) = mount(Some("podstuck-test"), &dir.0, Some("cgroup"), MsFlags::empty(), Some("freezer"))
                {
                    return missing(
                        &this_test(),
                        &format!("a cgroup v1 freezer hierarchy (none mounted, and mounting one failed: {e})"),
                        "run it on a cgroup v1 or hybrid node, where the freezer is a v1 controller",
                    );
                }
                own.insert(OwnHierarchy(dir)).0 .0.clone()
            }
        };
        let cg = root.join(format!("podstuck-test-{}", std::process::id()));
        let _dirs = CgroupDirs::create(&cg);
        let kid = Process::spawn(Command::new("sleep").arg("30"));
        let _thaw = Thaw(cg.clone());
        fs::write(cg.join("cgroup.procs"), kid.pid().to_string()).unwrap();

        let state = node.cgroup(b(&cg)).unwrap();
        assert_eq!(state.version, 1);
        assert!(state.tasks.iter().any(|t| t.tid == kid.pid()));
        assert_eq!(state.frozen, Some(false));
        assert_eq!(state.populated, None);
        assert!(!state.has_kill);

        fs::write(cg.join("freezer.state"), "FROZEN").unwrap();
        let frozen = poll_until("the freezer to say FROZEN", WAIT, || {
            node.cgroup(b(&cg)).ok().filter(|s| s.frozen == Some(true))
        });
        assert!(frozen.tasks.iter().any(|t| t.tid == kid.pid()), "a frozen task is still a member");
        fs::write(cg.join("freezer.state"), "THAWED").unwrap();
        poll_until("the freezer to say THAWED", WAIT, || node.cgroup(b(&cg)).ok().filter(|s| s.frozen == Some(false)));
        drop(kid);
    }

    #[test]
    fn a_v1_cgroup_outside_the_freezer_reads_frozen_from_its_freezer_twin() {
        if !is_root() {
            return;
        }
        let mut node = RealNode::new(Node::direct());
        let (Some(memory), Some(freezer)) =
            (cgroup_mount(&mut node, "cgroup", Some("memory")), cgroup_mount(&mut node, "cgroup", Some("freezer")))
        else {
            return missing(
                &this_test(),
                "cgroup v1 memory and freezer hierarchies",
                "run it on a cgroup v1 or hybrid node (EKS AL2, RHEL 8; or mount -t cgroup -o memory and -o freezer)",
            );
        };
        let name = format!("podstuck-test-twin-{}", std::process::id());
        let (pod, pod_f) = (memory.join(&name), freezer.join(&name));
        let (ctr, ctr_f) = (pod.join("c"), pod_f.join("c"));
        let _dirs = (CgroupDirs::create(&ctr), CgroupDirs::create(&ctr_f));
        let kid = Process::spawn(Command::new("sleep").arg("30"));
        let _thaw = Thaw(ctr_f.clone());
        for dir in [&ctr, &ctr_f] {
            fs::write(dir.join("cgroup.procs"), kid.pid().to_string()).unwrap();
        }
        assert_eq!(node.cgroup(b(&pod)).unwrap().frozen, Some(false));
        fs::write(ctr_f.join("freezer.state"), "FROZEN").unwrap();
        let frozen = poll_until("the memory twin to read FROZEN", WAIT, || {
            node.cgroup(b(&ctr)).ok().filter(|s| s.frozen == Some(true))
        });
        let task = frozen.tasks.iter().find(|t| t.pid == kid.pid()).expect("the frozen task");
        // Sleeping on 5.10 (the report of issue 27), D on kernels whose
        // freezer parks tasks in TASK_FROZEN (6.1+): never "frozen".
        assert!(matches!(task.state, 'S' | 'D'), "a v1-frozen task reads as {}", task.state);
        let levels = node.v1_freezer(b(&pod)).unwrap();
        assert_eq!(
            levels,
            vec![
                FreezerLevel { dir: b(&pod_f).to_vec(), state: "THAWED".into(), pids: vec![] },
                FreezerLevel { dir: b(&ctr_f).to_vec(), state: "FROZEN".into(), pids: vec![kid.pid()] },
            ]
        );
        assert!(node.v1_freezer(b(&memory.join("no-such-cgroup"))).is_err());
        // Dropped in reverse: thawed, then killed (a frozen task ignores
        // SIGKILL, and waiting for it would hang), then removed.
    }

    /// The node as a container sees it through `--host-root` (setns
    /// refused): its `/` at a directory of its own. Its cgroups and v1
    /// freezer are read under that root, never in podstuck's own
    /// /sys/fs/cgroup (its cgroup namespace's, which holds none of the
    /// pods'), and the freezer's directories are named as the node spells
    /// them, where the fix that thaws them runs. Plain files stand for
    /// cgroupfs: the readers only read.
    #[test]
    fn through_a_host_root_cgroups_and_the_v1_freezer_are_read_under_it() {
        let host = TempDir::new("host-root-cgroups");
        let proc = TempDir::new("host-root-proc");
        let own = std::process::id();
        // The node's mount table, read as PID 1's; this process's entry as itself.
        fs::create_dir_all(proc.0.join("1")).unwrap();
        fs::write(
            proc.0.join("1/mountinfo"),
            "25 1 0:20 / /sys/fs/cgroup ro,nosuid - tmpfs tmpfs ro,mode=755\n\
             26 25 0:21 / /sys/fs/cgroup/unified rw,nosuid - cgroup2 cgroup2 rw,nsdelegate\n\
             27 25 0:22 / /sys/fs/cgroup/memory rw,nosuid - cgroup cgroup rw,memory\n\
             28 25 0:23 / /sys/fs/cgroup/freezer rw,nosuid - cgroup cgroup rw,freezer\n",
        )
        .unwrap();
        std::os::unix::fs::symlink(format!("/proc/{own}"), proc.0.join(own.to_string())).unwrap();
        let files = |dir: &str, entries: &[(&str, String)]| {
            let dir = host.0.join(dir.trim_start_matches('/'));
            fs::create_dir_all(&dir).unwrap();
            for (name, text) in entries {
                fs::write(dir.join(name), text).unwrap();
            }
        };
        let pod = format!("kubepods/podstuck-test-{own}");
        let v2 = format!("/sys/fs/cgroup/unified/{pod}");
        files(
            &v2,
            &[
                ("cgroup.procs", format!("{own}\n")),
                ("cgroup.controllers", String::new()),
                ("cgroup.events", "populated 1\nfrozen 0\n".into()),
                ("cgroup.freeze", "0\n".into()),
                ("cgroup.kill", String::new()),
            ],
        );
        files(&format!("{v2}/c1"), &[("cgroup.procs", String::new()), ("cgroup.controllers", String::new())]);
        let memory = format!("/sys/fs/cgroup/memory/{pod}");
        files(&memory, &[("tasks", format!("{own}\n")), ("cgroup.procs", format!("{own}\n"))]);
        let freezer = format!("/sys/fs/cgroup/freezer/{pod}");
        files(&freezer, &[("freezer.state", "FROZEN\n".into()), ("cgroup.procs", format!("{own}\n"))]);
        files(&format!("{freezer}/c1"), &[("freezer.state", "FROZEN\n".into()), ("cgroup.procs", String::new())]);
        for raw in [&v2, &memory, &freezer] {
            assert!(!Path::new(raw).exists(), "{raw} must exist only under the host root");
        }
        let view: &'static Node = Box::leak(Box::new(Node::through(&host.0, 1)));
        let mut node = RealNode::with_proc_root(view, proc.0.clone());

        let state = node.cgroup(v2.as_bytes()).unwrap();
        assert_eq!(state.version, 2);
        assert_eq!(state.tasks.iter().map(|t| t.pid).collect::<Vec<_>>(), vec![own]);
        assert_eq!(state.children, vec!["c1".to_string()]);
        assert_eq!((state.populated, state.frozen, state.has_kill), (Some(true), Some(false), true));

        // A v1 memory cgroup is frozen when its freezer twin is, read under the root too.
        let state = node.cgroup(memory.as_bytes()).unwrap();
        assert_eq!((state.version, state.frozen), (1, Some(true)));
        assert_eq!(state.tasks.iter().map(|t| t.tid).collect::<Vec<_>>(), vec![own]);
        let levels = node.v1_freezer(memory.as_bytes()).unwrap();
        assert_eq!(
            levels,
            vec![
                FreezerLevel { dir: freezer.clone().into_bytes(), state: "FROZEN".into(), pids: vec![own] },
                FreezerLevel { dir: format!("{freezer}/c1").into_bytes(), state: "FROZEN".into(), pids: vec![] },
            ]
        );
        let gone = node.v1_freezer(b"/sys/fs/cgroup/memory/kubepods/no-such-pod").unwrap_err();
        assert!(gone.0.starts_with("/sys/fs/cgroup/freezer/kubepods/no-such-pod: "), "the node's spelling: {gone}");
    }

    #[test]
    fn task_of_a_sleeping_child_and_of_a_thread() {
        if !is_root() {
            return;
        }
        let kid = Process::spawn(Command::new("sleep").arg("30"));
        let mut node = RealNode::new(Node::direct());
        // Right after exec it may sleep briefly elsewhere (loading, page
        // faults) and run in between, when wchan reads "0".
        let task = poll_until("the child asleep in nanosleep with a wchan", WAIT, || {
            node.task(kid.pid()).ok().filter(|t| t.state == 'S' && t.comm == "sleep" && t.wchan.is_some())
        });
        assert_eq!((task.tid, task.pid), (kid.pid(), kid.pid()));
        assert_eq!(task.state_words(), "S (sleeping)");
        assert!(task.wchan.as_deref().is_some_and(|w| w.contains("sleep")), "{task:?}");
        assert!(task.stack.iter().all(|f| !f.is_empty() && !f.contains(['+', '[', ' '])), "{:?}", task.stack);

        let tid = nix::unistd::gettid().as_raw() as u32;
        assert_eq!(node.task(tid).unwrap().pid, std::process::id());
        assert_eq!(node.task(u32::MAX).unwrap_err().0, "no such process");
    }

    #[test]
    fn fuse_servers_are_processes_with_dev_fuse_open() {
        if !is_root() {
            return;
        }
        if !Path::new("/dev/fuse").exists() {
            return missing(&this_test(), "/dev/fuse", "modprobe fuse (or run on a machine with FUSE)");
        }
        let kid = Process::spawn(Command::new("sh").args(["-c", "exec 3<>/dev/fuse; exec sleep 30"]));
        let mut node = RealNode::new(Node::direct());
        let server = poll_until("the child as a FUSE server", WAIT, || {
            node.fuse_servers().into_iter().find(|t| t.pid == kid.pid() && t.comm == "sleep")
        });
        assert_eq!(server.tid, server.pid);
    }

    #[test]
    fn the_host_mount_table_is_podstucks_own_namespace() {
        let mut node = RealNode::new(Node::direct());
        let host = node.host_mounts().unwrap();
        assert!(host.iter().any(|m| m.mount_point == b"/"));
        let own = node.own_mntns().unwrap();
        for asked in [0, own] {
            let ns = node.mount_namespace(asked).unwrap();
            assert!(ns.host);
            assert_eq!(ns.words(), "the host's mount namespace");
            assert!(ns.mounts.iter().any(|m| m.mount_point == b"/"));
        }
    }

    #[test]
    fn a_namespace_is_read_through_a_member_and_never_replaced_by_the_hosts() {
        use std::os::unix::fs::symlink;
        let tmp = TempDir::new("fakeproc-ns");
        fake_proc(&tmp.0);
        // Kubelet in a container: it lives in the namespace beside its
        // init, whose pid is lower; the volume is mounted there only.
        let put = |rel: &str, text: &str| {
            let p = tmp.0.join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        };
        for (pid, comm) in [(500, "systemd"), (600, "kubelet")] {
            fs::create_dir_all(tmp.0.join(format!("{pid}/ns"))).unwrap();
            symlink("mnt:[4000]", tmp.0.join(format!("{pid}/ns/mnt"))).unwrap();
            put(&format!("{pid}/comm"), &format!("{comm}\n"));
        }
        let table =
            "9 8 0:60 / / rw - overlay overlay rw\n90 9 0:61 / /var/lib/kubelet/pods/p/volumes/v rw - tmpfs tmpfs rw\n";
        put("500/mountinfo", table);
        put("600/mountinfo", table);
        let mut node = RealNode::with_proc_root(Node::direct(), tmp.0.clone());
        let ns = node.mount_namespace(4000).unwrap();
        assert!(!ns.host);
        assert_eq!((ns.member, ns.member_comm.as_str()), (600, "kubelet"));
        assert_eq!(ns.words(), "kubelet's mount namespace mnt:[4000]");
        assert!(mount_at(&ns.mounts, b"/var/lib/kubelet/pods/p/volumes/v").is_some());
        // The mount's holders are judged against its own namespace.
        link_cwd(&tmp.0, 500, "/var/lib/kubelet/pods/p/volumes/v/data");
        let mount = mount_at(&ns.mounts, b"/var/lib/kubelet/pods/p/volumes/v").cloned().unwrap();
        let holders = node.mount_holders(&mount, 4000);
        assert!(holders.iter().any(|h| h.pid == 500 && !h.other_namespace), "{holders:?}");
        // Kubelet gone: its init still keeps the namespace readable.
        fs::remove_dir_all(tmp.0.join("600")).unwrap();
        let ns = node.mount_namespace(4000).unwrap();
        assert_eq!((ns.member, ns.words().as_str()), (500, "mount namespace mnt:[4000] of pid 500 (systemd)"));
        // Nobody left: said as such, not the host's table.
        fs::remove_dir_all(tmp.0.join("500")).unwrap();
        assert_eq!(node.mount_namespace(4000), Err(namespace_gone(4000)));
        assert_eq!(
            node.mount_namespace(4242).unwrap_err().0,
            "no process is left in mount namespace mnt:[4242], so its mounts cannot be read"
        );
    }

    fn link_cwd(proc: &Path, pid: u32, to: &str) {
        std::os::unix::fs::symlink(to, proc.join(pid.to_string()).join("cwd")).unwrap();
        std::os::unix::fs::symlink("/", proc.join(pid.to_string()).join("root")).unwrap();
    }

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

    /// A /proc made of plain files and symlinks: two namespaces, one with a
    /// copy of the mount and one without.
    fn fake_proc(root: &Path) {
        use std::os::unix::fs::symlink;
        let put = |rel: &str, text: &str| {
            let p = root.join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            fs::write(p, text).unwrap();
        };
        let link = |rel: &str, target: &str| {
            let p = root.join(rel);
            fs::create_dir_all(p.parent().unwrap()).unwrap();
            symlink(target, p).unwrap();
        };
        put("self/mountinfo", "1 0 8:1 / / rw - ext4 /dev/sda1 rw\n50 1 0:50 / /vol rw - tmpfs tmpfs rw\n");
        link("self/ns/mnt", "mnt:[1000]");
        // Host namespace: cwd, an open file, a socket, a mapped library.
        link("100/ns/mnt", "mnt:[1000]");
        put("100/comm", "holder\n");
        link("100/cwd", "/vol/dir");
        link("100/root", "/");
        link("100/fd/3", "/vol/file");
        put("100/fdinfo/3", "pos:\t0\nflags:\t0100000\nmnt_id:\t50\nino:\t7\n");
        link("100/fd/4", "socket:[123]");
        put("100/fdinfo/4", "pos:\t0\nflags:\t02\nmnt_id:\t9\n");
        put(
            "100/maps",
            "55d0-55d1 r-xp 00000000 08:01 12 /usr/bin/holder\n\
             7f00-7f01 r-xp 00000000 00:32 33                         /vol/lib.so (deleted)\n\
             7ffd-7ffe rw-p 00000000 00:00 0                          [stack]\n",
        );
        // A container with a copy of /vol, whose cwd was deleted.
        link("200/ns/mnt", "mnt:[2000]");
        put("200/comm", "other\n");
        put("200/mountinfo", "7 6 8:1 / / rw - ext4 /dev/sda1 rw\n70 7 0:50 / /vol rw master:5 - tmpfs tmpfs rw\n");
        link("200/cwd", "/vol/x (deleted)");
        link("200/root", "/");
        // A container without /vol: its /vol is its own directory.
        link("300/ns/mnt", "mnt:[3000]");
        put("300/comm", "bystander\n");
        put("300/mountinfo", "8 6 8:1 /c / rw - ext4 /dev/sda1 rw\n");
        link("300/cwd", "/vol");
        link("300/root", "/");
        // Gone between the listing and the reads.
        fs::create_dir_all(root.join("400")).unwrap();
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

    #[test]
    fn task_from_a_fake_proc_with_an_awkward_comm() {
        let tmp = TempDir::new("faketask");
        let dir = tmp.0.join("4242");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("stat"), "4242 (we) ird (x) D 1 4242 4242 0 -1 4194560 0 0\n").unwrap();
        fs::write(dir.join("status"), "Name:\twe) ird (x\nState:\tD (disk sleep)\nTgid:\t4240\nPid:\t4242\n").unwrap();
        fs::write(dir.join("wchan"), "0").unwrap();
        fs::write(
            dir.join("stack"),
            "[<0>] fuse_simple_request+0x1a0/0x2c0 [fuse]\n[<0>] fuse_lookup_name+0xe8/0x200 [fuse]\n",
        )
        .unwrap();
        let mut node = RealNode::with_proc_root(Node::direct(), tmp.0.clone());
        let task = node.task(4242).unwrap();
        assert_eq!(
            task,
            TaskState {
                tid: 4242,
                pid: 4240,
                comm: "we) ird (x".into(),
                state: 'D',
                wchan: None,
                stack: vec!["fuse_simple_request".into(), "fuse_lookup_name".into()],
            }
        );
    }

    /// Why the /proc files of other processes are read here and not with
    /// the procfs crate. A process chooses its own name, bytes that are
    /// not UTF-8 included, and the kernel writes them raw into status:
    /// procfs refuses that status whole (its Tgid with it). And procfs's
    /// stat reader slices by the parentheses it finds, so a line cut short
    /// panics it, where a diagnosis must go on; podstuck's reader takes
    /// any bytes (the property tests below): what a cut line still says,
    /// or None for a line with no name or no state.
    #[test]
    fn procfs_refuses_a_hostile_status_and_panics_on_a_cut_stat_where_podstuck_reads_what_is_there() {
        use procfs::{FromBufRead, FromRead};
        let status = b"Name:\tx\xff\nUmask:\t0022\nState:\tD (disk sleep)\nTgid:\t4240\nNgid:\t0\nPid:\t4242\nPPid:\t1\nTracerPid:\t0\n\
Uid:\t0\t0\t0\t0\nGid:\t0\t0\t0\t0\nFDSize:\t64\nGroups:\t\n";
        assert!(procfs::process::Status::from_buf_read(&status[..]).is_err(), "procfs refuses the whole status");
        let tmp = TempDir::new("utf8comm");
        let dir = tmp.0.join("4242");
        fs::create_dir_all(&dir).unwrap();
        fs::write(dir.join("stat"), b"4242 (x\xff) D 1 4242 4242 0 -1 4194560 0 0\n").unwrap();
        fs::write(dir.join("status"), status).unwrap();
        let task = RealNode::with_proc_root(Node::direct(), tmp.0.clone()).task(4242).unwrap();
        assert_eq!((task.pid, task.comm.as_str(), task.state), (4240, crate::words::safe_text(b"x\xff").as_str(), 'D'));

        let read = |comm: &str, state, ppid| Some(TaskStat { comm: comm.into(), state, ppid });
        let cuts = [(&b"4242 (x)"[..], None), (&b"(x) R"[..], read("x", 'R', None)), (&b"4242 )x( R"[..], None)];
        for (cut, ours) in cuts {
            assert_eq!(parse_stat(cut), ours, "podstuck's reading of {:?}", String::from_utf8_lossy(cut));
            let theirs = std::panic::catch_unwind(|| procfs::process::Stat::from_read(cut));
            assert!(theirs.is_err(), "procfs's stat reader panics on {:?}", String::from_utf8_lossy(cut));
        }
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
    fn small_parsers() {
        assert_eq!(parse_ns_link(b"mnt:[4026531841]"), Some(4026531841));
        assert_eq!(parse_ns_link(b"net:[1]"), None);
        assert_eq!(strip_deleted(b"/a/b (deleted)"), b"/a/b");
        assert_eq!(
            parse_maps_line(b"7f00-7f01 r-xp 00000000 fd:01 33   /usr/lib/x y.so"),
            Some(((0xfd, 1), &b"/usr/lib/x y.so"[..]))
        );
        assert_eq!(parse_maps_line(b"7f00-7f01 rw-p 00000000 00:00 0"), None);
        assert_eq!(frame_name("[<0>] do_nanosleep+0x67/0x190"), Some("do_nanosleep".into()));
        assert_eq!(key_value("populated 1\nfrozen 0\n", "frozen"), Some("0"));
        assert_eq!(fstype_name(0xEF53), "ext2/3/4");
        assert_eq!(fstype_name(0x1234), "0x1234");
        assert_eq!(words(&io::Error::from_raw_os_error(libc::EACCES)), "permission denied");
        assert_eq!(exact_duration(Duration::from_millis(1500)), "1500 ms");
    }

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
