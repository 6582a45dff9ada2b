//! End-to-end: what a hostile workload names can't be turned against the
//! node or the person reading podstuck. A process that names itself with
//! terminal escapes reaches no terminal raw (call lines, finding lines,
//! the summary); a process of another user that calls itself `podstuck`
//! is never taken for a tracer. (Fix quoting under dash, bash and busybox
//! sh is tested on the quoting function itself, in podstuck-user.)
//!
//! Runs as root; see `kernel_test!` for the skip rule.

use std::process::Command;
use std::time::Duration;

use podstuck_tests::*;

/// Retitles the terminal and clears the screen, if it reaches one raw.
const HOSTILE_COMM: &str = "\x1b]0;owned\x07\x1b[2J";

kernel_test! {
    fn a_process_named_with_terminal_escapes_reaches_no_terminal_raw(test) {
        let scratch = test.scratch();
        let dir = scratch.path().join("still mounted");
        let _mount = TmpfsMount::new(&dir, "size=1m");
        for mode in ["--calls", "--findings-lines"] {
            let mut args = vec!["watch", "--concurrent", "--duration", "8s"];
            if mode == "--calls" {
                args.push("--calls");
            }
            // Not a terminal: FINDING lines (or call lines with --calls),
            // after a banner on stderr once it is attached.
            let podstuck = Attached::spawn(Command::new(podstuck_binary()).args(&args));
            let hostile = actor()
                .args(["--comm", HOSTILE_COMM, "--every-ms", "300", "--repeat", "8", "rmdir"])
                .arg(&dir)
                .output()
                .expect("run the actor");
            let said = String::from_utf8_lossy(&hostile.stdout);
            assert!(said.lines().all(|l| l == format!("rmdir errno {}", libc::EBUSY)), "the fixture: EBUSY each time: {said}");
            let out = podstuck.finish(Duration::from_secs(60));
            // The directory is still mounted when --duration ends: exit 3, said.
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(3), "{stderr}");
            assert!(stderr.contains("critical finding(s) still active at the end of --duration: exit 3"), "{stderr}");
            let all = [out.stdout.as_slice(), out.stderr.as_slice()].concat();
            assert!(!all.contains(&0x1b) && !all.contains(&0x07), "{mode}: a raw escape reached the output:\n{}", String::from_utf8_lossy(&all));
            let text = String::from_utf8_lossy(&out.stdout);
            assert!(text.contains("\\u{1b}]0;owned\\u{7}"), "{mode}: the name is shown escaped:\n{text}");
        }
    }
}

kernel_test! {
    fn a_process_of_another_user_named_podstuck_is_never_taken_for_a_tracer() {
        // "ready" once it has its name and its user.
        let fake = start_actor(["--as-uid", "65534", "--comm", "podstuck", "sleep"]);
        fake.wait_ready(Duration::from_secs(10));
        let fake_pid = fake.pid();
        assert_eq!(std::fs::read_to_string(format!("/proc/{fake_pid}/comm")).unwrap().trim(), "podstuck");
        // Other tests' tracers may hold the lock (shared, --concurrent): a
        // refusal may happen, but must name a real holder, never the impostor.
        // This run watches the whole node, so another test's still-mounted
        // volume may be active when --duration ends: exit 3, which is fine.
        let out = Command::new(podstuck_binary()).args(["watch", "--json", "--duration", "1s"]).output().expect("run podstuck");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!stderr.contains(&format!("pid {fake_pid}")), "the impostor was taken for a tracer: {stderr}");
        let ran = out.status.success() || out.status.code() == Some(3);
        assert!(ran || stderr.contains("/run/podstuck.lock"), "{:?}: {stderr}", out.status);
        let check = Command::new(podstuck_binary()).arg("check").output().expect("run podstuck check");
        let said = String::from_utf8_lossy(&check.stdout);
        assert!(!said.contains(&format!("pid {fake_pid}")), "check names the impostor: {said}");
    }
}
