//! `dir-not-empty` (P8): a volume directory that kubelet cannot remove
//! because a file was written under it while the volume was unmounted; the
//! finding lists the stray file.

use podstuck_tests::*;

use super::{all_say, kubelet_refused, podstuck, stop, FINDING_TIMEOUT};

kernel_test! {
    fn p8_a_volume_dir_with_a_stray_file_is_named_with_its_content(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let uid = pod.uid();
        let pv = pod.create_csi_volume("pvc-p8");
        let dir = pv.join("mount");
        std::fs::create_dir(&dir).unwrap();
        // Written under the mountpoint while the volume was not mounted.
        std::fs::write(dir.join("left-behind.log"), "written while unmounted\n").unwrap();
        let mut watch = podstuck(&root, &["--pod", uid]);

        let (kubelet, enotempty) = kubelet_refused(&pv, "mount", libc::ENOTEMPTY, 3);

        if let Some(mut watch) = watch.take() {
            let finding = watch.await_finding(
                FINDING_TIMEOUT,
                |f| f["kind"] == "dir-not-empty",
                |e| {
                    e.eq("/paths/0", text(&dir));
                    e.eq("/pod_uid", uid);
                    e.eq("/actor/comm", "kubelet");
                    e.eq("/errno", "ENOTEMPTY");
                    e.that(e.mentions("/evidence", "left-behind.log"), "evidence should list the stray file");
                    e.starts_with("/fix", "rm -r --one-file-system -- ");
                    e.contains("/fix", &shell_word(&dir));
                },
            );
            stop(watch, &finding);
        }
        all_say(&kubelet.lines(), &enotempty);
    }
}
