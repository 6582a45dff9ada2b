//! Test-only helpers shared by the unit tests of several modules.

use std::path::PathBuf;

pub use podstuck_tests::prerequisite::{missing, this_test};

/// Whether this test runs as root, which the tests of the live node need:
/// without it the test fails, unless skips are allowed (then false).
pub fn is_root() -> bool {
    podstuck_tests::prerequisite::root(&this_test(), "to read the live node's state")
}

/// A fresh directory under the system temp dir, removed when dropped (also
/// when a test fails).
pub struct TempDir(pub PathBuf);

impl TempDir {
    pub fn new(name: &str) -> TempDir {
        use std::sync::atomic::{AtomicUsize, Ordering};
        static NEXT: AtomicUsize = AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("podstuck-test-{name}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        TempDir(dir)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Printed fixes pasted into real shells: every POSIX shell a node offers
/// reads a fix as the same commands, each with exactly the argv podstuck
/// meant, and runs nothing else.
pub mod pasted {
    use std::collections::BTreeMap;
    use std::path::Path;
    use std::process::Command;

    /// The programs fixes run, each replaced by a stand-in that records its
    /// argv: a shell function, which comes before any builtin of that name
    /// (echo, kill) and any file on PATH. `printf` is left as it is: the
    /// quoting's own `"$(printf '%b' ...)"` needs the real one.
    pub const PROGRAMS: &[&str] = &[
        "umount",
        "mount",
        "rmdir",
        "rm",
        "ls",
        "find",
        "findmnt",
        "chattr",
        "lsattr",
        "df",
        "du",
        "sort",
        "tail",
        "cat",
        "echo",
        "kill",
        "sleep",
        "nsenter",
        "docker",
        "crictl",
        "journalctl",
        "grep",
        "xargs",
        "kubectl",
        "podstuck",
    ];

    /// What one fix did: each program's calls in order, each an argv with
    /// the program's name first. Programs are apart because a pipeline's
    /// commands run at once, in no order between them.
    pub type Calls = BTreeMap<String, Vec<Vec<Vec<u8>>>>;

    /// `argvs` as [`Calls`]: grouped by program, each program's in order.
    pub fn calls(argvs: Vec<Vec<Vec<u8>>>) -> Calls {
        let mut calls = Calls::new();
        for argv in argvs {
            calls.entry(String::from_utf8_lossy(&argv[0]).into_owned()).or_default().push(argv);
        }
        calls
    }

    /// Calls as text to read in a failure: each argv on a line, each word
    /// in brackets, its bytes escaped.
    pub fn shown(calls: &Calls) -> String {
        let line = |argv: &Vec<Vec<u8>>| argv.iter().map(|w| format!("[{}]", w.escape_ascii())).collect::<String>();
        calls.values().flatten().map(line).collect::<Vec<_>>().join("\n")
    }

    /// The shells fixes are pasted into: dash (Debian's /bin/sh), bash as
    /// people run it and in POSIX mode, busybox sh. A missing one fails the
    /// test saying what to install, unless skips are allowed (`cargo xtask
    /// test` installs busybox-static; dash and bash are Debian's own).
    pub fn shells() -> Vec<Vec<&'static str>> {
        let mut found = Vec::new();
        for shell in [vec!["dash"], vec!["bash"], vec!["bash", "--posix"], vec!["busybox", "sh"]] {
            let there =
                Command::new(shell[0]).args(&shell[1..]).args(["-c", "true"]).status().is_ok_and(|s| s.success());
            if there {
                found.push(shell);
            } else {
                super::missing::<()>(
                    &super::this_test(),
                    &format!("the shell {}, which fixes are pasted into", shell.join(" ")),
                    "apt-get install dash bash busybox-static, or run `cargo xtask test`, which does",
                );
            }
        }
        found
    }

    /// Runs `fixes`, one after the other, in `shell` with its working
    /// directory `cwd`, every one of [`PROGRAMS`] a stand-in and PATH leading
    /// nowhere, so that nothing but the stand-ins and the shell's builtins
    /// can run. A stand-in for nsenter or docker whose argv ends in `sh -c
    /// SCRIPT` runs SCRIPT too, as the shell inside would. `logs` holds the
    /// records (apart from `cwd`, so a glob that escaped its quotes sees
    /// none of them). Returns each fix's calls, or what the shell said on
    /// stderr or its exit status.
    pub fn run(shell: &[&str], cwd: &Path, logs: &Path, fixes: &[String]) -> Result<Vec<Calls>, String> {
        let logs_text = logs.to_str().expect("a temp dir named in UTF-8");
        assert!(!logs_text.contains('\''), "{logs_text}");
        let mut script = String::from(
            "__record() { { printf '%s\\000' \"$#\"; for __a in \"$@\"; do printf '%s\\000' \"$__a\"; done; } >> \"$__log.$1\"; }\n\
             __inner() { while [ $# -gt 2 ]; do shift; done; if [ \"$1\" = -c ]; then ( eval \"$2\" ); fi; }\n",
        );
        for program in PROGRAMS {
            let inner = if matches!(*program, "nsenter" | "docker") { " __inner \"$@\";" } else { "" };
            script.push_str(&format!("{program}() {{ __record {program} \"$@\";{inner} }}\n"));
        }
        script.push_str("PATH=/nonexistent/podstuck-stand-ins-only\n");
        for (i, fix) in fixes.iter().enumerate() {
            script.push_str(&format!("__log='{logs_text}/{i}'\n{fix}\n"));
        }
        let out = Command::new(shell[0])
            .args(&shell[1..])
            .arg("-c")
            .arg(&script)
            .current_dir(cwd)
            .env_clear()
            // The PATH the shell is found on; the script leaves it at once.
            .env("PATH", std::env::var_os("PATH").unwrap_or_default())
            .env("HOME", "/nonexistent/podstuck-home")
            .env("LANG", "C.UTF-8")
            .output()
            .map_err(|e| format!("{shell:?}: {e}"))?;
        if !out.status.success() || !out.stderr.is_empty() {
            return Err(format!(
                "{shell:?} exited {} and said {:?} running:\n{script}",
                out.status,
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        Ok((0..fixes.len()).map(|i| read_calls(logs, i)).collect())
    }

    /// The calls recorded for fix `i`.
    fn read_calls(logs: &Path, i: usize) -> Calls {
        let mut calls = Calls::new();
        for program in PROGRAMS {
            let Ok(bytes) = std::fs::read(logs.join(format!("{i}.{program}"))) else { continue };
            let mut fields = bytes.split(|b| *b == 0);
            let mut argvs = Vec::new();
            while let Some(count) = fields.next().filter(|c| !c.is_empty()) {
                let n: usize = String::from_utf8_lossy(count).parse().expect("a count");
                argvs.push((0..n).map(|_| fields.next().expect("an argument").to_vec()).collect());
            }
            calls.insert(program.to_string(), argvs);
        }
        calls
    }
}
