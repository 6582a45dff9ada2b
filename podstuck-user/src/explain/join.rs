//! `watch --pod NS/NAME` on the node: the pod's UID resolved through the
//! API, and the API's findings about it joined to the kernel's, in one
//! stream, the root cause first.
//!
//! The API is read again every [`REFRESH`] on a task of its own; two
//! detectors hand what it found to the diagnosis: [`ApiRoot`] first (a
//! node NotReady explains everything on it), [`ApiHolds`] last and only
//! once the kernel side has had [`HOLDS_AFTER`] to show a cause, so a
//! kernel root cause is told before the warnings that echo it and the
//! finalizers that hold the object after it. A finding the API stops
//! showing (the finalizer removed, the pod gone) is told resolved. When
//! the API cannot be reached, that is said once, and the node-side
//! diagnosis goes on alone.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use super::client::{Api, KubeOptions, PodGone};
use super::{findings, rank, PodRef};
use crate::diagnose::pod_shutdown::PodShutdown;
use crate::diagnose::{Detector, Finding, Kind, Review, Status};
use crate::event::CallEvent;
use crate::identify::pod::PodUid;
use crate::identify::Identity;

/// How often the API is read again while watching.
pub const REFRESH: Duration = Duration::from_secs(15);

/// How long the kernel side has to show a root cause before the API's
/// holds are told: a kernel failure becomes a finding once it repeats or
/// stands 2 s, and kubelet retries within 1.5 s.
pub const HOLDS_AFTER: Duration = Duration::from_secs(5);

/// What the API side last found, and what it has to say.
#[derive(Default)]
struct Shared {
    findings: Vec<Finding>,
    /// Said by the next review, once each.
    messages: Vec<String>,
    /// The API failed and that was said: said again only once it recovers.
    failing: bool,
    /// The shutdown of each pod deleted: when its grace period ends (its
    /// deletionTimestamp), its containers' hooks and roles.
    shutdowns: BTreeMap<PodUid, PodShutdown>,
}

/// The API side of a watch: resolved pods, and the findings being read.
pub struct ApiJoin {
    shared: Arc<Mutex<Shared>>,
}

/// Named pods resolved to UIDs, with what to say about those that were not.
pub struct Resolved {
    pub uids: Vec<PodUid>,
    pub warnings: Vec<String>,
    /// The API side, when it could be reached and findings are wanted.
    pub join: Option<(Api, Vec<PodRef>)>,
}

/// Resolves `pods` (NS/NAME) to UIDs through the API. What cannot be
/// resolved is in `warnings`, said in full: watch stops on it rather than
/// trace the whole node when the user asked for one pod.
pub async fn resolve(pods: &[PodRef], options: &KubeOptions) -> Resolved {
    let mut resolved = Resolved { uids: Vec::new(), warnings: Vec::new(), join: None };
    let api = match Api::connect(options).await {
        Ok(api) => api,
        Err(e) => {
            resolved.warnings.push(cannot_resolve(pods, &format!("{e:#}")));
            return resolved;
        }
    };
    let mut found = Vec::new();
    for pod in pods {
        match api.uid(pod).await {
            Ok(uid) => {
                resolved.uids.push(uid);
                found.push(pod.clone());
            }
            Err(e) => resolved.warnings.push(cannot_resolve(std::slice::from_ref(pod), &format!("{e:#}"))),
        }
    }
    if !found.is_empty() {
        resolved.join = Some((api, found));
    }
    resolved
}

fn cannot_resolve(pods: &[PodRef], why: &str) -> String {
    let names: Vec<String> = pods.iter().map(PodRef::words).collect();
    let asks: Vec<String> = pods.iter().map(uid_command).collect();
    format!(
        "cannot resolve --pod {} through the Kubernetes API: {why}; podstuck stops rather than trace every pod of the node. Give the pod's UID instead (--pod UID; `{}` prints it), or a kubeconfig that reaches the API (--kubeconfig FILE)",
        names.join(", "),
        asks.join("`, `")
    )
}

/// The kubectl command that prints `pod`'s UID.
fn uid_command(pod: &PodRef) -> String {
    match pod {
        PodRef::Name { namespace, name } => super::commands::pod_uid(name, namespace.as_deref()),
        PodRef::Uid { uid, .. } => format!("echo {}", crate::words::shell_word(uid.as_bytes())),
    }
}

impl ApiJoin {
    /// Starts reading `pods` through `api` every [`REFRESH`], on a task.
    pub fn start(api: Api, pods: Vec<PodRef>) -> ApiJoin {
        let shared = Arc::new(Mutex::new(Shared::default()));
        let task = shared.clone();
        tokio::spawn(async move {
            loop {
                let mut all = Vec::new();
                let mut shutdowns = BTreeMap::new();
                let mut failure = None;
                for pod in &pods {
                    match api.snapshot(pod).await {
                        Ok(snapshot) => {
                            all.extend(findings(&snapshot));
                            if let (Some(uid), Some(shutdown)) = (snapshot.uid(), snapshot.shutdown()) {
                                shutdowns.insert(uid, shutdown);
                            }
                        }
                        // The pod is gone: nothing holds it any more.
                        Err(e) if e.is::<PodGone>() => {}
                        Err(e) => failure = Some(format!("{e:#}")),
                    }
                }
                {
                    let mut shared = task.lock().unwrap_or_else(|p| p.into_inner());
                    match failure {
                        Some(why) if !shared.failing => {
                            shared.failing = true;
                            shared.messages.push(format!(
                                "the Kubernetes API cannot be read ({why}); the node-side diagnosis goes on without it"
                            ));
                        }
                        Some(_) => {}
                        None => {
                            if shared.failing {
                                shared.messages.push("the Kubernetes API answers again".to_string());
                            }
                            shared.failing = false;
                            shared.findings = all;
                            shared.shutdowns = shutdowns;
                        }
                    }
                }
                tokio::time::sleep(REFRESH).await;
            }
        });
        ApiJoin { shared }
    }

    /// The detectors that hand the API's findings to the diagnosis: the
    /// root one goes first, the holds last.
    pub fn detectors(&self) -> (Box<dyn Detector>, Box<dyn Detector>) {
        let started = SystemTime::now();
        (
            Box::new(ApiRoot(Told::new(self.shared.clone(), started))),
            Box::new(ApiHolds(Told::new(self.shared.clone(), started))),
        )
    }

    /// The shutdown of each pod deleted, as last read.
    pub fn shutdowns(&self) -> BTreeMap<PodUid, PodShutdown> {
        self.shared.lock().unwrap_or_else(|p| p.into_inner()).shutdowns.clone()
    }

    /// What the API side has to say (once each).
    pub fn messages(&self) -> Vec<String> {
        std::mem::take(&mut self.shared.lock().unwrap_or_else(|p| p.into_inner()).messages)
    }
}

/// The findings one detector hands on, and those it handed before (told
/// resolved when the API stops showing them).
struct Told {
    shared: Arc<Mutex<Shared>>,
    started: SystemTime,
    before: BTreeMap<String, Finding>,
}

impl Told {
    fn new(shared: Arc<Mutex<Shared>>, started: SystemTime) -> Told {
        Told { shared, started, before: BTreeMap::new() }
    }

    fn review(&mut self, now: SystemTime, wanted: impl Fn(Kind) -> bool) -> Vec<Finding> {
        let current: Vec<Finding> = self
            .shared
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .findings
            .iter()
            .filter(|f| wanted(f.kind))
            .cloned()
            .collect();
        let mut out = current.clone();
        for (id, old) in &self.before {
            if !current.iter().any(|f| &f.id == id) {
                let mut gone = old.clone();
                gone.status = Status::Resolved;
                gone.last_seen = now;
                out.push(gone);
            }
        }
        self.before = current.into_iter().map(|f| (f.id.clone(), f)).collect();
        out
    }
}

/// The API's root causes (a node NotReady), told at once, first.
struct ApiRoot(Told);

/// The API's holds and echoes (warnings, detach, finalizers, the grace
/// period), told last, after [`HOLDS_AFTER`].
struct ApiHolds(Told);

impl Detector for ApiRoot {
    fn observe(&mut self, _: &CallEvent, _: &Identity) {}
    fn review(&mut self, review: &mut Review<'_>) -> Vec<Finding> {
        self.0.review(review.now, |k| rank(k) == 0)
    }
}

impl Detector for ApiHolds {
    fn observe(&mut self, _: &CallEvent, _: &Identity) {}
    fn review(&mut self, review: &mut Review<'_>) -> Vec<Finding> {
        if review.now.duration_since(self.0.started).unwrap_or_default() < HOLDS_AFTER {
            return Vec::new();
        }
        self.0.review(review.now, |k| rank(k) > 1)
    }
}
