//! kubelet's failing `connect()`s to a unix socket: how a CSI node plugin
//! that is gone (crashed, evicted, not yet registered again) shows in the
//! kernel, as kubelet retries its NodeUnpublish or NodeUnstage for ever
//! and never removes the volume. Kept off the hot path: a connect of any
//! other process costs a comm read (kubelet's threads are all named
//! `kubelet`; k3s's `k3s...`), a successful one of kubelet's nothing
//! more, a failing one a read of its socket address; one record a second
//! at most per process and socket path (`CONNECTS_TOLD`).
//!
//! The comm is a claim (a pod may name its process `kubelet`): user space
//! proves the caller is kubelet from the kernel's facts in the record
//! (its cgroups and start) and its executable, before anything is said.
//!
//! Where the calls' programs are on fentry/fexit, one fexit on
//! `unix_stream_connect` (every unix stream connect, after the kernel
//! copied the address in; the address, its length and the result are its
//! arguments), which never runs for a connect of another family; on the
//! syscall tracepoints, the enter program keeps the address of kubelet's
//! calls (`CONNECTING`) for the exit program. (Not the syscall function:
//! on 5.10 the verifier refuses a program there any read of its `pt_regs`
//! argument, "arg#0 type is not a struct".)

use aya_ebpf::{
    helpers::{
        bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_current_task,
        generated::{bpf_probe_read_kernel, bpf_probe_read_user},
    },
    macros::{fexit, map, tracepoint},
    maps::LruHashMap,
    programs::{FExitContext, TracePointContext},
};
use podstuck_common::{lifecycle, program};

use super::{due, mount_namespace, send, start, LIFECYCLE_SCRATCH};
use crate::args::{tracepoint_args, tracepoint_ret};
use crate::kernel_reads;

/// kubelet's connects in flight, on the tracepoint plan: the socket
/// address and its length, by thread.
#[map]
static CONNECTING: LruHashMap<u64, [u64; 2]> = LruHashMap::with_max_entries(lifecycle::CONNECTS_KEPT, 0);

/// When a failing connect was last streamed, by process and socket path
/// (a fold of the address's words).
#[map]
static CONNECTS_TOLD: LruHashMap<u64, u64> = LruHashMap::with_max_entries(lifecycle::CONNECTS_KEPT, 0);

/// The shortest gap between two records of one process's failing
/// connects to one socket.
const CONNECT_EVERY_NS: u64 = 1_000_000_000;

const AF_UNIX: u16 = 1;

/// Whether the current task's name is kubelet's (or k3s's, which runs
/// kubelet in its own process).
#[inline(always)]
fn named_kubelet() -> bool {
    let Ok(comm) = bpf_get_current_comm() else { return false };
    comm[..8] == *b"kubelet\0" || comm[..3] == *b"k3s"
}

/// On `int unix_stream_connect(struct socket *sock, struct sockaddr *uaddr,
/// int addr_len, int flags)`: the address is the kernel's copy.
#[fexit]
pub fn kubelet_connect_fexit(ctx: FExitContext) -> u32 {
    if named_kubelet() && kernel_reads() {
        // Ints: the low half of each slot is theirs.
        let ret = ctx.arg::<u64>(4) as u32 as i32;
        if ret < 0 {
            let len = ctx.arg::<u64>(2) as u32 as i32;
            let _ = failed(ctx.arg(1), len.max(0) as u64, ret.into(), Space::Kernel);
        }
    }
    0
}
named_as!(kubelet_connect_fexit, program::KUBELET_CONNECT_FEXIT);

/// Where a socket address is read from.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Space {
    /// The caller's memory, as it passed it to the syscall.
    User,
    /// The kernel's copy of it.
    Kernel,
}

#[tracepoint]
pub fn kubelet_connect_enter(ctx: TracePointContext) -> u32 {
    if named_kubelet() {
        let [_, addr, len] = tracepoint_args(&ctx);
        let _ = CONNECTING.insert(bpf_get_current_pid_tgid(), [addr, len], 0);
    }
    0
}
named_as!(kubelet_connect_enter, program::KUBELET_CONNECT_ENTER);

#[tracepoint]
pub fn kubelet_connect_exit(ctx: TracePointContext) -> u32 {
    if named_kubelet() {
        connected(tracepoint_ret(&ctx));
    }
    0
}
named_as!(kubelet_connect_exit, program::KUBELET_CONNECT_EXIT);

/// A connect of kubelet's thread returned `ret`: its entry is taken, and
/// a failure streamed.
#[inline(always)]
fn connected(ret: i64) {
    let thread = bpf_get_current_pid_tgid();
    // SAFETY: the value is copied out before the entry is removed.
    if let Some([addr, len]) = unsafe { CONNECTING.get(thread) }.copied() {
        let _ = CONNECTING.remove(thread);
        if ret < 0 {
            let _ = failed(addr, len, ret, Space::User);
        }
    }
}

/// Streams kubelet's connect to the socket at `addr` (`len` bytes), which
/// failed with `ret`, if it is a unix socket with a path, at most once a
/// second per process and path.
#[inline(always)]
fn failed(addr: u64, len: u64, ret: i64, space: Space) -> Option<()> {
    let buffer = LIFECYCLE_SCRATCH.get_ptr_mut(0)?;
    // SAFETY: this CPU's element of a per-CPU array; a tracing program is
    // never nested on its CPU.
    let buffer = unsafe { &mut *buffer };
    // Zeroed first, so the fold below sees this address alone.
    let words = buffer.filename.as_mut_ptr() as *mut u64;
    for i in 0..WORDS {
        // SAFETY: WORDS * 8 bytes lie within the filename field, which
        // starts 8-byte aligned after the record's header.
        unsafe { words.add(i).write(0) };
    }
    if len < 3 {
        return None;
    }
    let len = if len > lifecycle::SOCKADDR_MAX as u64 { lifecycle::SOCKADDR_MAX as u64 } else { len };
    // Masked for the verifier: 1..=128, within the field's 256.
    let len = ((len - 1) & 127) + 1;
    // SAFETY: at most `len` bytes into the filename field, through the
    // fault-safe path.
    let read = unsafe {
        match space {
            Space::User => bpf_probe_read_user(buffer.filename.as_mut_ptr() as *mut _, len as u32, addr as *const _),
            Space::Kernel => {
                bpf_probe_read_kernel(buffer.filename.as_mut_ptr() as *mut _, len as u32, addr as *const _)
            }
        }
    };
    if read != 0 {
        return None;
    }
    let family = u16::from_ne_bytes([buffer.filename[0], buffer.filename[1]]);
    // A path, not an abstract name (its first byte NUL) nor another family.
    if family != AF_UNIX || buffer.filename[2] == 0 {
        return None;
    }
    let mut fold: u64 = bpf_get_current_pid_tgid() >> 32;
    for i in 0..WORDS {
        // SAFETY: as above.
        let word = unsafe { words.add(i).read() };
        fold = (fold ^ word).wrapping_mul(0x100_0000_01b3);
    }
    if !due(&CONNECTS_TOLD, fold, CONNECT_EVERY_NS) {
        return None;
    }
    let buffer = start(lifecycle::CONNECT_FAILED)?;
    buffer.record.result = -ret as i32;
    buffer.record.filename_len = len as u16;
    let task = unsafe { bpf_get_current_task() } as *const u8;
    buffer.record.mntns = mount_namespace(task).unwrap_or(0);
    send(buffer, len as usize);
    Some(())
}

/// The words of the filename field a socket address may take
/// (`SOCKADDR_MAX` bytes, rounded up).
const WORDS: usize = lifecycle::SOCKADDR_MAX.div_ceil(8);
