//! What reads `podstuck watch --listen`: a plain HTTP client that sends
//! exactly the bytes a test wants (odd requests included), and a real
//! Prometheus (Debian's `prometheus`, which `cargo xtask test` installs)
//! scraping podstuck every second, asked through its HTTP API, and, for
//! the alert tests, evaluating deploy/'s rule files every second too. The
//! Prometheus is killed on drop.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use serde_json::Value;

use crate::prerequisite::{missing, this_test};
use crate::wait::{poll_until_else, timed_out, within};

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
    let bytes = send_bytes(addr, request)?;
    let text = String::from_utf8_lossy(&bytes).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Ok(Answer { status, head: head.to_string(), body: body.to_string() })
}

/// Sends `request` and reads the answer's bytes until the server closes.
fn send_bytes(addr: SocketAddr, request: &[u8]) -> std::io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect_timeout(&addr, Duration::from_secs(5))?;
    stream.set_read_timeout(Some(Duration::from_secs(10)))?;
    stream.write_all(request)?;
    let mut bytes = Vec::new();
    stream.read_to_end(&mut bytes)?;
    Ok(bytes)
}

/// `GET path`, as Prometheus asks.
pub fn get(addr: SocketAddr, path: &str) -> Answer {
    try_get(addr, path).unwrap_or_else(|e| panic!("GET http://{addr}{path}: {e}"))
}

/// `GET path`, or why it could not be asked (a harness that reports a
/// podstuck gone rather than panic).
pub fn try_get(addr: SocketAddr, path: &str) -> std::io::Result<Answer> {
    send(addr, get_request(addr, path).as_bytes())
}

fn get_request(addr: SocketAddr, path: &str) -> String {
    // Prometheus keeps a connection open unless told; the answer ends at close.
    format!(
        "GET {path} HTTP/1.1\r\nHost: {addr}\r\nUser-Agent: podstuck-tests\r\nAccept: */*\r\nConnection: close\r\n\r\n"
    )
}

/// `GET path` of Prometheus' API, whose longer answers (the rules, many
/// samples) come chunked: the body put back together.
fn api_get(addr: SocketAddr, path: &str) -> Answer {
    let bytes =
        send_bytes(addr, get_request(addr, path).as_bytes()).unwrap_or_else(|e| panic!("GET http://{addr}{path}: {e}"));
    let split = bytes.windows(4).position(|w| w == b"\r\n\r\n").unwrap_or(bytes.len());
    let head = String::from_utf8_lossy(&bytes[..split]).into_owned();
    let mut body = bytes.get(split + 4..).unwrap_or_default().to_vec();
    if head.to_ascii_lowercase().contains("\r\ntransfer-encoding: chunked") {
        body = unchunked(&body).unwrap_or_else(|| {
            panic!("GET http://{addr}{path}: a broken chunked body: {head}\n{}", String::from_utf8_lossy(&body))
        });
    }
    let status = head.split(' ').nth(1).and_then(|s| s.parse().ok()).unwrap_or(0);
    Answer { status, head, body: String::from_utf8_lossy(&body).into_owned() }
}

/// A chunked HTTP/1.1 body's data (RFC 9112, 7.1); `None` if it is cut
/// short or malformed.
fn unchunked(mut rest: &[u8]) -> Option<Vec<u8>> {
    let mut data = Vec::new();
    loop {
        let end = rest.windows(2).position(|w| w == b"\r\n")?;
        let size_line = std::str::from_utf8(&rest[..end]).ok()?;
        let size = usize::from_str_radix(size_line.split(';').next()?.trim(), 16).ok()?;
        if size == 0 {
            return Some(data);
        }
        let chunk = rest.get(end + 2..end + 2 + size)?;
        data.extend_from_slice(chunk);
        rest = rest.get(end + 2 + size..)?.strip_prefix(b"\r\n")?;
    }
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

/// The `pod` label [`Prometheus::start_with_rules`] gives its target, as
/// Kubernetes service discovery names podstuck's own pod.
pub const SD_POD: &str = "podstuck-7xk2p";

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
        let config = format!(
            "global:\n  scrape_interval: 1s\n  scrape_timeout: 1s\nscrape_configs:\n  - job_name: podstuck\n    static_configs:\n      - targets: ['{target}']\n"
        );
        Prometheus::launch(dir, &config)
    }

    /// Like [`start`](Prometheus::start), and also loads `rules` (rule
    /// files, as `rule_files:` lists them) and evaluates them every second,
    /// so an alert's `ALERTS` series shows within seconds of its cause
    /// (pending, until its `for:` has passed).
    ///
    /// Scraped the way docs/monitoring.md tells a cluster to: job
    /// `podstuck`, and the target labelled as Kubernetes service discovery
    /// labels a pod's (`namespace`, and a `pod` of podstuck's own name,
    /// beside podstuck's `pod_uid` of the stuck pod).
    pub fn start_with_rules(dir: &Path, target: SocketAddr, rules: &[&Path]) -> Option<Prometheus> {
        let rule_files: String = rules.iter().map(|r| format!("  - '{}'\n", r.display())).collect();
        let config = [
            "global:",
            "  scrape_interval: 1s",
            "  scrape_timeout: 1s",
            "  evaluation_interval: 1s",
            "rule_files:",
            rule_files.trim_end(),
            "scrape_configs:",
            "  - job_name: podstuck",
            "    static_configs:",
            &format!("      - targets: ['{target}']"),
            "        labels:",
            "          namespace: podstuck",
            &format!("          pod: {SD_POD}"),
            "",
        ]
        .join("\n");
        Prometheus::launch(dir, &config)
    }

    fn launch(dir: &Path, config_text: &str) -> Option<Prometheus> {
        if !Path::new(PROMETHEUS).exists() {
            return missing(
                &this_test(),
                &format!("Debian's prometheus ({PROMETHEUS})"),
                "apt-get install prometheus, or run `cargo xtask test`, which does",
            );
        }
        std::fs::create_dir_all(dir).unwrap();
        let config = dir.join("prometheus.yml");
        std::fs::write(&config, config_text).unwrap();
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
        let ready = poll_until_else("prometheus to be ready", Duration::from_secs(60), || {
            if try_get(addr, "/-/ready").is_ok_and(|a| a.status == 200) {
                return Ok(Ok(()));
            }
            match prometheus.child.try_wait().ok().flatten() {
                Some(status) => Ok(Err(status)),
                None => Err(format!("prometheus log:\n{}", prometheus.log())),
            }
        });
        if let Err(status) = ready {
            panic!("prometheus exited ({status}): {}", prometheus.log());
        }
        Some(prometheus)
    }

    /// What Prometheus said on stderr.
    pub fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The samples of an instant `query` now: `data.result`.
    pub fn query(&self, query: &str) -> Vec<Value> {
        let json = self.try_query(query);
        assert_eq!(json["status"], "success", "{query}: {json}");
        json["data"]["result"].as_array().cloned().unwrap_or_default()
    }

    /// Prometheus' whole answer to an instant `query`, an error included
    /// (`status` "error", `error` saying why).
    pub fn try_query(&self, query: &str) -> Value {
        let answer = api_get(self.addr, &format!("/api/v1/query?query={}", url_encoded(query)));
        serde_json::from_str(&answer.body).unwrap_or_else(|e| panic!("{query}: {e}: {answer:?}"))
    }

    /// The rule groups loaded, as `/api/v1/rules` lists them: each rule
    /// with its `health` ("ok" once evaluated without error) and
    /// `lastError`.
    pub fn rule_groups(&self) -> Vec<Value> {
        let answer = api_get(self.addr, "/api/v1/rules");
        let json: Value =
            serde_json::from_str(&answer.body).unwrap_or_else(|e| panic!("/api/v1/rules: {e}: {answer:?}"));
        assert_eq!(json["status"], "success", "/api/v1/rules: {json}");
        json["data"]["groups"].as_array().cloned().unwrap_or_default()
    }

    /// The rule groups, once every rule has been evaluated at least once
    /// (no `health` "unknown" left); panics after `timeout`.
    pub fn await_rules_evaluated(&self, timeout: Duration) -> Vec<Value> {
        poll_until_else("every rule to be evaluated", timeout, || {
            let groups = self.rule_groups();
            let mut rules = groups.iter().flat_map(|g| g["rules"].as_array().cloned().unwrap_or_default());
            match !groups.is_empty() && rules.all(|r| r["health"] != "unknown") {
                true => Ok(groups),
                false => Err(format!("rules: {groups:?}\nprometheus log:\n{}", self.log())),
            }
        })
    }

    /// Waits until the samples of `query` satisfy `done`, and returns them;
    /// panics after `timeout` with what it gave last.
    pub fn await_samples(&self, query: &str, timeout: Duration, done: impl Fn(&[Value]) -> bool) -> Vec<Value> {
        let mut result = Vec::new();
        let reached = within(timeout, || {
            result = self.query(query);
            done(&result).then_some(())
        });
        if reached.is_none() {
            panic!(
                "{}\n{}",
                timed_out(&format!("the samples {query} gives"), timeout),
                self.last_said(&format!("{result:?}"))
            );
        }
        result
    }

    /// Waits until `query` gives one sample whose value is `want`, and
    /// returns it; panics after `timeout` with what it gave last.
    pub fn await_value(&self, query: &str, want: f64, timeout: Duration) -> Value {
        let mut result = Vec::new();
        let sample = within(timeout, || {
            result = self.query(query);
            match &result[..] {
                [sample] if sample["value"][1].as_str().and_then(|v| v.parse::<f64>().ok()) == Some(want) => {
                    Some(sample.clone())
                }
                _ => None,
            }
        });
        sample.unwrap_or_else(|| {
            let what = format!("{query} to give one sample of {want}");
            panic!("{}\n{}", timed_out(&what, timeout), self.last_said(&format!("{result:?}")))
        })
    }

    /// What a timed-out wait saw last (`gave`, the samples), the targets
    /// and the log.
    fn last_said(&self, gave: &str) -> String {
        let targets = get(self.addr, "/api/v1/targets").body;
        format!("it gave {gave}\ntargets: {targets}\nprometheus log:\n{}", self.log())
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}
