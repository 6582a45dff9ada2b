//! docs/exit-codes.md, row by row: each code got from the command its row
//! names (issue 42). Refusals of what was asked (a path, a file, a pod, an
//! argument, a run without an API to resolve a name) exit 2, never 1.
//!
//! Row 3 (a `--duration` run ending with a critical finding active) is
//! `not_a_terminal_gets_a_block_per_finding_and_no_call_lines` in
//! live_view.rs; row 130 (`kubectl podstuck` stopped while its debug pod
//! starts) is in kubectl_plugin.rs: they need those files' fixtures.

use std::process::{Command, Output};

use podstuck_tests::*;

/// podstuck with `args`, no cluster configuration in reach.
fn podstuck(args: &[&str]) -> Output {
    Command::new(podstuck_binary())
        .args(args)
        .env_remove("KUBECONFIG")
        .env_remove("KUBERNETES_SERVICE_HOST")
        .env("HOME", "/nonexistent")
        .output()
        .expect("run podstuck")
}

/// `args` end with `code`, and an error said once with the one prefix.
fn exits(args: &[&str], code: i32) -> String {
    let out = podstuck(args);
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert_eq!(out.status.code(), Some(code), "podstuck {}:\n{stderr}", args.join(" "));
    if code != 0 && !stderr.contains("Usage:") {
        assert!(
            // (clap's own refusals of an argument say `error:` as clap does.)
            stderr.lines().any(|l| l.starts_with("podstuck: error: ") || l.starts_with("error: invalid value")),
            "podstuck {}: no `podstuck: error:` line:\n{stderr}",
            args.join(" ")
        );
    }
    stderr
}

kernel_test! {
    /// Row 0: `watch` ran its `--duration` with no critical finding.
    fn zero_a_watch_that_ran_its_duration_with_nothing_critical(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        // One quiet pod: the whole node may hold other tests' stuck mounts.
        let pod = root.new_pod();
        exits(&["watch", "--concurrent", "--duration", "1s", "--json", "--kubelet-root", root.arg(), "--pod", pod.uid()], 0);
    }
}

/// Row 1: the API server cannot be reached while explaining.
#[test]
fn one_the_api_server_cannot_be_reached() {
    let dir = std::env::temp_dir().join(format!("podstuck-exit-codes-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("kubeconfig");
    std::fs::write(
        &config,
        "apiVersion: v1\nkind: Config\nclusters:\n- name: c\n  cluster:\n    server: https://127.0.0.1:1\n\
         users:\n- name: u\n  user:\n    token: t\ncontexts:\n- name: x\n  context:\n    cluster: c\n    user: u\n\
         current-context: x\n",
    )
    .unwrap();
    let said = exits(&["explain", "web-0", "-n", "shop", "--kubeconfig", config.to_str().unwrap()], 1);
    let _ = std::fs::remove_dir_all(&dir);
    assert!(!said.contains("panicked"), "{said}");
}

/// Row 2, what a user types wrongly and files that are no record.
#[test]
fn two_arguments_and_files_asked_wrongly() {
    for args in [
        &["watch", "--duration", "30"][..],
        &["watch", "--duration", "-5s"],
        &["watch", "--interval", "0s"],
        &["explain"],
        &["replay", "/dev/null"],
        &["replay", "/tmp"],
    ] {
        exits(args, 2);
    }
    let garbage = std::env::temp_dir().join(format!("podstuck-garbage-{}.txt", std::process::id()));
    std::fs::write(&garbage, "garbage\n").unwrap();
    let said = exits(&["replay", garbage.to_str().unwrap()], 2);
    let _ = std::fs::remove_file(&garbage);
    assert!(said.contains("is not a podstuck record"), "{said}");
}

/// Row 2: `explain POD` where no cluster configuration is, as `watch --pod
/// NAME` without one.
#[test]
fn two_explain_with_no_kubeconfig_as_watch_with_no_kubeconfig() {
    let said = exits(&["explain", "web-0", "-n", "shop"], 2);
    assert!(said.contains("no Kubernetes API configuration found"), "{said}");
}

kernel_test! {
    /// Row 2: refused paths and a pod the API cannot resolve.
    fn two_refused_paths_and_an_unresolved_pod(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let watch = |more: &[&str]| {
            let mut args = vec!["watch", "--concurrent", "--duration", "1s", "--kubelet-root", root.arg()];
            args.extend_from_slice(more);
            args.into_iter().map(str::to_string).collect::<Vec<_>>()
        };
        let run = |args: Vec<String>, code: i32| {
            let args: Vec<&str> = args.iter().map(String::as_str).collect();
            exits(&args, code)
        };
        let said = run(watch(&["--histograms", "/tmp"]), 2);
        assert!(said.contains("writable by everyone"), "{said}");
        let file = scratch.path().join("a-file");
        std::fs::write(&file, "").unwrap();
        let said = run(watch(&["--histograms", file.to_str().unwrap()]), 2);
        assert!(said.contains("exists and is not a directory"), "{said}");
        let said = run(watch(&["--pod", "shop/web-0"]), 2);
        assert!(said.contains("cannot resolve --pod shop/web-0"), "{said}");
        let mut record = vec!["record".to_string(), file.to_str().unwrap().to_string()];
        record.extend(watch(&[]).into_iter().skip(1));
        let said = run(record, 2);
        assert!(said.contains("exists: choose another name or remove it"), "{said}");
    }
}

kernel_test! {
    /// `--pod` checked against the node (issue 42): 32 hex digits that no
    /// pod here has are refused (2), not watched for "anyway"; the same
    /// digits as a pod's dashed UID, and the live view's shortened UID, are
    /// that pod, and said so.
    fn two_a_dashless_uid_no_pod_has_and_a_shortened_uid_resolves(test) {
        let scratch = test.scratch();
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let uid = pod.uid().to_string();
        std::fs::create_dir_all(pod.dir().join("volumes")).unwrap();
        let watch = |value: &str, code: i32| {
            exits(&["watch", "--concurrent", "--duration", "1s", "--json", "--kubelet-root", root.arg(), "--pod", value], code)
        };
        let said = watch("81f52ff39aee4d5b9ab759c75316201d", 2);
        assert!(said.contains("no pod with this UID on this node") && !said.contains("anyway"), "{said}");
        let said = watch(&uid.replace('-', ""), 0);
        assert!(said.contains(&format!("taken as pod UID {uid}")), "{said}");
        let said = watch(&uid[..8], 0);
        assert!(said.contains(&format!("a shortened UID: taken as pod {uid}")), "{said}");
        let said = watch("0badc0de", 2);
        assert!(said.contains("no pod on this node has a UID that starts with it"), "{said}");
    }
}
