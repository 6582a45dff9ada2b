//! Record: saves what the diagnosis of a live run consumed, so that the same
//! diagnosis can be made again later, on another machine, without root or a
//! kernel: for bug reports ("here is what podstuck saw") and post-mortems
//! ("why was that pod stuck last night?").
//!
//! A record holds every call the detectors saw, with what identify said of
//! it; every review, with its clock, the calls in flight and each question
//! the detectors asked of the node with its answer; and what the live run
//! told after each review, so a replay can say whether it agrees. It holds
//! no other node state: a replay asks nothing of the machine it runs on.
//! It is not a trace of every call on the node (calls of other pods, when
//! `--pod` was given, were never admitted) nor a copy of the live output.
//!
//! # Format 1
//!
//! ```text
//! podstuck-record 1
//! {"podstuck":"0.1.0","node":"node-1","kernel":"6.1.0-18-amd64","started":"2026-05-01T10:00:00.000000000Z","pods":[],"kubelet_root":"/var/lib/kubelet","errors_only":false,"syscalls":[],"hung_after":"5s","node_name":"node-1","host_mntns":4026531841}
//! <gzip: one JSON object per line>
//! ```
//!
//! Two plain lines, so `head -2` tells what a record is, then a gzip stream
//! of entries, one per line (`tail -n +3 FILE | zcat` shows them):
//! `{"call":{"event":…,"identity":…}}`,
//! `{"review":{"now":…,"in_flight":[…],"asked":[…],"told":[…]}}`, and last
//! `{"end":{"ended":…,"entries":N,"totals":…,"untold":[…]}}`.
//!
//! - Times inside are nanoseconds since the Unix epoch.
//! - Paths are strings when UTF-8, else `{"hex":"…"}`: every byte comes back.
//!   An identity without `abs_path` (nor `abs_path_error`) has the path
//!   argument as its absolute path, as most calls do.
//! - A question without its `answer` got the same answer as the last time
//!   it was asked, in the same group of 120 reviews (counted from the start)
//!   or the group before: mount tables are asked about every half second
//!   and seldom change.
//! - The stream is flushed after every review, so a record cut short (disk
//!   full, podstuck killed) replays up to its last whole line; a record
//!   written to its end has the closing entry, and a gzip checksum over all.
//! - Readers of format 1 ignore fields they do not know; a change that an
//!   older reader would misread takes format 2.
//!
//! # Use
//!
//! A live run: [`Recorder::create`] at start; [`Recorder::add_call`] for each
//! call the diagnosis sees; each review through a [`RecordingNode`] and then
//! [`Recorder::add_review`]; [`Recorder::finish`] at exit. Later, anywhere:
//! [`replay`] (what `podstuck replay` prints) or [`replay_record`].

mod node;
mod question;
pub(crate) mod read;
pub(crate) mod replay;
mod wire;

#[cfg(test)]
pub(crate) mod tests;

use std::collections::{BTreeMap, HashMap};
use std::ffi::CString;
use std::fs::File;
use std::io::{self, ErrorKind, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::anyhow;
use flate2::write::GzEncoder;
use flate2::Compression;
use podstuck_common::Syscall;

use crate::diagnose::pod_shutdown::PodShutdown;
use crate::diagnose::{CallInFlight, CountedCalls, DiagnoseOptions, Report};
use crate::event::CallEvent;
use crate::identify::pod::PodUid;
use crate::identify::Identity;
use crate::identify::LifecycleIdentity;
use crate::lifecycle::LifecycleEvent;
use crate::run::RunFacts;
use crate::run::RunTotals;
use wire::{
    Bytes, WireCall, WireCounted, WireEnd, WireEntry, WireFlight, WireHeader, WireLifecycle, WireQuestion, WireReview,
    WireTotals,
};

pub use node::{RecordingNode, ReplayNode, NOT_IN_THE_RECORD};
pub use question::Question;
pub use read::{Entry, RecordEnd, RecordError, RecordReader, RecordedCall, RecordedReview};
pub use replay::{replay, replay_findings, replay_record, ReplaySummary};

/// The first word of every record.
pub const MAGIC: &str = "podstuck-record";
/// The format this podstuck writes and reads.
pub const FORMAT: u32 = 1;

/// What a record is: who wrote it, where, when, and the settings that
/// shaped what it holds and how it is diagnosed.
#[derive(Clone, Debug)]
pub struct RecordHeader {
    /// The podstuck that wrote it.
    pub podstuck_version: String,
    /// The node's name (uname).
    pub node: String,
    /// The kernel release (uname -r).
    pub kernel: String,
    pub started: SystemTime,
    /// `--pod`: the pods followed; empty = the whole node.
    pub pods: Vec<PodUid>,
    /// `--kubelet-root`, which identify used to tie paths to pods.
    pub kubelet_root: PathBuf,
    /// `--errors-only`: successful calls are not in the record.
    pub errors_only: bool,
    /// `--syscall`: the calls traced; empty = all four.
    pub syscalls: Vec<Syscall>,
    /// The settings the detectors ran with; a replay uses them again.
    pub diagnose: DiagnoseOptions,
}

impl RecordHeader {
    /// A header for a run of this podstuck starting now on this node with
    /// these detector settings, following the whole node with the default
    /// kubelet root; the caller sets the filters it used.
    pub fn new(kernel: impl Into<String>, diagnose: &DiagnoseOptions) -> RecordHeader {
        RecordHeader {
            podstuck_version: crate::run::VERSION.to_string(),
            node: diagnose.node_name.clone(),
            kernel: kernel.into(),
            started: SystemTime::now(),
            pods: Vec::new(),
            kubelet_root: PathBuf::from(crate::identify::DEFAULT_KUBELET_ROOT),
            errors_only: false,
            syscalls: Vec::new(),
            diagnose: diagnose.clone(),
        }
    }

    /// The header of a record of `run`, diagnosed with `diagnose`.
    pub fn of_run(run: &RunFacts, diagnose: &DiagnoseOptions) -> RecordHeader {
        RecordHeader {
            podstuck_version: run.version.to_string(),
            node: run.node.clone(),
            kernel: run.kernel.clone(),
            started: run.started,
            pods: run.pods.clone(),
            kubelet_root: run.kubelet_root.clone(),
            errors_only: run.errors_only,
            syscalls: run.syscalls.clone(),
            diagnose: diagnose.clone(),
        }
    }

    fn wire(&self) -> WireHeader<'_> {
        WireHeader {
            podstuck: self.podstuck_version.as_str().into(),
            node: self.node.as_str().into(),
            kernel: self.kernel.as_str().into(),
            started: crate::words::rfc3339(self.started),
            pods: self.pods.as_slice().into(),
            kubelet_root: Bytes::of(self.kubelet_root.as_os_str().as_bytes()),
            errors_only: self.errors_only,
            syscalls: self.syscalls.iter().map(|s| (*s).into()).collect(),
            hung_after: humantime::format_duration(self.diagnose.hung_after).to_string(),
            node_name: self.diagnose.node_name.as_str().into(),
            host_mntns: self.diagnose.host_mntns,
            in_container: self.diagnose.in_container,
        }
    }

    fn from_wire(w: WireHeader<'_>) -> Result<RecordHeader, String> {
        let started = humantime::parse_rfc3339(&w.started).map_err(|e| format!("started {:?}: {e}", w.started))?;
        let hung_after: Duration =
            humantime::parse_duration(&w.hung_after).map_err(|e| format!("hung_after {:?}: {e}", w.hung_after))?;
        Ok(RecordHeader {
            podstuck_version: w.podstuck.into_owned(),
            node: w.node.into_owned(),
            kernel: w.kernel.into_owned(),
            started,
            pods: w.pods.clone().into_owned(),
            kubelet_root: PathBuf::from(<std::ffi::OsString as std::os::unix::ffi::OsStringExt>::from_vec(
                w.kubelet_root.into_vec(),
            )),
            errors_only: w.errors_only,
            syscalls: w.syscalls.into_iter().map(Syscall::from).collect(),
            diagnose: DiagnoseOptions {
                hung_after,
                node_name: w.node_name.into_owned(),
                host_mntns: w.host_mntns,
                in_container: w.in_container,
                pods: w.pods.into_owned(),
            },
        })
    }
}

/// Reviews are counted in groups of this many (a minute of a live run);
/// an answer left out refers to the last answer to the same question in
/// this group or the one before, so what is kept stays bounded on a node
/// where detectors ask about ever new paths.
const REVIEWS_PER_GROUP: u64 = 120;

/// The last answer to each question, in this group of reviews and the one
/// before: what an answer left out refers to. Writer and reader keep the
/// same, counting reviews from the start of the record.
#[derive(Default)]
struct LastAnswers {
    before: HashMap<String, Question>,
    this: HashMap<String, Question>,
    reviews: u64,
}

impl LastAnswers {
    fn get(&self, question: &str) -> Option<&Question> {
        self.this.get(question).or_else(|| self.before.get(question))
    }

    fn note(&mut self, question: String, asked: Question) {
        if !matches!(asked, Question::Avoid { .. }) {
            self.this.insert(question, asked);
        }
    }

    fn review_done(&mut self) {
        self.reviews += 1;
        if self.reviews.is_multiple_of(REVIEWS_PER_GROUP) {
            self.before = std::mem::take(&mut self.this);
        }
    }
}

/// Recording stopped because the record could not be written (the disk is
/// full, most often). Said once; the record stays readable up to there.
#[derive(Debug)]
pub struct RecordStopped {
    /// The record, as the user named it.
    pub name: String,
    pub error: io::Error,
    /// Entries (calls and reviews) the record holds for sure: those written
    /// before its last successful flush.
    pub entries_held: u64,
    /// The time of the last of them.
    pub held_until: SystemTime,
}

impl std::fmt::Display for RecordStopped {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let cause = match self.error.kind() {
            ErrorKind::StorageFull => "the disk is full".to_string(),
            ErrorKind::QuotaExceeded => "the disk quota is used up".to_string(),
            _ => self.error.to_string(),
        };
        write!(
            f,
            "recording to {name} stopped: {cause}; {name} holds its first {n} entries, up to {until}, and `podstuck replay {name}` reads them",
            name = self.name,
            n = self.entries_held,
            until = crate::words::rfc3339(self.held_until),
        )
    }
}

impl std::error::Error for RecordStopped {}

/// What a finished record holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Saved {
    /// Calls and reviews written.
    pub entries: u64,
    /// Whether it was written to its end; false after a [`RecordStopped`].
    pub complete: bool,
}

/// Refuses every write after the first that failed, so nothing (a flush at
/// drop, the gzip trailer) lands after the point the user was told of.
struct Guarded<W> {
    inner: W,
    failed: bool,
}

impl<W: Write> Write for Guarded<W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        if self.failed {
            return Err(io::Error::other("the record stopped at an earlier write error"));
        }
        self.inner.write(buf).inspect_err(|e| self.failed = e.kind() != ErrorKind::Interrupted)
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.failed {
            return Err(io::Error::other("the record stopped at an earlier write error"));
        }
        self.inner.flush().inspect_err(|e| self.failed = e.kind() != ErrorKind::Interrupted)
    }
}

/// Writes a record as the live run goes: the header at once, then each call
/// the diagnosis saw, each review, and at exit the closing entry.
pub struct Recorder<W: Write = File> {
    /// None once finished or stopped.
    out: Option<GzEncoder<Guarded<W>>>,
    name: String,
    entries: u64,
    held: u64,
    held_until: SystemTime,
    latest: SystemTime,
    answers: LastAnswers,
    /// One entry's JSON, reused.
    line: Vec<u8>,
    /// The deleted pods' shutdowns, as the API said them, for the next
    /// review's entry.
    shutdowns: BTreeMap<PodUid, PodShutdown>,
}

impl Recorder<File> {
    /// Creates the record file and writes its header. Never overwrites: a
    /// record is evidence, and the name may be last night's.
    ///
    /// podstuck runs as root and the record holds node state (mount
    /// holders, directory listings, task states): the file is made new,
    /// mode 0600, relative to its directory opened once
    /// (`O_CREAT|O_EXCL|O_NOFOLLOW`): an existing file or a link at the
    /// name is refused, never followed, opened or truncated.
    pub fn create(path: &Path, header: &RecordHeader) -> anyhow::Result<Recorder<File>> {
        if path.is_dir() {
            return Err(anyhow!(
                "{} is a directory: give a file name in it, e.g. {}",
                path.display(),
                path.join("incident.podstuck").display()
            ));
        }
        let (dir, name) = record_place(path).map_err(|e| create_error(path, e))?;
        let file = crate::files::create_new_at(dir.as_ref().map(AsFd::as_fd), &name, RECORD_MODE)
            .map_err(|e| create_error(path, e))?;
        let ours = crate::files::stat(file.as_fd()).ok();
        Recorder::new(file, path.display().to_string(), header).map_err(|e| {
            // Ours and unusable: left behind, it would only make the next
            // try say "exists". Removed only if the name is still ours.
            if let (Some(dir), Some(ours)) = (&dir, ours) {
                let there = crate::files::stat_at(dir.as_fd(), &name).ok().flatten();
                if there.is_some_and(|t| (t.st_dev, t.st_ino) == (ours.st_dev, ours.st_ino)) {
                    let _ = crate::files::unlink_at(dir.as_fd(), &name);
                }
            }
            create_error(path, e)
        })
    }
}

/// A record's mode: root's alone.
const RECORD_MODE: u32 = 0o600;

/// The directory a record goes in, opened (links on the way followed, as
/// the user named it), and the record's name in it; no directory when the
/// path has no last name to make (then it is opened as given, and refused
/// as existing).
fn record_place(path: &Path) -> io::Result<(Option<OwnedFd>, CString)> {
    use crate::files::{c_path, open_dir};
    match (path.parent(), path.file_name()) {
        (Some(parent), Some(name)) => {
            let parent = if parent.as_os_str().is_empty() { Path::new(".") } else { parent };
            let dir = open_dir(None, &c_path(parent)?, true)?;
            Ok((Some(dir), c_path(Path::new(name))?))
        }
        _ => Ok((None, c_path(path)?)),
    }
}

/// Why a record cannot be made there, and what to do.
fn create_error(path: &Path, e: io::Error) -> anyhow::Error {
    let dir = match path.parent() {
        Some(p) if !p.as_os_str().is_empty() => p.display().to_string(),
        _ => ".".to_string(),
    };
    let path = path.display();
    // A path that cannot be a record is asked wrongly: exit 2 (docs/exit-codes.md).
    let refused = |text: String| anyhow::Error::from(crate::exit::BadInput(text));
    match e.kind() {
        ErrorKind::AlreadyExists => refused(format!("{path} exists: choose another name or remove it")),
        ErrorKind::NotFound => refused(format!("cannot create {path}: directory {dir} does not exist: create it or choose another place")),
        ErrorKind::PermissionDenied => refused(format!("cannot create {path}: {dir} is not writable for podstuck ({e}): choose a directory you can write, e.g. /var/tmp")),
        ErrorKind::ReadOnlyFilesystem => refused(format!("cannot create {path}: {dir} is on a read-only filesystem: choose a writable directory, e.g. /var/tmp")),
        ErrorKind::StorageFull | ErrorKind::QuotaExceeded => anyhow!("cannot write {path}: {dir} is full: free some space or choose another place"),
        _ => anyhow!("cannot create {path}: {e}"),
    }
}

impl<W: Write> Recorder<W> {
    /// A record written to `writer`, named `name` in messages. Writes and
    /// flushes the header, so a place that cannot be written fails now.
    pub fn new(writer: W, name: impl Into<String>, header: &RecordHeader) -> io::Result<Recorder<W>> {
        let mut out = Guarded { inner: writer, failed: false };
        let mut head = format!("{MAGIC} {FORMAT}\n").into_bytes();
        serde_json::to_writer(&mut head, &header.wire()).map_err(io::Error::other)?;
        head.push(b'\n');
        out.write_all(&head)?;
        // Fast: a removal storm is recorded call by call on the thread that
        // drains the ring buffer; level 1 still shrinks the JSON tenfold.
        let mut out = GzEncoder::new(out, Compression::fast());
        out.flush()?;
        Ok(Recorder {
            out: Some(out),
            name: name.into(),
            entries: 0,
            held: 0,
            held_until: header.started,
            latest: header.started,
            answers: LastAnswers::default(),
            line: Vec::with_capacity(1024),
            shutdowns: BTreeMap::new(),
        })
    }

    /// The deleted pods' shutdowns, as the diagnosis is told them before
    /// the next review: its entry keeps them, so a replay judges as the
    /// run did.
    pub fn shutdowns(&mut self, shutdowns: &BTreeMap<PodUid, PodShutdown>) {
        self.shutdowns.clone_from(shutdowns);
    }

    /// The record as named in messages.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Calls and reviews written so far.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// Whether a write failed and recording stopped.
    pub fn stopped(&self) -> bool {
        self.out.is_none()
    }

    /// A call the diagnosis saw (admitted by the pod filter), with its identity.
    pub fn add_call(&mut self, event: &CallEvent, identity: &Identity) -> Result<(), RecordStopped> {
        self.write(&WireEntry::Call(Box::new(WireCall::of(event, identity))), event.time, false)
    }

    /// A lifecycle event the diagnosis saw.
    pub fn add_lifecycle(&mut self, event: &LifecycleEvent, identity: &LifecycleIdentity) -> Result<(), RecordStopped> {
        self.write(&WireEntry::Lifecycle(Box::new(WireLifecycle::of(event, identity))), event.time, false)
    }

    /// A review: its clock, the calls in flight it was given, what it asked
    /// of the node (from a [`RecordingNode`]) and the findings it returned.
    /// Flushes, so a record cut short later holds everything up to here.
    pub fn add_review(
        &mut self,
        now: SystemTime,
        in_flight: &[CallInFlight],
        counted: &[CountedCalls],
        asked: Vec<Question>,
        told: &[Report],
        closing: bool,
    ) -> Result<(), RecordStopped> {
        if self.out.is_none() {
            return Ok(());
        }
        let mut wire_asked = Vec::with_capacity(asked.len());
        for a in &asked {
            let mut w = WireQuestion::of(a);
            let question = w.question_key();
            if self.answers.get(&question) == Some(a) {
                w.without_answer();
            }
            self.answers.note(question, a.clone());
            wire_asked.push(w);
        }
        self.answers.review_done();
        let review = WireReview {
            now: wire::nanos(now),
            in_flight: in_flight.iter().map(WireFlight::of).collect(),
            asked: wire_asked,
            told: told_json(told),
            counted: counted.iter().map(WireCounted::of).collect(),
            closing,
            grace_ends: self.shutdowns.iter().map(|(pod, s)| (pod.clone(), wire::nanos(s.grace_ends))).collect(),
            shutdowns: self.shutdowns.iter().map(|(pod, s)| (pod.clone(), wire::WireShutdown::of(s))).collect(),
        };
        self.write(&WireEntry::Review(review), now, true)
    }

    /// The closing entry: when the run ended, the findings said at exit
    /// (`Diagnoser::untold`), the run's totals if known. Finishes the file.
    pub fn finish(
        mut self,
        ended: SystemTime,
        untold: &[Report],
        totals: Option<&RunTotals>,
    ) -> Result<Saved, RecordStopped> {
        if self.out.is_none() {
            return Ok(Saved { entries: self.held, complete: false });
        }
        let end = WireEnd {
            ended: wire::nanos(ended),
            entries: self.entries,
            totals: totals.map(WireTotals::of),
            untold: told_json(untold),
        };
        self.write(&WireEntry::End(end), ended, false)?;
        let Some(out) = self.out.take() else { return Ok(Saved { entries: self.held, complete: false }) };
        let entries = self.entries - 1;
        match out.finish().and_then(|mut w| w.flush()) {
            Ok(()) => Ok(Saved { entries, complete: true }),
            Err(error) => Err(self.stopped_by(error)),
        }
    }

    fn write(&mut self, entry: &WireEntry<'_>, time: SystemTime, flush: bool) -> Result<(), RecordStopped> {
        let Some(out) = self.out.as_mut() else { return Ok(()) };
        self.line.clear();
        let written = serde_json::to_writer(&mut self.line, entry)
            .map_err(io::Error::other)
            .and_then(|()| {
                self.line.push(b'\n');
                out.write_all(&self.line)
            })
            .and_then(|()| if flush { out.flush() } else { Ok(()) });
        match written {
            Ok(()) => {
                self.entries += 1;
                self.latest = self.latest.max(time);
                if flush {
                    self.held = self.entries;
                    self.held_until = self.latest;
                }
                Ok(())
            }
            Err(error) => Err(self.stopped_by(error)),
        }
    }

    fn stopped_by(&mut self, error: io::Error) -> RecordStopped {
        self.out = None;
        RecordStopped { name: self.name.clone(), error, entries_held: self.held, held_until: self.held_until }
    }
}

/// Findings as `--json` prints them, kept as JSON values.
fn told_json(reports: &[Report]) -> Vec<serde_json::Value> {
    reports.iter().map(crate::print::json_lines::finding_value).collect()
}

#[cfg(test)]
mod create_tests {
    use super::*;
    use crate::test_support::TempDir;
    use std::os::unix::fs::PermissionsExt;

    fn header() -> RecordHeader {
        RecordHeader::new(
            "6.1.0",
            &DiagnoseOptions {
                hung_after: Duration::from_secs(5),
                node_name: "node-1".into(),
                host_mntns: 1,
                in_container: false,
                pods: Vec::new(),
            },
        )
    }

    /// A link planted at the record's name, dangling or not, is refused and
    /// never written through; a record is its owner's alone (0600).
    #[test]
    fn a_record_is_made_new_0600_and_never_through_a_link() {
        let dir = TempDir::new("record-create");
        let victim = dir.0.join("victim");
        std::fs::write(&victim, b"precious\n").unwrap();
        for (name, target) in [("to-victim.podstuck", victim.clone()), ("dangling.podstuck", dir.0.join("nothing-yet"))]
        {
            let path = dir.0.join(name);
            std::os::unix::fs::symlink(&target, &path).unwrap();
            let said = Recorder::create(&path, &header()).err().unwrap().to_string();
            assert_eq!(said, format!("{} exists: choose another name or remove it", path.display()));
            assert_eq!(std::fs::read_link(&path).unwrap(), target, "the link is left as it was");
        }
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious\n");
        assert!(!dir.0.join("nothing-yet").exists(), "nothing made through the dangling link");

        let path = dir.0.join("incident.podstuck");
        Recorder::create(&path, &header()).unwrap().finish(SystemTime::now(), &[], None).unwrap();
        assert_eq!(std::fs::metadata(&path).unwrap().permissions().mode() & 0o7777, 0o600);
    }
}
