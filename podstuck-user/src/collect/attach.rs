//! Attaching the calls' programs, and the check that the kernel runs
//! them: an attach the kernel accepts and never runs would leave podstuck
//! tracing blind, reporting a quiet node.

use anyhow::{Context, Result};
use aya::maps::{MapData, PerCpuArray};
use aya::Ebpf;
use podstuck_common::program::Arch;
use podstuck_common::{counter, Syscall};

use super::{attach_tracepoints, attach_trampolines, load_object, TracerOptions};
use crate::kernel_features::AttachPoint;

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
