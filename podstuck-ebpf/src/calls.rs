//! A call from entry to exit: the entry keeps the arguments and the time
//! per thread in `CALLS_IN_FLIGHT`; the exit takes them back, counts the
//! call in its series and, when the series' budget allows, streams its
//! record.

use core::ffi::c_void;

use aya_ebpf::{
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_current_uid_gid,
        bpf_ktime_get_ns, bpf_probe_read_user, generated::bpf_probe_read_user_str,
    },
    macros::map,
    maps::HashMap,
};
use podstuck_common::{
    base_status, counter, path_status, CallInFlight, KernelFilter, SeriesKey, Syscall, CALL_RECORD_BYTES,
    MAX_CALLS_IN_FLIGHT, NOT_IN_A_CALL, PATH_MAX,
};

use crate::{
    accounting::{account, bump},
    args::Args,
    path_walk::{walk_base_dir, PathWalk},
    record::{fill_task_context, Scratch, DATA_MASK, EVENTS, SCRATCH},
    FILTER,
};

/// A plain preallocated hash, not an LRU one: an LRU update costs several
/// times more on every call, and entries never outlive their call (the exit
/// removes them; user space removes those of threads gone).
#[map]
static CALLS_IN_FLIGHT: HashMap<u32, CallInFlight> = HashMap::with_max_entries(MAX_CALLS_IN_FLIGHT, 0);

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
