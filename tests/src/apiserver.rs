//! A stand-in Kubernetes API server on loopback, for `podstuck explain`
//! and `watch --pod NS/NAME`: plain HTTP on 127.0.0.1, answering the GETs
//! the client really makes with objects and lists built from `k8s-openapi`
//! types (so apiVersion, kind and list shapes are the real ones), a
//! `Status` body for anything it was not given (404), and any status a
//! test sets (401, 403). Every request is recorded, with whether it
//! carried the kubeconfig's token, to assert what was asked.

use std::collections::HashMap;
use std::io::{BufRead, BufReader, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use k8s_openapi::{ListableResource, Resource};
use serde::Serialize;
use serde_json::{json, Value};

/// The token the kubeconfig of [`ApiServer::kubeconfig`] carries.
pub const TOKEN: &str = "podstuck-test-token";

/// One request as the server saw it.
#[derive(Clone, Debug)]
pub struct Request {
    /// The path with its query, as sent ("/api/v1/namespaces/shop/events?fieldSelector=...").
    pub target: String,
    /// It carried `Authorization: Bearer TOKEN`.
    pub with_token: bool,
}

type Routes = Arc<Mutex<HashMap<String, (u16, String)>>>;

/// The server; stops on drop.
pub struct ApiServer {
    port: u16,
    routes: Routes,
    requests: Arc<Mutex<Vec<Request>>>,
    stop: Arc<AtomicBool>,
}

impl ApiServer {
    pub fn start() -> ApiServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the API stand-in");
        let port = listener.local_addr().unwrap().port();
        let routes: Routes = Arc::default();
        let requests: Arc<Mutex<Vec<Request>>> = Arc::default();
        let stop = Arc::new(AtomicBool::new(false));
        let (r, q, s) = (routes.clone(), requests.clone(), stop.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                let (r, q) = (r.clone(), q.clone());
                std::thread::spawn(move || answer(stream, &r, &q));
            }
        });
        ApiServer { port, routes, requests, stop }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// Answers GET `path` (no query) with `status` and `body`.
    pub fn route(&self, path: &str, status: u16, body: &impl Serialize) {
        self.routes.lock().unwrap().insert(path.to_string(), (status, serde_json::to_string(body).unwrap()));
    }

    /// Serves `object` at its own URL.
    pub fn object<T: Resource + Serialize>(&self, object: &T, namespace: Option<&str>, name: &str) {
        self.route(&format!("{}/{name}", collection::<T>(namespace)), 200, object);
    }

    /// Serves `items` as the `T` list of `namespace` (or of the cluster).
    pub fn list<T: ListableResource + Serialize + Clone>(&self, namespace: Option<&str>, items: &[T]) {
        let list = k8s_openapi::List::<T> { items: items.to_vec(), metadata: Default::default() };
        self.route(&collection::<T>(namespace), 200, &list);
    }

    /// Answers GET `path` with a `Status` of `code` as the API server
    /// words it (`verb` on `resource`).
    pub fn refuse(&self, path: &str, code: u16, verb: &str, resource: &str, namespace: &str) {
        let (reason, message) = match code {
            401 => ("Unauthorized", "Unauthorized".to_string()),
            403 => (
                "Forbidden",
                format!("{resource} is forbidden: User \"system:serviceaccount:tools:viewer\" cannot {verb} resource \"{resource}\" in API group \"\" in the namespace \"{namespace}\""),
            ),
            _ => ("InternalError", "refused".to_string()),
        };
        let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message, "reason": reason,
            "details": {"kind": resource}, "code": code});
        self.route(path, code, &body);
    }

    /// Every request so far.
    pub fn requests(&self) -> Vec<Request> {
        self.requests.lock().unwrap().clone()
    }

    /// A kubeconfig in `dir` that reaches this server with [`TOKEN`].
    pub fn kubeconfig(&self, dir: &Path) -> PathBuf {
        kubeconfig_for(dir, &self.url())
    }
}

/// A kubeconfig in `dir` for the server at `url` (plain HTTP), with [`TOKEN`].
pub fn kubeconfig_for(dir: &Path, url: &str) -> PathBuf {
    let path = dir.join("kubeconfig");
    let config = json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "test",
        "clusters": [{"name": "test", "cluster": {"server": url}}],
        "users": [{"name": "test", "user": {"token": TOKEN}}],
        "contexts": [{"name": "test", "context": {"cluster": "test", "user": "test", "namespace": "shop"}}],
    });
    std::fs::write(&path, config.to_string()).unwrap();
    path
}

/// The URL of `T`'s collection, as the client builds it.
fn collection<T: Resource>(namespace: Option<&str>) -> String {
    let base = match T::GROUP {
        "" => format!("/api/{}", T::VERSION),
        group => format!("/apis/{group}/{}", T::VERSION),
    };
    match namespace {
        Some(ns) => format!("{base}/namespaces/{ns}/{}", T::URL_PATH_SEGMENT),
        None => format!("{base}/{}", T::URL_PATH_SEGMENT),
    }
}

impl Drop for ApiServer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
    }
}

/// Reads one request's head, records it, answers and closes.
fn answer(stream: TcpStream, routes: &Routes, requests: &Mutex<Vec<Request>>) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut first = String::new();
    if reader.read_line(&mut first).is_err() {
        return;
    }
    let mut with_token = false;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if lower.starts_with("authorization:") && line.trim_end().ends_with(&format!("Bearer {TOKEN}")) {
            with_token = true;
        }
    }
    let target = first.split_whitespace().nth(1).unwrap_or("").to_string();
    requests.lock().unwrap().push(Request { target: target.clone(), with_token });
    let path = target.split('?').next().unwrap_or("");
    let (status, body) = routes.lock().unwrap().get(path).cloned().unwrap_or_else(|| {
        let name = path.rsplit('/').next().unwrap_or("");
        let status: Value = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("\"{name}\" not found"), "reason": "NotFound", "details": {"name": name}, "code": 404});
        (404, status.to_string())
    });
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 {status} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        if status == 200 { "OK" } else { "Error" },
        body.len()
    );
    let _ = stream.flush();
}
