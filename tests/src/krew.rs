//! krew's rules for a plugin manifest, written from krew's own checks
//! (its `internal/index/validation` package and `validate-krew-manifest`,
//! which the krew-index repository runs on every manifest it takes), and
//! an install laid out as `kubectl krew install` lays it: the platform
//! chosen by its selector, the archive's files copied by the platform's
//! `files` rules into `store/<name>/<version>/`, and `bin/kubectl-<name>` a
//! link to the platform's `bin` there.
//!
//! The rules: apiVersion `krew.googlecontainertools.github.com/v1alpha2`,
//! kind `Plugin`; the name safe (`^[\w-]+$`, no Windows device name) and
//! equal to the file's (`<name>.yaml`); a short description on one line; a
//! version that is semantic with a leading `v`; at least one platform,
//! each with a `uri`, a 64-hex `sha256`, a `bin`, `files` absent or each
//! with `from` and `to`, and a selector on `os` and `arch` only that
//! matches one of krew's platforms; no two platforms selecting the same
//! one. Beyond what krew can see without downloading: each `sha256` is the
//! sum of the release file the `uri` names, the `bin` is in that archive
//! after the `files` rules, and a license file is installed with it (what
//! krew-index requires).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use serde_json::Value;
use sha2::{Digest as _, Sha256};

/// The platforms krew supports (validate-krew-manifest's list).
const KREW_PLATFORMS: [(&str, &str); 11] = [
    ("windows", "386"),
    ("windows", "amd64"),
    ("windows", "arm64"),
    ("linux", "386"),
    ("linux", "amd64"),
    ("linux", "arm"),
    ("linux", "arm64"),
    ("linux", "ppc64le"),
    ("darwin", "386"),
    ("darwin", "amd64"),
    ("darwin", "arm64"),
];

/// The names krew-index takes for a license file (lowercased).
const LICENSE_NAMES: [&str; 8] =
    ["license", "license.txt", "license.md", "licenses", "licenses.txt", "licenses.md", "copying", "copying.txt"];

const WINDOWS_FORBIDDEN: [&str; 22] = [
    "CON", "PRN", "AUX", "NUL", "COM1", "COM2", "COM3", "COM4", "COM5", "COM6", "COM7", "COM8", "COM9", "LPT1", "LPT2",
    "LPT3", "LPT4", "LPT5", "LPT6", "LPT7", "LPT8", "LPT9",
];

/// A manifest read as krew reads it (YAML), as a JSON value.
pub fn read_manifest(file: &Path) -> Value {
    let text = std::fs::read_to_string(file).unwrap_or_else(|e| panic!("{}: {e}", file.display()));
    yaml_serde::from_str(&text).unwrap_or_else(|e| panic!("{} is not YAML: {e}", file.display()))
}

/// Whether `version` is semantic with a leading `v` (krew's
/// `semver.Parse`, Kubernetes' `ParseSemantic`): vMAJOR.MINOR.PATCH, no
/// leading zeros, an optional -pre-release and +build.
pub fn is_v_semver(version: &str) -> bool {
    let Some(rest) = version.strip_prefix('v') else { return false };
    let (rest, build) = rest.split_once('+').map_or((rest, None), |(r, b)| (r, Some(b)));
    let (core, pre) = rest.split_once('-').map_or((rest, None), |(c, p)| (c, Some(p)));
    let ident = |s: &str| !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    let numbers: Vec<&str> = core.split('.').collect();
    numbers.len() == 3
        && numbers
            .iter()
            .all(|n| !n.is_empty() && n.chars().all(|c| c.is_ascii_digit()) && (n.len() == 1 || !n.starts_with('0')))
        && pre.is_none_or(|p| p.split('.').all(ident))
        && build.is_none_or(|b| b.split('.').all(ident))
}

fn is_safe_name(name: &str) -> bool {
    !name.is_empty()
        && name.chars().all(|c| c.is_alphanumeric() || c == '_' || c == '-')
        && !WINDOWS_FORBIDDEN.iter().any(|f| f.eq_ignore_ascii_case(name))
}

/// Whether a platform's selector (matchLabels) selects `os`/`arch`.
fn selects(selector: &Value, os: &str, arch: &str) -> bool {
    let labels = selector["matchLabels"].as_object();
    labels.is_some_and(|labels| {
        labels.iter().all(|(k, v)| match k.as_str() {
            "os" => v == os,
            "arch" => v == arch,
            _ => false,
        })
    })
}

/// What in `manifest` (read from `file`, its tarballs in `dist`) breaks
/// krew's rules, one sentence each; empty when nothing does.
pub fn problems(file: &Path, manifest: &Value, dist: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let mut say = |s: String| problems.push(s);
    if manifest["apiVersion"] != "krew.googlecontainertools.github.com/v1alpha2" {
        say(format!("apiVersion={} is not krew's v1alpha2", manifest["apiVersion"]));
    }
    if manifest["kind"] != "Plugin" {
        say(format!("kind={} is not Plugin", manifest["kind"]));
    }
    let from_file = file.file_name().and_then(|n| n.to_str()).and_then(|n| n.strip_suffix(".yaml")).unwrap_or("");
    if !is_safe_name(from_file) {
        say(format!("the plugin name {from_file:?} is not allowed"));
    }
    if manifest["metadata"]["name"] != from_file {
        say(format!("plugin should be named {from_file:?}, not {}", manifest["metadata"]["name"]));
    }
    let spec = &manifest["spec"];
    match spec["shortDescription"].as_str() {
        Some(s) if !s.is_empty() && !s.contains(['\r', '\n']) => {}
        _ => say("should have a short description on one line".into()),
    }
    let version = spec["version"].as_str().unwrap_or("");
    if !is_v_semver(version) {
        say(format!("version {version:?} is not semantic or not starting with 'v'"));
    }
    let platforms = spec["platforms"].as_array().cloned().unwrap_or_default();
    if platforms.is_empty() {
        say("should have a platform specified".into());
    }
    for (i, platform) in platforms.iter().enumerate() {
        for problem in platform_problems(platform, dist) {
            say(format!("spec.platforms[{i}]: {problem}"));
        }
    }
    for (os, arch) in KREW_PLATFORMS {
        let matching: Vec<usize> =
            (0..platforms.len()).filter(|&i| selects(&platforms[i]["selector"], os, arch)).collect();
        if matching.len() > 1 {
            say(format!("spec.platforms {matching:?} have overlapping selectors that select {os}/{arch}"));
        }
    }
    problems
}

/// What breaks krew's rules in one platform.
fn platform_problems(platform: &Value, dist: &Path) -> Vec<String> {
    let mut problems = Vec::new();
    let uri = platform["uri"].as_str().unwrap_or("");
    if uri.is_empty() {
        problems.push("`uri` has to be set".to_string());
    }
    let sha256 = platform["sha256"].as_str().unwrap_or("");
    if sha256.len() != 64 || !sha256.chars().all(|c| c.is_ascii_digit() || ('a'..='f').contains(&c)) {
        problems.push(format!("`sha256` value {sha256:?} is not valid"));
    }
    let bin = platform["bin"].as_str().unwrap_or("");
    if bin.is_empty() {
        problems.push("`bin` has to be set".to_string());
    }
    match &platform["files"] {
        Value::Null => {}
        Value::Array(ops) if !ops.is_empty() => {
            if ops
                .iter()
                .any(|op| op["from"].as_str().is_none_or(str::is_empty) || op["to"].as_str().is_none_or(str::is_empty))
            {
                problems.push("`files` has an operation without `from` or `to`".to_string());
            }
        }
        _ => problems.push("`files` has to be unspecified or non-empty".to_string()),
    }
    let selector = &platform["selector"];
    match selector["matchLabels"].as_object() {
        None if selector["matchExpressions"].is_null() => {
            problems.push("empty or nil selector is not supported".to_string())
        }
        None => problems.push("matchExpressions: this check reads matchLabels only".to_string()),
        Some(labels) if labels.is_empty() => problems.push("`matchLabels` specified but empty".to_string()),
        Some(labels) => {
            for key in labels.keys().filter(|k| *k != "os" && *k != "arch") {
                problems.push(format!("key {key:?} not supported"));
            }
        }
    }
    if !KREW_PLATFORMS.iter().any(|(os, arch)| selects(selector, os, arch)) {
        problems.push("its selector matches none of krew's platforms".to_string());
    }
    // What krew checks once it downloads: the sum, and the bin in the archive.
    let file = uri.rsplit('/').next().unwrap_or("");
    let archive = dist.join(file);
    match std::fs::read(&archive) {
        Err(e) => problems.push(format!("the uri names {file:?}, which is not in the release ({e})")),
        Ok(bytes) if format!("{:x}", Sha256::digest(&bytes)) != sha256 => {
            problems.push(format!("{sha256} does not match the sha256 of {file}"))
        }
        Ok(_) => {
            let listed = std::process::Command::new("tar").arg("-tzf").arg(&archive).output().expect("run tar");
            let names: Vec<String> = String::from_utf8_lossy(&listed.stdout).lines().map(str::to_string).collect();
            let copied = copied_by_rules(platform, &names);
            if !copied.values().any(|to| to == bin) {
                problems.push(format!("bin {bin:?} is not in the archive {file} after the `files` rules ({names:?})"));
            }
            if !copied.values().any(|to| LICENSE_NAMES.contains(&to.to_lowercase().as_str())) {
                problems.push(format!("no license file of {file} is installed"));
            }
        }
    }
    problems
}

/// Whether `name` matches `pattern`, a glob of `*`s and plain characters
/// (the patterns of a release's `files` rules).
fn glob_matches(pattern: &str, name: &str) -> bool {
    match pattern.split_once('*') {
        None => pattern == name,
        Some((head, tail)) => {
            let Some(rest) = name.strip_prefix(head) else { return false };
            (0..=rest.len()).any(|i| rest.is_char_boundary(i) && glob_matches(tail, &rest[i..]))
        }
    }
}

/// The archive's files (`names`) the platform's `files` rules copy, each
/// with its path in the install directory (krew's default rule copies
/// everything to `.`).
fn copied_by_rules(platform: &Value, names: &[String]) -> BTreeMap<String, String> {
    let default = vec![serde_json::json!({"from": "*", "to": "."})];
    let ops = platform["files"].as_array().cloned().unwrap_or(default);
    let mut copied = BTreeMap::new();
    for op in &ops {
        let (from, to) = (op["from"].as_str().unwrap_or(""), op["to"].as_str().unwrap_or("."));
        for name in names.iter().filter(|n| glob_matches(from, n)) {
            let base = Path::new(name).file_name().unwrap().to_string_lossy().into_owned();
            let dest = if to == "." { base } else { format!("{}/{base}", to.trim_end_matches('/')) };
            copied.insert(name.clone(), dest);
        }
    }
    copied
}

/// Installs the platform of `manifest` that selects `os`/`arch` from the
/// unpacked archive `unpacked` under `krew_root` as krew does, and
/// returns `bin/kubectl-<name>`, the link kubectl finds on PATH.
pub fn install_as_krew_does(manifest: &Value, os: &str, arch: &str, unpacked: &Path, krew_root: &Path) -> PathBuf {
    let name = manifest["metadata"]["name"].as_str().expect("a plugin name");
    let version = manifest["spec"]["version"].as_str().expect("a version");
    let platforms = manifest["spec"]["platforms"].as_array().expect("platforms");
    let platform = platforms
        .iter()
        .find(|p| selects(&p["selector"], os, arch))
        .unwrap_or_else(|| panic!("no platform selects {os}/{arch}"));
    let install = krew_root.join("store").join(name).join(version);
    std::fs::create_dir_all(&install).unwrap();
    let names: Vec<String> =
        std::fs::read_dir(unpacked).unwrap().map(|e| e.unwrap().file_name().into_string().unwrap()).collect();
    for (from, to) in copied_by_rules(platform, &names) {
        let dest = install.join(&to);
        std::fs::create_dir_all(dest.parent().unwrap()).unwrap();
        std::fs::copy(unpacked.join(&from), &dest).unwrap_or_else(|e| panic!("copy {from} to {}: {e}", dest.display()));
    }
    let bin = install.join(platform["bin"].as_str().expect("a bin"));
    assert!(bin.is_file(), "{} is not installed", bin.display());
    let link = krew_root.join("bin").join(format!("kubectl-{name}"));
    std::fs::create_dir_all(link.parent().unwrap()).unwrap();
    std::os::unix::fs::symlink(&bin, &link).unwrap();
    link
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn versions_are_read_as_krew_reads_them() {
        for good in ["v0.1.0", "v1.22.3", "v1.0.0-rc.1", "v2.0.0+build.5", "v10.0.0-alpha-1"] {
            assert!(is_v_semver(good), "{good}");
        }
        for bad in ["0.1.0", "v0.1", "v01.0.0", "v1.0.0-", "v1.0.0+", "vx.y.z", "v1.0.0.0", ""] {
            assert!(!is_v_semver(bad), "{bad}");
        }
    }

    #[test]
    fn file_rules_glob_and_place_as_krew_does() {
        assert!(
            glob_matches("LICENSE*", "LICENSE-MIT")
                && glob_matches("*", "podstuck")
                && !glob_matches("LICENSE*", "README.md")
        );
        let platform =
            serde_json::json!({"files": [{"from": "LICENSE*", "to": "."}, {"from": "kubectl-podstuck", "to": "bin"}]});
        let names = ["LICENSE".to_string(), "README.md".to_string(), "kubectl-podstuck".to_string()];
        let copied = copied_by_rules(&platform, &names);
        assert_eq!(copied.get("LICENSE").map(String::as_str), Some("LICENSE"));
        assert_eq!(copied.get("kubectl-podstuck").map(String::as_str), Some("bin/kubectl-podstuck"));
        assert!(!copied.contains_key("README.md"));
        assert_eq!(copied_by_rules(&serde_json::json!({}), &names).len(), 3, "the default rule copies everything");
    }

    #[test]
    fn names_are_safe_as_krew_says() {
        assert!(is_safe_name("podstuck") && is_safe_name("pod_stuck-2"));
        assert!(!is_safe_name("pod/stuck") && !is_safe_name("com1") && !is_safe_name(""));
    }
}
