//! End-to-end: a dropped ssh session or a closed terminal (SIGHUP, the
//! terminal gone) ends every command cleanly. `podstuck demo` in a tmux
//! session whose server is killed removes everything it made; what a
//! SIGKILLed demo left is removed by the next demo; a `podstuck record`
//! whose terminal is closed ends its file properly, so it replays
//! without the "ends early" warning of a record cut short.
//!
//! Runs as root; see `kernel_test!` for the skip rule. Each test
//! has its own tmux server and scratch directory.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use podstuck_tests::terminal::{child_named, Tmux};
use podstuck_tests::*;

/// Building the demo's lab (120,000 directories) and attaching, on a busy
/// machine with the other tests running.
const LAB_TIMEOUT: Duration = Duration::from_secs(90);

/// The lab of the demo with this pid.
fn lab_of(pid: u32) -> PathBuf {
    PathBuf::from(format!("/var/tmp/podstuck-demo-{pid}"))
}

/// The calls the live view's header says were counted in the kernel
/// ("calls counted 1234"), if it is on the screen.
fn calls_counted(screen: &str) -> Option<u64> {
    let rest = &screen[screen.find("calls counted ")? + "calls counted ".len()..];
    rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok()
}

/// Nothing of the demo with this pid is left: no lab, no mount under it,
/// no cgroup, and no process of its own.
fn nothing_left_of_demo(pid: u32) {
    let lab = lab_of(pid);
    wait_until(&format!("{} to be removed", lab.display()), Duration::from_secs(30), || !lab.exists());
    assert!(mountinfo::below(&[&lab]).is_empty(), "mounts left: {:?}", mountinfo::below(&[&lab]));
    assert!(!cgroup2_root().join(format!("podstuck-demo-{pid}")).exists(), "the demo cgroup is left");
    let leftovers: Vec<String> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| {
            let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
            String::from_utf8_lossy(&cmdline)
                .contains(text(&lab))
                .then(|| String::from_utf8_lossy(&cmdline).replace('\0', " "))
        })
        .collect();
    assert!(leftovers.is_empty(), "processes of the demo left: {leftovers:?}");
}

/// Removes a lab by force if a test failed half-way (the tests' own
/// guard; podstuck's cleanup is what the tests check).
struct LabGuard(u32);

impl Drop for LabGuard {
    fn drop(&mut self) {
        let lab = lab_of(self.0);
        if !lab.exists() {
            return;
        }
        let _ = Command::new("pkill").arg("-9").arg("-f").arg(text(&lab)).status();
        for mount in mountinfo::below(&[&lab]).iter().rev() {
            let _ = Command::new("umount").arg("-l").arg(mount).status();
        }
        let _ = Command::new("chattr").args(["-R", "-f", "-i"]).arg(&lab).stderr(Stdio::null()).status();
        let _ = std::fs::remove_dir_all(&lab);
        let cgroup = cgroup2_root().join(format!("podstuck-demo-{}", self.0));
        for dir in std::fs::read_dir(&cgroup).into_iter().flatten().flatten().filter(|e| e.path().is_dir()) {
            let _ = std::fs::remove_dir(dir.path());
        }
        let _ = std::fs::remove_dir(&cgroup);
    }
}

kernel_test! {
    fn a_demo_whose_terminal_is_closed_removes_everything_it_made(test) {
        let scratch = test.scratch();
        let mut tmux = Tmux::start(scratch.path(), test.name(), &format!("exec '{}' demo --duration 120s", text(&podstuck_binary())));
        let shell: u32 = tmux.pane("#{pane_pid}").parse().expect("pane pid");
        // `exec`: the pane's process is podstuck itself.
        let demo = if std::fs::read_to_string(format!("/proc/{shell}/comm")).is_ok_and(|c| c.trim() == "podstuck") {
            shell
        } else {
            child_named(shell, "podstuck").expect("podstuck under the pane")
        };
        tmux.podstuck = Some(demo);
        let _guard = LabGuard(demo);
        tmux.wait_for("the demo's findings", LAB_TIMEOUT, |s| s.contains("mount-held") && s.contains("immutable-file"));
        let lab = lab_of(demo);
        assert!(!mountinfo::below(&[&lab]).is_empty(), "the demo's mounts exist while it runs");
        // The terminal goes away: tmux's server dies, the demo gets SIGHUP.
        let _ = tmux.command().arg("kill-server").status();
        wait_until("the demo to exit", Duration::from_secs(60), || !alive(demo));
        nothing_left_of_demo(demo);
    }
}

kernel_test! {
    fn what_a_killed_demo_left_is_removed_by_the_next_demo() {
        let mut first = Command::new(podstuck_binary())
            .args(["demo", "--json", "--duration", "120s"])
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .expect("spawn the first demo");
        let pid = first.id();
        let _guard = LabGuard(pid);
        let lab = lab_of(pid);
        // Killed once its lab is built and traced (its first finding is out).
        let mut stdout = std::io::BufReader::new(first.stdout.take().unwrap());
        let mut line = String::new();
        let deadline = Instant::now() + LAB_TIMEOUT;
        while !line.contains("\"type\":\"finding\"") {
            line.clear();
            assert!(std::io::BufRead::read_line(&mut stdout, &mut line).unwrap() > 0, "the first demo ended early");
            assert!(Instant::now() < deadline, "no finding from the first demo");
        }
        let _ = first.kill();
        let _ = first.wait();
        assert!(lab.exists() && !mountinfo::below(&[&lab]).is_empty(), "a SIGKILLed demo leaves its lab and mounts");

        let second = Command::new(podstuck_binary()).args(["demo", "--json", "--duration", "3s"]).output().expect("run the second demo");
        let said = String::from_utf8_lossy(&second.stderr);
        assert!(second.status.success(), "{said}");
        assert!(said.contains(&format!("{} was left by an earlier demo (pid {pid}, no longer running): removing it", text(&lab))), "{said}");
        nothing_left_of_demo(pid);
    }
}

kernel_test! {
    fn a_record_whose_terminal_is_closed_ends_its_file_and_replays_whole(test) {
        let scratch = test.scratch();
        let file = scratch.path().join("incident.podstuck");
        let mut tmux = Tmux::start(
            scratch.path(),
            test.name(),
            &format!("exec '{}' record --concurrent '{}'", text(&podstuck_binary()), text(&file)),
        );
        let screen = tmux.wait_for("the live view", Duration::from_secs(60), |s| s.contains("q or Ctrl-C: stop and print a summary"));
        let before = calls_counted(&screen).unwrap_or_else(|| panic!("no count of calls in the header:\n{screen}"));
        let pid: u32 = tmux.pane("#{pane_pid}").parse().expect("pane pid");
        tmux.podstuck = Some(pid);
        // Some calls to record.
        let dir = scratch.path().join("work");
        std::fs::create_dir(&dir).unwrap();
        for i in 0..20 {
            std::fs::write(dir.join(format!("f{i}")), b"x").unwrap();
            std::fs::remove_file(dir.join(format!("f{i}"))).unwrap();
        }
        // Recorded once the view counts them (it counts every call of the node).
        tmux.wait_for("the 20 unlinks counted", Duration::from_secs(30), |s| calls_counted(s).is_some_and(|n| n >= before + 20));
        let _ = tmux.command().arg("kill-server").status();
        wait_until("podstuck record to exit", Duration::from_secs(30), || !alive(pid));
        let replay = Command::new(podstuck_binary()).arg("replay").arg(&file).output().expect("run podstuck replay");
        let said = format!("{}{}", String::from_utf8_lossy(&replay.stdout), String::from_utf8_lossy(&replay.stderr));
        assert!(replay.status.success(), "{said}");
        assert!(!said.contains("ends early"), "the record must end with its end entry:\n{said}");
    }
}
