//! `podstuck report DIR`: reads a run's histogram files back and prints,
//! per series, a percentile table and a log2 histogram in the layout BCC
//! and bpftrace users know (`usecs : count distribution`), or, with
//! `--json`, the same for machines.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::{BufRead, BufReader, ErrorKind, Read};
use std::path::Path;

use anyhow::{anyhow, bail, Context, Result};
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, LogEntry};
use hdrhistogram::serialization::Deserializer;
use hdrhistogram::Histogram;
use serde::Serialize;

use crate::export::hlog::base64_decode;
use crate::export::summary::{SeriesSummary, Summary};
use crate::export::{HLOG, SUMMARY};
use crate::files::open_regular;
use crate::print::Out;
use crate::words::latency_text;

/// summary.json as podstuck writes it: some 600 bytes a series, and at most
/// 1,088 series (see `latency::MAX_SERIES`), under a megabyte; runs of
/// older podstucks had a few thousand. A larger file is not a summary
/// podstuck wrote, and is not read.
const MAX_SUMMARY_BYTES: u64 = 8 << 20;

/// One latency.hlog line: a tag of under 200 bytes and a histogram, deflated
/// then base64. A histogram up to an hour at 3 digits has 33,792 counts of
/// at most 9 bytes each, under 410 KB as base64 even if deflate gained
/// nothing. A longer line is skipped unread, and said.
const MAX_HLOG_LINE_BYTES: usize = 1 << 20;

/// A histogram's encoding once inflated: 40 bytes of header and at most
/// 33,792 counts of at most 9 bytes, 304 KB. The header's own claim of its
/// length is checked against what is there, never allocated on its word.
const MAX_HISTOGRAM_BYTES: usize = 1 << 20;

/// Significant digits of a histogram the report reads: podstuck writes 3;
/// more would let one line ask for tens of MB of counts.
const MAX_SIGNIFICANT_DIGITS: u32 = 3;

/// Series a report shows: a run's book keeps at most 1,088, older runs had
/// a few thousand. Past this the busiest are shown, and how many more there
/// were is said.
pub const MAX_REPORTED_SERIES: usize = 2048;

/// The HdrHistogram V2 encodings (hdrhistogram's private constants).
const V2_COOKIE: u32 = 0x1c84_9313;
const V2_COMPRESSED_COOKIE: u32 = 0x1c84_9314;
/// Cookie, payload length, normalizing offset, digits, lowest, highest, ratio.
const V2_HEADER_BYTES: usize = 40;

/// One row of a log2 histogram: values from `low` to `high` microseconds.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Log2Row {
    pub low: u64,
    pub high: u64,
    pub count: u64,
}

/// Log2 buckets of microseconds, BCC style: 0 -> 1, 2 -> 3, 4 -> 7, ...,
/// from the first to the last non-empty bucket.
pub fn log2_usecs(histogram: &Histogram<u64>) -> Vec<Log2Row> {
    let mut counts = [0u64; 64];
    add_log2_counts(&mut counts, histogram);
    log2_rows(&counts)
}

/// Adds a histogram's calls to log2 buckets of microseconds.
fn add_log2_counts(counts: &mut [u64; 64], histogram: &Histogram<u64>) {
    for value in histogram.iter_recorded() {
        let us = value.value_iterated_to() / 1_000;
        let bucket = if us < 2 { 0 } else { 63 - us.leading_zeros() as usize };
        counts[bucket] = counts[bucket].saturating_add(value.count_at_value());
    }
}

fn log2_rows(counts: &[u64; 64]) -> Vec<Log2Row> {
    let (Some(first), Some(last)) = (counts.iter().position(|&c| c > 0), counts.iter().rposition(|&c| c > 0)) else {
        return Vec::new();
    };
    (first..=last)
        .map(|k| Log2Row { low: if k == 0 { 0 } else { 1 << k }, high: (1u64 << (k + 1)) - 1, count: counts[k] })
        .collect()
}

/// The rows as BCC prints them: 40 stars for the fullest bucket.
pub fn render_log2(rows: &[Log2Row]) -> String {
    let mut out = String::from("     usecs               : count     distribution\n");
    let peak = rows.iter().map(|r| r.count).max().unwrap_or(0).max(1);
    for row in rows {
        let stars = (row.count * 40).div_ceil(peak) as usize;
        let _ =
            writeln!(out, "{:>10} -> {:<10} : {:<9} |{:<40}|", row.low, row.high, row.count, "*".repeat(stars.min(40)));
    }
    out
}

#[derive(Serialize)]
struct SeriesReport<'a> {
    #[serde(flatten)]
    summary: &'a SeriesSummary,
    /// Calls found in latency.hlog (equal to `count` once an interval has
    /// been written after the last call).
    count_in_log: u64,
    log2_usecs: Vec<Log2Row>,
}

#[derive(Serialize)]
struct Report<'a> {
    run: &'a crate::export::RunInfo,
    series: Vec<SeriesReport<'a>>,
    /// What the report left out or could not read, in words.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    notes: Vec<String>,
}

/// Prints the report of the run whose files are in `dir`.
pub fn report(dir: &Path, json: bool) -> Result<()> {
    let text = render(dir, json)?;
    // A reader gone (`podstuck report DIR | head`) ends the output quietly.
    let mut out = Out::stdout();
    out.text_as_is(&text).and_then(|()| out.flush()).context("writing the report")
}

/// Reads summary.json, within [`MAX_SUMMARY_BYTES`].
fn read_summary(dir: &Path) -> Result<Summary> {
    let path = dir.join(SUMMARY);
    let file = open_regular(&path).with_context(|| {
        format!("reading {}: is {} the --histograms directory of a podstuck watch run?", path.display(), dir.display())
    })?;
    let mut text = Vec::new();
    file.take(MAX_SUMMARY_BYTES + 1).read_to_end(&mut text).with_context(|| format!("reading {}", path.display()))?;
    if text.len() as u64 > MAX_SUMMARY_BYTES {
        bail!("{} is larger than {} MiB: not a summary podstuck wrote", path.display(), MAX_SUMMARY_BYTES >> 20);
    }
    let mut summary: Summary =
        serde_json::from_slice(&text).with_context(|| format!("{} is not a podstuck summary", path.display()))?;
    // Files written before the figures were made to agree are shown agreeing too.
    summary.series = summary.series.into_iter().map(SeriesSummary::consistent).collect();
    Ok(summary)
}

fn u32_at(bytes: &[u8], at: usize) -> Option<u32> {
    Some(u32::from_be_bytes(bytes.get(at..at + 4)?.try_into().ok()?))
}

fn u64_at(bytes: &[u8], at: usize) -> Option<u64> {
    Some(u64::from_be_bytes(bytes.get(at..at + 8)?.try_into().ok()?))
}

/// One interval's histogram from its encoding, in bounded memory: inflated
/// up to [`MAX_HISTOGRAM_BYTES`], its header's claims (payload length,
/// digits, range) checked against what is there before hdrhistogram sees
/// it (it allocates what the header claims).
fn decode_histogram(deserializer: &mut Deserializer, encoded: &[u8]) -> Result<Histogram<u64>> {
    let bytes = base64_decode(encoded)?;
    let plain = match u32_at(&bytes, 0) {
        Some(V2_COOKIE) => bytes,
        Some(V2_COMPRESSED_COOKIE) => {
            let length = u32_at(&bytes, 4).ok_or_else(|| anyhow!("the histogram is cut short"))? as usize;
            let deflated = bytes.get(8..).unwrap_or_default();
            let deflated = &deflated[..length.min(deflated.len())];
            let mut plain = Vec::new();
            flate2::read::ZlibDecoder::new(deflated)
                .take(MAX_HISTOGRAM_BYTES as u64 + 1)
                .read_to_end(&mut plain)
                .map_err(|e| anyhow!("the histogram does not inflate ({e})"))?;
            if plain.len() > MAX_HISTOGRAM_BYTES {
                bail!(
                    "the histogram inflates to more than {} MiB, more than podstuck writes",
                    MAX_HISTOGRAM_BYTES >> 20
                );
            }
            plain
        }
        _ => bail!("the payload is not an HdrHistogram V2 encoding"),
    };
    if u32_at(&plain, 0) != Some(V2_COOKIE) || plain.len() < V2_HEADER_BYTES {
        bail!("the histogram is not an HdrHistogram V2 encoding");
    }
    let claimed = u32_at(&plain, 4).unwrap_or(u32::MAX) as usize;
    if claimed > plain.len() - V2_HEADER_BYTES {
        bail!("the histogram claims {claimed} bytes of counts, but holds {}", plain.len() - V2_HEADER_BYTES);
    }
    let digits = u32_at(&plain, 12).unwrap_or(u32::MAX);
    let (low, high) = (u64_at(&plain, 16).unwrap_or(0), u64_at(&plain, 24).unwrap_or(0));
    if digits > MAX_SIGNIFICANT_DIGITS || low == 0 || high / 2 < low {
        bail!("the histogram's range ({low} to {high} at {digits} digits) is not one podstuck writes");
    }
    deserializer.deserialize(&mut &plain[..]).map_err(|e| anyhow!("bad histogram payload: {e}"))
}

/// One series' calls as latency.hlog has them.
struct Logged {
    count: u64,
    log2: [u64; 64],
}

impl Default for Logged {
    fn default() -> Logged {
        Logged { count: 0, log2: [0; 64] }
    }
}

/// What the hlog reading passed over, and the first of each, in words.
#[derive(Default)]
struct Passed {
    long: u64,
    first_long: Option<u64>,
    unreadable: u64,
    first_unreadable: Option<String>,
}

impl Passed {
    /// What was skipped of the log, in words.
    fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if let Some(first) = self.first_long {
            notes.push(format!(
                "{} line(s) of {HLOG} longer than {} MiB skipped unread (the first: line {first}): not lines podstuck writes",
                self.long,
                MAX_HLOG_LINE_BYTES >> 20
            ));
        }
        if let Some(first) = &self.first_unreadable {
            notes.push(format!(
                "{} line(s) of {HLOG} could not be read and were skipped (the first: {first})",
                self.unreadable
            ));
        }
        notes
    }
}

/// Reads latency.hlog line by line, each line within
/// [`MAX_HLOG_LINE_BYTES`], and adds up the intervals of the tags `wanted`
/// (others are not decoded). Lines that cannot be read are skipped and
/// counted in `passed`.
fn read_hlog(path: &Path, wanted: &mut HashMap<String, Logged>, passed: &mut Passed) -> Result<()> {
    let file = open_regular(path).with_context(|| format!("reading {}", path.display()))?;
    let mut reader = BufReader::with_capacity(64 << 10, file);
    let mut deserializer = Deserializer::new();
    let mut line = Vec::new();
    for number in 1u64.. {
        line.clear();
        (&mut reader)
            .take(MAX_HLOG_LINE_BYTES as u64 + 1)
            .read_until(b'\n', &mut line)
            .with_context(|| format!("reading {}", path.display()))?;
        if line.is_empty() {
            break;
        }
        if line.len() > MAX_HLOG_LINE_BYTES {
            passed.long += 1;
            passed.first_long.get_or_insert(number);
            line = Vec::new();
            pass_over_line(&mut reader).with_context(|| format!("reading {}", path.display()))?;
            continue;
        }
        if line.last() != Some(&b'\n') {
            line.push(b'\n');
        }
        let mut unreadable = |why: String| {
            passed.unreadable += 1;
            passed.first_unreadable.get_or_insert_with(|| format!("line {number}: {why}"));
        };
        let interval = match IntervalLogIterator::new(&line).next() {
            None | Some(Ok(LogEntry::StartTime(_) | LogEntry::BaseTime(_))) => continue,
            Some(Ok(LogEntry::Interval(interval))) => interval,
            Some(Err(_)) => {
                unreadable("not an interval log line".into());
                continue;
            }
        };
        let Some(logged) = interval.tag().and_then(|t| wanted.get_mut(t.as_str())) else { continue };
        match decode_histogram(&mut deserializer, interval.encoded_histogram().as_bytes()) {
            Ok(histogram) => {
                logged.count = logged.count.saturating_add(histogram.len());
                add_log2_counts(&mut logged.log2, &histogram);
            }
            Err(e) => unreadable(e.to_string()),
        }
    }
    Ok(())
}

/// Reads on to the end of the line without keeping it.
fn pass_over_line(reader: &mut impl BufRead) -> std::io::Result<()> {
    loop {
        let buffer = match reader.fill_buf() {
            Ok(buffer) => buffer,
            Err(e) if e.kind() == ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        if buffer.is_empty() {
            return Ok(());
        }
        match buffer.iter().position(|b| *b == b'\n') {
            Some(at) => {
                reader.consume(at + 1);
                return Ok(());
            }
            None => {
                let all = buffer.len();
                reader.consume(all);
            }
        }
    }
}

pub fn render(dir: &Path, json: bool) -> Result<String> {
    let summary = read_summary(dir)?;
    let mut notes = Vec::new();
    let shown = busiest_series(&summary, &mut notes);
    let mut logged: HashMap<String, Logged> = shown.iter().map(|s| (s.tag.clone(), Logged::default())).collect();
    let mut passed = Passed::default();
    read_hlog(&dir.join(HLOG), &mut logged, &mut passed)?;
    notes.extend(passed.notes());

    let series: Vec<SeriesReport> = shown
        .into_iter()
        .map(|s| {
            let found = logged.get(&s.tag);
            SeriesReport {
                summary: s,
                count_in_log: found.map_or(0, |l| l.count),
                log2_usecs: found.map(|l| log2_rows(&l.log2)).unwrap_or_default(),
            }
        })
        .collect();
    if json {
        let report = Report { run: &summary.run, series, notes };
        return Ok(serde_json::to_string_pretty(&report)? + "\n");
    }
    Ok(render_text(&summary.run, &series, &notes))
}

/// The busiest series, in the summary's order; a note says what was left out.
fn busiest_series<'a>(summary: &'a Summary, notes: &mut Vec<String>) -> Vec<&'a SeriesSummary> {
    let mut shown: Vec<&SeriesSummary> = summary.series.iter().collect();
    if shown.len() > MAX_REPORTED_SERIES {
        let mut by_calls: Vec<usize> = (0..shown.len()).collect();
        by_calls.sort_by(|a, b| shown[*b].count.cmp(&shown[*a].count).then(a.cmp(b)));
        let mut kept: Vec<usize> = by_calls.into_iter().take(MAX_REPORTED_SERIES).collect();
        kept.sort_unstable();
        notes.push(format!(
            "{} series left out: the summary holds {}, more than a run of this podstuck makes; the {MAX_REPORTED_SERIES} with the most calls are shown",
            shown.len() - MAX_REPORTED_SERIES,
            shown.len()
        ));
        shown = kept.into_iter().map(|i| shown[i]).collect();
    }
    shown
}

/// The report in words: the run, its notes, then each series.
fn render_text(run: &crate::export::RunInfo, series: &[SeriesReport<'_>], notes: &[String]) -> String {
    let scope =
        if run.pods.is_empty() { "the whole node".to_string() } else { format!("pods {}", run.pods.join(", ")) };
    let mut out = format!(
        "podstuck {} on {} (kernel {}), {} for {:.1} s, {}: {} events seen, {} lost{}\n",
        run.podstuck_version,
        run.node,
        run.kernel,
        run.started,
        run.duration_s,
        scope,
        run.events_seen,
        run.events_lost,
        if run.finished { "" } else { " (run did not finish: files of its last interval)" }
    );
    for note in notes {
        let _ = writeln!(out, "note: {note}");
    }
    for s in series {
        let pod = s.summary.pod_uid.as_deref().map(|p| format!("pod {p}")).unwrap_or_else(|| "no pod".into());
        let _ = write!(
            out,
            "\n{} {}, actor {}, {}: {} calls\n  min {}  mean {}  p50 {}  p90 {}  p99 {}  p99.9 {}  max {}\n",
            s.summary.syscall,
            s.summary.outcome,
            s.summary.role,
            pod,
            s.summary.count,
            latency_text(s.summary.min_ns),
            latency_text(s.summary.mean_ns as u64),
            latency_text(s.summary.p50_ns),
            latency_text(s.summary.p90_ns),
            latency_text(s.summary.p99_ns),
            latency_text(s.summary.p99_9_ns),
            latency_text(s.summary.max_ns),
        );
        out.push_str(&render_log2(&s.log2_usecs));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::export::summary::tests::run_info;
    use crate::export::Exporter;
    use crate::identify::actor::Role;
    use crate::latency::tests::{event, identity};
    use crate::latency::{new_histogram, LatencyBook, MAX_LATENCY_NS};
    use crate::test_support::TempDir;
    use podstuck_common::Syscall;
    use std::time::{Duration, SystemTime};

    #[test]
    fn log2_rows_follow_bcc() {
        let mut h = new_histogram();
        for us in [0u64, 1, 2, 3, 5, 7, 9, 1000] {
            h.record(us * 1_000 + 1).unwrap();
        }
        let rows = log2_usecs(&h);
        assert_eq!(rows[0], Log2Row { low: 0, high: 1, count: 2 });
        assert_eq!(rows[1], Log2Row { low: 2, high: 3, count: 2 });
        assert_eq!(rows[2], Log2Row { low: 4, high: 7, count: 2 });
        assert_eq!(rows[3], Log2Row { low: 8, high: 15, count: 1 });
        assert_eq!(rows.last().unwrap(), &Log2Row { low: 512, high: 1023, count: 1 });
        let text = render_log2(&rows);
        assert!(text.starts_with("     usecs               : count     distribution\n"));
        assert!(
            text.contains("         0 -> 1          : 2         |****************************************|"),
            "{text}"
        );
    }

    #[test]
    fn reads_back_what_watch_wrote() {
        let tmp = written_run("report");
        let text = render(&tmp.0, false).unwrap();
        assert!(text.contains("unlink ok, actor other, no pod: 300 calls"), "{text}");
        assert!(text.contains("umount2 EBUSY, actor runtime, no pod: 1 calls"), "{text}");
        assert!(text.contains("       2 -> 3          : 300"), "{text}");
        let json: serde_json::Value = serde_json::from_str(&render(&tmp.0, true).unwrap()).unwrap();
        assert_eq!(json["series"][0]["count"], json["series"][0]["count_in_log"]);
        assert_eq!(json["run"]["node"], "node-1");
        assert!(json["series"][1]["log2_usecs"].as_array().unwrap().iter().any(|r| r["count"] == 1));
    }

    #[test]
    fn a_summary_with_a_min_above_its_mean_is_shown_possible() {
        // As older podstucks wrote it: one call of 219.5us, min and max
        // from the histogram's bucket at 221.1us.
        let tmp = written_run("report-mean");
        let path = tmp.0.join("summary.json");
        let mut summary: Summary = serde_json::from_slice(&std::fs::read(&path).unwrap()).unwrap();
        let umount = summary.series.iter_mut().find(|s| s.outcome == "EBUSY").unwrap();
        (umount.mean_ns, umount.min_ns, umount.max_ns) = (219_500.0, 221_100, 221_100);
        std::fs::write(&path, serde_json::to_vec(&summary).unwrap()).unwrap();
        let text = render(&tmp.0, false).unwrap();
        assert!(text.contains("min 219.5us  mean 219.5us"), "{text}");
        // One call is its own max too.
        assert!(text.contains("max 219.5us"), "{text}");
        let json: serde_json::Value = serde_json::from_str(&render(&tmp.0, true).unwrap()).unwrap();
        let umount = json["series"].as_array().unwrap().iter().find(|s| s["outcome"] == "EBUSY").unwrap();
        assert_eq!((umount["min_ns"].as_u64(), umount["max_ns"].as_u64()), (Some(219_500), Some(219_500)));
    }

    /// A run's files in a fresh directory: 300 unlinks, one umount2.
    fn written_run(name: &str) -> TempDir {
        let tmp = TempDir::new(name);
        let t0 = SystemTime::now();
        let mut exporter = Exporter::open(&tmp.0, false, t0).unwrap();
        let mut book = LatencyBook::new(t0);
        for i in 0..300u64 {
            book.record(&event(Syscall::Unlink, 0, 2_000 + i), &identity(Role::Other, None));
        }
        book.record(&event(Syscall::Umount2, -16, 9_000_000), &identity(Role::Runtime, None));
        exporter.refresh(&mut book, &run_info(), t0 + Duration::from_secs(5)).unwrap();
        tmp
    }

    fn append(path: &Path, text: &[u8]) {
        use std::io::Write as _;
        std::fs::OpenOptions::new().append(true).open(path).unwrap().write_all(text).unwrap();
    }

    fn base64(bytes: &[u8]) -> String {
        const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let n = chunk.iter().enumerate().fold(0u32, |acc, (i, b)| acc | (*b as u32) << (16 - 8 * i));
            for i in 0..=chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            }
            out.push_str(&"=".repeat(3 - chunk.len()));
        }
        out
    }

    /// The V2 encoding of `h`, uncompressed, and deflated as the log has it.
    fn encodings(h: &Histogram<u64>) -> (Vec<u8>, Vec<u8>) {
        use hdrhistogram::serialization::{Serializer, V2DeflateSerializer, V2Serializer};
        let (mut plain, mut deflated) = (Vec::new(), Vec::new());
        V2Serializer::new().serialize(h, &mut plain).unwrap();
        V2DeflateSerializer::new().serialize(h, &mut deflated).unwrap();
        (plain, deflated)
    }

    fn deflated(plain: &[u8]) -> Vec<u8> {
        use std::io::Write as _;
        let mut z = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
        z.write_all(plain).unwrap();
        let z = z.finish().unwrap();
        let mut out = V2_COMPRESSED_COOKIE.to_be_bytes().to_vec();
        out.extend_from_slice(&(z.len() as u32).to_be_bytes());
        out.extend(z);
        out
    }

    fn line(tag: &str, payload: &[u8]) -> String {
        format!("Tag={tag},0.000,5.000,0.0,{}\n", base64(payload))
    }

    fn unlinks(text: &str) -> bool {
        text.contains("unlink ok, actor other, no pod: 300 calls") && text.contains("       2 -> 3          : 300")
    }

    #[test]
    fn a_fifo_or_a_device_is_refused_without_blocking() {
        let tmp = written_run("report-fifo");
        let hlog = tmp.0.join(HLOG);
        std::fs::remove_file(&hlog).unwrap();
        nix::unistd::mkfifo(&hlog, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let err = format!("{:#}", render(&tmp.0, false).unwrap_err());
        assert!(err.contains("latency.hlog") && err.contains("it is a FIFO, not a regular file"), "{err}");
        std::fs::remove_file(&hlog).unwrap();
        std::os::unix::fs::symlink("/dev/zero", &hlog).unwrap();
        let err = format!("{:#}", render(&tmp.0, false).unwrap_err());
        assert!(err.contains("it is a character device, not a regular file"), "{err}");
        let summary = tmp.0.join(SUMMARY);
        std::fs::remove_file(&summary).unwrap();
        nix::unistd::mkfifo(&summary, nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let err = format!("{:#}", render(&tmp.0, true).unwrap_err());
        assert!(err.contains("summary.json") && err.contains("it is a FIFO"), "{err}");
    }

    #[test]
    fn payloads_that_claim_more_than_they_hold_are_skipped_and_said() {
        let tmp = written_run("report-claims");
        let mut h = new_histogram();
        h.record(5_000).unwrap();
        let (mut plain, _) = encodings(&h);
        // The header claims 2^31 bytes of counts.
        plain[4..8].copy_from_slice(&(1u32 << 31).to_be_bytes());
        let tag = "unlink/ok/other/node";
        append(&tmp.0.join(HLOG), line(tag, &plain).as_bytes());
        append(&tmp.0.join(HLOG), line(tag, &deflated(&plain)).as_bytes());
        // 4 GiB of zeros, says the deflate header; 5 digits; a range of 2^62.
        let mut bomb = V2_COMPRESSED_COOKIE.to_be_bytes().to_vec();
        bomb.extend_from_slice(&u32::MAX.to_be_bytes());
        append(&tmp.0.join(HLOG), line(tag, &bomb).as_bytes());
        let (mut digits, _) = encodings(&h);
        digits[12..16].copy_from_slice(&5u32.to_be_bytes());
        append(&tmp.0.join(HLOG), line(tag, &deflated(&digits)).as_bytes());
        let (mut range, _) = encodings(&h);
        range[24..32].copy_from_slice(&(1u64 << 62).to_be_bytes());
        append(&tmp.0.join(HLOG), line(tag, &deflated(&range)).as_bytes());
        append(&tmp.0.join(HLOG), b"Tag=unlink/ok/other/node,0.000,5.000,0.0,@@@@\nnot a line at all\n");
        let text = render(&tmp.0, false).unwrap();
        assert!(unlinks(&text), "{text}");
        assert!(
            text.contains("note: 6 line(s) of latency.hlog could not be read and were skipped (the first: line "),
            "{text}"
        );
        assert!(text.contains("claims 2147483648 bytes of counts"), "{text}");
        let json: serde_json::Value = serde_json::from_str(&render(&tmp.0, true).unwrap()).unwrap();
        // The range to 2^62 at 3 digits is 53,248 counts: read, its call added.
        assert_eq!(json["series"][0]["count_in_log"], 301);
        assert_eq!(json["notes"].as_array().unwrap().len(), 1);
    }

    #[test]
    fn a_line_longer_than_any_is_skipped_unread() {
        let tmp = written_run("report-long");
        let long = format!("Tag=unlink/ok/other/node,0.000,5.000,0.0,{}\n", "A".repeat(3 * MAX_HLOG_LINE_BYTES));
        append(&tmp.0.join(HLOG), long.as_bytes());
        // And one more good interval after it, still read.
        let mut h = new_histogram();
        h.record(2_500).unwrap();
        append(&tmp.0.join(HLOG), line("unlink/ok/other/node", &encodings(&h).1).as_bytes());
        append(&tmp.0.join(HLOG), "x".repeat(MAX_HLOG_LINE_BYTES + 1).as_bytes());
        let text = render(&tmp.0, false).unwrap();
        assert!(text.contains("note: 2 line(s) of latency.hlog longer than 1 MiB skipped unread"), "{text}");
        let json: serde_json::Value = serde_json::from_str(&render(&tmp.0, true).unwrap()).unwrap();
        assert_eq!(json["series"][0]["count_in_log"], 301);
    }

    #[test]
    fn ten_thousand_series_are_shown_up_to_the_cap_busiest_first() {
        let tmp = written_run("report-many");
        let text = std::fs::read_to_string(tmp.0.join(SUMMARY)).unwrap();
        let mut summary: serde_json::Value = serde_json::from_str(&text).unwrap();
        let model = summary["series"][0].clone();
        let mut h = new_histogram();
        h.record(1_000).unwrap();
        let payload = encodings(&h).1;
        let mut log = String::new();
        let series: Vec<serde_json::Value> = (0..10_000u64)
            .map(|i| {
                let mut s = model.clone();
                let tag = format!("unlink/ok/other/{i:032x}");
                log.push_str(&line(&tag, &payload));
                s["tag"] = tag.into();
                s["count"] = i.into();
                s
            })
            .collect();
        summary["series"] = series.into();
        std::fs::write(tmp.0.join(SUMMARY), serde_json::to_vec(&summary).unwrap()).unwrap();
        append(&tmp.0.join(HLOG), log.as_bytes());
        let json: serde_json::Value = serde_json::from_str(&render(&tmp.0, true).unwrap()).unwrap();
        let shown = json["series"].as_array().unwrap();
        assert_eq!(shown.len(), MAX_REPORTED_SERIES);
        // The busiest, in the summary's order.
        assert_eq!(shown[0]["count"], 10_000 - MAX_REPORTED_SERIES as u64);
        assert_eq!(shown.last().unwrap()["count"], 9_999);
        assert!(shown.iter().all(|s| s["count_in_log"] == 1));
        let note = json["notes"][0].as_str().unwrap();
        assert!(note.starts_with("7952 series left out: the summary holds 10000"), "{note}");
    }

    #[test]
    fn a_summary_larger_than_any_is_refused() {
        let tmp = written_run("report-big-summary");
        let mut text = std::fs::read(tmp.0.join(SUMMARY)).unwrap();
        text.resize(MAX_SUMMARY_BYTES as usize + 1, b' ');
        std::fs::write(tmp.0.join(SUMMARY), text).unwrap();
        let err = format!("{:#}", render(&tmp.0, false).unwrap_err());
        assert!(err.contains("is larger than 8 MiB: not a summary podstuck wrote"), "{err}");
    }

    fn real_payload() -> Vec<u8> {
        let mut h = new_histogram();
        for v in [1u64, 900, 5_000, 77_777, 3_000_000, MAX_LATENCY_NS] {
            h.record_n(v, v % 7 + 1).unwrap();
        }
        encodings(&h).1
    }

    proptest::proptest! {
        #![proptest_config(proptest::prelude::ProptestConfig { cases: 512, failure_persistence: None, ..Default::default() })]

        /// Any bytes as a payload: an error or a histogram, never a panic,
        /// never more than the caps allow.
        #[test]
        fn any_payload_is_decoded_without_a_panic(bytes in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..512)) {
            let mut d = Deserializer::new();
            let _ = decode_histogram(&mut d, base64(&bytes).as_bytes());
            let _ = decode_histogram(&mut d, &bytes);
        }

        /// A real payload with bytes changed, before or after deflating.
        #[test]
        fn a_damaged_payload_is_decoded_without_a_panic(
            flips in proptest::collection::vec((proptest::prelude::any::<proptest::sample::Index>(), 1u8..=255), 1..6),
            inside in proptest::prelude::any::<bool>(),
        ) {
            let mut d = Deserializer::new();
            let bytes = if inside {
                let mut h = new_histogram();
                h.record_n(12_345, 3).unwrap();
                let mut plain = encodings(&h).0;
                for (at, x) in &flips {
                    let i = at.index(plain.len());
                    plain[i] ^= x;
                }
                deflated(&plain)
            } else {
                let mut bytes = real_payload();
                for (at, x) in &flips {
                    let i = at.index(bytes.len());
                    bytes[i] ^= x;
                }
                bytes
            };
            if let Ok(h) = decode_histogram(&mut d, base64(&bytes).as_bytes()) {
                proptest::prop_assert!(h.distinct_values() <= 66_560);
            }
        }

        /// Any lines in latency.hlog: a report, never a panic.
        #[test]
        fn any_log_lines_are_read_without_a_panic(lines in proptest::collection::vec(proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200), 0..20)) {
            thread_local! {
                static RUN: TempDir = written_run("report-any");
            }
            RUN.with(|run| {
                let path = run.0.join(HLOG);
                let good = std::fs::read(&path).unwrap();
                let mut bytes = good.clone();
                for l in &lines {
                    let mut l = l.clone();
                    if l.first() == Some(&b'T') {
                        l.splice(0..1, b"Tag=unlink/ok/other/node,0.000,5.000,0.0,".iter().copied());
                    }
                    bytes.extend(l);
                    bytes.push(b'\n');
                }
                std::fs::write(&path, &bytes).unwrap();
                let text = render(&run.0, false);
                std::fs::write(&path, &good).unwrap();
                let text = text.unwrap();
                assert!(unlinks(&text), "{text}");
            });
        }
    }

    #[test]
    fn a_directory_without_files_says_what_it_expected() {
        let tmp = TempDir::new("report-empty");
        let err = render(&tmp.0, false).unwrap_err().to_string();
        assert!(err.contains("--histograms directory"), "{err}");
    }
}
