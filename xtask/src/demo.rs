//! The demo scenario lab: a throwaway kubelet-like tree with real mounts
//! and an immutable file, actors named like kubelet, dockerd and containerd
//! that get stuck on it the way those do, and `podstuck watch` tracing them
//! live with the real probes. Everything it makes is removed at the end,
//! on Ctrl-C too.

use std::ffi::CString;
use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread;
use std::time::Duration;

use anyhow::{bail, Context, Result};

static INTERRUPTED: AtomicBool = AtomicBool::new(false);

extern "C" fn on_sigint(_: libc::c_int) {
    INTERRUPTED.store(true, Ordering::SeqCst);
}

const POD_UID: &str = "5f1c2a9e-7d3b-4c1a-9e8f-0a1b2c3d4e5f";
const LEAKED_DIRS: usize = 300;

/// The lab's node state; dropping it undoes all of it.
struct Lab {
    root: PathBuf,
    mounts: Vec<PathBuf>,
    immutable: Vec<PathBuf>,
}

impl Lab {
    fn create() -> Result<Lab> {
        let root = PathBuf::from(format!("/var/tmp/podstuck-demo-{}", std::process::id()));
        let mut lab = Lab { root: root.clone(), mounts: vec![], immutable: vec![] };
        let pod = root.join("kubelet/pods").join(POD_UID);
        lab.mount_tmpfs(&pod.join("volumes/kubernetes.io~csi/pvc-demo/mount"))?;
        lab.mount_tmpfs(&root.join("containerd/k8s.io/3f2a9c/rootfs"))?;
        let layer = root.join("docker/overlay2/7c1e/diff/etc");
        std::fs::create_dir_all(&layer)?;
        let locked = layer.join("resolv.conf");
        std::fs::write(&locked, b"nameserver 10.0.0.10\n")?;
        let status = Command::new("chattr").arg("+i").arg(&locked).status()?;
        if !status.success() {
            bail!("chattr +i {} failed", locked.display());
        }
        lab.immutable.push(locked);
        let volume = root.join("docker/volumes/leaked/_data");
        for i in 0..LEAKED_DIRS {
            std::fs::create_dir_all(volume.join(format!("d{i:05}")))?;
        }
        Ok(lab)
    }

    fn mount_tmpfs(&mut self, at: &Path) -> Result<()> {
        std::fs::create_dir_all(at)?;
        let status = Command::new("mount").args(["-t", "tmpfs", "-o", "size=1m", "podstuck-demo"]).arg(at).status()?;
        if !status.success() {
            bail!("mounting a tmpfs at {} failed", at.display());
        }
        self.mounts.push(at.to_path_buf());
        Ok(())
    }
}

impl Drop for Lab {
    fn drop(&mut self) {
        for file in &self.immutable {
            let _ = Command::new("chattr").arg("-i").arg(file).status();
        }
        for mount in self.mounts.iter().rev() {
            let _ = Command::new("umount").arg("--lazy").arg(mount).status();
        }
        let _ = std::fs::remove_dir_all(&self.root);
        eprintln!("demo: removed {} (mounts, immutable flag, files)", self.root.display());
    }
}

fn c(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).unwrap()
}

/// Sleeps in small steps so Ctrl-C is honoured at once.
fn pause(d: Duration) -> bool {
    let step = Duration::from_millis(10);
    let mut left = d;
    while !left.is_zero() {
        if INTERRUPTED.load(Ordering::SeqCst) {
            return false;
        }
        let s = left.min(step);
        thread::sleep(s);
        left -= s;
    }
    !INTERRUPTED.load(Ordering::SeqCst)
}

/// kubelet's volume TearDown: remove the volume dir, back off 0.5 s doubling.
fn kubelet(mount: PathBuf) {
    let mut backoff = Duration::from_millis(500);
    for _ in 0..4 {
        // SAFETY: valid C string.
        unsafe { libc::rmdir(c(&mount).as_ptr()) };
        if !pause(backoff) {
            return;
        }
        backoff *= 2;
    }
}

/// containerd's mount.Unmount: up to 50 tries, 50 ms apart (5 here).
fn containerd(rootfs: PathBuf) {
    let open = std::fs::File::create(rootfs.join("held-by-a-shim"));
    for _ in 0..5 {
        // SAFETY: valid C string.
        unsafe { libc::umount2(c(&rootfs).as_ptr(), 0) };
        if !pause(Duration::from_millis(50)) {
            break;
        }
    }
    drop(open);
}

/// dockerd removing an image layer with an immutable file, then a leaked
/// volume the way Go's os.RemoveAll does: unlinkat relative to a dirfd.
fn dockerd(locked: PathBuf, volume: PathBuf) {
    // SAFETY: valid C string.
    unsafe { libc::unlinkat(libc::AT_FDCWD, c(&locked).as_ptr(), 0) };
    let Ok(dir) = std::fs::File::open(&volume) else { return };
    let Ok(entries) = std::fs::read_dir(&volume) else { return };
    for entry in entries.flatten() {
        if INTERRUPTED.load(Ordering::SeqCst) {
            return;
        }
        let name = CString::new(entry.file_name().as_bytes()).unwrap();
        // SAFETY: valid fd and C string.
        unsafe {
            if libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), 0) != 0 {
                libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), libc::AT_REMOVEDIR);
            }
        }
    }
}

pub fn run(podstuck: &Path) -> Result<()> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        bail!("the demo mounts filesystems and traces the kernel: run it as root (sudo -E cargo xtask demo)");
    }
    // SAFETY: installing a handler that only stores to an atomic.
    unsafe { libc::signal(libc::SIGINT, on_sigint as extern "C" fn(libc::c_int) as libc::sighandler_t) };
    let lab = Lab::create().context("building the demo lab")?;
    eprintln!("demo: built a throwaway node under {}: pod {POD_UID} with a CSI volume still mounted,", lab.root.display());
    eprintln!("demo: a container rootfs held open, an immutable file in an image layer, a leaked volume of {LEAKED_DIRS} dirs");

    let mut watch = Command::new(podstuck)
        .arg("watch")
        .arg("--kubelet-root")
        .arg(lab.root.join("kubelet"))
        .stderr(Stdio::piped())
        .spawn()
        .context("starting podstuck")?;
    // Wait for podstuck's banner: it is attached once it has printed it.
    let mut banner = BufReader::new(watch.stderr.take().unwrap());
    let mut line = String::new();
    banner.read_line(&mut line)?;
    eprint!("{line}");
    thread::spawn(move || {
        for line in banner.lines().map_while(Result::ok) {
            eprintln!("{line}");
        }
    });

    let pod = lab.root.join("kubelet/pods").join(POD_UID);
    let actors = [
        thread::Builder::new().name("kubelet".into()).spawn({
            let m = pod.join("volumes/kubernetes.io~csi/pvc-demo/mount");
            move || kubelet(m)
        })?,
        thread::Builder::new().name("containerd".into()).spawn({
            let r = lab.root.join("containerd/k8s.io/3f2a9c/rootfs");
            move || containerd(r)
        })?,
        thread::Builder::new().name("dockerd".into()).spawn({
            let l = lab.immutable[0].clone();
            let v = lab.root.join("docker/volumes/leaked/_data");
            move || dockerd(l, v)
        })?,
    ];
    for actor in actors {
        let _ = actor.join();
    }
    pause(Duration::from_millis(300));
    // SAFETY: signalling our own child.
    unsafe { libc::kill(watch.id() as i32, libc::SIGINT) };
    let status = watch.wait()?;
    drop(lab);
    if INTERRUPTED.load(Ordering::SeqCst) {
        eprintln!("demo: interrupted; everything it made is gone");
    }
    if !status.success() {
        bail!("podstuck exited with {status}");
    }
    eprintln!("demo: read the lines above: rmdir EBUSY from kubelet on the CSI volume (still mounted),");
    eprintln!("demo: umount2 EBUSY from containerd (a file held open), unlinkat EPERM from dockerd (chattr +i),");
    eprintln!("demo: and dockerd's RemoveAll of the leaked volume. Findings with fixes arrive with the diagnose stage.");
    Ok(())
}
