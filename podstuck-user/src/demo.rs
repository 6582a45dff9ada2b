//! `podstuck demo`: the main job on a built-in default. It builds a
//! throwaway simulated node (a kubelet root with real mounts, a leaked
//! docker volume of 120,000 directories, an immutable file in an image
//! layer, a container rootfs held open by a process, a pod cgroup with a
//! live task, a pod sandbox's network namespace, a CSI volume whose
//! driver's socket nothing listens on), runs actors named kubelet, dockerd and containerd that get
//! stuck on it the way those daemons do, traces them with the real probes
//! and prints the diagnosis; then removes everything it made, on Ctrl-C too.
//!
//! The actors are this binary re-run as `podstuck demo-actor ...` (hidden):
//! each is its own process, as the real daemons are, so the detectors tell
//! them apart. The lab is the one place podstuck changes a node, and only
//! what it made itself, under `/var/tmp/podstuck-demo-<pid>` (and its
//! sandbox's empty network namespace, `/run/netns/cni-podstuck-demo-<pid>`,
//! where runtimes make them: nowhere else is one proof). Everything is
//! removed at the end: on Ctrl-C, SIGTERM and SIGHUP (a closed terminal, a
//! dropped ssh session) too; what a SIGKILLed demo left is found and
//! removed by the next demo.

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd};
use std::os::unix::ffi::{OsStrExt, OsStringExt};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context, Result};
use nix::errno::Errno;
use nix::fcntl::{openat, OFlag, AT_FDCWD};
use nix::mount::{umount2, MntFlags, MsFlags};
use nix::sys::signal::{kill, Signal};
use nix::sys::stat::Mode;
use nix::unistd::{unlinkat, Pid, UnlinkatFlags};

use crate::identify::cgroups::cgroup2_mount;
use crate::identify::process::parse_stat;
use crate::inspect::mounts::{is_at_or_below, parse_mountinfo};
use crate::inspect::real_node::cgroupfs::{cgroup_tree, listed_ids};
use crate::watch::{watch_with, WatchOptions};

const POD_VOLUME: &str = "5f1c2a9e-7d3b-4c1a-9e8f-0a1b2c3d4e5f";
const POD_CGROUP: &str = "8a2b4c6d-1e3f-4a5b-8c7d-9e0f1a2b3c4d";
/// The orphaned pod whose volume directory still holds files.
const POD_ORPHAN: &str = "4e6a8c0e-5f7b-4d9c-8e2a-3c4d5e6f7a8b";
/// The pod whose PID 1 drops SIGTERM, and the pod whose network DEL fails.
const POD_SIGTERM: &str = "2c4e6a8b-3d5f-4b7c-9e1a-2b3c4d5e6f70";
const POD_SANDBOX: &str = "6b8d0f2a-4c6e-4d8a-8b0c-1d2e3f4a5b6c";
/// The pod whose CSI volume's node plugin is gone, and its driver.
const POD_CSI: &str = "1a3c5e7f-2b4d-4f6a-8c9e-0d1f2a3b4c5d";
const CSI_DRIVER: &str = "csi.podstuck.demo";
/// The sandbox (pause container) whose network DEL fails.
const SANDBOX: &str = "9d8c7b6a5f4e3d2c1b0a9f8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c3b2a19080706";
/// Debian's bridge plugin (containernetworking-plugins), the one the
/// sandbox scenario runs as containerd runs it.
const CNI_BRIDGE: &str = "/usr/lib/cni/bridge";
const CONTAINER: &str = "3f2a9c41d7e8b6a5f4c3b2a1908f7e6d5c4b3a29180f7e6d5c4b3a2918070605";
const LAYER: &str = "7c1e0d9f8a7b6c5d4e3f2a1b0c9d8e7f6a5b4c3d2e1f0a9b8c7d6e5f4a3b2c1d";
/// The leaked volume: enough for a storm podstuck can time.
const LEAKED_DIRS: usize = 120_000;
/// dockerd's removal pace, calls per second: a disk-bound RemoveAll, slow
/// enough to watch (on tmpfs it would be over in a second).
const STORM_PACE: u64 = 25_000;

/// What `podstuck demo` was asked.
#[derive(Clone, Debug)]
pub struct DemoOptions {
    pub json: bool,
    pub duration: Duration,
    /// Where the kernel programs attach, as `watch --attach`.
    pub attach: crate::kernel_features::AttachPoint,
}

/// The lab's node state; dropping it undoes all of it, children first.
struct Lab {
    root: PathBuf,
    mounts: Vec<PathBuf>,
    immutable: Vec<PathBuf>,
    cgroups: Vec<PathBuf>,
    children: Vec<Child>,
    /// Immutable files may be anywhere in the tree (a lab found, not made).
    flags_anywhere: bool,
    /// The sandbox's network namespace, bound where runtimes keep them.
    netns: Option<PathBuf>,
    /// The directory of namespaces, where the lab made it.
    netns_dir_made: bool,
}

fn run_tool(program: &str, args: &[&OsStr]) -> Result<()> {
    let status = Command::new(program).args(args).status().with_context(|| format!("running {program}"))?;
    if !status.success() {
        bail!("{program} {:?} failed: {status}", args);
    }
    Ok(())
}

/// Where every demo builds its lab; `<LAB_PREFIX><pid>`.
const LAB_PREFIX: &str = "/var/tmp/podstuck-demo-";

/// Says something on stderr, and nothing if stderr is gone (a closed
/// terminal): cleanup must never stop half-way on a failed message.
fn say(message: &str) {
    use std::io::Write;
    let _ = writeln!(std::io::stderr(), "podstuck demo: {message}");
}

/// Where runtimes bind their pods' network namespaces (`ip netns` too).
const NETNS_DIR: &str = "/run/netns";

/// The sandbox network namespace of the demo with this pid. Named apart
/// from a runtime's (`cni-<uuid>`), so no demo ever touches theirs.
fn lab_netns(pid: u32) -> PathBuf {
    Path::new(NETNS_DIR).join(format!("cni-podstuck-demo-{pid}"))
}

/// The lab's pid, from its root (`<LAB_PREFIX><pid>`).
fn lab_pid(root: &Path) -> Option<u32> {
    root.to_str()?.strip_prefix(LAB_PREFIX)?.parse().ok()
}

/// A new, empty network namespace bound at `at`, as `ip netns add` makes
/// one: a thread of its own enters it (namespaces are per thread) and
/// binds its `ns/net` there; the bind keeps it once the thread is gone.
fn add_netns(at: &Path) -> Result<()> {
    std::fs::File::create(at).with_context(|| format!("creating {}", at.display()))?;
    let target = at.to_path_buf();
    let bound = std::thread::spawn(move || -> nix::Result<()> {
        nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET)?;
        nix::mount::mount(Some("/proc/thread-self/ns/net"), &target, None::<&str>, MsFlags::MS_BIND, None::<&str>)
    })
    .join()
    .map_err(|_| anyhow::anyhow!("the thread making a network namespace panicked"))?;
    if let Err(e) = bound {
        let _ = std::fs::remove_file(at);
        return Err(e).with_context(|| format!("making a network namespace at {}", at.display()));
    }
    Ok(())
}

/// Undoes `add_netns`: the bind (the namespace goes with its last user),
/// then its file.
fn remove_netns(at: &Path) {
    let _ = umount2(at, MntFlags::MNT_DETACH);
    let _ = std::fs::remove_file(at);
}

/// The demo cgroup of the demo with this pid, under the cgroup v2 mount.
fn lab_cgroup(cgroup2: &Path, pid: u32) -> PathBuf {
    cgroup2.join(format!("podstuck-demo-{pid}"))
}

impl Lab {
    /// What an earlier demo left behind, as a lab to drop: its mounts,
    /// cgroups and immutable files found on the node. Its own processes
    /// (the actors, whose command line names the lab; `sleep`s sitting in
    /// the lab or in its cgroup) are killed first; nobody else's.
    fn left_by(root: PathBuf, pid: u32) -> Lab {
        let root_bytes = root.as_os_str().as_bytes().to_vec();
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        let cgroup2 = cgroup2_mount(&mountinfo);
        let cgroup = cgroup2.as_deref().map(|c| lab_cgroup(c, pid)).filter(|c| c.is_dir());
        let in_cgroup: Vec<u32> =
            cgroup.iter().flat_map(|c| cgroup_tree(c)).flat_map(|dir| listed_ids(&dir.join("cgroup.procs"))).collect();
        for proc_pid in std::fs::read_dir("/proc")
            .into_iter()
            .flatten()
            .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        {
            let cmdline = std::fs::read(format!("/proc/{proc_pid}/cmdline")).unwrap_or_default();
            let args: Vec<&[u8]> = cmdline.split(|b| *b == 0).collect();
            let names_lab = args.iter().any(|a| is_at_or_below(a, &root_bytes));
            let actor = args.get(1) == Some(&&b"demo-actor"[..]) && names_lab;
            let cwd = std::fs::read_link(format!("/proc/{proc_pid}/cwd"))
                .map(|p| p.into_os_string().into_vec())
                .unwrap_or_default();
            let sleeper = args.first().is_some_and(|a| a.ends_with(b"sleep"))
                && (is_at_or_below(&cwd, &root_bytes) || in_cgroup.contains(&proc_pid));
            if actor || sleeper {
                let _ = kill(Pid::from_raw(proc_pid as i32), Signal::SIGKILL);
            }
        }
        let mounts = parse_mountinfo(mountinfo.as_bytes())
            .into_iter()
            .filter(|m| is_at_or_below(&m.mount_point, &root_bytes))
            .map(|m| PathBuf::from(OsStr::from_bytes(&m.mount_point)))
            .collect();
        // Parents before children: dropped in reverse.
        let cgroups = cgroup.iter().flat_map(|c| cgroup_tree(c)).collect();
        let mut lab = Lab::empty(root);
        lab.mounts = mounts;
        lab.cgroups = cgroups;
        lab.flags_anywhere = true;
        lab.netns = Some(lab_netns(pid)).filter(|n| n.exists());
        lab
    }

    /// Removes what earlier demos left whose process is gone (a SIGKILL
    /// cannot be caught, so the next demo cleans up after it), saying so.
    fn remove_leftovers() {
        let Ok(entries) = std::fs::read_dir(Path::new(LAB_PREFIX).parent().expect("has a parent")) else { return };
        for entry in entries.flatten() {
            let path = entry.path();
            let Some(pid) = lab_pid(&path) else {
                continue;
            };
            if live_process_named(pid, "podstuck") {
                continue;
            }
            say(&format!("{} was left by an earlier demo (pid {pid}, no longer running): removing it", path.display()));
            drop(Lab::left_by(path, pid));
        }
    }

    fn create() -> Result<Lab> {
        let root = PathBuf::from(format!("{LAB_PREFIX}{}", std::process::id()));
        if root.exists() {
            bail!("{} already exists: remove it (a leftover of a killed demo) and run again", root.display());
        }
        std::fs::create_dir_all(&root).with_context(|| format!("creating {}", root.display()))?;
        Ok(Lab::empty(root))
    }

    /// A lab at `root` that holds nothing yet.
    fn empty(root: PathBuf) -> Lab {
        Lab {
            root,
            mounts: vec![],
            immutable: vec![],
            cgroups: vec![],
            children: vec![],
            flags_anywhere: false,
            netns: None,
            netns_dir_made: false,
        }
    }

    /// The sandbox's network namespace, still there as a failing DEL
    /// leaves it (what confirms the teardown failing); None, said, where
    /// one cannot be made here (the finding then stays likely).
    fn sandbox_netns(&mut self) {
        let dir = Path::new(NETNS_DIR);
        if !dir.is_dir() {
            match std::fs::create_dir_all(dir) {
                Ok(()) => self.netns_dir_made = true,
                Err(e) => return say(&format!("no network namespace for the sandbox (creating {NETNS_DIR}: {e})")),
            }
        }
        let at = lab_netns(std::process::id());
        // One by this name is an earlier demo's that had this pid (gone:
        // the pid is ours now), left by a SIGKILL with its lab removed.
        remove_netns(&at);
        match add_netns(&at) {
            Ok(()) => self.netns = Some(at),
            Err(e) => say(&format!("no network namespace for the sandbox: {e:#}")),
        }
    }

    fn mount_tmpfs(&mut self, at: &Path, options: &str) -> Result<()> {
        std::fs::create_dir_all(at)?;
        nix::mount::mount(Some("podstuck-demo"), at, Some("tmpfs"), MsFlags::empty(), Some(options))
            .with_context(|| format!("mounting a tmpfs at {}", at.display()))?;
        self.mounts.push(at.to_path_buf());
        Ok(())
    }

    fn spawn(&mut self, command: &mut Command) -> Result<u32> {
        let child = command.stdin(Stdio::null()).stdout(Stdio::null()).spawn().context("starting a demo process")?;
        let pid = child.id();
        self.children.push(child);
        Ok(pid)
    }

    fn kubelet_root(&self) -> PathBuf {
        self.root.join("kubelet")
    }

    /// P7: an orphaned pod's CSI volume directory, unmounted, that still
    /// holds what a workload wrote into it while nothing was mounted there;
    /// `kubelet`'s housekeeping rmdirs it every 2 s (ENOTEMPTY).
    fn orphaned_volume(&self, mut kubelet: Command) -> Result<Command> {
        let orphan =
            self.kubelet_root().join("pods").join(POD_ORPHAN).join("volumes/kubernetes.io~csi/pvc-orphan/mount");
        std::fs::create_dir_all(&orphan)?;
        std::fs::write(orphan.join("data.db"), b"written while unmounted\n")?;
        kubelet.arg("every-2s-rmdir").arg(&orphan);
        Ok(kubelet)
    }

    /// The node state of every scenario; returns the actors' commands.
    fn build(&mut self, podstuck: &Path) -> Result<Vec<Command>> {
        let actor = |comm: &str| {
            let mut cmd = Command::new(podstuck);
            cmd.arg("demo-actor").arg(comm);
            cmd
        };
        let mut actors = Vec::new();
        // P1: a CSI volume the driver "unpublished" without unmounting.
        let pod = self.kubelet_root().join("pods").join(POD_VOLUME);
        let volume = pod.join("volumes/kubernetes.io~csi/pvc-demo/mount");
        self.mount_tmpfs(&volume, "size=1m")?;
        actors.push({
            let mut a = actor("kubelet");
            a.arg("backoff-rmdir").arg(&volume);
            a
        });
        actors.push(self.orphaned_volume(actor("kubelet"))?);
        // P4: a container rootfs that a process still sits in.
        let rootfs =
            self.root.join("run/containerd/io.containerd.runtime.v2.task/k8s.io").join(CONTAINER).join("rootfs");
        self.mount_tmpfs(&rootfs, "size=1m")?;
        self.spawn(Command::new("sleep").arg("infinity").current_dir(&rootfs))?;
        actors.push({
            let mut a = actor("containerd");
            a.arg("unmount-bursts").arg(&rootfs);
            a
        });
        // P3: an image layer file someone made immutable.
        let etc = self.root.join("docker/overlay2").join(LAYER).join("diff/etc");
        std::fs::create_dir_all(&etc)?;
        let locked = etc.join("resolv.conf");
        std::fs::write(&locked, b"nameserver 10.0.0.10\n")?;
        run_tool("chattr", &["+i".as_ref(), locked.as_os_str()])?;
        self.immutable.push(locked.clone());
        actors.push({
            let mut a = actor("dockerd");
            a.arg("unlink-every").arg(&locked);
            a
        });
        // P2: a leaked volume of empty directories, on a tmpfs so it is quick to make.
        let volumes = self.root.join("docker/volumes");
        self.mount_tmpfs(&volumes, "size=256m,nr_inodes=400000")?;
        let data = volumes.join("leaked/_data");
        std::fs::create_dir_all(&data)?;
        for i in 0..LEAKED_DIRS {
            std::fs::create_dir(data.join(format!("d{i:06}")))?;
        }
        actors.push({
            let mut a = actor("dockerd");
            a.arg("remove-all").arg(volumes.join("leaked"));
            a
        });
        // P5: a pod cgroup with a task still in it (cgroup v2 only).
        let mountinfo = std::fs::read_to_string("/proc/self/mountinfo").unwrap_or_default();
        if let Some(cgroup2) = cgroup2_mount(&mountinfo) {
            let parent = lab_cgroup(&cgroup2, std::process::id());
            let slice = parent.join(format!("kubepods-besteffort-pod{}.slice", POD_CGROUP.replace('-', "_")));
            std::fs::create_dir_all(&slice).with_context(|| format!("creating the demo cgroup {}", slice.display()))?;
            self.cgroups.push(parent.clone());
            self.cgroups.push(slice.clone());
            let pid = self.spawn(Command::new("sleep").arg("infinity"))?;
            std::fs::write(slice.join("cgroup.procs"), pid.to_string())
                .context("moving a task into the demo cgroup")?;
            actors.push({
                let mut a = actor("kubelet");
                a.arg("every-2s-rmdir").arg(&slice);
                a
            });
            // P13: a container whose PID 1 has no SIGTERM handler: the
            // kernel drops the shim's SIGTERM. The shell moves itself into
            // the pod cgroup first, so the init unshare forks is born there.
            let app = parent.join(format!("kubepods-besteffort-pod{}.slice", POD_SIGTERM.replace('-', "_")));
            std::fs::create_dir_all(&app).with_context(|| format!("creating the demo cgroup {}", app.display()))?;
            self.cgroups.push(app.clone());
            let procs = app.join("cgroup.procs");
            self.spawn(
                Command::new("sh")
                    .arg("-c")
                    .arg("echo $$ > \"$1\" && exec unshare --pid --fork sleep infinity")
                    .arg("sh")
                    .arg(&procs),
            )?;
            actors.push({
                let mut a = actor("containerd-shim");
                a.arg("sigterm-once").arg(&procs);
                a
            });
        }
        // P12: the pod network's DEL fails in the IPAM plugin (its store is
        // a file, not a directory), and containerd runs it again every 2 s.
        if Path::new(CNI_BRIDGE).is_file() {
            let cni = self.root.join("cni");
            std::fs::create_dir_all(&cni)?;
            std::fs::write(cni.join("store"), b"not a directory\n")?;
            self.sandbox_netns();
            // podstuck trusts a plugin's exec only when its parent is a
            // runtime by its executable, not by the name it calls itself:
            // the lab's containerd is this binary under that name (a hard
            // link, else a copy).
            let containerd = self.daemon_named(podstuck, "containerd")?;
            actors.push({
                let mut a = Command::new(&containerd);
                a.arg("demo-actor").arg("containerd").arg("cni-del-every-2s").arg(&cni);
                a
            });
        } else {
            say(&format!("{CNI_BRIDGE} is not installed (Debian's containernetworking-plugins): the failing network teardown is left out"));
        }
        actors.push(self.csi_plugin_gone(podstuck)?);
        Ok(actors)
    }

    /// This binary as `<lab>/bin/<name>` (a hard link, else a copy): a lab
    /// daemon whose executable is named as the node's, which is what
    /// podstuck believes of a runtime or of kubelet, never the name a
    /// process gives itself.
    fn daemon_named(&self, podstuck: &Path, name: &str) -> Result<PathBuf> {
        let bin = self.root.join("bin");
        std::fs::create_dir_all(&bin)?;
        let daemon = bin.join(name);
        if std::fs::hard_link(podstuck, &daemon).is_err() {
            std::fs::copy(podstuck, &daemon)
                .with_context(|| format!("copying {} to {}", podstuck.display(), daemon.display()))?;
        }
        Ok(daemon)
    }

    /// P17: a pod's CSI volume whose driver's node plugin is gone, its
    /// socket left behind with nothing listening, and kubelet dialing it
    /// every 2 s. podstuck believes a connect is kubelet's only when its
    /// executable is named kubelet: the lab's is this binary under that
    /// name (a hard link, else a copy).
    fn csi_plugin_gone(&mut self, podstuck: &Path) -> Result<Command> {
        let volume = self.kubelet_root().join("pods").join(POD_CSI).join("volumes/kubernetes.io~csi/pvc-plugin-gone");
        std::fs::create_dir_all(volume.join("mount"))?;
        let data = format!(
            r#"{{"driverName":"{CSI_DRIVER}","volumeHandle":"pvc-plugin-gone","specVolID":"pvc-plugin-gone"}}"#
        );
        std::fs::write(volume.join("vol_data.json"), data)?;
        let socket = self.kubelet_root().join("plugins").join(CSI_DRIVER).join("csi.sock");
        std::fs::create_dir_all(socket.parent().expect("a socket in a directory"))?;
        drop(std::os::unix::net::UnixListener::bind(&socket).with_context(|| format!("binding {}", socket.display()))?);
        let kubelet = self.daemon_named(podstuck, "kubelet")?;
        let mut a = Command::new(&kubelet);
        a.arg("demo-actor").arg("kubelet").arg("connect-every-2s").arg(&socket);
        Ok(a)
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for child in &mut self.children {
            let _ = child.kill();
            let _ = child.wait();
        }
        for file in &self.immutable {
            let _ = Command::new("chattr").arg("-i").arg(file).status();
        }
        for cgroup in self.cgroups.iter().rev() {
            // What a scenario started in its own namespace outlives its
            // parent (the unshare'd init): killed by its cgroup.
            for pid in listed_ids(&cgroup.join("cgroup.procs")) {
                let _ = kill(Pid::from_raw(pid as i32), Signal::SIGKILL);
            }
            // A killed task leaves its cgroup a moment later.
            let deadline = Instant::now() + Duration::from_secs(5);
            while std::fs::remove_dir(cgroup).is_err() && cgroup.exists() && Instant::now() < deadline {
                std::thread::sleep(Duration::from_millis(50));
            }
        }
        for mount in self.mounts.iter().rev() {
            let _ = umount2(mount, MntFlags::MNT_DETACH);
        }
        if let Some(netns) = &self.netns {
            remove_netns(netns);
        }
        if self.netns_dir_made {
            // Only if empty: a runtime may have made one there meanwhile.
            let _ = std::fs::remove_dir(NETNS_DIR);
        }
        if self.flags_anywhere {
            // What is left is the lab's own disk tree: clear every flag in it.
            let _ =
                Command::new("chattr").args(["-R", "-f", "-i", "-a"]).arg(&self.root).stderr(Stdio::null()).status();
        }
        // Never delete through a mount: if one is left under the lab, leave the lab.
        let mountinfo = std::fs::read(Path::new("/proc/self/mountinfo")).unwrap_or_default();
        let root = self.root.as_os_str().as_bytes();
        if parse_mountinfo(&mountinfo).iter().any(|m| is_at_or_below(&m.mount_point, root)) {
            say(&format!("a mount is still under {}: left in place, remove it by hand", self.root.display()));
            return;
        }
        match std::fs::remove_dir_all(&self.root) {
            Ok(()) => say(&format!("removed {} and everything the demo made", self.root.display())),
            Err(e) => say(&format!("could not remove {}: {e}", self.root.display())),
        }
    }
}

/// Runs the demo: build the lab, trace it, diagnose, clean up.
pub async fn demo(options: &DemoOptions) -> Result<()> {
    if !nix::unistd::geteuid().is_root() {
        bail!("the demo mounts filesystems and loads kernel programs: run it as root (sudo podstuck demo)");
    }
    let podstuck = std::env::current_exe().context("finding the podstuck binary to run the actors")?;
    Lab::remove_leftovers();
    let mut lab = Lab::create()?;
    let mut actors = lab.build(&podstuck).context("building the demo lab")?;
    say(&format!(
        "a throwaway node under {}: a CSI volume still mounted, a container rootfs held open, \
         an immutable file in an image layer, a leaked volume of {LEAKED_DIRS} directories, \
         an orphaned pod's volume directory still holding files, a pod cgroup with a live task, \
         a container whose PID 1 ignores SIGTERM, a pod network whose teardown fails",
        lab.root.display()
    ));
    let watch_options = WatchOptions {
        json: options.json,
        duration: Some(options.duration),
        kubelet_root: lab.kubelet_root(),
        hung_after: Duration::from_secs(5),
        // The diagnosis, not the hundreds of thousands of calls behind it.
        findings_only: true,
        // The demo's own tracer; a podstuck elsewhere on the node does not matter here.
        concurrent: true,
        attach: options.attach,
        // Its critical findings are the lab's: no "exit 3" (it exits 0).
        says_verdict: false,
        ..WatchOptions::default()
    };
    let mut spawn_error = None;
    let result = watch_with(&watch_options, || {
        for actor in &mut actors {
            match lab.spawn(actor) {
                Ok(_) => {}
                Err(e) => spawn_error = Some(e),
            }
        }
    })
    .await;
    drop(lab);
    if let Some(e) = spawn_error {
        return Err(e.context("starting the demo's actors"));
    }
    // The lab's critical findings are its design, not a node's problem: exit
    // 0, and the last line says so (docs/exit-codes.md).
    let verdict = result?;
    if verdict.critical_active > 0 {
        say(&format!(
            "{} critical finding(s) still active at the end, as the lab is built to leave them: the demo exits 0 (on a node, `watch --duration` would exit 3)",
            verdict.critical_active
        ));
    }
    Ok(())
}

/// Sleeps, or returns false when the lab is gone (the demo ended).
fn pause(d: Duration, path: &Path) -> bool {
    std::thread::sleep(d);
    path.parent().is_some_and(Path::exists)
}

/// A stand-in daemon: names itself, then makes the calls its real
/// counterpart makes when stuck, until the lab goes away.
pub fn actor(comm: &str, op: &str, path: &Path) -> Result<()> {
    nix::sys::prctl::set_name(&CString::new(comm)?)?;
    match op {
        // kubelet's volume TearDown: 0.5 s doubling (std's remove_dir is
        // rmdir(2), the call kubelet's fails on).
        "backoff-rmdir" => {
            let mut wait = Duration::from_millis(500);
            while std::fs::remove_dir(path).is_err() && pause(wait, path) {
                wait = (wait * 2).min(Duration::from_secs(122));
            }
        }
        // kubelet's housekeeping of pod cgroups: every 2 s.
        "every-2s-rmdir" => while std::fs::remove_dir(path).is_err() && pause(Duration::from_secs(2), path) {},
        // containerd's mount.Unmount: 50 tries 50 ms apart, then a pause.
        "unmount-bursts" => loop {
            for _ in 0..50 {
                if umount2(path, MntFlags::empty()).is_ok() {
                    return Ok(());
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            if !pause(Duration::from_secs(5), path) {
                return Ok(());
            }
        },
        "unlink-every" => {
            while unlinkat(AT_FDCWD, path, UnlinkatFlags::NoRemoveDir).is_err() && pause(Duration::from_secs(1), path) {
            }
        }
        "remove-all" => remove_all(path, STORM_PACE)?,
        // A shim stopping its container: SIGTERM to the container's init
        // (of the cgroup's processes, `path` its cgroup.procs, the one that
        // is PID 1 of its own PID namespace), once; then it waits.
        "sigterm-once" => {
            for pid in std::fs::read_to_string(path).unwrap_or_default().lines().filter_map(|l| l.parse().ok()) {
                if is_namespace_init(pid) {
                    let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
                }
            }
            while pause(Duration::from_secs(1), path) {}
        }
        // kubelet dialing a CSI plugin's socket, as its volume teardown
        // retries (the connect fails: nothing listens).
        "connect-every-2s" => {
            while std::os::unix::net::UnixStream::connect(path).is_err() && pause(Duration::from_secs(2), path) {}
        }
        "cni-del-every-2s" => loop {
            cni_del(path)?;
            if !pause(Duration::from_secs(2), &path.join("store")) {
                return Ok(());
            }
        },
        _ => bail!("unknown demo actor op {op}"),
    }
    Ok(())
}

/// Whether process `pid` runs, named `name`: whether the demo of that pid
/// still runs. A zombie does not: a demo SIGKILLed by a parent that has
/// not reaped it yet keeps its pid and name, but will never clean up.
fn live_process_named(pid: u32, name: &str) -> bool {
    let stat = std::fs::read(format!("/proc/{pid}/stat")).unwrap_or_default();
    parse_stat(&stat).is_some_and(|task| task.comm == name && !matches!(task.state, 'Z' | 'X'))
}

/// Whether process `pid` is PID 1 of a PID namespace of its own (its
/// `NSpid` line names more than one pid, the innermost 1).
fn is_namespace_init(pid: i32) -> bool {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let ids: Vec<&str> =
        status.lines().find_map(|l| l.strip_prefix("NSpid:")).unwrap_or("").split_whitespace().collect();
    ids.len() > 1 && ids.last() == Some(&"1")
}

/// containerd tearing down a pod's network: Debian's bridge plugin run with
/// `CNI_COMMAND=DEL` and the pod in `CNI_ARGS`, its config on stdin, on
/// the lab's sandbox namespace (empty: bridge finds no `eth0` to delete).
/// Its host-local IPAM store is under `dir/store`, a file: host-local
/// fails, and so does bridge.
fn cni_del(dir: &Path) -> Result<()> {
    use std::io::Write;
    let pid = dir.parent().and_then(lab_pid).context("the CNI directory is in a lab")?;
    let config = format!(
        r#"{{"cniVersion":"1.0.0","name":"podstuck-demo","type":"bridge","bridge":"podstuck-demo0","ipam":{{"type":"host-local","subnet":"10.254.0.0/24","dataDir":"{}"}}}}"#,
        dir.join("store/networks").display()
    );
    let mut plugin = Command::new(CNI_BRIDGE)
        .env_clear()
        .env("CNI_COMMAND", "DEL")
        .env("CNI_CONTAINERID", SANDBOX)
        .env("CNI_NETNS", lab_netns(pid))
        .env("CNI_IFNAME", "eth0")
        .env("CNI_PATH", "/usr/lib/cni")
        .env("CNI_ARGS", format!("IgnoreUnknown=1;K8S_POD_NAMESPACE=shop;K8S_POD_NAME=web-0;K8S_POD_UID={POD_SANDBOX}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .with_context(|| format!("running {CNI_BRIDGE}"))?;
    if let Some(mut stdin) = plugin.stdin.take() {
        let _ = stdin.write_all(config.as_bytes());
    }
    plugin.wait()?;
    Ok(())
}

/// Go's os.RemoveAll as dockerd runs it: unlinkat(parent_fd, name, 0),
/// and on EISDIR open the directory, empty it relative to its fd, then
/// unlinkat(parent_fd, name, AT_REMOVEDIR); at about `pace` calls a second.
fn remove_all(path: &Path, pace: u64) -> Result<()> {
    struct Pacer {
        started: Instant,
        calls: u64,
        pace: u64,
    }
    impl Pacer {
        fn call(&mut self) {
            self.calls += 1;
            let due = Duration::from_secs_f64(self.calls as f64 / self.pace as f64);
            if let Some(ahead) = due.checked_sub(self.started.elapsed()) {
                if ahead > Duration::from_millis(2) {
                    std::thread::sleep(ahead);
                }
            }
        }
    }
    fn remove_at(parent: BorrowedFd<'_>, name: &OsStr, pacer: &mut Pacer) {
        let is_dir = unlinkat(parent, name, UnlinkatFlags::NoRemoveDir) == Err(Errno::EISDIR);
        pacer.call();
        if !is_dir {
            return;
        }
        let flags = OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_NOFOLLOW | OFlag::O_CLOEXEC;
        let Ok(dir) = openat(parent, name, flags, Mode::empty()) else { return };
        let names: Vec<OsString> = std::fs::read_dir(format!("/proc/self/fd/{}", dir.as_raw_fd()))
            .map(|d| d.filter_map(|e| Some(e.ok()?.file_name())).collect())
            .unwrap_or_default();
        for child in &names {
            remove_at(dir.as_fd(), child, pacer);
        }
        drop(dir);
        let _ = unlinkat(parent, name, UnlinkatFlags::RemoveDir);
        pacer.call();
    }
    let parent = std::fs::File::open(path.parent().context("the volume has a parent")?)?;
    let name = path.file_name().context("the volume has a name")?;
    let mut pacer = Pacer { started: Instant::now(), calls: 0, pace };
    remove_at(parent.as_fd(), name, &mut pacer);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_zombie_by_the_demos_pid_is_no_running_demo() {
        let mut sleeper = Command::new("sleep").arg("100").spawn().unwrap();
        assert!(live_process_named(sleeper.id(), "sleep"));
        assert!(!live_process_named(sleeper.id(), "podstuck"), "another name");
        sleeper.kill().unwrap();
        // Killed, not reaped: a zombie until wait().
        let deadline = Instant::now() + Duration::from_secs(10);
        while live_process_named(sleeper.id(), "sleep") {
            assert!(Instant::now() < deadline, "sleep {} never became a zombie", sleeper.id());
            std::thread::sleep(Duration::from_millis(5));
        }
        let stat = std::fs::read_to_string(format!("/proc/{}/stat", sleeper.id())).unwrap();
        assert!(stat.contains(") Z "), "{stat}");
        sleeper.wait().unwrap();
        assert!(!live_process_named(sleeper.id(), "sleep"), "reaped");
    }
}
