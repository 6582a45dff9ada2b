//! `podstuck watch --events`: every finding about a pod as a Kubernetes
//! Event on that pod, so `kubectl describe pod` of a pod stuck in
//! Terminating says why, and what fixes it, where kubelet says nothing (a
//! failed unmount posts no Event). Findings with no pod (a full disk, a
//! read-only filesystem) go on the node.
//!
//! The tracer never waits on the API server: findings are handed to a
//! bounded queue ([`EventSink::offer`] never blocks; the oldest is
//! dropped, and counted, when it is full) and a task of its own posts
//! them, within a per-node rate ([`limits`]), repeats as the series of one
//! Event ([`repeats`]). An API server that cannot be reached is said once
//! and retried with backoff; a permission missing is said once, naming
//! it. Nothing printed or served on the node depends on any of it.

pub mod body;
pub mod limits;
pub mod repeats;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Pod;
use tokio::sync::Notify;

use crate::diagnose::{Finding, Report, Severity, Status};
use crate::explain::client::{Api, PostFailed};
use body::Regarding;
use limits::{DropOldest, TokenBucket};
use repeats::{Post, Repeats};

/// Findings waiting for the poster, at most.
pub const QUEUE: usize = 256;

/// Requests waiting for a token or for the API server, at most.
const READY: usize = 256;

/// The node's pods are listed again on a miss at most this often.
const PODS_AFTER: Duration = Duration::from_secs(10);

/// Pods remembered at most (a node runs 110 by default).
const MAX_PODS: usize = 2048;

/// The first wait after the API server could not be reached; doubled up
/// to [`MAX_BACKOFF`].
const FIRST_BACKOFF: Duration = Duration::from_secs(2);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// How often the poster looks for series patches due when nothing wakes it.
const TICK: Duration = Duration::from_secs(1);

/// What the watch and the poster share.
struct Shared {
    queue: Mutex<DropOldest<Finding>>,
    wake: Notify,
    /// Said by the watch's next review, once each.
    messages: Mutex<Vec<String>>,
    /// The poster has nothing left to post (or cannot post it now).
    settled: AtomicBool,
}

impl Shared {
    fn say(&self, message: String) {
        self.messages.lock().unwrap_or_else(|p| p.into_inner()).push(message);
    }
}

/// The watch's end of `--events`.
pub struct EventSink {
    shared: Arc<Shared>,
}

impl EventSink {
    /// Starts posting, through `api`, the findings of node `node`.
    pub fn start(api: Api, node: String) -> EventSink {
        let shared = Arc::new(Shared {
            queue: Mutex::new(DropOldest::new(QUEUE)),
            wake: Notify::new(),
            messages: Mutex::default(),
            settled: AtomicBool::new(true),
        });
        let poster = Poster::new(api, node, shared.clone(), SystemTime::now());
        tokio::spawn(poster.run());
        EventSink { shared }
    }

    /// Hands what a review told to the poster; never waits.
    pub fn offer(&self, reports: &[Report]) {
        if reports.is_empty() {
            return;
        }
        {
            let mut queue = self.shared.queue.lock().unwrap_or_else(|p| p.into_inner());
            // An info line (a process draining within its grace period) is
            // a normal shutdown: no Event on the pod for it.
            for report in reports.iter().filter(|r| r.finding().severity != Severity::Info) {
                queue.push(report.finding().clone());
            }
            self.shared.settled.store(false, Ordering::SeqCst);
        }
        self.shared.wake.notify_one();
    }

    /// A handle that can wait for the poster to settle after the watch ends.
    pub fn handle(&self) -> EventSink {
        EventSink { shared: self.shared.clone() }
    }

    /// Waits, at most `limit`, for what the run told last (a finding's end
    /// told at SIGTERM) to be posted; an API server out of reach is not
    /// waited for past `limit`.
    pub async fn settle(&self, limit: Duration) {
        let deadline = tokio::time::Instant::now() + limit;
        while !self.shared.settled.load(Ordering::SeqCst) && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// What the poster has to say (once each).
    pub fn messages(&self) -> Vec<String> {
        std::mem::take(&mut *self.shared.messages.lock().unwrap_or_else(|p| p.into_inner()))
    }
}

/// The node's pods as the API names them, by UID (and by the static pod's
/// UID, which its mirror pod carries as an annotation).
#[derive(Default)]
struct NodePods {
    by_uid: HashMap<String, Regarding>,
    listed_at: Option<SystemTime>,
}

impl NodePods {
    fn fill(&mut self, pods: Vec<Pod>, now: SystemTime) {
        self.by_uid.clear();
        self.listed_at = Some(now);
        for pod in pods.into_iter().take(MAX_PODS) {
            let m = &pod.metadata;
            let (Some(ns), Some(name), Some(uid)) = (&m.namespace, &m.name, &m.uid) else { continue };
            let regarding = Regarding::pod(ns, name, uid);
            if let Some(mirror) = m.annotations.as_ref().and_then(|a| a.get("kubernetes.io/config.mirror")) {
                self.by_uid.insert(mirror.to_ascii_lowercase(), regarding.clone());
            }
            self.by_uid.insert(uid.to_ascii_lowercase(), regarding);
        }
    }

    fn stale(&self, now: SystemTime) -> bool {
        self.listed_at.is_none_or(|at| now.duration_since(at).unwrap_or_default() >= PODS_AFTER)
    }
}

/// The API server could not be reached: when to try again.
struct Down {
    retry_at: SystemTime,
    backoff: Duration,
}

/// The task that posts.
struct Poster {
    api: Api,
    node: String,
    shared: Arc<Shared>,
    repeats: Repeats,
    bucket: TokenBucket,
    ready: DropOldest<Post>,
    pods: NodePods,
    down: Option<Down>,
    /// Refusals and unknown pods already said.
    said: HashSet<String>,
}

impl Poster {
    fn new(api: Api, node: String, shared: Arc<Shared>, now: SystemTime) -> Poster {
        Poster {
            api,
            node,
            shared,
            repeats: Repeats::default(),
            bucket: TokenBucket::new(limits::PER_SECOND, limits::BURST, now),
            ready: DropOldest::new(READY),
            pods: NodePods::default(),
            down: None,
            said: HashSet::new(),
        }
    }

    async fn run(mut self) {
        loop {
            let wait = self.next_wait(SystemTime::now());
            tokio::select! {
                _ = self.shared.wake.notified() => {}
                _ = tokio::time::sleep(wait) => {}
            }
            self.round(SystemTime::now()).await;
            // Settled once nothing waits that could be posted now; a
            // report offered meanwhile unsettles it again.
            let queue = self.shared.queue.lock().unwrap_or_else(|p| p.into_inner());
            if queue.is_empty() && (self.ready.is_empty() || self.down.is_some()) {
                self.shared.settled.store(true, Ordering::SeqCst);
            }
        }
    }

    fn next_wait(&mut self, now: SystemTime) -> Duration {
        if let Some(down) = &self.down {
            return down.retry_at.duration_since(now).unwrap_or_default().max(Duration::from_millis(100));
        }
        if !self.ready.is_empty() {
            return self.bucket.wait(now).clamp(Duration::from_millis(10), TICK);
        }
        TICK
    }

    /// Takes in what the watch told, and posts what is due and allowed.
    async fn round(&mut self, now: SystemTime) {
        let (findings, dropped) = {
            let mut queue = self.shared.queue.lock().unwrap_or_else(|p| p.into_inner());
            let mut findings = Vec::with_capacity(queue.len());
            while let Some(f) = queue.pop() {
                findings.push(f);
            }
            (findings, queue.take_dropped())
        };
        for finding in &findings {
            if let Some(post) = self.repeats.report(finding, now) {
                self.ready.push(post);
            }
        }
        if self.down.as_ref().is_some_and(|d| now < d.retry_at) {
            self.say_dropped(dropped);
            return;
        }
        for post in self.repeats.due(now) {
            self.ready.push(post);
        }
        self.say_dropped(dropped);
        while let Some(post) = self.ready.pop() {
            if !self.bucket.take(SystemTime::now()) {
                self.ready.push_front(post);
                break;
            }
            match self.send(&post, SystemTime::now()).await {
                Ok(()) => {
                    if self.down.take().is_some() {
                        self.shared.say("the Kubernetes API takes Events again: posting what waited".into());
                    }
                }
                Err(PostFailed::Unreachable(why)) => {
                    self.ready.push_front(post);
                    let backoff = match &self.down {
                        None => {
                            self.shared.say(format!(
                                "cannot post Kubernetes Events: {why}; findings are still printed and served here, and posting is retried"
                            ));
                            FIRST_BACKOFF
                        }
                        Some(d) => (d.backoff * 2).min(MAX_BACKOFF),
                    };
                    self.down = Some(Down { retry_at: SystemTime::now() + backoff, backoff });
                    break;
                }
                Err(PostFailed::NotFound) => {
                    // The Event expired (the API keeps them an hour): the
                    // next report starts a new one.
                    if let Post::Series { id, .. } = &post {
                        self.repeats.forget(id);
                    }
                }
                Err(PostFailed::Refused(why)) => {
                    if let Post::Create(f) = &post {
                        self.repeats.quiet(&f.id);
                    }
                    self.say_once(why.clone(), format!("cannot post Kubernetes Events: {why}"));
                }
            }
        }
    }

    fn say_dropped(&mut self, from_queue: u64) {
        let dropped = from_queue + self.ready.take_dropped();
        if dropped > 0 {
            self.shared.say(format!(
                "{dropped} findings or repeats not posted as Kubernetes Events: more were waiting than the {QUEUE} kept (the API server is slow or down); the oldest went first"
            ));
        }
    }

    fn say_once(&mut self, key: String, message: String) {
        if self.said.len() < 1024 && self.said.insert(key) {
            self.shared.say(message);
        }
    }

    async fn send(&mut self, post: &Post, now: SystemTime) -> Result<(), PostFailed> {
        match post {
            Post::Series { namespace, name, count, last, .. } => {
                self.api.patch_event(namespace, name, &body::series_patch(*count, *last)).await
            }
            Post::Create(finding) => {
                let Some(regarding) = self.regarding(finding, now).await? else {
                    self.repeats.quiet(&finding.id);
                    return Ok(());
                };
                let event = body::event(finding, &regarding, &self.node, now);
                self.api.create_event(&event).await?;
                if finding.status == Status::Active {
                    let name = event.metadata.name.unwrap_or_default();
                    self.repeats.created(&finding.id, regarding.events_namespace(), &name);
                }
                Ok(())
            }
        }
    }

    /// The object a finding's Event regards: its pod among this node's,
    /// or the node; `None` when the API places no such pod here.
    async fn regarding(&mut self, finding: &Finding, now: SystemTime) -> Result<Option<Regarding>, PostFailed> {
        let Some(uid) = &finding.pod_uid else { return Ok(Some(Regarding::node(&self.node))) };
        if let Some(found) = self.pods.by_uid.get(uid.as_str()) {
            return Ok(Some(found.clone()));
        }
        if self.pods.stale(now) {
            match self.api.node_pods(&self.node).await {
                Ok(pods) => self.pods.fill(pods, now),
                Err(PostFailed::Refused(why)) => {
                    self.say_once(
                        why.clone(),
                        format!(
                            "cannot find the pods of node {} in the Kubernetes API to post Events on: {why}",
                            self.node
                        ),
                    );
                    self.pods.listed_at = Some(now);
                    return Ok(None);
                }
                Err(e) => return Err(e),
            }
        }
        let found = self.pods.by_uid.get(uid.as_str()).cloned();
        if found.is_none() {
            self.say_once(
                format!("pod {uid}"),
                format!("no Kubernetes Event for pod {uid}: the API places no pod with that UID on node {} (gone already, or --node-name is not this node's name)", self.node),
            );
        }
        Ok(found)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use std::time::UNIX_EPOCH;

    fn pod(ns: &str, name: &str, uid: &str, mirror: Option<&str>) -> Pod {
        let annotations =
            mirror.map(|m| [("kubernetes.io/config.mirror".to_string(), m.to_string())].into_iter().collect());
        Pod {
            metadata: ObjectMeta {
                namespace: Some(ns.into()),
                name: Some(name.into()),
                uid: Some(uid.into()),
                annotations,
                ..Default::default()
            },
            ..Default::default()
        }
    }

    #[test]
    fn the_nodes_pods_are_found_by_uid_and_a_static_pod_by_its_mirrors_annotation() {
        let t = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        let mut pods = NodePods::default();
        assert!(pods.stale(t), "never listed");
        let etcd_hash = "8e9a0b1c2d3e4f5061728394a5b6c7d8";
        pods.fill(
            vec![
                pod("shop", "web-0", "1B2C3D4E-5F60-4A7B-8C9D-0E1F2A3B4C5D", None),
                pod("kube-system", "etcd-worker-1", "5a6b7c8d-0000-4000-8000-00000000000e", Some(etcd_hash)),
            ],
            t,
        );
        // kubelet spells UIDs lowercase on disk; the API might not.
        assert_eq!(
            pods.by_uid.get("1b2c3d4e-5f60-4a7b-8c9d-0e1f2a3b4c5d"),
            Some(&Regarding::pod("shop", "web-0", "1B2C3D4E-5F60-4A7B-8C9D-0E1F2A3B4C5D"))
        );
        // The static pod's directory is named by its hash; the Event regards the mirror pod.
        assert_eq!(pods.by_uid.get(etcd_hash).map(|r| r.uid.as_str()), Some("5a6b7c8d-0000-4000-8000-00000000000e"));
        assert!(!pods.stale(t + Duration::from_secs(9)));
        assert!(pods.stale(t + PODS_AFTER));
        // Listed again: a pod gone is forgotten.
        pods.fill(vec![], t + PODS_AFTER);
        assert!(pods.by_uid.is_empty());
    }
}
