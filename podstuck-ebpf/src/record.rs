//! The record streamed for a call: its header (times, ids, outcome, the
//! task's parent and mount namespace), the path as the caller passed it,
//! and for a relative path the base directory it starts from, built in a
//! per-CPU scratch buffer (far bigger than the 512-byte stack) and sent
//! with one ring buffer output of exactly the bytes filled.

use core::ffi::c_void;

use aya_ebpf::{
    helpers::{
        bpf_get_current_comm, bpf_get_current_task, bpf_get_current_uid_gid, bpf_probe_read_user,
        generated::bpf_probe_read_user_str,
    },
    macros::map,
    maps::{PerCpuArray, RingBuf},
};
use podstuck_common::{
    base_status, counter, path_status, CallInFlight, CallRecord, SeriesKey, BASE_DIR_MAX, CALL_RECORD_BYTES, PATH_MAX,
    RING_BUFFER_BYTES,
};

use crate::{
    accounting::bump,
    path_walk::{walk_base_dir, PathWalk},
    read_kernel,
};

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
    /// Bytes of the base directory written so far, past the path: kept
    /// here, not on the stack, so each step of the walk reads a value the
    /// verifier does not know. It then sees the same state at every step,
    /// whatever the step and the path that led there, instead of walking
    /// each one apart (~80,000 instructions verified per exit program, a
    /// quarter of that now, and start waits for them).
    pub walked: u64,
}

/// The records to user space; it may resize the ring at load.
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(RING_BUFFER_BYTES, 0);

/// One per CPU, so a program has it to itself while it runs: a tracepoint
/// program is never nested on its CPU. An fexit program on a fully
/// preemptible kernel can be preempted, and another exit on that CPU fill
/// the buffer meanwhile: a garbled record, never memory out of bounds,
/// since every index into it is masked.
#[map]
pub static SCRATCH: PerCpuArray<Scratch> = PerCpuArray::with_max_entries(1, 0);

/// What the exit knows of a call: all its record's header needs.
pub struct Ended {
    pub entry: CallInFlight,
    /// The call's process, cgroup and syscall.
    pub key: SeriesKey,
    pub tid: u32,
    pub ret: i64,
    pub exit_ns: u64,
    /// How many calls the record stands for: this one and those skipped.
    pub represents: u32,
    /// Whether its record wakes user space (see `accounting::Streamed`).
    pub wake: bool,
}

/// `bpf_ringbuf_output` flags.
const BPF_RB_NO_WAKEUP: u64 = 1;
const BPF_RB_FORCE_WAKEUP: u64 = 2;

/// Fills the record of a call in the scratch buffer and sends it. None
/// when there is no scratch buffer.
#[inline(always)]
pub fn stream(call: &Ended, how: PathWalk) -> Option<()> {
    // SAFETY: this CPU's scratch value, valid for the run (see SCRATCH for
    // who else may write it).
    let scratch = unsafe { &mut *SCRATCH.get_ptr_mut(0)? };
    fill_header(&mut scratch.record, call);
    let (len, status) = read_path(&mut scratch.data, call.entry.path_ptr);
    scratch.record.path_len = len as u16;
    scratch.record.path_status = status;

    // A relative path means nothing without the directory it starts from.
    // From here on what is known of the path is read back from the record
    // (volatile: the compiler would reuse the values just stored), so the
    // verifier carries on with one state, not one per way the path read
    // ended.
    let status = recorded(&scratch.record.path_status);
    let relative = status != path_status::UNREADABLE && scratch.data[0] != b'/';
    let (base_len, base) = if relative { walk_base_dir(call.entry.dfd, how) } else { (0, base_status::NOT_NEEDED) };
    scratch.record.base_len = base_len as u16;
    scratch.record.base_status = base;

    let total = (recorded(&scratch.record.path_len) as usize + recorded(&scratch.record.base_len) as usize) & DATA_MASK;
    // SAFETY: the bytes are the start of `*scratch`: CALL_RECORD_BYTES of
    // header and at most DATA_MASK of `data`, which is longer.
    let bytes =
        unsafe { core::slice::from_raw_parts(scratch as *const Scratch as *const u8, CALL_RECORD_BYTES + total) };
    // Forced, not left to the kernel's "wake if the reader had caught up":
    // records sent without a wakeup may still be waiting. With every call
    // streamed, the kernel's own rule for all: the reader keeps up with a
    // ring that may be small, where records left waiting would be lost.
    let wakeup = match (call.wake, patched!(FILTER.every_call) != 0) {
        (true, _) => BPF_RB_FORCE_WAKEUP,
        (false, true) => 0,
        (false, false) => BPF_RB_NO_WAKEUP,
    };
    if EVENTS.output::<[u8]>(bytes, wakeup).is_err() {
        bump(counter::RING_BUFFER_DROPS);
    }
    Some(())
}

/// A field of the record as stored in the scratch buffer.
#[inline(always)]
fn recorded<T: Copy>(field: &T) -> T {
    // SAFETY: a reference to a field of this CPU's scratch value.
    unsafe { core::ptr::read_volatile(field) }
}

#[inline(always)]
fn fill_header(record: &mut CallRecord, call: &Ended) {
    record.enter_ns = call.entry.enter_ns;
    record.exit_ns = call.exit_ns;
    record.cgroup_id = call.key.cgroup_id;
    record.represents = call.represents;
    record.ret = call.ret;
    record.flags = call.entry.flags;
    record.pid = call.key.pid;
    record.tid = call.tid;
    record.ppid = 0;
    record.mntns = 0;
    record.dfd = call.entry.dfd;
    record.syscall = call.key.syscall;
    record.uid = bpf_get_current_uid_gid() as u32;
    record.comm = bpf_get_current_comm().unwrap_or([0; 16]);
    record.pcomm = [0; 16];
    // What cannot be read of the task context stays zero.
    let _ = fill_task_context(record);
}

/// The caller's path, copied to the start of `data`: its length (without
/// the NUL) and `path_status`. Read at exit, not entry: by then the kernel
/// has copied it (getname), so its page is resident and the read cannot miss.
#[inline(always)]
fn read_path(data: &mut [u8; PATH_MAX + BASE_DIR_MAX + NAME_MAX], path_ptr: u64) -> (usize, u8) {
    // SAFETY: at most PATH_MAX bytes at the start of `data`, which is
    // longer; the user memory is read through the fault-safe path.
    let read = unsafe {
        bpf_probe_read_user_str(data.as_mut_ptr() as *mut c_void, PATH_MAX as u32, path_ptr as *const c_void)
    };
    let (len, status) = if read <= 0 {
        bump(counter::PATH_UNREADABLE);
        (0usize, path_status::UNREADABLE)
    } else if read as usize >= PATH_MAX {
        // The buffer is full: the string ended exactly there or goes on.
        // SAFETY: one byte of user memory, read through the fault-safe path.
        let next = unsafe { bpf_probe_read_user((path_ptr as *const u8).wrapping_add(PATH_MAX - 1)) };
        match next {
            Ok(0u8) => (PATH_MAX - 1, path_status::WHOLE),
            _ => (PATH_MAX - 1, path_status::TOO_LONG),
        }
    } else {
        (read as usize - 1, path_status::WHOLE)
    };
    // The mask proves to the verifier what the branches above already ensure.
    (len & (PATH_MAX - 1), status)
}

/// Parent's pid and comm, and the mount namespace inode, by following
/// `current` with the offsets user space found in BTF. None where a link
/// of the chain is missing: the fields not reached keep their zeroes.
#[inline(always)]
fn fill_task_context(record: &mut CallRecord) -> Option<()> {
    if patched!(OFFSETS.valid) == 0 {
        return None;
    }
    // SAFETY: a helper without arguments; the task is only read through
    // fault-safe helpers.
    let task = unsafe { bpf_get_current_task() } as *const u8;
    if let Some(parent) = read_kernel_ptr(task, patched!(OFFSETS.task_real_parent)) {
        record.ppid = read_kernel::<i32>(parent, patched!(OFFSETS.task_tgid)).unwrap_or(0) as u32;
        record.pcomm = read_kernel::<[u8; 16]>(parent, patched!(OFFSETS.task_comm)).unwrap_or([0; 16]);
    }
    let nsproxy = read_kernel_ptr(task, patched!(OFFSETS.task_nsproxy))?;
    let mnt_ns = read_kernel_ptr(nsproxy, patched!(OFFSETS.nsproxy_mnt_ns))?;
    record.mntns = read_kernel::<u32>(mnt_ns, patched!(OFFSETS.mnt_ns_inum)).unwrap_or(0);
    Some(())
}

/// A kernel pointer read from `base + offset`; None if unreadable or null.
#[inline(always)]
fn read_kernel_ptr(base: *const u8, offset: u64) -> Option<*const u8> {
    read_kernel::<*const u8>(base, offset).filter(|p| !p.is_null())
}
