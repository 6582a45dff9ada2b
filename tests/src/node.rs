//! The node state a scenario makes and must undo: tmpfs, bind, read-only,
//! overlay and FUSE mounts (a FUSE daemon that can be stopped), shared
//! propagation, immutable files, cgroups, directories made under a root
//! that may already exist, a filesystem out of inodes; and what mountinfo
//! says of a mount.
//!
//! Every guard undoes its state on drop, including after a failed
//! assertion, and never blocks a test forever doing so: a test that leaves
//! a mount, a flag or a stopped FUSE daemon behind breaks every later run
//! on the machine.

use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use nix::mount::{mount, umount2, MntFlags, MsFlags};

use crate::actors::{fuse_server, start_actor, task_state, Process};
use crate::kubelet::{new_pod_uid, pod_slice};
use crate::mountinfo::{self, is_mountpoint};
use crate::wait::{poll_until_else, wait_until, within};

/// A tmpfs mounted at a fresh directory; lazily unmounted on drop.
pub struct TmpfsMount(pub PathBuf);

impl TmpfsMount {
    pub fn new(at: &Path, options: &str) -> TmpfsMount {
        TmpfsMount::with_flags(at, options, MsFlags::empty())
    }

    /// A tmpfs mounted read-only from the start (`mount -o ro`).
    pub fn read_only(at: &Path, options: &str) -> TmpfsMount {
        TmpfsMount::with_flags(at, options, MsFlags::MS_RDONLY)
    }

    fn with_flags(at: &Path, options: &str, flags: MsFlags) -> TmpfsMount {
        std::fs::create_dir_all(at).expect("create mountpoint");
        mount(Some("podstuck-test"), at, Some("tmpfs"), flags, Some(options))
            .unwrap_or_else(|e| panic!("mount tmpfs at {}: {e}", at.display()));
        TmpfsMount(at.to_path_buf())
    }
}

impl Drop for TmpfsMount {
    fn drop(&mut self) {
        let _ = umount2(&self.0, MntFlags::MNT_DETACH);
    }
}

/// `chattr +i` on a file, undone on drop.
pub struct Immutable(pub Chattr);

impl Immutable {
    pub fn set(path: &Path) -> Immutable {
        let flag = Chattr::set(path, 'i');
        Immutable(flag.unwrap_or_else(|| panic!("chattr +i {}", path.display())))
    }
}

/// An inode flag set with `chattr +FLAG` (`i` immutable, `a` append-only),
/// cleared on drop.
pub struct Chattr {
    path: PathBuf,
    flag: char,
}

impl Chattr {
    /// None where the filesystem refuses the flag: a test that needs one
    /// says what is missing rather than failing on a tmpfs before Linux 6.0.
    pub fn set(path: &Path, flag: char) -> Option<Chattr> {
        let status = Command::new("chattr").arg(format!("+{flag}")).arg(path).status().expect("run chattr");
        status.success().then(|| Chattr { path: path.to_path_buf(), flag })
    }
}

impl Drop for Chattr {
    fn drop(&mut self) {
        // A test may have cleared the flag and removed the file itself.
        if self.path.symlink_metadata().is_err() {
            return;
        }
        let _ = Command::new("chattr").arg(format!("-{}", self.flag)).arg(&self.path).status();
    }
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
    /// Starts the fuse_server binary on `mountpoint` and waits until the
    /// kernel's INIT is answered.
    pub fn start(mountpoint: &Path) -> FuseMount {
        FuseMount::start_with(&fuse_server(), mountpoint)
    }

    /// As [`FuseMount::start`], with the server binary at `server` (the
    /// soak, which `cargo xtask soak` hands release builds).
    pub fn start_with(server: &Path, mountpoint: &Path) -> FuseMount {
        FuseMount::started(Command::new(server).arg(mountpoint), mountpoint)
    }

    /// As [`FuseMount::start`], the kernel keeping the root's attributes
    /// (`fuse_server --root-attr-valid`): a stat of the root needs no
    /// answer, so a caller walking into the mount waits at the lookup
    /// below it, on the root's lock if another call holds it.
    pub fn start_keeping_root_attributes(mountpoint: &Path) -> FuseMount {
        FuseMount::started(Command::new(fuse_server()).args(["--root-attr-valid", "3600"]).arg(mountpoint), mountpoint)
    }

    /// As [`FuseMount::start`], the server holding the first STATFS
    /// unanswered (`fuse_server --stall-first-statfs`) until
    /// [`FuseMount::answer_stalled_statfs`], and answering every other
    /// request, later STATFSes too: a caller's statfs stays stuck while
    /// the filesystem answers others.
    pub fn start_stalling_first_statfs(mountpoint: &Path) -> FuseMount {
        FuseMount::started(Command::new(fuse_server()).arg("--stall-first-statfs").arg(mountpoint), mountpoint)
    }

    fn started(command: &mut Command, mountpoint: &Path) -> FuseMount {
        std::fs::create_dir_all(mountpoint).expect("create FUSE mountpoint");
        let process = Process::spawn(command);
        let mut fuse =
            FuseMount { mountpoint: mountpoint.to_path_buf(), minor: 0, server: Some(process), aborted: false };
        fuse.server.as_ref().unwrap().wait_ready(Duration::from_secs(10));
        let (major, minor) = mountinfo::at(mountpoint).expect("the FUSE mount in mountinfo").device;
        assert_eq!(major, 0, "FUSE mounts get an anonymous device");
        fuse.minor = minor;
        fuse
    }

    /// The connection's number under /sys/fs/fuse/connections: the minor of
    /// the mount's anonymous device.
    pub fn connection(&self) -> u32 {
        self.minor
    }

    /// Waits until the server has read `n` requests it will never answer
    /// (a LOOKUP of `never`: the "held" lines it prints). Only then does a
    /// SIGKILLed caller wait uninterruptibly: before, its request is still
    /// pending in the kernel, and the kill takes it back and ends it.
    pub fn wait_held(&self, n: usize, timeout: Duration) {
        let server = self.server.as_ref().unwrap();
        poll_until_else(&format!("the FUSE server to hold {n} request(s) unanswered"), timeout, || {
            let lines = server.lines();
            match lines.iter().filter(|l| l.starts_with("held ")).count() >= n {
                true => Ok(()),
                false => Err(format!("it printed: {lines:?}")),
            }
        });
    }

    pub fn server_pid(&self) -> u32 {
        self.server.as_ref().unwrap().pid()
    }

    /// SIGSTOP the daemon: every later call into the mount waits for it.
    pub fn stop_server(&self) {
        stop_and_wait(self.server.as_ref().unwrap());
    }

    /// SIGCONT the daemon: it answers what waited, and what comes.
    pub fn continue_server(&self) {
        self.server.as_ref().unwrap().signal(libc::SIGCONT);
    }

    /// The STATFS held since [`FuseMount::start_stalling_first_statfs`] is
    /// answered (SIGUSR1 to the daemon): its caller returns.
    pub fn answer_stalled_statfs(&self) {
        self.server.as_ref().unwrap().signal(libc::SIGUSR1);
    }

    /// Aborts the connection, as `echo 1 > /sys/fs/fuse/connections/N/abort`
    /// does: waiting calls fail (ENOTCONN/ECONNABORTED) instead of hanging.
    /// Mounts fusectl for the moment if it is not mounted.
    pub fn abort(&mut self) {
        if self.aborted {
            return;
        }
        self.aborted = true;
        abort_connection(self.minor);
    }
}

/// Aborts FUSE connection `minor`, as `echo 1 > /sys/fs/fuse/connections/N/abort`
/// does, mounting fusectl for the moment if it is not mounted.
fn abort_connection(minor: u32) {
    let fusectl = Path::new(FUSECTL);
    let mounted_here = !is_mountpoint(fusectl)
        && mount(Some("fusectl"), fusectl, Some("fusectl"), MsFlags::empty(), None::<&str>).is_ok();
    let abort = fusectl.join(minor.to_string()).join("abort");
    if let Err(e) = std::fs::write(&abort, "1") {
        eprintln!("warning: abort FUSE connection {}: {e}", abort.display());
    }
    if mounted_here {
        let _ = umount2(fusectl, MntFlags::MNT_DETACH);
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

/// SIGSTOP a FUSE server and wait until it is stopped.
fn stop_and_wait(server: &Process) {
    server.signal(libc::SIGSTOP);
    let pid = server.pid();
    wait_until(&format!("FUSE server {pid} to stop"), Duration::from_secs(5), || task_state(pid) == Some('T'));
}

/// Debian's `bindfs`, mirroring a directory at a mountpoint through FUSE
/// (the network or FUSE volume of the pod in a test): run in the
/// foreground so that a test can stop its server (SIGSTOP: every call
/// into the mount waits) and continue it (SIGCONT: the calls are
/// answered, late). On drop the connection is aborted, the server killed
/// and the mount detached, whatever state the test left it in.
pub struct Bindfs {
    mountpoint: PathBuf,
    minor: u32,
    server: Option<Process>,
}

impl Bindfs {
    /// `bindfs -f SOURCE MOUNTPOINT`, once its mount is in the table;
    /// None (the test fails, or skips with PODSTUCK_ALLOW_SKIPS=1) when
    /// bindfs is not installed (`cargo xtask setup` installs it).
    pub fn start(test: &str, source: &Path, mountpoint: &Path) -> Option<Bindfs> {
        if which("bindfs").is_none() {
            return crate::missing(
                test,
                "bindfs (Debian's FUSE bind mount)",
                "apt-get install bindfs, or run cargo xtask setup",
            );
        }
        std::fs::create_dir_all(mountpoint).expect("create the bindfs mountpoint");
        // -o attr_timeout=0,entry_timeout=0: every walk asks the server, as
        // a network filesystem revalidates; a stopped server stalls it.
        let process = Process::spawn(
            Command::new("bindfs")
                .args(["-f", "-o", "attr_timeout=0,entry_timeout=0,negative_timeout=0"])
                .arg(source)
                .arg(mountpoint),
        );
        let mut bindfs = Bindfs { mountpoint: mountpoint.to_path_buf(), minor: 0, server: Some(process) };
        let (_, minor) = crate::wait::poll_until("the bindfs mount in mountinfo", Duration::from_secs(10), || {
            mountinfo::at(mountpoint).filter(|m| m.fstype.starts_with("fuse")).map(|m| m.device)
        });
        bindfs.minor = minor;
        Some(bindfs)
    }

    pub fn server_pid(&self) -> u32 {
        self.server.as_ref().unwrap().pid()
    }

    /// The connection's number under /sys/fs/fuse/connections.
    pub fn connection(&self) -> u32 {
        self.minor
    }

    /// The server stalls: every later call into the mount waits.
    pub fn stall(&self) {
        stop_and_wait(self.server.as_ref().unwrap());
    }

    /// The server answers again.
    pub fn answer_again(&self) {
        self.server.as_ref().unwrap().signal(libc::SIGCONT);
    }
}

impl Drop for Bindfs {
    fn drop(&mut self) {
        abort_connection(self.minor);
        drop(self.server.take());
        let _ = umount2(&self.mountpoint, MntFlags::MNT_DETACH);
    }
}

/// `program` on PATH, if it is there.
pub fn which(program: &str) -> Option<PathBuf> {
    std::env::var_os("PATH")?.to_str()?.split(':').map(|d| Path::new(d).join(program)).find(|p| p.is_file())
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

/// Directories made under a root that may already exist (the real
/// /var/lib/kubelet on a node): removes, on drop, exactly what it created.
pub struct CreatedDirs {
    /// The top-most directory this guard created, removed with its content.
    top: Option<PathBuf>,
}

impl CreatedDirs {
    pub fn create(path: &Path) -> CreatedDirs {
        let mut top = None;
        for ancestor in path.ancestors().collect::<Vec<_>>().into_iter().rev() {
            if !ancestor.exists() {
                std::fs::create_dir(ancestor).unwrap_or_else(|e| panic!("mkdir {}: {e}", ancestor.display()));
                top.get_or_insert_with(|| ancestor.to_path_buf());
            }
        }
        CreatedDirs { top }
    }
}

impl Drop for CreatedDirs {
    fn drop(&mut self) {
        if let Some(top) = &self.top {
            let _ = std::fs::remove_dir_all(top);
        }
    }
}

/// Where cgroup v2 is mounted on this machine (from mountinfo).
pub fn cgroup2_root() -> PathBuf {
    mountinfo::here().into_iter().find(|m| m.fstype == "cgroup2").map(|m| m.mount_point).expect("cgroup v2 is mounted")
}

/// Where the cgroup v1 hierarchy holding `controller` ("memory",
/// "freezer", "name=systemd") is mounted on this machine (from mountinfo).
pub fn v1_hierarchy(controller: &str) -> Option<PathBuf> {
    mountinfo::here().into_iter().find(|m| m.is_v1_hierarchy_of(controller)).map(|m| m.mount_point)
}

/// The hierarchies a pod has a cgroup in on an EKS AL2 or RHEL 8 node
/// (cgroupfs driver), by a controller of each (`cpu` is `cpu,cpuacct`
/// where the two are mounted together).
pub const POD_V1_CONTROLLERS: [&str; 5] = ["memory", "pids", "freezer", "cpu", "name=systemd"];

/// A pod's cgroups as kubelet's cgroupfs driver makes them on a cgroup v1
/// node, `<hierarchy>/<parent>/kubepods/besteffort/pod<uid>/<cid>` in each
/// of [`POD_V1_CONTROLLERS`]' hierarchies, with a task in every container
/// directory that [`V1PodCgroups::freeze_container`] freezes with the v1
/// freezer. On drop, also after a failed assertion: thawed (a frozen task
/// ignores SIGKILL, and a frozen cgroup's task would never leave), the
/// task killed, then every directory made removed deepest first.
pub struct V1PodCgroups {
    /// The pod's directory in each hierarchy.
    pub pods: Vec<PathBuf>,
    /// The container's directory in each hierarchy.
    pub containers: Vec<PathBuf>,
    /// The container's directory in the freezer hierarchy.
    pub freezer: PathBuf,
    made: Vec<PathBuf>,
    task: Option<Process>,
}

impl V1PodCgroups {
    /// Err names the hierarchy this machine does not mount.
    pub fn create(parent: &str, uid: &str, cid: &str) -> Result<V1PodCgroups, String> {
        let mut cg = V1PodCgroups {
            pods: Vec::new(),
            containers: Vec::new(),
            freezer: PathBuf::new(),
            made: Vec::new(),
            task: None,
        };
        for controller in POD_V1_CONTROLLERS {
            let root = v1_hierarchy(controller).ok_or_else(|| format!("a cgroup v1 hierarchy with {controller}"))?;
            let pod = root.join(parent).join("kubepods/besteffort").join(format!("pod{uid}"));
            let container = pod.join(cid);
            for dir in container
                .ancestors()
                .collect::<Vec<_>>()
                .into_iter()
                .rev()
                .filter(|d| d.starts_with(&root) && *d != root)
            {
                if !dir.exists() {
                    std::fs::create_dir(dir).unwrap_or_else(|e| panic!("mkdir cgroup {}: {e}", dir.display()));
                    cg.made.push(dir.to_path_buf());
                }
            }
            if controller == "freezer" {
                cg.freezer = container.clone();
            }
            cg.pods.push(pod);
            cg.containers.push(container);
        }
        Ok(cg)
    }

    /// Starts the container's task (`actor --comm COMM sleep`) in its
    /// directory of every hierarchy; returns its pid.
    pub fn start_task(&mut self, comm: &str) -> u32 {
        let mut args: Vec<std::ffi::OsString> = vec!["--comm".into(), comm.into()];
        for c in &self.containers {
            args.extend(["--cgroup".into(), c.clone().into_os_string()]);
        }
        args.push("sleep".into());
        let task = start_actor(args);
        task.wait_ready(Duration::from_secs(10));
        let pid = task.pid();
        self.task = Some(task);
        pid
    }

    /// Freezes the container with the v1 freezer and waits for FROZEN.
    pub fn freeze_container(&self) {
        std::fs::write(self.freezer.join("freezer.state"), "FROZEN").expect("freeze the container");
        let state = self.freezer.join("freezer.state");
        wait_until("the v1 freezer to reach FROZEN", Duration::from_secs(10), || {
            std::fs::read_to_string(&state).unwrap_or_default().trim() == "FROZEN"
        });
    }

    /// Every directory of the pod, containers first, as kubelet removes them.
    pub fn all(&self) -> Vec<PathBuf> {
        self.containers.iter().chain(&self.pods).cloned().collect()
    }
}

impl Drop for V1PodCgroups {
    fn drop(&mut self) {
        for dir in self.made.iter().filter(|d| d.join("freezer.state").exists()) {
            let _ = std::fs::write(dir.join("freezer.state"), "THAWED");
        }
        drop(self.task.take());
        for dir in self.made.iter().rev() {
            remove_cgroup(dir);
        }
    }
}

/// Removes cgroup `dir`, retrying for a few seconds: a cgroup whose last
/// task just died stays busy a moment. Left behind (by a drop, which must
/// not panic) if it will not go.
fn remove_cgroup(dir: &Path) {
    within(Duration::from_secs(5), || (std::fs::remove_dir(dir).is_ok() || !dir.exists()).then_some(()));
}

/// Nested cgroups created for a test, removed deepest first on drop (after
/// the tasks in them are gone; an emptied cgroup can take a moment).
pub struct CgroupDirs(Vec<PathBuf>);

impl CgroupDirs {
    pub fn create(path: &Path) -> CgroupDirs {
        let mut made = Vec::new();
        for ancestor in path.ancestors().collect::<Vec<_>>().into_iter().rev() {
            if !ancestor.exists() {
                std::fs::create_dir(ancestor).unwrap_or_else(|e| panic!("mkdir cgroup {}: {e}", ancestor.display()));
                made.push(ancestor.to_path_buf());
            }
        }
        CgroupDirs(made)
    }
}

impl Drop for CgroupDirs {
    fn drop(&mut self) {
        for dir in self.0.iter().rev() {
            remove_cgroup(dir);
        }
    }
}

/// A pod's cgroup, named as the systemd driver names it, below a parent of
/// the test's own: in the cgroup v2 tree and, on a hybrid node (this
/// machine's kind: v1 controllers, v2 mounted at .../unified), in the
/// `name=systemd` v1 hierarchy too, where systemd keeps the same slices
/// and where podstuck reads a process's pod from on such a node.
pub struct PodCgroup {
    paths: Vec<PathBuf>,
    _dirs: Vec<CgroupDirs>,
}

impl PodCgroup {
    /// Pod `uid`'s cgroup below a parent named as the test's `scratch`.
    pub fn create(scratch: &Path, uid: &str) -> PodCgroup {
        let parent = scratch.file_name().unwrap();
        let roots = std::iter::once(cgroup2_root()).chain(v1_hierarchy("name=systemd"));
        let paths: Vec<PathBuf> = roots.map(|root| pod_slice(&root.join(parent), "besteffort", uid)).collect();
        let dirs = paths.iter().map(|path| CgroupDirs::create(path)).collect();
        PodCgroup { paths, _dirs: dirs }
    }

    /// `sh -c SCRIPT` that moves itself into the cgroup, says "ready",
    /// then runs `script` (an `exec` keeps its pid).
    pub fn run(&self, script: &str) -> Process {
        let moves: Vec<String> =
            self.paths.iter().map(|p| format!("echo $$ > {}", crate::findings::shell_word(&p.join("cgroup.procs")))).collect();
        let whole = format!("{} && echo ready && {script}", moves.join(" && "));
        let process = Process::spawn(Command::new("sh").arg("-c").arg(whole));
        process.wait_ready(Duration::from_secs(10));
        process
    }
}

/// A pod cgroup kubelet cannot remove: a BestEffort pod's slice, named as
/// the systemd cgroup driver names it, with a live task (`pause`) in it.
/// It lies below a parent of the test's own, so that tests running at once
/// never share (and fail to remove) a kubepods.slice.
pub struct BusyPodCgroup {
    pub uid: String,
    pub path: PathBuf,
    /// The live task; killed (dropped) before the cgroups are removed.
    pub task: Process,
    _dirs: CgroupDirs,
}

impl BusyPodCgroup {
    /// A fresh pod's cgroup below one named as the test's `scratch`
    /// directory, its task started and ready.
    pub fn create(scratch: &Path) -> BusyPodCgroup {
        let uid = new_pod_uid();
        let path = pod_slice(&cgroup2_root().join(scratch.file_name().unwrap()), "besteffort", &uid);
        let dirs = CgroupDirs::create(&path);
        let task = start_actor([
            OsStr::new("--comm"),
            "pause".as_ref(),
            "--cgroup".as_ref(),
            path.as_os_str(),
            "sleep".as_ref(),
        ]);
        task.wait_ready(Duration::from_secs(10));
        BusyPodCgroup { uid, path, task, _dirs: dirs }
    }

    /// kubelet's pod cgroup cleanup: `rmdir` of the cgroup every 2 s by a
    /// process named kubelet, started once its first attempt is refused.
    pub fn kubelet_removing(&self) -> Process {
        let kubelet = start_actor([
            OsStr::new("--comm"),
            "kubelet".as_ref(),
            "--every-ms".as_ref(),
            "2000".as_ref(),
            "--repeat".as_ref(),
            "0".as_ref(),
            "rmdir".as_ref(),
            self.path.as_os_str(),
        ]);
        let lines = kubelet.wait_for_lines(1, Duration::from_secs(10));
        assert!(lines.iter().all(|l| *l == rmdir_busy()), "kubelet's first rmdir should be refused: {lines:?}");
        kubelet
    }
}

/// What the actor's `rmdir` prints when the cgroup is busy.
pub fn rmdir_busy() -> String {
    format!("rmdir errno {}", libc::EBUSY)
}
