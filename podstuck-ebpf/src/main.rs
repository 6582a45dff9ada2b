//! podstuck's kernel programs on `unlinkat`, `unlink`, `rmdir` and
//! `umount2`: fentry/fexit on the syscall functions (`__x64_sys_unlinkat`...),
//! or the syscall enter/exit tracepoints where trampolines are missing (the
//! x86_64 umount2 tracepoints are named `umount`). Never kprobes: hardened
//! nodes have none. BENCHMARKS.md has the figures behind the choice.
//!
//! At entry the arguments and the time are kept per thread. At exit every
//! call is counted in its series (process, cgroup, syscall, outcome) with an
//! exact latency histogram, added atomically in the `SERIES` map, so totals
//! stay exact whatever the ring buffer does. Only what the detectors need
//! one by one is streamed: the first calls of each series in every window,
//! slow calls, and, past the window's budget, nothing until the next window,
//! whose first record carries the count of the calls skipped.
//!
//! Small and bounded by design: the one loop (the base-directory walk) is
//! `bpf_loop`'s, or bounded at `BASE_DIR_UNROLLED_DEPTH` steps where the
//! kernel lacks it; strings go through a per-CPU scratch buffer instead of
//! the 512-byte stack, and every kernel read goes through a helper that
//! cannot fault.
#![no_std]
#![no_main]
// The BPF target has no atomics in `core`: the one atomic add is written in asm.
#![feature(asm_experimental_arch)]

mod accounting;
mod args;
mod cost;
mod path_walk;
mod programs;

use core::ffi::c_void;

use aya_ebpf::{
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid,
        bpf_get_current_uid_gid,
        bpf_get_current_task, bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_probe_read_user,
        generated::bpf_probe_read_user_str,
    },
    macros::map,
    maps::{HashMap, PerCpuArray, RingBuf},
};
use podstuck_common::{
    base_status, counter, path_status, CallInFlight, CallRecord, KernelFilter, KernelOffsets, SeriesKey, Syscall,
    BASE_DIR_MAX, CALL_RECORD_BYTES, MAX_CALLS_IN_FLIGHT, NOT_IN_A_CALL,
    PATH_MAX, RING_BUFFER_BYTES,
};

use accounting::{account, bump};
use path_walk::{walk_base_dir, PathWalk};
use args::Args;

/// Longest name of one path component (NAME_MAX + NUL).
const NAME_MAX: usize = 256;
/// `data` holds the path, then the base directory right after it; every
/// index into it is masked with this so the verifier sees it in bounds.
const DATA_MASK: usize = PATH_MAX + BASE_DIR_MAX - 1;

/// The record under construction: header, path and base directory side by
/// side, so one `bpf_ringbuf_output` sends exactly what was filled.
#[repr(C)]
struct Scratch {
    record: CallRecord,
    data: [u8; PATH_MAX + BASE_DIR_MAX + NAME_MAX],
}

/// A plain preallocated hash, not an LRU one: an LRU update costs several
/// times more on every call, and entries never outlive their call (the exit
/// removes them; user space removes those of threads gone).
#[map]
static CALLS_IN_FLIGHT: HashMap<u32, CallInFlight> = HashMap::with_max_entries(MAX_CALLS_IN_FLIGHT, 0);

#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(RING_BUFFER_BYTES, 0);

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
    task_fs: 0,
    task_files: 0,
    fs_pwd: 0,
    fs_root: 0,
    path_mnt: 0,
    path_dentry: 0,
    files_fdt: 0,
    fdt_max_fds: 0,
    fdt_fd: 0,
    file_f_path: 0,
    dentry_parent: 0,
    dentry_name: 0,
    vfsmount_root: 0,
    mount_mnt: 0,
    mount_parent: 0,
    mount_mountpoint: 0,
    regs_arg: [0; 3],
    regs_nr: 0,
};

/// Filled in by user space before load; the default streams everything.
#[no_mangle]
static FILTER: KernelFilter = KernelFilter {
    syscalls: 0xf,
    errors_only: 0,
    every_call: 0,
    window_budget: 50,
    window_ns: 100_000_000,
    slow_ns: 10_000_000,
};

#[inline(always)]
pub fn enter(syscall: Syscall, args: Args) {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    let Args { dfd, path_ptr, flags } = args;
    let entry = CallInFlight {
        enter_ns: unsafe { bpf_ktime_get_ns() },
        path_ptr,
        flags,
        dfd,
        pid: (pid_tgid >> 32) as u32,
        syscall: syscall as u8,
        _pad: [0; 7],
    };
    // A thread's entry stays between its calls, marked idle at exit:
    // rewriting it in place costs a lookup, where an insert and a delete per
    // call cost several times that.
    if let Some(slot) = CALLS_IN_FLIGHT.get_ptr_mut(&tid) {
        unsafe { *slot = entry };
        return;
    }
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
pub fn exit(syscall: Syscall, ret: i64, how: PathWalk) {
    let exit_ns = unsafe { bpf_ktime_get_ns() };
    bump(counter::CALLS + syscall as u32);
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    let entry = match CALLS_IN_FLIGHT.get_ptr_mut(&tid) {
        Some(slot) => unsafe {
            let entry = *slot;
            (*slot).syscall = NOT_IN_A_CALL;
            entry
        },
        None => {
            bump(counter::EXIT_WITHOUT_ENTRY);
            return;
        }
    };
    if entry.syscall != syscall as u8 {
        bump(counter::EXIT_WITHOUT_ENTRY);
        return;
    }
    let filter: KernelFilter = unsafe { core::ptr::read_volatile(&FILTER) };
    let cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    let key = SeriesKey {
        cgroup_id,
        pid: (pid_tgid >> 32) as u32,
        errno: if ret < 0 { (ret.wrapping_neg() as u64).min(u16::MAX as u64) as u16 } else { 0 },
        syscall: syscall as u8,
        _pad: 0,
    };
    let streamable = filter.syscalls & (1 << syscall as u32) != 0 && (filter.errors_only == 0 || ret < 0);
    let latency_ns = exit_ns.saturating_sub(entry.enter_ns);
    let Some(represents) = account(&key, latency_ns, exit_ns, streamable, &filter) else {
        return;
    };
    let scratch = match SCRATCH.get_ptr_mut(0) {
        Some(p) => unsafe { &mut *p },
        None => return,
    };
    let record = &mut scratch.record;
    record.enter_ns = entry.enter_ns;
    record.exit_ns = exit_ns;
    record.cgroup_id = cgroup_id;
    record.represents = represents;
    record.ret = ret;
    record.flags = entry.flags;
    record.pid = (pid_tgid >> 32) as u32;
    record.tid = tid;
    record.ppid = 0;
    record.mntns = 0;
    record.dfd = entry.dfd;
    record.syscall = syscall as u8;
    record.uid = bpf_get_current_uid_gid() as u32;
    record.comm = bpf_get_current_comm().unwrap_or([0; 16]);
    record.pcomm = [0; 16];
    fill_task_context(record);

    // The path is read at exit, not entry: by then the kernel has copied it
    // (getname), so its page is resident and the read cannot miss.
    let read = unsafe {
        bpf_probe_read_user_str(
            scratch.data.as_mut_ptr() as *mut c_void,
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

    // A relative path means nothing without the directory it starts from.
    let relative = status != path_status::UNREADABLE && scratch.data[0] != b'/';
    let (base_len, base) = if relative { walk_base_dir(len, entry.dfd, how) } else { (0, base_status::NOT_NEEDED) };
    scratch.record.base_len = base_len as u16;
    scratch.record.base_status = base;

    let total = (len + base_len) & DATA_MASK;
    let bytes = unsafe {
        core::slice::from_raw_parts(scratch as *const Scratch as *const u8, CALL_RECORD_BYTES + total)
    };
    if EVENTS.output::<[u8]>(bytes, 0).is_err() {
        bump(counter::RING_BUFFER_DROPS);
    }
}

#[cfg(not(test))]
#[panic_handler]
fn panic(_info: &core::panic::PanicInfo) -> ! {
    loop {}
}

#[link_section = "license"]
#[no_mangle]
static LICENSE: [u8; 4] = *b"GPL\0";
