//! A stand-in Kubernetes API server on loopback, for `podstuck explain`,
//! `watch --pod NS/NAME` and `watch --events`: plain HTTP on 127.0.0.1,
//! answering the GETs the client really makes with objects and lists
//! built from `k8s-openapi` types (so apiVersion, kind and list shapes are
//! the real ones), a `Status` body for anything it was not given (404),
//! and any status a test sets (401, 403). POST creates the object it is
//! sent (served at its URL after), PATCH merges into it (JSON merge
//! patch); pods listed with `fieldSelector=spec.nodeName=N` are those
//! [`ApiServer::node_pods`] put on N; lists are filtered by an equality
//! `labelSelector`; [`ApiServer::pods`] serves pods across namespaces (a
//! cluster's worth for `explain --all`). The pod proxy,
//! `/api/v1/namespaces/NS/pods/NAME:PORT/proxy/PATH`, is passed on to a
//! real local address ([`ApiServer::proxy_pod`]), as the real server
//! passes it to the pod through its node's kubelet: a real podstuck
//! `--listen` answers it. It can go down and come back mid-run
//! ([`ApiServer::go_down`]). Every request is recorded, with its method,
//! body and whether it carried the kubeconfig's token, to assert what was
//! asked.

pub mod objects;

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
    /// GET, POST, PATCH...
    pub method: String,
    /// The path with its query, as sent ("/api/v1/namespaces/shop/events?fieldSelector=...").
    pub target: String,
    /// It carried `Authorization: Bearer TOKEN`.
    pub with_token: bool,
    /// The body sent (POST, PATCH), as text.
    pub body: String,
}

impl Request {
    /// The body as JSON (`Null` when there is none or it is no JSON).
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    /// The path, without the query.
    pub fn path(&self) -> &str {
        self.target.split('?').next().unwrap_or("")
    }
}

type Routes = Arc<Mutex<HashMap<String, (u16, String)>>>;

/// Pods by the node they are on, for lists by `spec.nodeName`.
type NodePods = Arc<Mutex<HashMap<String, Vec<Value>>>>;

/// Where the pod proxy reaches a pod: (namespace, name, port) to a local address.
type Proxied = Arc<Mutex<HashMap<(String, String, u16), std::net::SocketAddr>>>;

/// What the answering threads share.
#[derive(Clone)]
struct State {
    routes: Routes,
    requests: Arc<Mutex<Vec<Request>>>,
    node_pods: NodePods,
    proxied: Proxied,
}

/// The server; stops on drop.
pub struct ApiServer {
    port: u16,
    state: State,
    routes: Routes,
    requests: Arc<Mutex<Vec<Request>>>,
    stop: Arc<AtomicBool>,
    down: Arc<AtomicBool>,
}

impl ApiServer {
    pub fn start() -> ApiServer {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind the API stand-in");
        let port = listener.local_addr().unwrap().port();
        let routes: Routes = Arc::default();
        let requests: Arc<Mutex<Vec<Request>>> = Arc::default();
        let state = State {
            routes: routes.clone(),
            requests: requests.clone(),
            node_pods: Arc::default(),
            proxied: Arc::default(),
        };
        let stop = Arc::new(AtomicBool::new(false));
        let down = Arc::new(AtomicBool::new(false));
        let (st, s, d) = (state.clone(), stop.clone(), down.clone());
        std::thread::spawn(move || {
            for stream in listener.incoming() {
                if s.load(Ordering::Relaxed) {
                    return;
                }
                let Ok(stream) = stream else { continue };
                // Down: the connection is closed unanswered, as a server
                // restarting or a network gone would leave it.
                if d.load(Ordering::Relaxed) {
                    let _ = stream.shutdown(std::net::Shutdown::Both);
                    continue;
                }
                let st = st.clone();
                std::thread::spawn(move || answer(stream, &st));
            }
        });
        ApiServer { port, state, routes, requests, stop, down }
    }

    /// Stops answering: every connection is closed unanswered (and not
    /// recorded) until [`ApiServer::come_back`].
    pub fn go_down(&self) {
        self.down.store(true, Ordering::Relaxed);
    }

    /// Answers again.
    pub fn come_back(&self) {
        self.down.store(false, Ordering::Relaxed);
    }

    /// Puts `pods` on node `node`: served as the list of pods with
    /// `fieldSelector=spec.nodeName=NODE` (and only those).
    pub fn node_pods(&self, node: &str, pods: &[k8s_openapi::api::core::v1::Pod]) {
        let values = pods.iter().map(|p| serde_json::to_value(p).unwrap()).collect();
        self.state.node_pods.lock().unwrap().insert(node.to_string(), values);
    }

    /// Serves `pods` as a cluster holds them: each at its own URL, listed
    /// by namespace and across namespaces (`/api/v1/pods`).
    pub fn pods(&self, pods: &[k8s_openapi::api::core::v1::Pod]) {
        let mut by_namespace: HashMap<String, Vec<k8s_openapi::api::core::v1::Pod>> = HashMap::new();
        for pod in pods {
            let ns = pod.metadata.namespace.clone().unwrap_or_else(|| "default".into());
            self.object(pod, Some(&ns), pod.metadata.name.as_deref().unwrap_or(""));
            by_namespace.entry(ns).or_default().push(pod.clone());
        }
        for (ns, pods) in by_namespace {
            self.list(Some(&ns), &pods);
        }
        self.list(None, pods);
    }

    /// Passes the pod proxy of pod `namespace/name`, port `port`, on to
    /// `to`: a GET of `/api/v1/namespaces/NS/pods/NAME:PORT/proxy/PATH`
    /// is answered by `GET /PATH` there. A pod not given, or an address
    /// that does not answer, is the real server's 503.
    pub fn proxy_pod(&self, namespace: &str, name: &str, port: u16, to: std::net::SocketAddr) {
        self.state.proxied.lock().unwrap().insert((namespace.to_string(), name.to_string(), port), to);
    }

    /// The requests so far with this method.
    pub fn requests_of(&self, method: &str) -> Vec<Request> {
        self.requests().into_iter().filter(|r| r.method == method).collect()
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

    /// Answers every method on `path` with a `Status` of `code`, `reason`
    /// and `message` as given: an admission refusal, say.
    pub fn refuse_with(&self, path: &str, code: u16, reason: &str, message: &str) {
        let body = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "message": message,
            "reason": reason, "code": code});
        self.route(path, code, &body);
    }

    /// The discovery documents kubectl reads before any verb (`/api`,
    /// `/apis`, `/api/v1`), for the core resources a kubectl session
    /// names: pods (and their exec, proxy), namespaces, events, nodes; and
    /// the OpenAPI v3 kubectl reads before a create.
    pub fn discovery(&self) {
        self.route(
            "/api",
            200,
            &json!({"kind": "APIVersions", "versions": ["v1"],
            "serverAddressByClientCIDRs": [{"clientCIDR": "0.0.0.0/0", "serverAddress": "127.0.0.1"}]}),
        );
        self.route("/apis", 200, &json!({"kind": "APIGroupList", "apiVersion": "v1", "groups": []}));
        let resource = |name: &str, kind: &str, namespaced: bool, verbs: &[&str]| {
            json!({"name": name, "singularName": kind.to_ascii_lowercase(), "namespaced": namespaced, "kind": kind, "verbs": verbs,
                "shortNames": if name == "namespaces" { json!(["ns"]) } else if name == "pods" { json!(["po"]) } else { json!([]) }})
        };
        let all = ["create", "delete", "get", "list", "patch", "update", "watch"];
        self.route("/api/v1", 200, &json!({"kind": "APIResourceList", "groupVersion": "v1", "resources": [
            resource("pods", "Pod", true, &all),
            {"name": "pods/exec", "singularName": "", "namespaced": true, "kind": "PodExecOptions", "verbs": ["create", "get"]},
            {"name": "pods/proxy", "singularName": "", "namespaced": true, "kind": "PodProxyOptions", "verbs": ["create", "delete", "get", "patch", "update"]},
            resource("namespaces", "Namespace", false, &all),
            resource("events", "Event", true, &all),
            resource("nodes", "Node", false, &all),
        ]}));
        // OpenAPI v3 as far as kubectl reads it before a create: that the
        // server validates fields itself (fieldValidation on pods' PATCH),
        // so kubectl sends fieldValidation=Strict instead of downloading
        // every schema to validate on its side.
        self.route(
            "/openapi/v3",
            200,
            &json!({"paths": {"api/v1": {"serverRelativeURL": "/openapi/v3/api/v1?hash=podstuck"}}}),
        );
        let field_validation =
            json!({"name": "fieldValidation", "in": "query", "schema": {"type": "string", "uniqueItems": true}});
        self.route(
            "/openapi/v3/api/v1",
            200,
            &json!({
                "openapi": "3.0.0",
                "info": {"title": "Kubernetes", "version": "v1.30.0"},
                // kubectl looks for the parameter on the PATCH of the kind's item.
                "paths": {"/api/v1/namespaces/{namespace}/pods/{name}": {
                    "parameters": [
                        {"name": "name", "in": "path", "required": true, "schema": {"type": "string"}},
                        {"name": "namespace", "in": "path", "required": true, "schema": {"type": "string"}}
                    ],
                    "patch": {
                        "parameters": [field_validation],
                        "responses": {},
                        "x-kubernetes-action": "patch",
                        "x-kubernetes-group-version-kind": {"group": "", "version": "v1", "kind": "Pod"}
                    }
                }}
            }),
        );
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

/// `%3D` and the like, decoded (a field selector's `=` is sent so).
fn percent_decoded(text: &str) -> String {
    let bytes = text.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        match (bytes[i], bytes.get(i + 1..i + 3)) {
            (b'%', Some(hex))
                if std::str::from_utf8(hex).ok().and_then(|h| u8::from_str_radix(h, 16).ok()).is_some() =>
            {
                out.push(u8::from_str_radix(std::str::from_utf8(hex).unwrap(), 16).unwrap());
                i += 3;
            }
            (b'+', _) => {
                out.push(b' ');
                i += 1;
            }
            (b, _) => {
                out.push(b);
                i += 1;
            }
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// The value of `key` in the query of `target`, decoded.
fn query(target: &str, key: &str) -> Option<String> {
    let (_, q) = target.split_once('?')?;
    q.split('&').find_map(|pair| pair.split_once('=').filter(|(k, _)| *k == key).map(|(_, v)| percent_decoded(v)))
}

/// JSON merge patch (RFC 7386).
fn merge(target: &mut Value, patch: &Value) {
    let Value::Object(patch) = patch else {
        *target = patch.clone();
        return;
    };
    if !target.is_object() {
        *target = json!({});
    }
    let object = target.as_object_mut().unwrap();
    for (key, value) in patch {
        if value.is_null() {
            object.remove(key);
        } else {
            merge(object.entry(key.clone()).or_insert(Value::Null), value);
        }
    }
}

fn not_found(path: &str) -> (u16, String) {
    let name = path.rsplit('/').next().unwrap_or("");
    let status: Value = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("\"{name}\" not found"), "reason": "NotFound", "details": {"name": name}, "code": 404});
    (404, status.to_string())
}

/// The real server's answer when the pod behind its proxy cannot be reached.
fn unreachable(why: &str) -> (u16, String) {
    let status = json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
        "message": format!("error trying to reach service: {why}"), "reason": "ServiceUnavailable", "code": 503});
    (503, status.to_string())
}

/// `/api/v1/namespaces/NS/pods/NAME:PORT/proxy/PATH`, passed on to where
/// [`ApiServer::proxy_pod`] put the pod; `None` for any other path.
fn proxied(state: &State, target: &str) -> Option<(u16, String)> {
    let path = target.split('?').next().unwrap_or("");
    let rest = path.strip_prefix("/api/v1/namespaces/")?;
    let (ns, rest) = rest.split_once("/pods/")?;
    let (pod, rest) = rest.split_once("/proxy")?;
    let (name, port) = pod.split_once(':')?;
    let port: u16 = port.parse().ok()?;
    let to = state.proxied.lock().unwrap().get(&(ns.to_string(), name.to_string(), port)).copied();
    let Some(to) = to else { return Some(unreachable(&format!("dial tcp: pod {ns}/{name} has no port {port} here"))) };
    let forwarded = if rest.is_empty() { "/" } else { rest };
    match crate::scrape::try_get(to, forwarded) {
        Ok(answer) if answer.status != 0 => Some((answer.status, answer.body)),
        Ok(_) => Some(unreachable(&format!("dial tcp {to}: no HTTP answer"))),
        Err(e) => Some(unreachable(&format!("dial tcp {to}: {e}"))),
    }
}

/// `items` of a list whose labels hold every `key=value` of `selector`.
fn selected(list: &str, selector: &str) -> String {
    let Ok(mut list) = serde_json::from_str::<Value>(list) else { return list.to_string() };
    let wanted: Vec<(&str, &str)> = selector.split(',').filter_map(|pair| pair.split_once('=')).collect();
    if let Some(items) = list["items"].as_array_mut() {
        items.retain(|item| wanted.iter().all(|(k, v)| item["metadata"]["labels"][k].as_str() == Some(v)));
    }
    list.to_string()
}

/// What `method` on `target` answers, given what the server holds.
fn reply(state: &State, method: &str, target: &str, body: &str) -> (u16, String) {
    let path = target.split('?').next().unwrap_or("");
    // A refusal a test set answers every method.
    if let Some((status, text)) = state.routes.lock().unwrap().get(path).filter(|(status, _)| *status >= 400) {
        return (*status, text.clone());
    }
    // Passed on without holding the routes: the pod may be slow.
    if method == "GET" {
        if let Some(answer) = proxied(state, target) {
            return answer;
        }
    }
    let mut routes = state.routes.lock().unwrap();
    match method {
        "POST" => {
            let Ok(mut object) = serde_json::from_str::<Value>(body) else {
                return (400, json!({"kind": "Status", "code": 400}).to_string());
            };
            let name = object["metadata"]["name"].as_str().unwrap_or("").to_string();
            object["metadata"]["uid"] = json!(format!("created-{}", routes.len()));
            routes.insert(format!("{path}/{name}"), (200, object.to_string()));
            (201, object.to_string())
        }
        "DELETE" => match routes.remove(path) {
            Some((200, stored)) => (200, stored),
            _ => not_found(path),
        },
        "PATCH" => {
            let Some((200, stored)) = routes.get(path).cloned() else { return not_found(path) };
            let mut object: Value = serde_json::from_str(&stored).unwrap();
            merge(&mut object, &serde_json::from_str(body).unwrap_or(Value::Null));
            routes.insert(path.to_string(), (200, object.to_string()));
            (200, object.to_string())
        }
        _ => {
            if path == "/api/v1/pods" {
                if let Some(node) =
                    query(target, "fieldSelector").and_then(|f| f.strip_prefix("spec.nodeName=").map(str::to_string))
                {
                    let items = state.node_pods.lock().unwrap().get(&node).cloned().unwrap_or_default();
                    return (
                        200,
                        json!({"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": items}).to_string(),
                    );
                }
            }
            let (status, text) = routes.get(path).cloned().unwrap_or_else(|| not_found(path));
            match query(target, "labelSelector") {
                Some(selector) if status == 200 => (200, selected(&text, &selector)),
                _ => (status, text),
            }
        }
    }
}

/// Reads one request, records it, answers and closes.
fn answer(stream: TcpStream, state: &State) {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(10)));
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut first = String::new();
    if reader.read_line(&mut first).is_err() {
        return;
    }
    let mut with_token = false;
    let mut length = 0usize;
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 || line == "\r\n" {
            break;
        }
        let lower = line.to_ascii_lowercase();
        if lower.starts_with("authorization:") && line.trim_end().ends_with(&format!("Bearer {TOKEN}")) {
            with_token = true;
        }
        if let Some(value) = lower.strip_prefix("content-length:") {
            length = value.trim().parse().unwrap_or(0);
        }
    }
    let mut sent = vec![0; length.min(1 << 20)];
    if std::io::Read::read_exact(&mut reader, &mut sent).is_err() {
        return;
    }
    let body = String::from_utf8_lossy(&sent).into_owned();
    let mut words = first.split_whitespace();
    let method = words.next().unwrap_or("").to_string();
    let target = words.next().unwrap_or("").to_string();
    state.requests.lock().unwrap().push(Request {
        method: method.clone(),
        target: target.clone(),
        with_token,
        body: body.clone(),
    });
    let (status, body) = reply(state, &method, &target, &body);
    let mut stream = stream;
    let _ = write!(
        stream,
        "HTTP/1.1 {status} {}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        match status {
            200 => "OK",
            201 => "Created",
            _ => "Error",
        },
        body.len()
    );
    let _ = stream.flush();
}
