//! `not-mounted` (P7): a CSI driver's non-idempotent NodeUnpublish
//! unmounting, again and again, a volume directory that is not mounted;
//! the finding's `rmdir` is run.

use podstuck_tests::findings::apply_fix;
use podstuck_tests::*;

use super::{all_say, podstuck, secs, stop, FINDING_TIMEOUT};

kernel_test! {
    fn p7_unmounting_what_is_not_mounted_is_named_with_rmdir(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let uid = pod.uid();
        let pv = pod.create_csi_volume("pvc-p7");
        let dir = pv.join("mount");
        std::fs::create_dir(&dir).unwrap();
        let mut watch = podstuck(&root, &["--pod", uid]);

        // A non-idempotent NodeUnpublish, called by kubelet on its backoff.
        let driver = start_actor(os!["--comm", "hostpathplugin", "--backoff-ms", "500", "--repeat", "0", "umount", dir]);
        let einval = format!("umount errno {}", libc::EINVAL);
        all_say(&driver.wait_for_lines(3, secs(10)), &einval);

        if let Some(mut watch) = watch.take() {
            let finding = watch.await_finding(
                FINDING_TIMEOUT,
                |f| f["kind"] == "not-mounted",
                |e| {
                    e.eq("/paths/0", text(&dir));
                    e.eq("/pod_uid", uid);
                    e.eq("/syscall", "umount2");
                    e.eq("/errno", "EINVAL");
                    e.eq("/fix", format!("rmdir -- {}", shell_word(&dir)));
                },
            );
            all_say(&driver.lines(), &einval);
            apply_fix(&finding);
            assert!(!dir.exists(), "the fix should remove {}", dir.display());
            stop(watch, &finding);
            return;
        }
        all_say(&driver.lines(), &einval);
    }
}
