//! The process lifecycle, for the causes of a stuck pod that never fail a
//! removal: a CNI plugin whose `DEL` keeps failing (its exec, with its
//! environment, and its exit code), a SIGTERM a container's init drops
//! (`signal_generate`'s result: ignored), a SIGKILL no exit follows.
//!
//! Filtered here so a fork or exec storm costs a bit or a word read:
//! an exec is streamed only when the file the kernel runs is one of the
//! node's CNI plugin files (`PLUGIN_INODES`' bit for its inode number,
//! then `PLUGIN_FILES`, by superblock and inode: the path its
//! caller passed is a claim, resolved in the caller's own mount namespace,
//! and a workload may name its own file `/opt/cni/bin/calico`; for a `#!`
//! script the kernel runs its interpreter, so script plugins are never
//! streamed: CNI plugins are binaries); a signal
//! only if it is SIGTERM or SIGKILL, at most once a second per process
//! (`SIGNALLED`); an exit only of a process one of those named
//! (`WATCHED`, read only while `WATCHED_COUNT` says it holds any), once,
//! at its last thread's exit (a zombie leader whose
//! thread waits in the kernel is a process still there). Records go to a
//! ring buffer of their own, so a storm of calls never crowds them out; a
//! record that does not fit is counted in `LIFECYCLE_LOST`.
//!
//! What each record says of its task comes from the kernel (cgroups,
//! start times, the file exec'd, the mount namespace), so user space can
//! tell what the kernel proved from what a workload claims (its comm, its
//! environment). A signal's record also says whether its target's process
//! was already exiting when the signal came, read from the target task on
//! the raw tracepoint (`lifecycle_signal_task`): the kernel reports a
//! SIGTERM to a dying process as "ignored" (6.x) or "delivered" (5.10),
//! and either would otherwise read as a process that SIGTERM cannot end.
//! Under lockdown, where that read is forbidden, the plain tracepoint's
//! twin (`lifecycle_signal`) still sees every signal, its exit state unread.

use aya_ebpf::{
    helpers::{
        bpf_get_current_cgroup_id, bpf_get_current_comm, bpf_get_current_pid_tgid, bpf_get_current_task,
        bpf_ktime_get_ns,
        generated::{bpf_probe_read_kernel_str, bpf_probe_read_user},
    },
    macros::{btf_tracepoint, map, raw_tracepoint, tracepoint},
    maps::{Array, HashMap, LruHashMap, PerCpuArray, RingBuf},
    programs::{BtfTracePointContext, RawTracePointContext, TracePointContext},
    EbpfContext,
};
use podstuck_common::{lifecycle, lifecycle::flags, program, LifecycleRecord, PluginFile, LIFECYCLE_RECORD_BYTES};

use crate::record::{read_kernel_ptr, v1_cgroup};
use crate::{
    accounting::{add, increment, BPF_NOEXIST},
    kernel_reads, read_kernel,
};

mod connect;
mod plugin_write;

#[map]
static LIFECYCLE: RingBuf = RingBuf::with_byte_size(lifecycle::RING_BUFFER_BYTES, 0);

/// Slot 0: records that did not fit in `LIFECYCLE`.
#[map]
static LIFECYCLE_LOST: PerCpuArray<u64> = PerCpuArray::with_max_entries(1, 0);

/// The node's CNI plugin files, filled and kept current by user space
/// (the plugin directories as the node's runtime configures them).
/// Preallocated, as every map a tracepoint program uses.
#[map]
static PLUGIN_FILES: HashMap<PluginFile, u8> = HashMap::with_max_entries(lifecycle::PLUGIN_FILES_MAX, 0);

/// The plugin files' inode numbers, a bit each (`lifecycle::plugin_inode_bit`),
/// set by user space with `PLUGIN_FILES`: an exec of any other file
/// passes on one bit of a small array, where the hash lookup in
/// `PLUGIN_FILES` cost some 70 ns an exec, most of the exec program's time
/// above a do-nothing one's.
#[map]
static PLUGIN_INODES: Array<u64> = Array::with_max_entries(lifecycle::PLUGIN_INODE_WORDS, 0);

/// Processes whose exit is streamed: a plugin exec'd, or sent SIGTERM or
/// SIGKILL. LRU, so a flood of signals evicts the oldest.
#[map]
static WATCHED: LruHashMap<u32, u8> = LruHashMap::with_max_entries(lifecycle::WATCHED_MAX, 0);

/// Plugin processes running (exec'd from one of `PLUGIN_FILES`), with how
/// many of their writes were streamed (`plugin_write`); taken out at
/// their exit. LRU, as `WATCHED`.
#[map]
static PLUGINS: LruHashMap<u32, u32> = LruHashMap::with_max_entries(lifecycle::WATCHED_MAX, 0);

/// Slot 0: at least as many as `WATCHED` holds (the LRU's evictions are
/// not subtracted, so it may stay above). Every thread's exit reads it
/// first: a lookup in `WATCHED`, a cold hash table by the time a process
/// exits, cost some 300 ns an exit on a node that watches nothing, which
/// is most of the time; this one small, read-mostly value is in cache.
#[map]
static WATCHED_COUNT: Array<u64> = Array::with_max_entries(1, 0);

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

/// Field offsets in `signal_generate`'s record (its `format` file, the
/// same from 5.10 to 6.18). A plain tracepoint, not a raw one: its fields
/// need no kernel read, so signals are seen under lockdown too.
mod at {
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
/// says of the current task (the path and environment fields as they are).
#[inline(always)]
fn start(kind: u8) -> Option<&'static mut Buffer> {
    let buffer = LIFECYCLE_SCRATCH.get_ptr_mut(0)?;
    // SAFETY: this CPU's element of a per-CPU array, valid for the whole
    // run; a tracepoint program is never nested on its CPU.
    let buffer = unsafe { &mut *buffer };
    fill(buffer, kind);
    Some(buffer)
}

/// The header of a record of `kind`: what every record says of the
/// current task, the kernel's facts (cgroups, start times) beside its
/// name.
#[inline(always)]
fn fill(buffer: &mut Buffer, kind: u8) {
    let r = &mut buffer.record;
    let pid_tgid = bpf_get_current_pid_tgid();
    r.ns = unsafe { bpf_ktime_get_ns() };
    r.cgroup_id = unsafe { bpf_get_current_cgroup_id() };
    r.pid = (pid_tgid >> 32) as u32;
    r.ppid = 0;
    r.v1_cgroup_id = 0;
    r.v1_hierarchy = 0;
    r.start_ns = 0;
    r.parent_start_ns = 0;
    r.file_ino = 0;
    r.file_dev = 0;
    r.mntns = 0;
    r.target_pid = 0;
    r.sig = 0;
    r.result = 0;
    r.group = 0;
    r.exit_code = 0;
    r.env_total = 0;
    r.filename_len = 0;
    r.env_len = 0;
    r.kind = kind;
    r.flags = 0;
    r.comm = bpf_get_current_comm().unwrap_or([0; 16]);
    r.target_comm = [0; 16];
    let task = unsafe { bpf_get_current_task() } as *const u8;
    if let Some((id, hierarchy)) = v1_cgroup(task) {
        r.v1_cgroup_id = id;
        r.v1_hierarchy = hierarchy;
    }
    if let Some(start) = process_start(task) {
        r.start_ns = start;
        r.flags |= flags::START_READ;
    }
    if let Some(parent) = read_kernel_ptr(task, patched!(OFFSETS.task_real_parent)) {
        r.ppid = read_kernel::<u32>(parent, patched!(OFFSETS.task_tgid)).unwrap_or(0);
        if let Some(start) = process_start(parent) {
            r.parent_start_ns = start;
            r.flags |= flags::PARENT_START_READ;
        }
    }
}

/// When the process of `task` started: its leader's `start_boottime`.
#[inline(always)]
fn process_start(task: *const u8) -> Option<u64> {
    let leader = read_kernel_ptr(task, patched!(OFFSETS.task_group_leader))?;
    read_kernel::<u64>(leader, patched!(OFFSETS.task_start_boottime))
}

/// Whether a record of `key` is due: none was streamed within `every_ns`
/// (as `told` remembers them, LRU); if so, it is marked streamed now.
#[inline(always)]
fn due(told: &LruHashMap<u64, u64>, key: u64, every_ns: u64) -> bool {
    let now = unsafe { bpf_ktime_get_ns() };
    // SAFETY: a plain u64 read from the map's value.
    if let Some(last) = unsafe { told.get(key) } {
        if now.wrapping_sub(*last) < every_ns {
            return false;
        }
    }
    let _ = told.insert(key, now, 0);
    true
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

/// Watches process `pid`: its exit will be streamed. Counted before it is
/// added, so an exit on another CPU that finds the count at zero came
/// before the entry (within the nanoseconds two loads may be reordered
/// on arm64: the race a signal already runs with its target's exit); an
/// entry already there (a second signal) is counted once.
#[inline(always)]
fn watch(pid: u32) {
    count_watched(1);
    if WATCHED.insert(pid, 1, BPF_NOEXIST).is_err() {
        count_watched(u64::MAX);
    }
}

/// Adds `n` (modulo 2^64: `u64::MAX` takes one away) to `WATCHED_COUNT`.
#[inline(always)]
fn count_watched(n: u64) {
    if let Some(count) = WATCHED_COUNT.get_ptr_mut(0) {
        // SAFETY: slot 0 of an array map, an aligned u64 for the whole run.
        unsafe { add(count, n) };
    }
}

/// `WATCHED_COUNT`, as another CPU last added to it.
#[inline(always)]
fn watched_count() -> Option<u64> {
    let count = WATCHED_COUNT.get_ptr(0)?;
    // SAFETY: as in `count_watched`; volatile, as other CPUs add to it.
    Some(unsafe { core::ptr::read_volatile(count) })
}

/// On `sched_process_exec(struct task_struct *p, pid_t old_pid, struct
/// linux_binprm *bprm)`: raw, for the `bprm` a plain tracepoint lacks.
#[raw_tracepoint(tracepoint = "sched_process_exec")]
pub fn lifecycle_exec(ctx: RawTracePointContext) -> i32 {
    let _ = exec(&ctx);
    0
}
named_as!(lifecycle_exec, program::LIFECYCLE_EXEC);

#[inline(always)]
fn exec(ctx: &RawTracePointContext) -> Option<()> {
    if !kernel_reads() {
        return None;
    }
    // The file first: every exec on the node passes here, and only the
    // node's plugin files are worth a header.
    let bprm: *const u8 = ctx.arg(2);
    let file = read_kernel_ptr(bprm, patched!(OFFSETS.binprm_file))?;
    let inode = read_kernel_ptr(file, patched!(OFFSETS.file_f_inode))?;
    let ino = read_kernel::<u64>(inode, patched!(OFFSETS.inode_ino))?;
    exec_of(bprm, inode, ino)
}

/// The same, as a BTF tracepoint (`tp_btf`): its arguments are typed
/// kernel pointers the verifier knows, so the three reads every exec of
/// the node pays are plain loads (each a fault-safe load the verifier
/// checks against the kernel's BTF, where a read helper costs a call and
/// its checks). Attached instead of `lifecycle_exec` where the kernel
/// takes it; the rest, for a plugin's exec only, is the same.
#[btf_tracepoint(function = "sched_process_exec")]
pub fn lifecycle_exec_btf(ctx: BtfTracePointContext) -> i32 {
    let _ = exec_btf(&ctx);
    0
}
named_as!(lifecycle_exec_btf, program::LIFECYCLE_EXEC_BTF);

#[inline(always)]
fn exec_btf(ctx: &BtfTracePointContext) -> Option<()> {
    // No test of `KERNEL_READS`: attached only where kernel memory may be
    // read, and a test is one more cache line every exec of the node pays.
    let bprm: *const u8 = ctx.arg(2);
    let (at_file, at_inode, at_ino) =
        (patched!(OFFSETS.binprm_file), patched!(OFFSETS.file_f_inode), patched!(OFFSETS.inode_ino));
    // SAFETY: `bprm` is the tracepoint's `struct linux_binprm *`; each load
    // is at a field's offset from BTF, of that field's size, which the
    // verifier checks against the kernel's own BTF and makes fault-safe.
    let file = unsafe { load::<*const u8>(bprm, at_file) };
    if file.is_null() {
        return None;
    }
    // SAFETY: as above, `struct file`'s `f_inode`.
    let inode = unsafe { load::<*const u8>(file, at_inode) };
    if inode.is_null() {
        return None;
    }
    // SAFETY: as above, `struct inode`'s `i_ino`.
    let ino = unsafe { load::<u64>(inode, at_ino) };
    exec_of(bprm, inode, ino)
}

/// The `T` at `base + offset`, a plain load.
///
/// # Safety
/// `base` is a BTF-typed pointer of a BTF program and `offset` a field of
/// its type of `T`'s size: the verifier refuses anything else.
#[inline(always)]
unsafe fn load<T: Copy>(base: *const u8, offset: u64) -> T {
    // SAFETY: as the caller guarantees.
    unsafe { core::ptr::read_volatile(base.add(offset as usize) as *const T) }
}

/// An exec of the file whose inode is `inode` (number `ino`), by `bprm`:
/// streamed if the file is one of the node's CNI plugins.
#[inline(always)]
fn exec_of(bprm: *const u8, inode: *const u8, ino: u64) -> Option<()> {
    let (word, bit) = lifecycle::plugin_inode_bit(ino);
    if PLUGIN_INODES.get(word)? & bit == 0 {
        return None;
    }
    let sb = read_kernel_ptr(inode, patched!(OFFSETS.inode_sb))?;
    let dev = read_kernel::<u32>(sb, patched!(OFFSETS.sb_dev))?;
    let key = PluginFile { ino, dev, _pad: 0 };
    // SAFETY: a lookup whose value is only tested for presence.
    unsafe { PLUGIN_FILES.get(key) }?;
    let buffer = start(lifecycle::EXEC)?;
    buffer.record.file_ino = ino;
    buffer.record.file_dev = dev;
    let task = unsafe { bpf_get_current_task() } as *const u8;
    buffer.record.mntns = mount_namespace(task).unwrap_or(0);
    // The path as its caller passed it: evidence, never a key.
    if let Some(name) = read_kernel_ptr(bprm, patched!(OFFSETS.binprm_filename)) {
        // SAFETY: the helper copies at most the buffer's size through the
        // kernel's fault-safe path and NUL-terminates.
        let read = unsafe {
            bpf_probe_read_kernel_str(
                buffer.filename.as_mut_ptr() as *mut _,
                lifecycle::FILENAME_MAX as u32,
                name as *const _,
            )
        };
        if read > 0 {
            buffer.record.filename_len = ((read as usize - 1) & (lifecycle::FILENAME_MAX - 1)) as u16;
        }
    }
    let (kept, total) = read_env(task, &mut buffer.env);
    buffer.record.env_len = kept as u16;
    buffer.record.env_total = total;
    watch(buffer.record.pid);
    let _ = PLUGINS.insert(buffer.record.pid, 0, 0);
    // The environment follows the whole filename buffer, so its offset is
    // a constant: user space reads `filename_len` bytes of the one and
    // `env_len` of the other.
    send(buffer, lifecycle::FILENAME_MAX + kept);
    Some(())
}

/// The mount namespace `task` lives in (`nsproxy->mnt_ns->ns.inum`).
#[inline(always)]
fn mount_namespace(task: *const u8) -> Option<u32> {
    let nsproxy = read_kernel_ptr(task, patched!(OFFSETS.task_nsproxy))?;
    let mnt_ns = read_kernel_ptr(nsproxy, patched!(OFFSETS.nsproxy_mnt_ns))?;
    read_kernel::<u32>(mnt_ns, patched!(OFFSETS.mnt_ns_inum))
}

/// The new program's environment (`mm.env_start..env_end`), up to ENV_MAX
/// bytes kept, and its whole length: written by exec just before this
/// tracepoint, so resident. A longer one is cut here, and user space knows.
#[inline(always)]
fn read_env(task: *const u8, env: &mut [u8; lifecycle::ENV_MAX]) -> (usize, u32) {
    let Some(mm) = read_kernel_ptr(task, patched!(OFFSETS.task_mm)) else { return (0, 0) };
    let (Some(start), Some(end)) =
        (read_kernel::<u64>(mm, patched!(OFFSETS.mm_env_start)), read_kernel::<u64>(mm, patched!(OFFSETS.mm_env_end)))
    else {
        return (0, 0);
    };
    if end <= start {
        return (0, 0);
    }
    let total = end - start;
    let len = if total > lifecycle::ENV_MAX as u64 { lifecycle::ENV_MAX as u64 } else { total };
    // Masked for the verifier: 1..=ENV_MAX.
    let len = ((len - 1) & (lifecycle::ENV_MAX as u64 - 1)) + 1;
    let total = if total > u32::MAX as u64 { u32::MAX } else { total as u32 };
    // SAFETY: at most `len` bytes into a buffer of ENV_MAX, through the
    // fault-safe path: a page not resident is an error, never a fault.
    let read = unsafe { bpf_probe_read_user(env.as_mut_ptr() as *mut _, len as u32, start as *const _) };
    if read == 0 {
        (len as usize, total)
    } else {
        (0, total)
    }
}

/// On `sched_process_exit(struct task_struct *p)`, raw: the program reads
/// only the current task, and a raw tracepoint spares every exit of the
/// node the plain one's record (comm, pid, prio) and podstuck's stop a
/// perf event to tear down (one RCU grace period each, under a kernel lock
/// the syscall tracepoints' teardowns queue on).
#[raw_tracepoint(tracepoint = "sched_process_exit")]
pub fn lifecycle_exit(_ctx: RawTracePointContext) -> i32 {
    let _ = exit();
    0
}
named_as!(lifecycle_exit, program::LIFECYCLE_EXIT);

#[inline(always)]
fn exit() -> Option<()> {
    // Every thread of the node passes here: one read while nothing is
    // watched, one lookup for those of no process watched.
    if watched_count()? == 0 {
        return None;
    }
    let pid_tgid = bpf_get_current_pid_tgid();
    let (pid, tid) = ((pid_tgid >> 32) as u32, pid_tgid as u32);
    // SAFETY: a lookup whose value is only tested for presence.
    unsafe { WATCHED.get(pid) }?;
    let task = unsafe { bpf_get_current_task() } as *const u8;
    // The process ends with its last thread: do_exit drops `signal->live`
    // before this tracepoint. Where kernel memory cannot be read
    // (lockdown), the leader's exit, said as such.
    let last = read_kernel_ptr(task, patched!(OFFSETS.task_signal))
        .and_then(|signal| read_kernel::<i32>(signal, patched!(OFFSETS.signal_live)));
    match last {
        Some(0) => {}
        Some(_) => return None,
        None if pid != tid => return None,
        None => {}
    }
    if WATCHED.remove(pid).is_ok() {
        count_watched(u64::MAX);
    }
    let _ = PLUGINS.remove(pid);
    let buffer = start(lifecycle::EXIT)?;
    if last.is_some() {
        buffer.record.flags |= flags::LAST_THREAD;
    }
    if let Some(code) = read_kernel::<i32>(task, patched!(OFFSETS.task_exit_code)) {
        buffer.record.exit_code = code;
        buffer.record.flags |= flags::EXIT_CODE_READ;
    }
    send(buffer, 0);
    Some(())
}

/// On the tracepoint `signal:signal_generate`: its fields need no kernel
/// read, so this is the program attached under lockdown.
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
    // Four aligned loads at constant offsets: the verifier refuses a load
    // through a context pointer moved by a variable, as a byte loop is.
    let mut comm = [0u8; 16];
    for (i, word) in [0usize, 4, 8, 12].into_iter().enumerate() {
        let v = ctx_i32(ctx, at::SIG_COMM + word).to_ne_bytes();
        comm[i * 4..i * 4 + 4].copy_from_slice(&v);
    }
    let sent = Sent { sig, target, group: ctx_i32(ctx, at::SIG_GROUP), result: ctx_i32(ctx, at::SIG_RESULT), comm };
    stream_signal(&sent, None)
}

/// On `signal_generate(int sig, struct kernel_siginfo *info, struct
/// task_struct *task, int group, int result)`, raw: the target task
/// itself, whose process's exit state is read as the signal is generated,
/// which no field of the plain tracepoint says.
#[raw_tracepoint(tracepoint = "signal_generate")]
pub fn lifecycle_signal_task(ctx: RawTracePointContext) -> i32 {
    let _ = signal_task(&ctx);
    0
}
named_as!(lifecycle_signal_task, program::LIFECYCLE_SIGNAL_TASK);

#[inline(always)]
fn signal_task(ctx: &RawTracePointContext) -> Option<()> {
    let sig: i32 = ctx.arg(0);
    if sig != SIGTERM && sig != SIGKILL {
        return None;
    }
    let task: *const u8 = ctx.arg(2);
    let target = read_kernel::<i32>(task, patched!(OFFSETS.task_pid))? as u32;
    let comm = read_kernel::<[u8; 16]>(task, patched!(OFFSETS.task_comm)).unwrap_or([0; 16]);
    let sent = Sent { sig, target, group: ctx.arg(3), result: ctx.arg(4), comm };
    stream_signal(&sent, exiting_before(task, sig))
}

/// `signal_struct.flags` of a process in group exit: `SIGNAL_GROUP_EXIT`
/// (0x4 in every kernel since 2.6), or 5.10's `SIGNAL_GROUP_COREDUMP` (0x8,
/// a fatal signal's core dump before the exit; the bit is unused from
/// 5.17, where the dump sets `SIGNAL_GROUP_EXIT` itself). `#define`s, so
/// in no BTF: fixed here.
const GROUP_EXIT_FLAGS: u32 = 0x4 | 0x8;

/// Whether the process of `task` was already exiting before signal `sig`:
/// every thread past its exit (`live` at 0: a process of one thread that
/// called exit, on kernels where that sets no flag), or in group exit (a
/// fatal signal delivered, exit_group, a core dump) that another cause
/// began. The tracepoint fires last in `__send_signal`, after the kernel
/// acted on the signal: a SIGTERM at its default action has begun the
/// group exit itself by then, with its own number as `group_exit_code`
/// (a fatal signal's number, exit_group's status shifted by 8: never 15
/// or 9 but for those signals), which tells it from one that came to a
/// process dying already. None where it cannot be read.
#[inline(always)]
fn exiting_before(task: *const u8, sig: i32) -> Option<bool> {
    let signal = read_kernel_ptr(task, patched!(OFFSETS.task_signal))?;
    let flags = read_kernel::<u32>(signal, patched!(OFFSETS.signal_flags))?;
    let code = read_kernel::<i32>(signal, patched!(OFFSETS.signal_group_exit_code))?;
    let live = read_kernel::<i32>(signal, patched!(OFFSETS.signal_live))?;
    Some(live == 0 || (flags & GROUP_EXIT_FLAGS != 0 && code != sig))
}

/// A signal as `signal_generate` tells it, from either program.
struct Sent {
    sig: i32,
    /// The target task's id (the process's, for a signal to the process).
    target: u32,
    group: i32,
    result: i32,
    comm: [u8; 16],
}

/// Streams `sent` (SIGTERM or SIGKILL), at most once a second per target
/// and signal, with its target's exit state if it was read.
#[inline(always)]
fn stream_signal(sent: &Sent, exiting: Option<bool>) -> Option<()> {
    let (sig, target) = (sent.sig, sent.target);
    if !due(&SIGNALLED, (target as u64) << 8 | sig as u64, SIGNAL_EVERY_NS) {
        return None;
    }
    let buffer = start(lifecycle::SIGNAL)?;
    buffer.record.sig = sig;
    buffer.record.target_pid = target;
    buffer.record.group = sent.group;
    buffer.record.result = sent.result;
    buffer.record.target_comm = sent.comm;
    match exiting {
        Some(true) => buffer.record.flags |= flags::EXIT_STATE_READ | flags::GROUP_EXITING,
        Some(false) => buffer.record.flags |= flags::EXIT_STATE_READ,
        None => {}
    }
    watch(target);
    send(buffer, 0);
    Some(())
}
