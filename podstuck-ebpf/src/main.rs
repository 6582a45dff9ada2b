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
        bpf_get_current_uid_gid,
        bpf_get_current_task, bpf_ktime_get_ns, bpf_probe_read_kernel, bpf_probe_read_user,
        generated::{bpf_loop, bpf_probe_read_kernel_str, bpf_probe_read_user_str},
    },
    macros::{map, tracepoint},
    maps::{LruHashMap, PerCpuArray, RingBuf},
    programs::TracePointContext,
};
use podstuck_common::{
    base_status, counter, path_status, CallInFlight, CallRecord, KernelFilter, KernelOffsets, Syscall,
    BASE_DIR_MAX, BASE_DIR_MAX_DEPTH, CALL_RECORD_BYTES, MAX_CALLS_IN_FLIGHT, PATH_MAX,
    RING_BUFFER_BYTES,
};

const AT_FDCWD: i32 = -100;

/// Offsets in the `syscalls:sys_enter_*` records (see their `format` files
/// in tracefs): every argument is 8 bytes wide, the first at offset 16.
const ARG0: usize = 16;
const ARG1: usize = 24;
const ARG2: usize = 32;
/// `long ret` in `syscalls:sys_exit_*`.
const RET: usize = 16;


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

#[map]
static CALLS_IN_FLIGHT: LruHashMap<u32, CallInFlight> =
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
};

/// Filled in by user space before load; the default streams everything.
#[no_mangle]
static FILTER: KernelFilter = KernelFilter { syscalls: 0xf, errors_only: 0 };

#[inline(always)]
fn bump(index: u32) {
    if let Some(slot) = COUNTERS.get_ptr_mut(index) {
        // Per-CPU slot: no other writer can interleave.
        unsafe { *slot += 1 };
    }
}

#[inline(always)]
fn enter(ctx: &TracePointContext, syscall: Syscall, dfd_at: Option<usize>, path_at: usize, flags_at: Option<usize>) {
    let pid_tgid = bpf_get_current_pid_tgid();
    let tid = pid_tgid as u32;
    let path_ptr: u64 = unsafe { ctx.read_at(path_at) }.unwrap_or(0);
    let dfd = match dfd_at {
        Some(at) => unsafe { ctx.read_at::<i64>(at) }.unwrap_or(AT_FDCWD as i64) as i32,
        None => AT_FDCWD,
    };
    let flags = match flags_at {
        Some(at) => unsafe { ctx.read_at::<u64>(at) }.unwrap_or(0),
        None => 0,
    };
    let entry = CallInFlight {
        enter_ns: unsafe { bpf_ktime_get_ns() },
        path_ptr,
        flags,
        dfd,
        pid: (pid_tgid >> 32) as u32,
        syscall: syscall as u8,
        _pad: [0; 7],
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
    let filter: KernelFilter = unsafe { core::ptr::read_volatile(&FILTER) };
    let ret = unsafe { ctx.read_at::<i64>(RET) }.unwrap_or(0);
    if filter.syscalls & (1 << syscall as u32) == 0 || (filter.errors_only != 0 && ret >= 0) {
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
    record.ret = ret;
    record.flags = entry.flags;
    record.pid = (pid_tgid >> 32) as u32;
    record.tid = tid;
    record.ppid = 0;
    record.mntns = 0;
    record.dfd = entry.dfd;
    record.syscall = syscall as u8;
    record.uid = unsafe { bpf_get_current_uid_gid() } as u32;
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
    let (base_len, base) = if relative { walk_base_dir(len, entry.dfd) } else { (0, base_status::NOT_NEEDED) };
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

/// The `struct path` (vfsmount, dentry) a relative path starts from: the
/// caller's cwd for AT_FDCWD, else the file behind `dfd`.
#[inline(always)]
fn base_path(off: &KernelOffsets, task: *const u8, dfd: i32) -> Result<(*const u8, *const u8), u8> {
    let path: *const u8 = if dfd == AT_FDCWD {
        let fs = read_kernel::<*const u8>(task, off.task_fs).ok_or(base_status::UNREADABLE)?;
        fs.wrapping_add(off.fs_pwd as usize)
    } else {
        let files = read_kernel::<*const u8>(task, off.task_files).ok_or(base_status::UNREADABLE)?;
        let fdt = read_kernel::<*const u8>(files, off.files_fdt).ok_or(base_status::UNREADABLE)?;
        let max_fds = read_kernel::<u32>(fdt, off.fdt_max_fds).ok_or(base_status::UNREADABLE)?;
        if dfd < 0 || dfd as u32 >= max_fds {
            return Err(base_status::BAD_FD);
        }
        let fds = read_kernel::<*const u8>(fdt, off.fdt_fd).ok_or(base_status::UNREADABLE)?;
        let file = read_kernel::<*const u8>(fds, (dfd as u64) * 8).ok_or(base_status::UNREADABLE)?;
        if file.is_null() {
            return Err(base_status::BAD_FD);
        }
        file.wrapping_add(off.file_f_path as usize)
    };
    let mnt = read_kernel::<*const u8>(path, off.path_mnt).ok_or(base_status::UNREADABLE)?;
    let dentry = read_kernel::<*const u8>(path, off.path_dentry).ok_or(base_status::UNREADABLE)?;
    Ok((mnt, dentry))
}

/// Where a base-directory walk stands between two steps; lives on the
/// stack of `walk_base_dir` and is handed to each `walk_step`.
#[repr(C)]
struct Walk {
    vfsmnt: u64,
    dentry: u64,
    root_mnt: u64,
    root_dentry: u64,
    path_len: u64,
    written: u64,
    status: u64,
}

/// Reads a kernel pointer; null when it cannot be read (the helper zeroes
/// its destination on failure), which keeps the verifier's paths few.
#[inline(always)]
fn read_ptr(base: u64, offset: u64) -> u64 {
    let mut value: u64 = 0;
    unsafe {
        aya_ebpf::helpers::generated::bpf_probe_read_kernel(
            &mut value as *mut u64 as *mut c_void,
            8,
            base.wrapping_add(offset) as *const c_void,
        )
    };
    value
}

/// Status of a walk still going.
const WALKING: u64 = 0xff;

/// One step up the tree: write the current directory's name, or cross to
/// the mount it sits on, or stop at the caller's root. A `bpf_loop`
/// callback, so the verifier checks one step, not every depth: a plain loop
/// of 64 steps exceeds its budget.
#[inline(never)]
extern "C" fn walk_step(_index: u64, ctx: *mut c_void) -> i64 {
    const STOP: i64 = 1;
    const GO_ON: i64 = 0;
    let walk = unsafe { &mut *(ctx as *mut Walk) };
    let off: KernelOffsets = unsafe { core::ptr::read_volatile(&OFFSETS) };
    if walk.dentry == walk.root_dentry && walk.vfsmnt == walk.root_mnt {
        walk.status = base_status::RESOLVED as u64;
        return STOP;
    }
    let mount = walk.vfsmnt.wrapping_sub(off.mount_mnt);
    if walk.dentry == read_ptr(walk.vfsmnt, off.vfsmount_root) {
        // At the root of a mount: go on from where it is mounted.
        let parent = read_ptr(mount, off.mount_parent);
        if parent == 0 || parent == mount {
            walk.status = base_status::RESOLVED as u64;
            return STOP;
        }
        walk.dentry = read_ptr(mount, off.mount_mountpoint);
        walk.vfsmnt = parent.wrapping_add(off.mount_mnt);
        return GO_ON;
    }
    let parent = read_ptr(walk.dentry, off.dentry_parent);
    if parent == 0 || parent == walk.dentry {
        // The root of a filesystem the caller's root cannot reach (a
        // detached mount): what was walked is all there is.
        walk.status = base_status::RESOLVED as u64;
        return STOP;
    }
    let written = walk.written as usize & (BASE_DIR_MAX - 1);
    if written + NAME_MAX >= BASE_DIR_MAX {
        walk.status = base_status::TOO_DEEP as u64;
        return STOP;
    }
    let Some(scratch) = SCRATCH.get_ptr_mut(0) else {
        walk.status = base_status::UNREADABLE as u64;
        return STOP;
    };
    let at = (walk.path_len as usize + written) & DATA_MASK;
    let copied = unsafe {
        bpf_probe_read_kernel_str(
            (*scratch).data.as_mut_ptr().wrapping_add(at) as *mut c_void,
            NAME_MAX as u32,
            read_ptr(walk.dentry, off.dentry_name) as *const c_void,
        )
    };
    if copied <= 0 {
        walk.status = base_status::UNREADABLE as u64;
        return STOP;
    }
    // Masked so the state at each step's start is the same for the verifier.
    walk.written = (written + (copied as usize & (2 * NAME_MAX - 1))) as u64 & (BASE_DIR_MAX as u64 - 1);
    walk.dentry = parent;
    GO_ON
}

/// Writes the base directory's names, leaf first, each NUL-terminated,
/// right after the path in `scratch.data`, walking `d_parent` and crossing
/// mounts up to the caller's root (its chroot, or its namespace's root).
/// Returns (bytes written, base_status).
#[inline(always)]
fn walk_base_dir(path_len: usize, dfd: i32) -> (usize, u8) {
    let off: KernelOffsets = unsafe { core::ptr::read_volatile(&OFFSETS) };
    if off.valid == 0 {
        return (0, base_status::NO_OFFSETS);
    }
    let task = unsafe { bpf_get_current_task() } as *const u8;
    let (vfsmnt, dentry) = match base_path(&off, task, dfd) {
        Ok(p) => p,
        Err(status) => return (0, status),
    };
    let fs = read_ptr(task as u64, off.task_fs);
    let root = fs.wrapping_add(off.fs_root);
    let mut walk = Walk {
        vfsmnt: vfsmnt as u64,
        dentry: dentry as u64,
        root_mnt: read_ptr(root, off.path_mnt),
        root_dentry: read_ptr(root, off.path_dentry),
        path_len: path_len as u64,
        written: 0,
        status: WALKING,
    };
    unsafe {
        bpf_loop(
            BASE_DIR_MAX_DEPTH,
            walk_step as *mut c_void,
            &mut walk as *mut Walk as *mut c_void,
            0,
        )
    };
    let status = if walk.status == WALKING { base_status::TOO_DEEP } else { walk.status as u8 };
    ((walk.written as usize) & (BASE_DIR_MAX - 1), status)
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
