//! The record streamed for a call: its header (times, ids, outcome, the
//! task's parent and mount namespace), the path as the caller passed it,
//! and for a relative path the base directory it starts from, made in the
//! scratch buffer (`scratch`) and sent with one ring buffer output of
//! exactly the bytes filled.

use aya_ebpf::{
    helpers::{bpf_get_current_comm, bpf_get_current_task, bpf_get_current_uid_gid, bpf_probe_read_user},
    macros::map,
    maps::RingBuf,
};
use podstuck_common::{
    base_status, counter, path_status, CallEntry, CallRecord, SeriesKey, PATH_MAX, RING_BUFFER_BYTES,
};

use crate::{
    accounting::bump,
    path_walk::{walk_base_dir, WalkLoop},
    read_kernel,
    scratch::Scratch,
};

/// The records to user space; it may resize the ring at load.
#[map]
static EVENTS: RingBuf = RingBuf::with_byte_size(RING_BUFFER_BYTES, 0);

/// What the exit knows of a call: all its record's header needs.
pub struct Ended {
    pub entry: CallEntry,
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
pub fn stream(call: &Ended, how: WalkLoop) -> Option<()> {
    let scratch = Scratch::this_cpu()?;
    // SAFETY: the header's only reference while fill_header runs, which
    // reaches nothing else of the buffer (helpers that read the task).
    fill_header(unsafe { scratch.header() }, call);
    let (len, status) = read_path(scratch, call.entry.path_ptr);
    scratch.set_path(len as u16, status);

    // A relative path means nothing without the directory it starts from.
    // From here on what is known of the path is read back from the buffer
    // (volatile reads), so the verifier carries on with one state, not one
    // per way the path read ended.
    let relative = scratch.path_status() != path_status::UNREADABLE && scratch.path_first_byte() != b'/';
    let (base_len, base) = if relative { walk_base_dir(call.entry.dfd, how) } else { (0, base_status::NOT_NEEDED) };
    scratch.set_base(base_len as u16, base);

    let data_len = scratch.path_len() as usize + scratch.base_len() as usize;
    // Forced, not left to the kernel's "wake if the reader had caught up":
    // records sent without a wakeup may still be waiting. With every call
    // streamed, the kernel's own rule for all: the reader keeps up with a
    // ring that may be small, where records left waiting would be lost.
    let wakeup = match (call.wake, patched!(FILTER.every_call) != 0) {
        (true, _) => BPF_RB_FORCE_WAKEUP,
        (false, true) => 0,
        (false, false) => BPF_RB_NO_WAKEUP,
    };
    if scratch.output(&EVENTS, data_len, wakeup).is_err() {
        bump(counter::RING_BUFFER_DROPS);
    }
    Some(())
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
    record.v1_cgroup_id = 0;
    record.v1_hierarchy = 0;
    record.dfd = call.entry.dfd;
    record.syscall = call.key.syscall;
    record.uid = bpf_get_current_uid_gid() as u32;
    record.comm = bpf_get_current_comm().unwrap_or([0; 16]);
    record.pcomm = [0; 16];
    // What cannot be read of the task context stays zero.
    let _ = fill_task_context(record);
}

/// The caller's path, copied to the start of the scratch buffer's data:
/// its length (without the NUL) and `path_status`. Read at exit, not entry:
/// by then the kernel has copied it (getname), so its page is resident and
/// the read cannot miss.
#[inline(always)]
fn read_path(scratch: Scratch, path_ptr: u64) -> (usize, u8) {
    let read = scratch.copy_path(path_ptr);
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
    if let Some((id, hierarchy)) = v1_cgroup(task) {
        record.v1_cgroup_id = id;
        record.v1_hierarchy = hierarchy;
    }
    let nsproxy = read_kernel_ptr(task, patched!(OFFSETS.task_nsproxy))?;
    let mnt_ns = read_kernel_ptr(nsproxy, patched!(OFFSETS.nsproxy_mnt_ns))?;
    record.mntns = read_kernel::<u32>(mnt_ns, patched!(OFFSETS.mnt_ns_inum)).unwrap_or(0);
    Some(())
}

/// The task's cgroup in the v1 hierarchies user space chose, tried in
/// its order: `task->cgroups->subsys[i]->cgroup->kn->id` of the first
/// hierarchy where the task is below the root (its css has a parent), with
/// that hierarchy's place in the list; else the first hierarchy's root. On
/// v1 nodes a pod is known by its cgroup, and the caller may be gone before
/// user space can read `/proc/<pid>/cgroup`; a hierarchy the caller was
/// never moved into (a runtime that joins only some) is passed over.
#[inline(always)]
pub(crate) fn v1_cgroup(task: *const u8) -> Option<(u64, u8)> {
    let slots = patched!(OFFSETS.v1_subsys);
    let css_set = read_kernel_ptr(task, patched!(OFFSETS.task_cgroups))?;
    let mut root = None;
    // A constant bound: unrolled, never a loop to the verifier of 5.10.
    for (slot, subsys) in slots.iter().enumerate() {
        // CGROUP_SUBSYS_COUNT is below 16 on every kernel; the bound keeps
        // the verifier from wondering.
        if *subsys == 0 || *subsys > 16 {
            continue;
        }
        let Some(css) = read_kernel_ptr(css_set, patched!(OFFSETS.css_set_subsys) + (*subsys - 1) * 8) else {
            continue;
        };
        let Some(id) = css_cgroup_id(css) else { continue };
        if read_kernel_ptr(css, patched!(OFFSETS.css_parent)).is_some() {
            return Some((id, slot as u8));
        }
        root = root.or(Some((id, slot as u8)));
    }
    root
}

/// The kernfs id (the directory's inode number) of a css's cgroup.
#[inline(always)]
fn css_cgroup_id(css: *const u8) -> Option<u64> {
    let cgroup = read_kernel_ptr(css, patched!(OFFSETS.css_cgroup))?;
    let kn = read_kernel_ptr(cgroup, patched!(OFFSETS.cgroup_kn))?;
    read_kernel::<u64>(kn, patched!(OFFSETS.kernfs_node_id))
}

/// A kernel pointer read from `base + offset`; None if unreadable or null.
#[inline(always)]
pub(crate) fn read_kernel_ptr(base: *const u8, offset: u64) -> Option<*const u8> {
    read_kernel::<*const u8>(base, offset).filter(|p| !p.is_null())
}
