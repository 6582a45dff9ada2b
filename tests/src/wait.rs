//! The one way a test waits: for the thing itself (a line printed, a file
//! written, a state reached), looked at again and again until it comes or
//! a generous timeout passes, never a fixed sleep that hopes it has come.
//! A loaded two-core machine makes things slower, not different, so a
//! correct podstuck stays green on it.
//!
//! - [`poll_until`]: the probe's first `Some`, or a panic naming what was
//!   awaited and for how long;
//! - [`wait_until`]: the same for a condition;
//! - [`poll_until_else`]: the same for a probe that says what it saw
//!   instead (a screen, a log, the last value), said on a timeout;
//! - [`within`]: the probe's first `Some`, or `None` at the deadline, for
//!   a caller to whom "not within" is itself an answer.
//!
//! The probe is looked at first at once, then after 10 ms, then ever less
//! often up to every 200 ms: a cheap probe answers quickly, an expensive
//! one (a `docker exec`, a scrape) does not load the machine it waits on.

use std::fmt::Display;
use std::time::{Duration, Instant};

/// The first pause between two looks.
const FIRST_PAUSE: Duration = Duration::from_millis(10);

/// The longest pause between two looks.
const LONGEST_PAUSE: Duration = Duration::from_millis(200);

/// The first `Some` of `probe`, looked at until `timeout` has passed (and
/// once more at the deadline); `None` if it never gave one.
pub fn within<T>(timeout: Duration, mut probe: impl FnMut() -> Option<T>) -> Option<T> {
    let deadline = Instant::now() + timeout;
    let mut pause = FIRST_PAUSE;
    loop {
        if let Some(value) = probe() {
            return Some(value);
        }
        let now = Instant::now();
        if now >= deadline {
            return None;
        }
        std::thread::sleep(pause.min(deadline - now));
        pause = (pause * 3 / 2).min(LONGEST_PAUSE);
    }
}

/// The first `Some` of `probe`; panics with "timed out after Ns waiting for
/// `what`" if none came within `timeout`.
#[track_caller]
pub fn poll_until<T>(what: &str, timeout: Duration, mut probe: impl FnMut() -> Option<T>) -> T {
    poll_until_else(what, timeout, || probe().ok_or(""))
}

/// The first `Ok` of `probe`; on a timeout the panic also says the last
/// `Err`, what was there instead (a screen, a log, the value seen).
#[track_caller]
pub fn poll_until_else<T, E: Display>(what: &str, timeout: Duration, mut probe: impl FnMut() -> Result<T, E>) -> T {
    let mut last = None;
    let got = within(timeout, || match probe() {
        Ok(value) => Some(value),
        Err(seen) => {
            last = Some(seen);
            None
        }
    });
    match got {
        Some(value) => value,
        None => {
            let seen = last.map(|seen| seen.to_string()).unwrap_or_default();
            let seen = if seen.is_empty() { String::new() } else { format!("\n{seen}") };
            panic!("{}{seen}", timed_out(what, timeout))
        }
    }
}

/// Waits until `done` holds; panics like [`poll_until`] if it does not
/// within `timeout`.
#[track_caller]
pub fn wait_until(what: &str, timeout: Duration, mut done: impl FnMut() -> bool) {
    poll_until(what, timeout, || done().then_some(()))
}

/// How a wait that timed out starts its panic, for a caller of [`within`]
/// that says more: "timed out after 10s waiting for `what`".
pub fn timed_out(what: &str, timeout: Duration) -> String {
    format!("timed out after {} waiting for {what}", seconds(timeout))
}

/// A timeout as a person reads it: "2.5s", "60s".
fn seconds(timeout: Duration) -> String {
    let s = timeout.as_secs_f64();
    if s.fract() == 0.0 {
        format!("{s:.0}s")
    } else {
        format!("{s:.1}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_some_is_returned_and_nothing_more_is_asked() {
        let mut looks = 0;
        let got = poll_until("the third look", Duration::from_secs(5), || {
            looks += 1;
            (looks == 3).then_some(looks)
        });
        assert_eq!((got, looks), (3, 3));
    }

    #[test]
    fn a_probe_that_never_answers_is_looked_at_until_the_deadline() {
        let started = Instant::now();
        let mut looks = 0;
        assert_eq!(
            within(Duration::from_millis(300), || -> Option<()> {
                looks += 1;
                None
            }),
            None
        );
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert!(looks >= 3, "{looks} looks");
    }

    #[test]
    fn a_timeout_names_what_was_awaited_and_for_how_long() {
        let panic = std::panic::catch_unwind(|| {
            poll_until_else("the file", Duration::from_millis(500), || Err::<(), _>("last: empty"))
        })
        .unwrap_err();
        let said = panic.downcast_ref::<String>().unwrap();
        assert_eq!(said, "timed out after 0.5s waiting for the file\nlast: empty");
        let panic = std::panic::catch_unwind(|| wait_until("a state", Duration::from_secs(0), || false)).unwrap_err();
        assert_eq!(panic.downcast_ref::<String>().unwrap(), "timed out after 0s waiting for a state");
    }
}
