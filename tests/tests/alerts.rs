//! podstuck's alert rules and Grafana dashboard (deploy/), held to what
//! they promise an on-call SRE:
//!
//! - the rule file is valid and its promtool unit tests pass (the real
//!   promtool: each alert fires with its words, and what must not fire
//!   does not);
//! - the Prometheus Operator's copy of the rules is the same rules, and
//!   the PodMonitor scrapes the DaemonSet the way the rules need;
//! - the rules and the dashboard name only the /metrics contract's
//!   families, with their labels and values, so a renamed metric breaks a
//!   test here rather than an alert that silently never fires;
//! - a real Prometheus, scraping as docs/monitoring.md says, evaluates
//!   every rule without error and shows the alerts: on a page shaped as
//!   the contract says (node-wide findings, podstuck's own cost, every
//!   dashboard query), and on a real podstuck watching a volume left
//!   mounted (pending, as an alert is before its `for:` has passed).

use std::collections::BTreeSet;
use std::ffi::OsStr;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use podstuck_tests::prerequisite::{missing, this_test};
use podstuck_tests::scrape::{free_port, try_get, Prometheus, SD_POD};
use podstuck_tests::*;
use serde_json::Value;

fn secs(n: u64) -> Duration {
    Duration::from_secs(n)
}

/// deploy/monitoring/FILE: the rule file, its tests, the dashboard.
fn deploy(file: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy/monitoring").join(file)
}

const PROMTOOL: &str = "/usr/bin/promtool";

/// promtool's verdict on `args`, run in deploy/monitoring/; `None` where promtool is
/// missing and skips are allowed.
fn promtool(args: &[&str]) -> Option<(bool, String)> {
    if !Path::new(PROMTOOL).exists() {
        return missing(
            &this_test(),
            &format!("promtool ({PROMTOOL}, Debian's prometheus)"),
            "apt-get install prometheus, or run `cargo xtask test`, which does",
        );
    }
    let out = Command::new(PROMTOOL).args(args).current_dir(deploy("")).output().expect("run promtool");
    let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
    Some((out.status.success(), said))
}

#[test]
fn promtool_checks_the_rule_file() {
    let Some((ok, said)) = promtool(&["check", "rules", "prometheus-rules.yaml"]) else { return };
    assert!(ok, "promtool check rules deploy/monitoring/prometheus-rules.yaml:\n{said}");
    assert!(said.contains("SUCCESS"), "{said}");
}

#[test]
fn promtool_unit_tests_of_the_rules_pass() {
    let Some((ok, said)) = promtool(&["test", "rules", "prometheus-rules.test.yaml"]) else { return };
    assert!(ok, "promtool test rules deploy/monitoring/prometheus-rules.test.yaml:\n{said}");
    assert!(said.contains("SUCCESS"), "{said}");
}

/// The rules of the plain rule file, every group's.
fn rules() -> Vec<Value> {
    let file = harness::deploy_manifest("monitoring/prometheus-rules.yaml");
    let groups = file[0]["groups"].as_array().expect("groups:").clone();
    groups.iter().flat_map(|g| g["rules"].as_array().expect("rules:").clone()).collect()
}

#[test]
fn the_prometheus_rule_holds_the_plain_files_groups() {
    let plain = harness::deploy_manifest("monitoring/prometheus-rules.yaml");
    let operator = harness::deploy_manifest("components/prometheus-operator/podstuck-prometheusrule.yaml");
    let [rule] = &operator[..] else { panic!("one document: {operator:?}") };
    assert_eq!(rule["apiVersion"], "monitoring.coreos.com/v1");
    assert_eq!(rule["kind"], "PrometheusRule");
    assert_eq!(rule["metadata"]["namespace"], "podstuck", "beside the DaemonSet");
    assert!(rule["metadata"]["labels"].as_object().is_some_and(|l| !l.is_empty()), "labels for a ruleSelector");
    assert!(plain[0]["groups"].as_array().is_some_and(|g| !g.is_empty()));
    assert_eq!(
        rule["spec"]["groups"], plain[0]["groups"],
        "deploy/components/prometheus-operator/podstuck-prometheusrule.yaml's spec.groups differ from deploy/monitoring/prometheus-rules.yaml's groups"
    );
}

#[test]
fn the_pod_monitor_scrapes_the_daemonsets_metrics_port() {
    let monitor = harness::deploy_manifest("components/prometheus-operator/podstuck-podmonitor.yaml");
    let daemonset = harness::deploy_manifest("base/podstuck-daemonset.yaml");
    let ds = daemonset.iter().find(|d| d["kind"] == "DaemonSet").expect("a DaemonSet");
    let [monitor] = &monitor[..] else { panic!("one document: {monitor:?}") };
    assert_eq!(monitor["kind"], "PodMonitor");
    assert_eq!(monitor["metadata"]["namespace"], ds["metadata"]["namespace"]);
    // Its job is NAMESPACE/NAME, which the rules' `(.*/)?podstuck` takes.
    assert_eq!(monitor["metadata"]["name"], "podstuck");
    let pod_labels = ds["spec"]["template"]["metadata"]["labels"].as_object().unwrap();
    for (k, v) in monitor["spec"]["selector"]["matchLabels"].as_object().expect("matchLabels") {
        assert_eq!(
            pod_labels.get(k),
            Some(v),
            "the PodMonitor selects {k}={v}, the DaemonSet's pods are {pod_labels:?}"
        );
    }
    let [endpoint] = &monitor["spec"]["podMetricsEndpoints"].as_array().unwrap()[..] else { panic!("one endpoint") };
    let ports = ds["spec"]["template"]["spec"]["containers"][0]["ports"].as_array().unwrap();
    assert!(ports.iter().any(|p| p["name"] == endpoint["port"]), "port {} is not among {ports:?}", endpoint["port"]);
    assert_eq!(endpoint["path"], "/metrics");
}

#[test]
fn every_alert_says_its_severity_summary_and_description() {
    let rules = rules();
    assert!(rules.len() >= 5, "{rules:?}");
    let mut names = BTreeSet::new();
    for rule in &rules {
        let name = rule["alert"].as_str().unwrap_or_else(|| panic!("an alert rule, not a recording one: {rule}"));
        names.insert(name);
        assert!(
            ["critical", "warning", "info"].contains(&rule["labels"]["severity"].as_str().unwrap_or("")),
            "{name}: severity: {rule}"
        );
        for annotation in ["summary", "description"] {
            let text = rule["annotations"][annotation].as_str().unwrap_or("");
            assert!(
                text.split_whitespace().count() >= 5,
                "{name}: {annotation} should be words an SRE can act on: {text:?}"
            );
        }
    }
    for wanted in [
        "PodStuckOnNode",
        "ManyPodsStuckOnNode",
        "NodeCauseBlocksPods",
        "PodstuckDown",
        "PodstuckAbsent",
        "PodstuckLosingEvents",
        "PodstuckCostTooHigh",
        "PodstuckCannotTrace",
    ] {
        assert!(names.contains(wanted), "{wanted} is missing: {names:?}");
    }
    // No alert fires on one bad evaluation.
    for rule in &rules {
        assert!(rule["for"].as_str().is_some_and(|f| f != "0s"), "{}: no for:", rule["alert"]);
    }
    // One stuck pod waits for a working day; a node-wide cause or many
    // pods page.
    let severity = |name: &str| rules.iter().find(|r| r["alert"] == name).unwrap()["labels"]["severity"].clone();
    assert_eq!(severity("PodStuckOnNode"), "warning");
    assert_eq!(severity("ManyPodsStuckOnNode"), "critical");
    assert_eq!(severity("NodeCauseBlocksPods"), "critical");
    // From an alert to the answer, from a laptop: the podstuck that saw it
    // by its pod and node, and the port-forward that reaches its
    // /findings; never its pod's address, which the NetworkPolicy keeps
    // from a laptop.
    for rule in &rules {
        let description = rule["annotations"]["description"].as_str().unwrap();
        assert!(!description.contains("http://{{ $labels.instance }}"), "{}: {description}", rule["alert"]);
    }
    for rule in rules.iter().filter(|r| r["expr"].as_str().unwrap().contains("podstuck_findings")) {
        let description = rule["annotations"]["description"].as_str().unwrap();
        assert!(description.contains("port-forward pod/{{ .Labels.pod }} 9464"), "{description}");
        assert!(
            description.contains("pod {{ .Labels.namespace }}/{{ .Labels.pod }} on node {{ $labels.node }}"),
            "{description}"
        );
        assert!(description.contains("{{ $labels.node }}"), "{description}");
        let expr = rule["expr"].as_str().unwrap();
        assert!(!expr.contains("fix"), "{}: the alert is grouped by fix: {expr}", rule["alert"]);
    }
    // The fix, where one finding is the alert's: an annotation read from
    // the series as it is now, never a label (a reworded fix would start
    // the alert's `for` over).
    for name in ["PodStuckOnNode", "NodeCauseBlocksPods"] {
        let rule = rules.iter().find(|r| r["alert"] == name).unwrap();
        assert!(rule["annotations"]["description"].as_str().unwrap().contains("{{ .Labels.fix }}"), "{name}");
    }
}

/// Every alert's runbook_url is a section of docs/runbooks.md, under one
/// base, and every alert has one.
#[test]
fn every_alert_links_its_section_of_the_runbooks() {
    let runbooks = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("../docs/runbooks.md")).unwrap();
    let anchors: BTreeSet<String> =
        runbooks.lines().filter_map(|l| l.strip_prefix("## ")).map(|h| h.trim().to_lowercase()).collect();
    for rule in rules() {
        let name = rule["alert"].as_str().unwrap();
        let url = rule["annotations"]["runbook_url"].as_str().unwrap_or_else(|| panic!("{name}: no runbook_url"));
        let anchor = url.strip_prefix(RUNBOOKS).unwrap_or_else(|| panic!("{name}: {url} is not under {RUNBOOKS}"));
        assert_eq!(anchor, name.to_lowercase(), "{name}: {url}");
        assert!(anchors.contains(anchor), "docs/runbooks.md has no section ## {name}");
    }
}

/// Where the rules say the runbooks are: docs/runbooks.md of a home that
/// does not exist yet (`.invalid` resolves nowhere, never to another's
/// site); docs/monitoring.md says how to point it at your copy.
const RUNBOOKS: &str = "https://podstuck.invalid/docs/runbooks.md#";

#[test]
fn the_cost_alerts_follow_the_daemonsets_budget() {
    let rules = rules();
    let daemonset = harness::deploy_manifest("base/podstuck-daemonset.yaml");
    let ds = daemonset.iter().find(|d| d["kind"] == "DaemonSet").expect("a DaemonSet");
    let resources = &ds["spec"]["template"]["spec"]["containers"][0]["resources"];
    let limit = resources["limits"]["memory"].as_str().expect("a memory limit");
    let limit_bytes: f64 = limit.strip_suffix("Mi").expect("a limit in Mi").parse::<f64>().unwrap() * 1024.0 * 1024.0;
    let request_cpu = resources["requests"]["cpu"].as_str().expect("a CPU request");
    let request_cores = request_cpu.strip_suffix('m').expect("a request in m").parse::<f64>().unwrap() / 1000.0;

    let cost = |resource: &str| {
        rules
            .iter()
            .find(|r| r["alert"] == "PodstuckCostTooHigh" && r["labels"]["resource"] == resource)
            .unwrap_or_else(|| panic!("no {resource} rule"))
    };
    let threshold = |rule: &Value| -> f64 {
        let expr = rule["expr"].as_str().unwrap();
        let (_, right) = expr.rsplit_once('>').unwrap_or_else(|| panic!("no threshold in {expr}"));
        right.split('*').map(|n| n.trim().parse::<f64>().unwrap_or_else(|e| panic!("{n:?} in {expr}: {e}"))).product()
    };
    let memory = cost("memory");
    assert!(threshold(memory) < limit_bytes, "the memory alert must fire before the limit ({limit}) kills podstuck");
    let description = memory["annotations"]["description"].as_str().unwrap();
    assert!(
        description.contains(&format!("limit of {limit}")),
        "the description names the DaemonSet's limit, {limit}: {description}"
    );
    let cpu = cost("cpu");
    assert!(threshold(cpu) > request_cores);
    let description = cpu["annotations"]["description"].as_str().unwrap();
    assert!(
        description.contains(&format!("it requests {request_cores}")),
        "the description names the DaemonSet's request, {request_cores}: {description}"
    );
    assert!(cost("kernel-programs")["expr"].as_str().unwrap().contains("podstuck_program_run_seconds_total"));
}

// The /metrics contract ------------------------------------------------

/// Every family `/metrics` holds, with its own labels; every series also
/// has the target's `job` and `instance`.
const CONTRACT: &[(&str, &[&str])] = &[
    ("podstuck_up", &[]),
    ("podstuck_build_info", &["version", "node", "kernel"]),
    ("podstuck_calls_total", &["syscall"]),
    ("podstuck_call_duration_seconds", &["role", "syscall", "outcome"]),
    ("podstuck_pod_calls_total", &["pod_uid", "role", "syscall", "outcome"]),
    ("podstuck_findings", &["node", "kind", "severity", "pod_uid", "fix"]),
    ("podstuck_cannot_trace", &["node", "reason"]),
    ("podstuck_events_seen_total", &[]),
    ("podstuck_events_lost_total", &[]),
    ("podstuck_calls_outside_series_total", &[]),
    ("process_cpu_seconds_total", &[]),
    ("process_resident_memory_bytes", &[]),
    ("process_open_fds", &[]),
    ("process_max_fds", &[]),
    ("process_start_time_seconds", &[]),
    ("podstuck_program_runs_total", &["program"]),
    ("podstuck_program_run_seconds_total", &["program"]),
];

/// The families that are histograms: queried as `_bucket` (with `le`),
/// `_sum` and `_count`, never by their own name.
const HISTOGRAMS: &[&str] = &["podstuck_call_duration_seconds"];

/// The values the contract allows a label, where it lists them (a
/// finding's `kind`: any of the table of causes, `findings::kinds`).
const VALUES: &[(&str, &[&str])] = &[
    ("syscall", &["unlinkat", "unlink", "rmdir", "umount2"]),
    ("role", &["kubelet", "runtime", "shim", "runc", "csi-plugin", "systemd", "other"]),
    ("outcome", &["ok", "EBUSY", "EPERM", "EACCES", "ENOTEMPTY", "ENOENT", "EINVAL", "error"]),
    ("severity", &["critical", "warning", "info"]),
    ("reason", &["lockdown", "no-btf", "privileges", "tracefs", "kernel", "load-failed"]),
];

/// The labels of kube-state-metrics' kube_pod_info the stuck-pod alert
/// joins on (its `uid` as `pod_uid`) and takes (`namespace`, `pod`).
const JOINED_LABELS: &[&str] = &["namespace", "pod", "uid"];

const TARGET_LABELS: &[&str] = &["job", "instance"];

/// The labels of the series `name`, if it is one the contract promises.
fn series_labels(name: &str) -> Option<Vec<&'static str>> {
    let own = |family: &str| CONTRACT.iter().find(|(f, _)| *f == family).map(|(_, labels)| labels.to_vec());
    if !HISTOGRAMS.contains(&name) {
        if let Some(labels) = own(name) {
            return Some(labels);
        }
    }
    for suffix in ["_bucket", "_sum", "_count"] {
        if let Some(family) = name.strip_suffix(suffix).filter(|f| HISTOGRAMS.contains(f)) {
            let mut labels = own(family)?;
            if suffix == "_bucket" {
                labels.push("le");
            }
            return Some(labels);
        }
    }
    None
}

fn ours(name: &str) -> bool {
    name.starts_with("podstuck_") || name.starts_with("process_")
}

#[derive(Debug, PartialEq)]
enum Token {
    Name(String),
    Text(String),
    Op(String),
}

/// PromQL's tokens, enough to find metric names, their matchers and the
/// labels of by/on clauses: names, quoted strings, operators and
/// punctuation (numbers and durations come out as their letters).
fn tokens(expr: &str) -> Vec<Token> {
    let chars: Vec<char> = expr.chars().collect();
    let mut out = Vec::new();
    let mut i = 0;
    while i < chars.len() {
        let c = chars[i];
        if c.is_ascii_alphabetic() || c == '_' || c == ':' {
            let start = i;
            while i < chars.len() && (chars[i].is_ascii_alphanumeric() || chars[i] == '_' || chars[i] == ':') {
                i += 1;
            }
            out.push(Token::Name(chars[start..i].iter().collect()));
        } else if c == '"' || c == '\'' || c == '`' {
            let mut text = String::new();
            i += 1;
            while i < chars.len() && chars[i] != c {
                if chars[i] == '\\' && c != '`' {
                    i += 1;
                }
                text.extend(chars.get(i));
                i += 1;
            }
            i += 1;
            out.push(Token::Text(text));
        } else if c.is_whitespace() || c.is_ascii_digit() || c == '.' || c == '$' {
            i += 1;
        } else {
            let two: String = chars[i..(i + 2).min(chars.len())].iter().collect();
            let op = if ["=~", "!~", "!=", "==", ">=", "<="].contains(&two.as_str()) { two } else { c.to_string() };
            i += op.chars().count();
            out.push(Token::Op(op));
        }
    }
    out
}

/// What in `expr` (PromQL) is not in the contract: metric names, label
/// names in matchers and in by/on clauses, listed label values. `uses`
/// gathers the series it names.
fn contract_problems(expr: &str, uses: &mut BTreeSet<String>) -> Vec<String> {
    let every_label: BTreeSet<&str> = CONTRACT
        .iter()
        .flat_map(|(_, l)| l.iter().copied())
        .chain(TARGET_LABELS.iter().copied())
        .chain(JOINED_LABELS.iter().copied())
        .chain(["le"])
        .collect();
    let tokens = tokens(expr);
    let mut problems = Vec::new();
    let mut i = 0;
    while i < tokens.len() {
        let Token::Name(name) = &tokens[i] else {
            i += 1;
            continue;
        };
        let opens = |at: usize, what: &str| tokens.get(at) == Some(&Token::Op(what.to_string()));
        if ["by", "without", "on", "ignoring", "group_left", "group_right"].contains(&name.as_str())
            && opens(i + 1, "(")
        {
            i += 2;
            while i < tokens.len() && !opens(i, ")") {
                if let Token::Name(label) = &tokens[i] {
                    if !every_label.contains(label.as_str()) {
                        problems.push(format!("{name} ({label}): no family of the contract has a label {label}"));
                    }
                }
                i += 1;
            }
            continue;
        }
        i += 1;
        if !ours(name) {
            continue;
        }
        let Some(labels) = series_labels(name) else {
            problems.push(format!("{name}: not a series of the contract"));
            continue;
        };
        uses.insert(name.clone());
        if !opens(i, "{") {
            continue;
        }
        i += 1;
        while i + 2 < tokens.len() && !opens(i, "}") {
            if let (Token::Name(label), Token::Op(op), Token::Text(value)) =
                (&tokens[i], &tokens[i + 1], &tokens[i + 2])
            {
                if !labels.contains(&label.as_str()) && !TARGET_LABELS.contains(&label.as_str()) {
                    problems.push(format!("{name}{{{label}{op}...}}: {name} has no label {label} (it has {labels:?})"));
                }
                // The kinds are the table of causes' own.
                let listed: Option<Vec<String>> = match label.as_str() {
                    "kind" => Some(findings::kinds()),
                    _ => {
                        VALUES.iter().find(|(l, _)| l == label).map(|(_, v)| v.iter().map(|v| v.to_string()).collect())
                    }
                };
                if let (Some(allowed), "=" | "!=") = (listed, op.as_str()) {
                    if !value.is_empty() && !allowed.contains(value) {
                        problems.push(format!("{name}{{{label}{op}{value:?}}}: {label} is one of {allowed:?}"));
                    }
                }
                i += 3;
            } else {
                i += 1;
            }
        }
    }
    problems
}

/// The podstuck_* and process_* words of prose (an annotation) that are
/// not the contract's.
fn words_not_in_contract(text: &str) -> Vec<String> {
    text.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
        .filter(|w| ours(w) && series_labels(w).is_none())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_contract_check_catches_what_it_should() {
    let mut uses = BTreeSet::new();
    assert!(contract_problems(
        r#"sum by (le) (rate(podstuck_call_duration_seconds_bucket{outcome="EBUSY"}[5m]))"#,
        &mut uses
    )
    .is_empty());
    assert!(contract_problems(
        r#"podstuck_findings{job=~"(.*/)?podstuck", severity="critical", pod_uid!=""}"#,
        &mut uses
    )
    .is_empty());
    let bad = [
        r#"podstuck_call_latency_seconds_count"#,
        r#"podstuck_call_duration_seconds"#,
        r#"podstuck_calls_total{errno="EBUSY"}"#,
        r#"podstuck_findings{severity="page"}"#,
        r#"sum by (errno) (podstuck_calls_total)"#,
        r#"process_virtual_memory_bytes"#,
    ];
    for expr in bad {
        assert!(!contract_problems(expr, &mut uses).is_empty(), "{expr} passed");
    }
    assert_eq!(words_not_in_contract("see podstuck's podstuck_findings, not podstuck_finding"), ["podstuck_finding"]);
}

#[test]
fn the_rules_name_only_the_metrics_contract() {
    let rules = rules();
    let mut uses = BTreeSet::new();
    for rule in &rules {
        let expr = rule["expr"].as_str().unwrap();
        let problems = contract_problems(expr, &mut uses);
        assert!(problems.is_empty(), "{}: {problems:#?}\nin {expr}", rule["alert"]);
        for (name, text) in rule["annotations"].as_object().unwrap() {
            let words = words_not_in_contract(text.as_str().unwrap());
            assert!(words.is_empty(), "{}'s {name} names {words:?}, not in the contract", rule["alert"]);
        }
    }
    for wanted in [
        "podstuck_findings",
        "podstuck_events_lost_total",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "podstuck_program_run_seconds_total",
    ] {
        assert!(uses.contains(wanted), "no rule looks at {wanted}: {uses:?}");
    }
}

// The dashboard --------------------------------------------------------

fn dashboard() -> Value {
    let text = std::fs::read_to_string(deploy("grafana-dashboard.json")).unwrap();
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("deploy/monitoring/grafana-dashboard.json is not JSON: {e}"))
}

/// Every PromQL expression of the dashboard: panel targets and annotation
/// queries (`expr`), and the query variables' queries.
fn dashboard_queries(dashboard: &Value) -> Vec<String> {
    fn walk(value: &Value, out: &mut Vec<String>) {
        match value {
            Value::Object(map) => {
                if let Some(Value::String(expr)) = map.get("expr") {
                    out.push(expr.clone());
                }
                map.values().for_each(|v| walk(v, out));
            }
            Value::Array(items) => items.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    let mut out = Vec::new();
    walk(dashboard, &mut out);
    for variable in dashboard["templating"]["list"].as_array().unwrap() {
        if variable["type"] == "query" {
            let query = &variable["query"];
            out.push(query.as_str().or(query["query"].as_str()).expect("a query variable's query").to_string());
        }
    }
    out
}

/// A dashboard query as Grafana sends it, its variables filled in.
fn as_sent(query: &str) -> String {
    query.replace("$__rate_interval", "1m").replace("$__range", "5m").replace("$node", ".*")
}

#[test]
fn the_dashboard_is_importable_and_names_only_the_metrics_contract() {
    let dashboard = dashboard();
    assert!(
        dashboard["schemaVersion"].as_u64().is_some_and(|v| v >= 36),
        "schemaVersion {}",
        dashboard["schemaVersion"]
    );
    assert!(dashboard["id"].is_null(), "an imported dashboard gets its id from Grafana");
    assert!(dashboard["uid"].as_str().is_some_and(|u| !u.is_empty() && u.len() <= 40));
    let variables = dashboard["templating"]["list"].as_array().expect("templating.list");
    let datasource = variables.iter().find(|v| v["name"] == "datasource").expect("a datasource variable");
    assert_eq!(datasource["type"], "datasource");
    assert_eq!(datasource["query"], "prometheus");
    let node = variables.iter().find(|v| v["name"] == "node").expect("a node variable");
    assert_eq!(node["type"], "query");
    let node_query = node["query"].as_str().or(node["query"]["query"].as_str()).unwrap();
    assert!(
        node_query.starts_with("label_values(podstuck_build_info")
            || node_query.starts_with("label_values(podstuck_up"),
        "{node_query}"
    );

    let panels = dashboard["panels"].as_array().expect("panels");
    let mut ids = BTreeSet::new();
    for panel in panels {
        let title = panel["title"].as_str().unwrap_or("");
        assert!(ids.insert(panel["id"].as_u64().expect("an id")), "{title}: id {} twice", panel["id"]);
        assert!(!title.is_empty() && panel["gridPos"]["w"].as_u64().is_some(), "{panel}");
        assert_eq!(panel["datasource"]["uid"], "${datasource}", "{title}: the data source the user picks");
        let targets =
            panel["targets"].as_array().filter(|t| !t.is_empty()).unwrap_or_else(|| panic!("{title}: no query"));
        for target in targets {
            assert!(target["expr"].as_str().is_some_and(|e| !e.is_empty()), "{title}: {target}");
            assert_eq!(target["datasource"]["uid"], "${datasource}", "{title}");
        }
    }

    let mut uses = BTreeSet::new();
    for query in dashboard_queries(&dashboard) {
        let problems = contract_problems(&query, &mut uses);
        assert!(problems.is_empty(), "{problems:#?}\nin {query}");
    }
    // What the dashboard is for.
    for wanted in [
        "podstuck_findings",
        "podstuck_call_duration_seconds_bucket",
        "podstuck_call_duration_seconds_count",
        "podstuck_events_lost_total",
        "process_cpu_seconds_total",
        "process_resident_memory_bytes",
        "process_open_fds",
        "podstuck_program_run_seconds_total",
    ] {
        assert!(uses.contains(wanted), "no panel shows {wanted}: {uses:?}");
    }
    let table = panels
        .iter()
        .find(|p| p["type"] == "table" && p["targets"][0]["expr"].as_str().unwrap().contains("podstuck_findings"))
        .expect("a table of findings");
    let expr = table["targets"][0]["expr"].as_str().unwrap();
    for label in ["node", "pod_uid", "kind", "fix"] {
        assert!(expr.contains(label), "the findings table should show {label}: {expr}");
    }
    let latency: Vec<&str> = panels
        .iter()
        .flat_map(|p| p["targets"].as_array().unwrap())
        .filter_map(|t| t["expr"].as_str())
        .filter(|e| e.contains("histogram_quantile"))
        .collect();
    assert!(
        latency.iter().any(|e| e.starts_with("histogram_quantile(0.5,"))
            && latency.iter().any(|e| e.starts_with("histogram_quantile(0.99,")),
        "{latency:?}"
    );
}

// A real Prometheus ----------------------------------------------------

/// A page of `/metrics` as the contract says podstuck serves it, on node
/// `node`, for the `n`th scrape (one a second): counters grow with `n`.
/// One pod stuck (`stuck`, a critical finding), one warning, one node-wide
/// finding (pod ""), events lost, and podstuck over every budget: 300 MiB,
/// and CPU in the process and in its kernel programs growing fast enough
/// that a rate over 5 minutes of a few seconds' samples passes the rules'
/// thresholds within seconds.
/// The pod of the contract page's warning.
const WARNED: &str = "0a1b2c3d-0000-4000-8000-00000000beef";

fn contract_page(node: &str, stuck: &str, n: u64) -> String {
    let mut page = String::new();
    let mut line = |l: String| {
        page.push_str(&l);
        page.push('\n');
    };
    line("# TYPE podstuck_up gauge".into());
    line("podstuck_up 1".into());
    line("# TYPE podstuck_build_info gauge".into());
    line(format!("podstuck_build_info{{version=\"0.1.0\",node=\"{node}\",kernel=\"6.1.0\"}} 1"));
    line("# TYPE podstuck_findings gauge".into());
    line(format!(
        "podstuck_findings{{node=\"{node}\",kind=\"volume-still-mounted\",severity=\"critical\",pod_uid=\"{stuck}\",fix=\"umount /var/lib/kubelet/pods/{stuck}/volumes/kubernetes.io~csi/pvc-1/mount\"}} 1"
    ));
    line(format!("podstuck_findings{{node=\"{node}\",kind=\"removal-storm\",severity=\"warning\",pod_uid=\"{WARNED}\",fix=\"wait for it\"}} 1"));
    line(format!("podstuck_findings{{node=\"{node}\",kind=\"read-only-fs\",severity=\"critical\",pod_uid=\"\",fix=\"mount -o remount,rw /var/lib/kubelet\"}} 1"));
    line("# TYPE podstuck_calls_total counter".into());
    line(format!("podstuck_calls_total{{syscall=\"rmdir\"}} {}", 10 * n));
    line("# TYPE podstuck_call_duration_seconds histogram".into());
    let labels = "role=\"kubelet\",syscall=\"rmdir\",outcome=\"EBUSY\"";
    for (le, share) in
        [("0.000005", 0), ("0.00002", 2), ("0.0001", 5), ("0.0005", 8), ("0.002", 9), ("0.01", 10), ("+Inf", 10)]
    {
        line(format!("podstuck_call_duration_seconds_bucket{{{labels},le=\"{le}\"}} {}", share * n));
    }
    line(format!("podstuck_call_duration_seconds_sum{{{labels}}} {}", 0.0002 * n as f64));
    line(format!("podstuck_call_duration_seconds_count{{{labels}}} {}", 10 * n));
    line("# TYPE podstuck_pod_calls_total counter".into());
    line(format!("podstuck_pod_calls_total{{pod_uid=\"{stuck}\",{labels}}} {}", 10 * n));
    for (family, value) in [
        ("podstuck_events_seen_total", 10 * n),
        ("podstuck_events_lost_total", 3 * n),
        ("podstuck_calls_outside_series_total", n),
    ] {
        line(format!("# TYPE {family} counter"));
        line(format!("{family} {value}"));
    }
    line("# TYPE process_cpu_seconds_total counter".into());
    line(format!("process_cpu_seconds_total {}", 100 * n));
    for (family, value) in [
        ("process_resident_memory_bytes", 300.0 * 1024.0 * 1024.0),
        ("process_open_fds", 42.0),
        ("process_max_fds", 1048576.0),
        ("process_start_time_seconds", 1.7e9),
    ] {
        line(format!("# TYPE {family} gauge"));
        line(format!("{family} {value}"));
    }
    line("# TYPE podstuck_program_runs_total counter".into());
    line(format!("podstuck_program_runs_total{{program=\"sys_exit\"}} {}", 1000 * n));
    line("# TYPE podstuck_program_run_seconds_total counter".into());
    line(format!("podstuck_program_run_seconds_total{{program=\"sys_exit\"}} {}", 10 * n));
    page
}

/// Serves `page(n)` for the nth request on a port of its own, for as long
/// as the test binary runs.
fn serve_pages(page: impl Fn(u64) -> String + Send + Sync + 'static) -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let page = Arc::new(page);
    let served = Arc::new(AtomicU64::new(0));
    std::thread::spawn(move || {
        for stream in listener.incoming() {
            let Ok(mut stream) = stream else { continue };
            let (page, served) = (page.clone(), served.clone());
            // One thread each: a connection Prometheus opens and leaves idle
            // holds up no scrape.
            std::thread::spawn(move || {
                let _ = stream.set_read_timeout(Some(secs(5)));
                let mut request = Vec::new();
                let mut buf = [0u8; 4096];
                while !request.windows(4).any(|w| w == b"\r\n\r\n") {
                    match stream.read(&mut buf) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => request.extend_from_slice(&buf[..n]),
                    }
                }
                let body = page(served.fetch_add(1, Ordering::SeqCst) + 1);
                let head = format!(
                    "HTTP/1.1 200 OK\r\nContent-Type: text/plain; version=0.0.4\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes()).and_then(|()| stream.write_all(body.as_bytes()));
            });
        }
    });
    addr
}

/// The one `ALERTS` sample of `query` (pending or firing), within `timeout`.
fn one_alert(prometheus: &Prometheus, query: &str, timeout: Duration) -> Value {
    prometheus.await_samples(query, timeout, |s| s.len() == 1).remove(0)
}

/// Every rule of deploy/monitoring/prometheus-rules.yaml is loaded and has been
/// evaluated without error (a join that matches many-to-many, say, is an
/// error only on real series).
fn assert_every_rule_is_healthy(prometheus: &Prometheus) {
    let groups = prometheus.await_rules_evaluated(secs(30));
    let loaded: Vec<&Value> = groups.iter().flat_map(|g| g["rules"].as_array().unwrap()).collect();
    assert_eq!(loaded.len(), rules().len(), "{groups:?}");
    for rule in loaded {
        assert_eq!(rule["health"], "ok", "{} {}: {}", rule["name"], rule["query"], rule["lastError"]);
    }
}

#[test]
fn a_real_prometheus_alerts_on_a_page_shaped_as_the_contract() {
    let scratch = ScratchDir::new("alerts-on-a-contract-page");
    let (node, stuck) = ("node-contract-3", new_pod_uid());
    let page_stuck = stuck.clone();
    let target = serve_pages(move |n| contract_page(node, &page_stuck, n));
    let rules = deploy("prometheus-rules.yaml");
    let Some(prometheus) = Prometheus::start_with_rules(&scratch.path().join("prometheus"), target, &[&rules]) else {
        return;
    };
    prometheus.await_value("podstuck_up", 1.0, secs(30));

    // pod_uid names the stuck pod, beside discovery's `pod` (podstuck's own).
    let alert = one_alert(&prometheus, r#"ALERTS{alertname="PodStuckOnNode", alertstate="pending"}"#, secs(30));
    let labels = &alert["metric"];
    assert_eq!(labels["pod_uid"], stuck.as_str(), "{alert}");
    let findings = prometheus.query("podstuck_findings");
    assert!(
        findings.iter().all(|f| f["metric"]["pod"] == SD_POD),
        "discovery's pod label is kept, not podstuck's: {findings:?}"
    );
    assert_eq!(labels["node"], node);
    assert_eq!(labels["kind"], "volume-still-mounted");
    assert_eq!(labels["severity"], "warning", "one pod: a warning");
    assert_eq!(labels["instance"], target.to_string());
    assert!(labels["fix"].is_null(), "the fix is an annotation, not a label: {alert}");
    // The node-wide finding is the node's, not taken for a pod's.
    let alert = one_alert(&prometheus, r#"ALERTS{alertname="NodeCauseBlocksPods", alertstate="pending"}"#, secs(10));
    assert_eq!(alert["metric"]["kind"], "read-only-fs", "{alert}");
    assert_eq!(alert["metric"]["node"], node);
    assert!(alert["metric"]["pod_uid"].is_null(), "{alert}");
    // Events lost, named by node (joined from build_info): pending its 2 minutes.
    let alert = one_alert(&prometheus, r#"ALERTS{alertname="PodstuckLosingEvents", alertstate="pending"}"#, secs(30));
    assert_eq!(alert["metric"]["node"], node, "{alert}");
    // Over every budget: three pending, one per resource, each on the node.
    let costs =
        prometheus.await_samples(r#"ALERTS{alertname="PodstuckCostTooHigh", alertstate="pending"}"#, secs(30), |s| {
            s.len() == 3
        });
    let resources: BTreeSet<&str> = costs.iter().map(|a| a["metric"]["resource"].as_str().unwrap()).collect();
    assert_eq!(resources, BTreeSet::from(["cpu", "kernel-programs", "memory"]));
    assert!(costs.iter().all(|a| a["metric"]["node"] == node), "{costs:?}");
    assert_every_rule_is_healthy(&prometheus);
    // Still one stuck pod, and nothing of the warning or of podstuck's own health.
    assert_eq!(prometheus.query(r#"ALERTS{alertname="PodStuckOnNode"}"#).len(), 1);
    assert!(prometheus.query(r#"ALERTS{alertname=~"PodstuckDown|PodstuckAbsent"}"#).is_empty());

    // Every dashboard query: accepted, and with something to draw.
    let dashboard = dashboard();
    for query in dashboard_queries(&dashboard) {
        // Grafana's label_values(SERIES, LABEL): the LABEL values of SERIES.
        if let Some(args) = query.strip_prefix("label_values(").and_then(|a| a.strip_suffix(')')) {
            let (series, label) = args.rsplit_once(',').unwrap_or_else(|| panic!("{query}"));
            let values: Vec<Value> =
                prometheus.query(&as_sent(series)).iter().map(|s| s["metric"][label.trim()].clone()).collect();
            assert_eq!(values, [Value::from(node)], "{query}");
            continue;
        }
        let sent = as_sent(&query);
        let answer = prometheus.try_query(&sent);
        assert_eq!(answer["status"], "success", "{sent}: {answer}");
        // The annotations show firing stuck-pod alerts: none yet.
        if !query.starts_with("ALERTS") {
            let result = answer["data"]["result"].as_array().unwrap();
            assert!(!result.is_empty(), "{sent}: nothing, though every family is on the page");
        }
    }
    let table = dashboard["panels"].as_array().unwrap().iter().find(|p| p["type"] == "table").unwrap();
    let rows = prometheus.query(&as_sent(table["targets"][0]["expr"].as_str().unwrap()));
    assert!(
        rows.iter().any(|r| r["metric"]["pod_uid"] == stuck.as_str() && r["metric"]["kind"] == "volume-still-mounted"),
        "{rows:?}"
    );
}

kernel_test! {
    fn a_real_prometheus_alerts_on_a_volume_podstuck_sees_left_mounted(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        // P1: the CSI driver said NodeUnpublish worked and left this mounted.
        let stuck = root.new_pod();
        let pv = stuck.create_csi_volume("pvc-alerts");
        let mount = pv.join("mount");
        let volume = TmpfsMount::new(&mount, "size=1m");

        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let node = "node-under-alerts-4";
        let listen = addr.to_string();
        let mut watch = Watch::start(&[
            "--findings", "--kubelet-root", root.arg(), "--pod", stuck.uid(), "--listen", &listen, "--node-name", node,
        ]);
        let rules = deploy("prometheus-rules.yaml");
        let Some(prometheus) = Prometheus::start_with_rules(&scratch.path().join("prometheus"), addr, &[&rules]) else { return };
        prometheus.await_value("podstuck_up", 1.0, secs(30));

        let kubelet = start_actor(["--comm", "kubelet", "--backoff-ms", "500", "--repeat", "0", "rmdir-at", text(&pv), "mount"]);
        watch.await_finding(secs(60), |f| f["kind"] == "volume-still-mounted", |e| e.eq("/pod_uid", stuck.uid()));
        let query = format!(r#"ALERTS{{alertname="PodStuckOnNode", alertstate="pending", pod_uid="{}"}}"#, stuck.uid());
        let alert = one_alert(&prometheus, &query, secs(30));
        let labels = &alert["metric"];
        assert_eq!(labels["kind"], "volume-still-mounted", "{alert}");
        assert_eq!(labels["node"], node, "{alert}");
        assert_eq!(labels["severity"], "warning", "{alert}: one pod");
        assert_eq!(labels["instance"], listen, "{alert}: where /findings is");
        assert_every_rule_is_healthy(&prometheus);
        assert!(prometheus.query(r#"ALERTS{alertname=~"NodeCauseBlocksPods|PodstuckDown|PodstuckAbsent"}"#).is_empty());

        // The volume unmounted, kubelet's next rmdir gets through: the
        // finding resolves and the alert ends.
        drop(kubelet);
        drop(volume);
        let retry = actor().args([OsStr::new("--comm"), OsStr::new("kubelet"), OsStr::new("rmdir-at"), pv.as_os_str(), OsStr::new("mount")]).output().unwrap();
        assert_eq!(String::from_utf8_lossy(&retry.stdout).trim(), "rmdir-at ok");
        watch.await_finding(secs(60), |f| f["kind"] == "volume-still-mounted", |e| e.eq("/status", "resolved"));
        prometheus.await_samples(&format!(r#"ALERTS{{alertname="PodStuckOnNode", pod_uid="{}"}}"#, stuck.uid()), secs(30), |s| s.is_empty());

        let finished = watch.stop(libc::SIGINT);
        assert!(finished.status.success(), "{}", finished.stderr);
    }
}

/// A podstuck that must stay up, its stderr in a file; killed on drop.
struct StaysUp {
    child: std::process::Child,
    stderr: PathBuf,
}

impl StaysUp {
    fn said(&self) -> String {
        std::fs::read_to_string(&self.stderr).unwrap_or_default()
    }
}

impl Drop for StaysUp {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

kernel_test! {
    fn a_real_prometheus_alerts_once_on_a_node_podstuck_cannot_trace(test) {
        // A node podstuck cannot trace, here: no privileges (the DaemonSet's
        // capabilities refused); on a Talos node it is lockdown, which the VM
        // matrix's lockdown boot shows. --stay-up keeps it serving.
        let scratch = test.scratch();
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let listen = addr.to_string();
        // A copy nobody may run, wherever the clone lives (/root is 0700).
        let binary = scratch.path().join("podstuck");
        std::fs::copy(podstuck_binary(), &binary).unwrap();
        std::fs::set_permissions(scratch.path(), std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        std::fs::set_permissions(&binary, std::os::unix::fs::PermissionsExt::from_mode(0o755)).unwrap();
        let stderr = scratch.path().join("stderr");
        let child = Command::new("setpriv")
            .args(["--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all", "--bounding-set=-all", "--"])
            .arg(&binary)
            .args(["watch", "--listen", &listen, "--stay-up", "--node-name", "node-untraceable-5"])
            .stdin(std::process::Stdio::null())
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .expect("run setpriv (util-linux)");
        let mut running = StaysUp { child, stderr };
        let page = within(secs(30), || try_get(addr, "/metrics").ok().filter(|a| a.status == 200));
        let page = page.unwrap_or_else(|| panic!("no /metrics: {}", running.said()));
        assert!(page.body.contains("\npodstuck_up 0\n"), "{}", page.body);
        assert!(page.body.contains("podstuck_cannot_trace{node=\"node-untraceable-5\",reason=\"privileges\"} 1"), "{}", page.body);
        let findings: Value = serde_json::from_str(&try_get(addr, "/findings").unwrap().body).unwrap();
        assert!(findings["cannot_trace"].as_str().is_some_and(|w| w.contains("privileges") && w.contains("what to do")), "{findings}");
        assert_eq!(try_get(addr, "/healthz").unwrap().status, 200, "alive: a restart would not help");
        // Ready on purpose: a rollout must not stall on nodes that cannot be traced.
        let ready = try_get(addr, "/ready").unwrap();
        assert_eq!(ready.status, 200, "{}", ready.body);
        assert!(ready.body.starts_with("not tracing on purpose (--stay-up): cannot trace this node (privileges)"), "{}", ready.body);
        assert!(running.said().contains("podstuck: cannot trace this node (privileges)"), "{}", running.said());

        let rules = deploy("prometheus-rules.yaml");
        let Some(prometheus) = Prometheus::start_with_rules(&scratch.path().join("prometheus"), addr, &[&rules]) else { return };
        prometheus.await_value("podstuck_up", 0.0, secs(30));
        let alert = one_alert(&prometheus, r#"ALERTS{alertname="PodstuckCannotTrace", alertstate="pending"}"#, secs(30));
        assert_eq!(alert["metric"]["reason"], "privileges", "{alert}");
        assert_eq!(alert["metric"]["node"], "node-untraceable-5", "{alert}");
        assert_every_rule_is_healthy(&prometheus);
        assert!(prometheus.query(r#"ALERTS{alertname=~"PodstuckDown|PodStuckOnNode"}"#).is_empty());

        // It stops as the DaemonSet's pod is deleted: SIGTERM, exit 0.
        // SAFETY: kill(2) on the child this test started and still holds.
        unsafe { libc::kill(running.child.id() as i32, libc::SIGTERM) };
        let status = within(secs(20), || running.child.try_wait().unwrap()).unwrap_or_else(|| panic!("still running 20 s after SIGTERM"));
        assert!(status.success(), "{status}: {}", running.said());
    }
}
