//! The house rules that a reader of the code relies on, checked on the
//! sources themselves so they hold after every change: the collector's
//! modules import only the layers below them (data flows one way, no
//! circle), the modules of every crate import each other in no circle,
//! xtask's tasks name none of main's own items, docs/development.md lists
//! the same layers, no collector file is longer than 900 lines nor any
//! function than 120, and README.md stays a quick start of at most 300
//! lines whose links to docs/ all lead somewhere.

use std::collections::{BTreeMap, BTreeSet, VecDeque};
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
        "what the kernel sends, where the node is, files made safely, a pod's names",
        &["event", "kernel_features", "node_access", "files", "pod"],
    ),
    ("the process lifecycle's records, decoded", &["lifecycle"]),
    (
        "who made a call or a lifecycle record (process, pod, owner); the one-tracer lock; the node's CNI plugins",
        &["identify", "tracer_lock", "cni_plugins"],
    ),
    ("the node's state, the run's facts, latency books", &["inspect", "run", "latency"]),
    ("the detectors and the series", &["diagnose", "series"]),
    ("the loader, the exported files, a finding's text", &["collect", "export", "finding_block"]),
    ("before loading, the live view's model", &["attach_cost", "preflight", "view"]),
    ("the printers", &["print"]),
    ("commands over a record or the node's readiness", &["check", "record", "report"]),
    ("the Kubernetes API's side", &["explain"]),
    ("what talks to the cluster from a run or kubectl", &["k8s_events", "kubectl_plugin"]),
    ("the run", &["watch"]),
    ("the demo, which runs a watch", &["demo"]),
    ("the fuzz targets (tests only), over what every layer reads from outside", &["fuzz"]),
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
/// links name modules without importing them). A test module kept in a
/// file of its own (`mod tests;`) ends nothing: the code after that line
/// is built as any other.
fn code_outside_tests(text: &str) -> String {
    let lines: Vec<&str> = text.lines().collect();
    let test_module = |line: &str| {
        let declared = line.trim().trim_start_matches("pub(crate) ").trim_start_matches("pub ");
        declared.starts_with("mod tests") && !declared.ends_with(';')
    };
    let end = lines.windows(2).position(|w| w[0].trim() == "#[cfg(test)]" && test_module(w[1])).unwrap_or(lines.len());
    lines[..end].iter().filter(|l| !l.trim_start().starts_with("//")).copied().collect::<Vec<_>>().join("\n")
}

fn identifier_at(text: &str) -> &str {
    let end = text.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(text.len());
    &text[..end]
}

/// The crate's top-level modules named by `code` in the module `at`
/// (`crate::x`, the names in `use crate::{x, y::z}`, and `super::` chains
/// that climb to the crate root).
fn modules_named(code: &str, at: &[String]) -> BTreeSet<String> {
    paths_named(code, at).into_iter().filter_map(|path| path.into_iter().next()).collect()
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
        for named in modules_named(&code_outside_tests(&text), &module_path(&relative)) {
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
fn a_test_module_in_a_file_of_its_own_hides_no_code() {
    let text =
        "use crate::a;\n#[cfg(test)]\nmod tests;\nuse crate::b;\n#[cfg(test)]\nmod tests {\n    use crate::c;\n}\n";
    let code = code_outside_tests(text);
    assert!(code.contains("crate::b") && !code.contains("crate::c"), "{code}");
}

#[test]
fn the_layer_check_sees_every_way_of_naming_a_module() {
    let code = "use crate::a::X;\nuse crate::{b, c::{D, E}, f::g};\nlet x = crate::h::y();\nlet y = super::super::i::j;\nmacro_crate::k;";
    let named: Vec<String> = modules_named(code, &["p".into(), "q".into()]).into_iter().collect();
    assert_eq!(named, ["a", "b", "c", "f", "h", "i"]);
    assert_eq!(
        code_outside_tests("use crate::a;\n// crate::b\n#[cfg(test)]\nmod tests {\n use crate::c;\n}"),
        "use crate::a;"
    );
}

/// The source folders of every crate in the workspace, whose modules may
/// import each other in no circle. podstuck-user's top-level modules are
/// held to `LAYERS` as well; this reaches the files inside a layer and the
/// crates that have none.
const CRATE_SOURCES: &[&str] =
    &["podstuck-user/src", "podstuck-common/src", "podstuck-ebpf/src", "xtask/src", "tests/src"];

/// A file's module path below its crate root: `x.rs` and `x/mod.rs` are
/// `x`, `x/y.rs` is `x::y`, `main.rs` and `lib.rs` the root itself.
fn module_path(relative: &Path) -> Vec<String> {
    let mut path: Vec<String> =
        relative.with_extension("").components().map(|c| c.as_os_str().to_string_lossy().into_owned()).collect();
    if path.last().is_some_and(|m| m == "mod") || (path.len() == 1 && (path[0] == "main" || path[0] == "lib")) {
        path.pop();
    }
    path
}

/// Every path, from the crate root, that `code` in module `at` names
/// through `crate::` or `super::`, a `use` group giving one path an item:
/// `use super::{a, b::{C, D as E}}` in `x::y` names `x::a`, `x::b::C` and
/// `x::b::D`.
fn paths_named(code: &str, at: &[String]) -> BTreeSet<Vec<String>> {
    let mut paths = BTreeSet::new();
    for start in ["crate::", "super::"] {
        for (i, _) in code.match_indices(start) {
            let before = &code[..i];
            if before.ends_with(|c: char| c.is_ascii_alphanumeric() || c == '_' || c == '$')
                || before.ends_with("super::")
            {
                continue;
            }
            let mut rest = &code[i..];
            let prefix = if let Some(after) = rest.strip_prefix("crate::") {
                rest = after;
                Vec::new()
            } else {
                let mut up = 0;
                while let Some(after) = rest.strip_prefix("super::") {
                    rest = after;
                    up += 1;
                }
                let Some(kept) = at.len().checked_sub(up) else { continue };
                at[..kept].to_vec()
            };
            use_tree(rest, prefix, &mut paths);
        }
    }
    paths
}

/// The paths of the use tree (or plain path) that `text` begins with, each
/// after `prefix`: `a::{b, c::{D, E as F}}` gives `a::b`, `a::c::D` and
/// `a::c::E`.
fn use_tree(text: &str, prefix: Vec<String>, paths: &mut BTreeSet<Vec<String>>) {
    let mut path = prefix;
    // Where each open group's items begin in `path`.
    let mut groups: Vec<usize> = Vec::new();
    let mut grouped = false;
    let mut alias = false;
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        let word = identifier_at(rest);
        if !word.is_empty() {
            match word {
                _ if alias => alias = false,
                "as" => alias = true,
                "self" => {}
                _ => path.push(word.to_string()),
            }
            rest = &rest[word.len()..];
            continue;
        }
        let items_begin = groups.last().copied().unwrap_or(0);
        match c {
            ':' | '*' => {}
            '{' => {
                groups.push(path.len());
                grouped = true;
            }
            _ if groups.is_empty() => break,
            ',' | '}' => {
                if path.len() > items_begin {
                    paths.insert(path.clone());
                }
                if c == '}' {
                    // The item the group ends is whole: what follows begins another.
                    groups.pop();
                }
                path.truncate(groups.last().copied().unwrap_or(0));
            }
            _ => {}
        }
        rest = &rest[c.len_utf8()..];
    }
    if !grouped {
        paths.insert(path);
    }
}

/// The import that module `from` makes by naming `named`, as the two
/// sibling modules that hold its ends below the module holding both:
/// `a::x` naming `b::y::Z` is `a` importing `b`, so that a circle through
/// submodules shows as one between their parents. `named` is the module of
/// `modules` it reaches furthest into. A module naming a module that holds
/// it (its parent's items through `super::`, the crate root's) or one it
/// holds is no import: a module and its parts are one room.
fn sibling_import(
    from: &[String],
    named: &[String],
    modules: &BTreeSet<Vec<String>>,
) -> Option<(Vec<String>, Vec<String>)> {
    let to = (0..=named.len()).rev().map(|n| &named[..n]).find(|m| modules.contains(*m))?;
    let common = from.iter().zip(to).take_while(|(a, b)| a == b).count();
    if common == from.len() || common == to.len() {
        return None;
    }
    Some((from[..=common].to_vec(), to[..=common].to_vec()))
}

/// The imports between the modules of the crate in `dir` (of the
/// workspace), each module named by its file. Code in `#[cfg(test)]`
/// modules and `tests.rs` files is left out, and so are the crates of one
/// file in `bin/`.
fn sibling_imports(dir: &str) -> BTreeMap<String, BTreeSet<String>> {
    let root = workspace();
    let src = root.join(dir);
    let mut modules = BTreeMap::new();
    for file in rust_files(&src) {
        let relative = file.strip_prefix(&src).unwrap();
        if !relative.starts_with("bin") && relative.file_name().is_some_and(|n| n != "tests.rs") {
            modules.insert(module_path(relative), file.strip_prefix(&root).unwrap().display().to_string());
        }
    }
    let known: BTreeSet<Vec<String>> = modules.keys().cloned().collect();
    let file_of = |module: &Vec<String>| modules.get(module).cloned().unwrap_or_else(|| module.join("::"));
    let mut imports: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (module, file) in &modules {
        let code = code_outside_tests(&fs::read_to_string(root.join(file)).unwrap());
        for named in paths_named(&code, module) {
            if let Some((from, to)) = sibling_import(module, &named, &known) {
                imports.entry(file_of(&from)).or_default().insert(file_of(&to));
            }
        }
    }
    imports
}

/// The shortest circle of `imports` through `start`, from `start` back to
/// it, if there is one.
fn circle_through<'a>(start: &'a String, imports: &'a BTreeMap<String, BTreeSet<String>>) -> Option<Vec<String>> {
    let mut came_from: BTreeMap<&String, &String> = BTreeMap::new();
    let mut queue = VecDeque::from([start]);
    while let Some(module) = queue.pop_front() {
        for next in imports.get(module).into_iter().flatten() {
            if next == start {
                let mut circle = vec![start.clone(), module.clone()];
                let mut at = module;
                while at != start {
                    at = came_from[at];
                    circle.push(at.clone());
                }
                circle.reverse();
                return Some(circle);
            }
            if !came_from.contains_key(next) {
                came_from.insert(next, module);
                queue.push_back(next);
            }
        }
    }
    None
}

/// Every circle of `imports` (module -> the modules it imports), each the
/// shortest through its first module and named once, from a module back
/// to it.
fn circles(imports: &BTreeMap<String, BTreeSet<String>>) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let mut seen = BTreeSet::new();
    for start in imports.keys() {
        if let Some(circle) = circle_through(start, imports) {
            if seen.insert(circle.iter().cloned().collect::<BTreeSet<_>>()) {
                found.push(circle);
            }
        }
    }
    found
}

#[test]
fn no_modules_of_any_crate_import_each_other_in_a_circle() {
    let mut found = Vec::new();
    for dir in CRATE_SOURCES {
        found.extend(circles(&sibling_imports(dir)).iter().map(|circle| circle.join(" -> ")));
    }
    assert!(
        found.is_empty(),
        "modules that import each other in a circle (move what both need into a module of its own, or down to the \
         one that needs it):\n{}",
        found.join("\n")
    );
}

/// The tasks' binary: `main` declares the tasks and runs them, so a task
/// naming one of main's own items (not one of its modules) is an arrow
/// back up to what runs it, which the sibling rule above does not count.
/// The files of diagnose/ that hold a detector (`impl Detector for`).
fn detector_files() -> BTreeSet<String> {
    let root = workspace();
    rust_files(&root.join("podstuck-user/src/diagnose"))
        .into_iter()
        .filter(|f| code_outside_tests(&fs::read_to_string(f).unwrap()).contains("impl Detector for"))
        .map(|f| f.strip_prefix(&root).unwrap().display().to_string())
        .collect()
}

#[test]
fn no_detector_imports_another() {
    // What a detector shares with another (holder words, shell steps, the
    // failure log, the router's classes) lives in a room of its own; a
    // detector that reaches into another decides what that one owns.
    let detectors = detector_files();
    assert!(detectors.len() >= 15, "the detectors were not found: {detectors:?}");
    let imports = sibling_imports("podstuck-user/src");
    let reaching: Vec<String> = detectors
        .iter()
        .flat_map(|d| {
            let others = imports.get(d).into_iter().flatten().filter(|to| detectors.contains(*to));
            others.map(move |to| format!("{d} imports {to}"))
        })
        .collect();
    assert!(reaching.is_empty(), "{reaching:#?}");
}

#[test]
fn no_module_of_xtask_names_mains_own_items() {
    let src = workspace().join("xtask/src");
    let files: Vec<(PathBuf, Vec<String>)> = rust_files(&src)
        .into_iter()
        .map(|file| {
            let at = module_path(file.strip_prefix(&src).unwrap());
            (file, at)
        })
        .collect();
    let modules: BTreeSet<&String> = files.iter().filter_map(|(_, at)| at.first()).collect();
    let mut wrong = Vec::new();
    for (file, at) in files.iter().filter(|(_, at)| !at.is_empty()) {
        for path in paths_named(&code_outside_tests(&fs::read_to_string(file).unwrap()), at) {
            if path.first().is_some_and(|first| !modules.contains(first)) {
                wrong.push(format!("{}: names main's {}", file.strip_prefix(&src).unwrap().display(), path.join("::")));
            }
        }
    }
    assert!(wrong.is_empty(), "xtask's tasks name main's items (move them into a module below):\n{}", wrong.join("\n"));
}

#[test]
fn the_circle_check_reads_an_import_as_one_between_the_modules_holding_its_ends() {
    let path = |p: &str| p.split("::").filter(|m| !m.is_empty()).map(str::to_string).collect::<Vec<_>>();
    let code = "use crate::{a::X, b::{c, D as E}};\nlet v = super::super::f::g();\nsuper::h();\n$crate::i!();";
    let named: Vec<String> = paths_named(code, &path("x::y")).iter().map(|p| p.join("::")).collect();
    assert_eq!(named, ["a::X", "b::D", "b::c", "f::g", "x::h"]);
    let modules: BTreeSet<Vec<String>> = ["", "a", "a::x", "b", "b::y"].into_iter().map(path).collect();
    let import = |from: &str, named: &str| sibling_import(&path(from), &path(named), &modules);
    assert_eq!(import("a::x", "b::y::Z"), Some((path("a"), path("b"))));
    assert_eq!(import("a::x", "b::y"), Some((path("a"), path("b"))));
    assert_eq!(import("b::y", "a::x::f"), Some((path("b"), path("a"))));
    assert_eq!(import("a::x", "a::T"), None, "a parent's item");
    assert_eq!(import("a", "a::x::f"), None, "a submodule's item");
    assert_eq!(import("a::x", "say"), None, "the crate root's item");
}

#[test]
fn the_circle_check_names_a_loop_and_no_other_path() {
    let imports = |pairs: &[(&str, &str)]| {
        let mut imports = BTreeMap::<String, BTreeSet<String>>::new();
        for (from, to) in pairs {
            imports.entry(from.to_string()).or_default().insert(to.to_string());
        }
        imports
    };
    let looped = imports(&[("main", "bench"), ("bench", "soak"), ("soak", "vm"), ("vm", "bench"), ("vm", "cross")]);
    assert_eq!(circles(&looped), [["bench", "soak", "vm", "bench"]]);
    let two = imports(&[("a", "b"), ("b", "a"), ("c", "d"), ("d", "c"), ("a", "c")]);
    assert_eq!(circles(&two), [["a", "b", "a"], ["c", "d", "c"]]);
    let tree = imports(&[("main", "bench"), ("main", "soak"), ("bench", "vm"), ("soak", "vm"), ("vm", "cross")]);
    assert!(circles(&tree).is_empty());
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

/// A room holds one thing: a collector file past this many lines holds
/// several, and is split into the rooms it holds.
const MOST_LINES_IN_A_COLLECTOR_FILE: usize = 900;

#[test]
fn no_collector_file_is_longer_than_900_lines() {
    let root = workspace();
    let long: Vec<String> = rust_files(&root.join("podstuck-user/src"))
        .into_iter()
        .filter_map(|file| {
            let lines = fs::read_to_string(&file).unwrap().lines().count();
            (lines > MOST_LINES_IN_A_COLLECTOR_FILE)
                .then(|| format!("{}: {lines} lines", file.strip_prefix(&root).unwrap().display()))
        })
        .collect();
    assert!(
        long.is_empty(),
        "podstuck-user files over {MOST_LINES_IN_A_COLLECTOR_FILE} lines (split each into the rooms it holds, its tests beside it):\n{}",
        long.join("\n")
    );
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
