//! Reads a record back, entry by entry, from any bytes: a record from
//! another machine may be cut short, damaged in transit, written by a newer
//! podstuck or not a record at all, and each is said in words (never a
//! panic, never a silent wrong answer).

use std::io::{self, BufRead, BufReader, ErrorKind, Read};
use std::time::SystemTime;

use flate2::bufread::MultiGzDecoder;

use super::wire::{self, WireCounted, WireEntry, WireHeader};
use super::{Asked, LastAnswers, RecordHeader, FORMAT, MAGIC};
use crate::collect::RunTotals;
use crate::diagnose::{CallInFlight, CountedCalls};
use crate::event::CallEvent;
use crate::identify::Identity;

/// The header line is a few hundred bytes; anything this long is not one.
const MAX_HEADER_BYTES: u64 = 1 << 20;
/// An entry is at most a review with a node's mount tables (a few MB on a
/// node with thousands of mounts); a line longer than this is damage, and
/// reading it whole would only exhaust memory.
const MAX_ENTRY_BYTES: u64 = 512 << 20;

/// Why a record cannot be read, or read further.
#[derive(Debug)]
pub enum RecordError {
    NotARecord { name: String, why: String },
    Newer { name: String, format: u64, podstuck: Option<String> },
    Header { name: String, why: String },
    /// Entry `entry` (1 is the first after the header) is damaged.
    Corrupt { name: String, entry: u64, why: String },
    /// Every entry read, but the stream's checksum says some were altered.
    Damaged { name: String, why: String },
    /// podstuck's own diagnosis failed on an entry: a bug, told with the
    /// entry so the record can go in the bug report.
    Diagnosis { name: String, entry: u64, why: String },
    Io { name: String, error: io::Error },
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
                    env!("CARGO_PKG_VERSION"),
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

/// One entry of a record.
#[derive(Debug)]
pub enum Entry {
    Call(Box<RecordedCall>),
    Review(RecordedReview),
    /// The last entry of a record written to its end.
    End(RecordEnd),
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
    pub asked: Vec<Asked>,
    /// The findings the live run told after this review, as `--json` prints them.
    pub told: Vec<serde_json::Value>,
    /// What the kernel counted since the review before.
    pub counted: Vec<CountedCalls>,
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
    TooLong,
}

/// Reads a record: the header when opened, then one entry per call.
pub struct RecordReader<R: BufRead> {
    name: String,
    lines: BufReader<MultiGzDecoder<R>>,
    header: RecordHeader,
    entries: u64,
    state: State,
    answers: LastAnswers,
    line: Vec<u8>,
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
            return Err(header_error(if head.is_empty() { "the record ends before it".into() } else { "it is cut short or too long".into() }));
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
            line: Vec::new(),
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

    fn corrupt(&mut self, entry: u64, why: impl std::fmt::Display) -> RecordError {
        self.state = State::Broken;
        RecordError::Corrupt { name: self.name.clone(), entry, why: why.to_string() }
    }

    fn read_line(&mut self) -> io::Result<Line> {
        self.line.clear();
        (&mut self.lines).take(MAX_ENTRY_BYTES + 1).read_until(b'\n', &mut self.line)?;
        if self.line.last() == Some(&b'\n') {
            self.line.pop();
            return Ok(Line::Whole);
        }
        if self.line.len() as u64 > MAX_ENTRY_BYTES {
            return Ok(Line::TooLong);
        }
        // A line without its newline is one the writer never finished.
        Ok(Line::Ends)
    }

    /// The next entry; None at the end of the record, or where it was cut
    /// short ([`RecordReader::ends_early`] tells which).
    pub fn next_entry(&mut self) -> Result<Option<Entry>, RecordError> {
        if self.state != State::Reading {
            return Ok(None);
        }
        let n = self.entries + 1;
        match self.read_line() {
            Ok(Line::Whole) => {}
            Ok(Line::Ends) => {
                self.state = State::EndsEarly;
                return Ok(None);
            }
            Ok(Line::TooLong) => return Err(self.corrupt(n, format!("longer than {} MiB", MAX_ENTRY_BYTES >> 20))),
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
                for w in review.asked {
                    let question = w.question_key();
                    let a = match w.into_asked() {
                        Ok(Some(a)) => a,
                        Ok(None) => match self.answers.get(&question) {
                            Some(earlier) => earlier.clone(),
                            None => return Err(self.corrupt(n, format!("the answer to {question} refers to an earlier one the record does not hold"))),
                        },
                        Err(why) => return Err(self.corrupt(n, why)),
                    };
                    self.answers.note(question, a.clone());
                    asked.push(a);
                }
                self.answers.review_done();
                Entry::Review(RecordedReview {
                    now: wire::time(review.now),
                    in_flight: review.in_flight.into_iter().map(|f| f.into_flight()).collect(),
                    asked,
                    told: review.told,
                    counted: review.counted.into_iter().map(WireCounted::into_counted).collect(),
                })
            }
            WireEntry::End(end) => {
                if end.entries != n - 1 {
                    return Err(self.corrupt(n, format!("the record's end counts {} entries before it, but {} were read", end.entries, n - 1)));
                }
                self.check_nothing_follows()?;
                Entry::End(RecordEnd {
                    ended: wire::time(end.ended),
                    entries: end.entries,
                    totals: end.totals.map(|t| t.into_totals()),
                    untold: end.untold,
                })
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
