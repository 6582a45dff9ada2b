//! What a running CNI plugin writes on its stdout: its result, or its
//! error (`{"code": ..., "msg": ...}`), which the runtime only logs. Said
//! beside a sandbox's failing DEL, it is why the DEL fails, from the
//! plugin itself. Kept off the hot path: the program is attached only
//! while user space knows a sandbox whose DEL fails (the runtime tries
//! again, so the next attempt's words are read); a write of any process
//! but a plugin the exec program streamed costs one lookup in `PLUGINS`;
//! a plugin's own writes are streamed only on fd 1, at most
//! `PLUGIN_WRITES_TOLD` of them, `PLUGIN_WORDS_MAX` bytes each.
//!
//! On every plan the syscall's tracepoint: with no argument to read from
//! the kernel's side, a `write(2)`'s fd and buffer are its record's.

use aya_ebpf::{
    helpers::{bpf_get_current_pid_tgid, generated::bpf_probe_read_user},
    macros::tracepoint,
    programs::TracePointContext,
};
use podstuck_common::{lifecycle, program};

use super::{send, start, PLUGINS};
use crate::args::tracepoint_args;

/// The plugin's stdout: where the CNI spec has it write its result and
/// its error.
const STDOUT: u64 = 1;

#[tracepoint]
pub fn plugin_write(ctx: TracePointContext) -> u32 {
    let _ = wrote(&ctx);
    0
}
named_as!(plugin_write, program::PLUGIN_WRITE);

#[inline(always)]
fn wrote(ctx: &TracePointContext) -> Option<()> {
    let pid = (bpf_get_current_pid_tgid() >> 32) as u32;
    let told = PLUGINS.get_ptr_mut(pid)?;
    let [fd, buf, count] = tracepoint_args(ctx);
    if fd != STDOUT {
        return None;
    }
    // SAFETY: the map's value, an aligned u32, for as long as the entry.
    let told = unsafe { &mut *told };
    if *told >= lifecycle::PLUGIN_WRITES_TOLD {
        return None;
    }
    *told += 1;
    let buffer = start(lifecycle::PLUGIN_WROTE)?;
    buffer.record.result = fd as i32;
    buffer.record.env_total = if count > u32::MAX as u64 { u32::MAX } else { count as u32 };
    if count == 0 {
        send(buffer, lifecycle::FILENAME_MAX);
        return Some(());
    }
    let len = if count > lifecycle::PLUGIN_WORDS_MAX as u64 { lifecycle::PLUGIN_WORDS_MAX as u64 } else { count };
    // Masked for the verifier: 1..=PLUGIN_WORDS_MAX.
    let len = ((len - 1) & (lifecycle::PLUGIN_WORDS_MAX as u64 - 1)) + 1;
    // SAFETY: at most `len` bytes into the environment field (ENV_MAX, more
    // than PLUGIN_WORDS_MAX) through the fault-safe path.
    let read = unsafe { bpf_probe_read_user(buffer.env.as_mut_ptr() as *mut _, len as u32, buf as *const _) };
    let kept = if read == 0 { len as usize } else { 0 };
    buffer.record.env_len = kept as u16;
    send(buffer, lifecycle::FILENAME_MAX + kept);
    Some(())
}
