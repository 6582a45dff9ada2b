//! End-to-end: what workloads and strangers hand podstuck costs it bounded
//! memory. Made-up pod UIDs in paths (any user can fail to unlink
//! `<kubelet root>/pods/<uid>/...`) make no series of their own, and more
//! pods than a node has fold into `other`; a crafted record replays, and a
//! crafted histogram directory reports, within 1 GiB of address space
//! (`prlimit --as`), with a clear message and never an abort or a hang.
//!
//! The flood tests run as root (see `kernel_test!`); the replay and
//! report tests of crafted files need no kernel, but the report ones start
//! from the files of a real run.

use std::ffi::{CString, OsStr};
use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use base64::Engine as _;
use hdrhistogram::serialization::{Serializer, V2DeflateSerializer, V2Serializer};
use hdrhistogram::Histogram;
use podstuck_tests::*;
use serde_json::Value;

/// The address space podstuck gets: a debug build maps some 100 MB of its
/// own; the rest is what a crafted input may cost, at most.
const ADDRESS_SPACE: &str = "1073741824";

/// What a child printed and how it ended.
struct Ran {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    took: Duration,
}

/// Runs `podstuck ARGS` under `prlimit --as=1 GiB`, killed after `limit`
/// (then the test fails: podstuck hung).
fn podstuck_in_a_gigabyte(args: &[&OsStr], limit: Duration) -> Ran {
    let started = Instant::now();
    let mut child = Command::new("prlimit")
        .arg(format!("--as={ADDRESS_SPACE}"))
        .arg("--")
        .arg(podstuck_binary())
        .args(args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("run prlimit (util-linux)");
    let mut out = child.stdout.take().unwrap();
    let mut err = child.stderr.take().unwrap();
    let stdout = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = out.read_to_end(&mut text);
        text
    });
    let stderr = std::thread::spawn(move || {
        let mut text = Vec::new();
        let _ = err.read_to_end(&mut text);
        text
    });
    let Some(status) = within(limit, || child.try_wait().expect("wait")) else {
        let _ = child.kill();
        let _ = child.wait();
        panic!("podstuck {:?} did not finish within {limit:?}", args);
    };
    let (stdout, stderr) = (stdout.join().unwrap(), stderr.join().unwrap());
    Ran {
        status,
        stdout: String::from_utf8_lossy(&stdout).into_owned(),
        stderr: String::from_utf8_lossy(&stderr).into_owned(),
        took: started.elapsed(),
    }
}

/// It ended by itself (no signal: no abort), with exit code `code`, and
/// said no panic and no failed allocation.
fn finished_cleanly(ran: &Ran, code: i32, what: &str) {
    let said = format!(
        "{what}: {} after {:?}\nstdout: {}\nstderr: {}",
        ran.status,
        ran.took,
        tail(&ran.stdout),
        tail(&ran.stderr)
    );
    assert_eq!(ran.status.code(), Some(code), "{said}");
    for bad in ["panicked", "memory allocation", "Aborted", "RUST_BACKTRACE"] {
        assert!(!ran.stderr.contains(bad), "{said}");
    }
}

fn tail(text: &str) -> &str {
    let cut = text.len().saturating_sub(2000);
    let cut = (cut..text.len()).find(|i| text.is_char_boundary(*i)).unwrap_or(text.len());
    &text[cut..]
}

/// A gzip member of what `write` writes, by the system's gzip.
fn gzip(write: impl FnOnce(&mut dyn Write) + Send + 'static) -> Vec<u8> {
    let mut child =
        Command::new("gzip").args(["-1", "-c"]).stdin(Stdio::piped()).stdout(Stdio::piped()).spawn().expect("run gzip");
    let mut input = child.stdin.take().unwrap();
    let feeder = std::thread::spawn(move || {
        write(&mut input);
    });
    let mut output = Vec::new();
    child.stdout.take().unwrap().read_to_end(&mut output).unwrap();
    feeder.join().unwrap();
    assert!(child.wait().unwrap().success(), "gzip failed");
    output
}

const RECORD_HEAD: &str = "podstuck-record 1\n{\"podstuck\":\"0.1.0\",\"node\":\"n\",\"kernel\":\"k\",\"started\":\"2027-01-15T08:00:00Z\",\"kubelet_root\":\"/var/lib/kubelet\",\"hung_after\":\"5s\",\"node_name\":\"n\",\"host_mntns\":1}\n";

/// A record: its two plain lines, then `members` gzip members.
fn record(scratch: &ScratchDir, name: &str, members: &[(&[u8], usize)]) -> PathBuf {
    let path = scratch.path().join(name);
    let mut file = std::fs::File::create(&path).unwrap();
    file.write_all(RECORD_HEAD.as_bytes()).unwrap();
    for (member, times) in members {
        for _ in 0..*times {
            file.write_all(member).unwrap();
        }
    }
    path
}

#[test]
fn crafted_records_replay_within_a_gigabyte() {
    let scratch = ScratchDir::new("bounded-replay");
    // 12 calls whose paths are 200 MB each (12 MB on disk): skipped unread.
    let huge_path = gzip(|out| {
        out.write_all(b"{\"call\":{\"event\":{\"time\":1800000000000000000,\"pid\":100,\"tid\":100,\"comm\":\"kubelet\",\"ppid\":1,\"pcomm\":\"systemd\",\"cgroup_id\":1,\"mntns\":1,\"uid\":0,\"syscall\":\"unlinkat\",\"flags\":512,\"dfd\":-100,\"path\":\"/").unwrap();
        let chunk = vec![b'a'; 1 << 20];
        for _ in 0..200 {
            out.write_all(&chunk).unwrap();
        }
        out.write_all(b"\",\"path_status\":\"whole\",\"base\":\"not-needed\",\"ret\":-16,\"latency_ns\":20000},\"identity\":{\"pod_uid\":null,\"path_area\":null,\"container_id\":null,\"actor\":{\"comm\":\"kubelet\",\"exe\":null,\"parent\":\"systemd\",\"role\":\"kubelet\",\"description\":\"kubelet\"},\"matched\":[]}}}\n").unwrap();
    });
    let calls = record(&scratch, "paths.podstuck", &[(&huge_path, 12)]);
    let ran = podstuck_in_a_gigabyte(&[OsStr::new("replay"), calls.as_os_str()], Duration::from_secs(120));
    finished_cleanly(&ran, 0, "12 calls of 200 MB paths");
    assert!(
        ran.stderr.contains("12 entries skipped unread (entry 1 is longer than any entry a podstuck writes"),
        "{}",
        ran.stderr
    );
    assert!(ran.stdout.contains("12 entries too long to be any podstuck's were skipped"), "{}", ran.stdout);

    // 1 GiB of zeros, no newline anywhere (1 MB on disk).
    let zeros = gzip(|out| {
        let chunk = vec![0u8; 1 << 20];
        for _ in 0..64 {
            out.write_all(&chunk).unwrap();
        }
    });
    let zeros = record(&scratch, "zeros.podstuck", &[(&zeros, 16)]);
    let ran = podstuck_in_a_gigabyte(&[OsStr::new("replay"), zeros.as_os_str()], Duration::from_secs(120));
    finished_cleanly(&ran, 0, "1 GiB of gzipped zeros");
    assert!(ran.stderr.contains("1 entries skipped unread") && ran.stderr.contains("ends early"), "{}", ran.stderr);

    // Findings that take 80 times their bytes in memory ({"a":0} is a map).
    let findings = gzip(|out| {
        let inner = format!("[{}]", vec!["{\"a\":0}"; 30].join(","));
        let told = vec![inner.as_str(); 65_000].join(",");
        writeln!(out, "{{\"review\":{{\"now\":1800000001000000000,\"in_flight\":[],\"asked\":[],\"told\":[{told}]}}}}")
            .unwrap();
    });
    let findings = record(&scratch, "findings.podstuck", &[(&findings, 3)]);
    let ran = podstuck_in_a_gigabyte(&[OsStr::new("replay"), findings.as_os_str()], Duration::from_secs(120));
    finished_cleanly(&ran, 1, "findings of 1 GB in memory");
    assert!(
        ran.stderr.contains("entry 1 is corrupt: findings that would take more than 64 MiB of memory"),
        "{}",
        ran.stderr
    );

    // The same answers kept for later reviews, ever more of them.
    let answers = gzip(|out| {
        let names = vec!["\"\""; 60_000].join(",");
        for review in 0..100 {
            let asked: Vec<String> = (0..60)
                .map(|q| format!("{{\"dir_sample\":{{\"path\":\"/r{review}q{q}\",\"limit\":5,\"answer\":{{\"ok\":{{\"names\":[{names}],\"counted\":1,\"complete\":true}}}}}}}}"))
                .collect();
            writeln!(
                out,
                "{{\"review\":{{\"now\":1800000001000000000,\"in_flight\":[],\"asked\":[{}],\"told\":[]}}}}",
                asked.join(",")
            )
            .unwrap();
        }
    });
    let answers = record(&scratch, "answers.podstuck", &[(&answers, 1)]);
    let ran = podstuck_in_a_gigabyte(&[OsStr::new("replay"), answers.as_os_str()], Duration::from_secs(300));
    finished_cleanly(&ran, 1, "answers of GBs kept");
    assert!(
        ran.stderr.contains("the answers it keeps for later reviews add up to more than 256 MiB"),
        "{}",
        ran.stderr
    );
}

/// The flood tests watch the whole node, and a pod one of them makes (a
/// root-owned directory under its kubelet root) is a pod to the others'
/// latency books too: run them one at a time, so that each counts only
/// its own pods and calls.
fn one_node_wide_watch_at_a_time() -> std::sync::MutexGuard<'static, ()> {
    static NODE_WIDE: std::sync::Mutex<()> = std::sync::Mutex::new(());
    // A test that failed holding it poisons nothing the others rely on.
    NODE_WIDE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// The files of a short real run: some unlinks in a scratch directory.
fn a_real_run(scratch: &ScratchDir) -> PathBuf {
    let work = scratch.path().join("work");
    std::fs::create_dir_all(&work).unwrap();
    let out = scratch.path().join("histograms");
    let watch = Watch::start(&["--histograms", text(&out), "--interval", "1s", "--syscall", UNLINK_CALL]);
    let ran = actor().args([OsStr::new("unlink-many"), work.as_os_str(), OsStr::new("300")]).output().unwrap();
    assert!(ran.status.success());
    wait_until("the run's 300 calls in its series", Duration::from_secs(30), || {
        series(&out).iter().map(|s| s["count"].as_u64().unwrap_or(0)).sum::<u64>() >= 300
    });
    let finished = watch.stop(libc::SIGINT);
    assert!(finished.status.success(), "{}", finished.stderr);
    out
}

/// The series of a run's summary.json (none while there is none).
fn series(dir: &Path) -> Vec<Value> {
    std::fs::read(dir.join("summary.json"))
        .ok()
        .and_then(|t| serde_json::from_slice::<Value>(&t).ok())
        .and_then(|v| v["series"].as_array().cloned())
        .unwrap_or_default()
}

/// A zlib stream of `data` in stored blocks (what deflate makes of
/// incompressible data), as the histogram log's payloads are wrapped.
fn zlib_stored(data: &[u8]) -> Vec<u8> {
    let mut out = vec![0x78, 0x01];
    let chunks: Vec<&[u8]> = if data.is_empty() { vec![&[][..]] } else { data.chunks(65_535).collect() };
    for (i, chunk) in chunks.iter().enumerate() {
        out.push(u8::from(i + 1 == chunks.len()));
        let len = chunk.len() as u16;
        out.extend_from_slice(&len.to_le_bytes());
        out.extend_from_slice(&(!len).to_le_bytes());
        out.extend_from_slice(chunk);
    }
    let (mut a, mut b) = (1u32, 0u32);
    for byte in data {
        a = (a + *byte as u32) % 65_521;
        b = (b + a) % 65_521;
    }
    out.extend_from_slice(&((b << 16) | a).to_be_bytes());
    out
}

fn hlog_line(tag: &str, payload: &[u8]) -> String {
    format!("Tag={tag},0.000,1.000,0.0,{}\n", base64::engine::general_purpose::STANDARD.encode(payload))
}

fn append(path: &Path, text: &[u8]) {
    std::fs::OpenOptions::new().append(true).open(path).unwrap().write_all(text).unwrap();
}

/// A copy of the run's files, to craft.
fn copy_of(out: &Path, scratch: &ScratchDir, name: &str) -> PathBuf {
    let dir = scratch.path().join(name);
    std::fs::create_dir_all(&dir).unwrap();
    for file in ["summary.json", "latency.hlog"] {
        std::fs::copy(out.join(file), dir.join(file)).unwrap();
    }
    dir
}

kernel_test! {
    fn crafted_histogram_directories_report_within_a_gigabyte(test) {
        let _alone = one_node_wide_watch_at_a_time();
        let scratch = test.scratch();
        let out = a_real_run(&scratch);
        let tag = series(&out)[0]["tag"].as_str().unwrap().to_string();
        let report = |dir: &Path| podstuck_in_a_gigabyte(&[OsStr::new("report"), dir.as_os_str()], Duration::from_secs(120));

        // A histogram whose header claims 2^31 bytes of counts, plain and deflated.
        let claims = copy_of(&out, &scratch, "claims");
        let mut h = Histogram::<u64>::new_with_bounds(1, 3_600_000_000_000, 3).unwrap();
        h.record(5_000).unwrap();
        let mut plain = Vec::new();
        V2Serializer::new().serialize(&h, &mut plain).unwrap();
        plain[4..8].copy_from_slice(&(1u32 << 31).to_be_bytes());
        let mut deflated = 0x1c84_9314u32.to_be_bytes().to_vec();
        let stored = zlib_stored(&plain);
        deflated.extend_from_slice(&(stored.len() as u32).to_be_bytes());
        deflated.extend(stored);
        append(&claims.join("latency.hlog"), (hlog_line(&tag, &plain) + &hlog_line(&tag, &deflated)).as_bytes());
        let ran = report(&claims);
        finished_cleanly(&ran, 0, "a payload claiming 2 GiB");
        assert!(ran.stdout.contains("note: 2 line(s) of latency.hlog could not be read and were skipped"), "{}", ran.stdout);
        assert!(ran.stdout.contains("claims 2147483648 bytes of counts"), "{}", ran.stdout);

        // 10,000 tags, each a series of the summary and a line of the log.
        let many = copy_of(&out, &scratch, "many");
        let mut summary: Value = serde_json::from_slice(&std::fs::read(many.join("summary.json")).unwrap()).unwrap();
        let model = summary["series"][0].clone();
        let mut payload = Vec::new();
        V2DeflateSerializer::new().serialize(&h, &mut payload).unwrap();
        let mut log = String::new();
        let crafted: Vec<Value> = (0..10_000u64)
            .map(|i| {
                let mut s = model.clone();
                let tag = format!("unlink/ok/other/{i:08x}-0000-4000-8000-000000000000");
                log.push_str(&hlog_line(&tag, &payload));
                s["tag"] = tag.into();
                s["count"] = (i + 1).into();
                s
            })
            .collect();
        summary["series"] = crafted.into();
        std::fs::write(many.join("summary.json"), serde_json::to_vec(&summary).unwrap()).unwrap();
        append(&many.join("latency.hlog"), log.as_bytes());
        let ran = report(&many);
        finished_cleanly(&ran, 0, "10,000 tags");
        assert!(ran.stdout.contains("note: 7952 series left out: the summary holds 10000"), "{}", tail(&ran.stdout));
        let json = podstuck_in_a_gigabyte(&[OsStr::new("report"), many.as_os_str(), OsStr::new("--json")], Duration::from_secs(120));
        finished_cleanly(&json, 0, "10,000 tags, --json");
        let json: Value = serde_json::from_str(&json.stdout).unwrap();
        assert_eq!(json["series"].as_array().unwrap().len(), 2048);
        assert!(json["series"].as_array().unwrap().iter().all(|s| s["count_in_log"] == 1));

        // A line of 64 MB: skipped unread.
        let long = copy_of(&out, &scratch, "long");
        let mut line = format!("Tag={tag},0.000,1.000,0.0,").into_bytes();
        line.resize(64 << 20, b'A');
        line.push(b'\n');
        append(&long.join("latency.hlog"), &line);
        let ran = report(&long);
        finished_cleanly(&ran, 0, "a 64 MB line");
        assert!(ran.stdout.contains("note: 1 line(s) of latency.hlog longer than 1 MiB skipped unread"), "{}", ran.stdout);

        // A FIFO, and a link to a device, where latency.hlog should be: refused at once.
        let fifo = copy_of(&out, &scratch, "fifo");
        std::fs::remove_file(fifo.join("latency.hlog")).unwrap();
        nix::unistd::mkfifo(&fifo.join("latency.hlog"), nix::sys::stat::Mode::from_bits_truncate(0o600)).unwrap();
        let ran = podstuck_in_a_gigabyte(&[OsStr::new("report"), fifo.as_os_str()], Duration::from_secs(20));
        finished_cleanly(&ran, 1, "a FIFO");
        assert!(ran.stderr.contains("latency.hlog") && ran.stderr.contains("it is a FIFO, not a regular file"), "{}", ran.stderr);
        std::fs::remove_file(fifo.join("latency.hlog")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", fifo.join("latency.hlog")).unwrap();
        let ran = podstuck_in_a_gigabyte(&[OsStr::new("report"), fifo.as_os_str()], Duration::from_secs(20));
        finished_cleanly(&ran, 1, "a link to /dev/zero");
        assert!(ran.stderr.contains("it is a character device, not a regular file"), "{}", ran.stderr);
    }
}

/// Kernel pid of podstuck's peak resident memory so far (VmHWM), in bytes.
fn peak_rss(pid: i32) -> u64 {
    status_kib(pid as u32, "VmHWM").expect("VmHWM") * 1024
}

fn made_up_uid(n: u64) -> String {
    let nanos = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().subsec_nanos();
    format!("{nanos:08x}-{:04x}-4{:03x}-a{:03x}-{:012x}", std::process::id() & 0xffff, n & 0xfff, (n >> 12) & 0xfff, n)
}

/// Series of summary.json whose pod is `uid`.
fn of_pod<'a>(all: &'a [Value], uid: &str) -> Vec<&'a Value> {
    all.iter().filter(|s| s["pod_uid"] == uid).collect()
}

kernel_test! {
    fn made_up_pods_cost_no_series_and_real_ones_keep_theirs(test) {
        let _alone = one_node_wide_watch_at_a_time();
        let scratch = test.scratch();
        let (root, pod, volume) = pod_with_empty_dir(scratch.path(), "v");
        let real = pod.uid();
        let out = scratch.path().join("histograms");
        let watch = Watch::start(&["--kubelet-root", root.arg(), "--histograms", text(&out), "--interval", "1s"]);

        // 5,000 made-up pods, by nobody, for some 6 s: each unlink fails (ENOENT).
        let made_up: Vec<String> = (0..5_000).map(made_up_uid).collect();
        let paths: Vec<CString> =
            made_up.iter().map(|uid| cstring(&root.pod(uid).dir().join("volumes/x/y"))).collect();
        assert_eq!(unlink_as_nobody(&paths, Duration::from_millis(1)), 5_000);
        // The real pod: 10 failed unlinks by nobody, 100 done by root.
        let in_real: Vec<CString> = (0..10).map(|i| cstring(&volume.join(format!("missing-{i}")))).collect();
        assert_eq!(unlink_as_nobody(&in_real, Duration::ZERO), 10);
        let ran = actor().args([OsStr::new("unlink-many"), volume.as_os_str(), OsStr::new("100")]).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&ran.stdout).trim(), "unlink-many 100 unlinked, 0 failed");

        let count = |all: &[Value], outcome: &str, pod: Option<&str>| -> u64 {
            all.iter()
                .filter(|s| s["syscall"] == UNLINK_CALL && s["outcome"] == outcome && s["pod_uid"].as_str() == pod)
                .map(|s| s["count"].as_u64().unwrap())
                .sum()
        };
        poll_until_else("every call counted", Duration::from_secs(90), || {
            let all = series(&out);
            // Counted, wherever (a podstuck that kept made-up pods apart too).
            let failed: u64 = all.iter().filter(|s| s["syscall"] == UNLINK_CALL && s["outcome"] == "ENOENT").map(|s| s["count"].as_u64().unwrap()).sum();
            match failed >= 5_010 && count(&all, "ok", Some(real)) >= 100 {
                true => Ok(()),
                false => Err(format!("{} series, {failed} failed calls counted", all.len())),
            }
        });
        let peak = peak_rss(watch.pid());
        let finished = watch.stop(libc::SIGINT);
        assert!(finished.status.success(), "{}", finished.stderr);

        let all = series(&out);
        let prom = std::fs::metadata(out.join("metrics.prom")).unwrap().len();
        let summary = std::fs::metadata(out.join("summary.json")).unwrap().len();
        eprintln!("made-up pods: {} series, summary.json {summary} bytes, metrics.prom {prom} bytes, peak RSS {} MB", all.len(), peak >> 20);
        assert!(made_up.iter().all(|uid| of_pod(&all, uid).is_empty()), "a made-up pod has a series");
        assert!(all.len() <= 1024 + 64, "{} series", all.len());
        assert!(prom < 1 << 20, "metrics.prom is {prom} bytes");
        assert!(peak < 200 << 20, "podstuck's peak RSS was {} MB", peak >> 20);
        // The real pod keeps its own series, its failed calls included.
        assert_eq!(count(&all, "ok", Some(real)), 100, "{all:?}");
        assert_eq!(count(&all, "ENOENT", Some(real)), 10, "{all:?}");
        assert!(count(&all, "ENOENT", None) >= 5_000);
    }
}

kernel_test! {
    fn more_pods_than_a_node_has_fold_into_other(test) {
        let _alone = one_node_wide_watch_at_a_time();
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        // 300 real pods (directories of root's), one failed unlink in each.
        let (pods, paths) = root.pods_missing_a_file(300);
        let out = scratch.path().join("histograms");
        let watch = Watch::start(&["--kubelet-root", root.arg(), "--histograms", text(&out), "--interval", "1s", "--syscall", UNLINK_CALL]);
        // One process of their own, pausing so that each call is streamed
        // with its path: not this test binary, whose other threads' calls
        // (another test's clean-up) podstuck would give to its latest pod.
        assert_eq!(unlink_as_nobody(&paths, Duration::from_millis(2)), 300);
        let ours = |all: &[Value]| -> u64 {
            all.iter()
                .filter(|s| s["outcome"] == "ENOENT" && (pods.iter().any(|p| s["pod_uid"] == p.as_str()) || s["tag"].as_str().is_some_and(|t| t.ends_with("/other"))))
                .map(|s| s["count"].as_u64().unwrap())
                .sum()
        };
        poll_until_else("all 300 calls counted", Duration::from_secs(30), || match ours(&series(&out)) {
            300.. => Ok(()),
            counted => Err(format!("{counted} counted")),
        });
        let finished = watch.stop(libc::SIGINT);
        assert!(finished.status.success(), "{}", finished.stderr);
        let all = series(&out);
        assert_eq!(ours(&all), 300, "every call counted, once");
        let apart = pods.iter().filter(|p| !of_pod(&all, p).is_empty()).count();
        // Each call given to its own pod: none holds another's.
        let most = pods.iter().map(|p| of_pod(&all, p).iter().map(|s| s["count"].as_u64().unwrap()).sum::<u64>()).max();
        assert_eq!(most, Some(1), "a pod holds another pod's calls");
        let others: Vec<&Value> = all.iter().filter(|s| s["pod_uid"].is_string() && !pods.iter().any(|p| s["pod_uid"] == p.as_str()) && s["pod_uid"] != "other").collect();
        assert_eq!(apart, 256, "256 pods kept apart; series of pods not the test's: {others:?}");
        let other: Vec<&Value> = all.iter().filter(|s| s["tag"].as_str().is_some_and(|t| t.ends_with("/other"))).collect();
        assert_eq!(other.iter().map(|s| s["count"].as_u64().unwrap()).sum::<u64>(), 44, "{other:?}");
    }
}
