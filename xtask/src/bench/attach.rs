//! "Attach mechanisms alone": what attaching costs a storm of unlinkat
//! calls, each mechanism's do-nothing pair (`podstuck attach-cost`), and
//! beside them what an exact latency costs on this machine before anything
//! is counted (the pair with the two clock reads; with the per-thread
//! entry carried as podstuck carries it) and podstuck's own programs on
//! the same removal: the storm's kernel-time target follows the machine
//! (the entry variant plus [`COUNTING_ALLOWANCE_NS`]). `--only attach` runs
//! this section (and the start, idle and stop one) alone.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::io::Read;
use std::path::Path;
use std::process::Stdio;

use anyhow::Result;

use super::{
    attach_cost, build_tree, interrupt, median, pct, pod_series, programs_run_time_ns, say, start_podstuck,
    stop_podstuck, volume,
};

pub const HEADING: &str = "## Attach mechanisms alone";

/// What podstuck's counting may add, per call, to the clocks and the
/// entry an exact latency needs (issue 65): a series lookup and its adds.
pub const COUNTING_ALLOWANCE_NS: f64 = 40.0;

/// The mechanisms, in the table's order; `podstuck` is `podstuck watch`.
const MECHANISMS: [&str; 7] =
    ["tracepoint", "tracepoint-clocks", "tracepoint-entry", "podstuck", "raw-tracepoint", "btf-tracepoint", "fentry"];

/// Program time per unlinkat call (ns) of what the notes weigh: the
/// do-nothing pair, the entry variant, podstuck's programs.
#[derive(Clone, Copy, Debug, Default)]
pub struct AttachCosts {
    pub floor_ns: Option<f64>,
    pub entry_ns: Option<f64>,
    pub podstuck_ns: Option<f64>,
}

/// Runs `runs` rounds, the mechanisms' order rotating, on the tmpfs `fs`;
/// the section and its figures.
pub fn section(podstuck: &Path, fs: &Path, runs: usize) -> Result<(String, AttachCosts)> {
    let dirs = 100_000;
    let top = volume(fs);
    let histograms = fs.join("attach-histograms");
    let mut times: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut program_ns: BTreeMap<&str, Vec<f64>> = BTreeMap::new();
    let mut refused: BTreeMap<&str, String> = BTreeMap::new();
    for round in 0..runs {
        build_tree(&top, dirs)?;
        times.entry("untraced").or_default().push(super::remove("rm -rf", &top, podstuck, false)?);
        for mechanism in (0..MECHANISMS.len()).map(|i| MECHANISMS[(i + round) % MECHANISMS.len()]) {
            if refused.contains_key(mechanism) {
                continue;
            }
            let expected = build_tree(&top, dirs)?;
            if mechanism == "podstuck" {
                if histograms.exists() {
                    std::fs::remove_dir_all(&histograms)?;
                }
                let tracer = start_podstuck(podstuck, &fs.join("kubelet"), &histograms)?;
                times.entry(mechanism).or_default().push(super::remove("rm -rf", &top, podstuck, false)?);
                let run = stop_podstuck(tracer, expected, expected, pod_series)?;
                program_ns.entry(mechanism).or_default().push(run.kernel_ns_per_call);
                continue;
            }
            let (mut child, _stderr) = match attach_cost(podstuck, mechanism, &["--kernel-cost"], Stdio::piped())? {
                Ok(attached) => attached,
                Err(said) => {
                    refused.insert(mechanism, said);
                    continue;
                }
            };
            times.entry(mechanism).or_default().push(super::remove("rm -rf", &top, podstuck, false)?);
            interrupt(&child);
            let mut out = String::new();
            child.stdout.take().expect("piped").read_to_string(&mut out)?;
            child.wait()?;
            let v: serde_json::Value = serde_json::from_str(out.trim()).unwrap_or_default();
            let ns = programs_run_time_ns(&v) / v["entries"].as_f64().unwrap_or(1.0).max(1.0);
            program_ns.entry(mechanism).or_default().push(ns);
        }
        say(&format!("attach mechanisms: round {} of {runs}", round + 1));
    }
    let mut ns_of = |m: &str| program_ns.get_mut(m).map(|v| median(v));
    let costs = AttachCosts {
        floor_ns: ns_of("tracepoint"),
        entry_ns: ns_of("tracepoint-entry"),
        podstuck_ns: ns_of("podstuck"),
    };
    let clocks_ns = ns_of("tracepoint-clocks");
    let base = median(times.get_mut("untraced").expect("measured"));
    let mut report = String::new();
    writeln!(report, "{HEADING}\n")?;
    writeln!(report, "`rm -rf` of {dirs} empty directories of the fake pod on tmpfs, {runs} rounds, the order rotating; each mechanism attached by `podstuck attach-cost MECHANISM --kernel-cost`, two programs that only count unlinkat calls (entry, exit). Program time is the kernel's BPF run-time statistics, per unlinkat call, both programs together (the raw and BTF `sys_enter`/`sys_exit` programs also run, and are counted, for every other syscall). Two variants of the tracepoint pair price what an exact latency costs here before anything is counted: `tracepoint-clocks`, each program also reading the clock once, as podstuck's do; `tracepoint-entry`, the clocks and the per-thread entry written at entry and taken back at exit by podstuck's own code for it (its map allocated as podstuck's is on this kernel). `podstuck` is `podstuck watch --json --findings --kernel-cost --histograms DIR --kubelet-root ROOT`, as the storm rows run it, on the same removal.\n")?;
    writeln!(report, "| mechanism | median wall time | slowdown | program time per unlinkat call |")?;
    writeln!(report, "|---|---|---|---|")?;
    writeln!(report, "| untraced | {base:.3} s | | |")?;
    for mechanism in MECHANISMS {
        match (times.get_mut(mechanism), refused.get(mechanism)) {
            (Some(t), _) => {
                let m = median(t);
                let ns = median(program_ns.get_mut(mechanism).map(|v| v.as_mut_slice()).unwrap_or(&mut []));
                writeln!(report, "| {mechanism} | {m:.3} s | {} | {ns:.0} ns |", pct(m / base))?;
            }
            (None, Some(why)) => writeln!(
                report,
                "| {mechanism} | refused by this kernel | | `{}` |",
                why.replace('|', "/").lines().last().unwrap_or_default()
            )?,
            _ => {}
        }
    }
    if let (Some(floor), Some(clocks), Some(entry)) = (costs.floor_ns, clocks_ns, costs.entry_ns) {
        writeln!(
            report,
            "\nOn this machine the two clock reads cost {:.0} ns a call over the do-nothing pair, the entry {:.0} more.",
            clocks - floor,
            entry - clocks
        )?;
    }
    if let Some(line) = target_line(&costs) {
        writeln!(report, "{line}")?;
    }
    Ok((report, costs))
}

/// The storm's kernel-time target as this machine sets it, and podstuck
/// against it.
pub fn target_line(costs: &AttachCosts) -> Option<String> {
    let (entry, podstuck) = (costs.entry_ns?, costs.podstuck_ns?);
    let target = entry + COUNTING_ALLOWANCE_NS;
    let verdict =
        if podstuck <= target { "met".to_string() } else { format!("missed by {:.0} ns a call", podstuck - target) };
    Some(format!(
        "Target: podstuck's programs at most the entry variant plus {COUNTING_ALLOWANCE_NS:.0} ns a call, {target:.0} ns here; they take {podstuck:.0}: {verdict}."
    ))
}

/// `file` with its attach-mechanisms section replaced by `section`, or
/// put where a full run puts it (after the start, idle and stop section).
pub fn with_attach_section(file: &str, section: &str) -> String {
    let next = ["## A ", "## Time to answer", "## fentry, tracepoints", "## Targets not met", "## Soak"];
    crate::report::with_section(file, HEADING, section, &next)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_target_follows_the_entry_variant() {
        let costs = AttachCosts { floor_ns: Some(75.0), entry_ns: Some(180.0), podstuck_ns: Some(215.0) };
        assert_eq!(
            target_line(&costs).unwrap(),
            "Target: podstuck's programs at most the entry variant plus 40 ns a call, 220 ns here; they take 215: met."
        );
        let over = AttachCosts { podstuck_ns: Some(250.0), ..costs };
        assert!(target_line(&over).unwrap().ends_with("missed by 30 ns a call."));
        assert_eq!(target_line(&AttachCosts { entry_ns: None, ..costs }), None);
    }

    #[test]
    fn the_section_is_replaced_alone_or_put_before_the_memory_storm() {
        let new = "## Attach mechanisms alone\n\nnew\n";
        let file = "# b\n\n## Start, idle, stop\n\ns\n\n## Attach mechanisms alone\n\nold\n\n## A 10-call storm\n\nm\n";
        assert_eq!(
            with_attach_section(file, new),
            "# b\n\n## Start, idle, stop\n\ns\n\n## Attach mechanisms alone\n\nnew\n\n## A 10-call storm\n\nm\n"
        );
        let without = "# b\n\n## Start, idle, stop\n\ns\n\n## A 10-call storm\n\nm\n";
        assert_eq!(
            with_attach_section(without, new),
            "# b\n\n## Start, idle, stop\n\ns\n\n## Attach mechanisms alone\n\nnew\n\n## A 10-call storm\n\nm\n"
        );
    }
}
