//! What attaching alone costs: do-nothing programs for `podstuck
//! attach-cost` (the benchmark's comparison of attach points), each pair
//! only counting unlinkat calls in `ATTACH_COST`, at entry and at exit;
//! and the process lifecycle's trio, counting every exec, exit and signal.
//! `cost_fentry` also serves as the probe of whether fentry attaches here.
//!
//! Two variants of the tracepoint pair measure what an exact latency costs
//! before anything is counted, on the machine at hand (`cargo xtask
//! bench`'s target for podstuck's own programs follows from them): the
//! clocks alone (one read at entry, one at exit), and the clocks with the
//! per-thread entry carried from entry to exit, podstuck's own code for it
//! (`calls::enter`, `calls::carried`).

use aya_ebpf::{
    macros::{btf_tracepoint, fentry, fexit, map, raw_tracepoint, tracepoint},
    maps::PerCpuArray,
    programs::{BtfTracePointContext, FEntryContext, FExitContext, RawTracePointContext, TracePointContext},
};

use aya_ebpf::helpers::bpf_ktime_get_ns;
use podstuck_common::{program, Syscall};

use crate::{
    accounting::{increment, increment_by},
    args::Args,
    calls, patched, read_kernel,
};

/// Calls seen at entry and at exit, per CPU; the lifecycle trio counts
/// execs at entry, exits at exit and signals in the third slot.
#[map]
static ATTACH_COST: PerCpuArray<u64> = PerCpuArray::with_max_entries(3, 0);
const AT_ENTRY: u32 = 0;
const AT_EXIT: u32 = 1;
const AT_SIGNAL: u32 = 2;

/// The syscall number the raw and BTF `sys_enter`/`sys_exit` programs keep
/// (set by user space: it is the architecture's).
#[no_mangle]
static UNLINKAT_NR: u64 = 263;

#[inline(always)]
fn count_attach(at: u32) {
    increment(&ATTACH_COST, at);
}

/// The syscall number in the caller's registers (`orig_ax` on x86_64).
#[inline(always)]
fn syscall_nr(regs: *const u8) -> u64 {
    read_kernel::<u64>(regs, patched!(OFFSETS.regs_nr)).unwrap_or(u64::MAX)
}

#[inline(always)]
fn wanted_nr() -> u64 {
    patched(&UNLINKAT_NR)
}

#[tracepoint]
pub fn cost_tracepoint_enter(_ctx: TracePointContext) -> u32 {
    count_attach(AT_ENTRY);
    0
}
named_as!(cost_tracepoint_enter, program::COST_TRACEPOINT_ENTER);

#[tracepoint]
pub fn cost_tracepoint_exit(_ctx: TracePointContext) -> u32 {
    count_attach(AT_EXIT);
    0
}
named_as!(cost_tracepoint_exit, program::COST_TRACEPOINT_EXIT);

/// Counts one call at `at`, through a value the compiler cannot know is
/// zero (a clock's or a latency's top bit), so the read that makes it is
/// kept and costs what it costs in podstuck's programs.
#[inline(always)]
fn count_attach_after(at: u32, value: u64) {
    increment_by(&ATTACH_COST, at, 1 + (value >> 63));
}

#[tracepoint]
pub fn cost_clocks_enter(_ctx: TracePointContext) -> u32 {
    // SAFETY: a helper without arguments; it reads the clock.
    count_attach_after(AT_ENTRY, unsafe { bpf_ktime_get_ns() });
    0
}
named_as!(cost_clocks_enter, program::COST_CLOCKS_ENTER);

#[tracepoint]
pub fn cost_clocks_exit(_ctx: TracePointContext) -> u32 {
    // SAFETY: as above.
    count_attach_after(AT_EXIT, unsafe { bpf_ktime_get_ns() });
    0
}
named_as!(cost_clocks_exit, program::COST_CLOCKS_EXIT);

/// The clocks and the thread's entry, as podstuck's programs keep it: the
/// entry written at entry (arguments left out: reading them is the
/// tracepoint's record, not the entry's cost), taken back at exit.
#[tracepoint]
pub fn cost_entry_enter(_ctx: TracePointContext) -> u32 {
    calls::enter(Syscall::Unlinkat, Args { dfd: 0, path_ptr: 0, flags: 0 });
    count_attach(AT_ENTRY);
    0
}
named_as!(cost_entry_enter, program::COST_ENTRY_ENTER);

#[tracepoint]
pub fn cost_entry_exit(_ctx: TracePointContext) -> u32 {
    // Counted only when the entry came back: the count proves it carried.
    if let Some(latency) = calls::carried(Syscall::Unlinkat) {
        count_attach_after(AT_EXIT, latency);
    }
    0
}
named_as!(cost_entry_exit, program::COST_ENTRY_EXIT);

/// The raw and the BTF tracepoints on `sys_enter(struct pt_regs *regs,
/// long id)` and `sys_exit(struct pt_regs *regs, long ret)`: they run for
/// every syscall, so each keeps unlinkat's by its number, which at exit is
/// only in the registers.
macro_rules! sys_tracepoint_costs {
    ($($attach:ident, $context:ty => $enter:ident = $enter_name:expr, $exit:ident = $exit_name:expr;)*) => {$(
        #[$attach]
        pub fn $enter(ctx: $context) -> u32 {
            if ctx.arg::<u64>(1) == wanted_nr() {
                count_attach(AT_ENTRY);
            }
            0
        }
        named_as!($enter, $enter_name);

        #[$attach]
        pub fn $exit(ctx: $context) -> u32 {
            if syscall_nr(ctx.arg::<*const u8>(0)) == wanted_nr() {
                count_attach(AT_EXIT);
            }
            0
        }
        named_as!($exit, $exit_name);
    )*};
}

sys_tracepoint_costs! {
    raw_tracepoint, RawTracePointContext =>
        cost_raw_enter = program::COST_RAW_ENTER, cost_raw_exit = program::COST_RAW_EXIT;
    btf_tracepoint, BtfTracePointContext =>
        cost_btf_enter = program::COST_BTF_ENTER, cost_btf_exit = program::COST_BTF_EXIT;
}

#[fentry]
pub fn cost_fentry(_ctx: FEntryContext) -> u32 {
    count_attach(AT_ENTRY);
    0
}
named_as!(cost_fentry, program::COST_FENTRY);

#[fexit]
pub fn cost_fexit(_ctx: FExitContext) -> u32 {
    count_attach(AT_EXIT);
    0
}
named_as!(cost_fexit, program::COST_FEXIT);

/// The do-nothing trio on the lifecycle programs' tracepoints: each counts
/// every call, of any process, and tests nothing.
#[tracepoint]
pub fn cost_exec(_ctx: TracePointContext) -> u32 {
    count_attach(AT_ENTRY);
    0
}
named_as!(cost_exec, program::COST_EXEC);

#[tracepoint]
pub fn cost_exit(_ctx: TracePointContext) -> u32 {
    count_attach(AT_EXIT);
    0
}
named_as!(cost_exit, program::COST_EXIT);

#[tracepoint]
pub fn cost_signal(_ctx: TracePointContext) -> u32 {
    count_attach(AT_SIGNAL);
    0
}
named_as!(cost_signal, program::COST_SIGNAL);
