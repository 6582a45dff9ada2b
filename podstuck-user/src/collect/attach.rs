//! Loading the embedded object and attaching the calls' programs (fentry
//! and fexit where the kernel allows, else the syscall tracepoints), and
//! the check that the kernel runs them: an attach the kernel accepts and
//! never runs would leave podstuck tracing blind, reporting a quiet node.
//! It knows the object and the options it is loaded with; the tracer
//! ([`super`]) holds what it returns.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use aya::maps::{MapData, PerCpuArray};
use aya::programs::{Program, TracePoint};
use aya::{Ebpf, EbpfLoader};
use podstuck_common::program::Arch;
use podstuck_common::{counter, KernelFilter, Syscall, RING_BUFFER_BYTES, SAMPLED_RING_BUFFER_BYTES};

use super::maps;
use crate::kernel_features::{AttachPoint, PathWalk};

/// The eBPF object built from `podstuck-ebpf` by this crate's build script.
pub(crate) static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/podstuck.bpf.o"));

/// The architecture podstuck is built for: its syscalls are the ones
/// attached, its syscall functions the fentry targets.
const ARCH: Arch = Arch::HOST;

/// The prefix of this architecture's syscall functions.
pub const SYSCALL_PREFIX: &str = ARCH.syscall_prefix();

/// How the tracer is set up.
#[derive(Clone, Debug)]
pub struct TracerOptions {
    pub filter: KernelFilter,
    pub attach: AttachPoint,
    /// Which exit programs: those that walk with `bpf_loop`, or their
    /// unrolled twins (`<name>_w`) where the kernel has no `bpf_loop`.
    pub walk: PathWalk,
    /// Where the struct layouts are read: the kernel's BTF, or `--btf`.
    pub btf: PathBuf,
    /// Ring buffer size in bytes (a power of two, at least a page); the
    /// default is `RING_BUFFER_BYTES` with every call streamed, else
    /// `SAMPLED_RING_BUFFER_BYTES`.
    pub ring_buffer_bytes: Option<u32>,
    /// The v1 controllers whose hierarchies the programs read each
    /// caller's cgroup in, in the order they try them
    /// (`NodeLayout::cgroup_v1`); empty on v2-only nodes.
    pub cgroup_v1: Vec<&'static str>,
    /// Where the node's processes are listed (`Node::proc_root`): an entry
    /// gone there frees what the kernel kept of its process.
    pub proc_root: PathBuf,
}

/// Times the calls' programs are attached before podstuck gives up on a
/// kernel that does not run them.
pub(super) const ATTACH_ATTEMPTS: u32 = 3;

/// How long a call of podstuck's own may take to be counted by freshly
/// attached programs.
pub(super) const PROGRAMS_RUN_WITHIN: std::time::Duration = std::time::Duration::from_secs(1);

/// Loads the calls' programs and attaches them as `options` plan (falling
/// back from fentry to the tracepoints on `Auto`, said in `fallback`).
pub(super) fn attach_calls(
    offsets: &podstuck_common::KernelOffsets,
    options: &TracerOptions,
    fallback: &mut Option<String>,
) -> Result<(Ebpf, Vec<u32>, AttachPoint)> {
    let walk = options.walk;
    Ok(match options.attach {
        AttachPoint::Tracepoint => {
            let mut ebpf = load_object(offsets, options, AttachPoint::Tracepoint)?;
            let ids = attach_tracepoints(&mut ebpf, walk)?;
            (ebpf, ids, AttachPoint::Tracepoint)
        }
        AttachPoint::Fentry => {
            let mut ebpf = load_object(offsets, options, AttachPoint::Fentry)?;
            let ids = attach_trampolines(&mut ebpf, walk)?;
            (ebpf, ids, AttachPoint::Fentry)
        }
        AttachPoint::Auto => {
            let mut ebpf = load_object(offsets, options, AttachPoint::Fentry)?;
            match attach_trampolines(&mut ebpf, walk) {
                Ok(ids) => (ebpf, ids, AttachPoint::Fentry),
                Err(e) => {
                    *fallback = Some(format!("fentry/fexit refused here ({e:#}): attached to the syscall tracepoints, which slow every syscall a little"));
                    // A fresh object: the half-attached one goes with its links.
                    drop(ebpf);
                    let mut ebpf = load_object(offsets, options, AttachPoint::Tracepoint)?;
                    let ids = attach_tracepoints(&mut ebpf, walk)?;
                    (ebpf, ids, AttachPoint::Tracepoint)
                }
            }
        }
    })
}

/// Whether the kernel runs the programs just attached, every syscall's:
/// podstuck makes each call the programs trace on a path that cannot exist
/// (under /proc: each fails and changes nothing) until each is counted,
/// for at most [`PROGRAMS_RUN_WITHIN`]. A podstuck blind to a syscall
/// (an attach the kernel accepted and never runs) would report a quiet
/// node, the worst answer during an incident; the check costs a few
/// failing calls at start. Where podstuck's pid is not the kernel's (a PID
/// namespace of its own) its calls count as the node's, which proves as
/// much. The syscalls not seen, if any.
pub(super) fn programs_run(ebpf: &Ebpf) -> Result<Vec<Syscall>> {
    let counters: PerCpuArray<&MapData, u64> =
        PerCpuArray::try_from(ebpf.map("COUNTERS").context("COUNTERS map missing")?)?;
    let seen = |syscall: Syscall| -> Result<u64> {
        let mut n = 0;
        for index in [counter::OWN_CALLS + syscall as u32, counter::CALLS + syscall as u32] {
            n += counters.get(&index, 0).with_context(|| format!("reading counter {index}"))?.iter().sum::<u64>();
        }
        Ok(n)
    };
    let traced: Vec<Syscall> = Arch::HOST.programs().iter().map(|p| p.syscall).collect();
    let before: Vec<u64> = traced.iter().map(|s| seen(*s)).collect::<Result<_>>()?;
    let started = std::time::Instant::now();
    loop {
        for syscall in &traced {
            make_call(*syscall);
        }
        let mut unseen = Vec::new();
        for (syscall, was) in traced.iter().zip(&before) {
            if seen(*syscall)? <= *was {
                unseen.push(*syscall);
            }
        }
        if unseen.is_empty() || started.elapsed() >= PROGRAMS_RUN_WITHIN {
            return Ok(unseen);
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

/// One call of `syscall`, made to fail: its path cannot exist.
fn make_call(syscall: Syscall) {
    let path = c"/proc/podstuck-checks-its-programs-run";
    // SAFETY: raw syscalls on a NUL-terminated constant path; each only
    // fails (ENOENT), whatever the libc would route them through.
    unsafe {
        match syscall {
            Syscall::Unlinkat => libc::syscall(libc::SYS_unlinkat, libc::AT_FDCWD, path.as_ptr(), 0),
            #[cfg(target_arch = "x86_64")]
            Syscall::Unlink => libc::syscall(libc::SYS_unlink, path.as_ptr()),
            #[cfg(target_arch = "x86_64")]
            Syscall::Rmdir => libc::syscall(libc::SYS_rmdir, path.as_ptr()),
            Syscall::Umount2 => libc::syscall(libc::SYS_umount2, path.as_ptr(), 0),
            #[cfg(not(target_arch = "x86_64"))]
            Syscall::Unlink | Syscall::Rmdir => 0,
        };
    }
}

/// Loads the embedded object with the node's offsets and the filter, for
/// the programs of `plan`: the threads' entries and the series allocated
/// as this kernel allows for them (`maps`).
fn load_object(offsets: &podstuck_common::KernelOffsets, options: &TracerOptions, plan: AttachPoint) -> Result<Ebpf> {
    let allocation = maps::Allocation::here(plan);
    load_object_with(&allocation.object(EBPF_OBJECT)?, offsets, options, &allocation.sizes())
}

/// `load_object`, with the maps `sized` given those sizes instead.
pub(super) fn load_object_with(
    object: &[u8],
    offsets: &podstuck_common::KernelOffsets,
    options: &TracerOptions,
    sized: &[(&str, u32)],
) -> Result<Ebpf> {
    let mut loader = EbpfLoader::new();
    for (map, entries) in sized {
        loader.map_max_entries(map, *entries);
    }
    // Read-only globals: the verifier knows their values, so with
    // KERNEL_READS at 0 it never visits a kernel-memory read, which
    // lockdown=confidentiality would refuse at load (Linux 5.13+).
    let kernel_reads = u8::from(options.walk.reads_kernel());
    loader.override_global("OFFSETS", offsets, true).override_global("FILTER", &options.filter, true).override_global(
        "KERNEL_READS",
        &kernel_reads,
        true,
    );
    let default = if options.filter.every_call != 0 { RING_BUFFER_BYTES } else { SAMPLED_RING_BUFFER_BYTES };
    loader.map_max_entries("EVENTS", options.ring_buffer_bytes.unwrap_or(default));
    loader.load(object).context("loading podstuck's kernel programs (the verifier's log above says why)")
}

/// The kernel's BTF as aya reads it, for naming fentry targets: parsed
/// once for the probe and the attach (tens of MB of allocations), and
/// forgotten once the programs are attached.
pub(super) static KERNEL_BTF: std::sync::Mutex<Option<std::sync::Arc<aya::Btf>>> = std::sync::Mutex::new(None);

pub(super) fn kernel_btf() -> Result<std::sync::Arc<aya::Btf>> {
    let mut kept = KERNEL_BTF.lock().unwrap_or_else(|e| e.into_inner());
    if let Some(btf) = kept.as_ref() {
        return Ok(std::sync::Arc::clone(btf));
    }
    let btf = std::sync::Arc::new(aya::Btf::from_sys_fs()?);
    *kept = Some(std::sync::Arc::clone(&btf));
    Ok(btf)
}

/// The exit program of this walk: the one with `bpf_loop`, or its
/// unrolled twin.
fn exit_program(with_loop: &'static str, unrolled: &'static str, walk: PathWalk) -> &'static str {
    match walk {
        PathWalk::BpfLoop => with_loop,
        // Without kernel reads nothing is walked: the twin that never
        // names bpf_loop loads everywhere.
        PathWalk::Unrolled | PathWalk::Forbidden => unrolled,
    }
}

/// Loads the programs `names` side by side, `load` loading one: the
/// verifier spends ~100 ms on each exit program (record, path walk), on
/// one CPU each, and start waits for all of them.
pub(super) fn load_side_by_side(
    ebpf: &mut Ebpf,
    names: &[&str],
    load: impl Fn(&str, &mut Program) -> Result<()> + Sync,
) -> Result<()> {
    let mut programs: Vec<(&str, &mut Program)> =
        ebpf.programs_mut().filter(|(name, _)| names.iter().any(|n| n == name)).collect();
    if let Some(missing) = names.iter().find(|&&n| !programs.iter().any(|&(name, _)| name == n)) {
        bail!("program {missing} missing from the embedded object");
    }
    let load = &load;
    std::thread::scope(|scope| {
        let loading: Vec<_> =
            programs.iter_mut().map(|(name, program)| scope.spawn(move || load(name, program))).collect();
        // The scope joins the rest when one fails.
        loading
            .into_iter()
            .try_for_each(|l| l.join().unwrap_or_else(|_| Err(anyhow::anyhow!("a program's loader panicked"))))
    })
}

/// Attaches the fentry/fexit pair of every syscall of this architecture; the
/// ids of the programs.
fn attach_trampolines(ebpf: &mut Ebpf, walk: PathWalk) -> Result<Vec<u32>> {
    let btf = kernel_btf().context("reading the kernel's BTF for fentry")?;
    let function_of = |name: &str| {
        ARCH.programs().iter().find_map(|p| {
            (exit_program(p.fexit, p.fexit_w, walk) == name || p.fentry == name)
                .then(|| format!("{SYSCALL_PREFIX}{}", p.function))
        })
    };
    // Exits first, as with the tracepoints.
    let names: Vec<&str> = ARCH
        .programs()
        .iter()
        .map(|p| exit_program(p.fexit, p.fexit_w, walk))
        .chain(ARCH.programs().iter().map(|p| p.fentry))
        .collect();
    load_side_by_side(ebpf, &names, |name, program| {
        let function = function_of(name).expect("a trampoline program");
        match program {
            Program::FExit(p) => p.load(&function, &btf),
            Program::FEntry(p) => p.load(&function, &btf),
            _ => bail!("program {name} is neither fentry nor fexit"),
        }
        .with_context(|| format!("loading {name} on {function}"))
    })?;
    let mut ids = Vec::new();
    for name in names {
        let function = function_of(name).expect("a trampoline program");
        match ebpf.program_mut(name).with_context(|| format!("program {name} missing"))? {
            Program::FExit(p) => {
                p.attach().with_context(|| format!("attaching fexit to {function}"))?;
                ids.push(p.info()?.id());
            }
            Program::FEntry(p) => {
                p.attach().with_context(|| format!("attaching fentry to {function}"))?;
                ids.push(p.info()?.id());
            }
            _ => bail!("program {name} is neither fentry nor fexit"),
        }
    }
    Ok(ids)
}

/// Attaches each syscall's programs (this architecture's) to its `syscalls`
/// tracepoints; the ids of the programs.
fn attach_tracepoints(ebpf: &mut Ebpf, walk: PathWalk) -> Result<Vec<u32>> {
    // (program, tracepoint). Exits come first so that a call entered
    // before attaching is counted as such at its exit, rather than leaving
    // an entry with no exit.
    let attach: Vec<(&str, &str)> = ARCH
        .programs()
        .iter()
        .map(|p| (exit_program(p.exit, p.exit_w, walk), p.tracepoint_exit))
        .chain(ARCH.programs().iter().map(|p| (p.enter, p.tracepoint_enter)))
        .collect();
    let names: Vec<&str> = attach.iter().map(|(name, _)| *name).collect();
    load_side_by_side(ebpf, &names, |name, program| {
        let program: &mut TracePoint = program.try_into()?;
        program.load().with_context(|| format!("loading program {name}"))
    })?;
    let mut ids = Vec::new();
    for (name, tracepoint) in attach {
        let program: &mut TracePoint = ebpf
            .program_mut(name)
            .with_context(|| format!("program {name} missing from the embedded object"))?
            .try_into()?;
        program
            .attach("syscalls", tracepoint)
            .with_context(|| format!("attaching to tracepoint syscalls:{tracepoint}"))?;
        ids.push(program.info()?.id());
    }
    Ok(ids)
}
