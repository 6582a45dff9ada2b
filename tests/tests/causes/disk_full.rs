//! `disk-full` (P9): an overlay whose upper filesystem has no inode left
//! for the whiteout a removal needs; and `read-only-fs`, told by the same
//! detector: a kubelet root gone read-only, named with its remount, which
//! is run.

use podstuck_tests::findings::apply_fix;
use podstuck_tests::node::fill_inodes;
use podstuck_tests::*;

use super::{all_say, hex64, podstuck, secs, stop, FINDING_TIMEOUT};

/// Whether a finding says the filesystem has no free inode: a details
/// field about inodes that is 0, or a fact about inodes with a lone 0.
fn says_no_inode_left(e: &Expect) -> bool {
    let in_details = e
        .at("/details")
        .as_object()
        .is_some_and(|d| d.iter().any(|(k, v)| (k.contains("inode") || k == "ffree") && v.as_u64() == Some(0)));
    let in_evidence = e.at("/evidence").as_array().is_some_and(|facts| {
        facts.iter().any(|f| {
            let fact = f["fact"].as_str().unwrap_or_default().to_lowercase();
            fact.contains("inode") && fact.split(|c: char| !c.is_ascii_alphanumeric()).any(|w| w == "0")
        })
    });
    in_details || in_evidence
}

kernel_test! {
    fn p9_an_overlay_whose_upper_filesystem_is_full_is_disk_full(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        // docker's whole data root on a tiny tmpfs, out of inodes.
        let docker = scratch.path().join("docker");
        let _disk = TmpfsMount::new(&docker, "size=4m,nr_inodes=64");
        let lower = docker.join("overlay2").join(hex64()).join("diff");
        std::fs::create_dir_all(lower.join("etc")).unwrap();
        std::fs::write(lower.join("etc/motd"), "welcome\n").unwrap();
        let layer = docker.join("overlay2").join(hex64());
        let merged = layer.join("merged");
        let _overlay = OverlayMount::new(&lower, &layer.join("diff"), &layer.join("work"), &merged);
        let filled = fill_inodes(&docker.join("tmp"));
        eprintln!("p9: {filled} files filled the upper filesystem");
        let victim = merged.join("etc/motd");
        let mut watch = podstuck(&root, &[]);

        // Removing a lower file needs a whiteout in the upper layer: an inode.
        let rm = start_actor(os!["--comm", "rm", "--every-ms", "1000", "--repeat", "0", "unlink", victim]);
        let enospc = format!("unlink errno {}", libc::ENOSPC);
        all_say(&rm.wait_for_lines(2, secs(10)), &enospc);

        if let Some(mut watch) = watch.take() {
            let finding = watch.await_finding(
                FINDING_TIMEOUT,
                |f| f["kind"] == "disk-full" && f.to_string().contains(text(scratch.path())),
                |e| {
                    e.eq("/paths/0", text(&victim));
                    e.eq("/errno", "ENOSPC");
                    e.that(says_no_inode_left(e), "evidence or details should say 0 free inodes");
                    // The upper layer is a tmpfs out of inodes: the fix gives it more.
                    e.starts_with("/fix", "mount -o remount,nr_inodes=");
                    let fix = e.text("/fix");
                    e.that(
                        fix.contains(&shell_word(&docker)) || fix.contains(&shell_word(&merged)),
                        format!("/fix ({fix}) should name {} or {}", docker.display(), merged.display()),
                    );
                },
            );
            stop(watch, &finding);
        }
        all_say(&rm.lines(), &enospc);
    }
}

kernel_test! {
    fn p9_a_read_only_kubelet_root_is_named_with_remount(test) {
        let scratch = test.scratch();
        let disk = KubeletRoot::new(scratch.path().join("kubelet-disk"));
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let uid = new_pod_uid();
        let uid = uid.as_str();
        let cache = disk.pod(uid).empty_dir("cache");
        std::fs::create_dir_all(&cache).unwrap();
        std::fs::write(cache.join("index.db"), "x").unwrap();
        // The kubelet root's disk went read-only (errors=remount-ro, a bind ro).
        let _read_only = BindMount::read_only(disk.path(), root.path());
        let mut watch = podstuck(&root, &["--pod", uid]);

        let target = root.pod(uid).empty_dir("cache");
        let kubelet = start_actor(os!["--comm", "kubelet", "--backoff-ms", "500", "--repeat", "0", "remove-all", target]);
        // Go's RemoveAll gives up at once on EROFS: it is not EISDIR or EPERM.
        let erofs = format!("remove-all left: errno {} at cache", libc::EROFS);
        all_say(&kubelet.wait_for_lines(2, secs(10)), &erofs);

        if let Some(mut watch) = watch.take() {
            let finding = watch.await_finding(
                FINDING_TIMEOUT,
                |f| f["kind"] == "read-only-fs",
                |e| {
                    e.eq("/pod_uid", uid);
                    e.eq("/errno", "EROFS");
                    e.eq("/actor/comm", "kubelet");
                    let key = e.text("/paths/0");
                    e.that(key.starts_with(text(&target)), format!("/paths/0 ({key}) should be in {}", target.display()));
                    // Both work on a read-only bind (checked by hand here);
                    // ",bind" leaves the filesystem itself alone.
                    let fix = e.text("/fix");
                    let allowed = ["remount,rw", "remount,bind,rw"].map(|o| format!("mount -o {o} -- {}", shell_word(root.path())));
                    e.that(allowed.contains(&fix), format!("/fix is {fix:?}, want one of {allowed:?}"));
                },
            );
            all_say(&kubelet.lines(), &erofs);
            apply_fix(&finding);
            std::fs::write(root.path().join("writable-again"), "").expect("the fix should make the kubelet root writable");
            stop(watch, &finding);
            return;
        }
        all_say(&kubelet.lines(), &erofs);
    }
}
