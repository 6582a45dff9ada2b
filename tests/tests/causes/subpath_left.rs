//! `subpath-left` (P10): a subPath bind mount that kubelet's
//! CleanSubPaths cannot remove because it is still mounted; the finding's
//! `umount` is run.

use podstuck_tests::findings::apply_fix;
use podstuck_tests::*;

use super::{all_say, kubelet_refused, podstuck, stop, FINDING_TIMEOUT};

kernel_test! {
    fn p10_a_subpath_bind_mount_left_behind_is_named_with_its_umount(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let uid = pod.uid();
        let source = pod.empty_dir("data").join("config");
        std::fs::create_dir_all(&source).unwrap();
        let index = pod.subpath("data", "app", 0);
        let container = index.parent().unwrap();
        let _subpath = BindMount::new(&source, &index);
        let mut watch = podstuck(&root, &["--pod", uid]);

        // CleanSubPaths removing the index dir that is still a bind mount.
        let (kubelet, ebusy) = kubelet_refused(container, "0", libc::EBUSY, 3);

        if let Some(mut watch) = watch.take() {
            let finding = watch.await_finding(
                FINDING_TIMEOUT,
                |f| f["kind"] == "subpath-left",
                |e| {
                    e.eq("/paths/0", text(&index));
                    e.eq("/pod_uid", uid);
                    e.eq("/actor/comm", "kubelet");
                    e.eq("/errno", "EBUSY");
                    e.eq("/fix", format!("umount -- {}", shell_word(&index)));
                },
            );
            all_say(&kubelet.lines(), &ebusy);
            assert!(is_mountpoint(&index), "the fixture must still be mounted");
            apply_fix(&finding);
            assert!(!is_mountpoint(&index), "the fix should unmount {}", index.display());
            stop(watch, &finding);
            return;
        }
        all_say(&kubelet.lines(), &ebusy);
        assert!(is_mountpoint(&index), "the fixture must still be mounted");
    }
}
