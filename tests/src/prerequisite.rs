//! The one rule for a test that cannot run here: a missing prerequisite
//! (root, a daemon that will not start, a package, a kernel feature)
//! **fails** the test, saying what is missing and how to get it. Only
//! `PODSTUCK_ALLOW_SKIPS=1` turns that into a skip, and a loud one: a line
//! on the test binary's own stderr, past libtest's output capture, which
//! `cargo xtask test` counts and names in its closing lines, so "N passed"
//! only ever counts tests that ran.
//!
//! Every test of the workspace goes through here, the end-to-end tests of
//! this crate and podstuck-user's unit tests (a dev-dependency) alike:
//! a second copy of the rule would drift.

use std::io::Write;

/// The variable that lets a missing prerequisite skip instead of fail.
/// Nothing in the repository sets it: not `cargo xtask test`, not CI.
pub const ALLOW_SKIPS: &str = "PODSTUCK_ALLOW_SKIPS";

/// How a skip's line starts on stderr; `cargo xtask test` reads the test's
/// name after it, up to the colon, and what was missing after that.
pub const SKIP_MARK: &str = "podstuck-test SKIPPED ";

/// Whether skips were allowed for this run (`PODSTUCK_ALLOW_SKIPS=1`).
pub fn skips_allowed() -> bool {
    std::env::var(ALLOW_SKIPS).is_ok_and(|v| v == "1")
}

/// The test running on this thread, by the name libtest gave the thread
/// (`module::test_name`); unit tests use it where they have no name of
/// their own to give.
pub fn this_test() -> String {
    std::thread::current().name().unwrap_or("a test").to_string()
}

/// `test` cannot run here: `what` is missing, and `how` says how to get
/// it. Fails the test unless skips are allowed; then it says so where no
/// capture swallows it and returns the caller's "nothing ran" value
/// (`()` for a test body, `None` for a fixture), so a skip reads
/// `return missing(test, "...", "...")`.
#[track_caller]
pub fn missing<T: Default>(test: &str, what: &str, how: &str) -> T {
    if !skips_allowed() {
        panic!(
            "{test} cannot run here: {what}; {how}\n(only {ALLOW_SKIPS}=1 turns a missing prerequisite into a skip)"
        );
    }
    // Straight to the file descriptor: libtest captures `eprintln!` of a
    // passing test and would drop the line.
    let line = format!("\n{SKIP_MARK}{test}: {}; {}\n", one_line(what), one_line(how));
    let _ = std::io::stderr().lock().write_all(line.as_bytes());
    T::default()
}

/// Whether this runs as root, which `test` needs `for_what`; without root
/// the test fails, unless skips are allowed (then false).
pub fn root(test: &str, for_what: &str) -> bool {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } == 0 {
        return true;
    }
    missing(test, &format!("root, {for_what}"), "run the tests as root (sudo -E cargo xtask test)")
}

/// A reason on one line, so the skip's line is one line for xtask to read
/// (a daemon's log tail, say).
fn one_line(what: &str) -> String {
    what.split_whitespace().collect::<Vec<_>>().join(" ")
}

/// A skip's line, as `cargo xtask test` reads it back: (test, reason).
pub fn parse_skip_line(line: &str) -> Option<(&str, &str)> {
    let rest = &line[line.find(SKIP_MARK)? + SKIP_MARK.len()..];
    let (test, why) = rest.split_once(": ")?;
    Some((test.trim(), why.trim()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_skip_line_reads_back_as_its_test_and_reason() {
        let line = format!("{SKIP_MARK}runtimes::x: dockerd could not start: exit 1; install docker.io");
        assert_eq!(parse_skip_line(&line), Some(("runtimes::x", "dockerd could not start: exit 1; install docker.io")));
        assert_eq!(parse_skip_line("test runtimes::x ... ok"), None);
    }

    #[test]
    fn a_reason_over_several_lines_is_said_on_one() {
        assert_eq!(one_line("dockerd exited\n  log:\tline"), "dockerd exited log: line");
    }
}
