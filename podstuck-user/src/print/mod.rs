//! How a run is shown: one [`Printer`] per way of showing it, each in its
//! own file with its own words. [`json_lines`] (`--json`): a start line,
//! calls, findings, an end line, for machines. [`call_lines`] (`--calls`):
//! one plain line per call, findings as blocks. [`finding_lines`] (standard
//! output is no terminal): a block per finding when it appears, changes
//! or resolves. [`crate::finding_block`] is the one text form of a finding all
//! of these, the summary at exit, `replay` and `explain` print. [`screen`] (a terminal): the live view, then a summary. `watch`
//! picks one with [`printer`] and hands it what happens; a new way of
//! showing a run is a new file here. [`endpoint`] (`--listen`) is one more
//! output beside the chosen one: the pages of the metrics endpoint.
//!
//! All of them write standard output through one [`Out`]: when whoever
//! reads it goes away, output ends there, quietly, and nothing else does
//! (the record and the histogram files are written apart).

pub mod call_lines;
pub mod endpoint;
pub mod finding_lines;
pub mod json_lines;
pub mod screen;

use std::collections::BTreeMap;
use std::io::{self, BufWriter, ErrorKind, IsTerminal, Write};
use std::time::Duration;

use crate::diagnose::Report;
use crate::event::{syscall_name, CallEvent};
use crate::identify::Identity;
use crate::run::RunTotals;
use crate::run::{RunFacts, Tracing};
use crate::view::{LiveTerminal, Moment, Quit, QuitKeys};
use crate::words::terminal_safe_lines;

/// One way of showing a run. `watch` calls [`Printer::start`] once the
/// programs are attached, then [`Printer::call`] and [`Printer::findings`]
/// as calls and reviews come, and [`Printer::finish`] last.
pub trait Printer {
    /// Tracing has begun: say what is traced, where.
    fn start(&mut self, out: &mut Out, run: &RunFacts, tracing: &Tracing) -> io::Result<()>;
    /// What a review found: new findings and changes to earlier ones.
    fn findings(&mut self, out: &mut Out, reports: &[Report]) -> io::Result<()>;
    /// The run is over: its last words.
    fn finish(&mut self, out: &mut Out, ending: &Ending<'_>) -> io::Result<()>;

    /// A call the diagnosis saw (it passed the filters); most outputs say
    /// only what the calls add up to.
    fn call(&mut self, _out: &mut Out, _event: &CallEvent, _identity: &Identity) -> io::Result<()> {
        Ok(())
    }

    /// Something the user should know beside the output: a warning, a
    /// note. On stderr, unless the printer owns the screen.
    fn say(&mut self, message: &str) {
        stderr_line(format_args!("podstuck: {message}"));
    }

    /// How often this printer shows the run whole as it stands (the live
    /// view redraws); `None`: it never does, and [`Printer::show`] is not called.
    fn shows_every(&self) -> Option<Duration> {
        None
    }

    /// The run as it stands.
    fn show(&mut self, _moment: &Moment<'_>) {}
}

/// How a run ended.
pub struct Ending<'a> {
    pub totals: &'a RunTotals,
    /// What stopped it (a signal, a key, the output closing); `None`: the
    /// end of `--duration`.
    pub stopped_by: Option<&'a str>,
    /// The reader asked to stop, or its terminal failed.
    pub quit: Option<&'a Quit>,
    /// The run as it stands at the end, for a printer that shows it whole.
    pub moment: Option<Moment<'a>>,
}

/// How the user asked to see the run.
#[derive(Clone, Copy, Debug)]
pub struct OutputOptions {
    /// `--json`.
    pub json: bool,
    /// `--calls`.
    pub calls: bool,
    /// `--findings`: with `--json` or `--calls`, no call, only findings.
    pub findings_only: bool,
}

/// The printer for what the user asked and where standard output goes:
/// `--json`, `--calls`, the live view on a terminal that can take it,
/// else finding lines. With the live view come the keys that ask to stop.
/// `warnings` were said on stderr already; the live view shows them too.
pub fn printer(output: OutputOptions, run: &RunFacts, warnings: &[String]) -> (Box<dyn Printer>, Option<QuitKeys>) {
    if output.json {
        return (Box::new(json_lines::JsonLines::new(!output.findings_only)), None);
    }
    if output.calls {
        return (Box::new(call_lines::CallLines::new(!output.findings_only)), None);
    }
    if !LiveTerminal::possible() {
        if io::stdout().is_terminal() {
            stderr_line(format_args!("podstuck: no terminal to read keys from (or TERM=dumb): printing findings as lines instead of the live view"));
        }
        return (Box::new(finding_lines::FindingLines), None);
    }
    match LiveTerminal::start() {
        Ok((terminal, keys)) => (Box::new(screen::Screen::new(terminal, run, warnings)), Some(keys)),
        Err(e) => {
            stderr_line(format_args!(
                "podstuck: cannot take the terminal for the live view ({e}): printing findings as lines"
            ));
            (Box::new(finding_lines::FindingLines), None)
        }
    }
}

/// The calls the run is about (with `--pod` the pods', else the node's),
/// counted in the kernel, by syscall name (in name order).
fn calls_by_name(totals: &RunTotals) -> BTreeMap<&'static str, u64> {
    totals.shown_calls().iter().map(|(s, n)| (syscall_name(*s), *n)).collect()
}

/// Whoever read the output is gone: a closed pipe (`podstuck watch | head`),
/// or a terminal hung up (a dropped ssh session, a closed window: EIO).
fn reader_gone(e: &io::Error) -> bool {
    e.kind() == ErrorKind::BrokenPipe || e.raw_os_error() == Some(libc::EIO)
}

/// A writer that takes everything once its reader is gone, and remembers it.
struct Reader {
    inner: Box<dyn Write>,
    gone: bool,
}

impl Reader {
    fn unless_gone<T>(&mut self, result: io::Result<T>, taken: T) -> io::Result<T> {
        match result {
            Err(e) if reader_gone(&e) => {
                self.gone = true;
                Ok(taken)
            }
            other => other,
        }
    }
}

impl Write for Reader {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.gone {
            return Ok(buf.len());
        }
        let written = self.inner.write(buf);
        self.unless_gone(written, buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.gone {
            return Ok(());
        }
        let flushed = self.inner.flush();
        self.unless_gone(flushed, ())
    }
}

/// Standard output as every printer writes it: buffered, and quiet once
/// its reader is gone ([`Out::gone`] then says so); any other error is
/// still an error.
pub struct Out {
    writer: BufWriter<Reader>,
}

impl Out {
    /// Standard output, not locked: the live view's terminal thread draws
    /// on it too while the run lasts.
    pub fn stdout() -> Out {
        Out::to(Box::new(io::stdout()))
    }

    fn to(inner: Box<dyn Write>) -> Out {
        Out { writer: BufWriter::new(Reader { inner, gone: false }) }
    }

    /// A line of text for people (node-chosen words in it made safe).
    pub fn line(&mut self, text: &str) -> io::Result<()> {
        writeln!(self.writer, "{}", terminal_safe_lines(text))
    }

    /// Text for people that ends its own lines.
    pub fn text(&mut self, text: &str) -> io::Result<()> {
        write!(self.writer, "{}", terminal_safe_lines(text))
    }

    /// A line written as it is: JSON, which escapes control characters
    /// itself, or words of podstuck's own.
    pub fn line_as_is(&mut self, line: &str) -> io::Result<()> {
        writeln!(self.writer, "{line}")
    }

    /// Text written as it is that ends its own lines: a report podstuck
    /// rendered itself (its JSON escapes control characters).
    pub fn text_as_is(&mut self, text: &str) -> io::Result<()> {
        write!(self.writer, "{text}")
    }

    pub fn flush(&mut self) -> io::Result<()> {
        self.writer.flush()
    }

    /// Whether the reader has gone away: output has ended.
    pub fn gone(&self) -> bool {
        self.writer.get_ref().gone
    }
}

/// A line on stderr that never panics: after a hang-up there is no
/// terminal to write to, and the cleanup after it must go on.
pub fn stderr_line(line: std::fmt::Arguments<'_>) {
    let _ = writeln!(io::stderr(), "{}", terminal_safe_lines(&line.to_string()));
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::event::{decode, tests::record_bytes, WallClock};
    use crate::identify::actor::Role;
    use crate::identify::pod::{PathArea, PodUid};
    use crate::identify::{Actor, MatchReason};
    use podstuck_common::Syscall;
    use std::cell::RefCell;
    use std::rc::Rc;

    pub(crate) fn event(syscall: Syscall, ret: i64, flags: u64, path: &[u8]) -> CallEvent {
        decode(&record_bytes(syscall, ret, flags, path), &WallClock::now()).unwrap()
    }

    /// What identify would say of a kubelet call on pod 1b2c...
    pub(crate) fn identity(event: &CallEvent) -> Identity {
        Identity {
            abs_path: event.abs_path(),
            pod_uid: Some(PodUid::parse("1b2c3d4e-0000-4000-8000-00000000000a").unwrap()),
            path_area: Some(PathArea::Volume),
            target: crate::identify::target::Target::Volume,
            container_id: None,
            actor: Actor {
                comm: event.comm.clone(),
                exe: Some("/usr/bin/kubelet".into()),
                parent: event.pcomm.clone(),
                role: Role::Kubelet,
                description: "kubelet".into(),
            },
            matched: vec![MatchReason::Path],
            proof: crate::identify::path_proof::PathProof::NodeNamespace,
            claimed_pod: None,
        }
    }

    /// A reader that takes `room` bytes, then fails with `errno`.
    struct Pipe {
        taken: Rc<RefCell<Vec<u8>>>,
        room: usize,
        errno: i32,
    }

    impl Write for Pipe {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            let mut taken = self.taken.borrow_mut();
            if taken.len() + buf.len() > self.room {
                return Err(io::Error::from_raw_os_error(self.errno));
            }
            taken.extend_from_slice(buf);
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn out(room: usize, errno: i32) -> (Out, Rc<RefCell<Vec<u8>>>) {
        let taken = Rc::new(RefCell::new(Vec::new()));
        (Out::to(Box::new(Pipe { taken: taken.clone(), room, errno })), taken)
    }

    #[test]
    fn a_reader_gone_ends_output_quietly() {
        for errno in [libc::EPIPE, libc::EIO] {
            let (mut out, taken) = out(6, errno);
            out.line("first").and_then(|()| out.flush()).unwrap();
            assert!(!out.gone());
            out.line("second").and_then(|()| out.flush()).unwrap();
            assert!(out.gone(), "errno {errno}");
            out.line_as_is("third").and_then(|()| out.flush()).unwrap();
            assert_eq!(taken.borrow().as_slice(), b"first\n");
        }
    }

    #[test]
    fn other_write_errors_are_errors() {
        let (mut out, _) = out(0, libc::ENOSPC);
        let failed = out.line("x").and_then(|()| out.flush()).unwrap_err();
        assert_eq!(failed.raw_os_error(), Some(libc::ENOSPC));
        assert!(!out.gone());
    }

    #[test]
    fn text_for_people_is_made_safe_and_json_is_not_touched() {
        let (mut out, taken) = out(1000, libc::EPIPE);
        out.line("a\u{1b}[2Jb\nc").unwrap();
        out.line_as_is("{\"x\":\"\u{202e}\"}").unwrap();
        out.flush().unwrap();
        assert_eq!(String::from_utf8(taken.borrow().clone()).unwrap(), "a\\u{1b}[2Jb\nc\n{\"x\":\"\u{202e}\"}\n");
    }
}
