//! `volume-device-lost` (P18): a volume whose unmount is refused because
//! the multipath map under it lost every path and queues its I/O. That
//! needs the kernel's device mapper and its multipath target, which this
//! machine's kernel has not: the cause itself is made real in the VM
//! matrix (`cargo xtask vm-test`, the `volume-device-lost` row of 5.10's
//! cgroup-v1 boot: a multipath map over a loop device with
//! `queue_if_no_path`, ext4 on it mounted as a pod's CSI volume, a reader
//! waiting in D, its only path failed, kubelet's unmount refused; the
//! finding's fix run as printed, the reader ended, the unmount done).
//!
//! Here, its near miss on a real block device: a pod's CSI volume, ext4 on
//! a loop device (no device-mapper map), held by a reader, kubelet's
//! unmount refused: mount-held names the reader, and no volume-device-lost
//! is told, its device read and found no map.

use std::path::{Path, PathBuf};
use std::process::Command;

use podstuck_tests::block::LoopAttach;
use podstuck_tests::*;

use super::{all_say, podstuck, secs, FINDING_TIMEOUT};

/// ext4 mounted from a device; unmounted on drop (lazily if still held).
struct Ext4Mount(PathBuf);

impl Ext4Mount {
    fn new(device: &Path, at: &Path) -> Ext4Mount {
        let out = Command::new("mkfs.ext4").args(["-q", "-F"]).arg(device).output().expect("run mkfs.ext4");
        assert!(out.status.success(), "mkfs.ext4: {}", String::from_utf8_lossy(&out.stderr));
        std::fs::create_dir_all(at).unwrap();
        let out = Command::new("mount").args(["-t", "ext4"]).arg(device).arg(at).output().expect("run mount");
        assert!(out.status.success(), "mount: {}", String::from_utf8_lossy(&out.stderr));
        Ext4Mount(at.to_path_buf())
    }
}

impl Drop for Ext4Mount {
    fn drop(&mut self) {
        if Command::new("umount").arg(&self.0).status().is_ok_and(|s| s.success()) {
            return;
        }
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

kernel_test! {
    fn a_held_volume_on_a_block_device_that_is_no_multipath_map_is_mount_held_and_no_lost_device(test) {
        if Command::new("mkfs.ext4").arg("-V").output().is_err() {
            return missing(test.name(), "mkfs.ext4, to put a filesystem on the volume's device", "apt-get install e2fsprogs");
        }
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let uid = pod.uid();
        let pv = pod.create_csi_volume("pvc-disk");
        let mount = pv.join("mount");
        let image = scratch.path().join("disk.img");
        std::fs::File::create(&image).unwrap().set_len(16 << 20).unwrap();
        let disk = LoopAttach::attach(&image);
        let volume = Ext4Mount::new(disk.device(), &mount);
        let reader = start_actor(os!["--comm", "reader", "hold-open", mount.join("lost+found")]);
        reader.wait_ready(secs(10));
        let watch = podstuck(&root, &["--pod", uid]);

        let kubelet = start_actor(os!["--comm", "kubelet", "--backoff-ms", "500", "--repeat", "0", "umount", &mount]);
        let refused = format!("umount errno {}", libc::EBUSY);
        all_say(&kubelet.wait_for_lines(2, secs(10)), &refused);
        let Some(mut watch) = watch else { return };
        let held = watch.await_finding(
            FINDING_TIMEOUT,
            |f| f["kind"] == "mount-held" && f["paths"][0] == text(&mount),
            |e| {
                e.eq("/confidence", "confirmed");
                e.that(e.mentions_number("/evidence", reader.pid().into()), "the reader is named");
            },
        );
        let done = watch.stop(libc::SIGINT);
        assert!(done.status.success(), "podstuck failed: {}", done.stderr);
        let lost: Vec<_> = done.findings.iter().filter(|f| f["kind"] == "volume-device-lost").collect();
        assert!(lost.is_empty(), "a loop device is no lost multipath map: {lost:?}");
        assert!(done.findings.iter().any(|f| f["id"] == held["id"]), "mount-held is told on its own");
        drop(kubelet);
        drop(reader);
        drop(volume);
    }
}
