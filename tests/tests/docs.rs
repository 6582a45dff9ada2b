//! README.md and docs/ held to the code, as house.rs holds the layers:
//! what the docs tell a user to type and to expect must be what the
//! binaries take and do. Checked on the sources and the files themselves,
//! so a change on one side without the other fails here:
//!
//! - every option of a `podstuck ...` or `kubectl podstuck ...` command
//!   the docs show is one the binaries take (read from their clap
//!   attributes), and every option they take is documented in usage.md
//!   (podstuck's) or deploy.md (the plugin's);
//! - every finding kind the code has (`Kind::id`) is listed in README, in
//!   pathologies.md and in monitoring.md, and no other;
//! - every cause a detector of its own tells has its end-to-end tests in
//!   tests/tests/causes/, in the module its id names (`mount-held` in
//!   `mount_held.rs`), which main.rs declares; a cause another's detector
//!   tells is named in a module there, one the API tells in explain.rs;
//!   and pathologies.md's row of each names the file of its tests;
//! - docs/exit-codes.md lists exactly the exit codes of src/exit.rs;
//! - README's and development.md's test counts add up and agree;
//! - the DaemonSet's args and capabilities as the docs say them are the
//!   manifest's; README's install line is the one tests/tests/deploy.rs
//!   renders (`kubectl apply -k deploy/`), and no doc applies a file of
//!   deploy/ alone;
//! - the debug pod `kubectl podstuck` makes and the DaemonSet mount the
//!   node's `/` with HostToContainer propagation, and deploy.md says so
//!   where it describes each.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use podstuck_tests::findings::{causes, ToldBy};

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

fn read(relative: &str) -> String {
    std::fs::read_to_string(workspace().join(relative)).unwrap_or_else(|e| panic!("{relative}: {e}"))
}

/// README.md and every docs/*.md, by their path.
fn every_doc() -> Vec<(String, String)> {
    let mut docs = vec![("README.md".to_string(), read("README.md"))];
    let mut names: Vec<_> = std::fs::read_dir(workspace().join("docs"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".md"))
        .collect();
    names.sort();
    for name in names {
        let path = format!("docs/{name}");
        docs.push((path.clone(), read(&path)));
    }
    docs
}

/// The long options a clap source declares: `#[arg(long ...)]` on a field
/// (its name, `_` as `-`) or `long = "name"`.
fn long_options(source: &str) -> BTreeSet<String> {
    let lines: Vec<&str> = source.lines().collect();
    let mut found = BTreeSet::new();
    for (i, line) in lines.iter().enumerate() {
        let line = line.trim();
        if !line.starts_with("#[arg(") || !(line.contains("(long") || line.contains(" long")) {
            continue;
        }
        if let Some(at) = line.find("long = \"") {
            let rest = &line[at + 8..];
            found.insert(format!("--{}", &rest[..rest.find('"').unwrap()]));
            continue;
        }
        let field = lines[i + 1..]
            .iter()
            .map(|l| l.trim())
            .find(|l| !l.starts_with("#[") && !l.starts_with("///"))
            .unwrap_or_else(|| panic!("no field after {line}"));
        let name = field.trim_start_matches("pub ").split(':').next().unwrap().trim();
        found.insert(format!("--{}", name.replace('_', "-")));
    }
    found
}

fn podstuck_options() -> BTreeSet<String> {
    let mut options = long_options(&read("podstuck-user/src/main.rs"));
    // clap's own.
    options.extend(["--help", "--version"].map(String::from));
    options
}

fn plugin_options() -> BTreeSet<String> {
    let mut options = long_options(&read("podstuck-user/src/kubectl_podstuck.rs"));
    options.extend(["--help", "--version"].map(String::from));
    options
}

/// The `--options` of every command line in `text` that runs `program`
/// (`podstuck`, `kubectl podstuck`), in code spans and code blocks: from
/// the program's name to the end of its command (a pipe, `;`, `&&`, a
/// closing backtick, the line's end).
fn options_of(text: &str, program: &str) -> Vec<String> {
    let mut found = Vec::new();
    for line in text.lines() {
        let mut rest = line;
        while let Some(at) = rest.find(program) {
            let before = &rest[..at];
            rest = &rest[at + program.len()..];
            // A command starts a line, a code span, a pipe's stage, or
            // follows sudo or `--` (kubectl exec/debug ... -- podstuck):
            // not `-n podstuck` (a namespace), `kubectl podstuck` (the
            // plugin, checked as its own program) or a path.
            let prev = before.trim_end();
            let starts = prev.is_empty()
                || prev.ends_with(['`', '$', '(', '|', ';', '&', '#'])
                || prev.ends_with(" --")
                || prev.ends_with("sudo");
            if !starts || (program == "podstuck " && before.ends_with("kubectl ")) {
                continue;
            }
            let end = rest.find(['|', ';', '`', '&', '#', ')']).unwrap_or(rest.len());
            for word in rest[..end].split_whitespace() {
                let word = word.trim_end_matches([',', '.', ':']);
                let option = word.split('=').next().unwrap();
                if option.starts_with("--") && option.len() > 2 {
                    found.push(option.to_string());
                }
            }
        }
    }
    found
}

#[test]
fn every_option_the_docs_show_is_one_the_binaries_take() {
    let (podstuck, plugin) = (podstuck_options(), plugin_options());
    let mut wrong = Vec::new();
    for (path, text) in every_doc() {
        for option in options_of(&text, "podstuck ") {
            if !podstuck.contains(&option) && !plugin.contains(&option) {
                wrong.push(format!("{path}: podstuck ... {option}"));
            }
        }
        for option in options_of(&text, "kubectl podstuck ") {
            // After `--`, podstuck watch's own options.
            if !plugin.contains(&option) && !podstuck.contains(&option) {
                wrong.push(format!("{path}: kubectl podstuck ... {option}"));
            }
        }
    }
    assert!(wrong.is_empty(), "options the docs show and no binary takes:\n{}", wrong.join("\n"));
}

#[test]
fn every_option_the_binaries_take_is_documented() {
    let usage = read("docs/usage.md");
    let deploy = read("docs/deploy.md");
    // Hidden options (tests' and the plugin's own) are not the user's;
    // clap's own are said by --help itself.
    let hidden = ["--node-pid", "--path-walk", "--slow-pipeline", "--help", "--version"];
    let undocumented: Vec<String> = podstuck_options()
        .into_iter()
        .filter(|o| !hidden.contains(&o.as_str()) && !usage.contains(&format!("`{o}")))
        .map(|o| format!("podstuck {o}: not in docs/usage.md"))
        .chain(
            plugin_options()
                .into_iter()
                .filter(|o| !hidden.contains(&o.as_str()))
                .filter(|o| !deploy.contains(&format!("`{o}")) && !usage.contains(&format!("`{o}")))
                .map(|o| format!("kubectl podstuck {o}: not in docs/deploy.md")),
        )
        .collect();
    assert!(undocumented.is_empty(), "{}", undocumented.join("\n"));
}

#[test]
fn the_option_reader_sees_what_clap_sees() {
    let source = "    /// doc\n    #[arg(long, value_name = \"DIR\")]\n    kubelet_root: PathBuf,\n    #[arg(long = \"pod\", value_name = \"UID\")]\n    pods: Vec<String>,\n    #[arg(short = 'n', long)]\n    /// doc\n    namespace: Option<String>,\n";
    let found: Vec<String> = long_options(source).into_iter().collect();
    assert_eq!(found, ["--kubelet-root", "--namespace", "--pod"]);
    let text = "`podstuck watch --pod UID --json | jq .`; `kubectl podstuck web-0 --shell -- --hung-after 10s` and `kubectl debug -n podstuck --profile=sysadmin -- podstuck __host-shell`";
    assert_eq!(options_of(text, "podstuck "), ["--pod", "--json"]);
    assert_eq!(options_of(text, "kubectl podstuck "), ["--shell", "--hung-after"]);
}

/// Every finding kind of the table of causes.
fn finding_kinds() -> Vec<String> {
    podstuck_tests::findings::kinds()
}

/// The backticked words of `text` that look like finding kinds.
fn kinds_named(text: &str, known: &[String]) -> BTreeSet<String> {
    text.split('`').skip(1).step_by(2).filter(|w| known.contains(&w.to_string())).map(str::to_string).collect()
}

#[test]
fn every_finding_kind_is_listed_where_users_look_for_it() {
    let kinds = finding_kinds();
    for doc in ["README.md", "docs/pathologies.md", "docs/monitoring.md"] {
        let text = read(doc);
        let missing: Vec<&String> = kinds.iter().filter(|k| !text.contains(&format!("`{k}`"))).collect();
        assert!(missing.is_empty(), "{doc} does not list the kinds {missing:?}");
    }
    // A count said in words is the count the code has.
    for (path, text) in every_doc() {
        for (at, _) in text.match_indices(" finding kinds") {
            let before = text[..at].rsplit(|c: char| !c.is_ascii_digit()).next().unwrap_or("");
            if let Ok(n) = before.parse::<usize>() {
                assert_eq!(n, kinds.len(), "{path} says {n} finding kinds; the code has {}", kinds.len());
            }
        }
    }
    // README's kind list: each `- `kind`:` line names a kind the code has.
    let readme = read("README.md");
    for line in readme.lines().filter(|l| l.starts_with("- `")) {
        let word = line[3..].split('`').next().unwrap();
        if word.contains('-') && !word.contains(' ') && !word.contains('/') && !word.ends_with(".md") {
            assert!(kinds.contains(&word.to_string()), "README lists {word}, which is no finding kind");
        }
    }
    assert_eq!(kinds_named(&readme, &kinds).len(), kinds.len());
}

/// tests/tests/causes/'s modules (every file but main.rs), by name, with
/// their text.
fn cause_modules() -> BTreeMap<String, String> {
    let dir = workspace().join("tests/tests/causes");
    let files = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
    files
        .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|name| Some(name.strip_suffix(".rs")?.to_string()))
        .filter(|name| name != "main")
        .map(|name| {
            let text = read(&format!("tests/tests/causes/{name}.rs"));
            (name, text)
        })
        .collect()
}

/// The module of tests/tests/causes/ a cause's id names.
fn module_of(id: &str) -> String {
    id.replace('-', "_")
}

/// As aya pairs its programs with their tests by name: a cause's
/// end-to-end tests are found by its id.
#[test]
fn every_cause_a_detector_tells_has_its_end_to_end_tests_in_causes() {
    let modules = cause_modules();
    let main = read("tests/tests/causes/main.rs");
    let explain = read("tests/tests/explain.rs");
    let mut wrong = Vec::new();
    for cause in causes() {
        let (id, module) = (&cause.id, module_of(&cause.id));
        let named = |text: &String| text.contains(&format!("\"{id}\""));
        match &cause.told_by {
            ToldBy::Own => match modules.get(&module) {
                None => wrong.push(format!("{id}: its detector's tests belong in tests/tests/causes/{module}.rs")),
                Some(text) if !text.contains("kernel_test! {") && !text.contains("#[test]") => {
                    wrong.push(format!("tests/tests/causes/{module}.rs has no test of {id}"))
                }
                Some(_) => {}
            },
            ToldBy::DetectorOf(other) if !modules.values().any(named) => wrong.push(format!(
                "{id}, told by {other}'s detector: no module of tests/tests/causes/ names \"{id}\" (it belongs in {}.rs)",
                module_of(other)
            )),
            ToldBy::Api if !named(&explain) => wrong.push(format!("{id}, told by the API: tests/tests/explain.rs never names it")),
            ToldBy::DetectorOf(_) | ToldBy::Api => {}
        }
    }
    // A file main.rs does not declare is never compiled: its tests never run.
    for name in modules.keys() {
        if !main.lines().any(|l| l.trim() == format!("mod {name};")) {
            wrong.push(format!("tests/tests/causes/{name}.rs: main.rs has no `mod {name};`, so it never runs"));
        }
    }
    assert!(wrong.is_empty(), "the end-to-end tests by cause:\n{}", wrong.join("\n"));
}

/// docs/pathologies.md says where each cause's end-to-end tests are: the
/// row of a cause told on the node names its module of tests/tests/causes/
/// (that of the detector that tells it, for a cause told by another's).
#[test]
fn the_catalogue_names_where_each_causes_tests_are() {
    let catalogue = read("docs/pathologies.md");
    let modules = cause_modules();
    for cause in causes() {
        let module = match &cause.told_by {
            ToldBy::Own => module_of(&cause.id),
            ToldBy::DetectorOf(other) => module_of(other),
            ToldBy::Api => continue,
        };
        assert!(modules.contains_key(&module), "{}: no tests/tests/causes/{module}.rs", cause.id);
        let kind = format!("`{}`", cause.id);
        let row = catalogue
            .lines()
            .find(|l| l.starts_with("| ") && l[2..].split(" | ").next().is_some_and(|first| first.contains(&kind)))
            .unwrap_or_else(|| panic!("docs/pathologies.md has no row of {kind}"));
        assert!(
            row.contains(&format!("causes/{module}.rs`")),
            "docs/pathologies.md's row of {kind} should name its tests, causes/{module}.rs: {row}"
        );
    }
}

#[test]
fn the_exit_codes_page_lists_exactly_the_codes_of_the_code() {
    let source = read("podstuck-user/src/exit.rs");
    let codes: BTreeSet<u32> = source
        .lines()
        .filter_map(|l| l.trim().strip_prefix("pub const "))
        .filter_map(|l| l.split_once(": u8 = "))
        .map(|(_, n)| n.trim_end_matches(';').parse().unwrap())
        .collect();
    let page = read("docs/exit-codes.md");
    let listed: BTreeSet<u32> = page
        .lines()
        .filter_map(|l| l.strip_prefix("| "))
        .filter_map(|l| l.split(' ').next().and_then(|n| n.parse().ok()))
        .collect();
    assert_eq!(listed, codes, "docs/exit-codes.md's table against src/exit.rs");
    // podstuck check and watch on a node that cannot be traced (no tracefs,
    // no BTF, not root): 2 wherever the docs say it.
    for (path, text) in every_doc() {
        for line in text.lines().filter(|l| l.contains("tracefs") && l.contains("exit")) {
            assert!(!line.contains("exit 1") && !line.contains("exits 1"), "{path}: {line}");
        }
    }
}

/// `N tests (A in `cargo test`, B in the VM matrix` in `text`.
fn test_counts(text: &str) -> Option<(u32, u32, u32)> {
    let at = text.find(" tests (")?;
    let total = text[..at].rsplit(' ').next()?.parse().ok()?;
    let rest = &text[at + 8..];
    let numbers: Vec<u32> = rest
        .split(|c: char| !c.is_ascii_digit())
        .filter(|s| !s.is_empty())
        .take(2)
        .filter_map(|n| n.parse().ok())
        .collect();
    Some((total, *numbers.first()?, *numbers.get(1)?))
}

/// README's count is the one the last whole run's closing lines in
/// docs/development.md give (the issue's "758 in README, 755 measured").
#[test]
fn the_test_counts_add_up_and_agree() {
    let readme = read("README.md").replace('\n', " ");
    let (total, cargo, vm) = test_counts(&readme).expect("README says how many tests run");
    assert_eq!(cargo + vm, total, "README: {total} tests, {cargo} + {vm}");
    let development = read("docs/development.md");
    let closing =
        development.lines().find(|l| l.starts_with("podstuck tests: ")).expect("development.md's closing lines");
    assert_eq!(
        closing.split_whitespace().nth(2).and_then(|n| n.parse::<u32>().ok()),
        Some(total),
        "README says {total} tests ({cargo} + {vm}); docs/development.md's last whole run: {closing}"
    );
    assert!(closing.contains(&format!("({cargo} in cargo test, {vm} in the VM matrix)")), "{closing}");
}

fn daemonset() -> serde_json::Value {
    use serde::Deserialize as _;
    let text = read("deploy/base/podstuck-daemonset.yaml");
    let documents: Vec<serde_json::Value> =
        yaml_serde::Deserializer::from_str(&text).map(|d| serde_json::Value::deserialize(d).unwrap()).collect();
    documents.into_iter().find(|d| d["kind"] == "DaemonSet").expect("a DaemonSet")
}

#[test]
fn the_daemonsets_args_and_capabilities_are_said_as_the_manifest_has_them() {
    let ds = daemonset();
    let container = &ds["spec"]["template"]["spec"]["containers"][0];
    let args: Vec<&str> = container["args"].as_array().unwrap().iter().map(|a| a.as_str().unwrap()).collect();
    let said = format!("`{}`", args.join(" "));
    for doc in ["docs/deploy.md", "docs/monitoring.md"] {
        assert!(read(doc).replace('\n', " ").contains(&said), "{doc} does not say the DaemonSet runs {said}");
    }
    // Any other spelling of its command line in the docs is this one.
    for (path, text) in every_doc() {
        let text = text.replace('\n', " ");
        for (at, _) in text.match_indices("`watch --listen 0.0.0.0:9464") {
            let span = &text[at..at + text[at + 1..].find('`').unwrap() + 2];
            assert_eq!(span, said, "{path}");
        }
    }
    let caps: Vec<String> = container["securityContext"]["capabilities"]["add"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| format!("`{}`", c.as_str().unwrap()))
        .collect();
    let deploy = read("docs/deploy.md");
    let line = deploy
        .lines()
        .find(|l| l.starts_with("The DaemonSet's capabilities:"))
        .expect("docs/deploy.md has a line `The DaemonSet's capabilities: ...`");
    let listed: Vec<String> = line
        .split(',')
        .filter_map(|w| {
            w.split_whitespace().find(|w| w.starts_with('`')).map(|w| w.trim_end_matches(['.', ';']).to_string())
        })
        .collect();
    assert_eq!(listed, caps, "{line}");
}

#[test]
fn the_install_line_is_the_one_the_deploy_tests_render() {
    let readme = read("README.md");
    // The example overlay, which tests/tests/deploy.rs renders and scans.
    assert!(readme.contains("kubectl apply -k deploy/examples/my-cluster"), "README's DaemonSet line");
    for (path, text) in every_doc() {
        for line in text.lines() {
            assert!(
                !line.contains("kubectl apply -f deploy/"),
                "{path}: {line}: deploy/ is a kustomization (apply -k)"
            );
            // deploy/ itself is no kustomization any more: the base names
            // the image plainly, which an overlay sets.
            assert!(
                !line.contains("apply -k deploy/`") && !line.contains("apply -k deploy/ "),
                "{path}: {line}: apply your overlay"
            );
        }
    }
    // Every file of deploy/ a doc names is there.
    for (path, text) in every_doc() {
        for (at, _) in text.match_indices("deploy/") {
            if text[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.') {
                continue;
            }
            let name: String =
                text[at..].chars().take_while(|c| c.is_ascii_alphanumeric() || "/-_.".contains(*c)).collect();
            let name = name.trim_end_matches(['.', '/']);
            assert!(workspace().join(name).exists(), "{path} names {name}, which is not there");
        }
    }
}

/// README's Install opens with the one command that makes the release
/// and the image, and says how long it takes on 2 cores.
#[test]
fn readme_install_opens_with_the_command_that_makes_the_release_and_the_image() {
    let readme = read("README.md");
    let install = &readme[readme.find("## Install").expect("README has an Install section")..];
    let install = &install[..install[3..].find("\n## ").map_or(install.len(), |e| e + 3)];
    let first_block = install.split("```sh\n").nth(1).and_then(|b| b.split("```").next()).expect("a command block");
    let command = first_block.lines().next().unwrap();
    assert!(
        command.starts_with("cargo xtask release && cargo xtask image"),
        "Install's first command makes the release and the image: {command}"
    );
    let before_next_block = install.split("```sh\n").nth(2).map_or(install, |_| install);
    assert!(before_next_block.contains("On 2 cores it takes"), "{install}");
    assert!(install.contains(".github/workflows/release.yml"), "the forge's route is named");
}

/// `kubectl debug node` makes a privileged pod, which the Pod Security
/// level of most namespaces refuses: every such command the docs show
/// says which namespace (podstuck's).
#[test]
fn every_kubectl_debug_node_command_says_its_namespace() {
    for (path, text) in every_doc() {
        // A command may run on to the next line in prose: read it whole.
        let text = text.replace('\n', " ");
        for (at, _) in text.match_indices("kubectl debug node/") {
            let command = &text[at..];
            let command = &command[..command.find(['`', '\n']).unwrap_or(command.len()).min(300)];
            assert!(
                command.contains(" -n "),
                "{path}: {command}: without -n podstuck it is refused in most namespaces"
            );
        }
    }
}

/// What the plugin tells a user refused for RBAC names the Role that
/// grants creating the debug pod, which the on-call component has.
#[test]
fn the_plugins_rbac_refusal_names_the_role_that_grants_the_debug_pod() {
    let source = read("podstuck-user/src/kubectl_plugin/admission.rs");
    let line = source.lines().find(|l| l.contains("you may not create pods in namespace")).expect("the RBAC refusal");
    let role = line.split("the Role ").nth(1).and_then(|r| r.split_whitespace().next()).expect("it names a Role");
    let rbac = read("deploy/components/on-call/kubectl-podstuck-rbac.yaml");
    use serde::Deserialize as _;
    let objects: Vec<serde_json::Value> =
        yaml_serde::Deserializer::from_str(&rbac).map(|d| serde_json::Value::deserialize(d).unwrap()).collect();
    let granted = objects.iter().find(|o| o["kind"] == "Role" && o["metadata"]["name"] == role);
    let granted =
        granted.unwrap_or_else(|| panic!("the refusal names the Role {role}, which deploy/components/on-call has not"));
    assert!(
        granted["rules"].as_array().unwrap().iter().any(|r| r["resources"]
            .as_array()
            .unwrap()
            .iter()
            .any(|x| x == "pods")
            && r["verbs"].as_array().unwrap().iter().any(|v| v == "create")),
        "the Role {role} does not grant creating pods: {granted}"
    );
    // And the ClusterRole does not: naming it would send the user astray.
    let cluster_role = objects.iter().find(|o| o["kind"] == "ClusterRole").unwrap();
    assert!(!cluster_role.to_string().contains("\"create\""), "{cluster_role}");
    assert!(!line.contains("ClusterRole"), "{line}");
}

/// The oldest Kubernetes the docs promise is the oldest the rendered
/// install is validated against (tests/tests/deploy.rs), and nothing in
/// the base needs a newer one.
#[test]
fn the_oldest_kubernetes_the_docs_promise_is_the_oldest_validated() {
    let deploy_test = read("tests/tests/deploy.rs");
    let releases = deploy_test.lines().find(|l| l.starts_with("const RELEASES: ")).expect("deploy.rs's RELEASES");
    let oldest = releases.split('"').nth(1).unwrap();
    let minor = oldest.rsplit_once('.').unwrap().0;
    let deploy = read("docs/deploy.md").replace('\n', " ");
    assert!(deploy.contains(&format!("every Kubernetes from {minor} to the newest")), "docs/deploy.md's promise");
    let base = read("deploy/base/kustomization.yaml");
    assert!(base.contains(&format!("every Kubernetes from {minor}")), "deploy/base/kustomization.yaml's promise");
    assert!(
        !read("deploy/base/podstuck-daemonset.yaml").contains("appArmorProfile:"),
        "the 1.30 field is a component's"
    );
}

/// Where the docs say a Prometheus scrapes the DaemonSet, they name the
/// namespace its NetworkPolicy admits: no other reaches port 9464.
#[test]
fn the_docs_say_which_prometheus_the_networkpolicy_admits() {
    use serde::Deserialize as _;
    let text = read("deploy/base/podstuck-networkpolicy.yaml");
    let policy = serde_json::Value::deserialize(yaml_serde::Deserializer::from_str(&text)).unwrap();
    let admitted = policy["spec"]["ingress"][0]["from"][0]["namespaceSelector"]["matchLabels"]
        ["kubernetes.io/metadata.name"]
        .as_str()
        .unwrap()
        .to_string();
    for (path, text) in every_doc() {
        for paragraph in text.split("\n\n") {
            let paragraph = paragraph.replace('\n', " ");
            if paragraph.contains("scraped by") && paragraph.contains("Prometheus") {
                assert!(
                    paragraph.contains(&format!("`{admitted}`")),
                    "{path}: says a Prometheus scrapes it without naming the namespace `{admitted}` the NetworkPolicy admits: {paragraph}"
                );
            }
        }
    }
    let readme = read("README.md").replace('\n', " ");
    assert!(!readme.contains("scraped by the Prometheus the cluster already has"), "README");
}

/// The alerts and the docs send the on-call through `kubectl
/// port-forward`, never to a pod's address, which the NetworkPolicy keeps
/// from a laptop; and what monitoring.md says of the annotation scrape is
/// what the promtool tests show.
#[test]
fn the_docs_send_the_on_call_where_it_can_go() {
    for (path, text) in every_doc() {
        for bad in ["http://INSTANCE", "http://{{ $labels.instance }}"] {
            assert!(!text.contains(bad), "{path}: {bad}: a pod's address is Prometheus' alone");
        }
    }
    for file in [
        "deploy/monitoring/prometheus-rules.yaml",
        "deploy/components/prometheus-operator/podstuck-prometheusrule.yaml",
    ] {
        assert!(!read(file).contains("curl -s http://{{ $labels.instance }}"), "{file}");
    }
    let monitoring = read("docs/monitoring.md").replace('\n', " ");
    assert!(!monitoring.contains("so they stay silent there"), "docs/monitoring.md");
    let tests = read("deploy/monitoring/prometheus-rules.test.yaml");
    assert!(
        tests.contains("PodstuckAbsent is silent under the annotation scrape"),
        "a promtool test of the annotation scrape"
    );
    assert!(tests.contains("a PodMonitor in the namespace chosen"), "a promtool test of the PodMonitor's shape");
}

/// The DaemonSet's token may list every pod of the cluster (RBAC cannot
/// bound the field selector podstuck uses): docs/deploy.md says so, why
/// the node alone cannot do, and the component that takes the token away.
#[test]
fn what_a_nodes_token_may_read_is_said_where_the_rbac_grants_it() {
    let rbac = read("deploy/base/podstuck-events-rbac.yaml");
    let deploy = read("docs/deploy.md").replace('\n', " ");
    if rbac.contains("resources: [\"pods\"]") {
        for said in [
            "list every pod of the cluster",
            "RBAC cannot bound a field selector",
            "`deploy/components/no-events`",
            "/var/log/pods",
        ] {
            assert!(deploy.contains(said), "docs/deploy.md does not say {said:?}");
        }
    }
}

/// The capability sets docs/deploy.md says were measured are the
/// constants the container tests run with (tests/src/container.rs), named
/// as routes, not as the DaemonSet's: the one with SYS_ADMIN is not the
/// manifest's.
#[test]
fn the_measured_capability_sets_are_the_ones_the_tests_run() {
    let manifest = daemonset();
    let manifests: Vec<&str> = manifest["spec"]["template"]["spec"]["containers"][0]["securityContext"]["capabilities"]
        ["add"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c.as_str().unwrap())
        .collect();
    assert!(!manifests.contains(&"SYS_ADMIN"), "{manifests:?}");
    let source = read("tests/src/container.rs");
    assert!(
        !source.contains("pub const DAEMONSET_CAPABILITIES"),
        "a constant named as the DaemonSet's that is not its list"
    );
    let deploy = read("docs/deploy.md");
    for constant in ["ENTER_NODE_CAPABILITIES", "HOST_ROOT_CAPABILITIES"] {
        let declared = format!("pub const {constant}: [&str; ");
        let line = source
            .lines()
            .find(|l| l.starts_with(&declared))
            .unwrap_or_else(|| panic!("{constant} in tests/src/container.rs"));
        let caps: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
        assert!(!caps.is_empty(), "{line}");
        // Said together, in one sentence of the image's section, in the
        // constant's order, and the constant named beside them.
        let said = match caps.as_slice() {
            [a, b, c] => format!("`{a}`, `{b}` and `{c}`"),
            other => panic!("{constant}: {other:?}"),
        };
        let flat = deploy.replace('\n', " ");
        assert!(flat.contains(&said), "docs/deploy.md does not say {said} ({constant})");
        assert!(flat.contains(&format!("`{constant}`")), "docs/deploy.md does not name {constant}");
    }
}

/// deploy.md's paragraph that starts with `start`, on one line.
fn paragraph(text: &str, start: &str) -> String {
    let found = text.split("\n\n").find(|p| p.trim_start().starts_with(start) || p.contains(start));
    found.unwrap_or_else(|| panic!("docs/deploy.md has no paragraph with {start:?}")).replace('\n', " ")
}

/// A private copy of the node's mounts in either would keep a volume the
/// node unmounts mounted, its device busy: podstuck would hold what it
/// diagnoses. Both manifests follow the node's unmounts (the debug pod's
/// as the plugin under test makes it), and the docs say so of each.
#[test]
fn the_debug_pod_and_the_daemonset_follow_the_nodes_unmounts_as_the_docs_say() {
    use podstuck_tests::container::host_root_mount;
    let scratch = podstuck_tests::harness::ScratchDir::new("docs-host-mount");
    let debug_pod = podstuck_tests::kubectl::debug_pod_manifest(&scratch.path().join("cluster"));
    let deploy = read("docs/deploy.md");
    let said = [
        ("the debug pod", host_root_mount(&debug_pod["spec"]), paragraph(&deploy, "**The debug pod.**")),
        (
            "the DaemonSet",
            host_root_mount(&daemonset()["spec"]["template"]["spec"]),
            paragraph(&deploy, "The host's PID namespace, the node's `/` at `/host`"),
        ),
    ];
    for (who, mount, doc) in said {
        assert_eq!(mount["mountPropagation"], "HostToContainer", "{who}'s mount of the node's /: {mount}");
        assert!(
            doc.contains("`HostToContainer`"),
            "docs/deploy.md does not say {who} mounts / with `HostToContainer`: {doc}"
        );
    }
}
