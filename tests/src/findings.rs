//! Reading podstuck's findings (`--findings`) in the end-to-end tests: the
//! latest revision of each, the shell quoting its fixes use, and a checker
//! that collects every unmet expectation instead of stopping at the first,
//! so that a test can poll "until the finding says all of this" and, on
//! timeout, say everything that was still wrong.

use std::fmt::Display;
use std::path::Path;

use serde_json::Value;

/// Every finding kind's id, in the order podstuck's table of causes
/// (`podstuck-user/src/diagnose/causes.rs`) declares them: the one list
/// the tests hold docs, alerts and contracts against.
pub fn kinds() -> Vec<String> {
    causes().into_iter().map(|cause| cause.id).collect()
}

/// What tells a cause's findings, as the table's last column says it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum ToldBy {
    /// A detector of its own (`made!(...)`).
    Own,
    /// The detector of another cause (`DetectorOf(Kind::...)`): its id.
    DetectorOf(String),
    /// The Kubernetes API (`Api`): `podstuck explain`.
    Api,
}

/// One cause of podstuck's table: its id and what tells it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Cause {
    pub id: String,
    pub told_by: ToldBy,
}

/// Every cause of podstuck's table of causes, in its order, read from
/// the table's source.
pub fn causes() -> Vec<Cause> {
    let table = Path::new(env!("CARGO_MANIFEST_DIR")).join("../podstuck-user/src/diagnose/causes.rs");
    let source = std::fs::read_to_string(&table).unwrap_or_else(|e| panic!("{}: {e}", table.display()));
    let causes = causes_in(&source);
    assert!(causes.len() >= 20, "the table of causes read as {causes:?}");
    causes
}

/// The causes of a table's source: after `causes! {`, up to its closing
/// brace, one row a cause, `Variant = "id", "P1", "past words", told;`
/// over one line or several, doc comments between.
fn causes_in(source: &str) -> Vec<Cause> {
    let start = source.find("causes! {").expect("the table of causes");
    let mut rows = Vec::new();
    let mut row = String::new();
    for line in source[start..].lines().skip(1).map(str::trim) {
        if line == "}" && row.is_empty() {
            break;
        }
        if line.is_empty() || line.starts_with("//") || line.starts_with("#[") {
            continue;
        }
        row.push_str(line);
        row.push(' ');
        if line.ends_with(';') {
            rows.push(std::mem::take(&mut row));
        }
    }
    let rows: Vec<(&str, String, &str)> = rows.iter().map(|row| cells(row)).collect();
    let id_of = |variant: &str| {
        let row = rows.iter().find(|(v, _, _)| *v == variant);
        row.map(|(_, id, _)| id.clone()).unwrap_or_else(|| panic!("DetectorOf({variant}): no such cause"))
    };
    let told_by = |told: &str| match told {
        "Api" => ToldBy::Api,
        own if own.starts_with("made!(") || own.starts_with("Own(") => ToldBy::Own,
        other => match other.strip_prefix("DetectorOf(").and_then(|v| v.strip_suffix(')')) {
            Some(variant) => ToldBy::DetectorOf(id_of(variant.trim_start_matches("Kind::"))),
            None => panic!("what tells a cause, {other:?}: not made!(...), Own(...), DetectorOf(Kind::...) or Api"),
        },
    };
    rows.iter().map(|(_, id, told)| Cause { id: id.clone(), told_by: told_by(told) }).collect()
}

/// A row's variant, id and what tells it (past its three strings).
fn cells(row: &str) -> (&str, String, &str) {
    let (variant, mut rest) = row.split_once(" = ").unwrap_or_else(|| panic!("a row of the table of causes: {row}"));
    let mut strings = Vec::new();
    for _ in 0..3 {
        let (string, after) = string_literal(rest).unwrap_or_else(|| panic!("three strings in {row}"));
        strings.push(string);
        rest = after;
    }
    let told = rest.trim().trim_start_matches(',').trim().trim_end_matches(';').trim_end();
    (variant.trim(), strings.swap_remove(0), told)
}

/// The string literal `text` starts with (past blanks and a comma), as
/// written, and what follows it.
fn string_literal(text: &str) -> Option<(String, &str)> {
    let body = text.trim_start().trim_start_matches(',').trim_start().strip_prefix('"')?;
    let mut escaped = false;
    for (i, c) in body.char_indices() {
        match c {
            '"' if !escaped => return Some((body[..i].to_string(), &body[i + 1..])),
            '\\' => escaped = !escaped,
            _ => escaped = false,
        }
    }
    None
}

/// When process `pid` started (`/proc/<pid>/stat`'s 22nd field, read
/// past its name, which may hold spaces and parentheses): with its pid,
/// the one process a fix names. None when it is gone.
pub fn start_of(pid: u32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(") ")?.1.split(' ').nth(19)?.parse().ok()
}

/// `cmd` entered into the mount namespace of process `pid`, as podstuck
/// prints it: only once the pid is checked to name that very process.
pub fn entered(pid: u32, cmd: &str) -> String {
    let start = start_of(pid).unwrap_or_else(|| panic!("process {pid} is gone"));
    format!("[ \"$(sed 's/.*) //' /proc/{pid}/stat | cut -d' ' -f20)\" = {start} ] && nsenter -t {pid} -m -- {cmd}")
}

/// Whether a JSON line is a finding (its first emission or a revision).
pub fn is_finding(line: &Value) -> bool {
    line["type"] == "finding" || line["type"] == "finding-update"
}

/// The latest revision of every finding, in order of first emission.
pub fn latest_findings(lines: &[Value]) -> Vec<Value> {
    let mut latest: Vec<Value> = Vec::new();
    for line in lines.iter().filter(|l| is_finding(l)) {
        match latest.iter_mut().find(|f| f["id"] == line["id"]) {
            Some(slot) => *slot = line.clone(),
            None => latest.push(line.clone()),
        }
    }
    latest
}

/// A path as podstuck prints it in a fix: bare when every byte is in
/// `[A-Za-z0-9/._:@%+=,-~]`, the first is not `-`, `=` or `~`, and no `~`
/// shares the word with an `=` (bash expands it after `=` or `:` in a word
/// that looks like an assignment); otherwise in single quotes (a quote
/// inside becomes `'\''`), so the fix can be pasted into a shell.
pub fn shell_word(path: &Path) -> String {
    let text = path.to_string_lossy();
    let bare = |c: char| c.is_ascii_alphanumeric() || "/._:@%+=,-~".contains(c);
    // A `~` is itself unless first or in a word with an `=` (bash's
    // assignment-like words).
    let tilde = !(text.starts_with('~') || (text.contains('~') && text.contains('=')));
    if !text.is_empty() && !text.starts_with(['-', '=']) && tilde && text.chars().all(bare) {
        text.into_owned()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}

/// Expectations about one finding, checked all at once.
pub struct Expect<'a> {
    pub finding: &'a Value,
    failures: Vec<String>,
}

impl<'a> Expect<'a> {
    pub fn new(finding: &'a Value) -> Expect<'a> {
        Expect { finding, failures: Vec::new() }
    }

    pub fn failures(&self) -> &[String] {
        &self.failures
    }

    /// The field at a JSON pointer (`/paths/0`, `/actor/comm`), or null.
    pub fn at(&self, pointer: &str) -> &'a Value {
        self.finding.pointer(pointer).unwrap_or(&Value::Null)
    }

    /// The field's text: a string as is, anything else as JSON.
    pub fn text(&self, pointer: &str) -> String {
        match self.at(pointer) {
            Value::String(s) => s.clone(),
            other => other.to_string(),
        }
    }

    pub fn that(&mut self, ok: bool, what: impl Display) {
        if !ok {
            self.failures.push(what.to_string());
        }
    }

    pub fn eq(&mut self, pointer: &str, want: impl Into<Value>) {
        let want = want.into();
        let got = self.at(pointer);
        self.that(*got == want, format!("{pointer} is {got}, want {want}"));
    }

    pub fn one_of(&mut self, pointer: &str, allowed: &[&str]) {
        let got = self.at(pointer);
        self.that(allowed.iter().any(|a| got == a), format!("{pointer} is {got}, want one of {allowed:?}"));
    }

    pub fn contains(&mut self, pointer: &str, needle: &str) {
        let text = self.text(pointer);
        self.that(text.contains(needle), format!("{pointer} ({text}) does not contain {needle:?}"));
    }

    pub fn starts_with(&mut self, pointer: &str, prefix: &str) {
        let text = self.text(pointer);
        self.that(text.starts_with(prefix), format!("{pointer} ({text}) does not start with {prefix:?}"));
    }

    pub fn is_number(&mut self, pointer: &str) {
        let got = self.at(pointer);
        self.that(got.is_number(), format!("{pointer} is {got}, want a number"));
    }

    pub fn is_string(&mut self, pointer: &str) {
        let got = self.at(pointer);
        self.that(got.as_str().is_some_and(|s| !s.is_empty()), format!("{pointer} is {got}, want a non-empty string"));
    }

    /// Whether the field's text (all of it, for an object or array)
    /// contains `needle`, case-insensitively.
    pub fn mentions(&self, pointer: &str, needle: &str) -> bool {
        self.text(pointer).to_lowercase().contains(&needle.to_lowercase())
    }

    /// Whether the field's text contains `number` as a whole number (1234
    /// is not found in 12345).
    pub fn mentions_number(&self, pointer: &str, number: u64) -> bool {
        let text = self.text(pointer);
        let wanted = number.to_string();
        text.match_indices(&wanted).any(|(i, _)| {
            let before = text[..i].chars().next_back();
            let after = text[i + wanted.len()..].chars().next();
            !before.is_some_and(|c| c.is_ascii_digit()) && !after.is_some_and(|c| c.is_ascii_digit())
        })
    }

    /// The fields every finding of failed calls has, whatever its kind
    /// (the line format): [`Expect::shape_of_no_call`]'s, and who made
    /// the calls, the call, the paths and how many calls.
    pub fn shape(&mut self) {
        self.shape_of_no_call();
        self.that(self.at("/actor").is_object(), "no /actor object");
        self.is_string("/syscall");
        let paths = self.at("/paths");
        self.that(
            paths.as_array().is_some_and(|p| !p.is_empty()),
            format!("/paths is {paths}, want a non-empty array of paths"),
        );
        let count = self.at("/count");
        self.that(count.as_u64().is_some_and(|c| c >= 1), format!("/count is {count}, want >= 1"));
    }

    /// The fields every finding has, of a cause that fails no call too (a
    /// process's lifecycle, docs/output.md): no-teardown-seen is about
    /// nobody and no call (its actor null, its count 0), the others have
    /// no syscall and may have no paths.
    pub fn shape_of_no_call(&mut self) {
        self.one_of("/type", &["finding", "finding-update"]);
        self.is_string("/id");
        self.is_string("/kind");
        self.one_of("/severity", &["critical", "warning", "info"]);
        self.one_of("/status", &["active", "resolved"]);
        self.one_of("/confidence", &["possible", "likely", "confirmed"]);
        self.is_string("/summary");
        let pod = self.at("/pod_uid");
        self.that(pod.is_null() || pod.is_string(), format!("/pod_uid is {pod}, want a string or null"));
        let pods = self.at("/pods");
        self.that(
            pods.as_array().is_some_and(|p| p.iter().all(Value::is_string)),
            format!("/pods is {pods}, want an array of UIDs"),
        );
        if let Some(uid) = pod.as_str() {
            self.that(
                pods.as_array().is_some_and(|p| p.iter().any(|u| u == uid)),
                format!("/pods {pods} lacks pod_uid {uid}"),
            );
        }
        let actor = self.at("/actor");
        self.that(actor.is_null() || actor.is_object(), format!("/actor is {actor}, want an object or null"));
        let syscall = self.at("/syscall");
        self.that(syscall.is_null() || syscall.is_string(), format!("/syscall is {syscall}, want a name or null"));
        let errno = self.at("/errno");
        self.that(errno.is_null() || errno.is_string(), format!("/errno is {errno}, want a name or null"));
        let paths = self.at("/paths");
        self.that(
            paths.as_array().is_some_and(|p| p.iter().all(Value::is_string)),
            format!("/paths is {paths}, want an array of paths"),
        );
        let evidence = self.at("/evidence");
        let facts_ok =
            evidence.as_array().is_some_and(|e| e.iter().all(|f| f["source"].is_string() && f["fact"].is_string()));
        self.that(facts_ok, format!("/evidence is {evidence}, want [{{source, fact}}...]"));
        let rhythm = self.at("/rhythm");
        self.that(rhythm.is_null() || rhythm.is_string(), format!("/rhythm is {rhythm}, want text or null"));
        let advice = self.at("/advice");
        self.that(
            advice.as_array().is_some_and(|a| a.iter().all(Value::is_string)),
            format!("/advice is {advice}, want an array of text"),
        );
        // Something to do while it lasts; nothing once it is over (docs/output.md).
        if self.at("/status") == "resolved" {
            let fix = self.at("/fix");
            self.that(fix == "", format!("/fix is {fix}, want \"\" once resolved"));
            self.that(
                advice.as_array().is_some_and(Vec::is_empty),
                format!("/advice is {advice}, want none once resolved"),
            );
        } else if self.at("/severity") == "info" {
            // An info line may have nothing to do (a drain, a sidecar
            // waiting its turn): docs/output.md.
            let fix = self.at("/fix");
            self.that(fix.is_string(), format!("/fix is {fix}, want text"));
        } else {
            self.is_string("/fix");
        }
        self.is_string("/first_seen");
        self.is_string("/last_seen");
        let count = self.at("/count");
        self.that(count.as_u64().is_some(), format!("/count is {count}, want a whole number"));
        let revision = self.at("/revision");
        self.that(revision.as_u64().is_some_and(|r| r >= 1), format!("/revision is {revision}, want >= 1"));
        self.that(self.at("/details").is_object(), "no /details object");
    }
}

/// Every finding line of one finding id, in order.
pub fn revisions<'a>(lines: &'a [Value], id: &Value) -> Vec<&'a Value> {
    lines.iter().filter(|l| is_finding(l) && l["id"] == *id).collect()
}

/// Checks how a finding was told: first as `finding` revision 1, then only
/// as `finding-update`s with rising revisions.
pub fn assert_told_in_order(finding_lines: &[Value], id: &Value) {
    let lines = revisions(finding_lines, id);
    assert_eq!(lines[0]["type"], "finding", "first emission: {}", lines[0]);
    assert_eq!(lines[0]["revision"], 1, "first emission: {}", lines[0]);
    for pair in lines.windows(2) {
        assert_eq!(pair[1]["type"], "finding-update", "{}", pair[1]);
        assert!(
            pair[1]["revision"].as_u64() > pair[0]["revision"].as_u64(),
            "revisions go up: {} then {}",
            pair[0],
            pair[1]
        );
    }
}

/// Runs a finding's fix as a user would paste it into a POSIX shell, to
/// show that it is a command that works, not just the text a test expected.
pub fn apply_fix(finding: &Value) {
    let fix = finding["fix"].as_str().expect("a fix");
    eprintln!("running the fix: {fix}");
    let out = std::process::Command::new("sh").arg("-c").arg(fix).output().expect("run sh");
    assert!(
        out.status.success(),
        "the fix `{fix}` failed ({}): {}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn safe_paths_stay_bare_and_others_are_quoted() {
        assert_eq!(
            shell_word(Path::new("/var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/pv-1/mount")),
            "/var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/pv-1/mount"
        );
        assert_eq!(
            shell_word(Path::new("/var/lib/kubelet/pods/x/volumes/pv-1/mount")),
            "/var/lib/kubelet/pods/x/volumes/pv-1/mount"
        );
        assert_eq!(shell_word(Path::new("-rf")), "'-rf'");
        assert_eq!(shell_word(Path::new("/a b")), "'/a b'");
        assert_eq!(shell_word(Path::new("/it's")), r"'/it'\''s'");
    }

    #[test]
    fn the_latest_revision_replaces_the_first() {
        let lines = vec![
            json!({"type": "finding", "id": "a", "revision": 1}),
            json!({"type": "event"}),
            json!({"type": "finding", "id": "b", "revision": 1}),
            json!({"type": "finding-update", "id": "a", "revision": 2}),
        ];
        let latest = latest_findings(&lines);
        assert_eq!(latest.len(), 2);
        assert_eq!(latest[0]["revision"], 2);
        assert_eq!(latest[1]["id"], "b");
        assert_eq!(revisions(&lines, &json!("a")).len(), 2);
    }

    #[test]
    fn the_table_of_causes_reads_as_each_id_and_what_tells_it() {
        let table = r#"
causes! {
    /// P1; a doc line with = "a string".
    VolumeStillMounted = "volume-still-mounted", "P1",
        "a volume was still mounted, \"quoted\"; then",
        made!(|_| volume_still_mounted::VolumeStillMounted::default());
    #[doc = "P3"]
    PermissionDenied = "permission-denied", "P3", "a removal was refused", DetectorOf(Kind::VolumeStillMounted);
    FinalizerPending = "finalizer-pending", "P11", "a finalizer held the pod", Api;
}

pub fn detectors() { let x = "not a cause"; }
"#;
        let causes = causes_in(table);
        let told: Vec<(&str, &ToldBy)> = causes.iter().map(|c| (c.id.as_str(), &c.told_by)).collect();
        assert_eq!(
            told,
            [
                ("volume-still-mounted", &ToldBy::Own),
                ("permission-denied", &ToldBy::DetectorOf("volume-still-mounted".into())),
                ("finalizer-pending", &ToldBy::Api),
            ]
        );
    }

    #[test]
    fn numbers_are_found_whole() {
        let f = json!({"evidence": [{"source": "proc", "fact": "pid 12345 holds it"}]});
        let e = Expect::new(&f);
        assert!(e.mentions_number("/evidence", 12345));
        assert!(!e.mentions_number("/evidence", 1234));
        assert!(!e.mentions_number("/evidence", 2345));
    }
}
