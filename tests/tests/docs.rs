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
//! - docs/exit-codes.md lists exactly the exit codes of src/exit.rs;
//! - README's and development.md's test counts add up and agree;
//! - the DaemonSet's args and capabilities as the docs say them are the
//!   manifest's; README's install line is the one tests/tests/deploy.rs
//!   renders (`kubectl apply -k deploy/`), and no doc applies a file of
//!   deploy/ alone.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

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
    let hidden = ["--node-pid", "--path-walk", "--help", "--version"];
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

/// Every finding kind the code names (`Kind::X => "id"`).
fn finding_kinds() -> Vec<String> {
    let source = read("podstuck-user/src/diagnose/mod.rs");
    let kinds: Vec<String> = source
        .lines()
        .filter_map(|l| l.trim().strip_prefix("Kind::"))
        .filter_map(|l| l.split_once("=> \"").map(|(_, id)| id.trim_end_matches("\",").to_string()))
        .collect();
    assert!(kinds.len() >= 16, "{kinds:?}");
    kinds
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
/// docs/development.md give (the "758 in README, 755 measured").
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
    assert!(readme.contains("kubectl apply -k deploy/"), "README's DaemonSet line");
    for (path, text) in every_doc() {
        for line in text.lines() {
            assert!(
                !line.contains("kubectl apply -f deploy/"),
                "{path}: {line}: deploy/ is a kustomization (apply -k)"
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

/// The capability sets docs/deploy.md says were measured are the
/// constants the container tests run with (tests/src/container.rs).
#[test]
fn the_measured_capability_sets_are_the_ones_the_tests_run() {
    let source = read("tests/src/container.rs");
    let deploy = read("docs/deploy.md");
    for constant in ["DAEMONSET_CAPABILITIES", "DAEMONSET_CAPABILITIES_WITHOUT_SETNS"] {
        let declared = format!("pub const {constant}: [&str; ");
        let line = source
            .lines()
            .find(|l| l.starts_with(&declared))
            .unwrap_or_else(|| panic!("{constant} in tests/src/container.rs"));
        let caps: Vec<&str> = line.split('"').skip(1).step_by(2).collect();
        assert!(!caps.is_empty(), "{line}");
        // Said together, in one sentence of the image's section, in the constant's order.
        let said = match caps.as_slice() {
            [a, b, c] => format!("`{a}`, `{b}` and `{c}`"),
            other => panic!("{constant}: {other:?}"),
        };
        assert!(deploy.replace('\n', " ").contains(&said), "docs/deploy.md does not say {said} ({constant})");
    }
}
