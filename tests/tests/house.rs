//! The house rules that a reader of the code relies on, checked on the
//! sources themselves so they hold after every change: the collector's
//! modules import only the layers below them (data flows one way, no
//! circle), docs/development.md lists the same layers, no function is
//! longer than 120 lines, and README.md stays a quick start of at most 300
//! lines whose links to docs/ all lead somewhere.

use std::collections::BTreeSet;
use std::fs;
use std::path::{Path, PathBuf};

/// podstuck-user's top-level modules, bottom layer first. A module may
/// import any module of a layer below its own and none of its own layer
/// or above. A new module takes its place here (and in docs/development.md's
/// list, which is checked against this), and an import that runs up is a
/// design change to make here on purpose, not by accident.
const LAYERS: &[(&str, &[&str])] = &[
    (
        "ground floor: words, formats and codes every layer shares",
        &["words", "mountinfo", "exit", "btf", "serve", "kubectl_podstuck", "test_support"],
    ),
    (
        "what the kernel sends, where the node is, files made safely",
        &["event", "kernel_features", "node_access", "files"],
    ),
    ("who made a call (process, pod, owner); the one-tracer lock", &["identify", "tracer_lock"]),
    (
        "the node's state, the run's facts, latency books, the process lifecycle's events",
        &["inspect", "run", "latency", "lifecycle"],
    ),
    ("the detectors and the series", &["diagnose", "series"]),
    ("the loader, the exported files, a finding's text", &["collect", "export", "finding_block"]),
    ("before loading, the live view's model", &["attach_cost", "preflight", "view"]),
    ("the printers", &["print"]),
    ("commands over a record or the node's readiness", &["check", "record", "report"]),
    ("the Kubernetes API's side", &["explain"]),
    ("what talks to the cluster from a run or kubectl", &["k8s_events", "kubectl_plugin"]),
    ("the run", &["watch"]),
    ("the demo, which runs a watch", &["demo"]),
];

fn workspace() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().expect("the workspace holds tests/").to_path_buf()
}

/// Every .rs file under `dir`, in a stable order.
fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in fs::read_dir(&d).unwrap_or_else(|e| panic!("read {}: {e}", d.display())) {
            let path = entry.unwrap().path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                found.push(path);
            }
        }
    }
    found.sort();
    found
}

/// A source file's code as it is built outside tests: what follows its
/// `#[cfg(test)]` test module is dropped, and so are comment lines (doc
/// links name modules without importing them).
fn code_outside_tests(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let end = lines
        .windows(2)
        .position(|w| {
            w[0].trim() == "#[cfg(test)]"
                && w[1]
                    .trim_start()
                    .trim_start_matches("pub(crate) ")
                    .trim_start_matches("pub ")
                    .starts_with("mod tests")
        })
        .unwrap_or(lines.len());
    lines[..end].iter().filter(|l| !l.trim_start().starts_with("//")).copied().collect::<Vec<_>>().join("\n")
}

fn identifier_at(text: &str) -> &str {
    let end = text.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(text.len());
    &text[..end]
}

/// The crate's top-level modules named by `code` (`crate::x`, the names
/// in `use crate::{x, y::z}`, and `super::` chains that climb to the crate
/// root from a file `depth` modules down).
fn modules_named(code: &str, depth: usize) -> BTreeSet<String> {
    let mut named = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        if at > 0 && code[..at].ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$') {
            continue;
        }
        let rest = &code[at + "crate::".len()..];
        if let Some(group) = rest.strip_prefix('{') {
            let mut level = 0;
            let mut item_start = true;
            for (i, c) in group.char_indices() {
                match c {
                    '{' => level += 1,
                    '}' if level == 0 => break,
                    '}' => level -= 1,
                    ',' if level == 0 => item_start = true,
                    c if item_start && level == 0 && (c.is_ascii_alphabetic() || c == '_') => {
                        named.insert(identifier_at(&group[i..]).to_string());
                        item_start = false;
                    }
                    c if !c.is_whitespace() => item_start = false,
                    _ => {}
                }
            }
        } else {
            named.insert(identifier_at(rest).to_string());
        }
    }
    if depth > 0 {
        let climb = "super::".repeat(depth);
        for (at, _) in code.match_indices(&climb) {
            let rest = &code[at + climb.len()..];
            if !rest.starts_with("super::") && !code[..at].ends_with("super::") {
                named.insert(identifier_at(rest).to_string());
            }
        }
    }
    named
}

/// A file's module depth below the crate root: `x.rs` and `x/mod.rs` are
/// 1, `x/y.rs` 2.
fn depth_of(relative: &Path) -> usize {
    let parts = relative.components().count();
    if relative.file_name().is_some_and(|n| n == "mod.rs") {
        parts - 1
    } else {
        parts
    }
}

#[test]
fn every_module_imports_only_the_layers_below_its_own() {
    let src = workspace().join("podstuck-user/src");
    let layer_of = |module: &str| LAYERS.iter().position(|(_, modules)| modules.contains(&module));
    let mut wrong = Vec::new();
    let mut seen = BTreeSet::new();
    for file in rust_files(&src) {
        let relative = file.strip_prefix(&src).unwrap().to_path_buf();
        let first =
            relative.components().next().unwrap().as_os_str().to_string_lossy().trim_end_matches(".rs").to_string();
        if first == "main" || first == "lib" || first == "bin" || relative.file_name().is_some_and(|n| n == "tests.rs")
        {
            continue;
        }
        seen.insert(first.clone());
        let Some(own) = layer_of(&first) else {
            wrong.push(format!(
                "{}: module {first} is in no layer of LAYERS (tests/tests/house.rs): give it its place",
                relative.display()
            ));
            continue;
        };
        let text = fs::read_to_string(&file).unwrap();
        for named in modules_named(&code_outside_tests(&text), depth_of(&relative)) {
            if named == first {
                continue;
            }
            if let Some(theirs) = layer_of(&named) {
                if theirs >= own {
                    wrong.push(format!(
                        "{}: {first} (layer {own}, {}) imports {named} (layer {theirs}, {})",
                        relative.display(),
                        LAYERS[own].0,
                        LAYERS[theirs].0
                    ));
                }
            }
        }
    }
    for (_, modules) in LAYERS {
        for m in *modules {
            assert!(seen.contains(*m), "LAYERS names {m}, which podstuck-user/src no longer has");
        }
    }
    assert!(wrong.is_empty(), "imports that run up or sideways:\n{}", wrong.join("\n"));
}

#[test]
fn the_layer_check_sees_every_way_of_naming_a_module() {
    let code = "use crate::a::X;\nuse crate::{b, c::{D, E}, f::g};\nlet x = crate::h::y();\nlet y = super::super::i::j;\nmacro_crate::k;";
    let named: Vec<String> = modules_named(code, 2).into_iter().collect();
    assert_eq!(named, ["a", "b", "c", "f", "h", "i"]);
    assert_eq!(
        code_outside_tests("use crate::a;\n// crate::b\n#[cfg(test)]\nmod tests {\n use crate::c;\n}"),
        "use crate::a;"
    );
}

/// Every function of `text` longer than `limit` lines, as (name, first
/// line, lines). A function ends at the first `}` at its own indentation,
/// which holds for this workspace's formatting.
fn long_functions(text: &str, limit: usize) -> Vec<(String, usize, usize)> {
    let lines: Vec<&str> = text.lines().collect();
    let mut long = Vec::new();
    for (i, line) in lines.iter().enumerate() {
        let code = line.trim_start();
        let indent = line.len() - code.len();
        let mut words = code.split_whitespace().peekable();
        while let Some(w) = words.peek() {
            if w.starts_with("pub") || ["const", "async", "unsafe", "extern", "\"C\""].contains(w) {
                words.next();
            } else {
                break;
            }
        }
        if words.next() != Some("fn") {
            continue;
        }
        let name = words.next().map(identifier_at).unwrap_or("").to_string();
        let Some(open) = lines[i..].iter().position(|l| l.contains('{') || l.trim_end().ends_with(';')) else {
            continue;
        };
        if !lines[i + open].trim_end().ends_with('{') {
            // A declaration, or a body on one line.
            continue;
        }
        let close = format!("{}}}", " ".repeat(indent));
        if let Some(end) = lines[i + open + 1..].iter().position(|l| l.trim_end() == close) {
            let length = open + end + 2;
            if length > limit {
                long.push((name, i + 1, length));
            }
        }
    }
    long
}

#[test]
fn no_function_is_longer_than_120_lines() {
    let root = workspace();
    let mut long = Vec::new();
    for dir in
        ["podstuck-user/src", "podstuck-common/src", "podstuck-ebpf/src", "xtask/src", "tests/src", "tests/tests"]
    {
        for file in rust_files(&root.join(dir)) {
            for (name, line, length) in long_functions(&fs::read_to_string(&file).unwrap(), 120) {
                long.push(format!(
                    "{}:{line}: fn {name} is {length} lines",
                    file.strip_prefix(&root).unwrap().display()
                ));
            }
        }
    }
    assert!(long.is_empty(), "functions over 120 lines (split them where a step has a name):\n{}", long.join("\n"));
}

#[test]
fn the_length_check_measures_a_function_from_its_line_to_its_brace() {
    let short = "fn a() {\n    x();\n}\n";
    assert!(long_functions(short, 2).len() == 1 && long_functions(short, 3).is_empty());
    let nested = "impl T {\n    pub(crate) async fn b(\n        x: u8,\n    ) -> u8 {\n        if x {\n        }\n        x\n    }\n}\n";
    assert_eq!(long_functions(nested, 4), [("b".to_string(), 2, 7)]);
    assert!(long_functions("trait T {\n    fn c();\n    fn d() -> u8 { 1 }\n}\n", 0).is_empty());
}

#[test]
fn the_readme_is_a_quick_start_whose_links_to_docs_lead_somewhere() {
    let root = workspace();
    let readme = fs::read_to_string(root.join("README.md")).unwrap();
    let lines = readme.lines().count();
    assert!(
        lines <= 300,
        "README.md is {lines} lines: it is a quick start of at most 300; move the rest to a page in docs/ and link it"
    );
    let mut linked = 0;
    for (at, _) in readme.match_indices("](docs/") {
        let target = &readme[at + 2..];
        let target = &target[..target.find([')', '#']).unwrap()];
        assert!(root.join(target).is_file(), "README.md links to {target}, which does not exist");
        linked += 1;
    }
    assert!(linked >= 5, "README.md links to {linked} docs/ pages: the rest of the documentation lives there");
}

/// Where docs/development.md lists the layers, one numbered item a layer.
const LAYER_LIST: &str = "The collector's modules are layered, bottom first";

/// The layers docs/development.md lists after [`LAYER_LIST`], bottom first:
/// the modules named (in backticks) by each numbered item, an item going on
/// over its indented lines, the list ending at the first other line.
fn documented_layers(doc: &str) -> Vec<Vec<String>> {
    let Some(at) = doc.find(LAYER_LIST) else { return vec![] };
    let mut layers: Vec<String> = Vec::new();
    let items = doc[at..].lines().skip_while(|l| !starts_an_item(l));
    for line in items {
        if starts_an_item(line) {
            layers.push(line.to_string());
        } else if line.starts_with(' ') && !line.trim().is_empty() {
            layers.last_mut().expect("an item began the list").push_str(line);
        } else {
            break;
        }
    }
    layers.iter().map(|item| item.split('`').skip(1).step_by(2).map(str::to_string).collect()).collect()
}

/// "12. the run: `watch`" starts an item.
fn starts_an_item(line: &str) -> bool {
    let digits = line.chars().take_while(char::is_ascii_digit).count();
    digits > 0 && line[digits..].starts_with(". ")
}

/// Where `documented` and `layers` differ, one line each: a layer whose
/// modules differ, a layer one has and the other has not.
fn layer_differences(documented: &[Vec<String>], layers: &[(&str, &[&str])]) -> Vec<String> {
    let mut differences = Vec::new();
    for i in 0..documented.len().max(layers.len()) {
        let said = documented.get(i).map(|modules| modules.join(", "));
        let meant = layers.get(i).map(|(_, modules)| modules.join(", "));
        if said == meant {
            continue;
        }
        let title = layers.get(i).map_or("beyond LAYERS", |(title, _)| title);
        let said = said.unwrap_or_else(|| "nothing".into());
        let meant = meant.unwrap_or_else(|| "nothing".into());
        differences.push(format!("layer {} ({title}): the docs say {said}; LAYERS says {meant}", i + 1));
    }
    differences
}

#[test]
fn the_development_guide_lists_the_layers_of_this_test_in_its_order() {
    let doc = fs::read_to_string(workspace().join("docs/development.md")).unwrap();
    let documented = documented_layers(&doc);
    assert!(!documented.is_empty(), "docs/development.md has no numbered list of layers after {LAYER_LIST:?}");
    let differences = layer_differences(&documented, LAYERS);
    assert!(
        differences.is_empty(),
        "docs/development.md's layers differ from LAYERS in tests/tests/house.rs:\n{}",
        differences.join("\n")
    );
}

#[test]
fn the_layer_list_check_names_a_layer_the_docs_tell_otherwise() {
    let doc =
        format!("{LAYER_LIST}:\n\n1. words: `words`, `exit`\n2. the rest: `run`,\n   `view`\n\nA module imports.\n");
    assert_eq!(documented_layers(&doc), [vec!["words", "exit"], vec!["run", "view"]]);
    let layers: &[(&str, &[&str])] = &[("words", &["words", "exit"]), ("the rest", &["run", "attach_cost", "view"])];
    assert_eq!(
        layer_differences(&documented_layers(&doc), layers),
        ["layer 2 (the rest): the docs say run, view; LAYERS says run, attach_cost, view"]
    );
    assert_eq!(
        layer_differences(&documented_layers(&doc), &layers[..1]),
        ["layer 2 (beyond LAYERS): the docs say run, view; LAYERS says nothing"]
    );
}
