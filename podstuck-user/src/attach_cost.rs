//! `podstuck attach-cost` (hidden, for `cargo xtask bench`): what attaching
//! alone costs a storm of unlinkat calls, for each way of attaching that
//! needs no kprobes: the per-syscall tracepoints, the raw `sys_enter` and
//! `sys_exit` tracepoints with a syscall-number test, the same as BTF
//! tracepoints, and fentry/fexit on the syscall function. Each pair of
//! programs only counts calls, so the benchmark compares the mechanisms, not
//! podstuck's work; BENCHMARKS.md keeps the figures behind podstuck's choice.
//! `lifecycle` attaches a trio that counts every exec, exit and signal on
//! the lifecycle programs' tracepoints: the floor of a fork/exec storm.
//! `tracepoint-clocks` and `tracepoint-entry` add, on the tracepoint pair,
//! the two clock reads of an exact latency, then the per-thread entry as
//! podstuck carries it: what podstuck's programs pay before they count.

use std::path::Path;

use anyhow::{Context, Result};
use aya::maps::PerCpuArray;
use aya::programs::{BtfTracePoint, FEntry, FExit, RawTracePoint, TracePoint};
use aya::{Ebpf, EbpfLoader};
use podstuck_common::program;
use tokio::signal::unix::{signal, SignalKind};

use crate::btf::{Btf, VMLINUX_BTF};
use crate::collect::maps::Allocation;
use crate::collect::{program_costs, EBPF_OBJECT, SYSCALL_PREFIX};
use crate::kernel_features::AttachPoint;

#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum Mechanism {
    /// syscalls:sys_enter_unlinkat and sys_exit_unlinkat.
    Tracepoint,
    /// The same tracepoints, each program reading the clock once as well:
    /// what an exact latency's two clock reads cost.
    TracepointClocks,
    /// The same, with the per-thread entry carried from entry to exit as
    /// podstuck's programs carry it (its map allocated as theirs are here).
    TracepointEntry,
    /// Raw tracepoints sys_enter and sys_exit, keeping unlinkat by number.
    RawTracepoint,
    /// BTF tracepoints (tp_btf) sys_enter and sys_exit, the same test.
    BtfTracepoint,
    /// fentry and fexit on the unlinkat syscall function.
    Fentry,
    /// sched:sched_process_exec, sched:sched_process_exit and
    /// signal:signal_generate, counting every call.
    Lifecycle,
}

fn attach(ebpf: &mut Ebpf, mechanism: Mechanism) -> Result<Vec<u32>> {
    let mut ids = Vec::new();
    match mechanism {
        Mechanism::Tracepoint | Mechanism::TracepointClocks | Mechanism::TracepointEntry => {
            let unlinkat = program::UNLINKAT;
            let (enter, exit) = match mechanism {
                Mechanism::TracepointClocks => (program::COST_CLOCKS_ENTER, program::COST_CLOCKS_EXIT),
                Mechanism::TracepointEntry => (program::COST_ENTRY_ENTER, program::COST_ENTRY_EXIT),
                _ => (program::COST_TRACEPOINT_ENTER, program::COST_TRACEPOINT_EXIT),
            };
            // The exit first, as podstuck attaches its own: an entry made
            // before it is attached would be left idle.
            for (name, tracepoint) in [(exit, unlinkat.tracepoint_exit), (enter, unlinkat.tracepoint_enter)] {
                let program: &mut TracePoint = ebpf.program_mut(name).context("program missing")?.try_into()?;
                program.load()?;
                program
                    .attach("syscalls", tracepoint)
                    .with_context(|| format!("attaching to syscalls:{tracepoint}"))?;
                ids.push(program.info()?.id());
            }
        }
        Mechanism::RawTracepoint => {
            for (name, tracepoint) in [(program::COST_RAW_ENTER, "sys_enter"), (program::COST_RAW_EXIT, "sys_exit")] {
                let program: &mut RawTracePoint = ebpf.program_mut(name).context("program missing")?.try_into()?;
                program.load()?;
                program.attach(tracepoint).with_context(|| format!("attaching to raw tracepoint {tracepoint}"))?;
                ids.push(program.info()?.id());
            }
        }
        Mechanism::BtfTracepoint => {
            let btf = aya::Btf::from_sys_fs()?;
            for (name, tracepoint) in [(program::COST_BTF_ENTER, "sys_enter"), (program::COST_BTF_EXIT, "sys_exit")] {
                let program: &mut BtfTracePoint = ebpf.program_mut(name).context("program missing")?.try_into()?;
                program.load(tracepoint, &btf).with_context(|| format!("loading tp_btf {tracepoint}"))?;
                program.attach()?;
                ids.push(program.info()?.id());
            }
        }
        Mechanism::Fentry => {
            let btf = aya::Btf::from_sys_fs()?;
            let function = format!("{SYSCALL_PREFIX}{}", program::UNLINKAT.function);
            let program: &mut FEntry = ebpf.program_mut(program::COST_FENTRY).context("program missing")?.try_into()?;
            program.load(&function, &btf).with_context(|| format!("loading fentry on {function}"))?;
            program.attach()?;
            ids.push(program.info()?.id());
            let program: &mut FExit = ebpf.program_mut(program::COST_FEXIT).context("program missing")?.try_into()?;
            program.load(&function, &btf).with_context(|| format!("loading fexit on {function}"))?;
            program.attach()?;
            ids.push(program.info()?.id());
        }
        Mechanism::Lifecycle => {
            for (name, category, tracepoint) in [
                (program::COST_EXIT, "sched", "sched_process_exit"),
                (program::COST_SIGNAL, "signal", "signal_generate"),
                (program::COST_EXEC, "sched", "sched_process_exec"),
            ] {
                let program: &mut TracePoint = ebpf.program_mut(name).context("program missing")?.try_into()?;
                program.load()?;
                program
                    .attach(category, tracepoint)
                    .with_context(|| format!("attaching to {category}:{tracepoint}"))?;
                ids.push(program.info()?.id());
            }
        }
    }
    Ok(ids)
}

/// Attaches the counting pair of `mechanism`, says so on stderr, and on
/// SIGINT or SIGTERM prints one JSON line: the calls counted at entry and
/// exit (execs and exits for `lifecycle`, and its signals) and, with
/// `kernel_cost`, each program's run time.
pub async fn run(mechanism: Mechanism, kernel_cost: bool) -> Result<()> {
    let offsets = Btf::from_file(Path::new(VMLINUX_BTF))?.kernel_offsets()?;
    let _stats = match kernel_cost {
        true => Some(aya::sys::enable_stats(aya::sys::Stats::RunTime).context("turning on BPF run-time statistics")?),
        false => None,
    };
    // The tracer's big maps go unused by the counting programs, but for
    // the entry's variant, which has the threads' entries made as the
    // tracer's are on this kernel's tracepoints.
    let (object, sizes) = match mechanism {
        Mechanism::TracepointEntry => {
            let allocation = Allocation::here(AttachPoint::Tracepoint);
            (allocation.object(EBPF_OBJECT)?, allocation.sizes())
        }
        _ => (std::borrow::Cow::Borrowed(EBPF_OBJECT), crate::collect::maps::UNUSED),
    };
    let mut loader = EbpfLoader::new();
    for (map, entries) in sizes {
        loader.map_max_entries(map, entries);
    }
    let mut ebpf = loader
        .override_global("OFFSETS", &offsets, true)
        .override_global("UNLINKAT_NR", &(libc::SYS_unlinkat as u64), true)
        .load(&object)
        .context("loading podstuck's kernel programs")?;
    let ids = attach(&mut ebpf, mechanism)?;
    let mut sigint = signal(SignalKind::interrupt())?;
    let mut sigterm = signal(SignalKind::terminate())?;
    eprintln!("podstuck attach-cost: attached ({mechanism:?}); SIGINT to stop");
    tokio::select! {
        _ = sigint.recv() => {}
        _ = sigterm.recv() => {}
    }
    let counts: PerCpuArray<_, u64> = PerCpuArray::try_from(ebpf.map("ATTACH_COST").context("ATTACH_COST missing")?)?;
    let count = |i: u32| counts.get(&i, 0).map(|v| v.iter().sum::<u64>()).unwrap_or(0);
    let costs: Vec<serde_json::Value> = program_costs(&ids)
        .into_iter()
        .map(|cost| serde_json::json!({"program": cost.name, "runs": cost.runs, "run_time_ns": cost.run_time_ns}))
        .collect();
    println!(
        "{}",
        serde_json::json!({"mechanism": format!("{mechanism:?}"), "entries": count(0), "exits": count(1), "signals": count(2), "programs": costs})
    );
    Ok(())
}
