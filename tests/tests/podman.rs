//! End-to-end scenarios on a CRI-O-like runtime for real: Debian's podman
//! 4.3 driving conmon 2.1 (CRI-O's per-container monitor) and crun 1.8
//! (the OCI runtime OpenShift runs), over a containers/storage store
//! (CRI-O's `/var/lib/containers/storage` layout: a container's root
//! filesystem is `overlay/<layer id>/merged`, and the layer id is not the
//! container's: `overlay-containers/containers.json` links them). A
//! private podman per test (`podstuck_tests::runtimes::Podman`), its
//! containers in a pod's cgroups of the cgroupfs driver, as CRI-O's are.
//!
//! Every test checks the fixture first (podman failed with its own error,
//! or worked), then podstuck, and RUNS the fix before retrying the stuck
//! command, which must then work.
//!
//! What podman does, as traced here (kernel 6.18):
//! - `podman rm` of a container: crun deletes the container's cgroup in
//!   every hierarchy (`rmdir` of `.../pod<uid>/libpod-<id>`), then podman
//!   (c/storage) `umount2(merged, MNT_DETACH)` and `unlinkat(merged,
//!   AT_REMOVEDIR)`; with a second view of the layer directory still
//!   mounting the overlay on the same directory, that unlinkat fails with
//!   EBUSY, retried for about 10 s, then "removing container <id> root
//!   filesystem: ... unlinkat .../merged: device or resource busy"; the
//!   layer is left "incomplete", and the next podman command deletes it.
//! - `podman volume rm`: Go's RemoveAll of the volume's `_data`.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use podstuck_tests::findings::apply_fix;
use podstuck_tests::runtimes::{failed_with, finding_is_under, stderr_text, stdout_text};
use podstuck_tests::*;
use serde_json::Value;

/// How long podstuck may take to reach a finding.
const FINDING_TIMEOUT: Duration = Duration::from_secs(60);

/// Empty directories in the volume: `podman volume rm` of them takes
/// seconds on this machine's ext4, as `docker volume rm` of as many does
/// (tests/tests/runtimes.rs): podman's RemoveAll makes two unlinkat calls
/// a directory (and two getdents64, an openat and a stat). On a tmpfs they
/// go in under two seconds, sooner than a storm is a storm.
const STORM_DIRS: u64 = 100_000;

/// After the last call of a scenario, how long to give podstuck before
/// looking for findings that should NOT be there.
const SETTLE: Duration = Duration::from_secs(4);

/// `podstuck watch --json --findings`, node-wide, with a kubelet root of
/// the test's own.
fn podstuck(scratch: &ScratchDir, extra: &[&str]) -> Watch {
    let kubelet = KubeletRoot::empty(scratch.path().join("kubelet"));
    let mut args = vec!["--kubelet-root", kubelet.arg()];
    args.extend_from_slice(extra);
    Watch::start(&args)
}

/// Stops podstuck once SETTLE has passed; it must have exited well.
fn wind_down(watch: Watch) -> Finished {
    // Nothing is awaited but time: for findings that must not come.
    std::thread::sleep(SETTLE);
    let done = watch.stop(libc::SIGINT);
    assert!(done.status.success(), "podstuck failed ({}): {}", done.status, done.stderr);
    done
}

/// The findings about `dirs`.
fn findings_about(done: &Finished, dirs: &[PathBuf]) -> Vec<Value> {
    done.findings.iter().filter(|f| finding_is_under(f, dirs)).cloned().collect()
}

/// A process in podman's mount namespace whose cwd is `dir`.
fn holder_in(podman: &Podman, dir: &Path) -> Process {
    let process = Process::spawn(&mut podman.shell(r#"cd "$1" && echo ready && exec sleep 1000"#, &[dir]));
    process.wait_ready(Duration::from_secs(10));
    process
}

/// `mount --rbind LAYER VIEW` then `--make-rprivate`, in podman's mount
/// namespace: a backup tool's second view of a container's layer.
fn bind_view(podman: &Podman, layer: &Path, view: &Path) {
    let out = podman
        .shell(r#"mkdir -p "$2" && mount --rbind "$1" "$2" && mount --make-rprivate "$2""#, &[layer, view])
        .output()
        .expect("run sh");
    assert!(out.status.success(), "fixture: bind view {}: {}", view.display(), stderr_text(&out));
}

kernel_test! {
    fn podman_rm_blocked_by_a_view_of_the_containers_layer_names_the_container(test) {
        let scratch = test.scratch();
        let uid = new_pod_uid();
        let Some(podman) = Podman::start(scratch.path(), test.name(), &uid) else { return };
        let name = format!("held-{}", podman.name());
        let id = podman.run_detached(&name, &[], &["sleep", "1000"]);
        let merged = PathBuf::from(podman.inspect(&name, "{{.GraphDriver.Data.MergedDir}}"));
        let layer = merged.parent().unwrap().to_path_buf();
        let layer_id = layer.file_name().unwrap().to_string_lossy().into_owned();
        assert!(layer.starts_with(podman.root().join("overlay")), "fixture: the layer {}", layer.display());
        assert_ne!(layer_id, id, "fixture: the layer id is not the container's");
        let view = scratch.path().join("view");
        bind_view(&podman, &layer, &view);
        let view_merged = view.join("merged");
        let holder = holder_in(&podman, &view_merged);

        let mut watch = podstuck(&scratch, &["--findings"]);
        let started = Instant::now();
        let out = podman.podman_may_fail(&["rm", "-f", "-t", "0", &name]);
        failed_with(
            &out,
            "podman rm -f (the view holds the layer)",
            &[&format!("removing container {id} root filesystem"), text(&merged), "device or resource busy"],
        );
        eprintln!("{}: podman rm failed after {:.1?}", test.name(), started.elapsed());

        let dirs = podman.dirs();
        let finding = watch.await_finding(
            FINDING_TIMEOUT,
            |f| f["kind"] == "mount-held" && finding_is_under(f, &dirs),
            |e| {
                e.eq("/paths/0", text(&merged));
                e.eq("/confidence", "confirmed");
                e.eq("/actor/comm", "podman");
                e.eq("/actor/role", "runtime");
                e.eq("/errno", "EBUSY");
                e.eq("/details/container", id.as_str());
                e.contains("/summary", &format!("is the root filesystem of container {id}"));
                e.contains("/fix", &format!("umount -l -- {}", text(&view_merged)));
                e.that(e.mentions("/evidence", text(&view_merged)), format!("evidence should name the view {}", view_merged.display()));
            },
        );
        apply_fix(&finding);
        let out = podman.podman_may_fail(&["rm", "-f", "-t", "0", &name]);
        assert!(out.status.success(), "podman rm after the fix: {}", stderr_text(&out));
        poll_until("the container's layer to be gone", Duration::from_secs(30), || {
            let _ = podman.podman_may_fail(&["ps", "-a"]);
            (!layer.exists()).then_some(())
        });

        let done = wind_down(watch);
        drop(holder);
        let ours = findings_about(&done, &dirs);
        // podman's RemoveAll of the layer directory meets ENOTEMPTY for the
        // held `merged` inside it: that is told under the finding, as its
        // consequence (and, told first, said to go there from then on).
        let told_under = format!("Told under {}", finding["id"].as_str().unwrap_or_default());
        let others: Vec<&Value> = ours
            .iter()
            .filter(|f| f["id"] != finding["id"])
            .filter(|f| !(f["status"] == "resolved" && f["summary"].as_str().is_some_and(|s| s.starts_with(&told_under))))
            .collect();
        assert!(others.is_empty(), "only the mount-held finding about podman's store, also: {others:#?}");
    }
}

kernel_test! {
    fn podman_volume_rm_storm_is_one_removal_storm_by_podman(test) {
        let scratch = test.scratch();
        let uid = new_pod_uid();
        let Some(podman) = Podman::start(scratch.path(), test.name(), &uid) else { return };
        let volume = format!("storm-{}", podman.name());
        podman.podman(&["volume", "create", &volume]);
        let data = PathBuf::from(stdout_text(&podman.podman(&["volume", "inspect", "-f", "{{.Mountpoint}}", &volume])));
        let volume_dir = podman.volumes().join(&volume);
        assert_eq!(data, volume_dir.join("_data"), "fixture: the volume's mountpoint");
        // A container of the pod wrote into it.
        podman.run_detached(&format!("writer-{}", podman.name()), &["-v", &format!("{volume}:/data")], &["touch", "/data/written"]);
        let made = Instant::now();
        for i in 0..STORM_DIRS {
            std::fs::create_dir(data.join(format!("d{i:06}"))).expect("mkdir in the volume");
        }
        eprintln!("{}: {STORM_DIRS} directories made in {:.1?}", test.name(), made.elapsed());
        podman.podman(&["rm", "-f", "-t", "0", &format!("writer-{}", podman.name())]);

        let mut watch = podstuck(&scratch, &["--findings"]);
        let started = Instant::now();
        let out = podman.podman_may_fail(&["volume", "rm", &volume]);
        assert!(out.status.success(), "fixture: podman volume rm failed: {}", stderr_text(&out));
        assert!(!volume_dir.exists(), "fixture: podman volume rm left {}", volume_dir.display());
        eprintln!("{}: podman volume rm of {STORM_DIRS} directories took {:.1?}", test.name(), started.elapsed());

        let dirs = podman.dirs();
        let finding = watch.await_finding(
            FINDING_TIMEOUT,
            |f| f["kind"] == "removal-storm" && finding_is_under(f, &dirs),
            |e| {
                let key = PathBuf::from(e.text("/paths/0"));
                e.that(key.starts_with(&volume_dir), format!("/paths/0 ({}) should be the volume {} or below", key.display(), volume_dir.display()));
                e.eq("/actor/comm", "podman");
                e.eq("/actor/role", "runtime");
                let calls = e.at("/details/calls").as_u64();
                e.that(
                    calls.is_some_and(|c| (2 * STORM_DIRS..=2 * STORM_DIRS + 1000).contains(&c)),
                    format!("/details/calls is {calls:?}, want about two calls per directory"),
                );
                e.eq("/status", "resolved");
            },
        );
        let done = wind_down(watch);
        let ours = findings_about(&done, &dirs);
        let others: Vec<&Value> = ours.iter().filter(|f| f["id"] != finding["id"]).collect();
        assert!(others.is_empty(), "only the storm about podman's store, also: {others:#?}");
    }
}

/// The events (`--every-call`) a node-wide podstuck saw during `work`.
fn calls_during(scratch: &ScratchDir, work: impl FnOnce()) -> Vec<Value> {
    let watch = podstuck(scratch, &["--every-call"]);
    work();
    let done = wind_down(watch);
    done.events
}

kernel_test! {
    fn conmon_and_crun_are_named_and_each_pods_calls_are_its_own(test) {
        let scratch = test.scratch();
        let (pod_a, pod_b) = (new_pod_uid(), new_pod_uid());
        let Some(a) = Podman::start(&scratch.path().join("a"), test.name(), &pod_a) else { return };
        let Some(b) = Podman::start(&scratch.path().join("b"), test.name(), &pod_b) else { return };
        let (name_a, name_b) = (format!("a-{}", a.name()), format!("b-{}", b.name()));
        let mut ids = Vec::new();
        let events = calls_during(&scratch, || {
            // Each pod's container removes a file of its own, then is removed.
            for (podman, name) in [(&a, &name_a), (&b, &name_b)] {
                let script = "touch /gone && rm /gone && touch /done && sleep 1000";
                let id = podman.run_detached(name, &[], &["sh", "-c", script]);
                poll_until("the container's rm", Duration::from_secs(20), || {
                    podman.podman_may_fail(&["exec", name, "cat", "/done"]).status.success().then_some(())
                });
                podman.podman(&["rm", "-f", "-t", "0", name]);
                ids.push(id);
            }
        });
        let (id_a, id_b) = (&ids[0], &ids[1]);
        let pod_of = |e: &Value| e["pod_uid"].as_str().unwrap_or_default().to_string();
        // crun deletes each container's cgroups: its calls are its pod's,
        // by the cgroup path, and it is named as the OCI runtime.
        for (pod, id) in [(&pod_a, id_a), (&pod_b, id_b)] {
            let crun: Vec<&Value> = events
                .iter()
                .filter(|e| e["comm"] == "crun" && e["abs_path"].as_str().is_some_and(|p| p.contains(&format!("libpod-{id}"))))
                .collect();
            assert!(!crun.is_empty(), "no call of crun on container {id}'s cgroups among {} events", events.len());
            for e in &crun {
                assert_eq!(pod_of(e), **pod, "crun's call tied to the wrong pod: {e}");
                assert_eq!(e["actor"]["role"], "runc", "crun is the OCI runtime: {e}");
                assert_eq!(e["container_id"], id.as_str(), "{e}");
            }
        }
        // The container's own rm: tied to its pod and container by the
        // cgroup crun put it in (libpod-<id> under the pod's).
        for (pod, id) in [(&pod_a, id_a), (&pod_b, id_b)] {
            let own: Vec<&Value> = events.iter().filter(|e| e["abs_path"] == "/gone" && e["container_id"] == id.as_str()).collect();
            assert_eq!(own.len(), 1, "the container {id}'s unlink of /gone, tied to it: {own:?}");
            assert_eq!(pod_of(own[0]), **pod, "{}", own[0]);
            assert!(own[0]["match"].as_array().unwrap().iter().any(|m| m == "cgroup"), "{}", own[0]);
        }
        // conmon, the monitor, is named as the shim wherever it calls.
        let conmon: Vec<&Value> = events.iter().filter(|e| e["comm"] == "conmon").collect();
        for e in &conmon {
            assert_eq!(e["actor"]["role"], "shim", "conmon is the per-container monitor: {e}");
        }
        eprintln!("{}: {} events, {} of conmon", test.name(), events.len(), conmon.len());
        // Nothing of one pod is ever tied to the other.
        for e in &events {
            let text = e.to_string();
            if text.contains(&pod_b) || text.contains(id_b.as_str()) {
                assert_ne!(pod_of(e), pod_a, "a call about pod B tied to pod A: {e}");
            }
            if text.contains(&pod_a) || text.contains(id_a.as_str()) {
                assert_ne!(pod_of(e), pod_b, "a call about pod A tied to pod B: {e}");
            }
        }
    }
}
