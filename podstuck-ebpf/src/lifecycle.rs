//! The process lifecycle, for the causes of a stuck pod that never fail a
//! removal: a CNI plugin whose `DEL` keeps failing (its exec, with its
//! environment, and its exit code), a SIGTERM a container's init drops
//! (`signal_generate`'s result: ignored), a SIGKILL no exit follows.
//!
//! Filtered here so a fork or exec storm costs a compare: an exec is
//! streamed only under one of the `LIFECYCLE_FILTER` prefixes; a signal
//! only if it is SIGTERM or SIGKILL, at most once a second per process
//! (`SIGNALLED`); an exit only of a process one of those named (`WATCHED`). Records go to a ring buffer of their own, so a
//! storm of calls never crowds them out; a record that does not fit is
//! counted in `LIFECYCLE_LOST`.

use aya_ebpf::{
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_current_task,
        bpf_ktime_get_ns,
        generated::{bpf_probe_read_kernel_str, bpf_probe_read_user},
    },
    macros::{map, tracepoint},
    maps::{LruHashMap, PerCpuArray, RingBuf},
    programs::TracePointContext,
    EbpfContext,
};
use podstuck_common::{lifecycle, program, LifecycleRecord, LIFECYCLE_RECORD_BYTES};

use crate::{accounting::increment, kernel_reads, read_kernel};

#[map]
static LIFECYCLE: RingBuf = RingBuf::with_byte_size(lifecycle::RING_BUFFER_BYTES, 0);

/// Slot 0: records that did not fit in `LIFECYCLE`.
#[map]
static LIFECYCLE_LOST: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// Processes whose exit is streamed: exec'd under a prefix, or sent
/// SIGTERM or SIGKILL. LRU, so a flood of signals evicts the oldest.
#[map]
static WATCHED: LruHashMap<u32, u8> = LruHashMap::with_max_entries(lifecycle::WATCHED_MAX, 0);

/// When a signal was last streamed, by target and signal (`pid << 8 | sig`):
/// a flood of kills (a loop, a buggy supervisor) streams one a second per
/// process and signal, so it crowds out neither the ring nor user space.
#[map]
static SIGNALLED: LruHashMap<u64, u64> = LruHashMap::with_max_entries(lifecycle::WATCHED_MAX, 0);

/// The shortest gap between two records of one signal to one process.
const SIGNAL_EVERY_NS: u64 = 1_000_000_000;

/// A record with its path and environment, made here: past the stack.
#[repr(C)]
struct Buffer {
    record: LifecycleRecord,
    filename: [u8; lifecycle::FILENAME_MAX],
    env: [u8; lifecycle::ENV_MAX],
}

#[map]
static LIFECYCLE_SCRATCH: PerCpuArray<Buffer> = PerCpuArray::with_max_entries(1, 0);

const SIGKILL: i32 = 9;
const SIGTERM: i32 = 15;

/// Field offsets in the tracepoints' records (their `format` files, the
/// same from 5.10 to 6.18).
mod at {
    /// `sched_process_exec`: `__data_loc char[] filename`.
    pub const EXEC_FILENAME: usize = 8;
    /// `signal_generate`.
    pub const SIG: usize = 8;
    pub const SIG_COMM: usize = 20;
    pub const SIG_PID: usize = 36;
    pub const SIG_GROUP: usize = 40;
    pub const SIG_RESULT: usize = 44;
}

#[inline(always)]
fn ctx_i32(ctx: &TracePointContext, offset: usize) -> i32 {
    // SAFETY: the verifier checks each load against the tracepoint's
    // record; `offset` is one of `at`'s constants, 4-byte aligned, as the
    // record is 8-byte aligned. One aligned load, not four byte loads and
    // their shifts, whose bounds 5.10's verifier loses ("math between ctx
    // pointer and register with unbounded min value").
    unsafe { core::ptr::read_volatile((ctx.as_ptr() as *const u8).add(offset) as *const i32) }
}

/// This CPU's buffer, its header zeroed and filled with what every record
/// says of the current task.
#[inline(always)]
fn start(kind: u8) -> Option<&'static mut Buffer> {
    let buffer = scratch()?;
    fill(buffer, kind);
    Some(buffer)
}

/// This CPU's buffer, as the last program left it.
#[inline(always)]
fn scratch() -> Option<&'static mut Buffer> {
    let buffer = LIFECYCLE_SCRATCH.get_ptr_mut(0)?;
    // SAFETY: this CPU's element of a per-CPU array, valid for the whole
    // run; a tracepoint program is never nested on its CPU.
    Some(unsafe { &mut *buffer })
}

/// The header of a record of `kind`: what every record says of the current task.
#[inline(always)]
fn fill(buffer: &mut Buffer, kind: u8) {
    let r = &mut buffer.record;
    let pid_tgid = bpf_get_current_pid_tgid();
    r.ns = unsafe { bpf_ktime_get_ns() };
    r.cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    r.pid = (pid_tgid >> 32) as u32;
    r.ppid = parent_pid();
    r.target_pid = 0;
    r.sig = 0;
    r.result = 0;
    r.group = 0;
    r.exit_code = 0;
    r.filename_len = 0;
    r.env_len = 0;
    r.kind = kind;
    r.comm = bpf_get_current_comm().unwrap_or([0; 16]);
    r.target_comm = [0; 16];
}

#[inline(always)]
fn parent_pid() -> u32 {
    let task = unsafe { bpf_get_current_task() } as *const u8;
    let parent: Option<*const u8> = read_kernel(task, patched!(OFFSETS.task_real_parent));
    parent.and_then(|p| read_kernel::<u32>(p, patched!(OFFSETS.task_tgid))).unwrap_or(0)
}

/// Sends the header and `extra` bytes after it.
#[inline(always)]
fn send(buffer: &Buffer, extra: usize) {
    const MOST: usize = lifecycle::FILENAME_MAX + lifecycle::ENV_MAX;
    let len = LIFECYCLE_RECORD_BYTES + if extra > MOST { MOST } else { extra };
    // SAFETY: `len` is at most the buffer's size.
    let bytes = unsafe { core::slice::from_raw_parts(buffer as *const Buffer as *const u8, len) };
    if LIFECYCLE.output::<[u8]>(bytes, 0).is_err() {
        increment(&LIFECYCLE_LOST, 0);
    }
}

/// Whether the first bytes of `filename` are one of the filter's prefixes.
/// Byte by byte from the global: a copy of it would not fit the stack.
#[inline(always)]
fn under_a_prefix(filename: &[u8; lifecycle::FILENAME_MAX]) -> bool {
    let mut p = 0;
    while p < lifecycle::PREFIXES {
        // SAFETY (both reads): a field of a static, aligned, never written
        // while the programs run; volatile, so the zeros written in the
        // source are not folded in.
        let len = unsafe { core::ptr::read_volatile(&raw const crate::LIFECYCLE_FILTER.prefix_lens[p]) } as usize;
        if len > 0 && len <= lifecycle::PREFIX_MAX {
            let mut i = 0;
            let mut same = true;
            while i < len && i < lifecycle::PREFIX_MAX {
                let byte = unsafe { core::ptr::read_volatile(&raw const crate::LIFECYCLE_FILTER.prefixes[p][i]) };
                if filename[i] != byte {
                    same = false;
                    break;
                }
                i += 1;
            }
            if same {
                return true;
            }
        }
        p += 1;
    }
    false
}

#[tracepoint]
pub fn lifecycle_exec(ctx: TracePointContext) -> u32 {
    let _ = exec(&ctx);
    0
}
named_as!(lifecycle_exec, program::LIFECYCLE_EXEC);

#[inline(always)]
fn exec(ctx: &TracePointContext) -> Option<()> {
    if !kernel_reads() {
        return None;
    }
    // The filename first: every exec on the node passes here, and only
    // those under a prefix are worth a header.
    let buffer = scratch()?;
    let loc = ctx_i32(ctx, at::EXEC_FILENAME) as u32;
    let from = (ctx.as_ptr() as *const u8).wrapping_add((loc & 0xffff) as usize);
    // SAFETY: the helper copies at most the buffer's size through the
    // kernel's fault-safe path and NUL-terminates.
    let read = unsafe {
        bpf_probe_read_kernel_str(
            buffer.filename.as_mut_ptr() as *mut _,
            lifecycle::FILENAME_MAX as u32,
            from as *const _,
        )
    };
    if read <= 0 || !under_a_prefix(&buffer.filename) {
        return None;
    }
    fill(buffer, lifecycle::EXEC);
    let filename_len = (read as usize - 1) & (lifecycle::FILENAME_MAX - 1);
    buffer.record.filename_len = filename_len as u16;
    buffer.record.env_len = read_env(&mut buffer.env) as u16;
    let pid = buffer.record.pid;
    let _ = WATCHED.insert(pid, 1, 0);
    // The environment follows the whole filename buffer, so its offset is
    // a constant: user space reads `filename_len` bytes of the one and
    // `env_len` of the other.
    send(buffer, lifecycle::FILENAME_MAX + buffer.record.env_len as usize);
    Some(())
}

/// The new program's environment (`mm.env_start..env_end`), up to ENV_MAX
/// bytes: written by exec just before this tracepoint, so resident.
#[inline(always)]
fn read_env(env: &mut [u8; lifecycle::ENV_MAX]) -> usize {
    let task = unsafe { bpf_get_current_task() } as *const u8;
    let Some(mm) = read_kernel::<*const u8>(task, patched!(OFFSETS.task_mm)) else { return 0 };
    let (Some(start), Some(end)) =
        (read_kernel::<u64>(mm, patched!(OFFSETS.mm_env_start)), read_kernel::<u64>(mm, patched!(OFFSETS.mm_env_end)))
    else {
        return 0;
    };
    if end <= start {
        return 0;
    }
    let len = end - start;
    let len = if len > lifecycle::ENV_MAX as u64 { lifecycle::ENV_MAX as u64 } else { len };
    // Masked for the verifier: 1..=ENV_MAX.
    let len = ((len - 1) & (lifecycle::ENV_MAX as u64 - 1)) + 1;
    // SAFETY: at most `len` bytes into a buffer of ENV_MAX, through the
    // fault-safe path: a page not resident is an error, never a fault.
    let read = unsafe { bpf_probe_read_user(env.as_mut_ptr() as *mut _, len as u32, start as *const _) };
    if read == 0 {
        len as usize
    } else {
        0
    }
}

#[tracepoint]
pub fn lifecycle_exit(_ctx: TracePointContext) -> u32 {
    let _ = exit();
    0
}
named_as!(lifecycle_exit, program::LIFECYCLE_EXIT);

#[inline(always)]
fn exit() -> Option<()> {
    let pid_tgid = bpf_get_current_pid_tgid();
    let (pid, tid) = ((pid_tgid >> 32) as u32, pid_tgid as u32);
    // Once per process: its leader's exit (every thread passes here).
    if pid != tid {
        return None;
    }
    // SAFETY: a lookup whose value is only tested for presence.
    unsafe { WATCHED.get(pid) }?;
    let _ = WATCHED.remove(pid);
    let buffer = start(lifecycle::EXIT)?;
    let task = unsafe { bpf_get_current_task() } as *const u8;
    buffer.record.exit_code = read_kernel::<i32>(task, patched!(OFFSETS.task_exit_code)).unwrap_or(-1);
    send(buffer, 0);
    Some(())
}

#[tracepoint]
pub fn lifecycle_signal(ctx: TracePointContext) -> u32 {
    let _ = signal(&ctx);
    0
}
named_as!(lifecycle_signal, program::LIFECYCLE_SIGNAL);

#[inline(always)]
fn signal(ctx: &TracePointContext) -> Option<()> {
    let sig = ctx_i32(ctx, at::SIG);
    if sig != SIGTERM && sig != SIGKILL {
        return None;
    }
    let target = ctx_i32(ctx, at::SIG_PID) as u32;
    let key = (target as u64) << 8 | sig as u64;
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: a plain u64 read from the map's value.
    if let Some(last) = unsafe { SIGNALLED.get(key) } {
        if now.wrapping_sub(*last) < SIGNAL_EVERY_NS {
            return None;
        }
    }
    let _ = SIGNALLED.insert(key, now, 0);
    let buffer = start(lifecycle::SIGNAL)?;
    buffer.record.sig = sig;
    buffer.record.target_pid = target;
    buffer.record.group = ctx_i32(ctx, at::SIG_GROUP);
    buffer.record.result = ctx_i32(ctx, at::SIG_RESULT);
    // Four aligned loads at constant offsets: the verifier refuses a load
    // through a context pointer moved by a variable, as a byte loop is.
    let mut comm = [0u8; 16];
    for (i, word) in [0usize, 4, 8, 12].into_iter().enumerate() {
        let v = ctx_i32(ctx, at::SIG_COMM + word).to_ne_bytes();
        comm[i * 4..i * 4 + 4].copy_from_slice(&v);
    }
    buffer.record.target_comm = comm;
    let _ = WATCHED.insert(target, 1, 0);
    send(buffer, 0);
    Some(())
}
