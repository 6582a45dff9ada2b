//! No cause at all: a busy background of normal deletions (three waves of
//! eight pods torn down at once, as kubelet tears a pod down) must yield no
//! finding of any detector.

use podstuck_tests::*;
use serde_json::Value;

use super::{podstuck, secs};

/// One pod's directory as kubelet leaves it after its containers stopped:
/// an emptyDir with files, a projected token dir, an empty plugin dir.
fn terminated_pod(pod: &Pod) {
    for d in 0..4 {
        let dir = pod.empty_dir("cache").join(format!("d{d}"));
        std::fs::create_dir_all(&dir).unwrap();
        for f in 0..25 {
            std::fs::write(dir.join(format!("f{f}")), "x").unwrap();
        }
    }
    std::fs::create_dir_all(pod.projected("token")).unwrap();
    std::fs::create_dir_all(pod.empty_dir_plugin("cache")).unwrap();
    let containers = pod.dir().join("containers/app");
    std::fs::create_dir_all(&containers).unwrap();
    std::fs::write(containers.join("0a1b2c3d"), "").unwrap();
    std::fs::write(pod.dir().join("etc-hosts"), "127.0.0.1 localhost\n").unwrap();
}

/// kubelet tearing one pod down normally; returns what each call printed.
fn tear_down(pod: &Pod) -> Vec<String> {
    let steps = [
        os!["--comm", "kubelet", "remove-all", pod.empty_dir("cache")],
        os!["--comm", "kubelet", "unlink-many", pod.projected("token"), "200"],
        os!["--comm", "kubelet", "rmdir", pod.empty_dir_plugin("cache")],
        os!["--comm", "kubelet", "remove-all", pod.dir()],
    ];
    steps.into_iter().flat_map(|args| start_actor(args).finish(secs(60)).1).collect()
}

kernel_test! {
    fn a_busy_background_of_normal_deletions_yields_no_finding(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pods: Vec<Pod> = (0..8).map(|_| root.new_pod()).collect();
        let mut watch = podstuck(&root, &[]);

        // Three waves of eight pods torn down at once.
        for _wave in 0..3 {
            for pod in &pods {
                terminated_pod(pod);
            }
            let waves: Vec<_> = pods
                .iter()
                .map(|pod| {
                    let pod = pod.clone();
                    std::thread::spawn(move || tear_down(&pod))
                })
                .collect();
            for outcome in waves {
                let lines = outcome.join().expect("teardown thread");
                assert_eq!(lines, ["remove-all done", "unlink-many 200 unlinked, 0 failed", "rmdir ok", "remove-all done"]);
            }
        }
        for pod in &pods {
            assert!(!pod.dir().exists());
        }

        if let Some(watch) = watch.take() {
            // Nothing is awaited here but time itself: longer than
            // --hung-after and a few backoff steps, for any detector that
            // would fire (wrongly) to do so.
            std::thread::sleep(secs(6));
            let done = watch.stop(libc::SIGINT);
            assert!(done.status.success(), "podstuck failed: {}", done.stderr);
            let ours: Vec<&Value> = done
                .finding_lines
                .iter()
                .filter(|f| {
                    let line = f.to_string();
                    line.contains(text(scratch.path())) || pods.iter().any(|pod| line.contains(pod.uid()))
                })
                .collect();
            assert!(ours.is_empty(), "normal deletions produced findings: {ours:#?}");
        }
    }
}
