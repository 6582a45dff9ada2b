//! The record streamed for a call: its header (times, ids, outcome, the
//! task's parent and mount namespace), the path as the caller passed it,
//! and for a relative path the base directory it starts from, built in a
//! per-CPU scratch buffer (far bigger than the 512-byte stack) and sent
//! with one ring buffer output of exactly the bytes filled.

use aya_ebpf::{
    helpers::bpf_get_current_task,
    macros::map,
    maps::{PerCpuArray, RingBuf},
};
use podstuck_common::{CallRecord, KernelOffsets, BASE_DIR_MAX, PATH_MAX, RING_BUFFER_BYTES};

use crate::{read_kernel, OFFSETS};

/// Longest name of one path component (NAME_MAX + NUL).
pub const NAME_MAX: usize = 256;
/// `data` holds the path, then the base directory right after it; every
/// index into it is masked with this so the verifier sees it in bounds.
pub const DATA_MASK: usize = PATH_MAX + BASE_DIR_MAX - 1;

/// The record under construction: header, path and base directory side by
/// side, so one `bpf_ringbuf_output` sends exactly what was filled.
#[repr(C)]
pub struct Scratch {
    pub record: CallRecord,
    pub data: [u8; PATH_MAX + BASE_DIR_MAX + NAME_MAX],
}

#[map]
pub static EVENTS: RingBuf = RingBuf::with_byte_size(RING_BUFFER_BYTES, 0);

#[map]
pub static SCRATCH: PerCpuArray<Scratch> = PerCpuArray::with_max_entries(1, 0);

/// Parent's pid and comm, and the mount namespace inode, by following
/// `current` with the offsets user space found in BTF.
#[inline(always)]
pub fn fill_task_context(record: &mut CallRecord) {
    let off: KernelOffsets = unsafe { core::ptr::read_volatile(&OFFSETS) };
    if off.valid == 0 {
        return;
    }
    let task = unsafe { bpf_get_current_task() } as *const u8;
    if let Some(parent) = read_kernel::<*const u8>(task, off.task_real_parent) {
        if !parent.is_null() {
            record.ppid = read_kernel::<i32>(parent, off.task_tgid).unwrap_or(0) as u32;
            record.pcomm = read_kernel::<[u8; 16]>(parent, off.task_comm).unwrap_or([0; 16]);
        }
    }
    let nsproxy = match read_kernel::<*const u8>(task, off.task_nsproxy) {
        Some(p) if !p.is_null() => p,
        _ => return,
    };
    let mnt_ns = match read_kernel::<*const u8>(nsproxy, off.nsproxy_mnt_ns) {
        Some(p) if !p.is_null() => p,
        _ => return,
    };
    record.mntns = read_kernel::<u32>(mnt_ns, off.mnt_ns_inum).unwrap_or(0);
}
