//! End-to-end scenarios on the real container runtimes of a Debian node
//! (docker.io 20.10, containerd 1.6, runc 1.1): a private dockerd or
//! containerd per test, the real `docker rm`, `docker volume rm` and
//! `ctr task rm` failing (or working) the way they do on a node, and what
//! `podstuck watch --findings` concludes about it.
//!
//! Every test first checks that the fixture did what it claims (the docker
//! or ctr command failed with the runtime's own error message, or worked),
//! so that a wrong finding is never blamed on a wrong fixture; then checks
//! podstuck: the finding's kind, key path, actor, evidence and fix, and
//! RUNS the fix before retrying the stuck command, which must then work.
//!
//! Scenarios run in parallel, each with its own daemon and its own
//! node-wide podstuck, and look only at findings about their own daemon's
//! directories (data root, exec root, containerd root and state, in both
//! spellings: `/var/run/...` and `/run/...`).
//!
//! With `PODSTUCK_RUNTIME_TRACES=DIR`, each scenario also records the raw
//! calls (`podstuck watch --json --every-call`) to `DIR/<case>.jsonl`.
//!
//! What the real runtimes do, as traced on this machine (kernel 6.18):
//! - `docker rm` of a container: dockerd `umount2(<layer>/merged,
//!   MNT_DETACH)` then `unlinkat(<layer>/merged, AT_REMOVEDIR)`, then
//!   `umount2(<data-root>/containers/<id>, MNT_DETACH)` failing with EINVAL
//!   (not a mount point: routine), and Go's RemoveAll of the layer dir, of
//!   `<layer>-init` (both after an `umount2(..., MNT_DETACH)` = EINVAL)
//!   and of the container dir: `unlinkat(path, 0)` = EISDIR then
//!   `unlinkat(path, AT_REMOVEDIR)` for every directory. The shim's
//!   `umount2(<bundle>/rootfs, 0)` fails with EINVAL (dockerd mounts the
//!   rootfs itself), spelled `/run/...` by the shim and `/var/run/...` by
//!   containerd.
//! - `docker volume rm`: RemoveAll of `_data`, then of the volume dir:
//!   for a volume of N empty directories, 2N + 6 unlinkat calls.
//! - An immutable file in the layer: one `unlinkat(<layer>/diff/f, 0)` =
//!   EPERM, no retry; `docker rm` fails at once and the container stays
//!   "Removal In Progress" until a later `docker rm -f`.
//! - A private bind view of the layer dir: `umount2(merged, MNT_DETACH)`
//!   works, `unlinkat(merged, AT_REMOVEDIR)` = EBUSY; dockerd retries
//!   (`umount2(merged, MNT_DETACH)` = EINVAL, RemoveAll of the layer, the
//!   merged dir EBUSY again) about 50 times over 5 s, then fails with
//!   "failed to remove root filesystem: unlinkat .../merged: device or
//!   resource busy".
//! - The shim of a standalone containerd (`ctr task rm`) calls
//!   `umount2(<state>/io.containerd.runtime.v2.task/<ns>/<id>/rootfs, 0)`,
//!   no MNT_DETACH, spelled through /var/run as containerd's config says;
//!   on EBUSY it retries 50 times 50 ms apart, then the command fails with
//!   "failed rootfs umount: ... device or resource busy".

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use podstuck_tests::findings::{apply_fix, assert_told_in_order, revisions};
use podstuck_tests::runtimes::{failed_with, finding_is_under, resolved, stderr_text, stdout_text};
use podstuck_tests::*;
use serde_json::Value;

/// How long podstuck may take to reach a finding (and its final revision).
const FINDING_TIMEOUT: Duration = Duration::from_secs(60);

/// Enough empty directories in a volume that `docker volume rm` takes
/// seconds (about 10 s on this machine's ext4): a storm.
const STORM_DIRS: u64 = 100_000;

/// After the last call of a scenario, how long to give podstuck before
/// looking for findings that should NOT be there: longer than
/// `--hung-after 2s` and a retry or two.
const SETTLE: Duration = Duration::from_secs(4);

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// `podstuck watch --json --findings --hung-after 2s`, node-wide, with a
/// kubelet root of the test's own (empty: no pod is involved here).
fn podstuck(scratch: &ScratchDir) -> Watch {
    let kubelet = KubeletRoot::empty(scratch.path().join("kubelet"));
    Watch::start(&["--findings", "--hung-after", "2s", "--kubelet-root", kubelet.arg()])
}

/// Lets the last calls arrive, stops podstuck (and the trace, if one is
/// kept) and returns what podstuck said.
fn wind_down(watch: Watch, trace: Option<EventLog>, dirs: &[PathBuf], pids: &[u32]) -> Finished {
    // Nothing is awaited but time: for findings that must not come.
    std::thread::sleep(SETTLE);
    let done = stop(watch);
    if let Some(trace) = trace {
        trace.save(dirs, pids);
    }
    done
}

/// Stops podstuck; checks it exited well, printed no call event, and first
/// emitted each finding as revision 1 then only revised it upwards.
fn stop(watch: Watch) -> Finished {
    let done = watch.stop(libc::SIGINT);
    assert!(done.status.success(), "podstuck failed ({}): {}", done.status, done.stderr);
    assert!(done.events.is_empty(), "--findings printed call events: {:?}", &done.events[..done.events.len().min(3)]);
    for finding in &done.findings {
        assert_told_in_order(&done.finding_lines, &finding["id"]);
    }
    done
}

/// The findings (latest revisions) about `dirs`, or whose actor is one of
/// `pids` (a daemon of the test's own).
fn findings_about(done: &Finished, dirs: &[PathBuf], pids: &[u32]) -> Vec<Value> {
    done.findings
        .iter()
        .filter(|f| finding_is_under(f, dirs) || f["actor"]["pid"].as_u64().is_some_and(|p| pids.contains(&(p as u32))))
        .cloned()
        .collect()
}

/// One finding, as a reader needs it to fix the diagnosis.
fn describe(f: &Value) -> String {
    let facts: Vec<String> = f["evidence"]
        .as_array()
        .map(|e| {
            e.iter()
                .map(|x| {
                    format!("      [{}] {}", x["source"].as_str().unwrap_or("?"), x["fact"].as_str().unwrap_or("?"))
                })
                .collect()
        })
        .unwrap_or_default();
    format!(
        "  {} ({}, {}, confidence {}, revision {})\n    paths: {}\n    actor: {}\n    syscall {} errno {}\n    summary: {}\n    fix: {}\n    rhythm: {}\n    details: {}\n    evidence:\n{}",
        f["kind"], f["status"], f["severity"], f["confidence"], f["revision"],
        f["paths"], f["actor"], f["syscall"], f["errno"],
        f["summary"].as_str().unwrap_or("?"), f["fix"].as_str().unwrap_or("?"),
        f["rhythm"], f["details"], facts.join("\n")
    )
}

fn describe_all(findings: &[Value]) -> String {
    if findings.is_empty() {
        return "  (none)".to_string();
    }
    findings.iter().map(describe).collect::<Vec<_>>().join("\n")
}

/// Asserts that the findings about the test's dirs are exactly `wanted`
/// (by id): no other kind, no duplicate.
fn only(done: &Finished, ours: &[Value], wanted: &Value, what: &str) {
    let others: Vec<Value> = ours.iter().filter(|f| f["id"] != wanted["id"]).cloned().collect();
    assert!(
        others.is_empty(),
        "{what}: want the one {} finding and nothing else about this test's dirs; also got:\n{}\nthe expected one:\n{}\npodstuck stderr:\n{}",
        wanted["kind"],
        describe_all(&others),
        describe(wanted),
        done.stderr
    );
}

/// Retries a runtime command until it succeeds, for up to `limit`: what
/// the runtime's next attempt (kubelet's next sync) gets once the fix is in.
fn works_soon(limit: Duration, what: &str, attempt: impl Fn() -> std::process::Output) {
    poll_until_else(&format!("`{what}` to work after the fix"), limit, || {
        let out = attempt();
        match out.status.success() {
            true => Ok(()),
            false => Err(format!("it still fails: {}", stderr_text(&out))),
        }
    })
}

/// A host process whose cwd is `dir` (a debugging shell left there).
fn holder_in(dir: &Path) -> Process {
    let process = Process::spawn(
        Command::new("sh").args(["-c", r#"cd "$1" && echo ready && exec sleep 1000"#, "holder"]).arg(dir),
    );
    process.wait_ready(secs(10));
    process
}

/// A process that unshared its mount namespace (every mount a slave of
/// the host's, as `unshare -m --propagation slave` makes them) with its
/// cwd in `dir`: a leaked copy of `dir`'s mount.
fn holder_in_new_namespace(dir: &Path) -> Process {
    let process = Process::spawn(
        Command::new("unshare")
            .args(["-m", "--propagation", "slave", "sh", "-c", r#"cd "$1" && echo ready && exec sleep 1000"#, "holder"])
            .arg(dir),
    );
    process.wait_ready(secs(10));
    process
}

fn mount_ns(pid: u32) -> String {
    std::fs::read_link(format!("/proc/{pid}/ns/mnt")).map(|l| l.to_string_lossy().into_owned()).unwrap_or_default()
}

// a. docker volume rm ------------------------------------------------------

kernel_test! {
    fn docker_volume_rm_storm(test) {
        let scratch = test.scratch();
        let Some(docker) = Dockerd::start(scratch.path(), test.name()) else { return };
        let volume = format!("storm-{}", docker.name());
        docker.docker(&["volume", "create", &volume]);
        let data = PathBuf::from(stdout_text(&docker.docker(&["volume", "inspect", "-f", "{{.Mountpoint}}", &volume])));
        let volume_dir = docker.data_root().join("volumes").join(&volume);
        assert_eq!(data, volume_dir.join("_data"), "fixture: the volume's mountpoint");
        let made = Instant::now();
        for i in 0..STORM_DIRS {
            std::fs::create_dir(data.join(format!("d{i:06}"))).expect("mkdir in the volume");
        }
        eprintln!("{}: {STORM_DIRS} directories made in {:.1?}", test.name(), made.elapsed());

        let trace = EventLog::start("docker_volume_rm", false);
        let mut watch = podstuck(&scratch);
        let started = Instant::now();
        let out = docker.docker_may_fail(&["volume", "rm", &volume]);
        let took = started.elapsed();
        assert!(out.status.success(), "fixture: docker volume rm failed: {}", stderr_text(&out));
        assert!(!volume_dir.exists(), "fixture: docker volume rm left {}", volume_dir.display());
        eprintln!("{}: docker volume rm of {STORM_DIRS} directories took {took:.1?}", test.name());

        let dirs = docker.dirs();
        let finding = watch.await_finding(
            FINDING_TIMEOUT,
            |f| f["kind"] == "removal-storm" && finding_is_under(f, &dirs),
            |e| {
                let key = PathBuf::from(e.text("/paths/0"));
                e.that(
                    key.starts_with(&volume_dir) || key.starts_with(resolved(&volume_dir)),
                    format!("/paths/0 ({}) should be the volume's directory {} or below it", key.display(), volume_dir.display()),
                );
                e.eq("/actor/comm", "dockerd");
                e.eq("/actor/role", "runtime");
                e.eq("/actor/pid", docker.pid());
                let calls = e.at("/details/calls").as_u64();
                // Go's RemoveAll: unlinkat(name, 0) = EISDIR, then
                // unlinkat(name, AT_REMOVEDIR), for each directory (+ 6 for
                // _data and the volume directory themselves).
                e.that(
                    calls.is_some_and(|c| (2 * STORM_DIRS..=2 * STORM_DIRS + 1000).contains(&c)),
                    format!("/details/calls is {:?}, want {}..={} (two calls per directory)", calls, 2 * STORM_DIRS, 2 * STORM_DIRS + 1000),
                );
                e.that(
                    e.mentions("/summary", "EISDIR") || e.mentions("/evidence", "EISDIR"),
                    "summary or evidence should say the EISDIR failures are by design",
                );
                e.that(
                    e.mentions("/summary", "two calls per directory") || e.mentions("/evidence", "two calls per directory"),
                    "summary or evidence should say \"two calls per directory\"",
                );
                // The removal is over: the latest revision says so.
                e.eq("/status", "resolved");
                e.that(!e.finding.to_string().contains("About at least"), "a finished removal should not say \"About at least\"");
            },
        );
        let done = wind_down(watch, trace, &dirs, &[docker.pid()]);
        eprintln!("{}: the finding:\n{}", test.name(), describe(&finding));
        // How it was revised while the removal ran (for the record: an
        // estimate may be a lower bound while it lasts, never once it is done).
        for line in revisions(&done.finding_lines, &finding["id"]) {
            eprintln!(
                "{}: revision {} {} calls {} remaining {} summary: {}",
                test.name(), line["revision"], line["status"], line["details"]["calls"], line["details"]["remaining"], line["summary"]
            );
        }
        let ours = findings_about(&done, &dirs, &[docker.pid()]);
        only(&done, &ours, &finding, test.name());
    }
}

// b. an immutable file in a container's layer ---------------------------------

kernel_test! {
    fn docker_rm_with_an_immutable_file_in_the_layer(test) {
        let scratch = test.scratch();
        let Some(docker) = Dockerd::start(scratch.path(), test.name()) else { return };
        let name = format!("imm-{}", docker.name());
        docker.docker(&["run", "-d", "--name", &name, "--network", "none", docker.image(), "sleep", "1000"]);
        docker.docker(&["exec", &name, "touch", "/f"]);
        let upper = PathBuf::from(docker.inspect(&name, "{{.GraphDriver.Data.UpperDir}}"));
        assert!(upper.starts_with(docker.data_root().join("overlay2")), "fixture: upper dir {}", upper.display());
        let file = upper.join("f");
        assert!(file.is_file(), "fixture: {} should exist", file.display());
        let _immutable = Immutable::set(&file);

        let trace = EventLog::start("docker_rm_immutable", true);
        let mut watch = podstuck(&scratch);
        let out = docker.docker_may_fail(&["rm", "-f", &name]);
        failed_with(&out, "docker rm -f", &["failed to remove root filesystem", text(&file), "operation not permitted"]);

        let dirs = docker.dirs();
        let finding = watch.await_finding(
            FINDING_TIMEOUT,
            |f| f["kind"] == "immutable-file" && finding_is_under(f, &dirs),
            |e| {
                e.eq("/paths/0", text(&file));
                e.eq("/fix", format!("chattr -i -- {}", shell_word(&file)));
                e.eq("/actor/comm", "dockerd");
                e.eq("/errno", "EPERM");
            },
        );
        assert!(file.exists(), "fixture: the file is still there");
        apply_fix(&finding);
        works_soon(secs(10), "docker rm -f", || docker.docker_may_fail(&["rm", "-f", &name]));
        assert_eq!(stdout_text(&docker.docker(&["ps", "-aq"])), "", "the container is gone");
        assert!(!upper.exists(), "the layer {} is gone", upper.display());

        let done = wind_down(watch, trace, &dirs, &[docker.pid()]);
        eprintln!("{}: the finding:\n{}", test.name(), describe(&finding));
        let ours = findings_about(&done, &dirs, &[docker.pid()]);
        // dockerd's umount2(<container dir>, MNT_DETACH) = EINVAL, the layer's
        // too: routine, never "not-mounted".
        only(&done, &ours, &finding, test.name());
    }
}

// c. a bind view of the layer: "failed to remove root filesystem ... busy" --

kernel_test! {
    fn docker_rm_blocked_by_a_bind_view_of_the_layer(test) {
        let scratch = test.scratch();
        let Some(docker) = Dockerd::start(scratch.path(), test.name()) else { return };
        let name = format!("view-{}", docker.name());
        docker.docker(&["run", "-d", "--name", &name, "--network", "none", docker.image(), "sleep", "1000"]);
        let merged = PathBuf::from(docker.inspect(&name, "{{.GraphDriver.Data.MergedDir}}"));
        let layer = merged.parent().unwrap().to_path_buf();
        assert!(layer.starts_with(docker.data_root().join("overlay2")), "fixture: layer dir {}", layer.display());
        assert!(is_mountpoint(&merged), "fixture: {} is mounted", merged.display());
        // A second view of the layer dir, with its merged overlay under it.
        // Private: dockerd makes its data root a shared mount, and a view that
        // stayed its peer would be unmounted with the original (its
        // umount2(merged, MNT_DETACH) propagates), and `docker rm` would just
        // work; observed here. A private view keeps its copy of the overlay
        // mounted on the very directory dockerd then rmdirs: EBUSY.
        let view = scratch.path().join("view");
        let _view = RbindView::private(&layer, &view);
        let view_merged = view.join("merged");
        assert!(is_mountpoint(&view_merged), "fixture: the view's {} is mounted", view_merged.display());
        let holder = holder_in(&view_merged);
        let pid = holder.pid();

        let trace = EventLog::start("docker_rm_bind_view", true);
        let mut watch = podstuck(&scratch);
        let out = docker.docker_may_fail(&["rm", "-f", &name]);
        failed_with(
            &out,
            "docker rm -f",
            &["failed to remove root filesystem", &format!("unlinkat {}", merged.display()), "device or resource busy"],
        );

        let dirs = docker.dirs();
        let finding = watch.await_finding(
            FINDING_TIMEOUT,
            |f| f["kind"] == "mount-held" && finding_is_under(f, &dirs),
            |e| {
                e.eq("/paths/0", text(&merged));
                e.eq("/confidence", "confirmed");
                e.eq("/actor/comm", "dockerd");
                e.eq("/errno", "EBUSY");
                e.that(e.mentions("/evidence", text(&view_merged)), format!("evidence should name the other mount, {}", view_merged.display()));
                e.that(e.mentions_number("/evidence", pid.into()), format!("evidence should name the holder, pid {pid}"));
            },
        );
        assert!(is_mountpoint(&view_merged), "fixture: the view is still mounted");
        apply_fix(&finding);
        works_soon(secs(10), "docker rm -f", || docker.docker_may_fail(&["rm", "-f", &name]));
        assert_eq!(stdout_text(&docker.docker(&["ps", "-aq"])), "", "the container is gone");

        let done = wind_down(watch, trace, &dirs, &[docker.pid()]);
        drop(holder);
        eprintln!("{}: the finding:\n{}", test.name(), describe(&finding));
        let ours = findings_about(&done, &dirs, &[docker.pid()]);
        only(&done, &ours, &finding, test.name());
    }
}

// d. ctr task rm, a host process in the rootfs ------------------------------

/// Runs a task, lets `hold` hold its rootfs, kills the task, and returns
/// (the task id, its rootfs). `ctr task rm` is left to the test.
fn task_to_remove(containerd: &Containerd, what: &str) -> (String, PathBuf) {
    let id = format!("{what}-{}", containerd.name());
    containerd.run_detached(&id, &["sleep", "1000"]);
    containerd.wait_task_status(&id, "RUNNING", secs(20));
    let rootfs = containerd.rootfs(&id);
    assert!(rootfs.starts_with("/var/run"), "fixture: the rootfs is spelled through /var/run: {}", rootfs.display());
    assert!(is_mountpoint(&resolved(&rootfs)), "fixture: {} is mounted", rootfs.display());
    (id, rootfs)
}

fn kill_task(containerd: &Containerd, id: &str) {
    containerd.ctr(&["task", "kill", "-s", "SIGKILL", id]);
    containerd.wait_task_status(id, "STOPPED", secs(20));
}

/// The shim's umount2 of the rootfs failed 50 times: `ctr task rm` says so.
fn task_rm_fails_busy(containerd: &Containerd, id: &str, rootfs: &Path) {
    let out = containerd.ctr_may_fail(&["task", "rm", id]);
    failed_with(&out, "ctr task rm", &["failed rootfs umount", text(rootfs), "device or resource busy"]);
    assert_eq!(containerd.task_status(id).as_deref(), Some("STOPPED"), "fixture: the task is still there");
    assert!(is_mountpoint(&resolved(rootfs)), "fixture: the rootfs is still mounted");
}

/// Runs the finding's fix; then `ctr task rm` must work (soon) and the
/// container goes.
fn fix_then_remove_task(containerd: &Containerd, id: &str, finding: &Value) {
    apply_fix(finding);
    works_soon(secs(15), "ctr task rm", || containerd.ctr_may_fail(&["task", "rm", id]));
    containerd.ctr(&["containers", "rm", id]);
}

/// Whether a finding's key path is `path` in either spelling.
fn key_is(e: &Expect, path: &Path) -> bool {
    let key = e.text("/paths/0");
    key == text(path) || Path::new(&key) == resolved(path)
}

/// `ctr task rm` of a task (its id and rootfs, killed here) that `holder`
/// holds: the shim's umount2 fails with EBUSY, and podstuck must say so (a
/// confirmed mount-held about the rootfs, by the shim, naming the holder
/// in its evidence; `more` checks what the scenario adds), its fix must
/// let `ctr task rm` work, and it must say nothing else about the
/// daemon's directories. `case` names the trace.
fn held_rootfs_is_named(
    test: &KernelTest,
    scratch: &ScratchDir,
    containerd: &Containerd,
    case: &str,
    (id, rootfs): (&str, &Path),
    holder: Process,
    more: impl Fn(&mut Expect),
) {
    let pid = holder.pid();
    kill_task(containerd, id);
    let trace = EventLog::start(case, true);
    let mut watch = podstuck(scratch);
    task_rm_fails_busy(containerd, id, rootfs);

    let dirs = containerd.dirs();
    let finding = watch.await_finding(
        FINDING_TIMEOUT,
        |f| f["kind"] == "mount-held" && finding_is_under(f, &dirs),
        |e| {
            e.that(
                key_is(e, rootfs),
                format!("/paths/0 ({}) should be the rootfs {}", e.text("/paths/0"), rootfs.display()),
            );
            e.eq("/confidence", "confirmed");
            e.eq("/syscall", "umount2");
            e.eq("/errno", "EBUSY");
            e.starts_with("/actor/comm", "containerd-shim");
            e.that(e.mentions_number("/evidence", pid.into()), format!("evidence should name the holder, pid {pid}"));
            more(e);
        },
    );
    fix_then_remove_task(containerd, id, &finding);

    let done = wind_down(watch, trace, &dirs, &[containerd.pid()]);
    drop(holder);
    eprintln!("{}: the finding:\n{}", test.name(), describe(&finding));
    let ours = findings_about(&done, &dirs, &[containerd.pid()]);
    only(&done, &ours, &finding, test.name());
}

kernel_test! {
    fn containerd_task_rm_blocked_by_a_process_in_the_rootfs(test) {
        let scratch = test.scratch();
        let Some(containerd) = Containerd::start(scratch.path(), test.name()) else { return };
        let (id, rootfs) = task_to_remove(&containerd, "held");
        // A shell left in the container's rootfs, in the host's namespace.
        let holder = holder_in(&rootfs);
        let pid = holder.pid();
        held_rootfs_is_named(&test, &scratch, &containerd, "ctr_task_rm_held", (&id, &rootfs), holder, |e| {
            e.that(
                e.mentions_number("/summary", pid.into()) || e.mentions_number("/fix", pid.into()),
                format!("the summary or the fix should name the holder, pid {pid}"),
            );
        });
    }
}

// e. ctr task rm, a copy of the rootfs in another mount namespace ------------

kernel_test! {
    /// On a node whose /run is shared (systemd), a process that unshared its
    /// mount namespace after the task started holds a slave copy of the
    /// rootfs mount; with its cwd in it, the copy is busy, and the shim's
    /// plain umount2 fails with EBUSY (the kernel refuses to unmount a mount
    /// whose propagated copies are busy). Observed here: 50 x EBUSY, then
    /// "failed rootfs umount ... device or resource busy".
    fn containerd_rootfs_copy_in_another_namespace(test) {
        let scratch = test.scratch();
        let Some(containerd) = Containerd::start_with(scratch.path(), test.name(), Propagation::Shared) else { return };
        let (id, rootfs) = task_to_remove(&containerd, "ns");
        let holder = holder_in_new_namespace(&rootfs);
        let pid = holder.pid();
        let namespace = mount_ns(pid);
        assert_ne!(namespace, mount_ns(std::process::id()), "fixture: the holder has a mount namespace of its own");
        let copy = mountinfo::at_in(&pid.to_string(), &resolved(&rootfs)).expect("fixture: the holder's namespace has a copy of the rootfs");
        assert!(copy.optional.iter().any(|f| f.starts_with("master:")), "fixture: the copy is a slave of the host's mount: {copy:?}");
        held_rootfs_is_named(&test, &scratch, &containerd, "ctr_task_rm_namespace_shared", (&id, &rootfs), holder, |e| {
            e.that(
                e.mentions("/evidence", &namespace) || e.mentions("/summary", &namespace),
                format!("the summary or evidence should name the holder's mount namespace, {namespace}"),
            );
        });
    }
}

kernel_test! {
    /// The same copy where /run is private (this machine's root is): the copy
    /// is unrelated to the host's mount, so the shim's umount2 succeeds at once
    /// (only the host's mount is checked for being busy), and containerd's
    /// rmdir of the rootfs dir then detaches the copy in the other namespace
    /// too (the kernel drops mounts on a removed directory in every namespace;
    /// the holder's cwd is left on a detached mount). `ctr task rm` works:
    /// nothing is stuck, and podstuck must say nothing.
    fn containerd_rootfs_copy_in_another_namespace_under_a_private_run(test) {
        let scratch = test.scratch();
        let Some(containerd) = Containerd::start_with(scratch.path(), test.name(), Propagation::Private) else { return };
        let (id, rootfs) = task_to_remove(&containerd, "nsp");
        let holder = holder_in_new_namespace(&rootfs);
        let pid = holder.pid();
        let copy = mountinfo::at_in(&pid.to_string(), &resolved(&rootfs)).expect("fixture: the holder's namespace has a copy of the rootfs");
        assert!(!copy.propagates(), "fixture: the copy is private: {copy:?}");
        kill_task(&containerd, &id);

        let trace = EventLog::start("ctr_task_rm_namespace_private", true);
        let watch = podstuck(&scratch);
        let out = containerd.ctr_may_fail(&["task", "rm", &id]);
        assert!(out.status.success(), "fixture: with a private /run, ctr task rm should work: {}", stderr_text(&out));
        assert!(mountinfo::at_in(&pid.to_string(), &resolved(&rootfs)).is_none(), "fixture: the holder's copy went with the rootfs dir");
        containerd.ctr(&["containers", "rm", &id]);

        let done = wind_down(watch, trace, &containerd.dirs(), &[containerd.pid()]);
        drop(holder);
        let ours = findings_about(&done, &containerd.dirs(), &[containerd.pid()]);
        assert!(ours.is_empty(), "nothing was stuck, yet podstuck found:\n{}\npodstuck stderr:\n{}", describe_all(&ours), done.stderr);
    }
}

// f. normal churn -----------------------------------------------------------

kernel_test! {
    fn normal_churn_gives_no_findings(test) {
        let scratch = test.scratch();
        let Some(docker) = Dockerd::start(scratch.path(), test.name()) else { return };
        let Some(containerd) = Containerd::start(scratch.path(), test.name()) else { return };
        let image = docker.image();
        containerd.image();
        let name = docker.name().to_string();

        let trace = EventLog::start("normal_churn", true);
        let watch = podstuck(&scratch);
        let started = Instant::now();
        for i in 0..20 {
            let out = docker.docker(&["run", "--rm", "--network", "none", image, "echo", &format!("run {i}")]);
            assert_eq!(stdout_text(&out), format!("run {i}"));
        }
        for i in 0..10 {
            let c = format!("churn-{name}-{i}");
            docker.docker(&["run", "-d", "--name", &c, "--network", "none", image, "sleep", "1000"]);
            // busybox sleep as PID 1 ignores SIGTERM: do not wait 10 s for it.
            docker.docker(&["stop", "-t", "1", &c]);
            docker.docker(&["rm", &c]);
        }
        for i in 0..5 {
            let v = format!("churn-{name}-{i}");
            docker.docker(&["volume", "create", &v]);
            let mount = format!("{v}:/data");
            let script = "mkdir -p /data/a/b && for f in 1 2 3; do echo x > /data/f$f; echo y > /data/a/b/g$f; done";
            docker.docker(&["run", "--rm", "--network", "none", "-v", &mount, image, "sh", "-c", script]);
            docker.docker(&["volume", "rm", &v]);
        }
        for i in 0..5 {
            let out = containerd.run_rm(&format!("churn-{name}-{i}"), &["echo", "ctr"]);
            assert_eq!(stdout_text(&out), "ctr");
        }
        assert_eq!(stdout_text(&docker.docker(&["ps", "-aq"])), "", "fixture: no container left");
        assert_eq!(stdout_text(&docker.docker(&["volume", "ls", "-q"])), "", "fixture: no volume left");
        assert_eq!(stdout_text(&containerd.ctr(&["containers", "ls", "-q"])), "", "fixture: no ctr container left");
        eprintln!("{}: the churn took {:.1?}", test.name(), started.elapsed());

        // Nothing is awaited but time: for findings that must not come
        // (2 s more than a scenario's, after a churn of many containers).
        std::thread::sleep(SETTLE + secs(2));
        let done = stop(watch);
        let mut dirs = docker.dirs();
        dirs.extend(containerd.dirs());
        let mut pids = vec![docker.pid(), containerd.pid()];
        pids.extend(docker.containerd_pid());
        if let Some(trace) = trace {
            trace.save(&dirs, &pids);
        }
        let ours = findings_about(&done, &dirs, &pids);
        assert!(ours.is_empty(), "normal runtime churn produced findings:\n{}\npodstuck stderr:\n{}", describe_all(&ours), done.stderr);
    }
}
