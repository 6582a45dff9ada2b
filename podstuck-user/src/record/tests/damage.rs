//! A record from anywhere (cut, damaged, not a record, on a full disk, too
//! long to be a podstuck's) is read without a panic, in bounded memory, and
//! what is wrong is said.

use super::*;

#[test]
fn what_is_not_a_record_is_said_so() {
    assert_eq!(error_of(b""), "the record is not a podstuck record: it is empty");
    assert_eq!(
        error_of(b"hello\nworld\n"),
        "the record is not a podstuck record: it does not begin with \"podstuck-record\""
    );
    assert_eq!(
        error_of(b"\x1f\x8b\x08\x00"),
        "the record is not a podstuck record: it does not begin with \"podstuck-record\""
    );
    assert_eq!(
        error_of(b"podstuck-record one\n"),
        "the record is not a podstuck record: its first line is not \"podstuck-record <format>\""
    );
    assert_eq!(error_of(b"podstuck-record 0\n{}\n"), "the record is not a podstuck record: format 0 does not exist");
    let newer = error_of(b"podstuck-record 2\n{\"podstuck\":\"9.1.0\",\"whatever\":1}\n\x00\x01");
    assert_eq!(
        newer,
        format!(
            "the record was written by a newer podstuck (podstuck 9.1.0, format 2); this one ({}) reads format 1: replay it with podstuck 9.1.0 or newer",
            env!("CARGO_PKG_VERSION")
        )
    );
    assert!(error_of(b"podstuck-record 7\n").contains("newer podstuck (format 7)"));
    assert!(error_of(b"podstuck-record 1\n").contains("header is corrupt: the record ends before it"));
    assert!(error_of(b"podstuck-record 1\n{\"podstuck\":\"0.1.0\"}\n").contains("header is corrupt: missing field"));
    assert!(error_of(format!("podstuck-record 1\n{}\n", HEAD.replace("5s", "soon")).as_bytes())
        .contains("header is corrupt: hung_after \"soon\""));
}

#[test]
fn a_corrupt_entry_is_named_and_what_came_before_is_replayed() {
    let m = csi_mount();
    let (_, bytes) = recorded_incident();
    let mut lines = entry_lines(&bytes);
    lines[30] = lines[30].replacen("\"now\":", "\"now\":\"soon\",\"x\":", 1);
    let broken = written_by_hand(HEAD, &(lines.join("\n") + "\n"));
    let mut told = 0;
    let summary = replay_record(&broken[..], "x.podstuck", &mut |_| told += 1).unwrap();
    let error = summary.broken.unwrap().to_string();
    assert!(error.starts_with("x.podstuck: entry 31 is corrupt: invalid type: string \"soon\""), "{error}");
    assert_eq!(summary.calls + summary.reviews, 30);
    assert!(told > 0, "the findings before entry 31 are told");
    // Whole entries but a checksum that does not match: said, after the replay.
    let mut altered = bytes.clone();
    let crc = altered.len() - 8;
    altered[crc] ^= 1;
    let mut told = 0;
    let summary = replay_record(&altered[..], "x.podstuck", &mut |_| told += 1).unwrap();
    assert_eq!(summary.entries(), 94);
    assert!(told > 0 && summary.end.is_none());
    let error = summary.broken.unwrap().to_string();
    assert!(error.starts_with("x.podstuck is damaged (corrupt gzip stream does not have a matching checksum): the findings replayed from it may be wrong"), "{error}");
    // Each way an entry can be wrong.
    let cases = [
        ("{\"call\":{\"event\":42}}\n".to_string(), "entry 1 is corrupt: invalid type"),
        ("{\"review\":{\"now\":1,\"in_flight\":[],\"asked\":[{\"host_mounts\":{}}],\"told\":[]}}\n".into(), "entry 1 is corrupt: the answer to host_mounts refers to an earlier one the record does not hold"),
        ("{\"end\":{\"ended\":1,\"entries\":5,\"untold\":[]}}\n".into(), "entry 1 is corrupt: the record's end counts 5 entries before it, but 0 were read"),
        ("{\"end\":{\"ended\":1,\"entries\":0,\"untold\":[]}}\n{\"end\":{}}\n".into(), "entry 2 is corrupt: there is data after the end of the record"),
        ("not json\n".into(), "entry 1 is corrupt: expected value at line 1 column 1"),
        ("{\"sneeze\":{}}\n".into(), "entry 1 is corrupt: unknown variant `sneeze`"),
        ("{\"review\":{\"now\":1,\"in_flight\":[],\"asked\":[{\"file_facts\":{\"path\":{\"hex\":\"2g\"},\"answer\":{\"unreadable\":\"x\"}}}],\"told\":[]}}\n".into(), "\"2g\" is not hex"),
        (format!("{{\"call\":{{\"event\":{{\"time\":1,\"pid\":1,\"tid\":1,\"comm\":\"k\",\"ppid\":1,\"pcomm\":\"s\",\"cgroup_id\":1,\"mntns\":1,\"uid\":0,\"syscall\":\"rmdir\",\"flags\":0,\"dfd\":-100,\"path\":\"{m}\",\"path_status\":\"whole\",\"base\":\"not-needed\",\"ret\":0,\"latency_ns\":1}},\"identity\":{{\"pod_uid\":\"NOT-A-UID\",\"path_area\":null,\"container_id\":null,\"actor\":{{\"comm\":\"k\",\"exe\":null,\"parent\":\"s\",\"role\":\"kubelet\",\"description\":\"k\"}},\"matched\":[]}}}}}}\n"), "is not a pod UID"),
    ];
    for (body, said) in cases {
        let error = error_of(&written_by_hand(HEAD, &body));
        assert!(error.contains(said), "{body}: {error}");
    }
}

/// Reads a record to its end: entries read, whether complete, or the error.
fn read_all(bytes: &[u8]) -> Result<(u64, bool), RecordError> {
    let mut reader = RecordReader::open(bytes, "cut.podstuck")?;
    let mut complete = false;
    while let Some(entry) = reader.next_entry()? {
        complete = matches!(entry, Entry::End(_));
    }
    assert_eq!(complete, !reader.ends_early());
    Ok((reader.entries(), complete))
}

#[test]
fn a_record_cut_anywhere_replays_what_it_holds() {
    let (live, bytes) = recorded_incident();
    let header_end = bytes.iter().enumerate().filter(|(_, b)| **b == b'\n').nth(1).unwrap().0 + 1;
    let mut entries_before = 0;
    // Every byte of the header and of the gzip stream's end, every third
    // between (and each one replayed below): every byte was 40 s of the
    // unit tests, each cut read from the start.
    let cuts =
        (0..=bytes.len()).filter(|&c| c <= header_end + 16 || c + 64 >= bytes.len() || c % 3 == 0 || c % 97 == 0);
    for cut in cuts {
        match read_all(&bytes[..cut]) {
            Ok((entries, complete)) => {
                assert!(cut >= header_end, "a cut header read as a record at {cut}");
                // Only the gzip stream's last block and trailer may be
                // missing from a record read to its end.
                assert!(!complete || cut + 16 >= bytes.len(), "cut at {cut} of {}", bytes.len());
                assert!(entries >= entries_before, "fewer entries read at a longer cut {cut}");
                entries_before = entries;
            }
            Err(e) => {
                assert!(cut < header_end, "cut at {cut}: {e}");
                let said = e.to_string();
                assert!(said.contains("is not a podstuck record") || said.contains("header is corrupt"), "{said}");
            }
        }
        // The whole replay on some of them (it is the slow part); a cut in
        // the gzip trailer may still hold the end entry (see above).
        if cut >= header_end && cut % 97 == 0 && cut + 16 < bytes.len() {
            let mut told = Vec::new();
            let summary = replay_record(&bytes[..cut], "cut.podstuck", &mut |r| told.push(r.clone())).unwrap();
            assert!(summary.broken.is_none() && summary.ends_early(), "cut at {cut}: {:?}", summary.broken);
            assert!(told.len() <= live.len());
        }
    }
    assert_eq!(entries_before, 95, "94 calls and reviews, and the end");
}

/// A minute of kubelet retrying against P1 and P5, written to a disk with
/// `room` bytes free.
fn on_a_small_disk(room: usize) -> (Vec<RecordStopped>, bool, Vec<u8>) {
    let kept = Shared::default();
    let mut live = Live::new(incident_node(), FillsUp { kept: kept.clone(), room });
    let m = csi_mount();
    for i in 0..120 {
        let at = i as f64 * 0.5;
        live.call(&rmdir(at, "kubelet", &m, -libc::EBUSY));
        live.call(&call_by(at + 0.1, "kubelet", 7, Syscall::Rmdir, 0, CG, -libc::EBUSY));
        live.review(at + 0.25, &[]);
    }
    let mut stopped = std::mem::take(&mut live.stopped);
    // The disk may also fill up with the closing entry: said then.
    let complete = match live.finish(61.0).1 {
        Ok(saved) => saved.complete,
        Err(e) => {
            stopped.push(e);
            false
        }
    };
    (stopped, complete, kept.bytes())
}

#[test]
fn a_full_disk_stops_the_record_once_and_it_replays_up_to_there() {
    let (stopped, complete, whole) = on_a_small_disk(usize::MAX);
    assert!(stopped.is_empty() && complete);
    let header_bytes = whole.iter().enumerate().filter(|(_, b)| **b == b'\n').nth(1).unwrap().0 + 1 + 32;
    for room in [header_bytes, whole.len() / 3, whole.len() / 2, whole.len() - 40, whole.len() - 1] {
        let (stopped, complete, kept) = on_a_small_disk(room);
        assert_eq!(stopped.len(), 1, "said once, at room {room}");
        assert!(!complete);
        let said = stopped[0].to_string();
        assert!(said.starts_with("recording to incident.podstuck stopped: the disk is full; "), "{said}");
        assert!(
            said.contains(&format!(
                "incident.podstuck holds its first {} entries, up to 2027-01-15T08:",
                stopped[0].entries_held
            )),
            "{said}"
        );
        assert!(said.ends_with("and `podstuck replay incident.podstuck` reads them"), "{said}");
        let summary = replay_record(&kept[..], "incident.podstuck", &mut |_| {}).unwrap();
        // Cut in the gzip trailer, after the closing entry: whole all the same.
        assert!(
            summary.broken.is_none() && (summary.ends_early() || room + 8 >= whole.len()),
            "room {room}: {:?}",
            summary.broken
        );
        assert!(
            summary.entries() >= stopped[0].entries_held,
            "room {room}: {} < {}",
            summary.entries(),
            stopped[0].entries_held
        );
    }
}

// Reading never panics, whatever the bytes.

fn said_clearly(e: &RecordError) -> bool {
    let said = e.to_string();
    ["is not a podstuck record", "newer podstuck", "header is corrupt", "is corrupt: ", "is damaged (", "cannot read"]
        .iter()
        .any(|p| said.contains(p))
}

fn small_record() -> Vec<u8> {
    thread_local! {
        static RECORD: Vec<u8> = recorded_incident().1;
    }
    RECORD.with(|r| r.clone())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn any_bytes_are_read_without_a_panic(bytes in proptest::collection::vec(any::<u8>(), 0..4096)) {
        if let Err(e) = replay_findings(&bytes[..]) {
            prop_assert!(said_clearly(&e), "{e}");
        }
    }

    #[test]
    fn any_bytes_after_a_good_header_are_read_without_a_panic(tail in proptest::collection::vec(any::<u8>(), 0..4096), gzip_head in any::<bool>()) {
        let mut bytes = format!("podstuck-record 1\n{HEAD}\n").into_bytes();
        if gzip_head {
            bytes.extend_from_slice(&[0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3]);
        }
        bytes.extend(tail);
        if let Err(e) = replay_findings(&bytes[..]) {
            prop_assert!(said_clearly(&e), "{e}");
        }
    }

    #[test]
    fn a_damaged_record_is_read_without_a_panic(flips in proptest::collection::vec((any::<prop::sample::Index>(), 1u8..=255), 1..6)) {
        let mut bytes = small_record();
        for (at, x) in &flips {
            let i = at.index(bytes.len());
            bytes[i] ^= x;
        }
        match replay_findings(&bytes[..]) {
            Ok(_) => {}
            Err(e) => prop_assert!(said_clearly(&e), "{e}"),
        }
    }
}

// Bounded reading: a record from anywhere is read in bounded memory, and
// what is too long to be a podstuck's is passed over and said.

/// A record of `lines` (entries, newline-terminated each) after HEAD.
fn record_of(lines: &[String]) -> Vec<u8> {
    written_by_hand(HEAD, &(lines.join("\n") + "\n"))
}

#[test]
fn an_entry_too_long_to_be_a_podstucks_is_skipped_and_said() {
    let (_, bytes) = recorded_incident();
    let mut lines = entry_lines(&bytes);
    let call = lines.iter().position(|l| l.starts_with("{\"call\"")).unwrap();
    // A call whose path is longer than any the kernel hands over.
    let long_path = format!("/{}", "a".repeat(read::MAX_CALL_BYTES));
    lines[call] = format!("{{\"call\":{{\"event\":{{\"path\":\"{long_path}\"}}}}}}");
    let review = lines.iter().position(|l| l.starts_with("{\"review\"")).unwrap();
    let mut told = Vec::new();
    let expected = replay_record(&record_of(&lines)[..], "a", &mut |r| told.push(r.clone())).unwrap();
    // And a review longer than any: read in bounded memory, passed over.
    let mut huge = String::with_capacity(read::MAX_ENTRY_BYTES + 64);
    huge.push_str("{\"review\":{\"now\":1,\"in_flight\":[],\"asked\":[],\"told\":[");
    while huge.len() <= read::MAX_ENTRY_BYTES {
        huge.push_str("{},");
    }
    huge.push_str("{}]}}");
    lines.insert(review, huge);
    // The end counts the entries skipped too.
    let end = lines.pop().unwrap();
    let end: serde_json::Value = serde_json::from_str(&end).unwrap();
    let entries = end["end"]["entries"].as_u64().unwrap() + 1;
    lines.push(format!("{{\"end\":{{\"ended\":{},\"entries\":{entries},\"untold\":[]}}}}", end["end"]["ended"]));
    let summary = replay_record(&record_of(&lines)[..], "long.podstuck", &mut |_| {}).unwrap();
    assert!(summary.broken.is_none(), "{}", summary.broken.unwrap());
    assert!(summary.end.is_some(), "read to its end");
    assert_eq!(summary.skipped, 2);
    let first = summary.first_skipped.clone().unwrap();
    assert!(first.starts_with(&format!("entry {} is longer than any entry a podstuck writes", call + 1)), "{first}");
    assert_eq!(summary.calls + summary.reviews + 2, entries);
    assert_eq!(expected.skipped, 1);
    let text = replay::record_text("long.podstuck", &summary);
    assert!(text.contains("2 entries too long to be any podstuck's were skipped"), "{text}");
    let json: serde_json::Value = serde_json::from_str(&replay::record_json("long.podstuck", &summary)).unwrap();
    assert_eq!(json["skipped"], 2);
}

#[test]
fn a_stream_of_zeros_is_passed_over_in_bounded_memory() {
    // 64 MiB of zeros, no newline: 64 KiB compressed.
    let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
    let zeros = vec![0u8; 1 << 20];
    for _ in 0..64 {
        gz.write_all(&zeros).unwrap();
    }
    let mut record = format!("podstuck-record 1\n{HEAD}\n").into_bytes();
    record.extend(gz.finish().unwrap());
    let mut reader = RecordReader::open(&record[..], "zeros").unwrap();
    assert!(reader.next_entry().unwrap().is_none());
    assert!(reader.ends_early());
    assert_eq!((reader.skipped(), reader.entries()), (1, 1));
    // What it kept of the line: nothing.
    assert!(reader.line_room() <= read::MAX_CALL_BYTES + 1, "{}", reader.line_room());
}

#[test]
fn lists_and_findings_past_what_a_podstuck_writes_are_refused_before_they_are_held() {
    let items = wire::MAX_LIST_ITEMS + 1;
    let counted = vec!["{\"pid\":1,\"syscall\":\"rmdir\",\"errno\":0,\"count\":1}"; items].join(",");
    let error = error_of(&record_of(&[format!(
        "{{\"review\":{{\"now\":1,\"in_flight\":[],\"asked\":[],\"told\":[],\"counted\":[{counted}]}}}}"
    )]));
    assert!(error.contains("entry 1 is corrupt: a list of more than 65536 items"), "{error}");
    // {"a":0} takes some 80 times its bytes as a JSON value.
    let objects = vec!["{\"a\":0}"; 200_000].join(",");
    let error = error_of(&record_of(&[format!(
        "{{\"review\":{{\"now\":1,\"in_flight\":[],\"asked\":[],\"told\":[[{objects}]]}}}}"
    )]));
    assert!(error.contains("entry 1 is corrupt: findings that would take more than 64 MiB of memory"), "{error}");
    let error = error_of(&record_of(&[format!("{{\"end\":{{\"ended\":1,\"entries\":0,\"untold\":[[{objects}]]}}}}")]));
    assert!(error.contains("findings that would take more than 64 MiB"), "{error}");
    // A path longer than any.
    let path = "b".repeat(wire::MAX_BYTES_FIELD + 1);
    let error = error_of(&record_of(&[format!(
        "{{\"review\":{{\"now\":1,\"in_flight\":[],\"asked\":[{{\"file_facts\":{{\"path\":\"{path}\",\"answer\":{{\"unreadable\":\"x\"}}}}}}],\"told\":[]}}}}"
    )]));
    assert!(error.contains("a path of 32769 bytes, longer than any a podstuck writes"), "{error}");
    // Findings as a podstuck writes them are read as they were.
    let told = serde_json::json!({"type": "finding", "id": "x", "evidence": [{"fact": "a", "n": 1.5, "ok": true, "none": null, "big": u64::MAX, "neg": -3}]});
    let record = record_of(&[format!("{{\"review\":{{\"now\":1,\"in_flight\":[],\"asked\":[],\"told\":[{told}]}}}}")]);
    let mut reader = RecordReader::open(&record[..], "r").unwrap();
    match reader.next_entry().unwrap() {
        Some(Entry::Review(review)) => assert_eq!(review.told, vec![told]),
        other => panic!("a review, not {other:?}"),
    }
}

#[test]
fn reasons_are_read_back_as_podstucks_own_or_kept_as_bounded_text() {
    use crate::event::{NoPath, UNKNOWN_REASON};
    assert_eq!(NoPath::from_text(NoPath::BadFd.as_str()), NoPath::BadFd);
    assert_eq!(NoPath::from_text("a newer podstuck's reason"), NoPath::Other("a newer podstuck's reason".into()));
    assert_eq!(NoPath::from_text(&"x".repeat(10_000)).as_str(), UNKNOWN_REASON);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, failure_persistence: None, ..ProptestConfig::default() })]

    /// Lines of any length around the caps, calls or not, whole or cut:
    /// never a panic, each line over its cap skipped and counted, the others
    /// read (as corrupt: they are not entries).
    #[test]
    fn lines_around_the_caps_are_read_or_skipped(
        lines in proptest::collection::vec((any::<bool>(), prop_oneof![0usize..64, (read::MAX_CALL_BYTES - 16)..(read::MAX_CALL_BYTES + 16), (read::MAX_ENTRY_BYTES - 8)..(read::MAX_ENTRY_BYTES + 8)], any::<bool>()), 1..4),
        newline_at_end in any::<bool>(),
    ) {
        let mut body = Vec::new();
        let mut over = 0;
        for (i, (is_call, len, _)) in lines.iter().enumerate() {
            let prefix: &[u8] = if *is_call { b"{\"call\"" } else { b"{\"review\"" };
            let mut line = prefix.to_vec();
            line.resize(prefix.len().max(*len), b' ');
            let cap = if *is_call { read::MAX_CALL_BYTES } else { read::MAX_ENTRY_BYTES };
            if line.len() > cap && over == i {
                over += 1;
            }
            body.extend_from_slice(&line);
            if i + 1 < lines.len() || newline_at_end {
                body.push(b'\n');
            }
        }
        let mut gz = GzEncoder::new(Vec::new(), Compression::fast());
        gz.write_all(&body).unwrap();
        let mut record = format!("podstuck-record 1\n{HEAD}\n").into_bytes();
        record.extend(gz.finish().unwrap());
        let mut reader = RecordReader::open(&record[..], "r").unwrap();
        loop {
            match reader.next_entry() {
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(e) => {
                    prop_assert!(said_clearly(&e), "{}", e);
                    break;
                }
            }
        }
        // Every line before the first that is read (and found corrupt) and is over its cap was skipped.
        prop_assert_eq!(reader.skipped(), over as u64);
        prop_assert!(reader.line_room() <= 2 * read::MAX_ENTRY_BYTES);
    }

    /// A real record with entries spliced from pieces of JSON: never a panic.
    #[test]
    fn entries_made_of_json_pieces_are_read_without_a_panic(pieces in proptest::collection::vec(prop_oneof![
        Just("{".to_string()), Just("}".to_string()), Just("[".to_string()), Just("]".to_string()), Just(",".to_string()), Just(":".to_string()),
        Just("\"call\"".to_string()), Just("\"review\"".to_string()), Just("\"end\"".to_string()), Just("\"told\"".to_string()), Just("\"asked\"".to_string()),
        Just("\"hex\"".to_string()), Just("\"path\"".to_string()), Just("null".to_string()), Just("1e999".to_string()), Just("-1".to_string()),
        "\"[a-z_]{0,12}\"", "[0-9]{1,25}",
    ], 0..60), at in any::<prop::sample::Index>()) {
        let (_, bytes) = recorded_incident();
        let mut lines = entry_lines(&bytes);
        let i = at.index(lines.len());
        lines[i] = pieces.concat();
        match replay_findings(&record_of(&lines)[..]) {
            Ok(_) => {}
            Err(e) => prop_assert!(said_clearly(&e), "{}", e),
        }
    }
}
