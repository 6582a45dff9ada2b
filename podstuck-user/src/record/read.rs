//! Reads a record back, entry by entry, from any bytes: a record from
//! another machine may be cut short, damaged in transit, written by a newer
//! podstuck or not a record at all, and each is said in words (never a
//! panic, never a silent wrong answer).

use std::collections::BTreeMap;
use std::io::{self, BufRead, BufReader, ErrorKind, Read};
use std::time::SystemTime;

use flate2::bufread::MultiGzDecoder;

use super::wire::{self, WireCounted, WireEntry, WireHeader};
use super::{LastAnswers, Question, RecordHeader, FORMAT, MAGIC, REVIEWS_PER_GROUP};
use crate::diagnose::pod_shutdown::PodShutdown;
use crate::diagnose::{CallInFlight, CountedCalls};
use crate::event::CallEvent;
use crate::identify::pod::PodUid;
use crate::identify::Identity;
use crate::identify::LifecycleIdentity;
use crate::inspect::{
    BlockHolder, DeviceOpener, FreezerLevel, LoopDevice, Mount, MountCopy, MountElsewhere, MountHolder, Probe,
    ProcessState, TaskState,
};
use crate::lifecycle::LifecycleEvent;
use crate::run::RunTotals;

/// The header line is a few hundred bytes; anything this long is not one.
const MAX_HEADER_BYTES: u64 = 1 << 20;

/// A call entry holds a path argument and a base directory of at most
/// 4,096 bytes each (what the kernel programs hand over), an absolute path
/// of at most their sum, an executable's path and a few 16-byte names: as
/// JSON, at most 6 bytes a byte (`\u00XX`), under 128 KiB. Twice that
/// leaves room for fields a newer podstuck adds; a longer line is not a
/// call any podstuck wrote, and is skipped unread.
pub(super) const MAX_CALL_BYTES: usize = 256 << 10;

/// Any other entry: a review holds the node's answers, mount tables of a
/// few MB on a node with thousands of mounts (answers that did not change
/// are written once per 120 reviews, not in every review). A longer line is
/// skipped unread, and said.
pub(super) const MAX_ENTRY_BYTES: usize = 16 << 20;

/// Answers kept for later reviews to refer to (what a review leaves out is
/// "the same as last time"), in bytes of memory: a node's mount tables
/// and the like, a few tens of MB. More is not a record of a node, and
/// reading on would only exhaust memory.
const MAX_ANSWERS_KEPT: usize = 256 << 20;

/// How an entry line begins when it is a call.
const CALL_PREFIX: &[u8] = b"{\"call\"";

/// Why a record cannot be read, or read further.
#[derive(Debug)]
pub enum RecordError {
    NotARecord {
        name: String,
        why: String,
    },
    Newer {
        name: String,
        format: u64,
        podstuck: Option<String>,
    },
    Header {
        name: String,
        why: String,
    },
    /// Entry `entry` (1 is the first after the header) is damaged.
    Corrupt {
        name: String,
        entry: u64,
        why: String,
    },
    /// Every entry read, but the stream's checksum says some were altered.
    Damaged {
        name: String,
        why: String,
    },
    /// podstuck's own diagnosis failed on an entry: a bug, told with the
    /// entry so the record can go in the bug report.
    Diagnosis {
        name: String,
        entry: u64,
        why: String,
    },
    Io {
        name: String,
        error: io::Error,
    },
}

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            RecordError::NotARecord { name, why } => write!(f, "{name} is not a podstuck record: {why}"),
            RecordError::Newer { name, format, podstuck } => {
                let by = podstuck.as_ref().map(|v| format!("podstuck {v}, ")).unwrap_or_default();
                write!(
                    f,
                    "{name} was written by a newer podstuck ({by}format {format}); this one ({}) reads format {FORMAT}: replay it with {} or newer",
                    crate::run::VERSION,
                    podstuck.as_ref().map(|v| format!("podstuck {v}")).unwrap_or_else(|| "the podstuck that wrote it".into()),
                )
            }
            RecordError::Header { name, why } => write!(f, "{name}: the record's header is corrupt: {why}"),
            RecordError::Corrupt { name, entry, why } => write!(f, "{name}: entry {entry} is corrupt: {why}"),
            RecordError::Damaged { name, why } => write!(f, "{name} is damaged ({why}): the findings replayed from it may be wrong"),
            RecordError::Diagnosis { name, entry, why } => write!(
                f,
                "{name}: podstuck's diagnosis failed at entry {entry} ({why}): this is a bug in podstuck; please report it with this record"
            ),
            RecordError::Io { name, error } => write!(f, "cannot read {name}: {error}"),
        }
    }
}

impl std::error::Error for RecordError {}

impl RecordError {
    /// The file given is no record this podstuck reads (not a record, a
    /// newer format, a header it cannot read): asked wrongly, exit 2; a
    /// record damaged further in, or unreadable, fails the replay (1).
    pub fn is_bad_input(&self) -> bool {
        matches!(self, RecordError::NotARecord { .. } | RecordError::Newer { .. } | RecordError::Header { .. })
    }
}

/// One entry of a record.
#[derive(Debug)]
pub enum Entry {
    Call(Box<RecordedCall>),
    Review(RecordedReview),
    /// A lifecycle event the diagnosis saw.
    Lifecycle(Box<(LifecycleEvent, LifecycleIdentity)>),
    /// The last entry of a record written to its end (boxed: it carries
    /// the run's totals, and every other entry would be as big).
    End(Box<RecordEnd>),
}

/// A call the diagnosis saw, with what identify said of it.
#[derive(Debug)]
pub struct RecordedCall {
    pub event: CallEvent,
    pub identity: Identity,
}

#[derive(Debug)]
pub struct RecordedReview {
    pub now: SystemTime,
    pub in_flight: Vec<CallInFlight>,
    /// Every question asked of the node, in order, with its answer.
    pub asked: Vec<Question>,
    /// The findings the live run told after this review, as `--json` prints them.
    pub told: Vec<serde_json::Value>,
    /// What the kernel counted since the review before.
    pub counted: Vec<CountedCalls>,
    /// The run's last review.
    pub closing: bool,
    /// The deleted pods' shutdowns, as the API said them.
    pub shutdowns: BTreeMap<PodUid, PodShutdown>,
}

#[derive(Debug)]
pub struct RecordEnd {
    pub ended: SystemTime,
    /// Calls and reviews before it.
    pub entries: u64,
    pub totals: Option<RunTotals>,
    /// The findings the live run told at exit.
    pub untold: Vec<serde_json::Value>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Reading,
    Ended,
    EndsEarly,
    Broken,
}

enum Line {
    /// A whole line, its newline dropped, in `line`.
    Whole,
    /// The stream ended, cleanly or in the middle of a line.
    Ends,
    /// Longer than an entry can be: passed over unread, up to its newline
    /// (`true`) or the end of the stream (`false`).
    TooLong(bool),
}

/// Bytes of memory an answer takes, about: what the reader keeps of it.
fn answer_bytes(question: &str, asked: &Question) -> usize {
    use std::mem::size_of;
    fn strings(list: &[String]) -> usize {
        list.iter().map(|s| size_of::<String>() + s.len()).sum()
    }
    fn mount(m: &Mount) -> usize {
        size_of::<Mount>()
            + m.root.len()
            + m.mount_point.len()
            + m.options.len()
            + strings(&m.propagation)
            + m.fstype.len()
            + m.source.len()
            + m.super_options.len()
    }
    fn mounts(list: &[Mount]) -> usize {
        list.iter().map(mount).sum()
    }
    fn task(t: &TaskState) -> usize {
        size_of::<TaskState>() + t.comm.len() + t.wchan.as_ref().map_or(0, String::len) + strings(&t.stack)
    }
    fn probe<T>(answer: &Probe<T>, size: impl Fn(&T) -> usize) -> usize {
        match answer {
            Ok(fact) => size(fact),
            Err(why) => why.why().len(),
        }
    }
    let holder = |h: &MountHolder| size_of::<MountHolder>() + h.comm.len() + h.path.len();
    fn opener(o: &DeviceOpener) -> usize {
        size_of::<DeviceOpener>() + o.comm.len() + o.path.len()
    }
    fn loop_device(l: &LoopDevice) -> usize {
        let holders = l.holders.iter().map(|h| {
            size_of::<BlockHolder>()
                + h.device.len()
                + h.mapper_name.as_ref().map_or(0, String::len)
                + h.openers.iter().map(opener).sum::<usize>()
        });
        size_of::<LoopDevice>()
            + l.name.len()
            + l.backing_file.len()
            + holders.sum::<usize>()
            + l.openers.iter().map(opener).sum::<usize>()
    }
    let copy = |c: &MountCopy| size_of::<MountCopy>() + c.comm.len() + c.mount_point.len() + strings(&c.propagation);
    let variable = match asked {
        Question::HostMounts { answer } => probe(answer, |m| mounts(m)),
        Question::MountNamespace { answer, .. } => probe(answer, |n| n.member_comm.len() + mounts(&n.mounts)),
        Question::ResolvedPath { path, answer, .. } => path.len() + probe(answer, Vec::len),
        Question::MountHolders { mount: m, answer, .. } => mount(m) + answer.iter().map(holder).sum::<usize>(),
        Question::MountCopies { mount: m, answer, .. } => mount(m) + answer.iter().map(copy).sum::<usize>(),
        Question::MountsElsewhere { path, answer, .. } => {
            path.len()
                + answer
                    .iter()
                    .map(|e| {
                        size_of::<MountElsewhere>()
                            + e.namespace.member_comm.len()
                            + mount(&e.mount)
                            + e.holders.iter().map(holder).sum::<usize>()
                    })
                    .sum::<usize>()
        }
        Question::InodeFlags { path, answer, .. } => path.len() + probe(answer, |_| 0),
        Question::FileFacts { path, answer, .. } => path.len() + probe(answer, |_| 0),
        Question::DirSample { path, answer, .. } => {
            path.len() + probe(answer, |d| d.names.iter().map(|n| size_of::<Vec<u8>>() + n.len()).sum())
        }
        Question::RemainingEntries { path, answer, .. } => path.len() + probe(answer, |e| e.method.len()),
        Question::FsUsage { path, answer, .. } => path.len() + probe(answer, |u| u.fstype.len()),
        Question::Cgroup { path, answer } => {
            path.len() + probe(answer, |c| c.tasks.iter().map(task).sum::<usize>() + strings(&c.children))
        }
        Question::V1Freezer { path, answer } => {
            path.len()
                + probe(answer, |l| {
                    l.iter().map(|l| size_of::<FreezerLevel>() + l.dir.len() + l.state.len() + 4 * l.pids.len()).sum()
                })
        }
        Question::Task { answer, .. } => probe(answer, task),
        Question::FuseWaiting { answer, .. } => probe(answer, |_| 0),
        Question::FuseServers { answer } | Question::ProcessesUnreadable { answer } => answer.iter().map(task).sum(),
        Question::PidNamespaceInit { answer, .. } => answer.iter().map(task).sum(),
        Question::Process { answer, .. } => probe(answer, |p| {
            p.as_ref().map_or(0, |p| size_of::<ProcessState>() + p.threads.iter().map(task).sum::<usize>())
        }),
        Question::ProcessesRunning { name, answer } => name.len() + answer.iter().map(task).sum::<usize>(),
        Question::LoopDevices { answer } => answer.iter().map(loop_device).sum(),
        Question::DeviceMapper { answer, .. } => probe(answer, |m| {
            m.as_ref().map_or(0, |m| {
                size_of::<crate::inspect::MapperDevice>()
                    + m.device.len()
                    + m.name.len()
                    + m.uuid.len()
                    + m.slaves.iter().map(|(name, _)| size_of::<(String, (u32, u32))>() + name.len()).sum::<usize>()
                    + m.holders.iter().map(|h| size_of::<BlockHolder>() + h.device.len()).sum::<usize>()
                    + m.targets.iter().map(|t| t.kind.len() + t.table.len() + t.status.len()).sum::<usize>()
            })
        }),
        Question::ContainerProcesses { answer, .. } => probe(answer, |c| {
            c.as_ref().map_or(0, |c| {
                c.dir.len()
                    + 16 * c.runtime_pipes.len()
                    + c.processes
                        .iter()
                        .map(|p| {
                            size_of::<crate::inspect::ContainerProcess>()
                                + p.comm.len()
                                + strings(&p.argv)
                                + 16 * p.stdio_pipes.len()
                        })
                        .sum::<usize>()
            })
        }),
        Question::Avoid { path } => path.len(),
    };
    // The key, the map's own room, the answer.
    question.len() + 64 + size_of::<Question>() + variable
}

/// Reads a record: the header when opened, then one entry per call.
pub struct RecordReader<R: BufRead> {
    name: String,
    lines: BufReader<MultiGzDecoder<R>>,
    header: RecordHeader,
    entries: u64,
    state: State,
    answers: LastAnswers,
    /// About how much memory the answers kept take: this group's, the last.
    kept_this: usize,
    kept_before: usize,
    line: Vec<u8>,
    /// Entries too long to be any podstuck's, passed over unread.
    skipped: u64,
    first_skipped: Option<u64>,
}

fn io_error(name: &str, error: io::Error) -> RecordError {
    RecordError::Io { name: name.to_string(), error }
}

impl<R: BufRead> RecordReader<R> {
    /// Checks the first line and reads the header; `name` is what messages
    /// call the record (its path).
    pub fn open(mut reader: R, name: &str) -> Result<RecordReader<R>, RecordError> {
        let not_a_record = |why: &str| RecordError::NotARecord { name: name.to_string(), why: why.to_string() };
        let mut first = Vec::new();
        (&mut reader).take(64).read_until(b'\n', &mut first).map_err(|e| io_error(name, e))?;
        if first.is_empty() {
            return Err(not_a_record("it is empty"));
        }
        let Some(rest) = first.strip_prefix(format!("{MAGIC} ").as_bytes()) else {
            return Err(not_a_record(&format!("it does not begin with \"{MAGIC}\"")));
        };
        let Some(digits) = rest.strip_suffix(b"\n") else {
            return Err(not_a_record(&format!("its first line is not \"{MAGIC} <format>\"")));
        };
        let format: u64 = std::str::from_utf8(digits)
            .ok()
            .filter(|d| !d.is_empty() && d.bytes().all(|b| b.is_ascii_digit()))
            .and_then(|d| d.parse().ok())
            .ok_or_else(|| not_a_record(&format!("its first line is not \"{MAGIC} <format>\"")))?;
        let mut head = Vec::new();
        (&mut reader).take(MAX_HEADER_BYTES).read_until(b'\n', &mut head).map_err(|e| io_error(name, e))?;
        if format > u64::from(FORMAT) {
            let podstuck = serde_json::from_slice::<serde_json::Value>(head.strip_suffix(b"\n").unwrap_or(&head))
                .ok()
                .and_then(|v| v.get("podstuck")?.as_str().map(str::to_string));
            return Err(RecordError::Newer { name: name.to_string(), format, podstuck });
        }
        if format != u64::from(FORMAT) {
            return Err(not_a_record(&format!("format {format} does not exist")));
        }
        let header_error = |why: String| RecordError::Header { name: name.to_string(), why };
        let Some(head) = head.strip_suffix(b"\n") else {
            return Err(header_error(if head.is_empty() {
                "the record ends before it".into()
            } else {
                "it is cut short or too long".into()
            }));
        };
        let wire: WireHeader = serde_json::from_slice(head).map_err(|e| header_error(e.to_string()))?;
        let header = RecordHeader::from_wire(wire).map_err(header_error)?;
        Ok(RecordReader {
            name: name.to_string(),
            // Small reads: the decoder drops what it decoded in the read that
            // meets damage, so the entries just before it are lost with it.
            lines: BufReader::with_capacity(8 << 10, MultiGzDecoder::new(reader)),
            header,
            entries: 0,
            state: State::Reading,
            answers: LastAnswers::default(),
            kept_this: 0,
            kept_before: 0,
            line: Vec::new(),
            skipped: 0,
            first_skipped: None,
        })
    }

    pub fn header(&self) -> &RecordHeader {
        &self.header
    }

    /// Entries read so far, the closing one included.
    pub fn entries(&self) -> u64 {
        self.entries
    }

    /// Whether the record stopped before its closing entry (cut short):
    /// everything before the cut was read.
    pub fn ends_early(&self) -> bool {
        self.state == State::EndsEarly
    }

    /// Entries passed over unread because they were longer than any entry
    /// a podstuck writes (counted in [`RecordReader::entries`]).
    pub fn skipped(&self) -> u64 {
        self.skipped
    }

    /// Room kept for the line being read: what a long line left behind.
    #[cfg(test)]
    pub(super) fn line_room(&self) -> usize {
        self.line.capacity()
    }

    /// The first entry passed over (1 is the first after the header), and
    /// what it was passed over for.
    pub fn first_skipped(&self) -> Option<String> {
        self.first_skipped.map(|n| {
            format!(
                "entry {n} is longer than any entry a podstuck writes ({} KiB for a call, {} MiB for a review)",
                MAX_CALL_BYTES >> 10,
                MAX_ENTRY_BYTES >> 20
            )
        })
    }

    fn corrupt(&mut self, entry: u64, why: impl std::fmt::Display) -> RecordError {
        self.state = State::Broken;
        RecordError::Corrupt { name: self.name.clone(), entry, why: why.to_string() }
    }

    /// The next line, read in bounded memory: a call's line up to
    /// [`MAX_CALL_BYTES`], any other up to [`MAX_ENTRY_BYTES`]; the rest of
    /// a longer one is passed over without being kept.
    fn read_line(&mut self) -> io::Result<Line> {
        self.line.clear();
        if self.line.capacity() > 4 * MAX_CALL_BYTES {
            // A long review's room is not kept for the calls after it.
            self.line = Vec::new();
        }
        (&mut self.lines).take(MAX_CALL_BYTES as u64 + 1).read_until(b'\n', &mut self.line)?;
        if self.line.last() != Some(&b'\n') && self.line.len() > MAX_CALL_BYTES && !self.line.starts_with(CALL_PREFIX) {
            (&mut self.lines).take((MAX_ENTRY_BYTES - MAX_CALL_BYTES) as u64).read_until(b'\n', &mut self.line)?;
        }
        if self.line.last() == Some(&b'\n') {
            self.line.pop();
            return Ok(Line::Whole);
        }
        let limit = if self.line.starts_with(CALL_PREFIX) { MAX_CALL_BYTES } else { MAX_ENTRY_BYTES };
        if self.line.len() > limit {
            self.line = Vec::new();
            return Ok(Line::TooLong(self.pass_over_line()?));
        }
        // A line without its newline is one the writer never finished.
        Ok(Line::Ends)
    }

    /// Reads on to the end of the line without keeping it; false when the
    /// stream ended first.
    fn pass_over_line(&mut self) -> io::Result<bool> {
        loop {
            let buffer = match self.lines.fill_buf() {
                Ok(buffer) => buffer,
                Err(e) if e.kind() == ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            };
            if buffer.is_empty() {
                return Ok(false);
            }
            match buffer.iter().position(|b| *b == b'\n') {
                Some(at) => {
                    self.lines.consume(at + 1);
                    return Ok(true);
                }
                None => {
                    let all = buffer.len();
                    self.lines.consume(all);
                }
            }
        }
    }

    /// Keeps `asked` for later reviews to refer to, within
    /// [`MAX_ANSWERS_KEPT`].
    fn keep_answer(&mut self, entry: u64, question: String, asked: Question) -> Result<(), RecordError> {
        if matches!(asked, Question::Avoid { .. }) {
            return Ok(());
        }
        let replaced = self.answers.this.get(&question).map_or(0, |old| answer_bytes(&question, old));
        self.kept_this = self.kept_this.saturating_sub(replaced) + answer_bytes(&question, &asked);
        if self.kept_this.saturating_add(self.kept_before) > MAX_ANSWERS_KEPT {
            return Err(self.corrupt(
                entry,
                format!(
                    "the answers it keeps for later reviews add up to more than {} MiB, more than a node gives: it is damaged, or made to exhaust memory",
                    MAX_ANSWERS_KEPT >> 20
                ),
            ));
        }
        self.answers.note(question, asked);
        Ok(())
    }

    /// The next entry; None at the end of the record, or where it was cut
    /// short ([`RecordReader::ends_early`] tells which).
    pub fn next_entry(&mut self) -> Result<Option<Entry>, RecordError> {
        if self.state != State::Reading {
            return Ok(None);
        }
        let mut n = self.entries + 1;
        loop {
            match self.read_line() {
                Ok(Line::TooLong(whole)) => {
                    // Passed over, counted and said; the entries after it are read.
                    self.skipped += 1;
                    self.first_skipped.get_or_insert(n);
                    self.entries = n;
                    n += 1;
                    if !whole {
                        self.state = State::EndsEarly;
                        return Ok(None);
                    }
                }
                other => break self.entry_line(n, other),
            }
        }
    }

    /// The entry of line `n`, as read.
    fn entry_line(&mut self, n: u64, read: io::Result<Line>) -> Result<Option<Entry>, RecordError> {
        match read {
            Ok(Line::Whole) => {}
            Ok(Line::Ends) => {
                self.state = State::EndsEarly;
                return Ok(None);
            }
            // Passed over by next_entry before it gets here.
            Ok(Line::TooLong(_)) => return Err(self.corrupt(n, "longer than any entry a podstuck writes")),
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => {
                self.state = State::EndsEarly;
                return Ok(None);
            }
            Err(e) if matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::InvalidData) => {
                return Err(self.corrupt(n, format!("the compressed data is damaged ({e})")));
            }
            Err(e) => {
                self.state = State::Broken;
                return Err(io_error(&self.name, e));
            }
        }
        let entry: WireEntry = match serde_json::from_slice(&self.line) {
            Ok(entry) => entry,
            Err(e) => return Err(self.corrupt(n, e)),
        };
        self.entries = n;
        let entry = match entry {
            WireEntry::Call(call) => match call.into_call() {
                Ok((event, identity)) => Entry::Call(Box::new(RecordedCall { event, identity })),
                Err(why) => return Err(self.corrupt(n, why)),
            },
            WireEntry::Review(review) => {
                let mut asked = Vec::with_capacity(review.asked.len());
                for w in review.asked.into_iter().filter(|w| !w.is_retired()) {
                    let question = w.question_key();
                    let a = match w.into_asked() {
                        Ok(Some(a)) => a,
                        Ok(None) => match self.answers.get(&question) {
                            Some(earlier) => earlier.clone(),
                            None => {
                                return Err(self.corrupt(
                                    n,
                                    format!(
                                        "the answer to {question} refers to an earlier one the record does not hold"
                                    ),
                                ))
                            }
                        },
                        Err(why) => return Err(self.corrupt(n, why)),
                    };
                    self.keep_answer(n, question, a.clone())?;
                    asked.push(a);
                }
                self.answers.review_done();
                if self.answers.reviews.is_multiple_of(REVIEWS_PER_GROUP) {
                    self.kept_before = std::mem::take(&mut self.kept_this);
                }
                Entry::Review(RecordedReview {
                    now: wire::time(review.now),
                    in_flight: review.in_flight.into_iter().map(|f| f.into_flight()).collect(),
                    asked,
                    told: review.told,
                    counted: review.counted.into_iter().map(WireCounted::into_counted).collect(),
                    closing: review.closing,
                    shutdowns: wire::shutdowns_of(review.shutdowns, review.grace_ends),
                })
            }
            WireEntry::Lifecycle(lifecycle) => Entry::Lifecycle(Box::new(lifecycle.into_lifecycle())),
            WireEntry::End(end) => {
                if end.entries != n - 1 {
                    return Err(self.corrupt(
                        n,
                        format!("the record's end counts {} entries before it, but {} were read", end.entries, n - 1),
                    ));
                }
                self.check_nothing_follows()?;
                Entry::End(Box::new(RecordEnd {
                    ended: wire::time(end.ended),
                    entries: end.entries,
                    totals: end.totals.map(|t| t.into_totals()),
                    untold: end.untold,
                }))
            }
        };
        Ok(Some(entry))
    }

    /// After the closing entry the stream must end, which also checks the
    /// gzip checksum. A missing gzip trailer is forgiven: every entry was
    /// whole.
    fn check_nothing_follows(&mut self) -> Result<(), RecordError> {
        let after = self.entries + 1;
        match self.read_line() {
            Ok(Line::Ends) if self.line.is_empty() => {}
            Err(e) if e.kind() == ErrorKind::UnexpectedEof => {}
            Ok(_) => return Err(self.corrupt(after, "there is data after the end of the record")),
            Err(e) if matches!(e.kind(), ErrorKind::InvalidInput | ErrorKind::InvalidData) => {
                self.state = State::Broken;
                return Err(RecordError::Damaged { name: self.name.clone(), why: e.to_string() });
            }
            Err(e) => {
                self.state = State::Broken;
                return Err(io_error(&self.name, e));
            }
        }
        self.state = State::Ended;
        Ok(())
    }
}
