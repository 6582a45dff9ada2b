//! `podstuck explain --all` (and `kubectl podstuck --all`): every pod
//! stuck in Terminating past its grace period, cluster-wide or in one
//! namespace, in one table an on-call can paste, grouped by node and then
//! by cause. Each pod's causes come from two places joined here: the API
//! (what `podstuck explain POD` finds: finalizers, its node NotReady,
//! volumes not detaching, kubelet's warnings) and the podstuck DaemonSet
//! on its node (its `/findings`, read through the API server's pod proxy,
//! so no debug pod and no ssh are needed). Nodes where the DaemonSet does
//! not run, or does not answer, are named, with the `kubectl podstuck`
//! command to run for each of their pods.
//!
//! This module is the pure part, tested without a cluster: which pods are
//! stuck ([`stuck_pods`]), what a node's page says ([`FindingsPage`]),
//! the join into rows ([`report`]) and how the report is said ([`text`],
//! [`json`]). [`read`] gathers the inputs through the API.

pub mod read;

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};

use super::rank;
use super::snapshot::{time, ApiSnapshot, Unread};
use crate::diagnose::{Finding, Kind};
use crate::words::{human_duration, rfc3339_seconds, terminal_safe, terminal_safe_lines};

/// Pods listed at most, the longest stuck first; how many more is said.
/// Past a few hundred a table is no longer read, and each pod listed costs
/// a snapshot's worth of work.
pub const MAX_PODS_LISTED: usize = 500;

/// A pod deleted and still there past its grace period, and what the API
/// says of it.
#[derive(Clone, Debug)]
pub struct StuckPod {
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    /// `spec.nodeName`; `None` for a pod never scheduled.
    pub node: Option<String>,
    /// When its deletion was asked for (deletionTimestamp minus the grace period).
    pub deleted: SystemTime,
    /// Its deletionTimestamp: when it should have been gone.
    pub due: SystemTime,
    /// explain's findings of it, the root cause first.
    pub api: Vec<Finding>,
}

impl StuckPod {
    /// The pod of `snapshot` and `findings`, explain's findings of it.
    pub fn of(snapshot: &ApiSnapshot, findings: Vec<Finding>) -> StuckPod {
        let due = snapshot.deletion().unwrap_or(snapshot.now);
        let grace = snapshot.pod.metadata.deletion_grace_period_seconds.unwrap_or(0).max(0) as u64;
        StuckPod {
            namespace: snapshot.namespace().to_string(),
            name: snapshot.name().to_string(),
            uid: snapshot.pod.metadata.uid.clone(),
            node: snapshot.node_name().map(str::to_string),
            deleted: due.checked_sub(Duration::from_secs(grace)).unwrap_or(due),
            due,
            api: findings,
        }
    }

    /// `kubectl podstuck NAME -n NS`: traces its teardown on its node.
    pub fn trace_command(&self) -> String {
        crate::explain::commands::trace(&self.name, &self.namespace)
    }
}

/// The pods of `pods` stuck past their grace period at `now` (a
/// deletionTimestamp, which already holds the grace period, in the past),
/// the longest stuck first, at most `max`; and how many there are in all.
pub fn stuck_pods(pods: Vec<Pod>, now: SystemTime, max: usize) -> (Vec<Pod>, usize) {
    let due = |p: &Pod| p.metadata.deletion_timestamp.as_ref().map(time);
    let mut stuck: Vec<Pod> = pods.into_iter().filter(|p| due(p).is_some_and(|d| now > d)).collect();
    stuck.sort_by(|a, b| {
        let name = |p: &Pod| (p.metadata.namespace.clone(), p.metadata.name.clone());
        due(a).cmp(&due(b)).then_with(|| name(a).cmp(&name(b)))
    });
    let total = stuck.len();
    stuck.truncate(max);
    (stuck, total)
}

/// `/findings` of a node's podstuck: `{"node", "updated", "findings", "omitted"}`.
#[derive(Clone, Debug, Deserialize)]
pub struct FindingsPage {
    pub node: String,
    pub updated: String,
    pub findings: Vec<NodeFinding>,
    #[serde(default)]
    pub omitted: usize,
}

/// One finding of a node's podstuck, the fields the table says.
#[derive(Clone, Debug, Deserialize)]
pub struct NodeFinding {
    pub kind: String,
    pub pod_uid: Option<String>,
    /// Every pod concerned (a full disk hits them all).
    #[serde(default)]
    pub pods: Vec<String>,
    #[serde(default)]
    pub summary: String,
    #[serde(default)]
    pub fix: String,
    #[serde(default)]
    pub severity: String,
    #[serde(default)]
    pub status: String,
}

impl FindingsPage {
    /// A page as a node's podstuck serves it. Its words are the node's
    /// (paths, process names): made terminal-safe here, where they are
    /// read, so they are safe wherever they are shown.
    pub fn parse(text: &str) -> Result<FindingsPage, String> {
        let mut page: FindingsPage =
            serde_json::from_str(text).map_err(|e| format!("its /findings is not podstuck's JSON ({e})"))?;
        let safe = |s: &mut String| *s = terminal_safe(s).into_owned();
        safe(&mut page.node);
        safe(&mut page.updated);
        for f in &mut page.findings {
            for s in [&mut f.kind, &mut f.severity, &mut f.status] {
                safe(s);
            }
            // A summary or a fix may be several lines: the breaks stay.
            for s in [&mut f.summary, &mut f.fix] {
                *s = terminal_safe_lines(s).into_owned();
            }
        }
        Ok(page)
    }

    /// The findings still active about the pod with UID `uid`.
    fn about<'a>(&'a self, uid: &'a str) -> impl Iterator<Item = &'a NodeFinding> + 'a {
        self.findings.iter().filter(move |f| {
            f.status != "resolved" && (f.pod_uid.as_deref() == Some(uid) || f.pods.iter().any(|p| p == uid))
        })
    }
}

/// What the podstuck DaemonSet on a node said, or why it was not heard.
#[derive(Clone, Debug)]
pub enum NodeAnswer {
    /// Its pod answered with its findings.
    Answered { podstuck_pod: String, page: FindingsPage },
    /// No pod of the DaemonSet runs there.
    NoDaemonSet,
    /// It could not be asked or did not answer.
    NotHeard { podstuck_pod: Option<String>, why: String },
}

/// Where a cause was read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Source {
    /// The podstuck DaemonSet on the pod's node, in the kernel.
    PodstuckDaemonset,
    /// The Kubernetes API.
    Api,
}

impl Source {
    fn words(self) -> &'static str {
        match self {
            Source::PodstuckDaemonset => "podstuck DaemonSet",
            Source::Api => "API",
        }
    }
}

/// One line of the table: a stuck pod and one cause of it.
#[derive(Clone, Debug, Serialize)]
pub struct Row {
    /// `None`: the pod was never scheduled.
    pub node: Option<String>,
    /// The cause's kind, as findings name it ("volume-still-mounted").
    pub cause: String,
    pub namespace: String,
    pub name: String,
    pub uid: Option<String>,
    /// Since its deletion was asked for.
    #[serde(rename = "terminating_seconds", serialize_with = "seconds")]
    pub terminating: Duration,
    /// Since its grace period ended.
    #[serde(rename = "past_grace_seconds", serialize_with = "seconds")]
    pub past_grace: Duration,
    pub from: Source,
    pub severity: String,
    pub summary: String,
    /// The whole fix (the table shows its first line).
    pub fix: String,
    #[serde(skip)]
    rank: u8,
}

fn seconds<S: serde::Serializer>(d: &Duration, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_u64(d.as_secs())
}

/// A node with stuck pods, and how its podstuck was heard.
#[derive(Clone, Debug, Serialize)]
pub struct NodeLine {
    pub node: String,
    pub stuck_pods: usize,
    /// "answered", "no-daemonset" or "not-heard".
    pub podstuck: &'static str,
    pub podstuck_pod: Option<String>,
    /// When the node's podstuck rendered its findings.
    pub updated: Option<String>,
    /// Why it was not heard.
    pub why: Option<String>,
    /// Its findings past what its page lists.
    pub omitted: usize,
}

/// A stuck pod whose node's podstuck was not heard: what to run for it.
#[derive(Clone, Debug, Serialize)]
pub struct RunOnNode {
    pub node: String,
    pub namespace: String,
    pub name: String,
    pub command: String,
}

/// The answer of `explain --all`.
#[derive(Clone, Debug, Serialize)]
pub struct AllReport {
    #[serde(serialize_with = "at")]
    pub at: SystemTime,
    /// Pods read from the API.
    pub pods_read: usize,
    /// Pods stuck past their grace period, in all.
    pub stuck: usize,
    /// Of them, listed (the longest stuck first, at most [`MAX_PODS_LISTED`]).
    pub listed: usize,
    pub not_listed: usize,
    /// Grouped by node, then by cause (root cause first), the longest stuck first.
    pub rows: Vec<Row>,
    pub nodes: Vec<NodeLine>,
    /// Pods on nodes whose podstuck was not heard, one command each.
    pub run_on_node: Vec<RunOnNode>,
    pub unread: Vec<UnreadLine>,
}

/// Something the report would have liked to read.
#[derive(Clone, Debug, Serialize)]
pub struct UnreadLine {
    pub what: String,
    pub why: String,
}

fn at<S: serde::Serializer>(t: &SystemTime, s: S) -> Result<S::Ok, S::Error> {
    s.serialize_str(&rfc3339_seconds(*t))
}

/// The join: each stuck pod's causes from its node's podstuck and from
/// the API, one row each (the symptom, its grace period past, only when
/// nothing else explains it), grouped by node and then cause.
pub fn report(
    now: SystemTime,
    pods_read: usize,
    stuck_in_all: usize,
    pods: &[StuckPod],
    answers: &BTreeMap<String, NodeAnswer>,
    unread: &[Unread],
) -> AllReport {
    let mut rows = Vec::new();
    let mut run_on_node = Vec::new();
    for pod in pods {
        let terminating = now.duration_since(pod.deleted).unwrap_or_default();
        let past_grace = now.duration_since(pod.due).unwrap_or_default();
        let row = |cause: &str, rank: u8, from: Source, severity: &str, summary: &str, fix: &str| Row {
            node: pod.node.clone(),
            cause: cause.to_string(),
            namespace: terminal_safe(&pod.namespace).into_owned(),
            name: terminal_safe(&pod.name).into_owned(),
            uid: pod.uid.clone(),
            terminating,
            past_grace,
            from,
            severity: severity.to_string(),
            summary: summary.to_string(),
            fix: fix.to_string(),
            rank,
        };
        let mut mine: Vec<Row> = Vec::new();
        let answer = pod.node.as_ref().and_then(|n| answers.get(n));
        if let (Some(NodeAnswer::Answered { page, .. }), Some(uid)) = (answer, &pod.uid) {
            for f in page.about(uid) {
                // One row per cause and fix: a finding told twice (by UID and in `pods`) is one.
                if !mine.iter().any(|r| r.cause == f.kind && r.fix == f.fix) {
                    mine.push(row(&f.kind, 1, Source::PodstuckDaemonset, &f.severity, &f.summary, &f.fix));
                }
            }
        }
        for f in pod.api.iter().filter(|f| f.kind != Kind::GracePeriodPast) {
            mine.push(row(f.kind.id(), rank(f.kind), Source::Api, f.severity.as_str(), &f.summary, &f.fix));
        }
        if mine.is_empty() {
            // Nothing explains it: the symptom, and where to look next.
            let (summary, fix) = match pod.api.iter().find(|f| f.kind == Kind::GracePeriodPast) {
                Some(f) => (f.summary.clone(), f.fix.clone()),
                None => (
                    format!(
                        "pod {}/{} should have been gone {} ago; nothing in the API says why.",
                        pod.namespace,
                        pod.name,
                        human_duration(past_grace)
                    ),
                    pod.trace_command(),
                ),
            };
            let said = match answer {
                Some(NodeAnswer::Answered { .. }) => {
                    format!("{summary} The podstuck DaemonSet on its node has no finding about it (yet).")
                }
                _ => summary,
            };
            mine.push(row(
                Kind::GracePeriodPast.id(),
                rank(Kind::GracePeriodPast),
                Source::Api,
                "warning",
                &said,
                &fix,
            ));
        }
        rows.extend(mine);
        if let (Some(node), None | Some(NodeAnswer::NoDaemonSet | NodeAnswer::NotHeard { .. })) = (&pod.node, answer) {
            run_on_node.push(RunOnNode {
                node: node.clone(),
                namespace: pod.namespace.clone(),
                name: pod.name.clone(),
                command: pod.trace_command(),
            });
        }
    }
    // Pods never scheduled last: they have no node to look on.
    let node_key = |n: &Option<String>| (n.is_none(), n.clone());
    rows.sort_by(|a, b| {
        node_key(&a.node)
            .cmp(&node_key(&b.node))
            .then(a.rank.cmp(&b.rank))
            .then_with(|| a.cause.cmp(&b.cause))
            .then(b.terminating.cmp(&a.terminating))
            .then_with(|| (&a.namespace, &a.name).cmp(&(&b.namespace, &b.name)))
    });
    run_on_node.sort_by(|a, b| (&a.node, &a.namespace, &a.name).cmp(&(&b.node, &b.namespace, &b.name)));
    let nodes = node_lines(pods, answers);
    AllReport {
        at: now,
        pods_read,
        stuck: stuck_in_all,
        listed: pods.len(),
        not_listed: stuck_in_all.saturating_sub(pods.len()),
        rows,
        nodes,
        run_on_node,
        unread: unread.iter().map(|u| UnreadLine { what: u.what.clone(), why: u.why.clone() }).collect(),
    }
}

/// One line per node with stuck pods: how many, and what its podstuck said.
fn node_lines(pods: &[StuckPod], answers: &BTreeMap<String, NodeAnswer>) -> Vec<NodeLine> {
    let mut per_node: BTreeMap<&str, usize> = BTreeMap::new();
    for pod in pods {
        if let Some(node) = &pod.node {
            *per_node.entry(node).or_default() += 1;
        }
    }
    per_node
        .into_iter()
        .map(|(node, stuck_pods)| {
            let mut line = NodeLine {
                node: node.to_string(),
                stuck_pods,
                podstuck: "no-daemonset",
                podstuck_pod: None,
                updated: None,
                why: None,
                omitted: 0,
            };
            match answers.get(node) {
                Some(NodeAnswer::Answered { podstuck_pod, page }) => {
                    line.podstuck = "answered";
                    line.podstuck_pod = Some(podstuck_pod.clone());
                    line.updated = Some(page.updated.clone());
                    line.omitted = page.omitted;
                }
                Some(NodeAnswer::NotHeard { podstuck_pod, why }) => {
                    line.podstuck = "not-heard";
                    line.podstuck_pod = podstuck_pod.clone();
                    line.why = Some(why.clone());
                }
                Some(NodeAnswer::NoDaemonSet) | None => {}
            }
            line
        })
        .collect()
}

/// The report as one JSON document (`--json`): a script reads it whole,
/// with jq, and the rows are the table's, the whole fix in each.
pub fn json(report: &AllReport, read_through: &str) -> String {
    #[derive(Serialize)]
    struct Document<'a> {
        r#type: &'static str,
        read_through: &'a str,
        #[serde(flatten)]
        report: &'a AllReport,
    }
    serde_json::to_string(&Document { r#type: "explain-all", read_through, report }).expect("the report serialises")
}

/// The report in plain words: a verdict line, the table, what to run on
/// nodes podstuck was not heard from, and what was not listed or read.
pub fn text(report: &AllReport) -> String {
    let mut out = String::new();
    let scope = match report.stuck {
        0 => {
            return format!(
                "no pod is stuck in Terminating past its grace period ({} pod(s) read at {})\n",
                report.pods_read,
                rfc3339_seconds(report.at)
            );
        }
        1 => "1 pod is stuck in Terminating past its grace period".to_string(),
        n => format!("{n} pods are stuck in Terminating past their grace period"),
    };
    let nodes = report.nodes.len();
    out.push_str(&format!(
        "{scope}, on {nodes} node(s) ({} pod(s) read at {}):\n\n",
        report.pods_read,
        rfc3339_seconds(report.at)
    ));
    let header = ["NODE", "CAUSE", "POD", "TERMINATING", "FROM", "FIX"].map(String::from);
    let mut table: Vec<[String; 6]> = vec![header];
    for r in &report.rows {
        let fix = r.fix.lines().next().unwrap_or("").to_string();
        let more = if r.fix.lines().nth(1).is_some() { " ..." } else { "" };
        table.push([
            r.node.clone().unwrap_or_else(|| "(not scheduled)".into()),
            r.cause.clone(),
            format!("{}/{}", r.namespace, r.name),
            human_duration(r.terminating),
            r.from.words().to_string(),
            format!("{fix}{more}"),
        ]);
    }
    let table: Vec<[String; 6]> =
        table.into_iter().map(|cells| cells.map(|c| terminal_safe(&c).into_owned())).collect();
    let mut widths = [0usize; 6];
    for cells in &table {
        for (w, c) in widths.iter_mut().zip(cells) {
            *w = (*w).max(c.chars().count());
        }
    }
    for cells in &table {
        let mut line = String::new();
        for (i, c) in cells.iter().enumerate() {
            if i == cells.len() - 1 {
                line.push_str(c);
            } else {
                line.push_str(c);
                line.push_str(&" ".repeat(widths[i] - c.chars().count() + 2));
            }
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    if report.not_listed > 0 {
        out.push_str(&format!("\n... and {} more pod(s) stuck, not listed (at most {MAX_PODS_LISTED}, the longest stuck first; -n NAMESPACE narrows)\n", report.not_listed));
    }
    let unheard: Vec<&NodeLine> = report.nodes.iter().filter(|n| n.podstuck != "answered").collect();
    if !unheard.is_empty() {
        out.push_str(
            "\nThe podstuck DaemonSet was not heard on these nodes, so what their kernel shows is not in the table:\n",
        );
        for n in &unheard {
            let why = match (n.podstuck, &n.why) {
                ("no-daemonset", _) => "no podstuck DaemonSet pod runs there".to_string(),
                (_, Some(why)) => format!(
                    "{}: {why}",
                    n.podstuck_pod
                        .as_deref()
                        .map(|p| format!("podstuck pod {p}"))
                        .unwrap_or_else(|| "the DaemonSet".into())
                ),
                _ => "not heard".to_string(),
            };
            out.push_str(&format!("  {}: {}\n", n.node, terminal_safe(&why)));
        }
        out.push_str("Run on each of their pods (a debug pod on its node traces its teardown):\n");
        let width = report.run_on_node.iter().map(|r| r.command.chars().count()).max().unwrap_or(0);
        for r in &report.run_on_node {
            out.push_str(&format!(
                "  {}{}  # on {}\n",
                r.command,
                " ".repeat(width - r.command.chars().count()),
                r.node
            ));
        }
    }
    for n in report.nodes.iter().filter(|n| n.omitted > 0) {
        out.push_str(&format!(
            "\nnode {}: its podstuck lists its most pressing findings only, {} more not read\n",
            n.node, n.omitted
        ));
    }
    for u in &report.unread {
        out.push_str(&format!("\ncould not read {}: {}\n", u.what, terminal_safe(&u.why)));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::findings;
    use super::super::tests::{at, deleted_pod, snapshot};
    use super::*;

    /// Pod `ns/name` with UID `uid` on `node`, due at `due`, its API findings as explain finds them at `now`.
    fn stuck(name: &str, uid: &str, node: Option<&str>, due: f64, finalizer: bool, now: f64) -> StuckPod {
        let mut pod = deleted_pod(at(due));
        pod.metadata.name = Some(name.into());
        pod.metadata.uid = Some(uid.into());
        pod.spec.as_mut().unwrap().node_name = node.map(str::to_string);
        if finalizer {
            pod.metadata.finalizers = Some(vec!["example.com/cleanup".into()]);
        }
        let s = snapshot(pod, at(now));
        StuckPod::of(&s, findings(&s))
    }

    const MOUNTED: &str = "11111111-0000-4000-8000-000000000001";
    const HELD: &str = "22222222-0000-4000-8000-000000000002";
    const ELSEWHERE: &str = "33333333-0000-4000-8000-000000000003";

    fn page(findings: serde_json::Value) -> FindingsPage {
        let text = serde_json::json!({"node": "worker-1", "updated": "2023-11-14T22:20:00Z", "findings": findings, "omitted": 0}).to_string();
        FindingsPage::parse(&text).unwrap()
    }

    fn volume_finding(uid: &str, status: &str) -> serde_json::Value {
        serde_json::json!({"type": "finding", "kind": "volume-still-mounted", "pod_uid": uid, "pods": [uid], "severity": "critical", "status": status,
            "summary": "a CSI volume is still mounted", "fix": "umount /var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/pvc-1/mount\nthen more"})
    }

    #[test]
    fn only_pods_past_their_deletion_time_are_stuck_the_longest_first_and_capped() {
        let now = at(1000.0);
        let mut due_soon = deleted_pod(at(1010.0));
        due_soon.metadata.name = Some("within-grace".into());
        let mut running = deleted_pod(at(0.0));
        running.metadata.deletion_timestamp = None;
        running.metadata.name = Some("running".into());
        let mut old = deleted_pod(at(100.0));
        old.metadata.name = Some("old".into());
        let mut older = deleted_pod(at(50.0));
        older.metadata.name = Some("older".into());
        let (picked, total) = stuck_pods(vec![due_soon.clone(), running.clone(), old.clone(), older.clone()], now, 500);
        let names: Vec<_> = picked.iter().map(|p| p.metadata.name.clone().unwrap()).collect();
        assert_eq!((names, total), (vec!["older".to_string(), "old".to_string()], 2));
        let (picked, total) = stuck_pods(vec![old, older, due_soon, running], now, 1);
        assert_eq!((picked.len(), total), (1, 2));
        assert_eq!(picked[0].metadata.name.as_deref(), Some("older"));
    }

    #[test]
    fn causes_are_joined_from_the_node_and_the_api_grouped_by_node_then_cause() {
        let now = 1000.0;
        let pods = [
            stuck("web-0", MOUNTED, Some("worker-1"), 400.0, false, now),
            stuck("db-0", HELD, Some("worker-1"), 100.0, true, now),
            stuck("api-0", ELSEWHERE, Some("worker-3"), 700.0, false, now),
        ];
        let mut answers = BTreeMap::new();
        // A finding about another pod, and one resolved, are left out.
        let other = volume_finding("99999999-0000-4000-8000-000000000009", "active");
        answers.insert(
            "worker-1".to_string(),
            NodeAnswer::Answered {
                podstuck_pod: "podstuck-abcde".into(),
                page: page(serde_json::json!([
                    volume_finding(MOUNTED, "active"),
                    other,
                    volume_finding(HELD, "resolved")
                ])),
            },
        );
        let r = report(at(now), 40, 3, &pods, &answers, &[]);
        let lines: Vec<(Option<&str>, &str, &str, Source)> =
            r.rows.iter().map(|r| (r.node.as_deref(), r.cause.as_str(), r.name.as_str(), r.from)).collect();
        assert_eq!(
            lines,
            [
                (Some("worker-1"), "volume-still-mounted", "web-0", Source::PodstuckDaemonset),
                (Some("worker-1"), "finalizer-pending", "db-0", Source::Api),
                (Some("worker-3"), "grace-period-past", "api-0", Source::Api),
            ]
        );
        assert_eq!(r.rows[0].terminating, Duration::from_secs(630), "deleted at 370 with 30 s of grace");
        assert_eq!(r.rows[0].past_grace, Duration::from_secs(600));
        assert_eq!(r.rows[2].fix, "kubectl podstuck api-0 -n shop");
        // worker-3 has no DaemonSet pod: its pod is to be traced there.
        assert_eq!(r.run_on_node.len(), 1);
        assert_eq!(
            (r.run_on_node[0].node.as_str(), r.run_on_node[0].command.as_str()),
            ("worker-3", "kubectl podstuck api-0 -n shop")
        );
        assert_eq!(
            r.nodes.iter().map(|n| (n.node.as_str(), n.podstuck, n.stuck_pods)).collect::<Vec<_>>(),
            [("worker-1", "answered", 2), ("worker-3", "no-daemonset", 1)]
        );

        let words = text(&r);
        assert!(words.starts_with("3 pods are stuck in Terminating past their grace period, on 2 node(s) (40 pod(s) read at 2023-11-14T22:30:00Z):\n\n"), "{words}");
        let table: Vec<&str> = words.lines().skip(2).take(4).collect();
        assert_eq!(
            table[0].split_whitespace().collect::<Vec<_>>(),
            ["NODE", "CAUSE", "POD", "TERMINATING", "FROM", "FIX"]
        );
        assert!(table[1].starts_with("worker-1  volume-still-mounted  shop/web-0  10m30s       podstuck DaemonSet  umount /var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/pvc-1/mount ..."), "{words}");
        assert!(table[2].contains("shop/db-0   15m30s       API                 kubectl patch pod -n shop --type=json -p '[{\"op\":\"test\""), "{words}");
        assert!(words.contains("\n  worker-3: no podstuck DaemonSet pod runs there\n"), "{words}");
        assert!(words.contains("\n  kubectl podstuck api-0 -n shop  # on worker-3\n"), "{words}");

        let doc: serde_json::Value = serde_json::from_str(&json(&r, "kubeconfig k")).unwrap();
        assert_eq!(doc["type"], "explain-all");
        assert_eq!(doc["rows"][0]["from"], "podstuck-daemonset");
        assert_eq!(
            doc["rows"][0]["fix"],
            "umount /var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/pvc-1/mount\nthen more"
        );
        assert_eq!(doc["rows"][1]["terminating_seconds"], 930);
        assert_eq!(doc["run_on_node"][0]["command"], "kubectl podstuck api-0 -n shop");
        assert_eq!(
            (doc["stuck"].as_u64(), doc["listed"].as_u64(), doc["not_listed"].as_u64()),
            (Some(3), Some(3), Some(0))
        );
    }

    #[test]
    fn a_node_not_heard_names_why_and_a_node_with_nothing_says_so() {
        let now = 1000.0;
        let pods = [
            stuck("web-0", MOUNTED, Some("worker-1"), 400.0, false, now),
            stuck("api-0", ELSEWHERE, Some("worker-2"), 400.0, false, now),
        ];
        let mut answers = BTreeMap::new();
        answers.insert(
            "worker-1".to_string(),
            NodeAnswer::Answered { podstuck_pod: "podstuck-a".into(), page: page(serde_json::json!([])) },
        );
        answers.insert(
            "worker-2".to_string(),
            NodeAnswer::NotHeard { podstuck_pod: Some("podstuck-b".into()), why: "no answer within 5.0 s".into() },
        );
        let r = report(
            at(now),
            2,
            5,
            &pods,
            &answers,
            &[Unread { what: "volume attachments".into(), why: "permission missing".into() }],
        );
        assert!(
            r.rows[0].summary.ends_with("The podstuck DaemonSet on its node has no finding about it (yet)."),
            "{}",
            r.rows[0].summary
        );
        assert_eq!(r.run_on_node.iter().map(|p| p.name.as_str()).collect::<Vec<_>>(), ["api-0"]);
        let words = text(&r);
        assert!(words.contains("\n  worker-2: podstuck pod podstuck-b: no answer within 5.0 s\n"), "{words}");
        assert!(words.contains("\n... and 3 more pod(s) stuck, not listed (at most 500"), "{words}");
        assert!(words.contains("\ncould not read volume attachments: permission missing\n"), "{words}");
        assert!(text(&report(at(now), 7, 0, &[], &answers, &[]))
            .starts_with("no pod is stuck in Terminating past its grace period (7 pod(s) read at"));
    }

    #[test]
    fn a_nodes_words_are_made_safe_where_they_are_read() {
        let mut f = volume_finding(MOUNTED, "active");
        f["fix"] = "umount /x\u{1b}]0;owned\u{7}/\u{202e}gpj".into();
        let p = page(serde_json::json!([f]));
        assert_eq!(p.findings[0].fix, "umount /x\\u{1b}]0;owned\\u{7}/\\u{202e}gpj");
        assert!(FindingsPage::parse("<html>").unwrap_err().contains("not podstuck's JSON"));
    }
}
