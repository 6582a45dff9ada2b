//! `podstuck explain`: what the Kubernetes API says about a stuck pod,
//! said as findings of the same shape as the kernel's (evidence source
//! `api`), with a safe fix and its risk. Causes with no kernel signature
//! live here (docs/pathologies.md, P11): a finalizer nobody removes, a
//! node NotReady or gone, a volume that does not detach, kubelet's Warning
//! events.
//!
//! Three steps, one module each: [`client`] reads an [`ApiSnapshot`]
//! through the API (or [`offline`] from files a user saved with kubectl),
//! one pure detector per cause turns it into findings, and [`order`] puts
//! the root cause first. `watch --pod NS/NAME` joins the same findings to
//! the kernel's ([`join`]); `explain --all` ([`all`]) joins them, for
//! every stuck pod, to what the podstuck DaemonSet on each pod's node found.

pub mod all;
pub mod client;
pub mod commands;
pub mod finalizer_pending;
pub mod grace_period_past;
pub mod join;
pub mod kubelet_warnings;
pub mod node_not_ready;
pub mod offline;
pub mod snapshot;
pub mod volume_detach_stuck;

use std::path::PathBuf;

use anyhow::Result;
use serde::Serialize;

use crate::diagnose::{human_duration, Finding, Kind, Report};
use crate::exit::BadInput;
use crate::print::{json_lines::finding_json, stderr_line, Out};
pub use client::KubeOptions;
pub use snapshot::{ApiSnapshot, Unread};

/// Every API-side finding of a snapshot, the root cause first.
pub fn findings(snapshot: &ApiSnapshot) -> Vec<Finding> {
    let mut found = Vec::new();
    found.extend(node_not_ready::detect(snapshot));
    found.extend(kubelet_warnings::detect(snapshot));
    found.extend(volume_detach_stuck::detect(snapshot));
    found.extend(finalizer_pending::detect(snapshot));
    found.extend(grace_period_past::detect(snapshot));
    // Worded as the node's findings are: severity within what is known.
    found.iter_mut().for_each(crate::diagnose::wording::settle);
    found.iter_mut().for_each(terminal_safe_words);
    order(&mut found);
    found
}

/// The API's words are the cluster's to choose (a condition's message, an
/// event's, a finalizer, an object the server of a test cluster did not
/// validate): a finding that quotes them is made terminal-safe here, once,
/// so no escape sequence reaches a terminal however it is printed. A fix
/// quotes them as shell words already; this only touches one that came
/// through raw.
fn terminal_safe_words(f: &mut Finding) {
    use crate::words::terminal_safe_lines;
    let safe = |s: &mut String| {
        if let std::borrow::Cow::Owned(clean) = terminal_safe_lines(s) {
            *s = clean;
        }
    };
    safe(&mut f.summary);
    safe(&mut f.fix);
    f.advice.iter_mut().for_each(safe);
    for e in &mut f.evidence {
        safe(&mut e.source);
        safe(&mut e.fact);
    }
}

/// Where a finding stands in the answer, the root cause first: a node that
/// never reports back explains everything on it; then what the node's
/// kernel shows; then kubelet's warnings (which echo a kernel error
/// rather than explain it); a volume that does not detach (it follows the
/// teardown); finalizers, which hold the object after everything else is
/// done; and last the symptom itself, the grace period long past.
pub fn rank(kind: Kind) -> u8 {
    match kind {
        Kind::NodeNotReady => 0,
        Kind::KubeletWarning => 2,
        Kind::VolumeDetachStuck => 3,
        Kind::FinalizerPending => 4,
        Kind::GracePeriodPast => 5,
        _ => 1,
    }
}

/// Sorts findings root cause first (stable: a detector's own order stays).
pub fn order(findings: &mut [Finding]) {
    findings.sort_by_key(|f| rank(f.kind));
}

/// A JSON patch that removes entry `index` of the list at `list`, only if
/// it still is `value` (the `test` operation fails the patch otherwise).
pub fn json_patch_removing(list: &str, index: usize, value: &str) -> String {
    let path = format!("{list}/{index}");
    serde_json::json!([{"op": "test", "path": path, "value": value}, {"op": "remove", "path": path}]).to_string()
}

/// What the answer is, in one sentence, and whether the pod is stuck.
pub fn verdict(snapshot: &ApiSnapshot, findings: &[Finding]) -> (bool, String) {
    let pod = snapshot.pod_words();
    let phase = snapshot.pod.status.as_ref().and_then(|s| s.phase.clone()).unwrap_or_else(|| "unknown".into());
    let Some(due) = snapshot.deletion() else {
        let also = match findings.is_empty() {
            true => String::new(),
            false => format!("; {} finding(s) about it below", findings.len()),
        };
        return (false, format!("pod {pod} is not being deleted (phase {phase}): not stuck in Terminating{also}"));
    };
    if findings.is_empty() {
        let when = match snapshot.now.duration_since(due) {
            Ok(late) => format!("its grace period ended {} ago", human_duration(late)),
            Err(early) => format!("its grace period ends in {}", human_duration(early.duration())),
        };
        return (false, format!("pod {pod} is being deleted and {when}: not stuck (yet); nothing in the API holds it"));
    }
    if findings.iter().all(|f| f.kind == Kind::GracePeriodPast) {
        return (
            true,
            format!(
                "pod {pod} is stuck in Terminating and the API shows no cause: it is on the node ({})",
                findings[0].fix
            ),
        );
    }
    (true, format!("pod {pod} is stuck in Terminating: {} finding(s), the root cause first", findings.len()))
}

/// What `podstuck explain` is told.
#[derive(Clone, Debug, Default)]
pub struct ExplainOptions {
    /// The pod: NAME, NS/NAME or a UID; may be left out with `--from` when
    /// the files hold one pod.
    pub pod: Option<String>,
    /// `-n`: the namespace of NAME (default: the kubeconfig's).
    pub namespace: Option<String>,
    /// `--from`: files saved with kubectl, instead of the API.
    pub from: Vec<PathBuf>,
    pub json: bool,
    pub kube: KubeOptions,
    /// `--all`: every pod stuck past its grace period (in `-n NAMESPACE`,
    /// or everywhere), instead of one.
    pub all: bool,
    /// With `--all`: where the podstuck DaemonSet runs
    /// (`--podstuck-namespace`, `$PODSTUCK_NAMESPACE`; default `podstuck`).
    pub podstuck_namespace: Option<String>,
}

/// The pod the user named.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PodRef {
    Name { namespace: Option<String>, name: String },
    Uid { namespace: Option<String>, uid: String },
}

impl PodRef {
    /// "NAME", "NS/NAME" or a UID; `-n` gives NAME its namespace.
    pub fn parse(given: &str, namespace: Option<&str>) -> Result<PodRef, String> {
        let given = given.trim();
        if crate::identify::pod::PodUid::parse(given).is_ok() {
            return Ok(PodRef::Uid { namespace: namespace.map(str::to_string), uid: given.to_string() });
        }
        let (ns, name) = match given.split_once('/') {
            Some((ns, name)) => (Some(ns.to_string()), name),
            None => (namespace.map(str::to_string), given),
        };
        // A name is a DNS subdomain, a namespace a DNS label: nothing else
        // reaches a URL or a shell word.
        let valid = |s: &str, dots: bool| {
            !s.is_empty()
                && s.len() <= 253
                && s != "."
                && s != ".."
                && s.bytes().all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-' || (dots && b == b'.'))
        };
        if !valid(name, true) || ns.as_deref().is_some_and(|n| !valid(n, false)) {
            return Err(format!("{given}: not a pod name, NAMESPACE/NAME or pod UID"));
        }
        Ok(PodRef::Name { namespace: ns, name: name.to_string() })
    }

    /// Whether `snapshot`'s pod is the one meant.
    pub fn matches(&self, pod: &k8s_openapi::api::core::v1::Pod) -> bool {
        let meta = &pod.metadata;
        let ns_ok =
            |ns: &Option<String>| ns.as_deref().is_none_or(|ns| meta.namespace.as_deref().unwrap_or("default") == ns);
        match self {
            PodRef::Name { namespace, name } => meta.name.as_deref() == Some(name) && ns_ok(namespace),
            PodRef::Uid { namespace, uid } => meta.uid.as_deref() == Some(uid) && ns_ok(namespace),
        }
    }

    pub fn words(&self) -> String {
        match self {
            PodRef::Name { namespace: Some(ns), name } => format!("{ns}/{name}"),
            PodRef::Name { namespace: None, name } => name.clone(),
            PodRef::Uid { uid, .. } => format!("the pod with UID {uid}"),
        }
    }
}

/// The first line of `--json`: what was read, through what, what was not,
/// and the verdict.
#[derive(Serialize)]
struct ExplainLine<'a> {
    r#type: &'static str,
    pod: String,
    uid: Option<&'a str>,
    node: Option<&'a str>,
    read_through: &'a str,
    unread: Vec<serde_json::Value>,
    stuck: bool,
    verdict: &'a str,
}

/// Said when no cluster answers: explain also reads what kubectl saved,
/// so a user away from the cluster (or given the files by someone near
/// it) still gets the diagnosis.
fn offline_hint(pod: &PodRef) -> String {
    let get = match pod {
        PodRef::Name { namespace, name } => commands::pod_json(name, namespace.as_deref()),
        PodRef::Uid { .. } => "kubectl get pod NAME -o json".to_string(),
    };
    format!("; without a cluster, explain reads the pod saved as JSON: `{get} > pod.json` where the cluster answers, then `podstuck explain --from pod.json`")
}

/// Runs `podstuck explain`.
pub async fn explain(options: &ExplainOptions) -> Result<()> {
    if options.all {
        let all = all::read::AllOptions {
            namespace: options.namespace.clone(),
            podstuck_namespace: options.podstuck_namespace.clone(),
            json: options.json,
            kube: options.kube.clone(),
        };
        return all::read::explain_all(&all).await;
    }
    let (snapshot, through) = match options.from.is_empty() {
        true => {
            let pod = options.pod.as_deref().ok_or_else(|| {
                BadInput("name the pod: podstuck explain POD [-n NAMESPACE], or --from FILE...".into())
            })?;
            let pod = PodRef::parse(pod, options.namespace.as_deref()).map_err(BadInput)?;
            let api = client::Api::connect(&options.kube).await.map_err(|e| {
                // No configuration at all stays a refusal (exit 2), as for `watch --pod`.
                let said = format!("{e:#}{}", offline_hint(&pod));
                match crate::exit::code_of(&e, &[]) {
                    crate::exit::BAD_INPUT => anyhow::Error::from(BadInput(said)),
                    _ => anyhow::anyhow!(said),
                }
            })?;
            let snapshot = api.snapshot(&pod).await.map_err(|e| match format!("{e:#}") {
                unreachable if unreachable.contains("cannot reach the API server") => {
                    anyhow::anyhow!("{unreachable}{}", offline_hint(&pod))
                }
                _ => e,
            })?;
            (snapshot, api.through)
        }
        false => {
            let pod = options
                .pod
                .as_deref()
                .map(|p| PodRef::parse(p, options.namespace.as_deref()))
                .transpose()
                .map_err(BadInput)?;
            let snapshot = offline::snapshot(&options.from, pod.as_ref(), std::time::SystemTime::now())?;
            let names: Vec<String> = options.from.iter().map(|p| crate::node_access::path_words(p)).collect();
            (snapshot, format!("files {}", names.join(", ")))
        }
    };
    let found = findings(&snapshot);
    let (stuck, verdict) = verdict(&snapshot, &found);
    let mut out = Out::stdout();
    if options.json {
        let line = ExplainLine {
            r#type: "explain",
            pod: snapshot.pod_words(),
            uid: snapshot.pod.metadata.uid.as_deref(),
            node: snapshot.node_name(),
            read_through: &through,
            unread: snapshot.unread.iter().map(|u| serde_json::json!({"what": u.what, "why": u.why})).collect(),
            stuck,
            verdict: &verdict,
        };
        out.line_as_is(&serde_json::to_string(&line)?)?;
        for f in found {
            out.line(&finding_json(&Report::New(f)))?;
        }
    } else {
        stderr_line(format_args!("podstuck: read pod {} through {through}", snapshot.pod_words()));
        for u in &snapshot.unread {
            stderr_line(format_args!("podstuck: could not read {}: {}", u.what, u.why));
        }
        out.line(&verdict)?;
        // Each block ends its lines; with the empty line before it, blocks stand one empty line apart.
        for f in found {
            out.line("")?;
            out.text(&crate::finding_block::finding_block(None, &f))?;
        }
    }
    out.flush()?;
    Ok(())
}

#[cfg(test)]
pub(crate) mod tests {
    use std::time::{Duration, SystemTime};

    use k8s_openapi::api::core::v1::{
        Event, Node, NodeCondition, NodeSpec, NodeStatus, PersistentVolumeClaim, PersistentVolumeClaimSpec, Pod,
        PodSpec, Taint,
    };
    use k8s_openapi::api::storage::v1::{
        VolumeAttachment, VolumeAttachmentSource, VolumeAttachmentSpec, VolumeAttachmentStatus,
    };
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
    use podstuck_tests::apiserver::objects::kubelet_warning;
    pub use podstuck_tests::apiserver::objects::lease;

    use super::*;

    pub const UID: &str = "1b2c3d4e-0000-4000-8000-00000000000a";

    pub fn at(secs: f64) -> SystemTime {
        SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000) + Duration::from_secs_f64(secs)
    }

    pub fn ts(t: SystemTime) -> Time {
        Time(t.try_into().unwrap())
    }

    /// Pod shop/web-0 on worker-1, deleted with 30 s of grace, due at `due`.
    /// Found by the api_json fuzz target: the API's words reached a
    /// finding raw, an escape sequence with them.
    #[test]
    fn the_apis_words_reach_no_terminal_raw() {
        let due = SystemTime::UNIX_EPOCH + Duration::from_secs(1_800_000_000);
        let mut pod = deleted_pod(due);
        pod.metadata.name = Some("web\u{1b}[2J-0".into());
        pod.metadata.namespace = Some("shop\u{202e}".into());
        pod.metadata.finalizers = Some(vec!["example.com/\u{1b}]0;owned\u{7}".into()]);
        pod.spec.as_mut().unwrap().node_name = Some("worker\r-1".into());
        let now = due + Duration::from_secs(600);
        let found = findings(&snapshot(pod, now));
        assert!(!found.is_empty());
        for f in &found {
            let text = format!("{} {} {:?} {:?}", f.summary, f.fix, f.advice, f.evidence);
            let bad = |c: char| (c.is_control() && c != '\n') || ('\u{202a}'..='\u{202e}').contains(&c);
            assert!(!f.summary.chars().any(bad), "{}", f.summary);
            assert!(!f.fix.chars().any(bad), "{}", f.fix);
            assert!(!f.advice.iter().flat_map(|a| a.chars()).any(bad), "{text}");
            assert!(!f.evidence.iter().flat_map(|e| e.fact.chars()).any(bad), "{text}");
        }
    }

    pub fn deleted_pod(due: SystemTime) -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web-0".into()),
                namespace: Some("shop".into()),
                uid: Some(UID.into()),
                deletion_timestamp: Some(ts(due)),
                deletion_grace_period_seconds: Some(30),
                ..Default::default()
            },
            spec: Some(PodSpec { node_name: Some("worker-1".into()), ..Default::default() }),
            status: None,
        }
    }

    pub fn snapshot(pod: Pod, now: SystemTime) -> ApiSnapshot {
        ApiSnapshot::of(pod, now)
    }

    pub fn node(name: &str, ready: &str, since: SystemTime) -> Node {
        let taints = (ready == "Unknown").then(|| {
            vec![Taint {
                key: "node.kubernetes.io/unreachable".into(),
                effect: "NoExecute".into(),
                time_added: Some(ts(since)),
                value: None,
            }]
        });
        Node {
            metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
            spec: Some(NodeSpec { taints, ..Default::default() }),
            status: Some(NodeStatus {
                conditions: Some(vec![NodeCondition {
                    type_: "Ready".into(),
                    status: ready.into(),
                    last_transition_time: Some(ts(since)),
                    last_heartbeat_time: Some(ts(since)),
                    reason: Some("NodeStatusUnknown".into()),
                    message: Some("Kubelet stopped posting node status.".into()),
                }]),
                ..Default::default()
            }),
        }
    }

    pub fn claim(name: &str, volume: &str) -> PersistentVolumeClaim {
        PersistentVolumeClaim {
            metadata: ObjectMeta { name: Some(name.into()), namespace: Some("shop".into()), ..Default::default() },
            spec: Some(PersistentVolumeClaimSpec { volume_name: Some(volume.into()), ..Default::default() }),
            status: None,
        }
    }

    pub fn attachment(name: &str, volume: &str, node: &str) -> VolumeAttachment {
        VolumeAttachment {
            metadata: ObjectMeta { name: Some(name.into()), ..Default::default() },
            spec: VolumeAttachmentSpec {
                attacher: "hostpath.csi.k8s.io".into(),
                node_name: node.into(),
                source: VolumeAttachmentSource { persistent_volume_name: Some(volume.into()), ..Default::default() },
            },
            status: Some(VolumeAttachmentStatus { attached: true, ..Default::default() }),
        }
    }

    /// A Warning event from kubelet on worker-1 about shop/web-0, first
    /// seen a minute before `last`.
    pub fn warning(reason: &str, message: &str, count: i32, last: SystemTime) -> Event {
        kubelet_warning(UID, reason, message, count, last - Duration::from_secs(60)..last)
    }

    #[test]
    fn the_root_cause_comes_first() {
        let mut pod = deleted_pod(at(100.0));
        pod.metadata.finalizers = Some(vec!["example.com/cleanup".into()]);
        let mut s = snapshot(pod, at(1000.0));
        s.node = Some(node("worker-1", "Unknown", at(50.0)));
        s.events.push(warning("FailedKillPod", "error killing pod", 1, at(900.0)));
        let kinds: Vec<Kind> = findings(&s).iter().map(|f| f.kind).collect();
        assert_eq!(kinds, [Kind::NodeNotReady, Kind::KubeletWarning, Kind::FinalizerPending, Kind::GracePeriodPast]);
        let mut joined = findings(&s);
        joined.push(Finding::new(Kind::VolumeStillMounted, "/x", crate::diagnose::Severity::Critical, at(0.0)));
        order(&mut joined);
        assert_eq!(joined[1].kind, Kind::VolumeStillMounted);
    }

    #[test]
    fn a_pod_not_deleted_or_within_its_grace_period_is_not_stuck() {
        let mut pod = deleted_pod(at(100.0));
        let s = snapshot(pod.clone(), at(110.0));
        let (stuck, words) = verdict(&s, &findings(&s));
        assert!(!stuck);
        assert!(words.contains("grace period ended 10 s ago: not stuck (yet)"), "{words}");
        pod.metadata.deletion_timestamp = None;
        let s = snapshot(pod, at(110.0));
        let (stuck, words) = verdict(&s, &findings(&s));
        assert!(!stuck);
        assert_eq!(words, "pod shop/web-0 is not being deleted (phase unknown): not stuck in Terminating");
        let s = snapshot(deleted_pod(at(100.0)), at(1000.0));
        let (stuck, words) = verdict(&s, &findings(&s));
        assert!(stuck);
        assert!(
            words.ends_with("the API shows no cause: it is on the node (kubectl podstuck web-0 -n shop)"),
            "{words}"
        );
    }

    #[test]
    fn a_pod_is_named_by_name_namespace_and_name_or_uid() {
        assert_eq!(
            PodRef::parse("web-0", Some("shop")),
            Ok(PodRef::Name { namespace: Some("shop".into()), name: "web-0".into() })
        );
        assert_eq!(
            PodRef::parse("shop/web-0", None),
            Ok(PodRef::Name { namespace: Some("shop".into()), name: "web-0".into() })
        );
        assert!(matches!(PodRef::parse(UID, None), Ok(PodRef::Uid { .. })));
        assert!(PodRef::parse("../etc", None).is_err());
        assert!(PodRef::parse("a/b/c", None).is_err());
    }
}
