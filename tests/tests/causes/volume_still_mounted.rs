//! `volume-still-mounted` (P1): a CSI driver's NodeUnpublish said it
//! worked and left the volume mounted; kubelet's removal of the volume's
//! directory fails with EBUSY on its backoff. The finding names the
//! mountpoint and the `umount` that frees it, which is run. And mounts a
//! pod made inside its own emptyDir (Bidirectional propagation): named as
//! not kubelet's, the pod named from the kernel's peer group, and all of
//! them unmounted deepest first by the fix.

use std::path::{Path, PathBuf};

use nix::mount::{umount2, MntFlags};
use podstuck_tests::findings::apply_fix;
use podstuck_tests::node::{make_shared, PodCgroup};
use podstuck_tests::*;

use super::{all_say, kubelet_refused, podstuck, secs, stop, FINDING_TIMEOUT};

kernel_test! {
    fn p1_a_volume_left_mounted_is_named_with_its_umount(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let uid = pod.uid();
        let pv = pod.create_csi_volume("pvc-p1");
        let mount = pv.join("mount");
        // The CSI driver said NodeUnpublish worked and left this mounted.
        let _volume = TmpfsMount::new(&mount, "size=1m");
        let mut watch = podstuck(&root, &["--pod", uid]);

        let (kubelet, ebusy) = kubelet_refused(&pv, "mount", libc::EBUSY, 3);

        if let Some(mut watch) = watch.take() {
            let finding = watch.await_finding(
                FINDING_TIMEOUT,
                |f| f["kind"] == "volume-still-mounted",
                |e| {
                    e.eq("/pod_uid", uid);
                    e.eq("/actor/comm", "kubelet");
                    e.eq("/actor/pid", kubelet.pid());
                    e.eq("/errno", "EBUSY");
                    e.eq("/status", "active");
                    e.eq("/paths/0", text(&mount));
                    e.eq("/fix", format!("umount -- {}", shell_word(&mount)));
                    e.eq("/confidence", "confirmed");
                    let rhythm = e.text("/rhythm");
                    e.that(rhythm.contains("backoff"), format!("/rhythm ({rhythm}) should name kubelet's backoff"));
                },
            );
            all_say(&kubelet.lines(), &ebusy);
            assert!(is_mountpoint(&mount), "the fixture must still be mounted");
            apply_fix(&finding);
            assert!(!is_mountpoint(&mount), "the fix should unmount {}", mount.display());
            stop(watch, &finding);
            return;
        }
        all_say(&kubelet.lines(), &ebusy);
        assert!(is_mountpoint(&mount), "the fixture must still be mounted");
    }
}

/// What a pod's container mounted inside a volume from its own mount
/// namespace: detached on drop (deepest first), after its process.
struct MountedFromPod {
    mounter: Option<Process>,
    mounts: Vec<PathBuf>,
}

impl Drop for MountedFromPod {
    fn drop(&mut self) {
        drop(self.mounter.take());
        for m in self.mounts.iter().rev() {
            let _ = umount2(m.as_path(), MntFlags::MNT_DETACH);
        }
    }
}

/// A container of the pod in `cgroup`, in a mount namespace of its own
/// that shares the kubelet directory's peer group (Bidirectional), mounts
/// a tmpfs at `outer` and another at `inner` below it.
fn mount_from_pod(cgroup: &PodCgroup, outer: &Path, inner: &Path) -> MountedFromPod {
    let script = format!(
        "mount -t tmpfs sidecar {o} && mkdir -p {i} && mount -t tmpfs sidecar-inner {i} && exec sleep 1000",
        o = shell_word(outer),
        i = shell_word(inner)
    );
    let mounter =
        cgroup.run(&format!("exec unshare --mount --propagation unchanged sh -c {}", shell_word(Path::new(&script))));
    let guard = MountedFromPod { mounter: Some(mounter), mounts: vec![outer.to_path_buf(), inner.to_path_buf()] };
    poll_until("the pod's mounts, propagated to the node", secs(10), || is_mountpoint(inner).then_some(()));
    guard
}

kernel_test! {
    fn p1_mounts_a_pod_made_inside_its_empty_dir_are_named_and_unmounted_deepest_first(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        // kubelet makes its directory a shared mount where a pod asks for
        // Bidirectional propagation.
        let _shared = BindMount::onto_itself(root.path());
        make_shared(root.path());
        let pod = root.new_pod();
        let uid = pod.uid();
        let volume = pod.empty_dir("cache");
        let outer = volume.join("fuse");
        let inner = outer.join("nested");
        std::fs::create_dir_all(&outer).unwrap();
        let cgroup = PodCgroup::create(scratch.path(), uid);
        let _made = mount_from_pod(&cgroup, &outer, &inner);
        let mut watch = podstuck(&root, &["--pod", uid]);

        // kubelet's RemoveAll of the emptyDir reaches the deepest mount first.
        let (kubelet, ebusy) = kubelet_refused(&outer, "nested", libc::EBUSY, 2);

        if let Some(mut watch) = watch.take() {
            let finding = watch.await_finding(
                FINDING_TIMEOUT,
                |f| f["kind"] == "volume-still-mounted",
                |e| {
                    e.eq("/pod_uid", uid);
                    e.eq("/paths/0", text(&inner));
                    e.eq("/confidence", "confirmed");
                    e.eq("/fix", format!("umount -- {} && umount -- {}", shell_word(&inner), shell_word(&outer)));
                    let summary = e.text("/summary");
                    e.that(
                        summary.contains("2 mount(s) inside the volume that kubelet did not make")
                            && summary.contains(&format!("made from pod {uid}")),
                        format!("/summary ({summary}) should say kubelet did not make them and name pod {uid}"),
                    );
                },
            );
            assert!(is_mountpoint(&inner) && is_mountpoint(&outer), "the fixture must still be mounted");
            apply_fix(&finding);
            assert!(!is_mountpoint(&inner) && !is_mountpoint(&outer), "the fix should unmount both, deepest first");
            stop(watch, &finding);
            return;
        }
        all_say(&kubelet.lines(), &ebusy);
    }
}
