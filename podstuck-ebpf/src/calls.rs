//! A call from entry to exit: the entry keeps the arguments and the time
//! per thread in `CALLS_IN_FLIGHT`; the exit takes them back, counts the
//! call in its series and, when the series' budget allows, streams its
//! record.

use aya_ebpf::{
    helpers::{bpf_get_current_cgroup_id, bpf_get_current_pid_tgid, bpf_ktime_get_ns},
    macros::map,
    maps::HashMap,
};
use podstuck_common::{counter, CallEntry, SeriesKey, Syscall, MAX_CALLS_IN_FLIGHT, NOT_IN_A_CALL};

use crate::{
    accounting::{account, bump},
    args::Args,
    path_walk::WalkLoop,
    record::{self, Ended},
};

/// Each thread's last call, by thread id. A plain hash, not an LRU one:
/// an LRU update costs several times more on every call, and the entries
/// are bounded without it: one per thread, kept between its calls (marked
/// idle at exit), removed by user space once the thread is gone.
/// Preallocated as written here; user space makes it grow as threads
/// appear where the kernel allows it, as for `SERIES`, and sizes it.
#[map]
static CALLS_IN_FLIGHT: HashMap<u32, CallEntry> = HashMap::with_max_entries(MAX_CALLS_IN_FLIGHT, 0);

/// Keeps a call's arguments and start time in its thread's entry, for
/// the exit.
#[allow(
    clippy::needless_borrows_for_generic_args,
    reason = "the key by reference, as the helper takes it: by value, aya copies it to a second stack slot"
)]
#[inline(always)]
pub fn enter(syscall: Syscall, args: Args) {
    let pid_tgid = bpf_get_current_pid_tgid();
    if (pid_tgid >> 32) as u32 == patched!(FILTER.own_tgid) {
        return;
    }
    let tid = pid_tgid as u32;
    let Args { dfd, path_ptr, flags } = args;
    let entry = CallEntry {
        // SAFETY: a helper without arguments; it reads the clock.
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
        // SAFETY: the lookup gave this thread's whole entry, valid for the
        // run; only this thread's calls write it.
        unsafe { *slot = entry };
        return;
    }
    if CALLS_IN_FLIGHT.insert(&tid, &entry, 0).is_err() {
        bump(counter::ENTRY_NOT_STORED);
    }
}

/// Ends the thread's call of `syscall`: counts it in its series, then
/// streams its record if the series' budget allows. None where it stops
/// early: no entry for it (counted), counted only, or no scratch buffer.
#[inline(always)]
pub fn exit(syscall: Syscall, ret: i64, how: WalkLoop) -> Option<()> {
    // SAFETY: a helper without arguments; it reads the clock.
    let exit_ns = unsafe { bpf_ktime_get_ns() };
    let pid_tgid = bpf_get_current_pid_tgid();
    // podstuck's own call (its attach check): proof the programs run, and
    // nothing of the node's.
    if (pid_tgid >> 32) as u32 == patched!(FILTER.own_tgid) {
        bump(counter::OWN_CALLS + syscall as u32);
        return None;
    }
    bump(counter::CALLS + syscall as u32);
    let tid = pid_tgid as u32;
    let entry = take_entry(tid, syscall)?;
    let key = SeriesKey {
        // SAFETY: a helper without arguments.
        cgroup_id: unsafe { bpf_get_current_cgroup_id() },
        pid: (pid_tgid >> 32) as u32,
        errno: if ret < 0 { (ret.wrapping_neg() as u64).min(u16::MAX as u64) as u16 } else { 0 },
        syscall: syscall as u8,
        _pad: 0,
    };
    let streamable =
        patched!(FILTER.syscalls) & (1 << syscall as u32) != 0 && (patched!(FILTER.errors_only) == 0 || ret < 0);
    let latency_ns = exit_ns.saturating_sub(entry.enter_ns);
    let streamed = account(&key, latency_ns, exit_ns, streamable)?;
    record::stream(&Ended { entry, key, tid, ret, exit_ns, represents: streamed.represents, wake: streamed.wake }, how)
}

/// The time since the thread's entry of `syscall`, the entry marked idle:
/// what carrying a call from entry to exit costs, alone (`cost.rs`).
#[inline(always)]
pub fn carried(syscall: Syscall) -> Option<u64> {
    // SAFETY: a helper without arguments; it reads the clock.
    let exit_ns = unsafe { bpf_ktime_get_ns() };
    let entry = take_entry(bpf_get_current_pid_tgid() as u32, syscall)?;
    Some(exit_ns.saturating_sub(entry.enter_ns))
}

/// The thread's entry, marked idle; None (counted) when it is not a call of
/// `syscall`: its entry was missed (attached mid-call) or not stored.
#[allow(
    clippy::needless_borrows_for_generic_args,
    reason = "the key by reference, as the helper takes it: by value, aya copies it to a second stack slot"
)]
#[inline(always)]
fn take_entry(tid: u32, syscall: Syscall) -> Option<CallEntry> {
    // SAFETY: as in `enter`: this thread's whole entry, valid for the run.
    let entry = CALLS_IN_FLIGHT.get_ptr_mut(&tid).map(|slot| unsafe {
        let entry = *slot;
        (*slot).syscall = NOT_IN_A_CALL;
        entry
    });
    match entry {
        Some(entry) if entry.syscall == syscall as u8 => Some(entry),
        _ => {
            bump(counter::EXIT_WITHOUT_ENTRY);
            None
        }
    }
}
