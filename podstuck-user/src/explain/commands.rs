//! The kubectl commands explain's findings print, each written once. The
//! names in them come from the API (or from files a user saved from it),
//! so each is quoted as one shell word and comes after `--`, which kubectl
//! reads as the end of its options; `kubectl podstuck` reads what follows
//! `--` as podstuck watch's own arguments, so its names are checked
//! instead.

use crate::words::{shell_word, CommandLine};

/// `kubectl delete pod -n NS --grace-period=0 --force -- NAME`.
pub fn force_delete(name: &str, namespace: &str) -> String {
    CommandLine::new("kubectl delete pod -n").value(namespace).own("--grace-period=0 --force").operands([name]).into()
}

/// `kubectl patch pod -n NS --type=json -p PATCH -- NAME`.
pub fn patch_pod(name: &str, namespace: &str, patch: &str) -> String {
    CommandLine::new("kubectl patch pod -n").value(namespace).own("--type=json -p").value(patch).operands([name]).into()
}

/// `kubectl patch volumeattachment --type=json -p PATCH -- NAME`.
pub fn patch_volume_attachment(name: &str, patch: &str) -> String {
    CommandLine::new("kubectl patch volumeattachment --type=json -p").value(patch).operands([name]).into()
}

/// `kubectl get volumeattachment -o yaml -- NAME`.
pub fn show_volume_attachment(name: &str) -> String {
    CommandLine::new("kubectl get volumeattachment -o yaml").operands([name]).into()
}

/// `kubectl delete node -- NODE`.
pub fn delete_node(node: &str) -> String {
    CommandLine::new("kubectl delete node").operands([node]).into()
}

/// `kubectl get pod -n NS -o jsonpath={.metadata.uid} -- NAME` (without
/// `-n` when no namespace is given): what prints the pod's UID.
pub fn pod_uid(name: &str, namespace: Option<&str>) -> String {
    let line = match namespace {
        Some(ns) => CommandLine::new("kubectl get pod -n").value(ns),
        None => CommandLine::new("kubectl get pod"),
    };
    line.own("-o").value("jsonpath={.metadata.uid}").operands([name]).into()
}

/// `kubectl get pod -n NS -o json -- NAME`: the pod as explain reads it
/// from a file.
pub fn pod_json(name: &str, namespace: Option<&str>) -> String {
    let line = match namespace {
        Some(ns) => CommandLine::new("kubectl get pod -n").value(ns),
        None => CommandLine::new("kubectl get pod"),
    };
    line.own("-o json").operands([name]).into()
}

/// `kubectl podstuck NAME -n NS`: traces the pod's teardown on its node.
/// Printed only for names the API server gives a pod and a namespace
/// (neither starts with `-`); else what is printed says why not.
pub fn trace(name: &str, namespace: &str) -> String {
    if object_name(name) && namespace_name(namespace) {
        return CommandLine::new("kubectl podstuck").value(name).own("-n").value(namespace).into();
    }
    format!(
        "none printed: pod {} in namespace {} is not named as the API server names pods and namespaces, and kubectl podstuck would read such a name as an option",
        shell_word(name.as_bytes()),
        shell_word(namespace.as_bytes())
    )
}

/// A DNS-1123 label, as a namespace's name must be: lowercase letters,
/// digits and `-`, a letter or digit at each end, 63 at most.
fn namespace_name(name: &str) -> bool {
    (1..=63).contains(&name.len()) && label(name)
}

/// A DNS-1123 subdomain, as a pod's name must be: labels joined by `.`,
/// 253 characters at most.
fn object_name(name: &str) -> bool {
    (1..=253).contains(&name.len()) && name.split('.').all(label)
}

fn label(part: &str) -> bool {
    let bytes = part.as_bytes();
    let end = |b: &u8| b.is_ascii_lowercase() || b.is_ascii_digit();
    bytes.first().is_some_and(end) && bytes.last().is_some_and(end) && bytes.iter().all(|b| end(b) || *b == b'-')
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;
    use crate::test_support::pasted::{self, calls, shown, Calls};
    use crate::test_support::TempDir;

    #[test]
    fn each_command_names_its_pod_after_dashes() {
        assert_eq!(force_delete("web-0", "shop"), "kubectl delete pod -n shop --grace-period=0 --force -- web-0");
        assert_eq!(
            patch_pod("web-0", "shop", r#"[{"op":"remove"}]"#),
            r#"kubectl patch pod -n shop --type=json -p '[{"op":"remove"}]' -- web-0"#
        );
        assert_eq!(show_volume_attachment("-A"), "kubectl get volumeattachment -o yaml -- '-A'");
        assert_eq!(delete_node("worker-1"), "kubectl delete node -- worker-1");
        assert_eq!(pod_uid("web", None), "kubectl get pod -o 'jsonpath={.metadata.uid}' -- web");
        assert_eq!(pod_json("web", Some("shop")), "kubectl get pod -n shop -o json -- web");
        assert_eq!(trace("web-0", "shop"), "kubectl podstuck web-0 -n shop");
        assert_eq!(trace("web.0-a", "kube-system"), "kubectl podstuck web.0-a -n kube-system");
        for (name, ns) in
            [("--all", "shop"), ("web", "-x"), ("Web", "shop"), ("web-", "shop"), ("", "shop"), ("web", "a.b")]
        {
            assert!(trace(name, ns).starts_with("none printed: "), "{name} {ns}: {}", trace(name, ns));
        }
    }

    fn argv(words: &[&str]) -> Vec<Vec<u8>> {
        words.iter().map(|w| w.as_bytes().to_vec()).collect()
    }

    /// Text as the API could hold it, and worse: what starts an option,
    /// quotes, expansions, globs, line breaks.
    fn hostile() -> impl Strategy<Value = String> {
        let piece = prop_oneof![
            3 => proptest::sample::select(&["-", "--all", "-A", "~", "=", "a=~/x", "$(touch pwned)", "`id`", "'", "\"", "\\", "\n", " ", "*", "[a]", "{a,b}", "!", ";", "&", "|", ">", "#", "\u{202e}", "\u{1b}[2J", "é"][..]).prop_map(str::to_string),
            2 => "[a-z0-9.-]{1,8}",
            1 => any::<String>().prop_map(|s| s.replace('\0', "")),
        ];
        proptest::collection::vec(piece, 0..5).prop_map(|p| p.concat())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, failure_persistence: None, ..ProptestConfig::default() })]

        /// Every kubectl command explain prints, built from hostile names
        /// and pasted into dash, bash (both modes) and busybox sh with a
        /// stand-in kubectl: each shell runs exactly the kubectl argv
        /// meant, the names after `--`, and nothing else.
        #[test]
        fn every_kubectl_command_is_read_by_every_shell_as_exactly_its_argv(
            name in prop_oneof![hostile(), "[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?"],
            ns in prop_oneof![hostile(), "[a-z0-9]([a-z0-9-]{0,10}[a-z0-9])?"],
            patch in hostile(),
        ) {
            let mut cases: Vec<(String, Calls)> = vec![
                (force_delete(&name, &ns), calls(vec![argv(&["kubectl", "delete", "pod", "-n", &ns, "--grace-period=0", "--force", "--", &name])])),
                (patch_pod(&name, &ns, &patch), calls(vec![argv(&["kubectl", "patch", "pod", "-n", &ns, "--type=json", "-p", &patch, "--", &name])])),
                (patch_volume_attachment(&name, &patch), calls(vec![argv(&["kubectl", "patch", "volumeattachment", "--type=json", "-p", &patch, "--", &name])])),
                (show_volume_attachment(&name), calls(vec![argv(&["kubectl", "get", "volumeattachment", "-o", "yaml", "--", &name])])),
                (delete_node(&name), calls(vec![argv(&["kubectl", "delete", "node", "--", &name])])),
                (pod_uid(&name, Some(&ns)), calls(vec![argv(&["kubectl", "get", "pod", "-n", &ns, "-o", "jsonpath={.metadata.uid}", "--", &name])])),
                (pod_uid(&name, None), calls(vec![argv(&["kubectl", "get", "pod", "-o", "jsonpath={.metadata.uid}", "--", &name])])),
                (pod_json(&name, Some(&ns)), calls(vec![argv(&["kubectl", "get", "pod", "-n", &ns, "-o", "json", "--", &name])])),
            ];
            let traced = trace(&name, &ns);
            if object_name(&name) && namespace_name(&ns) {
                prop_assert!(!name.starts_with('-') && !ns.starts_with('-'));
                cases.push((traced, calls(vec![argv(&["kubectl", "podstuck", &name, "-n", &ns])])));
            } else {
                prop_assert!(traced.starts_with("none printed: "), "{}", traced);
            }
            let fixes: Vec<String> = cases.iter().map(|(fix, _)| fix.clone()).collect();
            let scratch = TempDir::new("kubectl-fixes");
            for (n, shell) in pasted::shells().iter().enumerate() {
                let (cwd, logs) = (scratch.0.join(format!("cwd-{n}")), scratch.0.join(format!("logs-{n}")));
                std::fs::create_dir_all(&cwd).unwrap();
                std::fs::create_dir_all(&logs).unwrap();
                let ran = pasted::run(shell, &cwd, &logs, &fixes).map_err(TestCaseError::fail)?;
                for ((fix, meant), got) in cases.iter().zip(ran) {
                    prop_assert!(&got == meant, "{:?} read {} as\n{}\nnot\n{}", shell, fix, shown(&got), shown(meant));
                }
                prop_assert_eq!(std::fs::read_dir(&cwd).unwrap().count(), 0, "{:?} wrote files", shell);
            }
        }
    }
}
