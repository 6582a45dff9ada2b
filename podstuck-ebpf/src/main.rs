//! podstuck's kernel programs: syscall enter/exit tracepoints on `unlinkat`,
//! `unlink`, `rmdir` and `umount2` (its x86_64 tracepoints are `umount`).
//!
//! At entry the arguments and the time are kept per thread; at exit one
//! record (header + path argument) goes to the ring buffer and per-CPU
//! counters count every call, so totals stay exact even when the ring buffer
//! overflows. Tracepoints, not kprobes: hardened nodes have no kprobes.
//!
//! Small and bounded by design: no loops, strings go through a per-CPU
//! scratch buffer instead of the 512-byte stack, and every kernel read goes
//! through a helper that cannot fault.
#![no_std]
#![no_main]

use core::ffi::c_void;

use aya_ebpf::{
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid,
        bpf_get_current_task, bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_probe_read_user,
        generated::bpf_probe_read_user_str,
    },
    macros::{map, tracepoint},
    maps::{LruHashMap, PerCpuArray, RingBuf},
    programs::TracePointContext,
};
use podstuck_common::{
    counter, path_status, CallRecord, KernelOffsets, Syscall, CALL_RECORD_BYTES,
    MAX_CALLS_IN_FLIGHT, PATH_MAX, RING_BUFFER_BYTES,
};

const AT_FDCWD: i32 = -100;

/// Offsets in the `syscalls:sys_enter_*` records (see their `format` files
/// in tracefs): every argument is 8 bytes wide, the first at offset 16.
const ARG0: usize = 16;
const ARG1: usize = 24;
const ARG2: usize = 32;
/// `long ret` in `syscalls:sys_exit_*`.
const RET: usize = 16;

/// What is kept between a thread's entry into a traced call and its exit.
#[repr(C)]
#[derive(Clone, Copy)]
struct CallEntry {
    enter_ns: u64,
    path_ptr: u64,
    flags: u64,
    dfd: i32,
    syscall: u8,
    _pad: [u8; 3],
}

/// The record under construction: header and path side by side, so one
/// `bpf_ringbuf_output` sends exactly `header + path_len` bytes.
#[repr(C)]
struct Scratch {
    record: CallRecord,
    path: [u8; PATH_MAX],
}

#[map]
static CALLS_IN_FLIGHT: LruHashMap<u32, CallEntry> =
    LruHashMap::with_max_entries(MAX_CALLS_IN_FLIGHT, 0);

#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(RING_BUFFER_BYTES, 0);

#[map]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::LEN, 0);

#[map]
static SCRATCH: PerCpuArray<Scratch> = PerCpuArray::with_max_entries(1, 0);

/// Filled in by user space from the kernel's BTF before load.
#[no_mangle]
static OFFSETS: KernelOffsets = KernelOffsets {
    valid: 0,
    task_real_parent: 0,
    task_tgid: 0,
    task_comm: 0,
    task_nsproxy: 0,
    nsproxy_mnt_ns: 0,
    mnt_ns_inum: 0,
};

#[inline(always)]
fn bump(index: u32) {
    if let Some(slot) = COUNTERS.get_ptr_mut(index) {
        // Per-CPU slot: no other writer can interleave.
        unsafe { *slot += 1 };
    }
}

#[inline(always)]
fn enter(ctx: &TracePointContext, syscall: Syscall, dfd_at: Option<usize>, path_at: usize, flags_at: Option<usize>) {
    let tid = bpf_get_current_pid_tgid() as u32;
    let path_ptr: u64 = unsafe { ctx.read_at(path_at) }.unwrap_or(0);
    let dfd = match dfd_at {
        Some(at) => unsafe { ctx.read_at::<i64>(at) }.unwrap_or(AT_FDCWD as i64) as i32,
        None => AT_FDCWD,
    };
    let flags = match flags_at {
        Some(at) => unsafe { ctx.read_at::<u64>(at) }.unwrap_or(0),
        None => 0,
    };
    let entry = CallEntry {
        enter_ns: unsafe { bpf_ktime_get_ns() },
        path_ptr,
        flags,
        dfd,
        syscall: syscall as u8,
        _pad: [0; 3],
    };
    if CALLS_IN_FLIGHT.insert(&tid, &entry, 0).is_err() {
        bump(counter::ENTRY_NOT_STORED);
    }
}

#[inline(always)]
fn read_kernel<T>(base: *const u8, offset: u64) -> Option<T> {
    unsafe { bpf_probe_read_kernel(base.wrapping_add(offset as usize) as *const T) }.ok()
}

/// Parent's pid and comm, and the mount namespace inode, by following
/// `current` with the offsets user space found in BTF.
#[inline(always)]
fn fill_task_context(record: &mut CallRecord) {
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

#[inline(always)]
fn exit(ctx: &TracePointContext, syscall: Syscall) {
    let exit_ns = unsafe { bpf_ktime_get_ns() };
    bump(counter::CALLS + syscall as u32);
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    let entry = match unsafe { CALLS_IN_FLIGHT.get(&tid) } {
        Some(entry) => *entry,
        None => {
            bump(counter::EXIT_WITHOUT_ENTRY);
            return;
        }
    };
    let _ = CALLS_IN_FLIGHT.remove(&tid);
    if entry.syscall != syscall as u8 {
        bump(counter::EXIT_WITHOUT_ENTRY);
        return;
    }
    let scratch = match SCRATCH.get_ptr_mut(0) {
        Some(p) => unsafe { &mut *p },
        None => return,
    };
    let record = &mut scratch.record;
    record.enter_ns = entry.enter_ns;
    record.exit_ns = exit_ns;
    record.cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    record.ret = unsafe { ctx.read_at::<i64>(RET) }.unwrap_or(0);
    record.flags = entry.flags;
    record.pid = (pid_tgid >> 32) as u32;
    record.tid = tid;
    record.ppid = 0;
    record.mntns = 0;
    record.dfd = entry.dfd;
    record.syscall = syscall as u8;
    record.comm = bpf_get_current_comm().unwrap_or([0; 16]);
    record.pcomm = [0; 16];
    fill_task_context(record);

    // The path is read at exit, not entry: by then the kernel has copied it
    // (getname), so its page is resident and the read cannot miss.
    let read = unsafe {
        bpf_probe_read_user_str(
            scratch.path.as_mut_ptr() as *mut c_void,
            PATH_MAX as u32,
            entry.path_ptr as *const c_void,
        )
    };
    let (len, status) = if read <= 0 {
        bump(counter::PATH_UNREADABLE);
        (0usize, path_status::UNREADABLE)
    } else if read as usize >= PATH_MAX {
        // The buffer is full: the string ended exactly there or goes on.
        let next = unsafe { bpf_probe_read_user((entry.path_ptr as *const u8).wrapping_add(PATH_MAX - 1)) };
        match next {
            Ok(0u8) => (PATH_MAX - 1, path_status::WHOLE),
            _ => (PATH_MAX - 1, path_status::TOO_LONG),
        }
    } else {
        (read as usize - 1, path_status::WHOLE)
    };
    // The mask proves to the verifier what the branches above already ensure.
    let len = len & (PATH_MAX - 1);
    scratch.record.path_len = len as u16;
    scratch.record.path_status = status;
    let bytes = unsafe {
        core::slice::from_raw_parts(scratch as *const Scratch as *const u8, CALL_RECORD_BYTES + len)
    };
    if EVENTS.output::<[u8]>(bytes, 0).is_err() {
        bump(counter::RING_BUFFER_DROPS);
    }
}

#[tracepoint]
pub fn enter_unlinkat(ctx: TracePointContext) -> u32 {
    enter(&ctx, Syscall::Unlinkat, Some(ARG0), ARG1, Some(ARG2));
    0
}

#[tracepoint]
pub fn exit_unlinkat(ctx: TracePointContext) -> u32 {
    exit(&ctx, Syscall::Unlinkat);
    0
}

#[tracepoint]
pub fn enter_unlink(ctx: TracePointContext) -> u32 {
    enter(&ctx, Syscall::Unlink, None, ARG0, None);
    0
}

#[tracepoint]
pub fn exit_unlink(ctx: TracePointContext) -> u32 {
    exit(&ctx, Syscall::Unlink);
    0
}

#[tracepoint]
pub fn enter_rmdir(ctx: TracePointContext) -> u32 {
    enter(&ctx, Syscall::Rmdir, None, ARG0, None);
    0
}

#[tracepoint]
pub fn exit_rmdir(ctx: TracePointContext) -> u32 {
    exit(&ctx, Syscall::Rmdir);
    0
}

#[tracepoint]
pub fn enter_umount(ctx: TracePointContext) -> u32 {
    enter(&ctx, Syscall::Umount2, None, ARG0, Some(ARG1));
    0
}

#[tracepoint]
pub fn exit_umount(ctx: TracePointContext) -> u32 {
    exit(&ctx, Syscall::Umount2);
    0
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[link_section = "license"]
#[no_mangle]
static LICENSE: [u8; 4] = *b"GPL\0";
