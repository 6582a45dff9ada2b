//! `immutable-file` (P3): a file with the `i` flag in an image layer that
//! dockerd cannot remove, named with its `chattr -i`, which is run; and
//! its near miss, told by the same detector: `permission-denied`, the same
//! EPERM in the same place from a sticky directory, never called immutable.

use podstuck_tests::findings::apply_fix;
use podstuck_tests::*;
use serde_json::Value;

use super::{all_say, hex64, podstuck, secs, stop, FINDING_TIMEOUT};

kernel_test! {
    fn p3_an_immutable_file_in_an_image_layer_is_named_with_chattr(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let layer = scratch.path().join("docker/overlay2").join(hex64());
        let etc = layer.join("diff/etc");
        std::fs::create_dir_all(&etc).unwrap();
        std::fs::create_dir_all(layer.join("work/work")).unwrap();
        std::fs::write(etc.join("hosts"), "127.0.0.1 localhost\n").unwrap();
        let file = etc.join("resolv.conf");
        std::fs::write(&file, "nameserver 10.96.0.10\n").unwrap();
        let _immutable = Immutable::set(&file);
        let mut watch = podstuck(&root, &[]);

        // dockerd removing the layer with os.RemoveAll, retried.
        let dockerd = start_actor(os!["--comm", "dockerd", "--every-ms", "1000", "--repeat", "0", "remove-all", layer]);
        let layer_name = layer.file_name().unwrap().to_str().unwrap();
        let eperm = format!("remove-all left: errno {} at {layer_name}/diff/etc/resolv.conf", libc::EPERM);
        all_say(&dockerd.wait_for_lines(2, secs(10)), &eperm);

        if let Some(mut watch) = watch.take() {
            let finding = watch.await_finding(
                FINDING_TIMEOUT,
                |f| f["kind"] == "immutable-file" && f["paths"][0].as_str().is_some_and(|p| p.starts_with(text(scratch.path()))),
                |e| {
                    e.eq("/paths/0", text(&file));
                    e.eq("/fix", format!("chattr -i -- {}", shell_word(&file)));
                    e.eq("/errno", "EPERM");
                    e.eq("/actor/comm", "dockerd");
                },
            );
            all_say(&dockerd.lines(), &eperm);
            assert!(file.exists());
            // "then let kubelet retry": dockerd's next attempt goes through.
            apply_fix(&finding);
            assert!(dockerd.wait_for_line("remove-all done", secs(5)), "after the fix: {:?}", dockerd.lines());
            stop(watch, &finding);
            return;
        }
        all_say(&dockerd.lines(), &eperm);
        assert!(file.exists());
    }
}

kernel_test! {
    fn p3_near_miss_a_sticky_directory_is_not_called_immutable(test) {
        // Same EPERM, same place, no flag: /tmp's sticky bit keeps uid 1002
        // from removing uid 1001's file. Telling the user to chattr would be wrong.
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let tmp = scratch.path().join("docker/overlay2").join(hex64()).join("diff/tmp");
        std::fs::create_dir_all(&tmp).unwrap();
        std::fs::set_permissions(&tmp, std::os::unix::fs::PermissionsExt::from_mode(0o1777)).unwrap();
        let file = tmp.join("build.lock");
        std::fs::write(&file, "").unwrap();
        std::os::unix::fs::chown(&file, Some(1001), Some(1001)).unwrap();
        let mut watch = podstuck(&root, &[]);

        let cleanup = start_actor(os!["--comm", "cleanup", "--as-uid", "1002", "--every-ms", "1000", "--repeat", "0", "unlink", file]);
        let eperm = format!("unlink errno {}", libc::EPERM);
        all_say(&cleanup.wait_for_lines(2, secs(10)), &eperm);

        if let Some(mut watch) = watch.take() {
            let about_file = |f: &Value| f.to_string().contains(text(&file));
            let finding = watch.await_finding(
                FINDING_TIMEOUT,
                |f| f["kind"] == "permission-denied" && about_file(f),
                |e| {
                    e.that(
                        e.mentions("/summary", "sticky") || e.mentions("/evidence", "sticky"),
                        "summary or evidence should say the sticky bit refused it",
                    );
                    e.eq("/errno", "EPERM");
                },
            );
            let done = stop(watch, &finding);
            let immutable: Vec<&Value> = done.findings.iter().filter(|f| f["kind"] == "immutable-file" && about_file(f)).collect();
            assert!(immutable.is_empty(), "a file without the i flag called immutable: {immutable:?}");
        }
        all_say(&cleanup.lines(), &eperm);
    }
}
