//! Reading a pod's [`ApiSnapshot`] through the Kubernetes API, and saying
//! how: which configuration was used (`--kubeconfig`, `KUBECONFIG`,
//! `~/.kube/config`, the pod's service account in a cluster, or on the
//! node the kubelet's own kubeconfig), and when a read fails, why, in
//! words that name the missing permission and the resource.
//!
//! Files a user names (kubeconfigs, the service account's token) are read
//! where the user is ([`crate::node_access::Node::user_file`]); the
//! kubelet's kubeconfig and the certificates it names are the node's
//! ([`crate::node_access::Node::path`]), so both work from a debug pod too.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use anyhow::{anyhow, Result};
use k8s_openapi::api::coordination::v1::Lease;
use k8s_openapi::api::core::v1::{Event, Node, PersistentVolumeClaim, Pod};
use k8s_openapi::api::storage::v1::VolumeAttachment;
use kube::api::ListParams;
use kube::config::{KubeConfigOptions, Kubeconfig};
use kube::{Client, Config};

use super::snapshot::{ApiSnapshot, Unread};
use super::PodRef;
use crate::identify::pod::PodUid;
use crate::node_access::path_words;

/// Where the kubelet keeps its kubeconfig (kubeadm's, then the usual
/// package and cloud image place).
pub const KUBELET_KUBECONFIGS: [&str; 2] = ["/etc/kubernetes/kubelet.conf", "/var/lib/kubelet/kubeconfig"];

/// The in-cluster service account files.
const SERVICE_ACCOUNT: &str = "/var/run/secrets/kubernetes.io/serviceaccount";

/// A kubeconfig larger than this is no kubeconfig.
const MAX_KUBECONFIG: u64 = 4 << 20;

/// How long one request may take: explain answers a person, and watch
/// must not wait on a slow API server.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The pod named is not in the API: it is gone already, which is no
/// failure to read (watch stops telling what the API held of it).
#[derive(Debug)]
pub struct PodGone(pub String);

impl std::fmt::Display for PodGone {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for PodGone {}

/// What explain and watch are told about the API.
#[derive(Clone, Debug)]
pub struct KubeOptions {
    /// `--kubeconfig FILE`.
    pub kubeconfig: Option<PathBuf>,
    /// `--context NAME`.
    pub context: Option<String>,
    /// Where the files of a configuration are read from: the user's
    /// where podstuck runs, the kubelet's on the node.
    pub node: &'static crate::node_access::Node,
}

impl Default for KubeOptions {
    fn default() -> KubeOptions {
        KubeOptions { kubeconfig: None, context: None, node: crate::node_access::Node::direct() }
    }
}

/// A connection to the API server, and what it was made from.
#[derive(Clone)]
pub struct Api {
    client: Client,
    /// "kubeconfig /root/.kube/config (context kind-kind)"...
    pub through: String,
    /// The server's URL, for errors.
    server: String,
}

/// A file of a kubeconfig, reached from where podstuck runs.
type Reach<'a> = &'a dyn Fn(&Path) -> PathBuf;

/// Reads a kubeconfig at `path` (reached by `reach`), with every file it
/// names reached the same way (relative ones from its directory).
pub(crate) fn read_kubeconfig(path: &Path, reach: Reach) -> Result<Kubeconfig> {
    let reached = reach(path);
    let text = read_small(&reached, MAX_KUBECONFIG)
        .map_err(|e| anyhow!("cannot read kubeconfig {}: {e}", path_words(path)))?;
    let mut config = Kubeconfig::from_yaml(&text).map_err(|e| anyhow!("kubeconfig {}: {e}", path_words(path)))?;
    let dir = path.parent().unwrap_or(Path::new("/"));
    let fix = |file: &mut Option<String>| {
        if let Some(f) = file.as_mut() {
            *f = reach(&dir.join(&*f)).to_string_lossy().into_owned();
        }
    };
    for cluster in config.clusters.iter_mut().filter_map(|c| c.cluster.as_mut()) {
        fix(&mut cluster.certificate_authority);
    }
    for user in config.auth_infos.iter_mut().filter_map(|u| u.auth_info.as_mut()) {
        fix(&mut user.client_certificate);
        fix(&mut user.client_key);
        fix(&mut user.token_file);
    }
    Ok(config)
}

/// A regular file of at most `max` bytes, as text.
pub fn read_small(path: &Path, max: u64) -> std::io::Result<String> {
    use std::io::Read;
    let file = crate::files::open_regular(path)?;
    let meta = file.metadata()?;
    if meta.len() > max {
        return Err(std::io::Error::other(format!("larger than {} MiB", max >> 20)));
    }
    let mut text = String::new();
    file.take(max + 1).read_to_string(&mut text)?;
    Ok(text)
}

/// The in-cluster configuration as a kubeconfig: the service host from the
/// environment, the service account's CA and token files.
fn in_cluster(user_file: Reach) -> Option<Kubeconfig> {
    let host = std::env::var("KUBERNETES_SERVICE_HOST").ok().filter(|h| !h.is_empty())?;
    let port = std::env::var("KUBERNETES_SERVICE_PORT").unwrap_or_else(|_| "443".into());
    let dir = user_file(Path::new(SERVICE_ACCOUNT));
    if !dir.join("token").is_file() {
        return None;
    }
    let host = if host.contains(':') { format!("[{host}]") } else { host };
    let yaml = serde_json::json!({
        "apiVersion": "v1", "kind": "Config", "current-context": "in-cluster",
        "clusters": [{"name": "in-cluster", "cluster": {"server": format!("https://{host}:{port}"), "certificate-authority": dir.join("ca.crt")}}],
        "users": [{"name": "in-cluster", "user": {"tokenFile": dir.join("token")}}],
        "contexts": [{"name": "in-cluster", "context": {"cluster": "in-cluster", "user": "in-cluster"}}],
    });
    Kubeconfig::from_yaml(&yaml.to_string()).ok()
}

/// The configuration to use, and its name for the user: `--kubeconfig`,
/// `KUBECONFIG`, `~/.kube/config`, in-cluster, the kubelet's.
fn choose(options: &KubeOptions) -> Result<(Kubeconfig, String)> {
    let user_file = |p: &Path| options.node.user_file(p);
    let node_file = |p: &Path| options.node.path(p);
    let context = |words: String| match &options.context {
        Some(c) => format!("{words} (context {c})"),
        None => words,
    };
    if let Some(path) = &options.kubeconfig {
        return Ok((read_kubeconfig(path, &user_file)?, context(format!("kubeconfig {}", path_words(path)))));
    }
    if let Some(list) = std::env::var_os("KUBECONFIG").filter(|v| !v.is_empty()) {
        let paths: Vec<PathBuf> = std::env::split_paths(&list).filter(|p| user_file(p).is_file()).collect();
        let mut merged: Option<Kubeconfig> = None;
        for path in &paths {
            let next = read_kubeconfig(path, &user_file)?;
            merged = Some(match merged {
                None => next,
                Some(m) => m.merge(next).map_err(|e| anyhow!("KUBECONFIG: {e}"))?,
            });
        }
        if let Some(config) = merged {
            let names: Vec<String> = paths.iter().map(|p| path_words(p)).collect();
            return Ok((config, context(format!("KUBECONFIG {}", names.join(":")))));
        }
    }
    if let Some(home) = std::env::var_os("HOME").filter(|h| !h.is_empty()) {
        let path = Path::new(&home).join(".kube/config");
        if user_file(&path).is_file() {
            return Ok((read_kubeconfig(&path, &user_file)?, context(format!("kubeconfig {}", path_words(&path)))));
        }
    }
    if options.context.is_none() {
        if let Some(config) = in_cluster(&user_file) {
            return Ok((config, "the pod's service account (in-cluster)".into()));
        }
    }
    for path in KUBELET_KUBECONFIGS.map(Path::new) {
        if node_file(path).is_file() {
            return Ok((
                read_kubeconfig(path, &node_file)?,
                context(format!("the kubelet's kubeconfig {} (the node's own credentials)", path_words(path))),
            ));
        }
    }
    // Where podstuck cannot work as run: exit 2 (docs/exit-codes.md).
    Err(crate::exit::BadInput(format!(
        "no Kubernetes API configuration found: give --kubeconfig FILE, set KUBECONFIG, or run where ~/.kube/config, a service account (in-cluster) or the kubelet's kubeconfig ({}) is",
        KUBELET_KUBECONFIGS.join(", ")
    ))
    .into())
}

/// In the static release build, the API server's name is looked up as
/// musl does it: /etc/hosts, then DNS (/etc/resolv.conf), whatever the
/// node's /etc/nsswitch.conf names. A static glibc would load the NSS
/// modules listed there (myhostname, resolve, mdns...) from the node,
/// built for the node's glibc, and such a load aborts the process
/// (measured in a Debian 11 root, docs/building.md); files and dns are
/// built into the static glibc and load nothing. Once, before the first
/// lookup.
#[cfg(all(target_env = "gnu", target_feature = "crt-static"))]
fn hosts_from_files_and_dns() {
    extern "C" {
        fn __nss_configure_lookup(database: *const libc::c_char, services: *const libc::c_char) -> libc::c_int;
    }
    static ONCE: std::sync::Once = std::sync::Once::new();
    // SAFETY: two NUL-terminated strings; glibc copies what it keeps, and
    // no lookup runs yet (the client is made after this).
    ONCE.call_once(|| unsafe {
        __nss_configure_lookup(c"hosts".as_ptr(), c"files dns".as_ptr());
    });
}

/// The dynamic build uses the node's own NSS modules, as any program there.
#[cfg(not(all(target_env = "gnu", target_feature = "crt-static")))]
fn hosts_from_files_and_dns() {}

impl Api {
    /// Chooses a configuration and makes a client of it (nothing is asked
    /// of the server yet).
    pub async fn connect(options: &KubeOptions) -> Result<Api> {
        hosts_from_files_and_dns();
        let (kubeconfig, through) = choose(options)?;
        let kube_options = KubeConfigOptions { context: options.context.clone(), ..Default::default() };
        let mut config =
            Config::from_custom_kubeconfig(kubeconfig, &kube_options).await.map_err(|e| anyhow!("{through}: {e}"))?;
        config.connect_timeout = Some(Duration::from_secs(5));
        config.read_timeout = Some(REQUEST_TIMEOUT);
        // One answer now beats retries: a person waits, and watch goes on without.
        config.default_retry = false;
        let server = config.cluster_url.to_string();
        let client = Client::try_from(config).map_err(|e| anyhow!("{through}: {e}"))?;
        Ok(Api { client, through, server })
    }

    /// Why a request failed, in the user's words: the permission missing
    /// and for what, credentials refused, or the server unreachable.
    fn said(&self, e: kube::Error, verb: &str, resource: &str, scope: &str) -> String {
        self.said_granted_by(
            e,
            verb,
            resource,
            scope,
            "deploy/components/on-call/explain-rbac.yaml lists what podstuck explain needs",
        )
    }

    /// As [`Api::said`], with where the missing permission is granted.
    fn said_granted_by(&self, e: kube::Error, verb: &str, resource: &str, scope: &str, granted_by: &str) -> String {
        match e {
            kube::Error::Api(status) => match status.code {
                401 => format!(
                    "the API server at {} refused the credentials of {} (401 Unauthorized: {}): log in again (an expired token?) or choose another --context",
                    self.server, self.through, status.message
                ),
                403 => {
                    let what = status.details.as_ref().map(|d| match d.group.is_empty() {
                        true => d.kind.clone(),
                        false => format!("{}.{}", d.kind, d.group),
                    });
                    let what = what.filter(|w| !w.is_empty()).unwrap_or_else(|| resource.to_string());
                    format!(
                        "permission missing: {verb} {what}{scope} (403 Forbidden: {}); grant it ({granted_by}) or use another --context",
                        status.message
                    )
                }
                404 => format!("not found ({})", status.message),
                code => format!("the API server answered {code} {}: {}", status.reason, status.message),
            },
            other => format!("cannot reach the API server at {} ({}): {}", self.server, self.through, error_chain(&other)),
        }
    }

    /// The pod `pod` names, by name or by UID.
    pub async fn pod(&self, pod: &PodRef) -> Result<Pod> {
        match pod {
            PodRef::Name { namespace, name } => {
                let ns = namespace.clone().unwrap_or_else(|| self.client.default_namespace().to_string());
                let api: kube::Api<Pod> = kube::Api::namespaced(self.client.clone(), &ns);
                match api.get(name).await {
                    Ok(pod) => Ok(pod),
                    Err(kube::Error::Api(s)) if s.code == 404 => {
                        Err(PodGone(format!("pod {ns}/{name} not found: it is gone already (not stuck), or in another namespace (-n NAMESPACE)")).into())
                    }
                    Err(e) => Err(anyhow!("cannot read pod {ns}/{name}: {}", self.said(e, "get", "pods", &format!(" in namespace {ns}")))),
                }
            }
            PodRef::Uid { namespace, uid } => {
                let (api, scope) = match namespace {
                    Some(ns) => (kube::Api::<Pod>::namespaced(self.client.clone(), ns), format!(" in namespace {ns}")),
                    None => (kube::Api::<Pod>::all(self.client.clone()), " in all namespaces".to_string()),
                };
                let list = api.list(&ListParams::default()).await.map_err(|e| {
                    anyhow!("cannot list pods to find UID {uid}: {}", self.said(e, "list", "pods", &scope))
                })?;
                list.items.into_iter().find(|p| p.metadata.uid.as_deref() == Some(uid.as_str())).ok_or_else(|| {
                    PodGone(format!("no pod has UID {uid}{scope}: it is gone already (not stuck)")).into()
                })
            }
        }
    }

    /// The UID of the pod `pod` names.
    pub async fn uid(&self, pod: &PodRef) -> Result<PodUid> {
        let found = self.pod(pod).await?;
        found
            .metadata
            .uid
            .as_deref()
            .and_then(|u| PodUid::parse(u).ok())
            .ok_or_else(|| anyhow!("pod {} has no UID in the API's answer", pod.words()))
    }

    /// Everything about `pod` the detectors look at; only the pod itself
    /// must be read, the rest is said as unread when it cannot be.
    pub async fn snapshot(&self, pod: &PodRef) -> Result<ApiSnapshot> {
        let found = self.pod(pod).await?;
        let mut s = ApiSnapshot::of(found, SystemTime::now());
        let ns = s.namespace().to_string();
        if let Some(uid) = s.pod.metadata.uid.clone() {
            let events: kube::Api<Event> = kube::Api::namespaced(self.client.clone(), &ns);
            match events.list(&ListParams::default().fields(&format!("involvedObject.uid={uid}"))).await {
                Ok(list) => s.events = list.items,
                Err(e) => s.unread.push(Unread {
                    what: format!("the events of pod {}", s.pod_words()),
                    why: self.said(e, "list", "events", &format!(" in namespace {ns}")),
                }),
            }
        }
        if let Some(node) = s.node_name().map(str::to_string) {
            let nodes: kube::Api<Node> = kube::Api::all(self.client.clone());
            match nodes.get(&node).await {
                Ok(n) => s.node = Some(n),
                Err(kube::Error::Api(st)) if st.code == 404 => s.node_missing = true,
                Err(e) => s.unread.push(Unread { what: format!("node {node}"), why: self.said(e, "get", "nodes", "") }),
            }
            let leases: kube::Api<Lease> = kube::Api::namespaced(self.client.clone(), "kube-node-lease");
            match leases.get(&node).await {
                Ok(l) => s.lease = Some(l),
                Err(kube::Error::Api(st)) if st.code == 404 => {}
                Err(e) => s.unread.push(Unread {
                    what: format!("the lease of node {node}"),
                    why: self.said(e, "get", "leases.coordination.k8s.io", " in namespace kube-node-lease"),
                }),
            }
        }
        let claims = claim_names(&s.pod);
        let pvcs: kube::Api<PersistentVolumeClaim> = kube::Api::namespaced(self.client.clone(), &ns);
        for claim in &claims {
            match pvcs.get(claim).await {
                Ok(c) => s.claims.push(c),
                Err(kube::Error::Api(st)) if st.code == 404 => {}
                Err(e) => s.unread.push(Unread {
                    what: format!("claim {claim}"),
                    why: self.said(e, "get", "persistentvolumeclaims", &format!(" in namespace {ns}")),
                }),
            }
        }
        if s.claims.iter().any(|c| c.spec.as_ref().is_some_and(|sp| sp.volume_name.is_some())) {
            let vas: kube::Api<VolumeAttachment> = kube::Api::all(self.client.clone());
            match vas.list(&ListParams::default()).await {
                Ok(list) => s.attachments = list.items,
                Err(e) => s.unread.push(Unread {
                    what: "volume attachments".into(),
                    why: self.said(e, "list", "volumeattachments.storage.k8s.io", ""),
                }),
            }
        }
        Ok(s)
    }
}

/// What `explain --all` reads in bulk, and the DaemonSet's pages.
impl Api {
    /// Every `T` of `namespace` (or of the cluster) `params` selects, or
    /// why not in the user's words (the permission missing, and for what).
    pub async fn list<T>(&self, namespace: Option<&str>, params: &ListParams, resource: &str) -> Result<Vec<T>, String>
    where
        T: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
        T: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
    {
        let (api, scope) = match namespace {
            Some(ns) => (kube::Api::<T>::namespaced(self.client.clone(), ns), format!(" in namespace {ns}")),
            None => (kube::Api::<T>::all(self.client.clone()), " in all namespaces".to_string()),
        };
        api.list(params).await.map(|l| l.items).map_err(|e| self.said(e, "list", resource, &scope))
    }

    /// Every `T` of the cluster (nodes, volume attachments), or why not.
    pub async fn list_cluster<T>(&self, resource: &str) -> Result<Vec<T>, String>
    where
        T: kube::Resource<DynamicType = ()> + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
    {
        let api = kube::Api::<T>::all(self.client.clone());
        api.list(&ListParams::default()).await.map(|l| l.items).map_err(|e| self.said(e, "list", resource, ""))
    }

    /// GET `path` of pod `namespace/pod` on `port`, through the API
    /// server's pod proxy (so no route to the node is needed, only RBAC
    /// `get pods/proxy`), given up after `timeout`: a node that does not
    /// answer must not hold the others.
    pub async fn pod_proxy_get(
        &self,
        namespace: &str,
        pod: &str,
        port: u16,
        path: &str,
        timeout: Duration,
    ) -> Result<String, String> {
        let base = format!("/api/v1/namespaces/{namespace}/pods/{pod}:{port}/proxy");
        let request = kube::core::Request::new(base)
            .get(path, &Default::default())
            .map_err(|e| format!("cannot ask for {path}: {e}"))?;
        let scope = format!(" in namespace {namespace}");
        match tokio::time::timeout(timeout, self.client.request_text(request)).await {
            Err(_) => Err(format!("no answer within {}", crate::words::human_duration(timeout))),
            Ok(Ok(text)) => Ok(text),
            Ok(Err(kube::Error::Api(status))) if status.code != 401 && status.code != 403 => {
                // The proxy's own failure (the pod's port refused, the node
                // unreachable) comes back as a Status with the reason.
                Err(format!("the API server's proxy answered {} {}: {}", status.code, status.reason, status.message))
            }
            Ok(Err(e)) => Err(self.said_granted_by(
                e,
                "get",
                "pods/proxy",
                &scope,
                "deploy/components/on-call/explain-rbac.yaml lists what podstuck explain --all needs",
            )),
        }
    }
}

/// Why a request of `watch --events` failed, and what to do next.
#[derive(Debug)]
pub enum PostFailed {
    /// No answer: retried later, with backoff.
    Unreachable(String),
    /// The object is not there (an Event expired): start again.
    NotFound,
    /// The server answered no (a permission missing, a body refused):
    /// said, and not retried.
    Refused(String),
}

impl PostFailed {
    fn of(api: &Api, e: kube::Error, verb: &str, resource: &str, scope: &str) -> PostFailed {
        match &e {
            kube::Error::Api(s) if s.code == 404 => PostFailed::NotFound,
            kube::Error::Api(_) => PostFailed::Refused(api.said_granted_by(e, verb, resource, scope, EVENTS_RBAC)),
            _ => PostFailed::Unreachable(api.said_granted_by(e, verb, resource, scope, EVENTS_RBAC)),
        }
    }
}

/// Where the permissions of `watch --events` are granted.
const EVENTS_RBAC: &str = "deploy/base/podstuck-events-rbac.yaml lists what podstuck watch --events needs";

impl Api {
    /// The pods the API places on `node`: the only ones a node's podstuck
    /// posts Events about.
    pub async fn node_pods(&self, node: &str) -> Result<Vec<Pod>, PostFailed> {
        let api: kube::Api<Pod> = kube::Api::all(self.client.clone());
        let params = ListParams::default().fields(&format!("spec.nodeName={node}"));
        api.list(&params)
            .await
            .map(|l| l.items)
            .map_err(|e| PostFailed::of(self, e, "list", "pods", " in all namespaces"))
    }

    /// Creates `event` (events.k8s.io/v1) in its namespace.
    pub async fn create_event(&self, event: &k8s_openapi::api::events::v1::Event) -> Result<(), PostFailed> {
        let ns = event.metadata.namespace.as_deref().unwrap_or("default");
        let api: kube::Api<k8s_openapi::api::events::v1::Event> = kube::Api::namespaced(self.client.clone(), ns);
        api.create(&kube::api::PostParams::default(), event)
            .await
            .map(|_| ())
            .map_err(|e| PostFailed::of(self, e, "create", "events.events.k8s.io", &format!(" in namespace {ns}")))
    }

    /// Merges `patch` into the Event `name` of namespace `ns`.
    pub async fn patch_event(&self, ns: &str, name: &str, patch: &serde_json::Value) -> Result<(), PostFailed> {
        let api: kube::Api<k8s_openapi::api::events::v1::Event> = kube::Api::namespaced(self.client.clone(), ns);
        api.patch(name, &kube::api::PatchParams::default(), &kube::api::Patch::Merge(patch))
            .await
            .map(|_| ())
            .map_err(|e| PostFailed::of(self, e, "patch", "events.events.k8s.io", &format!(" in namespace {ns}")))
    }
}

/// The claims a pod's volumes name (generic ephemeral volumes included:
/// their claim is `<pod>-<volume>`).
pub fn claim_names(pod: &Pod) -> Vec<String> {
    let name = pod.metadata.name.as_deref().unwrap_or("");
    pod.spec
        .iter()
        .flat_map(|s| s.volumes.iter().flatten())
        .filter_map(|v| match (&v.persistent_volume_claim, &v.ephemeral) {
            (Some(pvc), _) => Some(pvc.claim_name.clone()),
            (None, Some(_)) => Some(format!("{name}-{}", v.name)),
            _ => None,
        })
        .collect()
}

/// An error and its causes, on one line (a connection refused is deep inside).
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut words = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        let next = s.to_string();
        if !words.contains(&next) {
            words.push_str(": ");
            words.push_str(&next);
        }
        source = s.source();
    }
    words
}
