//! `removal-storm` (P2): dockerd removing a volume of 200k directories
//! entry by entry, caught while it lasts, with an estimate of what is left.

use std::path::PathBuf;
use std::time::Instant;

use podstuck_tests::*;
use serde_json::Value;

use super::{podstuck, secs, stop, FINDING_TIMEOUT};

/// Enough directories that removing them is a storm, not a blip.
const STORM_DIRS: usize = 200_000;

/// How fast dockerd's RemoveAll of empty directories goes on this
/// machine's ext4 root: 200k directories (400k calls) in 25 s, with
/// `discard` sometimes 80 s. The scenario keeps the tree on tmpfs (made in
/// a second, gone at unmount) and paces the removal to the disk's rate; on
/// tmpfs unpaced it would be over in 3 s, sooner than a storm is a storm.
const STORM_CALLS_PER_S: u32 = 16_000;

kernel_test! {
    fn p2_a_long_removal_is_a_storm_with_an_estimate(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::empty(scratch.path().join("kubelet"));
        let docker = scratch.path().join("docker");
        let _disk = TmpfsMount::new(&docker, "size=64m,nr_inodes=1m");
        let volume = docker.join("volumes/build-cache");
        let data = volume.join("_data");
        std::fs::create_dir_all(&data).unwrap();
        // mkdir is not traced: podstuck may start first, and fail fast.
        let mut watch = podstuck(&root, &[]);
        let made_at = Instant::now();
        let (status, lines) = start_actor(os!["mkdirs", data, STORM_DIRS.to_string()]).finish(secs(120));
        assert!(status.success());
        assert_eq!(lines, [format!("mkdirs {STORM_DIRS} made")]);
        eprintln!("p2: {STORM_DIRS} directories made in {:.1?}", made_at.elapsed());

        let started = Instant::now();
        let dockerd = start_actor(os!["--comm", "dockerd", "--calls-per-s", STORM_CALLS_PER_S.to_string(), "remove-all", volume]);
        if let Some(mut watch) = watch.take() {
            let under_scratch = |f: &Value| f["paths"][0].as_str().is_some_and(|p| p.starts_with(text(scratch.path())));
            let finding = watch.await_finding(
                FINDING_TIMEOUT,
                |f| f["kind"] == "removal-storm" && under_scratch(f),
                |e| {
                    // The tree being removed, or a directory above it that is
                    // still the test's own.
                    let key = PathBuf::from(e.text("/paths/0"));
                    e.that(
                        key == data || (volume.starts_with(&key) && key.starts_with(scratch.path()) && key != scratch.path()),
                        format!("/paths/0 ({}) should be {} or a directory above it in the test's tree", key.display(), volume.display()),
                    );
                    e.eq("/actor/comm", "dockerd");
                    e.eq("/actor/pid", dockerd.pid());
                    e.eq("/pod_uid", Value::Null);
                    // Caught while it lasts, with an estimate worth reading.
                    e.eq("/status", "active");
                    e.that(e.at("/details/calls").as_u64().is_some_and(|c| c > 0), "/details/calls > 0");
                    e.that(e.at("/details/rate_per_s").as_f64().is_some_and(|r| r > 0.0), "/details/rate_per_s > 0");
                    e.that(e.at("/details/remaining").as_u64().is_some_and(|r| r > 0), "/details/remaining > 0 while it lasts");
                    e.that(e.at("/details/eta_s").as_f64().is_some_and(|s| s > 0.0), "/details/eta_s > 0 while it lasts");
                    e.contains("/fix", "kubectl drain");
                },
            );
            eprintln!("p2: finding {:.1?} into the removal: {}", started.elapsed(), finding["details"]);
            stop(watch, &finding);
            // The rest goes with the tmpfs.
            drop(dockerd);
            return;
        }
        let (_, lines) = dockerd.finish(secs(120));
        eprintln!("p2: removal of {STORM_DIRS} directories took {:.1?}", started.elapsed());
        assert_eq!(lines, ["remove-all done"]);
        assert!(!volume.exists());
    }
}
