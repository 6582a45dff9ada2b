//! The real container runtimes of a Debian node (docker.io's dockerd and
//! docker CLI, containerd and ctr, runc), each test with a private daemon of
//! its own, for the end-to-end tests that check what podstuck concludes
//! about what these runtimes really do: their own removal code, their own
//! retries, their own error messages, their own spelling of paths.
//!
//! - [`Dockerd`]: a private `dockerd` (overlay2, no networking) with its
//!   data root in the test's scratch directory (or on the filesystem
//!   `cargo xtask bench` measures) and its exec root under
//!   `/var/run` (through the `/var/run -> /run` symlink, as on a default
//!   install), running its own managed containerd.
//! - [`Containerd`]: a private standalone `containerd`, driven with `ctr`,
//!   its state directory under `/var/run` as well.
//! - [`Podman`]: a private podman with conmon and crun (CRI-O's monitor
//!   and runtime) over a containers/storage store of its own (`podman`).
//! - [`RbindView`]: a recursive bind mount of a directory (a backup tool's
//!   view of a layer), detached on drop.
//! - [`EventLog`]: with `$PODSTUCK_RUNTIME_TRACES` set, a second podstuck
//!   recording the raw calls of a scenario to `<dir>/<case>.jsonl`.
//!
//! Both daemons import a busybox image written here ([`crate::oci`]) from
//! `/bin/busybox` (busybox-static), so no registry is ever needed.
//!
//! Every guard leaves nothing behind when dropped, even after a test that
//! panicked half-way: containers, tasks, volumes and snapshots are removed,
//! the daemons, their shims and whatever ran in the containers are stopped,
//! `chattr +i`/`+a` flags under the data root are cleared, every mount under
//! the daemon's directories is undone (deepest first, lazily if it must),
//! the directories under `/var/run` are removed, and so are the parent
//! cgroups the runtimes made for their containers (`docker`, `podstuck`).
//! Nothing in a drop panics or waits forever: every command runs under
//! `timeout`.

use std::ffi::{OsStr, OsString};
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Mutex;
use std::time::Duration;

use podstuck_common::program::Arch;
use serde_json::Value;

use crate::mountinfo;
use crate::oci::{self, ConfigBuilder, Image, Tar};

mod podman;
use crate::podstuck::Watch;
use crate::wait::{poll_until_else, within};
pub use podman::{Podman, CONMON, CRUN, PODMAN};

/// Debian's docker.io installs the daemon in /usr/sbin; /usr/bin is where
/// some other packagings put it.
const DOCKERD_CANDIDATES: [&str; 2] = ["/usr/sbin/dockerd", "/usr/bin/dockerd"];
/// Debian's docker CLI (20.10). Always this path: a docker earlier in PATH
/// (/usr/local/bin/docker here) may be another version altogether.
pub const DOCKER: &str = "/usr/bin/docker";
pub const CONTAINERD: &str = "/usr/bin/containerd";
pub const CTR: &str = "/usr/bin/ctr";
/// busybox-static: one binary, no libraries, a whole image by itself.
pub const BUSYBOX: &str = "/bin/busybox";
/// The image both daemons get (`docker load` / `ctr images import`).
pub const DOCKER_IMAGE: &str = "podstuck-busybox:1";
pub const CTR_IMAGE: &str = "docker.io/library/podstuck-busybox:1";
/// The containerd namespace of every `ctr` call.
pub const CTR_NAMESPACE: &str = "podstuck";
/// The applets the image links to busybox.
const APPLETS: [&str; 13] =
    ["sh", "sleep", "ls", "touch", "mkdir", "cat", "true", "echo", "rm", "rmdir", "mount", "umount", "mountpoint"];
/// The daemons of a node, linked to busybox too: `exec -a sh /bin/kubelet
/// SCRIPT` runs a shell whose process name (the file it was started
/// from) is kubelet's, as a node container's kubelet is (tests/tests/node_shapes.rs).
pub const NODE_DAEMONS: [&str; 3] = ["systemd", "kubelet", "containerd"];

/// How long a docker or ctr command may take before it counts as hung.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);
/// The same, while cleaning up: a drop must end.
const CLEANUP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long a daemon may take to answer after it is started.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A short name unique to this process and call, for the directories
/// under /var/run (unix socket paths must stay under 108 bytes, and
/// dockerd's managed containerd nests its sockets a few levels down) and
/// for container, volume and task names.
pub fn short_name() -> String {
    static SEQUENCE: AtomicU32 = AtomicU32::new(0);
    let n = SEQUENCE.fetch_add(1, Ordering::SeqCst);
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{:04x}{:02x}{:03x}", std::process::id() & 0xffff, n & 0xff, (nanos >> 20) & 0xfff)
}

/// `/var/run/x/...` as the kernel spells it in mountinfo (`/run/x/...`):
/// the deepest existing ancestor resolved, the rest (not made yet, or
/// removed already) as is.
pub fn resolved(path: &Path) -> PathBuf {
    for ancestor in path.ancestors() {
        if let Ok(real) = std::fs::canonicalize(ancestor) {
            let rest = path.strip_prefix(ancestor).unwrap();
            // join("") would add a trailing slash.
            return if rest.as_os_str().is_empty() { real } else { real.join(rest) };
        }
    }
    path.to_path_buf()
}

/// Both spellings of each path (as given, and resolved), without repeats.
fn spellings(paths: &[&Path]) -> Vec<PathBuf> {
    let mut all: Vec<PathBuf> = Vec::new();
    for p in paths {
        for s in [p.to_path_buf(), resolved(p)] {
            if !all.contains(&s) {
                all.push(s);
            }
        }
    }
    all
}

/// Whether `path` is `dir` or below it (by whole components).
pub fn is_under(path: &Path, dir: &Path) -> bool {
    path.starts_with(dir)
}

/// Whether any of a finding's paths is under one of `dirs`.
pub fn finding_is_under(finding: &Value, dirs: &[PathBuf]) -> bool {
    finding["paths"].as_array().is_some_and(|paths| {
        paths.iter().filter_map(Value::as_str).any(|p| dirs.iter().any(|d| is_under(Path::new(p), d)))
    })
}

/// The last `n` lines of a log file.
pub fn log_tail(path: &Path, n: usize) -> String {
    let log = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = log.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// `program args` under `timeout`, so that a hung daemon fails the
/// command instead of hanging the test (or its cleanup).
fn timed<S: AsRef<OsStr>>(limit: Duration, program: &str, args: &[S]) -> Command {
    let secs = limit.as_secs().max(1).to_string();
    let mut command = Command::new("timeout");
    command.args(["-k", "5", &secs, program]).args(args).stdin(Stdio::null());
    command
}

/// Runs `program args` under `timeout`, collecting its output, for a
/// drop: never panics.
fn run_quietly<S: AsRef<OsStr>>(limit: Duration, program: &str, args: &[S]) -> Option<Output> {
    timed(limit, program, args).output().ok()
}

/// A runtime's command-line tool pointed at one daemon of ours:
/// `docker -H <ours>`, `ctr --address <ours> --namespace podstuck`,
/// podman with configuration files of its own.
struct Cli {
    program: &'static str,
    /// The arguments every call starts with.
    prefix: Vec<OsString>,
    /// Variables every call gets (podman's configuration files).
    env: Vec<(String, PathBuf)>,
}

impl Cli {
    fn args<'a>(&'a self, args: &'a [&str]) -> Vec<&'a OsStr> {
        self.prefix.iter().map(OsString::as_os_str).chain(args.iter().map(OsStr::new)).collect()
    }

    fn command(&self, limit: Duration, args: &[&str]) -> Command {
        let mut command = timed(limit, self.program, &self.args(args));
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        command
    }

    /// Runs it with `args` within `limit`, whatever comes out.
    fn run(&self, limit: Duration, args: &[&str]) -> Output {
        self.command(limit, args).output().unwrap_or_else(|e| panic!("cannot run {}: {e}", self.program))
    }

    /// Runs it with `args` while cleaning up: never panics.
    fn quietly(&self, args: &[&str]) -> Option<Output> {
        self.command(CLEANUP_TIMEOUT, args).output().ok()
    }

    /// The words a listing prints (`ps -aq`, `task ls -q`...), while
    /// cleaning up: none if it fails.
    fn list(&self, args: &[&str]) -> Vec<String> {
        self.quietly(args).map(|o| stdout_text(&o).split_whitespace().map(str::to_string).collect()).unwrap_or_default()
    }
}

/// Panics with what the command printed unless it succeeded.
fn must(what: &str, out: Output) -> Output {
    if !out.status.success() {
        panic!(
            "`{what}` failed ({}):\nstderr: {}\nstdout: {}",
            out.status,
            String::from_utf8_lossy(&out.stderr).trim_end(),
            String::from_utf8_lossy(&out.stdout).trim_end()
        );
    }
    out
}

/// The text a command printed on stdout, trimmed.
pub fn stdout_text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stdout).trim().to_string()
}

/// The text a command printed on stderr, trimmed.
pub fn stderr_text(out: &Output) -> String {
    String::from_utf8_lossy(&out.stderr).trim().to_string()
}

/// The daemon could not start (a machine without the packages, or where
/// they cannot run): the test fails with the daemon's log (see
/// [`crate::prerequisite`]).
fn cannot_start(test: &str, what: &str, why: &str, log: &Path) {
    let tail = log_tail(log, 30);
    crate::missing(
        test,
        &format!("a working {what}: it could not start: {why}"),
        &format!(
            "`cargo xtask test` installs Debian's docker.io, containerd, runc, podman, conmon, crun and busybox-static; the runtime's log {}:\n{tail}",
            log.display()
        ),
    )
}

// Processes ------------------------------------------------------------

/// Whether a command line (NUL-separated arguments) names `dir` or a path
/// below it: `dir` followed by `/`, the end of an argument, or `=`...
/// never by more of a name (`/run/podstuck-x` is not `/run/podstuck-x-c`).
fn mentions(cmdline: &[u8], dir: &[u8]) -> bool {
    (0..cmdline.len().saturating_sub(dir.len()) + 1).any(|i| {
        cmdline[i..].starts_with(dir)
            && matches!(cmdline.get(i + dir.len()), None | Some(b'/' | 0 | b' ' | b'"' | b'\''))
    })
}

/// Every process whose command line names one of `dirs`, except us.
fn processes_mentioning(dirs: &[PathBuf]) -> Vec<i32> {
    let me = std::process::id() as i32;
    let Ok(proc_dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    proc_dir
        .filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&pid| pid != me)
        .filter(|pid| {
            let cmdline = std::fs::read(format!("/proc/{pid}/cmdline")).unwrap_or_default();
            dirs.iter().any(|d| mentions(&cmdline, d.as_os_str().as_bytes()))
        })
        .collect()
}

/// The parent of a process, from /proc/PID/stat.
fn parent_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?.1.split_whitespace().nth(1)?.parse().ok()
}

/// The direct children of `pid` (a shim's children are the containers' first processes).
fn children_of(pid: i32) -> Vec<i32> {
    let Ok(dir) = std::fs::read_dir("/proc") else { return Vec::new() };
    dir.filter_map(Result::ok)
        .filter_map(|e| e.file_name().to_str()?.parse::<i32>().ok())
        .filter(|&child| parent_of(child) == Some(pid))
        .collect()
}

/// The unix sockets a process listens on under containerd's shared
/// socket directory (/run/containerd/s): a shim killed with SIGKILL leaves
/// its socket file there.
fn shim_sockets(pid: i32) -> Vec<PathBuf> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .map(|d| {
            d.filter_map(Result::ok)
                .filter_map(|e| std::fs::read_link(e.path()).ok())
                .filter_map(|l| l.to_str()?.strip_prefix("socket:[")?.strip_suffix(']').map(str::to_string))
                .collect()
        })
        .unwrap_or_default();
    let table = std::fs::read_to_string("/proc/net/unix").unwrap_or_default();
    table
        .lines()
        .skip(1)
        .filter_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            let (inode, path) = (fields.get(6)?, fields.get(7)?);
            (inodes.iter().any(|i| i == inode) && path.starts_with("/run/containerd/s/")).then(|| PathBuf::from(path))
        })
        .collect()
}

/// SIGKILLs every process that mentions one of `markers` (a daemon's
/// directories) and their children (the containers' processes a shim
/// started), waits until they are gone, and removes the shim sockets they
/// left. For a drop: never panics.
fn kill_mentioning(markers: &[PathBuf]) {
    let pids = processes_mentioning(markers);
    if pids.is_empty() {
        return;
    }
    let mut victims: Vec<i32> = Vec::new();
    let mut sockets = Vec::new();
    for &pid in &pids {
        victims.extend(children_of(pid));
        sockets.extend(shim_sockets(pid));
        victims.push(pid);
    }
    eprintln!("cleanup: killing leftover runtime processes {victims:?}");
    for &pid in &victims {
        // SAFETY: kill(2); these processes name our own daemon's directories (or are their children).
        unsafe { libc::kill(pid, libc::SIGKILL) };
    }
    within(Duration::from_secs(10), || (!victims.iter().any(|&p| crate::actors::alive(p as u32))).then_some(()));
    for socket in sockets {
        let _ = std::fs::remove_file(socket);
    }
}

/// Stops a daemon we started: SIGTERM, then SIGKILL after `grace`.
fn stop_child(child: &mut Child, grace: Duration) {
    if !matches!(child.try_wait(), Ok(None)) {
        return;
    }
    // SAFETY: a signal to our own child, not yet reaped.
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    if within(grace, || (!matches!(child.try_wait(), Ok(None))).then_some(())).is_none() {
        eprintln!("cleanup: pid {} ignored SIGTERM for {grace:?}; SIGKILL", child.id());
        let _ = child.kill();
        let _ = child.wait();
    }
}

/// What is left of a daemon of ours once its containers are gone: the
/// daemon (SIGTERM, SIGKILL after `grace`), whatever survived it that names
/// its `dirs`, every mount below them (deepest first), and `run_dir`, its
/// directory under /var/run. For a drop: never panics.
fn tear_down(child: &mut Child, grace: Duration, dirs: &[PathBuf], run_dir: &Path) {
    stop_child(child, grace);
    kill_mentioning(dirs);
    unmount_below(dirs);
    remove_run_dir(run_dir);
}

// Cgroups ----------------------------------------------------------------

/// A cgroup a runtime makes at the top of every hierarchy, as the parent of
/// its containers' cgroups, and leaves when it stops: dockerd's `docker`
/// (the cgroupfs driver), and ctr's namespace for its tasks (`podstuck`). Each daemon guard claims it before its daemon
/// starts; the hierarchies where it did not exist then (before the first
/// claim of this process: the tests run side by side) lose it when the last
/// claim is dropped, once it is empty. A cgroup with children or tasks (a
/// daemon of another run using it) refuses rmdir and stays.
struct TopCgroups {
    name: &'static str,
}

/// Per name: the claims held, and the cgroups to remove after the last.
static TOP_CGROUPS: Mutex<Vec<(&'static str, usize, Vec<PathBuf>)>> = Mutex::new(Vec::new());

/// Where each cgroup hierarchy (v1 and v2) is mounted.
fn cgroup_hierarchies() -> Vec<PathBuf> {
    mountinfo::here()
        .into_iter()
        .filter(|m| m.fstype == "cgroup" || m.fstype == "cgroup2")
        .map(|m| m.mount_point)
        .collect()
}

impl TopCgroups {
    fn claim(name: &'static str) -> TopCgroups {
        let mut all = TOP_CGROUPS.lock().unwrap_or_else(|e| e.into_inner());
        let missing = cgroup_hierarchies().into_iter().map(|h| h.join(name)).filter(|c| !c.exists());
        match all.iter_mut().find(|(n, ..)| *n == name) {
            Some((_, claims, made)) => {
                *claims += 1;
                // Claimed while another claim holds: what is missing now is
                // made by one of ours too.
                for cgroup in missing {
                    if !made.contains(&cgroup) {
                        made.push(cgroup);
                    }
                }
            }
            None => all.push((name, 1, missing.collect())),
        }
        TopCgroups { name }
    }
}

impl Drop for TopCgroups {
    fn drop(&mut self) {
        let mut all = TOP_CGROUPS.lock().unwrap_or_else(|e| e.into_inner());
        let Some(at) = all.iter().position(|(n, ..)| *n == self.name) else { return };
        all[at].1 -= 1;
        if all[at].1 > 0 {
            return;
        }
        let (_, _, made) = all.remove(at);
        for cgroup in made.iter().filter(|c| c.exists()) {
            // A cgroup whose last task just exited can refuse rmdir for a moment.
            let mut error = None;
            let removed = within(Duration::from_secs(2), || match std::fs::remove_dir(cgroup) {
                Err(e) if cgroup.exists() => {
                    error = Some(e);
                    None
                }
                _ => Some(()),
            });
            if removed.is_none() {
                eprintln!("cleanup: cannot remove cgroup {}: {}", cgroup.display(), error.unwrap());
            }
        }
    }
}

// Mounts and flags -----------------------------------------------------

/// Unmounts everything at or below `dirs`, deepest first: a plain
/// umount2, else a lazy one (a busy mount is detached, not left). A few
/// passes, for mounts stacked on the same point. For a drop: never panics.
fn unmount_below(dirs: &[PathBuf]) {
    for _pass in 0..8 {
        let mut mounts = mountinfo::below(dirs);
        if mounts.is_empty() {
            return;
        }
        mounts.sort_by_key(|m| std::cmp::Reverse(m.components().count()));
        mounts.dedup();
        for at in mounts {
            if nix::mount::umount2(&at, nix::mount::MntFlags::empty()).is_err() {
                if let Err(e) = nix::mount::umount2(&at, nix::mount::MntFlags::MNT_DETACH) {
                    eprintln!("cleanup: cannot unmount {}: {e}", at.display());
                }
            }
        }
    }
    let left = mountinfo::below(dirs);
    if !left.is_empty() {
        eprintln!("cleanup: still mounted after 8 passes: {left:?}");
    }
}

const FS_IMMUTABLE_FL: libc::c_int = 0x10;
const FS_APPEND_FL: libc::c_int = 0x20;

/// Clears the immutable and append-only flags (`chattr -i -a`) of `path`
/// if it has them; true if it had. Regular files and directories only
/// (opening a device or a fifo could block or do something).
fn clear_flags(path: &Path, kind: std::fs::FileType) -> bool {
    if !(kind.is_file() || kind.is_dir()) {
        return false;
    }
    let Ok(file) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_NOCTTY)
        .open(path)
    else {
        return false;
    };
    use std::os::fd::AsRawFd;
    let mut flags: libc::c_int = 0;
    // SAFETY: FS_IOC_GETFLAGS writes an int through the pointer (the kernel's ABI, whatever the macro says).
    if unsafe { libc::ioctl(file.as_raw_fd(), libc::FS_IOC_GETFLAGS, &mut flags) } != 0 {
        return false;
    }
    if flags & (FS_IMMUTABLE_FL | FS_APPEND_FL) == 0 {
        return false;
    }
    let cleared = flags & !(FS_IMMUTABLE_FL | FS_APPEND_FL);
    // SAFETY: as above; FS_IOC_SETFLAGS reads an int.
    unsafe { libc::ioctl(file.as_raw_fd(), libc::FS_IOC_SETFLAGS, &cleared) == 0 }
}

/// `chattr -R -i -a` on a tree, walked without following symlinks and
/// without leaving its filesystem (a mount inside is someone else's).
/// Returns the paths it cleared. `lsattr -R` forks nothing but prints
/// every file; this reads two ioctls per file and says nothing.
pub fn clear_flags_below(top: &Path) -> Vec<PathBuf> {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(top) else { return Vec::new() };
    let device = meta.dev();
    let mut cleared = Vec::new();
    if clear_flags(top, meta.file_type()) {
        cleared.push(top.to_path_buf());
    }
    let mut stack = vec![top.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else { continue };
        for entry in entries.filter_map(Result::ok) {
            let path = entry.path();
            let Ok(meta) = std::fs::symlink_metadata(&path) else { continue };
            let kind = meta.file_type();
            if kind.is_symlink()
                || kind.is_block_device()
                || kind.is_char_device()
                || kind.is_fifo()
                || kind.is_socket()
            {
                continue;
            }
            if clear_flags(&path, kind) {
                cleared.push(path.clone());
            }
            if kind.is_dir() && meta.dev() == device {
                stack.push(path);
            }
        }
    }
    cleared
}

/// Removes a directory under /var/run we made; never panics.
fn remove_run_dir(dir: &Path) {
    if let Err(e) = std::fs::remove_dir_all(dir) {
        if e.kind() != std::io::ErrorKind::NotFound {
            eprintln!("cleanup: cannot remove {}: {e}", dir.display());
        }
    }
}

// The image ------------------------------------------------------------

/// The busybox image's tarball, written by [`crate::oci`] once per daemon
/// in its scratch dir: `/bin/busybox` and the applets this suite runs as
/// symlinks to it, for this machine's architecture, named
/// `podstuck-busybox:1`. `docker load` and `ctr images import` both take
/// it: `ctr images import` (containerd 1.6) takes only image archives,
/// never a bare root filesystem as `docker import` does, and there is no
/// registry here to pull from.
fn busybox_image(scratch: &Path) -> PathBuf {
    let archive = scratch.join("busybox-image.tar");
    if !archive.is_file() {
        busybox_tarball()
            .and_then(|bytes| oci::write_whole(&archive, &bytes))
            .unwrap_or_else(|e| panic!("write the busybox image {}: {e:#}", archive.display()));
    }
    archive
}

fn busybox_tarball() -> anyhow::Result<Vec<u8>> {
    use anyhow::Context;
    let busybox = std::fs::read(BUSYBOX).with_context(|| format!("read {BUSYBOX} (busybox-static)"))?;
    let mut rootfs = Tar::new(0);
    rootfs.dir("bin", 0o755)?;
    rootfs.file("bin/busybox", 0o755, &busybox)?;
    for applet in APPLETS.iter().chain(&NODE_DAEMONS) {
        rootfs.symlink(&format!("bin/{applet}"), "busybox")?;
    }
    let run = ConfigBuilder::default().cmd(vec!["sh".to_string()]).build()?;
    let image = Image::new(Arch::HOST, &rootfs.finish()?, run, "podstuck-tests", 0)?;
    oci::archive(vec![image], DOCKER_IMAGE, 0)
}

// dockerd --------------------------------------------------------------

/// A private dockerd: its data root where its [`DockerdSetup`] says, its
/// exec root `/var/run/podstuck-<short>` (through the /var/run symlink, as
/// a default install's /var/run/docker), no iptables, no bridge, and its
/// own managed containerd (started by dockerd in `<exec-root>/containerd`).
/// Containers run with `--network none`. The tests start one each
/// ([`Dockerd::start`]); `cargo xtask bench` starts one on the filesystem it
/// measures ([`Dockerd::launch`]) and times `docker volume rm` through it.
pub struct Dockerd {
    child: Child,
    name: String,
    exec_root: PathBuf,
    data_root: PathBuf,
    storage_driver: String,
    /// `docker -H unix://<exec-root>/docker.sock`.
    cli: Cli,
    log: PathBuf,
    scratch: PathBuf,
    imported: Mutex<bool>,
    /// Dropped after `drop` stopped the daemon: its `docker` cgroups go then.
    _cgroups: TopCgroups,
}

/// What differs between one private dockerd and another.
pub struct DockerdSetup<'a> {
    /// Where its daemon.json, its log and the busybox image's tar go.
    pub scratch: &'a Path,
    /// Its data root: its layers and volumes are made there.
    pub data_root: PathBuf,
    /// `overlay2` as on nodes; `vfs` where a kernel refuses overlay2 on
    /// the data root's filesystem.
    pub storage_driver: &'a str,
    /// A containerd namespace of its own (and one for its plugins), apart
    /// from a dockerd already using this node's containerd; `moby` if none.
    pub containerd_namespace: Option<&'a str>,
}

impl<'a> DockerdSetup<'a> {
    /// A test's: overlay2 with its data root in the test's scratch
    /// directory (ext4 here, so `chattr +i` works in its layers).
    pub fn in_scratch(scratch: &'a Path) -> DockerdSetup<'a> {
        DockerdSetup {
            scratch,
            data_root: scratch.join("docker"),
            storage_driver: "overlay2",
            containerd_namespace: None,
        }
    }
}

/// Why a private daemon did not come up, with the log that says more.
#[derive(Debug)]
pub struct NotStarted {
    pub why: String,
    pub log: PathBuf,
}

impl std::fmt::Display for NotStarted {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}; the end of its log {}:\n{}", self.why, self.log.display(), log_tail(&self.log, 10))
    }
}

impl std::error::Error for NotStarted {}

impl Dockerd {
    /// Starts one for a test ([`DockerdSetup::in_scratch`]). A dockerd that
    /// cannot start fails the test; `None` where skips are allowed.
    pub fn start(scratch: &Path, test: &str) -> Option<Dockerd> {
        if !Path::new(BUSYBOX).is_file() {
            cannot_start(
                test,
                "dockerd",
                &format!("{BUSYBOX} is missing: install busybox-static"),
                &scratch.join("dockerd.log"),
            );
            return None;
        }
        match Dockerd::launch(&DockerdSetup::in_scratch(scratch)) {
            Ok(daemon) => {
                eprintln!(
                    "{test}: private dockerd {} up: data root {}, exec root {}",
                    daemon.pid(),
                    daemon.data_root.display(),
                    daemon.exec_root.display()
                );
                Some(daemon)
            }
            Err(e) => {
                cannot_start(test, "dockerd", &e.why, &e.log);
                None
            }
        }
    }

    /// Starts one as `setup` says and waits until `docker info` answers
    /// with the storage driver asked for. Whatever it made is cleaned up
    /// when it does not come up.
    pub fn launch(setup: &DockerdSetup) -> Result<Dockerd, NotStarted> {
        let log = setup.scratch.join(format!("dockerd-{}.log", setup.storage_driver));
        let not_started = |why: String| NotStarted { why, log: log.clone() };
        let Some(dockerd) = DOCKERD_CANDIDATES.iter().find(|p| Path::new(p).is_file()) else {
            return Err(not_started(format!("none of {DOCKERD_CANDIDATES:?} exists: install docker.io")));
        };
        for needed in [DOCKER, CONTAINERD] {
            if !Path::new(needed).is_file() {
                return Err(not_started(format!("{needed} is missing: install docker.io, containerd")));
            }
        }
        let name = short_name();
        let exec_root = PathBuf::from(format!("/var/run/podstuck-{name}"));
        // The deepest socket: <exec-root>/containerd/containerd.sock.ttrpc.
        let deepest = exec_root.join("containerd/containerd.sock.ttrpc");
        assert!(deepest.as_os_str().len() < 108, "{} is too long for a unix socket", deepest.display());
        let data_root = setup.data_root.clone();
        let made = std::fs::create_dir_all(&exec_root).and_then(|()| std::fs::create_dir_all(&data_root));
        // An empty configuration of its own: nothing of /etc/docker/daemon.json.
        let config = setup.scratch.join("daemon.json");
        let made = made.and_then(|()| std::fs::write(&config, "{}\n")).and_then(|()| std::fs::File::create(&log));
        let out = match made {
            Ok(out) => out,
            Err(e) => {
                remove_run_dir(&exec_root);
                return Err(not_started(format!("cannot make its directories and files: {e}")));
            }
        };
        let host = format!("unix://{}", exec_root.join("docker.sock").display());
        let mut command = Command::new(dockerd);
        command
            .arg("--config-file")
            .arg(&config)
            .arg("--data-root")
            .arg(&data_root)
            .arg("--exec-root")
            .arg(&exec_root)
            .arg("--pidfile")
            .arg(exec_root.join("docker.pid"))
            .args(["-H", &host])
            .args(["--iptables=false", "--ip6tables=false", "--bridge=none", "--storage-driver", setup.storage_driver]);
        if let Some(namespace) = setup.containerd_namespace {
            command.args([
                "--containerd-namespace",
                namespace,
                "--containerd-plugins-namespace",
                &format!("{namespace}-plugins"),
            ]);
        }
        // Before dockerd may make them.
        let cgroups = TopCgroups::claim("docker");
        let spawned = match out.try_clone() {
            Ok(err) => command.stdin(Stdio::null()).stdout(out).stderr(err).spawn(),
            Err(e) => Err(e),
        };
        let child = match spawned {
            Ok(child) => child,
            Err(e) => {
                remove_run_dir(&exec_root);
                return Err(not_started(format!("spawn {dockerd}: {e}")));
            }
        };
        // From here on, dropping it cleans up.
        let mut daemon = Dockerd {
            child,
            name,
            exec_root,
            data_root,
            storage_driver: String::new(),
            cli: Cli { program: DOCKER, prefix: vec!["-H".into(), host.into()], env: Vec::new() },
            log: log.clone(),
            scratch: setup.scratch.to_path_buf(),
            imported: Mutex::new(false),
            _cgroups: cgroups,
        };
        let info = await_daemon(&mut daemon, "docker info", |d| &mut d.child, daemon_info).map_err(not_started)?;
        daemon.storage_driver = stdout_text(&info);
        if daemon.storage_driver != setup.storage_driver {
            return Err(not_started(format!(
                "it runs storage driver {:?}, not {}",
                daemon.storage_driver, setup.storage_driver
            )));
        }
        Ok(daemon)
    }

    /// `docker -H <ours> ARGS`; panics with its stderr unless it succeeds.
    pub fn docker(&self, args: &[&str]) -> Output {
        must(&format!("docker {}", args.join(" ")), self.cli.run(COMMAND_TIMEOUT, args))
    }

    /// `docker -H <ours> ARGS`, whatever comes out.
    pub fn docker_may_fail(&self, args: &[&str]) -> Output {
        self.cli.run(COMMAND_TIMEOUT, args)
    }

    /// `docker -H <ours> ARGS` as a plain command, for a caller that times
    /// the client itself (no `timeout` in between).
    pub fn docker_command(&self, args: &[&str]) -> Command {
        let mut command = Command::new(self.cli.program);
        command.args(self.cli.args(args));
        command
    }

    /// `docker inspect -f FORMAT THING`, trimmed.
    pub fn inspect(&self, thing: &str, format: &str) -> String {
        stdout_text(&self.docker(&["inspect", "-f", format, thing]))
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The managed containerd dockerd started, if it runs.
    pub fn containerd_pid(&self) -> Option<u32> {
        let pid = std::fs::read_to_string(self.exec_root.join("containerd/containerd.pid")).ok()?;
        pid.trim().parse().ok()
    }

    /// The short name unique to this daemon (for container and volume names).
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn data_root(&self) -> &Path {
        &self.data_root
    }

    /// The storage driver it runs with, as `docker info` says.
    pub fn storage_driver(&self) -> &str {
        &self.storage_driver
    }

    /// `/var/run/podstuck-<short>`, spelled through the symlink.
    pub fn exec_root(&self) -> &Path {
        &self.exec_root
    }

    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Every directory this daemon owns, in every spelling
    /// (`/var/run/...` and `/run/...`): findings about it name paths there.
    pub fn dirs(&self) -> Vec<PathBuf> {
        spellings(&[&self.data_root, &self.exec_root])
    }

    /// The busybox image, loaded on first use (`docker load` of
    /// [`busybox_image`]), tagged `podstuck-busybox:1`.
    pub fn image(&self) -> &'static str {
        let mut imported = self.imported.lock().unwrap_or_else(|e| e.into_inner());
        if !*imported {
            let archive = busybox_image(&self.scratch);
            self.docker(&["load", "-i", archive.to_str().expect("UTF-8 scratch path")]);
            *imported = true;
        }
        DOCKER_IMAGE
    }
}

impl Drop for Dockerd {
    fn drop(&mut self) {
        let dirs = self.dirs();
        // 1. Flags a test set (or left set) in the layers and volumes:
        // nothing can be removed through them, not even by us below.
        let mut flagged = Vec::new();
        for area in ["overlay2", "volumes"] {
            let Ok(entries) = std::fs::read_dir(self.data_root.join(area)) else { continue };
            for entry in entries.filter_map(Result::ok) {
                for sub in ["diff", "_data"] {
                    flagged.extend(clear_flags_below(&entry.path().join(sub)));
                }
            }
        }
        if !flagged.is_empty() {
            eprintln!("cleanup: cleared chattr flags on {flagged:?}");
        }
        // 2. Containers and volumes, through dockerd while it runs.
        if matches!(self.child.try_wait(), Ok(None)) {
            let ids = self.cli.list(&["ps", "-aq"]);
            if !ids.is_empty() {
                let mut args = vec!["rm", "-f"];
                args.extend(ids.iter().map(String::as_str));
                if let Some(out) = self.cli.quietly(&args) {
                    if !out.status.success() {
                        eprintln!("cleanup: docker rm -f: {}", stderr_text(&out));
                    }
                }
            }
            let names = self.cli.list(&["volume", "ls", "-q"]);
            if !names.is_empty() {
                let mut args = vec!["volume", "rm", "-f"];
                args.extend(names.iter().map(String::as_str));
                let _ = self.cli.quietly(&args);
            }
        }
        // 3. dockerd (it stops its managed containerd), whatever survived
        // it (the managed containerd if dockerd was killed, shims, the
        // containers' processes), the mounts (dockerd's bind of its data
        // root on itself, layers' merged dirs, netns and shm mounts under
        // the exec root) and the exec root; the scratch dir (the data
        // root) goes with the ScratchDir. The `docker` cgroups go last,
        // with `self._cgroups`, once nothing runs in them.
        tear_down(&mut self.child, Duration::from_secs(15), &dirs, &self.exec_root);
    }
}

// containerd -----------------------------------------------------------

/// How the state directory of a [`Containerd`] propagates mounts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Propagation {
    /// A shared mount, as /run is on every systemd node: a copy of a
    /// rootfs in another mount namespace (unshare, a pod with
    /// HostToContainer propagation) is a slave of the host's, and a busy
    /// copy makes the host's plain umount2 fail with EBUSY.
    Shared,
    /// A private mount, as this machine's root is: a copy in another
    /// namespace is unrelated to the host's mount.
    Private,
}

/// A private standalone containerd for one test, driven with `ctr`: its
/// root in the test's scratch directory, its state directory
/// `/var/run/podstuck-<short>-c` (through the /var/run symlink), a mount
/// of its own with the chosen propagation, its socket `<state>/c.sock`,
/// the CRI and other plugins this machine cannot run disabled, and runc's
/// state and ctr's fifos under `<state>` (`ctr run --runc-root
/// --fifo-dir`) rather than the node's shared /run/containerd.
pub struct Containerd {
    child: Child,
    name: String,
    root: PathBuf,
    state: PathBuf,
    address: PathBuf,
    /// `ctr --address <address> --namespace podstuck`.
    cli: Cli,
    log: PathBuf,
    scratch: PathBuf,
    imported: Mutex<bool>,
    /// Dropped after `drop` stopped the daemon: its `podstuck` cgroups go then.
    _cgroups: TopCgroups,
}

impl Containerd {
    /// Starts it with a shared state directory (the systemd node's /run).
    pub fn start(scratch: &Path, test: &str) -> Option<Containerd> {
        Containerd::start_with(scratch, test, Propagation::Shared)
    }

    /// Starts it and waits until `ctr version` reaches it. A containerd
    /// that cannot start fails the test; `None` where skips are allowed.
    pub fn start_with(scratch: &Path, test: &str, propagation: Propagation) -> Option<Containerd> {
        let log = scratch.join("containerd.log");
        for needed in [CONTAINERD, CTR, BUSYBOX, "/usr/bin/containerd-shim-runc-v2"] {
            if !Path::new(needed).is_file() {
                cannot_start(
                    test,
                    "containerd",
                    &format!("{needed} is missing: install containerd, busybox-static"),
                    &log,
                );
                return None;
            }
        }
        let name = short_name();
        let state = PathBuf::from(format!("/var/run/podstuck-{name}-c"));
        let address = state.join("c.sock");
        assert!(
            address.as_os_str().len() + ".ttrpc".len() < 108,
            "{} is too long for a unix socket",
            address.display()
        );
        let root = scratch.join("containerd");
        std::fs::create_dir_all(&root).expect("create the containerd root");
        std::fs::create_dir_all(&state).expect("create the containerd state");
        // The state directory, a mount of its own so that its propagation
        // is the scenario's, not whatever this machine's /run has.
        let flags = match propagation {
            Propagation::Shared => nix::mount::MsFlags::MS_SHARED,
            Propagation::Private => nix::mount::MsFlags::MS_PRIVATE,
        };
        let bound = nix::mount::mount(Some(&state), &state, None::<&str>, nix::mount::MsFlags::MS_BIND, None::<&str>)
            .and_then(|()| nix::mount::mount(None::<&str>, &state, None::<&str>, flags, None::<&str>));
        if let Err(e) = bound {
            unmount_below(&spellings(&[&state]));
            remove_run_dir(&state);
            panic!("bind {} on itself and make it {propagation:?}: {e}", state.display());
        }
        let config = scratch.join("containerd.toml");
        let toml = format!(
            r#"version = 2
root = "{root}"
state = "{state}"
# Plugins that need what a test machine does not have (the CRI wants CNI
# and its own config; the opt plugin would write /opt/containerd), and
# snapshotters for other filesystems.
disabled_plugins = [
  "io.containerd.grpc.v1.cri",
  "io.containerd.internal.v1.opt",
  "io.containerd.snapshotter.v1.aufs",
  "io.containerd.snapshotter.v1.btrfs",
  "io.containerd.snapshotter.v1.devmapper",
  "io.containerd.snapshotter.v1.zfs",
]

[grpc]
  address = "{address}"

[ttrpc]
  address = ""

[debug]
  address = ""
"#,
            root = root.display(),
            state = state.display(),
            address = address.display(),
        );
        std::fs::write(&config, toml).expect("write containerd.toml");
        let out = std::fs::File::create(&log).expect("create containerd.log");
        // Before a task may make them.
        let cgroups = TopCgroups::claim(CTR_NAMESPACE);
        let child = Command::new(CONTAINERD)
            .arg("--config")
            .arg(&config)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("dup the log"))
            .stderr(out)
            .spawn();
        let child = match child {
            Ok(child) => child,
            Err(e) => {
                unmount_below(&spellings(&[&state]));
                remove_run_dir(&state);
                cannot_start(test, "containerd", &format!("spawn {CONTAINERD}: {e}"), &log);
                return None;
            }
        };
        let mut daemon = Containerd {
            child,
            name,
            root,
            state,
            cli: Cli {
                program: CTR,
                prefix: vec!["--address".into(), address.clone().into(), "--namespace".into(), CTR_NAMESPACE.into()],
                env: Vec::new(),
            },
            address,
            log,
            scratch: scratch.to_path_buf(),
            imported: Mutex::new(false),
            _cgroups: cgroups,
        };
        let log = daemon.log.clone();
        if let Err(why) = await_daemon(&mut daemon, "ctr version", |d| &mut d.child, |d| d.ctr_may_fail(&["version"])) {
            cannot_start(test, "containerd", &why, &log);
            return None;
        }
        eprintln!(
            "{test}: private containerd {} up: root {}, state {} ({propagation:?})",
            daemon.pid(),
            daemon.root.display(),
            daemon.state.display()
        );
        Some(daemon)
    }

    /// `ctr --address <ours> --namespace podstuck ARGS`; panics with its
    /// stderr unless it succeeds.
    pub fn ctr(&self, args: &[&str]) -> Output {
        must(&format!("ctr {}", args.join(" ")), self.cli.run(COMMAND_TIMEOUT, args))
    }

    /// The same, whatever comes out.
    pub fn ctr_may_fail(&self, args: &[&str]) -> Output {
        self.cli.run(COMMAND_TIMEOUT, args)
    }

    /// `ctr ... ARGS` to spawn, ended by `timeout` after `limit` at most:
    /// a command that runs on (`ctr task exec` of a process that waits).
    pub fn ctr_command(&self, limit: Duration, args: &[&str]) -> Command {
        self.cli.command(limit, args)
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// The short name unique to this daemon (for task ids).
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// `/var/run/podstuck-<short>-c`, spelled through the symlink.
    pub fn state(&self) -> &Path {
        &self.state
    }

    pub fn address(&self) -> &Path {
        &self.address
    }

    pub fn log(&self) -> &Path {
        &self.log
    }

    /// Every directory this daemon owns, in every spelling.
    pub fn dirs(&self) -> Vec<PathBuf> {
        spellings(&[&self.root, &self.state])
    }

    /// Where a task's rootfs is mounted: the bundle's `rootfs`, spelled
    /// through /var/run as the state directory is configured.
    pub fn rootfs(&self, id: &str) -> PathBuf {
        self.state.join("io.containerd.runtime.v2.task").join(CTR_NAMESPACE).join(id).join("rootfs")
    }

    /// The busybox image, imported on first use ([`busybox_image`]) and
    /// unpacked for overlayfs.
    pub fn image(&self) -> &'static str {
        let mut imported = self.imported.lock().unwrap_or_else(|e| e.into_inner());
        if !*imported {
            let archive = busybox_image(&self.scratch);
            self.ctr(&[
                "images",
                "import",
                "--snapshotter",
                "overlayfs",
                archive.to_str().expect("UTF-8 scratch path"),
            ]);
            *imported = true;
        }
        CTR_IMAGE
    }

    /// runc's state and ctr's IO fifos, under our state directory rather
    /// than the node's shared /run/containerd/runc and /run/containerd/fifo.
    fn run_flags(&self) -> [String; 4] {
        let state = |sub: &str| self.state.join(sub).to_string_lossy().into_owned();
        ["--runc-root".into(), state("runc"), "--fifo-dir".into(), state("fifo")]
    }

    /// `ctr run -d --snapshotter overlayfs IMAGE ID COMMAND...`: a task
    /// running in the host's network namespace (no CNI needed).
    pub fn run_detached(&self, id: &str, command: &[&str]) {
        let image = self.image();
        let flags = self.run_flags();
        let mut args = vec!["run", "-d", "--snapshotter", "overlayfs"];
        args.extend(flags.iter().map(String::as_str));
        args.extend([image, id]);
        args.extend_from_slice(command);
        self.ctr(&args);
    }

    /// [`Containerd::run_detached`], the task run with `flags` (`--mount`...).
    pub fn run_detached_with(&self, flags: &[String], id: &str, command: &[&str]) {
        let image = self.image();
        let run = self.run_flags();
        let mut args = vec!["run", "-d", "--snapshotter", "overlayfs"];
        args.extend(run.iter().chain(flags).map(String::as_str));
        args.extend([image, id]);
        args.extend_from_slice(command);
        self.ctr(&args);
    }

    /// The host pid of task `id`'s process, as `ctr task ls` lists it.
    pub fn task_pid(&self, id: &str) -> Option<u32> {
        let out = self.ctr(&["task", "ls"]);
        stdout_text(&out).lines().skip(1).find_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            (fields.first() == Some(&id)).then(|| fields.get(1)?.parse().ok()).flatten()
        })
    }

    /// `ctr run --rm ...`: runs COMMAND to its end, then deletes the task,
    /// the container and its snapshot.
    pub fn run_rm(&self, id: &str, command: &[&str]) -> Output {
        let image = self.image();
        let flags = self.run_flags();
        let mut args = vec!["run", "--rm", "--snapshotter", "overlayfs"];
        args.extend(flags.iter().map(String::as_str));
        args.extend([image, id]);
        args.extend_from_slice(command);
        self.ctr(&args)
    }

    /// `ctr run --rm --snapshotter overlayfs FLAGS IMAGE ID COMMAND...`,
    /// runc's state and the fifos under our state directory, not started:
    /// for a task whose output a test reads as it comes (ctr passes the
    /// signals it gets on to the task).
    pub fn run_command(&self, flags: &[String], image: &str, id: &str, command: &[&str]) -> Command {
        let mut run = Command::new(CTR);
        run.args(&self.cli.prefix).args(["run", "--rm", "--snapshotter", "overlayfs"]).args(self.run_flags());
        run.args(flags).args([image, id]).args(command);
        run
    }

    /// A task's status in `ctr task ls` (RUNNING, STOPPED...), if listed.
    pub fn task_status(&self, id: &str) -> Option<String> {
        let out = self.ctr(&["task", "ls"]);
        stdout_text(&out).lines().skip(1).find_map(|l| {
            let fields: Vec<&str> = l.split_whitespace().collect();
            (fields.first() == Some(&id)).then(|| fields.last().unwrap_or(&"").to_string())
        })
    }

    /// Waits until the task's status is `want`; panics after `timeout`.
    pub fn wait_task_status(&self, id: &str, want: &str, timeout: Duration) {
        poll_until_else(&format!("task {id} to be {want}"), timeout, || {
            let status = self.task_status(id);
            match status.as_deref() == Some(want) {
                true => Ok(()),
                false => Err(format!("it is {status:?}")),
            }
        });
    }
}

impl Drop for Containerd {
    fn drop(&mut self) {
        let dirs = self.dirs();
        // 1. Tasks, containers (with their snapshots), through containerd.
        if matches!(self.child.try_wait(), Ok(None)) {
            let ctr = |args: &[&str]| self.cli.quietly(args);
            let list = |args: &[&str]| self.cli.list(args);
            for task in list(&["task", "ls", "-q"]) {
                let _ = ctr(&["task", "kill", "-s", "SIGKILL", &task]);
                std::thread::sleep(Duration::from_millis(200));
                if let Some(out) = ctr(&["task", "rm", "-f", &task]) {
                    if !out.status.success() {
                        eprintln!("cleanup: ctr task rm -f {task}: {}", stderr_text(&out));
                    }
                }
            }
            for container in list(&["containers", "ls", "-q"]) {
                let _ = ctr(&["containers", "rm", &container]);
            }
            for snapshot in list(&["snapshots", "--snapshotter", "overlayfs", "ls"])
                .iter()
                .filter(|s| s.contains(self.name.as_str()))
            {
                let _ = ctr(&["snapshots", "--snapshotter", "overlayfs", "rm", snapshot]);
            }
        }
        // 2. containerd, whatever survived it (shims go on by themselves
        // when containerd stops; their command line names our socket, so
        // our state directory), the rootfs mounts left, the state
        // directory's own mount, and the state directory.
        tear_down(&mut self.child, Duration::from_secs(10), &dirs, &self.state);
    }
}

// Views and event logs ---------------------------------------------------

/// `mount --rbind SOURCE TARGET`, then `mount --make-rprivate TARGET`: a
/// second view of a directory and every mount below it, as a backup or
/// scanning tool leaves one, that no longer follows what happens to the
/// original. `umount -R -l` on drop.
pub struct RbindView(pub PathBuf);

impl RbindView {
    pub fn private(source: &Path, target: &Path) -> RbindView {
        use nix::mount::{mount, MsFlags};
        std::fs::create_dir_all(target).expect("create the view's mountpoint");
        mount(Some(source), target, None::<&str>, MsFlags::MS_BIND | MsFlags::MS_REC, None::<&str>)
            .unwrap_or_else(|e| panic!("rbind {} on {}: {e}", source.display(), target.display()));
        let view = RbindView(target.to_path_buf());
        mount(None::<&str>, target, None::<&str>, MsFlags::MS_PRIVATE | MsFlags::MS_REC, None::<&str>)
            .unwrap_or_else(|e| panic!("make {} rprivate: {e}", target.display()));
        view
    }
}

impl Drop for RbindView {
    fn drop(&mut self) {
        let _ = run_quietly(CLEANUP_TIMEOUT, "umount", &["-R", "-l", &self.0.to_string_lossy()]);
        // umount(8) may be missing or fail; a lazy umount2 detaches the whole tree anyway.
        unmount_below(std::slice::from_ref(&self.0));
    }
}

/// With `$PODSTUCK_RUNTIME_TRACES=DIR`: a second `podstuck watch --json`
/// (no `--findings`; `--every-call` unless the case is a storm) beside the
/// scenario's, whose call events about the scenario's directories (or
/// made by its daemons) are saved to `DIR/<case>.jsonl` with the start and
/// end lines: the raw facts a diagnosis is built on.
pub struct EventLog {
    watch: Watch,
    file: PathBuf,
}

impl EventLog {
    pub fn start(case: &str, every_call: bool) -> Option<EventLog> {
        let dir = PathBuf::from(std::env::var_os("PODSTUCK_RUNTIME_TRACES")?);
        std::fs::create_dir_all(&dir).expect("create the trace directory");
        let watch = Watch::start(if every_call { &["--every-call"] } else { &[] });
        Some(EventLog { watch, file: dir.join(format!("{case}.jsonl")) })
    }

    /// Stops it and writes the events about `dirs`, or by `pids`.
    pub fn save(self, dirs: &[PathBuf], pids: &[u32]) {
        // Let the last calls through the ring buffer.
        std::thread::sleep(Duration::from_secs(1));
        let done = self.watch.stop(libc::SIGINT);
        let about = |e: &Value| {
            ["abs_path", "path"]
                .iter()
                .filter_map(|f| e[*f].as_str())
                .any(|p| dirs.iter().any(|d| is_under(Path::new(p), d)))
                || e["pid"].as_u64().is_some_and(|p| pids.contains(&(p as u32)))
        };
        let mut out = match std::fs::File::create(&self.file) {
            Ok(f) => std::io::BufWriter::new(f),
            Err(e) => {
                eprintln!("cannot write {}: {e}", self.file.display());
                return;
            }
        };
        let mut kept = 0;
        let _ = writeln!(out, "{}", done.start);
        for event in done.events.iter().filter(|e| about(e)) {
            let _ = writeln!(out, "{event}");
            kept += 1;
        }
        if let Some(end) = &done.end {
            let _ = writeln!(out, "{end}");
        }
        eprintln!("saved {kept} call events to {}", self.file.display());
    }
}

/// Waits until the daemon answers `question` (`ask` succeeds) and returns
/// the answer; why not if it exits first or does not answer within
/// START_TIMEOUT.
fn await_daemon<D>(
    daemon: &mut D,
    question: &str,
    child: impl Fn(&mut D) -> &mut Child,
    ask: impl Fn(&D) -> Output,
) -> Result<Output, String> {
    let mut answer = None;
    let outcome = within(START_TIMEOUT, || {
        if let Ok(Some(status)) = child(daemon).try_wait() {
            return Some(Err(format!("it exited ({status})")));
        }
        let said = ask(daemon);
        if said.status.success() {
            return Some(Ok(said));
        }
        answer = Some(said);
        None
    });
    outcome.unwrap_or_else(|| {
        let said = answer.as_ref().map(stderr_text).unwrap_or_default();
        Err(format!("`{question}` did not reach it within {START_TIMEOUT:?}: {said}"))
    })
}

/// The storage driver a dockerd runs, asked the way that also says it answers.
fn daemon_info(daemon: &Dockerd) -> Output {
    daemon.docker_may_fail(&["info", "--format", "{{.Driver}}"])
}

/// Asserts that a runtime command failed with `needles` in its message.
pub fn failed_with(out: &Output, what: &str, needles: &[&str]) {
    let err = stderr_text(out);
    assert!(!out.status.success(), "fixture: `{what}` should fail, but it succeeded: {}", stdout_text(out));
    for needle in needles {
        assert!(err.contains(needle), "fixture: `{what}` should fail with {needle:?}; it said: {err}");
    }
    eprintln!("fixture: `{what}` failed as expected: {err}");
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn a_command_line_names_a_dir_only_as_a_whole_component() {
        let shim = b"/usr/bin/containerd-shim-runc-v2\0-namespace\0moby\0-address\0/var/run/podstuck-abc/containerd/containerd.sock\0";
        assert!(mentions(shim, b"/var/run/podstuck-abc"));
        assert!(!mentions(shim, b"/var/run/podstuck-ab"));
        assert!(!mentions(b"containerd\0--config\0/var/run/podstuck-abc-c/x.toml\0", b"/var/run/podstuck-abc"));
        assert!(mentions(b"sleep\0/var/run/podstuck-abc", b"/var/run/podstuck-abc"));
        assert!(!mentions(b"", b"/var/run/podstuck-abc"));
    }

    #[test]
    fn short_names_differ_and_stay_short() {
        let (a, b) = (short_name(), short_name());
        assert_ne!(a, b);
        assert_eq!(a.len(), 9);
        assert!(format!("/var/run/podstuck-{a}/containerd/containerd.sock.ttrpc").len() < 108);
    }

    #[test]
    fn a_finding_is_ours_by_whole_path_components() {
        let dirs = vec![PathBuf::from("/run/podstuck-abc")];
        let f = json!({"paths": ["/run/podstuck-abc/x"]});
        assert!(finding_is_under(&f, &dirs));
        let g = json!({"paths": ["/run/podstuck-abcd/x"]});
        assert!(!finding_is_under(&g, &dirs));
    }
}
