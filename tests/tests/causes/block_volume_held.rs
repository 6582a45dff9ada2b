//! `block-volume-held` (P16): raw block volumes (`volumeMode: Block`),
//! made real: a loop device as the volume's disk, the CSI driver's bind
//! mount of its device file, the pod's `volumeDevices` link, kubelet's
//! bind mount at the global map path with the loop device kubelet attaches
//! to it, and kubelet's UnmapBlockVolume on its backoff (`losetup -d`,
//! then `umount` of the mapping). Something keeps the volume in use, the
//! unmount fails with EBUSY, and `podstuck watch --findings --pod <uid>`
//! must name what: one `block-volume-held` finding (never a `mount-held`
//! beside it) whose fix, run as printed, lets kubelet's next retry unmap
//! the volume.
//!
//! What the kernel does, as seen here (6.18): `losetup -d` of a loop
//! device a process has open exits 0; the device stays bound with
//! `autoclear` 1 until the process closes it, and the bind mount under it
//! stays busy. A device-mapper holder (LVM activating a volume group found
//! inside the volume) is the same to kubelet; this machine's kernel has no
//! device mapper, so that shape is tested on the detector's fake node.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use podstuck_tests::block::{kubelet_unmap, BlockVolumeMap};
use podstuck_tests::findings::apply_fix;
use podstuck_tests::*;
use serde_json::Value;

use super::{secs, FINDING_TIMEOUT};

/// How long kubelet's next retry may take once the fix ran (its backoff
/// doubles from 0.5 s: the retry after 8 s of failures comes 8 s later).
const UNMAP_TIMEOUT: Duration = Duration::from_secs(40);

fn podstuck(root: &KubeletRoot, uid: &str) -> Watch {
    Watch::start(&["--findings", "--kubelet-root", root.arg(), "--pod", uid])
}

/// A process that opened `device` and sleeps with it open.
fn holding_open(device: &Path) -> Process {
    let process = Process::spawn(
        Command::new("sh").args(["-c", r#"exec 3<"$1" && echo ready && exec sleep 1000"#, "holder"]).arg(device),
    );
    process.wait_ready(Duration::from_secs(10));
    process
}

/// Checks what every scenario ends with: the fix ran, kubelet's retry
/// unmapped the volume, the finding resolved, and it was podstuck's only
/// finding about the pod.
fn fixed_and_unmapped(watch: Watch, kubelet: Process, mapping: &BlockVolumeMap, finding: &Value) {
    apply_fix(finding);
    assert!(
        kubelet.wait_for_line("unmapped", UNMAP_TIMEOUT),
        "kubelet's unmap should work once the fix ran; it printed {:?}",
        kubelet.lines()
    );
    assert!(!is_mountpoint(&mapping.map), "the mapping {} is unmounted", mapping.map.display());
    assert!(!mapping.lock().bound(), "kubelet's loop device {} is detached", mapping.lock().device().display());
    let resolved =
        |w: &Watch| w.findings_so_far().iter().any(|f| f["id"] == finding["id"] && f["status"] == "resolved");
    let ended = within(FINDING_TIMEOUT, || resolved(&watch).then_some(()));
    let done = watch.stop(libc::SIGINT);
    assert!(ended.is_some(), "the finding should resolve once the unmount worked: {:#?}", done.findings);
    assert!(done.status.success(), "podstuck failed: {}", done.stderr);
    let ours: Vec<&Value> = done.findings.iter().filter(|f| f["pod_uid"] == mapping.pod_uid.as_str()).collect();
    assert_eq!(ours.len(), 1, "one finding about the pod, got: {ours:#?}");
    assert_eq!(ours[0]["status"], "resolved", "{:#}", ours[0]);
}

kernel_test! {
    fn a_process_holding_the_volumes_loop_device_is_named_and_the_unmap_then_works(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let uid = new_pod_uid();
        let mapping = BlockVolumeMap::create(scratch.path(), &root, &uid, "pvc-blk-loop", 8 << 20);
        let lock = mapping.lock().device().to_path_buf();
        assert_eq!(
            mapping.lock().sysfs("backing_file").as_deref(),
            Some(text(&mapping.map)),
            "fixture: kubelet's loop device is bound to the mapping"
        );
        // A workload's database, say, that opened the volume's device.
        let holder = holding_open(&lock);
        let pid = holder.pid();

        let mut watch = podstuck(&root, &uid);
        let kubelet = kubelet_unmap(scratch.path(), &mapping);
        let _ = kubelet.wait_for_lines(1, Duration::from_secs(20));
        assert_eq!(kubelet.lines()[0], "umount failed", "fixture: the unmount fails while the device is in use");
        assert_eq!(mapping.lock().sysfs("autoclear").as_deref(), Some("1"), "fixture: losetup -d only marked it");
        assert!(mapping.lock().bound(), "fixture: the loop device is still bound");

        let loop_name = mapping.lock().name();
        let finding = watch.await_finding(
            FINDING_TIMEOUT,
            |f| f["kind"] == "block-volume-held",
            |e| {
                e.eq("/paths/0", text(&mapping.map));
                e.eq("/pod_uid", uid.as_str());
                e.eq("/confidence", "confirmed");
                e.eq("/syscall", "umount2");
                e.eq("/errno", "EBUSY");
                e.eq("/actor/comm", "umount");
                e.eq("/actor/parent", "kubelet");
                e.contains("/fix", &format!("] && kill -TERM {pid}"));
                e.eq("/details/loop_device", format!("/dev/{loop_name}"));
                e.contains("/summary", &format!("loop device /dev/{loop_name} is still bound"));
                e.that(e.mentions_number("/summary", pid.into()), format!("the summary should name the holder, pid {pid}"));
                e.that(e.mentions("/evidence", "autoclear set"), "the evidence should say the detach waits (autoclear)");
            },
        );
        fixed_and_unmapped(watch, kubelet, &mapping, &finding);
        drop(holder);
    }
}

kernel_test! {
    fn a_process_holding_the_mapped_device_file_is_named_and_the_unmap_then_works(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let uid = new_pod_uid();
        let mapping = BlockVolumeMap::create(scratch.path(), &root, &uid, "pvc-blk-file", 8 << 20);
        // A backup agent that opened the device through kubelet's mapping.
        let holder = holding_open(&mapping.map);
        let pid = holder.pid();

        let mut watch = podstuck(&root, &uid);
        let kubelet = kubelet_unmap(scratch.path(), &mapping);
        let _ = kubelet.wait_for_lines(1, Duration::from_secs(20));
        assert_eq!(kubelet.lines()[0], "umount failed", "fixture: the unmount fails while the file is open");
        // The last close detaches it (autoclear): another test's glance at
        // the loop devices may hold it a moment longer.
        poll_until_else("fixture: losetup -d to detach kubelet's loop device, which nothing used", secs(10), || {
            match mapping.lock().bound() {
                false => Ok(()),
                true => Err(format!("/dev/{} still bound", mapping.lock().name())),
            }
        });

        let finding = watch.await_finding(
            FINDING_TIMEOUT,
            |f| f["kind"] == "block-volume-held",
            |e| {
                e.eq("/paths/0", text(&mapping.map));
                e.eq("/confidence", "confirmed");
                e.contains("/fix", &format!("] && kill -TERM {pid}"));
                e.contains("/summary", "has the device file open through the bind mount");
                e.that(e.mentions_number("/summary", pid.into()), format!("the summary should name the holder, pid {pid}"));
            },
        );
        fixed_and_unmapped(watch, kubelet, &mapping, &finding);
        drop(holder);
    }
}
