//! `cargo xtask fuzz`: podstuck's fuzz targets (podstuck-user's
//! `fuzz` module: every byte it reads from outside) run for as long as
//! asked, one after the other, each on both cores' worth of the machine's
//! time it is given. The targets are ordinary tests of the library, so
//! this builds nothing `cargo xtask test` does not: stable Rust, no
//! sanitizers, no nightly (docs/development.md, "Fuzzing", says why).
//! Prints a table of what each target ran and fails on a crash, with the
//! input that crashed it.

use std::io::{BufRead, BufReader};
use std::process::Stdio;

use anyhow::{bail, Context, Result};

use crate::host::{cargo, say};

/// How long, and which.
#[derive(clap::Args, Clone, Debug)]
pub struct FuzzArgs {
    /// Seconds each target runs.
    #[arg(long, default_value_t = 60)]
    pub seconds: u64,
    /// Only this target (call_records, lifecycle_records, record_files,
    /// mountinfo, proc_files, cgroup_files, cni_environment, api_json,
    /// kubeconfig, http_requests).
    #[arg(long)]
    pub target: Option<String>,
    /// The generator's seed (a crash reproduces with the same seed).
    #[arg(long)]
    pub seed: Option<u64>,
}

/// What one target said when it ended.
#[derive(Debug, PartialEq)]
pub struct Ran {
    pub target: String,
    pub inputs: u64,
    pub accepted: u64,
    pub seconds: f64,
    pub crashed: bool,
}

/// Reads a target's closing line: "fuzz target NAME: N inputs (M
/// accepted) in S s, seed X: no crash".
pub fn parse_line(line: &str) -> Option<Ran> {
    let rest = line.strip_prefix("fuzz target ")?;
    let (target, rest) = rest.split_once(": ")?;
    let (inputs, rest) = rest.split_once(" inputs (")?;
    let (accepted, rest) = rest.split_once(" accepted) in ")?;
    let (seconds, rest) = rest.split_once(" s, seed ")?;
    Some(Ran {
        target: target.to_string(),
        inputs: inputs.parse().ok()?,
        accepted: accepted.parse().ok()?,
        seconds: seconds.parse().ok()?,
        crashed: !rest.ends_with(": no crash"),
    })
}

pub fn fuzz(args: &FuzzArgs) -> Result<()> {
    let filter = match &args.target {
        Some(name) => format!("fuzz::targets::fuzz_{name}"),
        None => "fuzz::targets::fuzz_".to_string(),
    };
    say(&format!(
        "fuzz: {} for {} s each (the same tests cargo xtask test runs for a second and a half)",
        args.target.as_deref().unwrap_or("every target"),
        args.seconds
    ));
    let mut test = cargo();
    test.args(["test", "--package", "podstuck-user", "--lib", "--", &filter, "--nocapture", "--test-threads", "1"])
        .env("PODSTUCK_FUZZ_SECONDS", args.seconds.to_string())
        .stderr(Stdio::piped());
    if let Some(seed) = args.seed {
        test.env("PODSTUCK_FUZZ_SEED", seed.to_string());
    }
    let mut child = test.spawn().context("cannot run cargo test")?;
    let mut ran = Vec::new();
    for line in BufReader::new(child.stderr.take().expect("piped")).lines().map_while(Result::ok) {
        eprintln!("{line}");
        ran.extend(parse_line(&line));
    }
    let status = child.wait()?;
    println!("| target | inputs | accepted | seconds | inputs/s | crash |");
    println!("|---|---|---|---|---|---|");
    for r in &ran {
        println!(
            "| {} | {} | {} | {:.0} | {:.0} | {} |",
            r.target,
            r.inputs,
            r.accepted,
            r.seconds,
            r.inputs as f64 / r.seconds.max(1e-9),
            if r.crashed { "**yes**" } else { "no" }
        );
    }
    if ran.is_empty() {
        bail!("no fuzz target ran (is {filter} a target's test?)");
    }
    if !status.success() {
        bail!("a fuzz target crashed: its input is printed above; make it a regression (src/fuzz/targets.rs)");
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_targets_closing_line_is_read() {
        let line = "fuzz target mountinfo: 123456 inputs (99 accepted) in 60.0 s, seed 42: no crash";
        assert_eq!(
            parse_line(line),
            Some(Ran { target: "mountinfo".into(), inputs: 123456, accepted: 99, seconds: 60.0, crashed: false })
        );
        assert!(parse_line(&line.replace("no crash", "CRASH")).unwrap().crashed);
        assert_eq!(parse_line("test fuzz::targets::fuzz_mountinfo ... ok"), None);
    }
}
