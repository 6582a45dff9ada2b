//! Raw block volumes (`volumeMode: Block`) as kubelet maps them, made of
//! real loop devices and bind mounts, undone on drop:
//!
//! - [`LoopAttach`]: a loop device bound to a file (`losetup -f --show`),
//!   detached on drop;
//! - [`BlockVolumeMap`]: one pod's mapping of a CSI raw block volume: the
//!   volume's device (a loop device over an image in the scratch
//!   directory, standing in for the disk the CSI driver attached), the CSI
//!   driver's publish bind mount of it at
//!   `plugins/kubernetes.io/csi/volumeDevices/publish/<pv>/<pod uid>`, the
//!   pod's link `pods/<uid>/volumeDevices/kubernetes.io~csi/<pv>` to it,
//!   and kubelet's own bind mount at the global map path
//!   `plugins/kubernetes.io/csi/volumeDevices/<pv>/dev/<pod uid>` with
//!   the loop device kubelet attaches to that file (its lock on the
//!   device);
//! - [`kubelet_unmap`]: kubelet's UnmapBlockVolume on its backoff, as a
//!   process named `kubelet` running `losetup -d` and `umount`.
//!
//! A detach of a loop device in use does not fail: the kernel marks it to
//! go when its last user closes it (autoclear) and `losetup -d` exits 0;
//! the unmount of the bind mount under it is what fails, with EBUSY.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use crate::actors::Process;
use crate::harness::text;
use crate::kubelet::KubeletRoot;
use crate::node::BindMount;
use crate::wait::within;

/// util-linux's losetup and umount: what kubelet runs.
pub const LOSETUP: &str = "/usr/sbin/losetup";
pub const UMOUNT: &str = "/usr/bin/umount";

/// A loop device bound to a file; detached on drop.
pub struct LoopAttach {
    device: PathBuf,
    /// Its backing file as the kernel named it at attach: a loop device's
    /// number is reused as soon as it is detached (tests run side by side),
    /// so "still bound" means bound to this file, never merely bound.
    backing: String,
}

impl LoopAttach {
    /// `losetup -f --show FILE`; panics with losetup's words if it fails.
    pub fn attach(file: &Path) -> LoopAttach {
        let out = Command::new(LOSETUP).args(["-f", "--show"]).arg(file).output().expect("run losetup");
        assert!(
            out.status.success(),
            "losetup -f --show {}: {}",
            file.display(),
            String::from_utf8_lossy(&out.stderr).trim()
        );
        let mut attached =
            LoopAttach { device: PathBuf::from(String::from_utf8_lossy(&out.stdout).trim()), backing: String::new() };
        attached.backing = attached.sysfs("backing_file").unwrap_or_default();
        assert!(
            !attached.backing.is_empty(),
            "{} has no backing file right after losetup bound it",
            attached.device.display()
        );
        attached
    }

    /// `/dev/loopN`.
    pub fn device(&self) -> &Path {
        &self.device
    }

    /// `loopN`.
    pub fn name(&self) -> String {
        self.device.file_name().unwrap().to_string_lossy().into_owned()
    }

    /// A file of its `/sys/block/<name>/loop` directory, trimmed; None once
    /// the device is unbound.
    pub fn sysfs(&self, file: &str) -> Option<String> {
        let at = Path::new("/sys/block").join(self.name()).join("loop").join(file);
        std::fs::read_to_string(at).ok().map(|s| s.trim().to_string())
    }

    /// Whether it is still bound to its file (not to another test's, which
    /// got the device's number once it was free).
    pub fn bound(&self) -> bool {
        self.sysfs("backing_file").is_some_and(|b| b == self.backing)
    }
}

impl Drop for LoopAttach {
    fn drop(&mut self) {
        if !self.bound() {
            return;
        }
        let _ = Command::new(LOSETUP).arg("-d").arg(&self.device).output();
        // A device still open goes when its last user closes it.
        if within(Duration::from_secs(5), || (!self.bound()).then_some(())).is_none() {
            eprintln!(
                "cleanup: {} is still bound (in use): it detaches when its last user lets go",
                self.device.display()
            );
        }
    }
}

/// One pod's mapping of a CSI raw block volume, as kubelet and the CSI
/// driver leave it while the pod runs. Dropped: kubelet's loop device
/// detached, the bind mounts detached, the volume's device detached.
pub struct BlockVolumeMap {
    pub pod_uid: String,
    pub pv: String,
    /// The pod's `volumeDevices` link to the published device.
    pub pod_link: PathBuf,
    /// The CSI driver's bind mount of the device.
    pub publish: PathBuf,
    /// kubelet's bind mount of the device at the global map path.
    pub map: PathBuf,
    // Dropped in this order: kubelet's lock, its bind mount, the
    // driver's, the device.
    lock: Option<LoopAttach>,
    _map_mount: BindMount,
    _publish_mount: BindMount,
    disk: LoopAttach,
}

impl BlockVolumeMap {
    /// Maps volume `pv` (an image of `bytes` in `scratch`, as its device)
    /// for pod `pod_uid` under `root`, the way kubelet does.
    pub fn create(scratch: &Path, root: &KubeletRoot, pod_uid: &str, pv: &str, bytes: u64) -> BlockVolumeMap {
        let image = scratch.join(format!("{pv}.img"));
        std::fs::File::create(&image).and_then(|f| f.set_len(bytes)).expect("make the volume's image");
        let disk = LoopAttach::attach(&image);
        let csi = root.path().join("plugins/kubernetes.io/csi/volumeDevices");
        let publish = csi.join("publish").join(pv).join(pod_uid);
        let map = csi.join(pv).join("dev").join(pod_uid);
        for file in [&publish, &map] {
            std::fs::create_dir_all(file.parent().unwrap()).expect("make the mapping's directories");
            std::fs::File::create(file).expect("make the mapping's file");
        }
        let publish_mount = BindMount::new(disk.device(), &publish);
        let pod_dir = root.pod(pod_uid).dir().join("volumeDevices/kubernetes.io~csi");
        std::fs::create_dir_all(&pod_dir).expect("make the pod's volumeDevices");
        let pod_link = pod_dir.join(pv);
        std::os::unix::fs::symlink(&publish, &pod_link).expect("link the pod's device");
        let map_mount = BindMount::new(&publish, &map);
        let lock = Some(LoopAttach::attach(&map));
        BlockVolumeMap {
            pod_uid: pod_uid.into(),
            pv: pv.into(),
            pod_link,
            publish,
            map,
            lock,
            _map_mount: map_mount,
            _publish_mount: publish_mount,
            disk,
        }
    }

    /// The loop device kubelet attached to the mapping.
    pub fn lock(&self) -> &LoopAttach {
        self.lock.as_ref().expect("the mapping's loop device")
    }

    /// The volume's own device (the disk the CSI driver attached).
    pub fn disk(&self) -> &LoopAttach {
        &self.disk
    }
}

impl Drop for BlockVolumeMap {
    fn drop(&mut self) {
        drop(self.lock.take());
    }
}

/// kubelet's UnmapBlockVolume of `mapping`, on its volume backoff (0.5 s,
/// doubling): each attempt detaches the loop devices over the mapping
/// (`losetup -j`, `losetup -d`), removes the pod's link and unmounts the
/// mapping (`umount`, kubelet's child); it prints "umount failed" after
/// each failure and "unmapped" once the unmount works, then exits. A
/// process named `kubelet` (a shell started through a link of that name),
/// so podstuck sees `umount (child of kubelet)`.
pub fn kubelet_unmap(scratch: &Path, mapping: &BlockVolumeMap) -> Process {
    let kubelet = scratch.join("bin/kubelet");
    if !kubelet.exists() {
        std::fs::create_dir_all(kubelet.parent().unwrap()).expect("make bin/");
        std::os::unix::fs::symlink("/bin/sh", &kubelet).expect("link kubelet to sh");
    }
    let script = r#"
map=$1 link=$2 ms=500
while :; do
    for dev in $(losetup -n -O NAME -j "$map"); do losetup -d "$dev"; done
    rm -f "$link"
    if umount "$map" 2>/dev/null; then rm -f "$map"; echo unmapped; exit 0; fi
    echo "umount failed"
    sleep "$((ms / 1000)).$((ms % 1000 / 100))"
    ms=$((ms * 2))
done
"#;
    let mut command = Command::new(&kubelet);
    command.args(["-c", script, "kubelet", text(&mapping.map), text(&mapping.pod_link)]);
    Process::spawn(&mut command)
}
