//! End-to-end: podstuck runs as root on a node whose other users are not
//! trusted, and the files it writes (`--histograms DIR`, the record) can't
//! be turned against the node. Each attack is made for real:
//!
//! - links planted at every name podstuck writes (the write test, every
//!   temporary name pattern, as of the pid podstuck will run as, and the
//!   final names) are never written through: the files they point to come
//!   out byte for byte; the final names end up podstuck's own files;
//! - a histogram directory another user can write (owned by `nobody`,
//!   world-writable, sticky or not, group-writable) is refused at start
//!   with why and what to do, before anything is written, the original
//!   attack (links planted by `nobody`) included;
//! - a record name `nobody` planted a link at is refused; files are made
//!   0600 (the directory 0700) even under umask 0;
//! - the directory removed while podstuck runs is said once and made
//!   again, tracing goes on, the files are whole at the end, and the `end`
//!   line is printed;
//! - a full filesystem is said once; the `end` line is printed still; no
//!   temporary file is left.
//!
//! Runs as root; see `kernel_test!` for the skip rule.

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::Write;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use podstuck_tests::attacks::*;
use podstuck_tests::*;
use serde_json::Value;

const FILES: [&str; 4] = ["latency.hlog", "latency.svg", "metrics.prom", "summary.json"];

/// `n` unlink(2) calls in `volume`, made by the actor.
fn unlink_many(volume: &Path, n: u32) {
    let done =
        actor().args([OsStr::new("unlink-many"), volume.as_os_str(), OsStr::new(&n.to_string())]).output().unwrap();
    assert_eq!(String::from_utf8_lossy(&done.stdout).trim(), format!("unlink-many {n} unlinked, 0 failed"));
}

/// Waits until podstuck has refreshed the files in `dir` `n` times more:
/// each refresh writes summary.json last, a new file renamed over the old.
fn await_refreshes(dir: &Path, n: usize) {
    let stamp = || std::fs::metadata(dir.join("summary.json")).ok().map(|m| (m.ino(), m.mtime(), m.mtime_nsec()));
    let (mut last, mut seen) = (stamp(), 0);
    wait_until(&format!("{n} more refreshes of {}", dir.display()), Duration::from_secs(30), || {
        let now = stamp();
        if now.is_some() && now != last {
            (last, seen) = (now, seen + 1);
        }
        seen >= n
    });
}

/// The calls of `tag` in latency.hlog, every interval added up, as
/// `podstuck report --json` reads it back.
fn logged_count(dir: &Path, tag: &str) -> u64 {
    let out = Command::new(podstuck_binary()).arg("report").arg(dir).arg("--json").output().unwrap();
    assert!(out.status.success(), "podstuck report: {}", String::from_utf8_lossy(&out.stderr));
    let report: Value = serde_json::from_slice(&out.stdout).expect("report --json is JSON");
    report["series"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|s| s["tag"] == tag)
        .map(|s| s["count_in_log"].as_u64().unwrap())
        .sum()
}

/// Each of the four files is whole: summary.json and the report parse,
/// metrics.prom has its counters, latency.svg is a closed SVG.
fn assert_whole(dir: &Path) {
    assert!(summary_json(dir).is_some(), "summary.json is whole JSON");
    let prom = std::fs::read_to_string(dir.join("metrics.prom")).unwrap();
    assert!(prom.contains("podstuck_events_lost_total"), "{prom}");
    let svg = std::fs::read_to_string(dir.join("latency.svg")).unwrap();
    assert!(svg.trim_end().ends_with("</svg>"), "latency.svg is cut");
    let hlog = std::fs::read_to_string(dir.join("latency.hlog")).unwrap();
    assert!(hlog.starts_with("#[Histogram log format version 1.3]"));
}

fn lines_with<'a>(stderr: &'a str, needle: &str) -> Vec<&'a str> {
    stderr.lines().filter(|l| l.contains(needle)).collect()
}

kernel_test! {
    fn links_planted_at_every_name_podstuck_writes_are_never_followed(test) {
        let scratch = test.scratch();
        let (root, pod, volume) = pod_with_empty_dir(scratch.path(), "scratch");
        let uid = pod.uid();
        let victim = Victim::new(scratch.path(), "victim");
        // A link to nothing yet: a create that followed it would make this.
        let through = scratch.path().join("made-through-a-link");
        let out = scratch.path().join("histograms");
        std::fs::create_dir(&out).unwrap();
        std::fs::set_permissions(&out, std::fs::Permissions::from_mode(0o700)).unwrap();

        // Before podstuck starts: the write test's name and the temporary
        // names of earlier versions (what the security pass planted), and the
        // final names themselves.
        let mut planted: Vec<(String, PathBuf)> = vec![(".podstuck-write-test".into(), victim.path.clone())];
        for f in FILES {
            planted.push((format!(".{f}.tmp"), victim.path.clone()));
            planted.push((f.to_string(), victim.path.clone()));
        }
        // Held before it runs: the temporary names of the pid it will run as,
        // `.<name>.<pid>.<n>.tmp` for the first n of each, half to the victim,
        // half dangling.
        let mut podstuck = Held::spawn(&["--pod", uid, "--kubelet-root", root.arg(), "--histograms", text(&out), "--force", "--interval", "1s"]);
        let pid = podstuck.pid();
        const TAKEN: u64 = 8;
        for name in FILES.iter().copied().chain(["podstuck-write-test"]) {
            for n in 0..TAKEN {
                let target = if n % 2 == 0 { victim.path.clone() } else { through.clone() };
                planted.push((format!(".{name}.{pid}.{n}.tmp"), target));
            }
        }
        for (name, target) in &planted {
            plant_link(target, &out.join(name));
        }
        let made = MadeNames::watch(&out);
        podstuck.release();

        unlink_many(&volume, 100);
        let tag = format!("unlink/ok/other/{uid}");
        wait_until("summary.json counting the 100 calls", Duration::from_secs(20), || series_count(&out, &tag) >= 100);
        // A few more refreshes over the same names.
        await_refreshes(&out, 2);
        let stopped = podstuck.stop(libc::SIGINT);
        assert!(stopped.status.success(), "{}", stopped.stderr);
        assert!(stopped.end.is_some(), "no end line: {}", stopped.stderr);

        victim.assert_intact();
        assert!(!through.exists() && through.symlink_metadata().is_err(), "a file was made through a planted link");
        // The planted temporaries are not podstuck's: left as they were.
        for (name, target) in planted.iter().filter(|(n, _)| !FILES.contains(&n.as_str())) {
            assert_eq!(std::fs::read_link(out.join(name)).unwrap_or_else(|e| panic!("{name}: {e}")), *target, "{name}");
        }
        // The final names: podstuck's own files now, the links replaced.
        for f in FILES {
            let meta = std::fs::symlink_metadata(out.join(f)).unwrap();
            assert!(meta.file_type().is_file(), "{f} is still a link");
            assert_eq!((meta.uid(), meta.mode() & 0o7777), (0, 0o600), "{f}");
        }
        assert_eq!(series_count(&out, &tag), 100);
        assert_eq!(summary_json(&out).unwrap()["run"]["finished"], true);
        assert_eq!(logged_count(&out, &tag), 100);
        assert_whole(&out);
        // Nothing else left: the four files and what was planted.
        let expected: BTreeSet<String> = FILES.iter().map(|f| f.to_string()).chain(planted.iter().map(|(n, _)| n.clone())).collect();
        assert_eq!(names_in(&out).into_iter().collect::<BTreeSet<_>>(), expected, "a temporary file was left behind");

        // Every taken name was tried and skipped: the first temporary name
        // made for each file is number TAKEN, never a planted one.
        let made = made.take();
        let planted_names: BTreeSet<&str> = planted.iter().map(|(n, _)| n.as_str()).collect();
        for f in FILES {
            let prefix = format!(".{f}.{pid}.");
            let numbers: Vec<u64> = made.iter().filter_map(|n| n.strip_prefix(&prefix)?.strip_suffix(".tmp")?.parse().ok()).collect();
            assert_eq!(numbers.first(), Some(&TAKEN), "{f}: temporary names made {numbers:?}; all made: {made:?}");
            assert!(numbers.windows(2).all(|w| w[1] == w[0] + 1), "{f}: {numbers:?}");
        }
        for name in &made {
            let temporary = name.ends_with(".tmp");
            assert!(!(temporary && planted_names.contains(name.as_str())), "made a planted name: {name}");
        }
    }
}

kernel_test! {
    fn a_directory_another_user_can_write_is_refused_before_anything_is_written(test) {
        let scratch = test.scratch();
        let victim = Victim::new(scratch.path(), "victim");
        // (name, owner, mode, what podstuck must say)
        let cases = [
            ("owned-by-nobody", NOBODY, 0o755, "it is owned by uid 65534, not by root"),
            ("world-writable", 0, 0o777, "it is writable by everyone (mode 0777)"),
            ("sticky-like-tmp", 0, 0o1777, "it is writable by everyone (mode 1777, sticky)"),
            ("group-writable", 0, 0o770, "it is writable by its group (mode 0770)"),
        ];
        for (name, owner, mode, why) in cases {
            let dir = scratch.path().join(name);
            std::fs::create_dir(&dir).unwrap();
            // Group nogroup, which nobody runs with.
            std::os::unix::fs::chown(&dir, Some(owner), Some(NOBODY)).unwrap();
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(mode)).unwrap();
            // The attack of the security pass, made by nobody.
            plant_link_as_nobody(&victim.path, &dir.join(".podstuck-write-test"));
            plant_link_as_nobody(&victim.path, &dir.join(".summary.json.tmp"));
            plant_link_as_nobody(&victim.path, &dir.join(".latency.hlog.tmp"));
            let before = names_in(&dir);
            for force in [false, true] {
                let mut args = vec![OsStr::new("watch"), OsStr::new("--concurrent"), OsStr::new("--json"), OsStr::new("--histograms"), dir.as_os_str()];
                args.extend([OsStr::new("--interval"), OsStr::new("1s"), OsStr::new("--duration"), OsStr::new("5s")]);
                if force {
                    args.push(OsStr::new("--force"));
                }
                let stderr = podstuck_refuses(&args);
                let said = format!(
                    "podstuck: error: --histograms {d}: {why}, so another user could plant links in it or read or replace the files podstuck writes there; use a directory only root can write, e.g. create a new one with `install -d -m 0700 ",
                    d = dir.display()
                );
                assert!(stderr.starts_with(&said), "{name}: {stderr}");
                // The advice names a new directory, never the one refused: pasted, it changes nothing that exists.
                let advised = stderr.split("install -d -m 0700 ").nth(1).and_then(|rest| rest.split('`').next()).unwrap_or_default();
                assert!(!advised.is_empty() && !Path::new(advised).exists() && Path::new(advised) != dir, "{name}: {stderr}");
                victim.assert_intact();
                assert_eq!(names_in(&dir), before, "{name}: podstuck wrote in it");
            }
        }
    }
}

kernel_test! {
    fn files_are_made_0600_and_a_record_never_goes_through_a_planted_link(test) {
        let scratch = test.scratch();
        let victim = Victim::new(scratch.path(), "victim");
        // A shared place for records, as /var/tmp is: anyone may plant there.
        let shared = scratch.path().join("shared");
        std::fs::create_dir(&shared).unwrap();
        std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
        let through = scratch.path().join("made-through-a-link");
        plant_link_as_nobody(&victim.path, &shared.join("incident.podstuck"));
        plant_link_as_nobody(&through, &shared.join("dangling.podstuck"));
        for name in ["incident.podstuck", "dangling.podstuck"] {
            let record = shared.join(name);
            let stderr = podstuck_refuses(&[OsStr::new("record"), record.as_os_str(), OsStr::new("--concurrent"), OsStr::new("--duration"), OsStr::new("3s")]);
            assert!(stderr.contains(&format!("{} exists: choose another name or remove it", record.display())), "{stderr}");
            assert_eq!(std::fs::symlink_metadata(&record).unwrap().uid(), NOBODY, "the planted link is left as it was");
        }
        victim.assert_intact();
        assert!(through.symlink_metadata().is_err(), "a record was made through a dangling link");

        // Under umask 0, which would make 0666 files of a plain create.
        let record = shared.join("ours.podstuck");
        let out = scratch.path().join("new/histograms");
        let mut command = Command::new(podstuck_binary());
        command
            .arg("record")
            .arg(&record)
            .args(["--json", "--concurrent", "--duration", "4s", "--interval", "1s", "--histograms", text(&out)])
            .stdout(Stdio::null())
            .stderr(Stdio::piped());
        // SAFETY: umask(2) only, between fork and exec.
        unsafe {
            command.pre_exec(|| {
                libc::umask(0);
                Ok(())
            });
        }
        let ran = command.output().expect("run podstuck record");
        assert!(ran.status.success(), "{}", String::from_utf8_lossy(&ran.stderr));
        let owned_by_root = |p: &Path| std::fs::symlink_metadata(p).unwrap().uid() == 0;
        assert_eq!(mode_of(&record), 0o600, "the record");
        assert!(owned_by_root(&record));
        assert_eq!(mode_of(&out), 0o700, "the histogram directory podstuck made");
        assert_eq!(names_in(&out), FILES, "no temporary file left");
        for f in FILES {
            assert_eq!(mode_of(&out.join(f)), 0o600, "{f}");
            assert!(owned_by_root(&out.join(f)), "{f}");
        }
        assert_whole(&out);
    }
}

kernel_test! {
    fn the_directory_removed_mid_run_is_made_again_and_tracing_goes_on(test) {
        let scratch = test.scratch();
        let (root, pod, volume) = pod_with_empty_dir(scratch.path(), "scratch");
        let uid = pod.uid();
        let out = scratch.path().join("histograms");
        let mut podstuck = Held::spawn(&["--pod", uid, "--kubelet-root", root.arg(), "--histograms", text(&out), "--interval", "1s"]);
        podstuck.release();
        let tag = format!("unlink/ok/other/{uid}");
        unlink_many(&volume, 300);
        wait_until("the first 300 calls in summary.json", Duration::from_secs(20), || series_count(&out, &tag) >= 300);

        // rm -rf, again if a refresh put a file in it meanwhile.
        wait_until("the directory removed", Duration::from_secs(10), || {
            let _ = std::fs::remove_dir_all(&out);
            !out.exists()
        });
        unlink_many(&volume, 300);
        wait_until("the directory made again with all 600 calls", Duration::from_secs(20), || series_count(&out, &tag) >= 600);
        // Refreshes into the directory made again say nothing more.
        await_refreshes(&out, 2);
        let said = podstuck.stderr_so_far();
        let stopped = podstuck.stop(libc::SIGINT);

        assert!(stopped.status.success(), "{}", stopped.stderr);
        let end = stopped.end.as_ref().unwrap_or_else(|| panic!("no end line: {}", stopped.stderr));
        assert_eq!(end["type"], "end");
        let warnings = lines_with(&said, "histogram");
        assert_eq!(warnings.len(), 1, "one warning: {said}");
        assert!(
            warnings[0].contains(&format!("the histogram directory {} was removed while podstuck ran: made it again", out.display())),
            "{said}"
        );
        assert_eq!(lines_with(&stopped.stderr, "histogram").len(), 1, "{}", stopped.stderr);
        // Made again by the same rules: root's, 0700; whole files, no temporary.
        assert_eq!((std::fs::metadata(&out).unwrap().uid(), mode_of(&out)), (0, 0o700));
        assert_eq!(names_in(&out), FILES, "a temporary file was left behind");
        assert_eq!(series_count(&out, &tag), 600, "every call of the run, before and after the removal");
        assert_eq!(logged_count(&out, &tag), 600, "every interval since the start in latency.hlog");
        assert_eq!(summary_json(&out).unwrap()["run"]["finished"], true);
        assert_whole(&out);
    }
}

kernel_test! {
    fn a_full_filesystem_is_said_once_and_the_end_line_is_printed_still(test) {
        let scratch = test.scratch();
        let tiny = scratch.path().join("tiny");
        let _mount = TmpfsMount::new(&tiny, "size=64k,mode=0700");
        let out = tiny.join("histograms");
        let mut podstuck = Held::spawn(&["--histograms", text(&out), "--interval", "1s", "--syscall", "unlink"]);
        podstuck.release();
        wait_until("the first summary.json", Duration::from_secs(20), || summary_json(&out).is_some());

        // Fill the filesystem to its last byte.
        let mut filler = std::fs::File::create(tiny.join("filler")).unwrap();
        let page = [0x5au8; 4096];
        while filler.write_all(&page).is_ok() {}
        drop(filler);
        // The first refresh that fails says so.
        wait_until("the failure said", Duration::from_secs(30), || {
            podstuck.stderr_so_far().contains("cannot refresh histogram files")
        });
        // Then nothing to wait on but time: a refresh that fails leaves no
        // trace to see (its file is unnamed, O_TMPFILE, until written), and
        // "said once, not every interval" needs a few 1 s intervals.
        std::thread::sleep(Duration::from_millis(3500));
        let said = podstuck.stderr_so_far();
        let stopped = podstuck.stop(libc::SIGINT);

        let warnings = lines_with(&said, "cannot refresh histogram files");
        assert_eq!(warnings.len(), 1, "said once, not every interval: {said}");
        assert!(warnings[0].contains("No space left on device") && warnings[0].contains("tracing goes on"), "{said}");
        // The end line still, then the final refresh's failure, and exit code 1.
        let end = stopped.end.as_ref().unwrap_or_else(|| panic!("no end line: {}", stopped.stderr));
        assert_eq!(end["type"], "end");
        assert!(end["events_lost"].is_u64(), "{end}");
        assert_eq!(stopped.status.code(), Some(1), "{}", stopped.stderr);
        let last = lines_with(&stopped.stderr, "cannot write the final histogram files");
        assert_eq!(last.len(), 1, "{}", stopped.stderr);
        assert!(last[0].contains("No space left on device"), "{}", stopped.stderr);
        // The files of the last interval written, whole; no temporary file.
        assert_eq!(names_in(&out), FILES, "a temporary file was left behind");
        assert_eq!(summary_json(&out).unwrap()["run"]["finished"], false);
        assert_whole(&out);
    }
}

kernel_test! {
    /// `--file-mode 644` for a node exporter that is not root; never a mode
    /// that lets anyone else write.
    fn a_file_mode_may_open_reading_never_writing(test) {
        let scratch = test.scratch();
        let dir = scratch.path().join("h");
        let refused = Command::new(podstuck_binary()).args(["watch", "--json", "--concurrent", "--file-mode", "664", "--histograms", text(&dir)]).output().unwrap();
        assert_eq!(refused.status.code(), Some(2), "{}", String::from_utf8_lossy(&refused.stderr));
        assert!(!dir.exists(), "nothing made for a refused mode");
        let watch = Watch::start(&["--file-mode", "644", "--interval", "1s", "--histograms", text(&dir)]);
        let done = watch.stop(libc::SIGINT);
        assert!(done.status.success(), "{}", done.stderr);
        for name in ["summary.json", "metrics.prom", "latency.hlog", "latency.svg"] {
            let mode = std::fs::metadata(dir.join(name)).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o644, "{name}");
        }
    }
}
