//! Node state that the pathology scenarios need beyond a tmpfs and an
//! immutable file: helper processes that hold something (a cwd, a file, a
//! mount namespace, a cgroup), a FUSE filesystem whose daemon can be
//! stopped, bind, read-only and overlay mounts, shared propagation.
//!
//! Every guard undoes its state on drop, including after a failed
//! assertion, and never blocks a test forever doing so: a test that leaves
//! a mount or a stopped FUSE daemon behind breaks every later run on the
//! machine.

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::mount::{mount, umount2, MntFlags, MsFlags};

use crate::is_mountpoint;

/// A helper process (the actor, the FUSE server) whose stdout is collected
/// line by line; killed and reaped on drop.
pub struct Process {
    child: Child,
    lines: Arc<Mutex<Vec<String>>>,
    reader: Option<std::thread::JoinHandle<()>>,
    what: String,
}

impl Process {
    pub fn spawn(command: &mut Command) -> Process {
        let what = format!("{command:?}");
        let mut child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap_or_else(|e| panic!("spawn {what}: {e}"));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        let out = child.stdout.take().unwrap();
        let reader = std::thread::spawn(move || {
            for line in BufReader::new(out).lines().map_while(Result::ok) {
                sink.lock().unwrap().push(line);
            }
        });
        Process { child, lines, reader: Some(reader), what }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// What it printed so far.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap().clone()
    }

    /// Waits until it has printed at least `n` lines; returns them all.
    pub fn wait_for_lines(&self, n: usize, timeout: Duration) -> Vec<String> {
        let deadline = Instant::now() + timeout;
        loop {
            let lines = self.lines();
            if lines.len() >= n {
                return lines;
            }
            assert!(
                Instant::now() < deadline,
                "{} printed {} of {n} lines within {timeout:?}: {lines:?}",
                self.what,
                lines.len()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits until it prints `want`; false if it has not within `timeout`.
    pub fn wait_for_line(&self, want: &str, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        while !self.lines().iter().any(|l| l == want) {
            if Instant::now() >= deadline {
                return false;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        true
    }

    /// Waits for "ready": the helper's hold is in place.
    pub fn wait_ready(&self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        while !self.lines().iter().any(|l| l == "ready") {
            assert!(Instant::now() < deadline, "{} not ready within {timeout:?}: {:?}", self.what, self.lines());
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Waits for it to exit by itself; returns its status and every line.
    pub fn finish(mut self, timeout: Duration) -> (ExitStatus, Vec<String>) {
        let deadline = Instant::now() + timeout;
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("wait") {
                break status;
            }
            assert!(Instant::now() < deadline, "{} did not finish within {timeout:?}", self.what);
            std::thread::sleep(Duration::from_millis(20));
        };
        if let Some(reader) = self.reader.take() {
            let _ = reader.join();
        }
        (status, self.lines())
    }

    pub fn signal(&self, signal: i32) {
        // SAFETY: kill(2) on our own, not yet reaped, child.
        unsafe { libc::kill(self.pid() as i32, signal) };
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        // Already reaped (finish): its pid may belong to someone else now.
        if !matches!(self.child.try_wait(), Ok(None)) {
            return;
        }
        // SIGKILL ends a stopped process too; SIGCONT is for the helpers
        // that catch nothing and should not stay stopped if the kill is lost.
        self.signal(libc::SIGCONT);
        let _ = self.child.kill();
        // A task stuck in an uninterruptible wait ignores SIGKILL: give up
        // after a while rather than hang the whole test run. The FUSE guard
        // (or whatever held it) releases it later, and init reaps it.
        let deadline = Instant::now() + Duration::from_secs(10);
        while Instant::now() < deadline {
            if !matches!(self.child.try_wait(), Ok(None)) {
                return;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        eprintln!("warning: {} did not die within 10 s of SIGKILL; leaving it", self.what);
    }
}

/// A task's state letter from /proc/PID/stat (R, S, D, T, Z...).
pub fn task_state(pid: u32) -> Option<char> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may contain spaces and parentheses: the state
    // follows the last ')'.
    stat.rsplit_once(')')?.1.trim_start().chars().next()
}

/// The kernel function a task sleeps in (/proc/PID/wchan), if any.
pub fn wchan(pid: u32) -> String {
    std::fs::read_to_string(format!("/proc/{pid}/wchan")).unwrap_or_default()
}

/// The mountinfo line whose mount point is `path`, split into fields.
fn mountinfo_fields(path: &Path) -> Option<Vec<String>> {
    let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let wanted = path.to_string_lossy();
    // The last one: a later mount on the same point hides the earlier.
    mountinfo
        .lines()
        .rev()
        .find(|l| l.split(' ').nth(4) == Some(wanted.as_ref()))
        .map(|l| l.split(' ').map(str::to_string).collect())
}

/// The device number (major, minor) of the filesystem mounted at `path`,
/// read from mountinfo: stat(2) would ask a stopped FUSE daemon and hang.
pub fn mount_device(path: &Path) -> Option<(u32, u32)> {
    let fields = mountinfo_fields(path)?;
    let (major, minor) = fields.get(2)?.split_once(':')?;
    Some((major.parse().ok()?, minor.parse().ok()?))
}

const FUSECTL: &str = "/sys/fs/fuse/connections";

/// The FUSE test filesystem (`fuse_server`) mounted at a directory. The
/// test may stop its daemon; on drop the connection is aborted first (which
/// fails every call waiting on it), then the daemon is killed and the mount
/// detached.
///
/// Why in that order: while a call is stuck inside, umount2(path, 0) fails
/// with EBUSY at once, and umount(8) hangs in its stat() of the mountpoint
/// (a GETATTR to the stopped daemon); a lazy unmount succeeds but leaves
/// the stuck call stuck. Only the abort frees the callers.
pub struct FuseMount {
    mountpoint: PathBuf,
    minor: u32,
    server: Option<Process>,
    aborted: bool,
}

impl FuseMount {
    /// Starts `server` (the fuse_server binary) on `mountpoint` and waits
    /// until the kernel's INIT is answered.
    pub fn start(server: &Path, mountpoint: &Path) -> FuseMount {
        std::fs::create_dir_all(mountpoint).expect("create FUSE mountpoint");
        let process = Process::spawn(Command::new(server).arg(mountpoint));
        let mut fuse = FuseMount { mountpoint: mountpoint.to_path_buf(), minor: 0, server: Some(process), aborted: false };
        fuse.server.as_ref().unwrap().wait_ready(Duration::from_secs(10));
        let (major, minor) = mount_device(mountpoint).expect("the FUSE mount in mountinfo");
        assert_eq!(major, 0, "FUSE mounts get an anonymous device");
        fuse.minor = minor;
        fuse
    }

    /// The connection's number under /sys/fs/fuse/connections: the minor of
    /// the mount's anonymous device.
    pub fn connection(&self) -> u32 {
        self.minor
    }

    pub fn server_pid(&self) -> u32 {
        self.server.as_ref().unwrap().pid()
    }

    /// SIGSTOP the daemon: every later call into the mount waits for it.
    pub fn stop_server(&self) {
        self.server.as_ref().unwrap().signal(libc::SIGSTOP);
        let pid = self.server_pid();
        let deadline = Instant::now() + Duration::from_secs(5);
        while task_state(pid) != Some('T') {
            assert!(Instant::now() < deadline, "FUSE server {pid} did not stop");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    /// Aborts the connection, as `echo 1 > /sys/fs/fuse/connections/N/abort`
    /// does: waiting calls fail (ENOTCONN/ECONNABORTED) instead of hanging.
    /// Mounts fusectl for the moment if it is not mounted.
    pub fn abort(&mut self) {
        if self.aborted {
            return;
        }
        self.aborted = true;
        let fusectl = Path::new(FUSECTL);
        let mounted_here = !is_mountpoint(fusectl)
            && mount(Some("fusectl"), fusectl, Some("fusectl"), MsFlags::empty(), None::<&str>).is_ok();
        let abort = fusectl.join(self.minor.to_string()).join("abort");
        if let Err(e) = std::fs::write(&abort, "1") {
            eprintln!("warning: abort FUSE connection {}: {e}", abort.display());
        }
        if mounted_here {
            let _ = umount2(fusectl, MntFlags::MNT_DETACH);
        }
    }
}

impl Drop for FuseMount {
    fn drop(&mut self) {
        self.abort();
        // Process's drop sends SIGCONT and SIGKILL and reaps it.
        drop(self.server.take());
        let _ = umount2(&self.mountpoint, MntFlags::MNT_DETACH);
    }
}

/// A bind mount (`mount --bind SOURCE TARGET`), optionally read-only;
/// detached on drop.
pub struct BindMount(pub PathBuf);

impl BindMount {
    pub fn new(source: &Path, target: &Path) -> BindMount {
        if source.is_dir() {
            std::fs::create_dir_all(target).expect("create bind target");
        }
        mount(Some(source), target, None::<&str>, MsFlags::MS_BIND, None::<&str>)
            .unwrap_or_else(|e| panic!("bind {} on {}: {e}", source.display(), target.display()));
        BindMount(target.to_path_buf())
    }

    /// `mount --bind` then `mount -o remount,bind,ro`: a bind mount can
    /// only become read-only by a second, remounting call.
    pub fn read_only(source: &Path, target: &Path) -> BindMount {
        let bind = BindMount::new(source, target);
        let flags = MsFlags::MS_BIND | MsFlags::MS_REMOUNT | MsFlags::MS_RDONLY;
        mount(None::<&str>, target, None::<&str>, flags, None::<&str>)
            .unwrap_or_else(|e| panic!("remount {} read-only: {e}", target.display()));
        bind
    }

    /// A directory bind-mounted on itself: a mount of its own, so that its
    /// propagation can differ from the (private) root's.
    pub fn onto_itself(dir: &Path) -> BindMount {
        std::fs::create_dir_all(dir).expect("create dir");
        BindMount::new(dir, dir)
    }
}

impl Drop for BindMount {
    fn drop(&mut self) {
        let _ = umount2(&self.0, MntFlags::MNT_DETACH);
    }
}

/// An overlay mount (docker's overlay2 layout: lower layers, an upper
/// `diff`, a `work` dir on the same filesystem); detached on drop.
pub struct OverlayMount(pub PathBuf);

impl OverlayMount {
    pub fn new(lower: &Path, upper: &Path, work: &Path, merged: &Path) -> OverlayMount {
        for dir in [upper, work, merged] {
            std::fs::create_dir_all(dir).expect("create overlay dir");
        }
        let options = format!("lowerdir={},upperdir={},workdir={}", lower.display(), upper.display(), work.display());
        mount(Some("overlay"), merged, Some("overlay"), MsFlags::empty(), Some(options.as_str()))
            .unwrap_or_else(|e| panic!("mount overlay at {} ({options}): {e}", merged.display()));
        OverlayMount(merged.to_path_buf())
    }
}

impl Drop for OverlayMount {
    fn drop(&mut self) {
        let _ = umount2(&self.0, MntFlags::MNT_DETACH);
    }
}

/// Makes the mount at `path` shared (`mount --make-shared`), as systemd
/// makes every mount on a real node. Only a mount whose parent is shared
/// makes the host's umount2 fail while another namespace's copy is busy;
/// this machine's root is private, so a scenario shares a mount of its
/// own and mounts below it. Undone when that mount is detached.
pub fn make_shared(path: &Path) {
    mount(None::<&str>, path, None::<&str>, MsFlags::MS_SHARED, None::<&str>)
        .unwrap_or_else(|e| panic!("make {} shared: {e}", path.display()));
}

/// Creates empty files in `dir` until the filesystem has no inode left;
/// returns how many it made.
pub fn fill_inodes(dir: &Path) -> usize {
    std::fs::create_dir_all(dir).expect("create filler dir");
    let mut made = 0;
    loop {
        match std::fs::File::create(dir.join(format!("filler-{made:06}"))) {
            Ok(_) => made += 1,
            Err(e) if e.raw_os_error() == Some(libc::ENOSPC) => return made,
            Err(e) => panic!("fill {}: {e}", dir.display()),
        }
    }
}
