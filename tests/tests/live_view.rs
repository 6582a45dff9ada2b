//! End-to-end: `podstuck watch` on a real terminal. tmux gives the real
//! binary a terminal of 200 x 50 (or 80 x 24, the smallest a user is
//! likely to have: there the finding is selected, expanded, and its fix
//! copied with `c` into tmux's paste buffer); the test reproduces P1 (a CSI volume left
//! mounted under a pod, kubelet's removal failing EBUSY on its backoff),
//! reads the screen until the live view shows the finding and its fix,
//! then stops podstuck the way a user would, with `q` or with Ctrl-C (a
//! key, not a signal, in raw mode), and checks what is left on the
//! terminal: the summary to paste into an incident channel, the exit
//! status, a terminal back in its normal modes, and no program loaded.
//! And the same pathology with standard output piped: one line per
//! finding, no line per call.
//!
//! Runs as root; see `kernel_test!` for the skip rule. Each test
//! has its own tmux server, pod UID and scratch directory, so they run side
//! by side; every mount, directory, process and tmux server is removed
//! even when an assertion fails.

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use podstuck_tests::terminal::{child_named, programs_held, Tmux};
use podstuck_tests::*;

/// Loading and attaching the programs (BTF parsing included) on a busy
/// machine with the other tests running.
const VIEW_TIMEOUT: Duration = Duration::from_secs(60);
/// kubelet's second attempt comes 0.5 s after the first; a finding needs
/// the repeat and a look at mountinfo.
const FINDING_TIMEOUT: Duration = Duration::from_secs(30);

/// A shell word for a path of the test's own (no quote in it).
fn quoted(path: &Path) -> String {
    format!("'{}'", text(path))
}

/// P1 made real: a CSI volume left mounted under a fresh pod, in a kubelet
/// root of the test's own.
struct P1 {
    root: KubeletRoot,
    pod: Pod,
    /// The volume's directory, which kubelet cannot remove.
    pv: PathBuf,
    /// `<pv>/mount`, still mounted.
    mount: PathBuf,
    _volume: TmpfsMount,
}

impl P1 {
    fn new(scratch: &ScratchDir) -> P1 {
        let root = KubeletRoot::new(scratch.path().join("kubelet"));
        let pod = root.new_pod();
        let pv = pod.create_csi_volume("pvc-live");
        let mount = pv.join("mount");
        // The CSI driver said NodeUnpublish worked and left this mounted.
        let _volume = TmpfsMount::new(&mount, "size=1m");
        P1 { root, pod, pv, mount, _volume }
    }
}

/// kubelet removing the volume's `mount` dir: 4 attempts on its backoff.
fn kubelet_removing(pv: &Path) -> Process {
    Process::spawn(
        actor().args(["--comm", "kubelet", "--backoff-ms", "500", "--repeat", "4", "rmdir-at"]).arg(pv).arg("mount"),
    )
}

/// The counts of the view's header with `--pod`, "calls counted 4  node:
/// 912 calls": the pod's calls and the node's, if the header says both.
fn header_counts(screen: &str) -> Option<(u64, u64)> {
    let rest = &screen[screen.find("calls counted ")? + "calls counted ".len()..];
    let (pod, rest) = rest.split_once("  node: ")?;
    let (node, _) = rest.split_once(" calls")?;
    Some((pod.parse().ok()?, node.parse().ok()?))
}

/// A script for a tmux pane that runs `podstuck watch ARGS` and stays
/// after it, a shell that says podstuck's exit status, then runs `after`.
fn watch_script(scratch: &Path, args: &str, after: &str) -> PathBuf {
    let script = scratch.join("run.sh");
    let podstuck = quoted(&podstuck_binary());
    let stays = "echo \"podstuck exited with status $?\"\n";
    std::fs::write(&script, format!("{podstuck} watch {args}\n{stays}{after}exec sleep 3600\n")).unwrap();
    script
}

/// Where podstuck's standard input comes from.
enum Stdin {
    /// The terminal, as when a user types the command.
    Terminal,
    /// Not a terminal (`< /dev/null`, a wrapper script): keys must still
    /// come, from the controlling terminal.
    Redirected,
}

/// P1 under the live view, stopped with `keys`; `stopped_by` is how the
/// summary must name that.
fn live_view_shows_p1_then_stops_on(test: &KernelTest, stdin: Stdin, keys: &str, stopped_by: &str) {
    let scratch = test.scratch();
    let P1 { root, pod, pv, mount, _volume } = P1::new(&scratch);
    let uid = pod.uid();

    // The shell stays after podstuck, to show its exit status and the
    // terminal modes it left.
    let redirected = match stdin {
        Stdin::Terminal => "",
        Stdin::Redirected => " < /dev/null",
    };
    let script = watch_script(
        scratch.path(),
        &format!("--concurrent --kubelet-root {} --pod {uid}{redirected}", quoted(root.path())),
        "echo \"terminal modes after: $(stty -a | tr ' ;' '\\n\\n' | grep -x -e '-\\?icanon' -e '-\\?echo' | tr '\\n' ' ')\"\n",
    );
    let mut tmux = Tmux::start(scratch.path(), test.name(), &format!("sh {}", quoted(&script)));

    let screen = tmux.wait_for("live view", VIEW_TIMEOUT, |s| s.contains("q or Ctrl-C: stop and print a summary"));
    // The counts come first; a long kubelet root gives way in its middle.
    assert!(screen.contains(&format!("tracing pod {uid}, kubelet root /var/tmp/")), "header:\n{screen}");
    // The pod's calls, none yet, and the node's apart (what the rest of the
    // node does meanwhile, other tests included: any number).
    let counts = header_counts(&screen);
    assert!(
        counts.is_some_and(|(pod, _)| pod == 0),
        "the pod's calls (none yet), the node's apart: {counts:?}\n{screen}"
    );
    assert_eq!(tmux.pane("#{alternate_on}"), "1", "the live view draws on the alternate screen");
    let shell: u32 = tmux.pane("#{pane_pid}").parse().expect("pane pid");
    let podstuck =
        child_named(shell, "podstuck").unwrap_or_else(|| panic!("no podstuck under the pane's shell {shell}"));
    tmux.podstuck = Some(podstuck);
    let programs = programs_held(podstuck);
    // The live view does not say its plan: either plan's count.
    let either = [programs_attached("fentry"), programs_attached("tracepoint")];
    assert!(
        either.contains(&programs.len()),
        "four syscalls, enter and exit each, the lifecycle's three (exec, exit, signal) and kubelet's connects: {programs:?}"
    );

    let kubelet = kubelet_removing(&pv);
    let fix = format!("fix:   umount -- {}", shell_word(&mount));
    let screen = tmux.wait_for("finding with its fix", FINDING_TIMEOUT, |s| {
        s.contains("CRITICAL volume-still-mounted") && s.contains(&fix) && s.contains("confirmed")
    });
    let finding = screen.lines().find(|l| l.contains("CRITICAL volume-still-mounted")).unwrap();
    assert!(finding.contains(&format!("pod {uid}")), "{finding}\n{screen}");
    let cause = screen.lines().find(|l| l.contains("cause:")).unwrap();
    assert!(cause.contains("kubelet cannot remove the CSI volume dir"), "{cause}");
    let series = screen.lines().find(|l| l.contains(uid) && l.contains("unlinkat") && l.contains("kubelet"));
    assert!(series.is_some_and(|l| l.contains("EBUSY")), "a busiest series of kubelet's failing removals:\n{screen}");
    let findings_at = screen.find("Findings (1)").expect("findings section");
    assert!(findings_at < screen.find("Busiest series").expect("series section"), "findings come first:\n{screen}");
    let (_, attempts) = kubelet.finish(Duration::from_secs(30));
    let ebusy = format!("rmdir-at errno {}", libc::EBUSY);
    assert!(
        attempts.len() == 4 && attempts.iter().all(|l| *l == ebusy),
        "the fixture: every attempt EBUSY: {attempts:?}"
    );
    // kubelet's 4 calls are the pod's, and the node's too.
    tmux.wait_for("the pod's 4 calls counted, the node's apart", Duration::from_secs(10), |s| {
        header_counts(s).is_some_and(|(pod, node)| pod == 4 && node >= 4)
    });
    eprintln!("the live view with the finding:\n{screen}");
    assert_fits_whole(&screen, 200, text(&mount));

    tmux.keys(keys);
    let after = tmux.wait_for("exit status", Duration::from_secs(30), |s| s.contains("terminal modes after:"));
    eprintln!("the terminal after {keys}:\n{after}");
    assert!(after.contains("podstuck exited with status 0"), "{after}");
    assert!(after.contains("terminal modes after: icanon echo"), "raw mode ended:\n{after}");
    assert_eq!(tmux.pane("#{alternate_on}"), "0", "back on the normal screen");
    assert_eq!(tmux.pane("#{cursor_flag}"), "1", "the cursor is shown again");

    // The summary, as pasted.
    assert!(after.contains(&format!("stopped by {stopped_by}")), "{after}");
    assert!(after.contains("\n1 finding:\n"), "{after}");
    // The finding as a block: head, status, cause, evidence, the fix whole on its own line.
    assert!(
        after
            .contains(&format!("\n[critical] volume-still-mounted  pod {uid}  confirmed\n  status:   active, 4 calls")),
        "{after}"
    );
    assert!(after.contains("\n  cause:    kubelet cannot remove the CSI volume dir"), "{after}");
    assert!(after.contains("\n  evidence: "), "the evidence is in the summary:\n{after}");
    assert!(after.contains(&format!("\n  fix:      umount -- {}\n", shell_word(&mount))), "{after}");
    assert!(
        after.contains(&format!("- unlinkat by kubelet, pod {uid}: 4 calls")) && after.contains("4 failed (EBUSY 4)"),
        "{after}"
    );
    let totals = after.lines().find(|l| l.starts_with("Totals: ")).unwrap_or_else(|| panic!("no totals:\n{after}"));
    assert!(
        totals.contains("events seen")
            && totals.contains(" events lost (ring buffer full)")
            && totals.contains("unlinkat "),
        "{totals}"
    );
    assert!(
        after.find("1 finding:") < after.find("Busiest series")
            && after.find("Busiest series") < after.find("Totals: "),
        "{after}"
    );

    // Nothing left behind in the kernel (freed after an RCU grace period).
    wait_until(&format!("programs {programs:?} to be unloaded once podstuck exited"), Duration::from_secs(10), || {
        !programs.iter().any(|&id| program_loaded(id))
    });
    assert!(is_mountpoint(&mount), "podstuck only reads the node: the volume is still mounted");
}

kernel_test! {
    fn the_live_view_shows_a_stuck_volume_and_q_leaves_a_summary(test) {
        live_view_shows_p1_then_stops_on(&test, Stdin::Terminal, "q", "q");
    }
}

kernel_test! {
    fn ctrl_c_in_the_live_view_leaves_the_same_summary_even_with_stdin_redirected(test) {
        live_view_shows_p1_then_stops_on(&test, Stdin::Redirected, "C-c", "Ctrl-C");
    }
}

/// Words on a screen line that are a piece of `path` without saying they
/// are one (no `…`): what a terminal wrapping inside the path leaves. A
/// whole directory above it (the kubelet root in the header) is no piece.
fn broken_parts<'a>(line: &'a str, path: &str) -> Vec<&'a str> {
    line.split_whitespace()
        .map(|w| w.trim_end_matches([',', ':', '.', '\\']))
        .filter(|w| {
            w.contains('/')
                && !w.contains('…')
                && *w != path
                && path.contains(*w)
                && !path.starts_with(&format!("{w}/"))
        })
        .collect()
}

/// Every row of `screen` fits `width`, and no row holds a broken part of `path`.
fn assert_fits_whole(screen: &str, width: usize, path: &str) {
    for line in screen.lines() {
        assert!(line.chars().count() <= width, "a row wider than {width}:\n{line}\n{screen}");
        let broken = broken_parts(line, path);
        assert!(broken.is_empty(), "a broken part of {path} ({broken:?}) in:\n{screen}");
    }
}

kernel_test! {
    /// The measure: in an 80 x 24 tmux, P1's fix copied whole with
    /// the key, and its evidence one key away.
    fn at_80_columns_a_finding_is_selected_expanded_and_its_fix_copied_whole(test) {
        let scratch = test.scratch();
        let P1 { root, pod, pv, mount, _volume } = P1::new(&scratch);
        let uid = pod.uid();
        let script = watch_script(scratch.path(), &format!("--concurrent --kubelet-root {} --pod {uid}", quoted(root.path())), "");
        let mut tmux = Tmux::start_sized(scratch.path(), test.name(), &format!("sh {}", quoted(&script)), 80, 24);
        tmux.wait_for("live view", VIEW_TIMEOUT, |s| s.contains("q or Ctrl-C: stop and print a summary"));
        let shell: u32 = tmux.pane("#{pane_pid}").parse().expect("pane pid");
        tmux.podstuck = child_named(shell, "podstuck");

        let kubelet = kubelet_removing(&pv);
        let screen = tmux.wait_for("finding", FINDING_TIMEOUT, |s| s.contains("CRITICAL volume-still-mounted") && s.contains("confirmed"));
        let (_, attempts) = kubelet.finish(Duration::from_secs(30));
        assert_eq!(attempts.len(), 4, "{attempts:?}");
        eprintln!("the live view at 80 x 24:\n{screen}");
        let mount_path = text(&mount);
        assert_fits_whole(&screen, 80, mount_path);
        let title = screen.lines().find(|l| l.contains("CRITICAL volume-still-mounted")).unwrap();
        assert!(title.contains(&format!("pod {}", &uid[..8])), "the pod, shortened: {title}");
        assert!(screen.contains("cause: kubelet cannot remove the CSI volume dir"), "{screen}");
        assert!(screen.contains("is still mounted"), "what is wrong is on the screen:\n{screen}");
        let header = screen.lines().find(|l| l.contains("CALL") && l.contains("ACTOR")).expect("the busiest series' header");
        assert!(header.contains("FAILED"), "the errno column stays at 80 columns: {header}");
        assert!(screen.lines().any(|l| l.contains("unlinkat") && l.contains("EBUSY")), "{screen}");

        // Select it (Down then Up: one finding, the selection stays on it), copy.
        tmux.keys("Down");
        tmux.keys("Up");
        assert!(tmux.screen().lines().any(|l| l.starts_with("›CRITICAL volume-still-mounted")), "selected");
        tmux.keys("c");
        let fix = format!("umount -- {mount_path}");
        // Said as done, not as copied: tmux's default set-clipboard drops OSC 52.
        let copied = tmux.wait_for("the copy said", Duration::from_secs(10), |s| s.contains("fix sent as OSC 52 ("));
        assert!(
            copied.contains(&format!("fix sent as OSC 52 ({} bytes): tmux needs set-clipboard on", fix.len())),
            "{copied}"
        );
        assert_eq!(tmux.buffer().as_deref(), Some(fix.as_str()), "tmux's buffer holds the whole fix");

        // Expanded: the evidence and the whole fix; Esc closes.
        tmux.keys("Enter");
        let detail = tmux.wait_for("the detail", Duration::from_secs(10), |s| s.contains("evidence"));
        eprintln!("the finding expanded:\n{detail}");
        // Issue 42: the detail is where the whole text is: rows fit, nothing elided.
        // (The header and the notes below the pane may be cut: they are not the finding's.)
        let pane: Vec<&str> = detail
            .lines()
            .skip_while(|l| !l.contains("(finding 1 of 1;"))
            .take_while(|l| !l.starts_with(" note:") && !l.starts_with(" fix sent") && !l.starts_with(" q or Ctrl-C"))
            .collect();
        assert!(pane.len() > 3, "{detail}");
        for line in detail.lines() {
            assert!(line.chars().count() <= 80, "{line:?} in:\n{detail}");
        }
        for line in pane {
            assert!(!line.contains('…'), "elided: {line:?} in:\n{detail}");
        }
        assert!(detail.contains("volume-still-mounted  (finding 1 of 1;") && detail.contains(&format!(" pod {uid}")), "{detail}");
        let rows: Vec<&str> = detail.lines().map(str::trim_end).collect();
        let evidence = rows.iter().position(|r| *r == " evidence:").unwrap_or_else(|| panic!("no evidence:\n{detail}"));
        assert!(rows[evidence + 1].starts_with("   - trace: kubelet's unlinkat of"), "every piece of evidence:\n{detail}");
        assert!(rows.iter().any(|r| r.starts_with("   - mountinfo:")), "{detail}");
        // The fix read back from the pane: the rows between its heading and
        // the evidence, as a mouse copies them; run at the end.
        let heading = rows.iter().position(|r| r.starts_with(" fix (whole; c copies it")).unwrap_or_else(|| panic!("{detail}"));
        let fix_read = rows[heading + 1..evidence].join("\n");
        assert!(fix_read.contains("\\\n"), "the long path wrapped at 80 columns:\n{fix_read}");
        assert!(rows[heading + 1..evidence].iter().any(|r| r.ends_with('/') || r.ends_with("/\\")), "broken after a /:\n{fix_read}");
        tmux.keys("Escape");
        tmux.wait_for("the list again", Duration::from_secs(10), |s| s.contains("Busiest series"));

        tmux.keys("q");
        let after = tmux.wait_for("exit status", Duration::from_secs(30), |s| s.contains("podstuck exited with status"));
        assert!(after.contains("podstuck exited with status 0"), "{after}");
        assert!(is_mountpoint(&mount), "podstuck only reads the node: the volume is still mounted");
        // The fix as read from the 80-column pane does what it says.
        let ran = Command::new("sh").arg("-c").arg(&fix_read).output().expect("run sh");
        assert!(ran.status.success(), "{fix_read}: {}", String::from_utf8_lossy(&ran.stderr));
        assert!(!is_mountpoint(&mount), "the fix read from the pane unmounted {mount_path}");
    }
}

kernel_test! {
    fn not_a_terminal_gets_a_block_per_finding_and_no_call_lines(test) {
        let scratch = test.scratch();
        let P1 { root, pod, pv, mount, _volume } = P1::new(&scratch);
        let uid = pod.uid();
        // Its banner on stderr says it is attached.
        let podstuck = Attached::spawn(Command::new(podstuck_binary()).args(["watch", "--concurrent", "--duration", "8s", "--kubelet-root", root.arg(), "--pod", uid]));
        let kubelet = kubelet_removing(&pv);
        let (_, attempts) = kubelet.finish(Duration::from_secs(30));
        assert_eq!(attempts.len(), 4, "{attempts:?}");
        let out = podstuck.finish(Duration::from_secs(60));
        let banner = String::from_utf8_lossy(&out.stderr).lines().next().unwrap_or_default().to_string();
        assert!(banner.contains("findings, a block each; Ctrl-C to stop"), "{banner}");
        // The volume is still mounted when --duration ends: exit 3.
        assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
        let stdout = String::from_utf8_lossy(&out.stdout);
        let lines: Vec<&str> = stdout.lines().collect();
        let head = lines.iter().position(|l| l.contains(" FINDING ")).unwrap_or_else(|| panic!("no finding block:\n{stdout}"));
        assert!(lines[head].ends_with(&format!(" FINDING [critical] volume-still-mounted  pod {uid}  confirmed")), "{}", lines[head]);
        let block: Vec<&str> = lines[head + 1..].iter().take_while(|l| !l.is_empty()).copied().collect();
        assert!(block.iter().any(|l| l.starts_with("  cause:    kubelet cannot remove the CSI volume dir")), "{stdout}");
        assert!(block.iter().any(|l| l.starts_with("  evidence: ")), "the evidence is printed:\n{stdout}");
        assert!(block.contains(&format!("  fix:      umount -- {}", text(&mount)).as_str()), "the fix whole on its own line:\n{stdout}");
        // Only findings: each a head line, its indented fields, an empty line after it.
        for line in &lines[..lines.len() - 1] {
            let told = line.contains(" FINDING [") || line.contains(" UPDATE [") || line.contains(" RESOLVED [");
            assert!(told || line.starts_with("  ") || line.is_empty(), "only finding blocks:\n{stdout}");
        }
        assert!(lines.last().unwrap().starts_with("podstuck: ") && lines.last().unwrap().contains("events seen"), "the closing line last:\n{stdout}");
    }
}

kernel_test! {
    /// `--kernel-cost` on a terminal: after the live view gives the terminal
    /// back, each program's cost per call is said, as in every other mode.
    fn the_kernel_cost_report_follows_the_live_view_too(test) {
        let scratch = test.scratch();
        let script = watch_script(scratch.path(), "--concurrent --kernel-cost --duration 4s", "");
        let tmux = Tmux::start(scratch.path(), test.name(), &format!("sh {}", quoted(&script)));
        tmux.wait_for("live view", VIEW_TIMEOUT, |s| s.contains("q or Ctrl-C: stop and print a summary"));
        // Some unlinks to cost something.
        for i in 0..50 {
            let f = scratch.path().join(format!("f{i}"));
            std::fs::write(&f, b"x").unwrap();
            std::fs::remove_file(&f).unwrap();
        }
        let after = tmux.wait_for("exit status", Duration::from_secs(30), |s| s.contains("podstuck exited with status"));
        // The whole node is traced, where other tests leave volumes stuck
        // for a while: 3 (a critical finding active at the end) is a run's
        // verdict too; what matters here is that it traced and ended.
        assert!(after.contains("podstuck exited with status 0") || after.contains("podstuck exited with status 3"), "{after}");
        assert!(after.contains("kernel cost:") && after.contains("unlinkat"), "no kernel cost after the live view:\n{after}");
    }
}
