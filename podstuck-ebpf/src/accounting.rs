//! Every call counted, whatever is streamed: per-CPU counters (calls per
//! syscall, and what went wrong: see `counter`), and the `SERIES` map (one
//! entry per process, cgroup, syscall and outcome, with an exact latency
//! histogram) whose totals stay exact because every add is atomic. It also
//! holds each series' streaming budget: the first calls of a window and the
//! slow ones are streamed, the rest only counted as pending until the next
//! record carries them.

use aya_ebpf::{
    macros::map,
    maps::{Array, HashMap, PerCpuArray},
};
use podstuck_common::{
    counter, latency_bucket, series_overflow_slot, SeriesKey, SeriesValue, LATENCY_BUCKETS, MAX_SERIES,
    SERIES_OVERFLOW_SLOTS,
};

/// Indexed by `counter::*`; user space sums the CPUs.
#[map]
static COUNTERS: PerCpuArray<u64> = PerCpuArray::with_max_entries(counter::LEN, 0);

pub const BPF_NOEXIST: u64 = 1;

/// The series. Preallocated as written here; user space makes it grow as
/// series appear instead (`BPF_F_NO_PREALLOC`, patched into the object at
/// load) wherever the kernel allows that: for fentry programs, and for
/// tracepoint programs from Linux 6.1. Kernels 5.7 to 6.0 print a
/// `WARNING` (and a `panic_on_warn` node panics) when a tracepoint program
/// so much as names a hash map without prealloc, so the object never holds
/// one that is not preallocated.
#[map]
static SERIES: HashMap<SeriesKey, SeriesValue> = HashMap::with_max_entries(MAX_SERIES, 0);

/// Where calls go whose series found its series map full.
#[map]
static SERIES_OVERFLOW: PerCpuArray<SeriesValue> = PerCpuArray::with_max_entries(SERIES_OVERFLOW_SLOTS, 0);

/// One zeroed value, never written: the source of a new series (a
/// `SeriesValue` is far bigger than the 512-byte stack).
#[map]
static EMPTY_SERIES: Array<SeriesValue> = Array::with_max_entries(1, 0);

/// Counts one in `COUNTERS[index]` (an index of `counter`).
#[inline(always)]
pub fn bump(index: u32) {
    increment(&COUNTERS, index);
}

/// Adds one to slot `index` of a per-CPU array, without an atomic: each
/// CPU has its own copy of the slot.
#[inline(always)]
pub fn increment(counters: &PerCpuArray<u64>, index: u32) {
    increment_by(counters, index, 1);
}

/// Adds `n` to slot `index` of a per-CPU array, as `increment` adds one.
#[inline(always)]
pub fn increment_by(counters: &PerCpuArray<u64>, index: u32, n: u64) {
    if let Some(slot) = counters.get_ptr_mut(index) {
        // SAFETY: the lookup gave this CPU's copy of the slot, a valid,
        // aligned u64 for the whole run. Only a program preempted on this
        // CPU between the load and the store (fexit on a fully preemptible
        // kernel) could interleave: a count lost, never memory.
        unsafe { *slot += n };
    }
}

/// Adds `n` to a counter other CPUs may add to at the same time: the
/// plain atomic add (no fetch) every eBPF instruction set version has.
///
/// # Safety
/// `counter` must point to an 8-byte aligned `u64` inside a map value.
#[inline(always)]
pub unsafe fn add(counter: *mut u64, n: u64) {
    // SAFETY: the caller guarantees the target is a valid aligned u64; the
    // verifier checks the store against the map value's bounds as well.
    unsafe { core::arch::asm!("lock *(u64 *)({0} + 0) += {1}", in(reg) counter, in(reg) n) };
}

/// Adds `n` to a 32-bit counter other CPUs may add to at the same time,
/// as `add` does.
///
/// # Safety
/// `counter` must point to a 4-byte aligned `u32` inside a map value.
#[inline(always)]
unsafe fn add32(counter: *mut u32, n: u64) {
    // SAFETY: as in `add`, for a valid aligned u32. The 32-bit add takes
    // the register's low half (a 64-bit register: no alu32 here).
    unsafe { core::arch::asm!("lock *(u32 *)({0} + 0) += {1}", in(reg) counter, in(reg) n) };
}

/// The series of a call, created if new; the overflow slot of its syscall
/// and outcome when `SERIES` is full.
#[inline(always)]
fn series_of(key: &SeriesKey) -> Option<*mut SeriesValue> {
    if let Some(value) = SERIES.get_ptr_mut(key) {
        return Some(value);
    }
    if let Some(empty) = EMPTY_SERIES.get(0) {
        // Another CPU may create it first: then this insert fails and the
        // lookup below finds theirs.
        let _ = SERIES.insert(key, empty, BPF_NOEXIST);
    }
    if let Some(value) = SERIES.get_ptr_mut(key) {
        return Some(value);
    }
    bump(counter::SERIES_FULL);
    SERIES_OVERFLOW.get_ptr_mut(series_overflow_slot(key.syscall, key.errno != 0))
}

/// A call to stream: how many calls its record stands for, and whether
/// the record must wake user space.
pub struct Streamed {
    pub represents: u32,
    /// The first record of its series' window, or a slow call. The others
    /// of a burst ride along: a wakeup costs the caller more than a
    /// record's whole making (an inter-processor interrupt, on a virtual
    /// machine a trap to the host), and the reader takes them with the
    /// next wakeup, at most a window later, or on its own review tick.
    pub wake: bool,
}

/// Counts a call in its series and decides whether to stream it: None to
/// only count it.
#[inline(always)]
pub fn account(key: &SeriesKey, latency_ns: u64, now: u64, streamable: bool) -> Option<Streamed> {
    let value = series_of(key)?;
    let bucket = latency_bucket(latency_ns);
    // SAFETY: `value` is a whole SeriesValue from a map lookup, valid for
    // the run: its fields are aligned u64s, and the bound on `bucket` keeps
    // the bucket inside `buckets`.
    unsafe {
        add(&raw mut (*value).count, 1);
        add(&raw mut (*value).sum_ns, latency_ns);
        if bucket < LATENCY_BUCKETS {
            add32((&raw mut (*value).buckets as *mut u32).wrapping_add(bucket), 1);
        }
    }
    if !streamable {
        return None;
    }
    // The window's fields are plain reads and writes: two CPUs racing here
    // stream a record more or less, while `pending` below stays exact.
    // Through raw field pointers, never a reference to the value: the adds
    // to `pending` write it meanwhile.
    // SAFETY: fields of a valid SeriesValue (above), no reference made.
    let (window_start, streamed) = unsafe { (&raw mut (*value).window_start_ns, &raw mut (*value).window_streamed) };
    // SAFETY: aligned u64s of a valid SeriesValue (above); what another
    // CPU writes meanwhile are whole aligned u64s, which do not tear.
    if now.wrapping_sub(unsafe { *window_start }) >= patched!(FILTER.window_ns) {
        // SAFETY: as above.
        unsafe {
            *window_start = now;
            *streamed = 0;
        }
    }
    // SAFETY: as above.
    let streamed_before = unsafe { *streamed };
    let within_budget = streamed_before < patched!(FILTER.window_budget) as u64;
    let slow = latency_ns >= patched!(FILTER.slow_ns);
    if within_budget || patched!(FILTER.every_call) != 0 || slow {
        let wake = streamed_before == 0 || slow;
        // SAFETY: as above.
        unsafe { *streamed = streamed_before + 1 };
        // SAFETY: `pending` is an aligned u64 of a valid SeriesValue
        // (above); volatile so it is loaded once, the value subtracted below.
        let pending = unsafe { core::ptr::read_volatile(&raw const (*value).pending) };
        // Subtracts exactly what this record carries: calls other CPUs
        // count meanwhile stay pending for the next one.
        // SAFETY: `pending` of a valid SeriesValue (above).
        unsafe { add(&raw mut (*value).pending, pending.wrapping_neg()) };
        return Some(Streamed { represents: (pending as u32).saturating_add(1), wake });
    }
    // SAFETY: `pending` of a valid SeriesValue (above).
    unsafe { add(&raw mut (*value).pending, 1) };
    None
}
