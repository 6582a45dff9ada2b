//! What a failing CNI plugin wrote on its stdout, read: the CNI error's
//! message (`msg`, then `details`, as the spec has plugins write it), and
//! the kind of failure it names, for the advice that fits. The words are
//! the plugin's own and may quote what a workload chose (a pod's name, an
//! interface): shown as the plugin's, quoted, bounded, and never a
//! decision (the severity, the confidence and the fix's command come from
//! the kernel's facts; only advice follows the words).

use serde_json::Value;

/// The longest message kept, in characters.
const SAID_MAX: usize = 300;

/// A plugin's error, as it wrote it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginSaid {
    /// The message, on one line, printable; "…" where it was cut.
    pub text: String,
    pub hint: Option<Hint>,
}

/// The failures whose fix the words name.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Hint {
    /// The API server refuses the plugin's credentials (an expired or
    /// revoked token in its kubeconfig).
    Unauthorized,
    /// The sandbox's network namespace is gone (a reboot, a runtime
    /// restart) and the plugin fails DEL on it.
    NetnsGone,
    /// The plugin cannot reach its node agent's socket.
    AgentUnreachable,
}

impl Hint {
    /// Its name in `details.plugin_said_kind`.
    pub fn name(self) -> &'static str {
        match self {
            Hint::Unauthorized => "unauthorized",
            Hint::NetnsGone => "netns-gone",
            Hint::AgentUnreachable => "agent-unreachable",
        }
    }
}

/// What `bytes` (the first of `total` written on the plugin's stdout)
/// say; None when they say nothing (empty, or a result with no error).
pub fn read(bytes: &[u8], total: u32) -> Option<PluginSaid> {
    let mut cut = false;
    let message = match serde_json::from_slice::<Value>(bytes) {
        Ok(Value::Object(error)) => {
            let field = |name: &str| error.get(name).and_then(Value::as_str).unwrap_or("").trim().to_string();
            let (msg, details) = (field("msg"), field("details"));
            match (msg.is_empty(), details.is_empty()) {
                (true, true) => return None,
                (false, true) => msg,
                (true, false) => details,
                (false, false) => format!("{msg}: {details}"),
            }
        }
        Ok(_) => return None,
        // Cut by the kernel's copy, or not JSON: the message's start, else
        // the words as they are.
        Err(_) => {
            cut = (total as usize) > bytes.len();
            match string_after(bytes, b"\"msg\"") {
                Some(msg) => msg,
                None => String::from_utf8_lossy(bytes).trim().to_string(),
            }
        }
    };
    let mut text: String = crate::words::safe_text(message.split_whitespace().collect::<Vec<_>>().join(" ").as_bytes());
    if text.is_empty() {
        return None;
    }
    if text.chars().count() > SAID_MAX || cut {
        text = text.chars().take(SAID_MAX).collect::<String>() + "…";
    }
    let hint = hint_of(&text);
    Some(PluginSaid { text, hint })
}

/// The JSON string after `key` in `bytes` (up to its closing quote, or to
/// the end where the copy was cut), its escapes undone as far as they go.
fn string_after(bytes: &[u8], key: &[u8]) -> Option<String> {
    let at = bytes.windows(key.len()).position(|w| w == key)? + key.len();
    let rest = &bytes[at..];
    let open = rest.iter().position(|b| *b == b'"')?;
    if !rest[..open].iter().all(|b| *b == b':' || b.is_ascii_whitespace()) {
        return None;
    }
    let body = &rest[open + 1..];
    let mut out = Vec::new();
    let mut escaped = false;
    for &b in body {
        match (escaped, b) {
            (true, b'n' | b't') => out.push(b' '),
            (true, other) => out.push(other),
            (false, b'\\') => {
                escaped = true;
                continue;
            }
            (false, b'"') => break,
            (false, other) => out.push(other),
        }
        escaped = false;
    }
    Some(String::from_utf8_lossy(&out).trim().to_string())
}

fn hint_of(text: &str) -> Option<Hint> {
    let lower = text.to_lowercase();
    let has = |words: &[&str]| words.iter().any(|w| lower.contains(w));
    if has(&["unauthorized", "token has expired", "token is expired", "invalid bearer token"]) {
        return Some(Hint::Unauthorized);
    }
    if lower.contains("netns")
        && has(&["no such file or directory", "failed to statfs", "not a network namespace", "is empty"])
    {
        return Some(Hint::NetnsGone);
    }
    if has(&["dial unix", ".sock"]) && has(&["connection refused", "no such file or directory", "connect:"]) {
        return Some(Hint::AgentUnreachable);
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_cni_error_is_its_message_and_details_on_one_line() {
        let said = br#"{
    "code": 999,
    "msg": "failed to create host-local dir",
    "details": "mkdir /tmp/x/cni: not a directory"
}"#;
        let said = read(said, said.len() as u32).unwrap();
        assert_eq!(said.text, "failed to create host-local dir: mkdir /tmp/x/cni: not a directory");
        assert_eq!(said.hint, None);
    }

    #[test]
    fn the_failures_users_report_are_named_for_their_fix() {
        let cases = [
            (
                r#"{"code":999,"msg":"error getting ClusterInformation: connection is unauthorized: Unauthorized"}"#,
                Some(Hint::Unauthorized),
            ),
            (
                r#"{"code":999,"msg":"failed to Statfs \"/var/run/netns/cni-1234\": no such file or directory"}"#,
                Some(Hint::NetnsGone),
            ),
            (
                r#"{"code":999,"msg":"netns \"/var/run/netns/cni-1234\": no such file or directory"}"#,
                Some(Hint::NetnsGone),
            ),
            (
                r#"{"code":999,"msg":"Unable to connect to Cilium daemon: dial unix /var/run/cilium/cilium.sock: connect: connection refused"}"#,
                Some(Hint::AgentUnreachable),
            ),
            (r#"{"code":7,"msg":"plugin type=\"bridge\" failed: anything else"}"#, None),
        ];
        for (said, hint) in cases {
            assert_eq!(read(said.as_bytes(), said.len() as u32).unwrap().hint, hint, "{said}");
        }
    }

    #[test]
    fn a_message_cut_by_the_kernels_copy_is_read_to_where_it_stops_and_marked_cut() {
        let said = br#"{"code": 999, "msg": "error getting ClusterInformation: connection is unauth"#;
        let read = read(said, 4000).unwrap();
        assert_eq!(read.text, "error getting ClusterInformation: connection is unauth…");
        // Words that are not JSON are kept as they are, printable.
        let plain = b"panic: runtime error\n\x1b[31mred\x1b[0m";
        let plain = super::read(plain, plain.len() as u32).unwrap();
        assert!(!plain.text.contains('\x1b') && plain.text.starts_with("panic: runtime error"), "{}", plain.text);
    }

    #[test]
    fn a_result_or_nothing_says_nothing() {
        for said in [&br#"{"cniVersion":"1.0.0"}"#[..], b"", b"   \n", b"[1,2]"] {
            assert_eq!(read(said, said.len() as u32), None, "{}", String::from_utf8_lossy(said));
        }
        // Past the kept length, a message is cut at SAID_MAX characters.
        let long = format!(r#"{{"msg":"{}"}}"#, "x".repeat(1000));
        let text = read(long.as_bytes(), long.len() as u32).unwrap().text;
        assert_eq!(text.chars().count(), SAID_MAX + 1);
    }
}
