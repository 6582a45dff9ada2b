//! The fix commands' tests: what each prints, and that every shell a fix
//! is pasted into reads it as exactly the argv podstuck meant, whatever
//! bytes a workload put in the names.

use std::collections::BTreeSet;
use std::os::unix::ffi::OsStrExt as _;
use std::path::Path;

use proptest::prelude::*;

use super::*;
use crate::test_support::pasted::{self, calls, shown, Calls};
use crate::test_support::TempDir;

#[test]
fn fixes_from_a_container_act_in_the_nodes_mount_namespace() {
    assert_eq!(
        in_node_namespace("umount -- /var/lib/kubelet/pods/x/volumes/v"),
        "nsenter -t 1 -m -- umount -- /var/lib/kubelet/pods/x/volumes/v"
    );
    assert_eq!(in_node_namespace("umount -l -- '/v/a b'"), "nsenter -t 1 -m -- umount -l -- '/v/a b'");
    assert_eq!(
        in_node_namespace("umount -- /a && umount -- /b"),
        "nsenter -t 1 -m -- sh -c 'umount -- /a && umount -- /b'"
    );
    for anywhere in [
        "kill 42 43",
        "nsenter -t 42 -m -- umount -l -- /v",
        "cat /proc/42/stack",
        "kubectl delete pod -n default -- node-debugger-x",
        "",
    ] {
        assert_eq!(in_node_namespace(anywhere), anywhere);
    }
    // What the pasting shell would do itself happens in the namespace: a
    // wait joined to an rmdir, a write into a cgroup's file; a kill stays
    // out, where the pids it names are the node's.
    assert_eq!(
        in_node_namespace("kill -9 42 && sleep 1 && rmdir -- /sys/fs/cgroup/x/y"),
        "kill -9 42 && nsenter -t 1 -m -- sh -c 'sleep 1 && rmdir -- /sys/fs/cgroup/x/y'"
    );
    assert_eq!(
        in_node_namespace("echo 1 > /sys/fs/cgroup/x/cgroup.kill"),
        "nsenter -t 1 -m -- sh -c 'echo 1 > /sys/fs/cgroup/x/cgroup.kill'"
    );
    // A hostile name inside a joined fix: sh -c gets the fix back byte for byte.
    let fix = one_after_another([unmount(b"/v/it's;x"), remove_dirs([b"/v/$(touch pwned)\n"])]);
    let wrapped = in_node_namespace(&fix);
    let arg = wrapped.strip_prefix("nsenter -t 1 -m -- sh -c ").expect(&wrapped);
    let out = std::process::Command::new("sh").arg("-c").arg(format!("printf '%s' {arg}")).output().unwrap();
    assert_eq!(String::from_utf8(out.stdout).unwrap(), fix);
}

#[test]
fn a_fix_from_a_container_says_where_it_acts() {
    use crate::diagnose::{Finding, Kind, Severity};
    let mut f = Finding::new(Kind::MountHeld, "/v", Severity::Critical, std::time::SystemTime::UNIX_EPOCH);
    f.fix = "umount -- /v".into();
    from_a_container(&mut f);
    assert_eq!(f.fix, "nsenter -t 1 -m -- umount -- /v");
    assert!(
        f.advice.iter().any(|a| a.contains("podstuck runs in a container") && a.contains("on the node")),
        "{:?}",
        f.advice
    );
    f.fix = "kill 42".into();
    let advice = f.advice.len();
    from_a_container(&mut f);
    assert_eq!((f.fix.as_str(), f.advice.len()), ("kill 42", advice));
}

#[test]
fn paths_become_one_exact_shell_word() {
    // A `~` inside a word with no `=` is itself in every shell (bash
    // expands it after `=` or `:` only in a word that looks like an
    // assignment): kubelet's volume paths stay bare, as users paste them.
    assert_eq!(
        word(b"/var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/pv-1/mount"),
        "/var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/pv-1/mount"
    );
    assert_eq!(word(b"x:~/y"), "x:~/y");
    assert_eq!(word(b"/v/a=b~c"), "'/v/a=b~c'");
    assert_eq!(word(b"/var/lib/kubelet/pods/x/volumes/pv-1/mount"), "/var/lib/kubelet/pods/x/volumes/pv-1/mount");
    assert_eq!(word(b"/tmp/a b"), "'/tmp/a b'");
    assert_eq!(word(b"/tmp/it's"), r"'/tmp/it'\''s'");
    assert_eq!(word(b"/tmp/$HOME;rm"), "'/tmp/$HOME;rm'");
    assert_eq!(word(b"/tmp/\xff\n'!"), r#""$(printf '%b' '/tmp/\0377\0012\0047\0041')""#);
    assert_eq!(word(b""), "''");
    assert!(!word(b"/x\x1b]0;owned\x07").contains('\x1b'), "no control byte reaches the terminal");
    // A word a tool or a shell would read as more than a name.
    assert_eq!(word(b"-rf"), "'-rf'");
    assert_eq!(word(b"--all"), "'--all'");
    assert_eq!(word(b"~root"), "'~root'");
    assert_eq!(word(b"a=~/x"), "'a=~/x'");
    assert_eq!(word(b"=ls"), "'=ls'");
    assert_eq!(word(b"a-b=c:d"), "a-b=c:d");
}

#[test]
fn every_command_puts_its_operands_after_dashes_or_checks_them() {
    let csi = b"/var/lib/kubelet/pods/x/volumes/kubernetes.io~csi/pv-1/mount";
    assert_eq!(unmount(b"/v"), "umount -- /v");
    assert_eq!(unmount_lazily(b"-l"), "umount -l -- '-l'");
    assert_eq!(unmount_forced(csi), format!("umount -f -l -- {}", word(csi)));
    assert_eq!(remove_dirs([&b"/a"[..], b"/b c"]), "rmdir -- /a '/b c'");
    assert_eq!(remove_file(b"/v/-rf"), "rm -- /v/-rf");
    assert_eq!(remove_entries([b"/v/x"]), "rm -r --one-file-system -- /v/x");
    assert_eq!(empty_dir(b"/v").as_deref(), Some("find /v -xdev -mindepth 1 -delete"));
    assert_eq!(empty_dir(b"-delete"), None, "find reads it as its expression, -- or not");
    assert_eq!(list(b"/v"), "ls -la -- /v");
    assert_eq!(find_mount(b"/v"), "findmnt -- /v");
    assert_eq!(clear_flags(true, true, b"+i"), "chattr -i -a -- +i");
    assert_eq!(clear_flags(false, true, b"/f"), "chattr -a -- /f");
    assert_eq!(show_flags(b"/f"), "lsattr -d -- /f");
    assert_eq!(remount("bind,rw", b"/m").as_deref(), Some("mount -o remount,bind,rw -- /m"));
    assert_eq!(remount("rw", b"-a"), None, "busybox's mount reads -a past a --");
    assert_eq!(space_used(b"/m"), "df -h -i -- /m && du -xh -d 2 -- /m | sort -h | tail -n 20");
    assert_eq!(show_file(&file_in(b"/sys/fs/cgroup/x", "cgroup.procs")), "cat -- /sys/fs/cgroup/x/cgroup.procs");
    assert_eq!(write_file("1", b"/sys/fs/cgroup/x/cgroup.kill"), "echo 1 > /sys/fs/cgroup/x/cgroup.kill");
    assert_eq!(
        in_docker_container("kind-control-plane", "umount -- /v").as_deref(),
        Some("docker exec -- kind-control-plane sh -c 'umount -- /v'")
    );
    assert_eq!(in_docker_container("-e", "umount -- /v"), None);
    let id = "5f1e0c1ab0e24b8c9d0e1f2a3b4c5d6e7f8091a2b3c4d5e6f708192a3b4c5d6e";
    assert_eq!(remove_sandbox(id), Some(format!("crictl rmp --force -- {id}")));
    for not_an_id in ["--all", "-a", "5f1e", "", &id.to_uppercase(), &format!("{id} --all")] {
        assert_eq!(remove_sandbox(not_an_id), None, "{not_an_id}");
    }
    assert!(no_sandbox_removal("--all").contains("'--all' is not a runtime's id"), "{}", no_sandbox_removal("--all"));
    assert_eq!(runtime_log("--all"), "journalctl -u containerd -u crio --since -15min --grep=--all");
    assert_eq!(runtime_log("$(x)"), "journalctl -u containerd -u crio --since -15min --grep='$(x)'");
    assert_eq!(files_naming("-v", "/var/lib/cni/networks"), "grep -rlF -- '-v' /var/lib/cni/networks");
    assert_eq!(drain("node-1"), "kubectl drain --ignore-daemonsets --delete-emptydir-data -- node-1");
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
    b"-rf",
    b"--all",
    b"~",
    b"~root/x",
    b"a=~/x",
    b"x=a:~/y",
    b"=ls",
    b"/v/back\\slash\\0101 and %s %b %%",
    b"/v/it's \"quoted\"",
    b"/v/trailing newline\n",
    b"/v/\n\n",
    b"/v/tab\there \r cr",
    b"/v/\xe2\x80\xae reversed",
    b"/v/*?[a]~{x,y}",
    b"/v/!! !$ ^x^y",
];

/// `dir` and everything below it, as paths relative to it.
fn listing(dir: &Path) -> BTreeSet<Vec<u8>> {
    use std::os::unix::ffi::OsStrExt;
    let mut found = BTreeSet::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            found.insert(path.strip_prefix(dir).unwrap().as_os_str().as_bytes().to_vec());
            if path.is_dir() && !path.is_symlink() {
                stack.push(path);
            }
        }
    }
    found
}

fn argv(words: &[&[u8]]) -> Vec<Vec<u8>> {
    words.iter().map(|w| w.to_vec()).collect()
}

#[test]
fn every_shell_reads_each_hostile_name_as_one_exact_argument_and_runs_nothing_else() {
    let dir = TempDir::new("quoting");
    let fixes: Vec<String> = HOSTILE.iter().map(|name| format!("umount {}", word(name))).collect();
    for (n, shell) in pasted::shells().iter().enumerate() {
        let (cwd, logs) = (dir.0.join(format!("cwd-{n}")), dir.0.join(format!("logs-{n}")));
        std::fs::create_dir_all(&cwd).unwrap();
        std::fs::create_dir_all(&logs).unwrap();
        let ran = pasted::run(shell, &cwd, &logs, &fixes).unwrap_or_else(|e| panic!("{e}"));
        for (name, got) in HOSTILE.iter().zip(ran) {
            assert_eq!(
                got,
                calls(vec![argv(&[b"umount", name])]),
                "{shell:?} read {:?}",
                String::from_utf8_lossy(name)
            );
        }
        assert!(listing(&cwd).is_empty(), "{shell:?} ran something else: {:?}", listing(&cwd));
    }
}

/// What a hostile name is made of: what starts an option, a tilde, an
/// assignment; quotes, expansions, separators, globs, braces, history
/// marks; line breaks, controls, bytes that are not UTF-8.
const PIECES: &[&[u8]] = &[
    b"-",
    b"--",
    b"-rf",
    b"--all",
    b"-a",
    b"~",
    b"~root/",
    b"=",
    b"a=~/x",
    b"x:~",
    b"=ls",
    b"$(touch pwned)",
    b"`touch pwned`",
    b"$HOME",
    b"${IFS}",
    b"'",
    b"\"",
    b"\\",
    b"\n",
    b" ",
    b"\t",
    b"*",
    b"?",
    b"[a]",
    b"{a,b}",
    b"!",
    b"!!",
    b"#",
    b";",
    b"&",
    b"|",
    b">",
    b"<",
    b"(",
    b")",
    b"%",
    b"^",
    b"\\0101",
    b"%s%b",
    b"\xe2\x80\xae",
    b"\x1b[2J",
    b"\r",
    b"/",
    b"..",
    b"\xff",
    b"\xc3\xa9",
];

/// What a hostile name starts with most often.
const FIRSTS: &[&[u8]] = &[b"-", b"--", b"~", b"=", b"'", b"\"", b"$(", b"`", b"\n", b" ", b"*", b"\xff"];

/// Bytes as a workload may choose them (never NUL: no name holds one),
/// biased towards the pieces above, often first.
fn hostile() -> impl Strategy<Value = Vec<u8>> {
    let piece = prop_oneof![
        5 => proptest::sample::select(PIECES).prop_map(<[u8]>::to_vec),
        3 => "[a-z0-9/._-]{1,6}".prop_map(String::into_bytes),
        2 => proptest::collection::vec(1u8..=255, 1..4),
        1 => proptest::collection::vec(0x80u8..=0xff, 1..3),
    ];
    let first = prop_oneof![
        3 => proptest::sample::select(FIRSTS).prop_map(<[u8]>::to_vec),
        2 => Just(Vec::new()),
    ];
    (first, proptest::collection::vec(piece, 0..5)).prop_map(|(mut first, rest)| {
        first.extend(rest.concat());
        first
    })
}

/// One directory name of hostile bytes (no `/`, not `.` or `..`, short
/// enough for any filesystem), for the fixes that write into a file.
fn hostile_dir_name() -> impl Strategy<Value = Vec<u8>> {
    hostile().prop_map(|mut name| {
        name.iter_mut().filter(|b| **b == b'/').for_each(|b| *b = b'_');
        name.truncate(200);
        if name.is_empty() || name == b"." || name == b".." {
            name.insert(0, b'd');
        }
        name
    })
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A fix, the calls it means, and the files it means to write (relative
/// to where it is pasted).
struct Case {
    what: &'static str,
    fix: String,
    calls: Calls,
}

impl Case {
    fn new(what: &'static str, fix: impl Into<String>, argvs: Vec<Vec<Vec<u8>>>) -> Case {
        Case { what, fix: fix.into(), calls: calls(argvs) }
    }

    /// `fix` entered into a namespace: nsenter's argv, then, for a fix
    /// that went as one `sh -c` word, the fix's own calls run inside.
    fn entered(what: &'static str, pid: &str, fix: &str, inside: Vec<Vec<Vec<u8>>>) -> Case {
        // The start check before another pid's nsenter reads /proc, which
        // the stand-ins' shell has none of: its own test checks it.
        let entered =
            if pid == "1" { in_node_namespace(fix) } else { entering(&format!("nsenter -t {pid} -m --"), fix) };
        let nsenter = argv(&[b"nsenter", b"-t", pid.as_bytes(), b"-m", b"--"]);
        let mut argvs = Vec::new();
        if entered.starts_with(&format!("nsenter -t {pid} -m -- sh -c ")) {
            argvs.push([nsenter, argv(&[b"sh", b"-c", fix.as_bytes()])].concat());
            argvs.extend(inside);
        } else {
            let [lone] = <[Vec<Vec<u8>>; 1]>::try_from(inside).expect("a lone command");
            argvs.push([nsenter, lone].concat());
        }
        Case::new(what, entered, argvs)
    }
}

/// Every command a fix prints from names, and what it must mean.
#[allow(clippy::too_many_arguments, reason = "one name of each kind a fix takes")]
fn cases(p: &[u8], q: &[u8], abs: &[u8], id: &str, docker: &str, node: &str, dir: &[u8]) -> Vec<Case> {
    let mut cases = path_cases(p, q, dir);
    cases.extend(name_cases(p, q, id, docker, node));
    cases.extend(checked_cases(p, abs, id, docker));
    cases
}

/// The commands on paths, alone, joined and entering a namespace.
fn path_cases(p: &[u8], q: &[u8], dir: &[u8]) -> Vec<Case> {
    let (pid, kill, freeze) = ("4242", file_in(dir, "cgroup.kill"), file_in(dir, "cgroup.freeze"));
    vec![
        Case::new("unmount", unmount(p), vec![argv(&[b"umount", b"--", p])]),
        Case::new("unmount_lazily", unmount_lazily(p), vec![argv(&[b"umount", b"-l", b"--", p])]),
        Case::new("unmount_forced", unmount_forced(p), vec![argv(&[b"umount", b"-f", b"-l", b"--", p])]),
        Case::new(
            "one_after_another",
            one_after_another([unmount(p), unmount_lazily(q)]),
            vec![argv(&[b"umount", b"--", p]), argv(&[b"umount", b"-l", b"--", q])],
        ),
        Case::new("remove_dirs", remove_dirs([p, q]), vec![argv(&[b"rmdir", b"--", p, q])]),
        Case::new("remove_file", remove_file(p), vec![argv(&[b"rm", b"--", p])]),
        Case::new(
            "remove_entries",
            remove_entries([p, q]),
            vec![argv(&[b"rm", b"-r", b"--one-file-system", b"--", p, q])],
        ),
        Case::new("list", list(p), vec![argv(&[b"ls", b"-la", b"--", p])]),
        Case::new("find_mount", find_mount(p), vec![argv(&[b"findmnt", b"--", p])]),
        Case::new("clear_flags", clear_flags(true, true, p), vec![argv(&[b"chattr", b"-i", b"-a", b"--", p])]),
        Case::new("show_flags", show_flags(p), vec![argv(&[b"lsattr", b"-d", b"--", p])]),
        Case::new(
            "space_used",
            space_used(p),
            vec![
                argv(&[b"df", b"-h", b"-i", b"--", p]),
                argv(&[b"du", b"-xh", b"-d", b"2", b"--", p]),
                argv(&[b"sort", b"-h"]),
                argv(&[b"tail", b"-n", b"20"]),
            ],
        ),
        Case::new("free_space", free_space(p), vec![argv(&[b"df", b"-h", b"-i", b"--", p])]),
        Case::new("show_file", show_file(p), vec![argv(&[b"cat", b"--", p])]),
        Case::new("write_file", write_file("1", &kill), vec![argv(&[b"echo", b"1"])]),
        Case::entered(
            "in_mount_namespace_of, joined",
            pid,
            &one_after_another([unmount(p), remove_dirs([q])]),
            vec![argv(&[b"umount", b"--", p]), argv(&[b"rmdir", b"--", q])],
        ),
        Case::entered(
            "in_mount_namespace_of, lone",
            pid,
            &unmount_lazily(p),
            vec![argv(&[b"umount", b"-l", b"--", p])],
        ),
        Case::entered("in_node_namespace, a write", "1", &write_file("0", &freeze), vec![argv(&[b"echo", b"0"])]),
    ]
}

/// The commands on ids and names: a sandbox's, a node's, a pod's.
fn name_cases(p: &[u8], q: &[u8], id: &str, docker: &str, node: &str) -> Vec<Case> {
    vec![
        Case::new(
            "runtime_log",
            runtime_log(id),
            vec![[
                argv(&[b"journalctl", b"-u", b"containerd", b"-u", b"crio", b"--since", b"-15min"]),
                vec![[&b"--grep="[..], id.as_bytes()].concat()],
            ]
            .concat()],
        ),
        Case::new(
            "files_naming",
            files_naming(id, "/var/lib/cni/networks"),
            vec![argv(&[b"grep", b"-rlF", b"--", id.as_bytes(), b"/var/lib/cni/networks"])],
        ),
        Case::new(
            "drain",
            drain(node),
            vec![argv(&[
                b"kubectl",
                b"drain",
                b"--ignore-daemonsets",
                b"--delete-emptydir-data",
                b"--",
                node.as_bytes(),
            ])],
        ),
        Case::new(
            "Owner::delete_pod",
            crate::identify::owner::Owner {
                pod_name: Some(docker.to_string()),
                pod_namespace: Some(node.to_string()),
                ..Default::default()
            }
            .delete_pod()
            .unwrap(),
            vec![argv(&[b"kubectl", b"delete", b"pod", b"-n", node.as_bytes(), b"--", docker.as_bytes()])],
        ),
        Case::new(
            "CommandLine",
            CommandLine::new("kubectl -n").value(p).own("delete pod").option_value("--selector=", q).operands([id]),
            vec![[
                argv(&[b"kubectl", b"-n", p, b"delete", b"pod"]),
                vec![[&b"--selector="[..], q].concat()],
                argv(&[b"--", id.as_bytes()]),
            ]
            .concat()],
        ),
    ]
}

/// The commands that check their operand instead of a `--`: printed
/// exactly when the operand is one the tool cannot misread.
fn checked_cases(p: &[u8], abs: &[u8], id: &str, docker: &str) -> Vec<Case> {
    let mut cases = Vec::new();
    let absolute = abs.first() == Some(&b'/');
    let runtime_id = id.len() == 64 && id.bytes().all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
    let docker_name = docker.len() >= 2
        && docker.starts_with(|c: char| c.is_ascii_alphanumeric())
        && docker.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c));
    assert_eq!(empty_dir(abs).is_some(), absolute, "empty_dir of {abs:?}");
    assert_eq!(remount("rw", abs).is_some(), absolute, "remount of {abs:?}");
    assert_eq!(remove_sandbox(id).is_some(), runtime_id, "remove_sandbox of {id:?}");
    let inside = unmount(p);
    assert_eq!(in_docker_container(docker, &inside).is_some(), docker_name, "in_docker_container of {docker:?}");
    if let Some(fix) = empty_dir(abs) {
        cases.push(Case::new("empty_dir", fix, vec![argv(&[b"find", abs, b"-xdev", b"-mindepth", b"1", b"-delete"])]));
    }
    assert_eq!(kill_what_cgroups_hold([abs]).is_some(), absolute, "kill_what_cgroups_hold of {abs:?}");
    if let Some(fix) = kill_what_cgroups_hold([abs, abs]) {
        cases.push(Case::new(
            "kill_what_cgroups_hold",
            fix,
            vec![
                argv(&[b"find", abs, b"-name", b"cgroup.procs", b"-exec", b"cat", b"--", b"{}", b"+"]),
                argv(&[b"sort", b"-u"]),
                argv(&[b"xargs", b"-r", b"kill", b"-9"]),
            ],
        ));
    }
    if let Some(fix) = remount("bind,rw", abs) {
        cases.push(Case::new("remount", fix, vec![argv(&[b"mount", b"-o", b"remount,bind,rw", b"--", abs])]));
    }
    if let Some(fix) = remove_sandbox(id) {
        cases.push(Case::new(
            "remove_sandbox",
            fix,
            vec![argv(&[b"crictl", b"rmp", b"--force", b"--", id.as_bytes()])],
        ));
    }
    if let Some(fix) = in_docker_container(docker, &inside) {
        let exec = argv(&[b"docker", b"exec", b"--", docker.as_bytes(), b"sh", b"-c", inside.as_bytes()]);
        cases.push(Case::new("in_docker_container", fix, vec![exec, argv(&[b"umount", b"--", p])]));
    }
    cases
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    /// Every fix built from names a workload chose, pasted into dash, bash
    /// (as people run it and in POSIX mode) and busybox sh, with stand-ins
    /// for the programs it runs: each shell runs exactly the calls
    /// podstuck meant, `--` and all, writes only the files it meant, and
    /// runs nothing else (PATH leads nowhere, and the shell says nothing).
    #[test]
    fn every_fix_is_read_by_every_shell_as_exactly_the_argv_podstuck_meant(
        p in hostile(),
        q in hostile(),
        abs in prop_oneof![hostile(), hostile().prop_map(|p| [&b"/"[..], &p].concat())],
        id in prop_oneof![hostile().prop_map(|b| text(&b)), "[0-9a-f]{64}"],
        docker in prop_oneof![hostile().prop_map(|b| text(&b)), "[a-zA-Z0-9][a-zA-Z0-9_.-]{1,20}"],
        node in hostile().prop_map(|b| text(&b)),
        dir in hostile_dir_name(),
    ) {
        let cases = cases(&p, &q, &abs, &id, &docker, &node, &dir);
        let fixes: Vec<String> = cases.iter().map(|c| c.fix.clone()).collect();
        let scratch = TempDir::new("fixes");
        let expected_files: BTreeSet<Vec<u8>> =
            [dir.clone(), file_in(&dir, "cgroup.kill"), file_in(&dir, "cgroup.freeze")].into_iter().collect();
        for (n, shell) in pasted::shells().iter().enumerate() {
            let (cwd, logs) = (scratch.0.join(format!("cwd-{n}")), scratch.0.join(format!("logs-{n}")));
            std::fs::create_dir_all(&logs).unwrap();
            std::fs::create_dir_all(cwd.join(std::ffi::OsStr::from_bytes(&dir))).unwrap();
            let ran = pasted::run(shell, &cwd, &logs, &fixes).map_err(TestCaseError::fail)?;
            for (case, got) in cases.iter().zip(ran) {
                prop_assert!(
                    got == case.calls,
                    "{:?} read {} ({}) as\n{}\nnot\n{}",
                    shell,
                    case.what,
                    case.fix,
                    shown(&got),
                    shown(&case.calls)
                );
            }
            let written = listing(&cwd);
            let names = |files: &BTreeSet<Vec<u8>>| files.iter().map(|f| f.escape_ascii().to_string()).collect::<Vec<_>>();
            prop_assert!(written == expected_files, "{:?} wrote {:?}, not {:?}", shell, names(&written), names(&expected_files));
        }
    }
}

#[test]
fn the_stand_ins_catch_a_fix_that_means_something_else() {
    // The harness itself: an unquoted name, an escaped substitution, a
    // missing `--` are each seen.
    let dir = TempDir::new("stand-ins");
    let shell = &pasted::shells()[0];
    let (cwd, logs) = (dir.0.join("cwd"), dir.0.join("logs"));
    std::fs::create_dir_all(&cwd).unwrap();
    std::fs::create_dir_all(&logs).unwrap();
    let ran = pasted::run(shell, &cwd, &logs, &["umount /a b".to_string(), "umount -- '-x'".to_string()]).unwrap();
    assert_ne!(ran[0], calls(vec![argv(&[b"umount", b"/a b"])]));
    assert_eq!(ran[1], calls(vec![argv(&[b"umount", b"--", b"-x"])]));
    let said = pasted::run(shell, &cwd, &logs, &["umount /$(touch pwned)".to_string()]).unwrap_err();
    assert!(said.contains("touch"), "{said}");
}

#[test]
fn a_kill_fix_signals_only_the_process_podstuck_saw() {
    use crate::event::ProcessStart;
    use std::os::unix::process::ExitStatusExt;
    use std::process::Command;
    let start = |pid: u32| crate::identify::process::process_start(Path::new("/proc"), pid);
    // A process with a name a workload might choose: spaces and ") ".
    let dir = TempDir::new("killfix");
    let named = dir.0.join("a b) c");
    std::fs::copy("/bin/sleep", &named).unwrap();
    let mut child = Command::new(&named).arg("60").spawn().unwrap();
    let pid = child.id();
    podstuck_tests::poll_until("the child's stat names its exec", std::time::Duration::from_secs(10), || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).ok().filter(|s| s.contains("(a b) c)"))
    });
    let fix = kill_if_same("KILL", pid, start(pid)).unwrap();
    assert!(fix.starts_with(SAME_PROCESS), "{fix}");
    assert_eq!(in_node_namespace(&fix), fix, "acts the same from any mount namespace");
    // Another start: the pid names another process, nothing is signalled.
    let other = kill_if_same("KILL", pid, Some(ProcessStart(start(pid).unwrap().ticks() + 1))).unwrap();
    let status = Command::new("sh").arg("-c").arg(&other).status().unwrap();
    assert!(!status.success(), "{other}");
    assert!(child.try_wait().unwrap().is_none(), "still running");
    // Its own start: killed.
    assert!(Command::new("sh").arg("-c").arg(&fix).status().unwrap().success(), "{fix}");
    assert_eq!(child.wait().unwrap().signal(), Some(9));
    assert_eq!(kill_if_same("KILL", pid, None), None, "no start, no kill fix");
}

/// What the pid rule itself reads: a kill or an nsenter of a pid with no
/// start check of that very pid before it, in the same text.
#[test]
fn a_pid_signalled_or_entered_without_its_start_check_is_found() {
    assert_eq!(unchecked_pids("kill -9 42 43"), vec![42, 43]);
    assert_eq!(unchecked_pids("or continue it: kill -CONT 900"), vec![900]);
    assert_eq!(unchecked_pids("nsenter -t 812 -m -- umount -- /x"), vec![812]);
    assert_eq!(unchecked_pids("kill 7 && echo done"), vec![7]);
    // PID 1 is the node's init, never reused while the node runs.
    assert!(unchecked_pids("nsenter -t 1 -m -- umount -- /x").is_empty());
    // Another pid's check is no check of this one.
    let start = Some(crate::event::ProcessStart(5));
    let other = kill_if_same("TERM", 41, start).unwrap();
    assert_eq!(unchecked_pids(&format!("{other} && kill -9 42")), vec![42]);
    assert!(unchecked_pids(&kill_if_same("TERM", 42, start).unwrap()).is_empty());
    // Words about a pid are no command.
    assert!(unchecked_pids("stop pid 42 once `ps -p 42 -o lstart,comm` shows it is still that process").is_empty());
    assert!(unchecked_pids("find /sys/fs/cgroup/x -name cgroup.procs -exec cat -- {} + | xargs -r kill -9").is_empty());
}

/// One step of a fix, as any builder makes it, with the pids in it.
fn any_step() -> impl Strategy<Value = String> {
    let start = (1u64..u64::MAX).prop_map(|s| Some(crate::event::ProcessStart(s)));
    let path = proptest::collection::vec(any::<u8>(), 1..24).prop_map(|mut p| {
        p.insert(0, b'/');
        p
    });
    prop_oneof![
        (2u32..u32::MAX, start.clone(), prop_oneof![Just("TERM"), Just("9"), Just("STOP"), Just("CONT")])
            .prop_map(|(pid, start, sig)| kill_if_same(sig, pid, start).unwrap()),
        path.clone().prop_map(|p| unmount_lazily(&p)),
        path.clone().prop_map(|p| remove_dirs([p])),
        path.clone().prop_map(|p| kill_what_cgroups_hold([p]).unwrap()),
        path.clone().prop_map(|p| write_file("1", &p)),
        Just(IN_NODE_NAMESPACE.to_string() + " umount -- /v"),
    ]
}

proptest! {
    /// Every fix the builders make, alone, joined, entered into another
    /// namespace (by a checked nsenter) or the node's, and as said from a
    /// container: no pid in it goes unchecked.
    #[test]
    fn no_fix_any_builder_makes_names_a_pid_it_does_not_check(
        steps in proptest::collection::vec(any_step(), 1..5),
        member in 2u32..u32::MAX,
        start in 1u64..u64::MAX,
    ) {
        let fix = one_after_another(steps);
        prop_assert!(unchecked_pids(&fix).is_empty(), "{}", fix);
        let entered = in_mount_namespace_of(member, Some(crate::event::ProcessStart(start)), &fix).unwrap();
        prop_assert!(unchecked_pids(&entered).is_empty(), "{}", entered);
        prop_assert!(unchecked_pids(&in_node_namespace(&fix)).is_empty());
        prop_assert!(unchecked_pids(&in_node_namespace(&entered)).is_empty());
        // Without a start there is no nsenter to print at all.
        prop_assert!(in_mount_namespace_of(member, None, &fix).is_none());
        prop_assert!(kill_if_same("TERM", member, None).is_none());
    }

    /// A fix is split into its steps at its top-level `&&` only: a quoted
    /// name holding `&&`, quotes or `$(` is one step's word.
    #[test]
    fn a_fix_splits_into_the_steps_it_was_joined_from(
        names in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..16), 1..4),
    ) {
        let steps: Vec<String> = names
            .iter()
            .map(|n| {
                let mut p = b"/v/".to_vec();
                p.extend(n);
                unmount(&p)
            })
            .collect();
        let fix = one_after_another(steps.clone());
        let split: Vec<String> = steps_of(&fix).into_iter().map(str::to_string).collect();
        prop_assert_eq!(split, steps);
    }
}
