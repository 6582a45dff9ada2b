//! Fix commands are printed for a person to paste into a root shell, and
//! the names in them (files in a pod's volume) are chosen by workloads that
//! may be hostile. A path must come out as exactly one word naming exactly
//! those bytes in every POSIX shell (dash, Debian's /bin/sh; busybox sh;
//! bash), run nothing else, and carry no control character to the
//! terminal it is printed on.

use super::Finding;

/// Every name in a fix is quoted by the ground floor's one quoter.
pub use crate::words::shell_word as word;

/// What a fix says first from a container: the node's mount namespace.
pub const IN_NODE_NAMESPACE: &str = "nsenter -t 1 -m --";

/// Fixes that act the same from any mount namespace of the node's PID
/// namespace (a pid, /proc, the API server, another namespace entered),
/// when they are one command alone.
const ANYWHERE: [&str; 4] = ["kill ", "nsenter ", "kubectl ", "cat /proc/"];

/// `fix` made to act in the node's mount namespace, pasted in a container
/// with the host's PID namespace or on the node: `nsenter -t 1 -m -- CMD`,
/// several commands as one `sh -c` word.
pub fn in_node_namespace(fix: &str) -> String {
    entering(IN_NODE_NAMESPACE, fix)
}

/// `fix` made to act in the mount namespace process `pid` lives in (kubelet
/// in a container: its paths and mounts are that namespace's, not the
/// host's), pasted on the node: `nsenter -t PID -m -- CMD`.
pub fn in_mount_namespace_of(pid: u32, fix: &str) -> String {
    entering(&format!("nsenter -t {pid} -m --"), fix)
}

fn entering(nsenter: &str, fix: &str) -> String {
    // Anything the pasting shell would do itself (join commands with &&,
    // ; or |, redirect with > into a file) must happen inside the
    // namespace: the whole fix goes there as one `sh -c` word. Only a
    // lone command may go as its words.
    let joined = fix.contains(['&', ';', '|', '\n', '`', '>', '<']) || fix.contains("$(");
    if fix.is_empty() || (!joined && ANYWHERE.iter().any(|a| fix.starts_with(a))) {
        return fix.to_string();
    }
    if joined {
        format!("{nsenter} sh -c {}", word(fix.as_bytes()))
    } else {
        format!("{nsenter} {fix}")
    }
}

/// A finding as said from a container: its fix acts in the node's mount
/// namespace, and says so.
pub fn from_a_container(finding: &mut Finding) {
    let fix = in_node_namespace(&finding.fix);
    if fix != finding.fix {
        finding.fix = fix;
        finding.advice.push(format!(
            "podstuck runs in a container, so the fix enters the node's mount namespace first ({IN_NODE_NAMESPACE}): paste it as root on the node, or in a shell with the host's PID namespace (a kubectl debug node pod with a shell image)"
        ));
    }
}

/// A command line of shell words, each quoted by the rule fixes follow.
pub fn command(words: &[&str]) -> String {
    words.iter().map(|w| word(w.as_bytes())).collect::<Vec<_>>().join(" ")
}

#[cfg(test)]
mod tests {
    use super::word;
    use std::process::Command;

    #[test]
    fn fixes_from_a_container_act_in_the_nodes_mount_namespace() {
        use super::in_node_namespace;
        assert_eq!(
            in_node_namespace("umount /var/lib/kubelet/pods/x/volumes/v"),
            "nsenter -t 1 -m -- umount /var/lib/kubelet/pods/x/volumes/v"
        );
        assert_eq!(in_node_namespace("umount -l '/v/a b'"), "nsenter -t 1 -m -- umount -l '/v/a b'");
        assert_eq!(in_node_namespace("umount /a && umount /b"), "nsenter -t 1 -m -- sh -c 'umount /a && umount /b'");
        for anywhere in [
            "kill 42 43",
            "nsenter -t 42 -m -- umount -l /v",
            "cat /proc/42/stack",
            "kubectl delete pod -n default node-debugger-x",
            "",
        ] {
            assert_eq!(in_node_namespace(anywhere), anywhere);
        }
        // What the pasting shell would do itself happens in the namespace: a
        // kill joined to an rmdir, a write into a cgroup's file.
        assert_eq!(
            in_node_namespace("kill -9 42 && sleep 1 && rmdir /sys/fs/cgroup/x/y"),
            "nsenter -t 1 -m -- sh -c 'kill -9 42 && sleep 1 && rmdir /sys/fs/cgroup/x/y'"
        );
        assert_eq!(
            in_node_namespace("echo 1 > /sys/fs/cgroup/x/cgroup.kill"),
            "nsenter -t 1 -m -- sh -c 'echo 1 > /sys/fs/cgroup/x/cgroup.kill'"
        );
        // A hostile name inside a joined fix: sh -c gets the fix back byte for byte.
        let fix = format!("umount {} && rmdir {}", word(b"/v/it's;x"), word(b"/v/$(touch pwned)\n"));
        let wrapped = in_node_namespace(&fix);
        let arg = wrapped.strip_prefix("nsenter -t 1 -m -- sh -c ").expect(&wrapped);
        let out = Command::new("sh").arg("-c").arg(format!("printf '%s' {arg}")).output().unwrap();
        assert_eq!(String::from_utf8(out.stdout).unwrap(), fix);
    }

    #[test]
    fn a_fix_from_a_container_says_where_it_acts() {
        use crate::diagnose::{Finding, Kind, Severity};
        let mut f = Finding::new(Kind::MountHeld, "/v", Severity::Critical, std::time::SystemTime::UNIX_EPOCH);
        f.fix = "umount /v".into();
        super::from_a_container(&mut f);
        assert_eq!(f.fix, "nsenter -t 1 -m -- umount /v");
        assert!(
            f.advice.iter().any(|a| a.contains("podstuck runs in a container") && a.contains("on the node")),
            "{:?}",
            f.advice
        );
        f.fix = "kill 42".into();
        let advice = f.advice.len();
        super::from_a_container(&mut f);
        assert_eq!((f.fix.as_str(), f.advice.len()), ("kill 42", advice));
    }

    #[test]
    fn paths_become_one_exact_shell_word() {
        assert_eq!(
            word(b"/var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/pv-1/mount"),
            "/var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/pv-1/mount"
        );
        assert_eq!(word(b"/tmp/a b"), "'/tmp/a b'");
        assert_eq!(word(b"/tmp/it's"), r"'/tmp/it'\''s'");
        assert_eq!(word(b"/tmp/$HOME;rm"), "'/tmp/$HOME;rm'");
        assert_eq!(word(b"/tmp/\xff\n'"), r#""$(printf '%b' '/tmp/\0377\0012\0047')""#);
        assert_eq!(word(b""), "''");
        assert!(!word(b"/x\x1b]0;owned\x07").contains('\x1b'), "no control byte reaches the terminal");
    }

    /// Names a hostile workload may give a file in its volume.
    const HOSTILE: &[&[u8]] = &[
        b"/v/x\n'; touch pwned #",
        b"/v/$(touch pwned)",
        b"/v/`touch pwned`",
        b"/v/a b;c&d|e>f<g",
        b"/v/\x1b]0;owned\x07\x1b[2J",
        b"/v/\xff\xfe not utf-8",
        b"/v/-rf",
        b"/v/back\\slash\\0101 and %s %b %%",
        b"/v/it's \"quoted\"",
        b"/v/trailing newline\n",
        b"/v/\n\n",
        b"/v/tab\there \r cr",
        b"/v/\xe2\x80\xae reversed",
        b"/v/*?[a]~{x,y}",
    ];

    /// The shells fixes are pasted into; a missing one fails the test
    /// unless skips are allowed (cargo xtask test installs busybox-static).
    fn shells() -> Vec<Vec<&'static str>> {
        let mut found = Vec::new();
        for shell in [vec!["dash"], vec!["bash"], vec!["busybox", "sh"]] {
            if Command::new(shell[0]).arg("-c").arg("true").status().is_ok()
                || Command::new(shell[0]).args(["sh", "-c", "true"]).status().is_ok()
            {
                found.push(shell);
            } else {
                crate::test_support::missing::<()>(
                    &crate::test_support::this_test(),
                    &format!("the shell {}, which fixes are pasted into", shell[0]),
                    "apt-get install dash bash busybox-static, or run `cargo xtask test`, which does",
                );
            }
        }
        found
    }

    #[test]
    fn every_shell_reads_each_hostile_name_as_one_exact_argument_and_runs_nothing_else() {
        let dir = crate::test_support::TempDir::new("quoting");
        for shell in shells() {
            for (i, name) in HOSTILE.iter().enumerate() {
                let out = dir.0.join(format!("argv-{}-{i}", shell.join("-")));
                // A harmless stand-in for the fix's command: it writes its
                // argument count, then each argument NUL-terminated.
                let script = format!(
                    "umount() {{ printf '%s\\n' \"$#\" > '{out}'; for a in \"$@\"; do printf '%s\\000' \"$a\" >> '{out}'; done; }}; umount {}",
                    word(name),
                    out = out.display()
                );
                let mut command = Command::new(shell[0]);
                command.args(&shell[1..]).arg("-c").arg(&script).current_dir(&dir.0);
                let status = command.status().expect("run the shell");
                assert!(status.success(), "{shell:?} failed on {:?}: {script}", String::from_utf8_lossy(name));
                let written = std::fs::read(&out)
                    .unwrap_or_else(|_| panic!("{shell:?} did not run the stand-in for {name:?}: {script}"));
                let mut expected = b"1\n".to_vec();
                expected.extend_from_slice(name);
                expected.push(0);
                assert_eq!(written, expected, "{shell:?} read {:?} from {script}", String::from_utf8_lossy(&written));
                assert!(!dir.0.join("pwned").exists(), "{shell:?} ran something else for {name:?}: {script}");
            }
        }
    }
}
