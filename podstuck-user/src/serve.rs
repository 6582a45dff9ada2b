//! `--listen ADDR`: the run's metrics and findings over HTTP, read-only,
//! for the cluster's Prometheus and for whoever asks on the node. Four
//! pages, `GET /metrics` (Prometheus text), `GET /findings` (JSON),
//! `GET /healthz` (for a liveness probe: is the run still going?) and
//! `GET /ready` (for a readiness probe: are the programs attached, or has
//! the run said why it cannot trace and stays up on purpose?); anything
//! else is 404, any other method 405.
//!
//! The pages are rendered by the run (the endpoint printer,
//! [`crate::print::endpoint`]) and published here whole; serving one is
//! copying bytes, so no client ever waits on the tracer nor the tracer on a
//! client. Each connection is its own task, one request then closed,
//! bounded in size ([`MAX_REQUEST_HEAD`]) and in time
//! ([`CONNECTION_TIME`]), and only [`MAX_CONNECTIONS`] at once: a slow or
//! hostile client costs a task for a few seconds, never the tracer.
//!
//! A hand-written HTTP/1.1 server, not hyper: two routes with no request
//! body, no keep-alive and no streaming need a request line and a
//! `Content-Length`, which is fewer lines than wiring hyper's service
//! traits, and no new crates to build on every fresh machine.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{watch, Semaphore};

/// The request line and headers of a request, at most: Prometheus sends
/// under 300 bytes, a browser under 2 KiB.
pub const MAX_REQUEST_HEAD: usize = 8 * 1024;

/// How long a connection may last, from accept to the last byte of the
/// answer: a scrape of the largest page takes milliseconds on a node.
pub const CONNECTION_TIME: Duration = Duration::from_secs(10);

/// Connections served at once; more are closed as they come, until some
/// end (within [`CONNECTION_TIME`]).
pub const MAX_CONNECTIONS: usize = 32;

/// Where `--listen` serves: `PORT` alone is this node only (127.0.0.1),
/// `ADDR:PORT` (`0.0.0.0:9464`, `[::]:9464`) is as given.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenAddr(pub SocketAddr);

impl ListenAddr {
    /// `--listen`'s value: `PORT` or `IP:PORT`; host names are not looked up.
    pub fn parse(value: &str) -> Result<ListenAddr, String> {
        if let Ok(port) = value.parse::<u16>() {
            return Ok(ListenAddr(SocketAddr::new(IpAddr::V4(Ipv4Addr::LOCALHOST), port)));
        }
        if let Some(port) = value.strip_prefix(':') {
            return Err(format!(
                "say which addresses: 0.0.0.0:{port} for every interface (a DaemonSet scraped by the cluster), or {port} for this node only (127.0.0.1)"
            ));
        }
        value.parse::<SocketAddr>().map(ListenAddr).map_err(|_| {
            "not a port nor IP:PORT (e.g. 9464 for 127.0.0.1:9464, 0.0.0.0:9464 for every interface, [::1]:9464)"
                .to_string()
        })
    }
}

impl fmt::Display for ListenAddr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        self.0.fmt(f)
    }
}

/// The address could not be listened on: said before anything is traced.
#[derive(Debug)]
pub struct CannotListen(pub String);

impl fmt::Display for CannotListen {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for CannotListen {}

/// How old the pages may be before `/healthz` says podstuck is not well:
/// they are rendered every second while the run goes on, so a run that
/// has not rendered for this long is stuck (the DaemonSet's liveness probe
/// then restarts it).
pub const HEALTHY_WITHIN: Duration = Duration::from_secs(30);

/// The pages as the run last rendered them.
#[derive(Clone, Debug, Default)]
pub struct Pages {
    /// Prometheus text exposition.
    pub metrics: String,
    /// The findings document, JSON.
    pub findings: String,
    /// When they were rendered.
    pub rendered: Option<std::time::Instant>,
    /// What `/ready` says while the run is ready: tracing with its programs
    /// attached, or not tracing on purpose (`--stay-up` on a node that
    /// cannot be traced); `None` until then, and `/ready` answers 503.
    pub ready: Option<String>,
}

/// The latest pages, as the run publishes them and the server reads them.
pub type Published = watch::Receiver<Arc<Pages>>;

/// A socket bound to the `--listen` address, not serving yet.
pub struct Listener {
    listener: TcpListener,
}

impl Listener {
    /// Binds `addr` now, so that a busy port or an address this node does
    /// not have refuses the run before any program is loaded. Needs the
    /// async runtime.
    pub fn bind(addr: ListenAddr) -> Result<Listener, CannotListen> {
        let refused = |e: std::io::Error| {
            let what = match e.raw_os_error() {
                Some(libc::EADDRINUSE) => format!(
                    "--listen {addr}: the port is in use (another podstuck? `ss -ltnp 'sport = :{}'` says who); choose another port",
                    addr.0.port()
                ),
                Some(libc::EADDRNOTAVAIL) => {
                    format!("--listen {addr}: this node has no such address; use 0.0.0.0:{p} (every interface) or {p} (127.0.0.1)", p = addr.0.port())
                }
                Some(libc::EACCES) => format!("--listen {addr}: not allowed to listen on port {} here; choose a port above 1023", addr.0.port()),
                _ => format!("--listen {addr}: cannot listen there ({e})"),
            };
            CannotListen(what)
        };
        let std = std::net::TcpListener::bind(addr.0).map_err(refused)?;
        std.set_nonblocking(true).map_err(refused)?;
        let listener = TcpListener::from_std(std).map_err(refused)?;
        Ok(Listener { listener })
    }

    /// The address bound (the port chosen, for port 0).
    pub fn local_addr(&self) -> Option<SocketAddr> {
        self.listener.local_addr().ok()
    }

    /// Serves `pages` from now on, in tasks of their own, until the
    /// runtime ends with the run.
    pub fn serve(self, pages: Published) {
        tokio::spawn(accept(self.listener, pages));
    }
}

/// Takes connections, each served by a task of its own; when
/// [`MAX_CONNECTIONS`] are open, new ones are closed at once.
async fn accept(listener: TcpListener, pages: Published) {
    let open = Arc::new(Semaphore::new(MAX_CONNECTIONS));
    loop {
        let stream = match listener.accept().await {
            Ok((stream, _)) => stream,
            // Out of descriptors, or a connection reset before it was
            // taken: wait a little rather than spin, and go on.
            Err(_) => {
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        let Ok(permit) = open.clone().try_acquire_owned() else { continue };
        let pages = pages.clone();
        tokio::spawn(async move {
            let _ = tokio::time::timeout(CONNECTION_TIME, answer(stream, &pages)).await;
            drop(permit);
        });
    }
}

/// One request, one answer, closed.
async fn answer(mut stream: TcpStream, pages: &Published) -> std::io::Result<()> {
    let reply = match read_request(&mut stream).await? {
        Ok(request) => reply_to(&request, &pages.borrow().clone()),
        Err(refusal) => Reply::refusal(refusal),
    };
    stream.write_all(&reply.bytes()).await?;
    stream.shutdown().await
}

/// Reads until the request's head is whole (or refused): at most
/// [`MAX_REQUEST_HEAD`] bytes. A client that closes mid-head gets nothing.
async fn read_request(stream: &mut TcpStream) -> std::io::Result<Result<Request, Refusal>> {
    let mut head = Vec::with_capacity(512);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        head.extend_from_slice(&chunk[..n]);
        match parse_head(&head) {
            Ok(None) if head.len() > MAX_REQUEST_HEAD => return Ok(Err(Refusal::TooLarge)),
            Ok(None) => {}
            Ok(Some(request)) => return Ok(Ok(request)),
            Err(refusal) => return Ok(Err(refusal)),
        }
    }
}

/// What a client may ask for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Page {
    Metrics,
    Findings,
    Health,
    Ready,
}

/// A request understood: the page and whether the body is wanted (HEAD
/// asks for the headers only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request {
    pub page: Option<Page>,
    pub head_only: bool,
}

/// Why a request gets no page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// Not an HTTP/1 request line.
    Malformed,
    /// A method other than GET or HEAD: nothing here can be changed.
    Method,
    /// A head longer than [`MAX_REQUEST_HEAD`].
    TooLarge,
    /// HTTP/2 or later without an upgrade.
    Version,
}

/// Headers a request may carry; a scraper sends a handful.
const MAX_HEADERS: usize = 64;

/// Reads a request's head with httparse: `None` while it is not whole yet.
/// The request line decides everything; headers are not needed (no body
/// is read, every connection closes).
pub(crate) fn parse_head(head: &[u8]) -> Result<Option<Request>, Refusal> {
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut parsed = httparse::Request::new(&mut headers);
    match parsed.parse(head) {
        Ok(httparse::Status::Partial) => return Ok(None),
        Ok(httparse::Status::Complete(_)) => {}
        Err(httparse::Error::TooManyHeaders) => return Err(Refusal::TooLarge),
        // HTTP/2's preface and HTTP/3 are no HTTP/1 version; anything else
        // after the target is not HTTP at all.
        Err(httparse::Error::Version) => {
            let line = head.split(|b| *b == b'\n').next().unwrap_or_default();
            let said = line.rsplit(|b| *b == b' ').next().unwrap_or_default();
            return Err(if said.starts_with(b"HTTP/") && line.iter().filter(|b| **b == b' ').count() == 2 {
                Refusal::Version
            } else {
                Refusal::Malformed
            });
        }
        Err(_) => return Err(Refusal::Malformed),
    }
    let (Some(method), Some(target)) = (parsed.method, parsed.path) else { return Err(Refusal::Malformed) };
    // httparse takes any token for a method; HTTP's are upper case.
    if !method.bytes().all(|b| b.is_ascii_uppercase()) {
        return Err(Refusal::Malformed);
    }
    let head_only = match method {
        "GET" => false,
        "HEAD" => true,
        _ => return Err(Refusal::Method),
    };
    // Prometheus may add parameters; the pages take none.
    let path = target.split_once('?').map_or(target, |(path, _)| path);
    let page = match path {
        "/metrics" => Some(Page::Metrics),
        "/findings" => Some(Page::Findings),
        "/healthz" => Some(Page::Health),
        "/ready" => Some(Page::Ready),
        _ => None,
    };
    Ok(Some(Request { page, head_only }))
}

/// An answer, about to be written.
#[derive(Debug, PartialEq, Eq)]
pub struct Reply {
    pub status: &'static str,
    pub content_type: &'static str,
    pub body: Vec<u8>,
    pub head_only: bool,
    /// `Allow`, for a 405.
    pub allow: bool,
}

/// Prometheus' text exposition format, version 0.0.4.
const PROMETHEUS_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";
const JSON: &str = "application/json";
const TEXT: &str = "text/plain; charset=utf-8";

impl Reply {
    fn text(status: &'static str, body: &str) -> Reply {
        Reply { status, content_type: TEXT, body: format!("{body}\n").into_bytes(), head_only: false, allow: false }
    }

    fn refusal(refusal: Refusal) -> Reply {
        match refusal {
            Refusal::Malformed => Reply::text("400 Bad Request", "not an HTTP/1 request"),
            Refusal::Method => Reply {
                allow: true,
                ..Reply::text(
                    "405 Method Not Allowed",
                    "podstuck serves GET /metrics, /findings, /healthz and /ready, read-only",
                )
            },
            Refusal::TooLarge => Reply::text("431 Request Header Fields Too Large", "request head too large"),
            Refusal::Version => Reply::text("505 HTTP Version Not Supported", "HTTP/1.1 only"),
        }
    }

    /// The status line, headers and body, as sent.
    pub fn bytes(&self) -> Vec<u8> {
        let allow = if self.allow { "Allow: GET, HEAD\r\n" } else { "" };
        let mut bytes = format!(
            "HTTP/1.1 {}\r\nContent-Type: {}\r\nContent-Length: {}\r\n{allow}Cache-Control: no-store\r\nConnection: close\r\n\r\n",
            self.status,
            self.content_type,
            self.body.len()
        )
        .into_bytes();
        if !self.head_only {
            bytes.extend_from_slice(&self.body);
        }
        bytes
    }
}

/// The answer to a request understood.
pub fn reply_to(request: &Request, pages: &Pages) -> Reply {
    let (content_type, body) = match request.page {
        Some(Page::Metrics) => (PROMETHEUS_TEXT, pages.metrics.as_bytes()),
        Some(Page::Findings) => (JSON, pages.findings.as_bytes()),
        Some(Page::Health) => {
            let reply = match pages.rendered.map(|at| at.elapsed()) {
                Some(age) if age <= HEALTHY_WITHIN => Reply::text("200 OK", "ok"),
                Some(age) => Reply::text(
                    "503 Service Unavailable",
                    &format!("podstuck has not rendered its pages for {} s: its run is stuck", age.as_secs()),
                ),
                None => Reply::text("503 Service Unavailable", "podstuck has not started tracing yet"),
            };
            return Reply { head_only: request.head_only, ..reply };
        }
        Some(Page::Ready) => {
            // Ready once the run said it traces (or cannot, on purpose), and
            // only while it still renders: a version whose loop is stuck
            // must not count as available to a rollout.
            let reply = match (&pages.ready, pages.rendered.map(|at| at.elapsed())) {
                (Some(words), Some(age)) if age <= HEALTHY_WITHIN => Reply::text("200 OK", words),
                (Some(_), Some(age)) => Reply::text(
                    "503 Service Unavailable",
                    &format!("podstuck has not rendered its pages for {} s: its run is stuck", age.as_secs()),
                ),
                _ => Reply::text("503 Service Unavailable", "podstuck has not attached its programs yet"),
            };
            return Reply { head_only: request.head_only, ..reply };
        }
        None => {
            return Reply {
                head_only: request.head_only,
                ..Reply::text("404 Not Found", "podstuck serves /metrics, /findings, /healthz and /ready")
            }
        }
    };
    Reply { status: "200 OK", content_type, body: body.to_vec(), head_only: request.head_only, allow: false }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_port_alone_is_this_node_only_and_an_address_is_as_given() {
        assert_eq!(ListenAddr::parse("9464").unwrap().to_string(), "127.0.0.1:9464");
        assert_eq!(ListenAddr::parse("0.0.0.0:9464").unwrap().to_string(), "0.0.0.0:9464");
        assert_eq!(ListenAddr::parse("[::]:9464").unwrap().to_string(), "[::]:9464");
        let colon = ListenAddr::parse(":9464").unwrap_err();
        assert!(colon.contains("0.0.0.0:9464") && colon.contains("127.0.0.1"), "{colon}");
        for bad in ["localhost:9464", "99999", "1.2.3.4", "", "http://0.0.0.0:9464"] {
            assert!(ListenAddr::parse(bad).unwrap_err().contains("not a port nor IP:PORT"), "{bad}");
        }
    }

    fn parsed(head: &str) -> Result<Request, Refusal> {
        parse_head(head.as_bytes()).and_then(|r| r.ok_or(Refusal::Malformed))
    }

    #[test]
    fn requests_are_read_from_their_request_line() {
        let scrape = "GET /metrics HTTP/1.1\r\nHost: 10.0.0.1:9464\r\nAccept: text/plain\r\nUser-Agent: Prometheus/2.42.0\r\n\r\n";
        assert_eq!(parsed(scrape), Ok(Request { page: Some(Page::Metrics), head_only: false }));
        assert_eq!(
            parsed("GET /findings?x=1 HTTP/1.0\n\n"),
            Ok(Request { page: Some(Page::Findings), head_only: false })
        );
        assert_eq!(
            parsed("HEAD /metrics HTTP/1.1\r\n\r\n"),
            Ok(Request { page: Some(Page::Metrics), head_only: true })
        );
        assert_eq!(parsed("GET / HTTP/1.1\r\n\r\n"), Ok(Request { page: None, head_only: false }));
        assert_eq!(parsed("GET /metrics/../etc HTTP/1.1\r\n\r\n"), Ok(Request { page: None, head_only: false }));
        for method in ["POST", "PUT", "DELETE", "OPTIONS", "PATCH"] {
            assert_eq!(parsed(&format!("{method} /metrics HTTP/1.1\r\n\r\n")), Err(Refusal::Method), "{method}");
        }
        assert_eq!(parsed("PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), Err(Refusal::Version));
        for bad in [
            "GET /metrics\r\n\r\n",
            "GET  /metrics HTTP/1.1\r\n\r\n",
            "get /metrics HTTP/1.1\r\n\r\n",
            "\u{16}\u{3}\u{1}",
            "GET /metrics SMTP\r\n\r\n",
        ] {
            assert_eq!(parsed(bad), Err(Refusal::Malformed), "{bad:?}");
        }
        assert_eq!(parse_head(b"GET /\xff HTTP/1.1\r\n\r\n"), Err(Refusal::Malformed));
    }

    #[test]
    fn health_says_whether_the_run_still_renders() {
        let health = |rendered| {
            reply_to(&Request { page: Some(Page::Health), head_only: false }, &Pages { rendered, ..Pages::default() })
        };
        assert_eq!(parsed("GET /healthz HTTP/1.1\r\n\r\n"), Ok(Request { page: Some(Page::Health), head_only: false }));
        assert_eq!(health(Some(std::time::Instant::now())).status, "200 OK");
        let stale = std::time::Instant::now().checked_sub(HEALTHY_WITHIN + Duration::from_secs(5));
        if let Some(stale) = stale {
            let reply = health(Some(stale));
            assert_eq!(reply.status, "503 Service Unavailable");
            assert!(String::from_utf8(reply.body).unwrap().contains("its run is stuck"));
        }
        assert_eq!(health(None).status, "503 Service Unavailable");
    }

    #[test]
    fn ready_says_whether_the_programs_are_attached_or_the_run_stays_up_on_purpose() {
        let ready = |ready: Option<&str>, rendered| {
            let pages = Pages { rendered, ready: ready.map(str::to_string), ..Pages::default() };
            reply_to(&Request { page: Some(Page::Ready), head_only: false }, &pages)
        };
        assert_eq!(parsed("GET /ready HTTP/1.1\r\n\r\n"), Ok(Request { page: Some(Page::Ready), head_only: false }));
        let now = Some(std::time::Instant::now());
        // Before the programs are attached: not ready, however fresh.
        let waiting = ready(None, now);
        assert_eq!(waiting.status, "503 Service Unavailable");
        assert!(String::from_utf8(waiting.body).unwrap().contains("has not attached its programs yet"));
        assert_eq!(ready(None, None).status, "503 Service Unavailable");
        let tracing = ready(Some("tracing"), now);
        assert_eq!((tracing.status, String::from_utf8(tracing.body).unwrap().as_str()), ("200 OK", "tracing\n"));
        let stale = std::time::Instant::now().checked_sub(HEALTHY_WITHIN + Duration::from_secs(5));
        if let Some(stale) = stale {
            assert_eq!(ready(Some("tracing"), Some(stale)).status, "503 Service Unavailable");
        }
    }

    #[test]
    fn a_head_is_whole_at_its_blank_line_and_bounded() {
        assert_eq!(parse_head(b"GET /metrics HTTP/1.1\r\nHost: x\r\n"), Ok(None));
        assert_eq!(parse_head(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\nbody").map(|r| r.is_some()), Ok(true));
        assert_eq!(parse_head(b"GET /metrics HTTP/1.1\n\n").map(|r| r.is_some()), Ok(true));
        let many: String = (0..MAX_HEADERS + 1).map(|i| format!("X-{i}: y\r\n")).collect();
        assert_eq!(parsed(&format!("GET /metrics HTTP/1.1\r\n{many}\r\n")), Err(Refusal::TooLarge));
    }

    #[test]
    fn replies_say_their_length_and_close() {
        let pages = Pages {
            metrics: "podstuck_up 1\n".into(),
            findings: "{}".into(),
            rendered: Some(std::time::Instant::now()),
            ready: None,
        };
        let get = |page| reply_to(&Request { page, head_only: false }, &pages);
        let metrics = String::from_utf8(get(Some(Page::Metrics)).bytes()).unwrap();
        assert_eq!(
            metrics,
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4; charset=utf-8\r\nContent-Length: 14\r\nCache-Control: no-store\r\nConnection: close\r\n\r\npodstuck_up 1\n"
        );
        assert!(String::from_utf8(get(Some(Page::Findings)).bytes())
            .unwrap()
            .contains("Content-Type: application/json\r\n"));
        assert!(String::from_utf8(get(None).bytes()).unwrap().starts_with("HTTP/1.1 404 Not Found\r\n"));
        let head = reply_to(&Request { page: Some(Page::Metrics), head_only: true }, &pages).bytes();
        assert!(String::from_utf8(head)
            .unwrap()
            .ends_with("Content-Length: 14\r\nCache-Control: no-store\r\nConnection: close\r\n\r\n"));
        assert!(String::from_utf8(get(Some(Page::Health)).bytes()).unwrap().ends_with("\r\n\r\nok\n"));
        let refused = String::from_utf8(Reply::refusal(Refusal::Method).bytes()).unwrap();
        assert!(
            refused.starts_with("HTTP/1.1 405 Method Not Allowed\r\n") && refused.contains("\r\nAllow: GET, HEAD\r\n"),
            "{refused}"
        );
    }
}
