//! What reads `podstuck watch --listen`: a plain HTTP client that sends
//! exactly the bytes a test wants (odd requests included), and a real
//! Prometheus (Debian's `prometheus`, which `cargo xtask test` installs)
//! scraping podstuck every second, asked through its HTTP API. The
//! Prometheus is killed on drop.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

use crate::prerequisite::{missing, this_test};

/// A port nothing listens on now, on 127.0.0.1.
pub fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port()
}

/// An answer as it came: status code, head, body.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub head: String,
    pub body: String,
}

/// Sends `request` as it is to `addr` and reads the answer until the
/// server closes (10 s at most).
pub fn send(addr: SocketAddr, request: &[u8]) -> std::io::Result<Answer> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(request)?;
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes)?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok(Answer { status, head: head.to_string(), body: body.to_string() })
}

/// `GET path`, as Prometheus asks.
pub fn get(addr: SocketAddr, path: &str) -> Answer {
    try_get(addr, path).unwrap_or_else(|e| panic!("GET http://{addr}{path}: {e}"))
}

/// `GET path`, or why it could not be asked (a harness that reports a
/// podstuck gone rather than panic).
pub fn try_get(addr: SocketAddr, path: &str) -> std::io::Result<Answer> {
    // Prometheus keeps a connection open unless told; the answer ends at close.
    let request = format!("GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: podstuck-tests\r\nAccept: */*\r\nConnection: close\r\n\r\n");
    send(addr, request.as_bytes())
}

/// A URL query's value, percent-encoded.
fn url_encoded(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

const PROMETHEUS: &str = "/usr/bin/prometheus";

/// A Prometheus of the test's own, scraping one target every second.
pub struct Prometheus {
    child: Child,
    addr: SocketAddr,
    log: PathBuf,
}

impl Prometheus {
    /// Starts Prometheus in `dir` (its config, its data, its log) scraping
    /// `target` (`127.0.0.1:PORT`) every second, and waits until it is
    /// ready. Without Debian's prometheus the test fails (`None` where
    /// skips are allowed).
    pub fn start(dir: &Path, target: SocketAddr) -> Option<Prometheus> {
        if !Path::new(PROMETHEUS).exists() {
            return missing(
                &this_test(),
                &format!("Debian's prometheus ({PROMETHEUS})"),
                "apt-get install prometheus, or run `cargo xtask test`, which does",
            );
        }
        std::fs::create_dir_all(dir).unwrap();
        let config = dir.join("prometheus.yml");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: podstuck\n    static_configs:\n      - targets: ['{target}']\n"
            ),
        )
        .unwrap();
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let log = dir.join("prometheus.log");
        let child = Command::new(PROMETHEUS)
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.join("data").display()))
            .arg(format!("--web.listen-address={addr}"))
            .arg("--log.level=warn")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start prometheus");
        let mut prometheus = Prometheus { child, addr, log };
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if try_get(addr, "/-/ready").is_ok_and(|a| a.status == 200) {
                return Some(prometheus);
            }
            if let Ok(Some(status)) = prometheus.child.try_wait() {
                panic!("prometheus exited ({status}): {}", prometheus.log());
            }
            assert!(Instant::now() < deadline, "prometheus not ready within 60 s: {}", prometheus.log());
            std::thread::sleep(Duration::from_millis(200));
        }
    }

    /// What Prometheus said on stderr.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The samples of an instant `query` now: `data.result`.
    pub fn query(&self, query: &str) -> Vec<Value> {
        let answer = get(self.addr, &format!("/api/v1/query?query={}", url_encoded(query)));
        let json: Value = serde_json::from_str(&answer.body).unwrap_or_else(|e| panic!("{query}: {e}: {answer:?}"));
        assert_eq!(json["status"], "success", "{query}: {json}");
        json["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// Waits until `query` gives one sample whose value is `want`, and
    /// returns it; panics after `timeout` with what it gave last.
    pub fn await_value(&self, query: &str, want: f64, timeout: Duration) -> Value {
        let deadline = Instant::now() + timeout;
        loop {
            let result = self.query(query);
            if let [sample] = &result[..] {
                if sample["value"][1].as_str().and_then(|v| v.parse::<f64>().ok()) == Some(want) {
                    return sample.clone();
                }
            }
            if Instant::now() >= deadline {
                let targets = get(self.addr, "/api/v1/targets").body;
                panic!("{query} gave {result:?}, not {want}, within {timeout:?}\ntargets: {targets}\nprometheus log:\n{}", self.log());
            }
            std::thread::sleep(Duration::from_millis(250));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
