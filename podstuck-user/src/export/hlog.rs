//! `latency.hlog`: the HdrHistogram interval log (format 1.3), one tagged
//! line per series per interval, V2 deflate-compressed base64 payloads, as
//! the Java and Python HdrHistogram log readers and the hdrhistogram crate
//! read it. Also the reader `podstuck report` uses.

use std::collections::BTreeMap;
use std::time::SystemTime;

use anyhow::{anyhow, Context, Result};
use hdrhistogram::serialization::interval_log::{IntervalLogIterator, IntervalLogWriterBuilder, LogEntry, Tag};
use hdrhistogram::serialization::{Deserializer, V2DeflateSerializer};
use hdrhistogram::Histogram;

use crate::latency::{new_histogram, ClosedInterval};

/// The log's header: version, what it holds, start and base time (interval
/// timestamps are relative to the base time).
pub fn header(started: SystemTime) -> Vec<u8> {
    let mut out = Vec::new();
    let mut serializer = V2DeflateSerializer::new();
    IntervalLogWriterBuilder::new()
        .add_comment("[Histogram log format version 1.3]")
        .add_comment("[podstuck: syscall latency in nanoseconds; tag = syscall/outcome/actor-role/pod (node: no pod)]")
        .with_start_time(started)
        .with_base_time(started)
        .begin_log_with(&mut out, &mut serializer)
        .expect("writing to memory cannot fail");
    out.extend_from_slice(
        b"\"StartTimestamp\",\"Interval_Length\",\"Interval_Max\",\"Interval_Compressed_Histogram\"\n",
    );
    out
}

/// Appends one line per series of a closed interval.
pub fn append_interval(log: &mut Vec<u8>, interval: &ClosedInterval) -> Result<()> {
    let mut serializer = V2DeflateSerializer::new();
    // The builder writes no header when given none; it only frames lines.
    let mut writer = IntervalLogWriterBuilder::new()
        .begin_log_with(log, &mut serializer)
        .map_err(|e| anyhow!("starting interval log lines: {e}"))?;
    for (key, histogram) in &interval.histograms {
        let tag = key.tag();
        let tag = Tag::new(&tag).ok_or_else(|| anyhow!("series tag {tag:?} is not a valid log tag"))?;
        writer
            .write_histogram(histogram, interval.start, interval.length, Some(tag))
            .map_err(|e| anyhow!("writing interval histogram: {e}"))?;
    }
    Ok(())
}

/// One interval line read back.
pub struct LoggedInterval {
    pub tag: String,
    pub start_s: f64,
    pub length_s: f64,
    pub histogram: Histogram<u64>,
}

/// Reads every interval of a log.
pub fn read(bytes: &[u8]) -> Result<Vec<LoggedInterval>> {
    let mut deserializer = Deserializer::new();
    let mut intervals = Vec::new();
    for entry in IntervalLogIterator::new(bytes) {
        let entry = entry.map_err(|e| anyhow!("malformed interval log line: {e:?}"))?;
        if let LogEntry::Interval(line) = entry {
            let payload =
                base64_decode(line.encoded_histogram().as_bytes()).context("interval payload is not base64")?;
            let histogram: Histogram<u64> =
                deserializer.deserialize(&mut &payload[..]).map_err(|e| anyhow!("bad histogram payload: {e:?}"))?;
            intervals.push(LoggedInterval {
                tag: line.tag().map(|t| t.as_str().to_string()).unwrap_or_default(),
                start_s: line.start_timestamp().as_secs_f64(),
                length_s: line.duration().as_secs_f64(),
                histogram,
            });
        }
    }
    Ok(intervals)
}

/// The whole run per tag: every interval of a series added up.
pub fn totals_by_tag(intervals: &[LoggedInterval]) -> Result<BTreeMap<String, Histogram<u64>>> {
    let mut totals: BTreeMap<String, Histogram<u64>> = BTreeMap::new();
    for interval in intervals {
        totals
            .entry(interval.tag.clone())
            .or_insert_with(new_histogram)
            .add(&interval.histogram)
            .map_err(|e| anyhow!("adding intervals of {}: {e:?}", interval.tag))?;
    }
    Ok(totals)
}

/// A log's payload: standard base64, padded, as hdrhistogram writes it.
/// `report` reads payloads with it too.
pub(crate) fn base64_decode(text: &[u8]) -> Result<Vec<u8>> {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.decode(text).map_err(|e| anyhow!("the payload is not base64 ({e})"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::identify::actor::Role;
    use crate::latency::tests::{event, identity};
    use crate::latency::LatencyBook;
    use podstuck_common::Syscall;
    use std::time::Duration;

    #[test]
    fn base64_matches_the_standard_alphabet() {
        assert_eq!(base64_decode(b"aGVsbG8=").unwrap(), b"hello");
        assert_eq!(base64_decode(b"aGVsbG8h").unwrap(), b"hello!");
        assert_eq!(base64_decode(b"aA==").unwrap(), b"h");
        assert!(base64_decode(b"a$==").is_err());
    }

    /// Written by us, read by the hdrhistogram crate's own interval-log
    /// reader: the same counts and percentiles, interval by interval.
    #[test]
    fn the_log_round_trips_through_the_crates_reader() {
        let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut book = LatencyBook::new(t0);
        let mut log = header(t0);
        let pod = "1b2c3d4e-0000-4000-8000-00000000000a";
        for i in 0..1000u64 {
            book.record(&event(Syscall::Unlinkat, 0, 1_000 + i * 37), &identity(Role::Runtime, None));
            if i % 10 == 0 {
                book.record(&event(Syscall::Rmdir, -16, 20_000 + i), &identity(Role::Kubelet, Some(pod)));
            }
        }
        append_interval(&mut log, &book.close_interval(t0 + Duration::from_secs(5))).unwrap();
        for i in 0..500u64 {
            book.record(&event(Syscall::Unlinkat, 0, 90_000 + i), &identity(Role::Runtime, None));
        }
        append_interval(&mut log, &book.close_interval(t0 + Duration::from_secs(10))).unwrap();

        let text = String::from_utf8(log.clone()).unwrap();
        assert!(text.starts_with("#[Histogram log format version 1.3]\n"), "{text}");
        assert!(text.contains("#[StartTime: 1700000000.000 (seconds since epoch)]"));
        assert!(text.contains("#[BaseTime: 1700000000.000 (seconds since epoch)]"));
        assert!(text.contains(&format!("Tag=rmdir/EBUSY/kubelet/{pod},0.000,5.000,")));

        let intervals = read(&log).unwrap();
        assert_eq!(intervals.len(), 3);
        assert_eq!(intervals[2].start_s, 5.0);
        let totals = totals_by_tag(&intervals).unwrap();
        for (key, series) in book.series() {
            let back = &totals[&key.tag()];
            assert_eq!(back.len(), series.count);
            for q in [0.5, 0.9, 0.99, 0.999, 1.0] {
                assert_eq!(back.value_at_quantile(q), series.total.value_at_quantile(q), "{} q{q}", key.tag());
            }
            assert_eq!(back.min(), series.total.min());
            assert_eq!(back.max(), series.total.max());
        }
    }
}
