//! The programs user space loads by the names in `podstuck_common::program`
//! (each fn's name checked against them as it is built), each a thin wrapper over
//! `enter` or `exit`: per syscall, an entry program and two exit programs
//! for each attach kind. The exits come in pairs: one walks relative paths
//! with `bpf_loop`, its `_w` twin with the bounded loop for kernels without
//! it (a program that so much as names `bpf_loop` is refused there); user
//! space loads one of the two.

use aya_ebpf::{
    macros::{fentry, fexit, tracepoint},
    programs::{FEntryContext, FExitContext, TracePointContext},
};
use podstuck_common::program;

use crate::{
    args::{tracepoint_ret, RMDIR, UMOUNT, UNLINK, UNLINKAT},
    calls::{enter, exit},
    path_walk::WalkLoop,
};

/// The syscall enter/exit tracepoints: the fallback where BPF trampolines
/// are missing (the umount2 tracepoints are named `umount`).
macro_rules! tracepoint_programs {
    ($($names:expr, $layout:expr => $enter:ident, $exit:ident, $exit_w:ident;)*) => {$(
        #[tracepoint]
        pub fn $enter(ctx: TracePointContext) -> u32 {
            enter($names.syscall, $layout.in_tracepoint(&ctx));
            0
        }
        named_as!($enter, $names.enter);

        #[tracepoint]
        pub fn $exit(ctx: TracePointContext) -> u32 {
            let _ = exit($names.syscall, tracepoint_ret(&ctx), WalkLoop::BpfLoop);
            0
        }
        named_as!($exit, $names.exit);

        #[tracepoint]
        pub fn $exit_w(ctx: TracePointContext) -> u32 {
            let _ = exit($names.syscall, tracepoint_ret(&ctx), WalkLoop::Unrolled);
            0
        }
        named_as!($exit_w, $names.exit_w);
    )*};
}

tracepoint_programs! {
    program::UNLINKAT, UNLINKAT => enter_unlinkat, exit_unlinkat, exit_unlinkat_w;
    program::UNLINK, UNLINK => enter_unlink, exit_unlink, exit_unlink_w;
    program::RMDIR, RMDIR => enter_rmdir, exit_rmdir, exit_rmdir_w;
    program::UMOUNT, UMOUNT => enter_umount, exit_umount, exit_umount_w;
}

/// fentry/fexit on the syscall functions (`__x64_sys_*`, named by user
/// space at load): they run for these four syscalls only, where an enabled
/// syscall tracepoint sends every syscall of every task through the slow
/// path. Both get the function's one argument, the caller's `pt_regs`;
/// fexit gets the return value after it.
macro_rules! trampoline_programs {
    ($($names:expr, $layout:expr => $fentry:ident, $fexit:ident, $fexit_w:ident;)*) => {$(
        #[fentry]
        pub fn $fentry(ctx: FEntryContext) -> u32 {
            enter($names.syscall, $layout.in_regs(ctx.arg(0)));
            0
        }
        named_as!($fentry, $names.fentry);

        #[fexit]
        pub fn $fexit(ctx: FExitContext) -> u32 {
            let _ = exit($names.syscall, ctx.arg(1), WalkLoop::BpfLoop);
            0
        }
        named_as!($fexit, $names.fexit);

        #[fexit]
        pub fn $fexit_w(ctx: FExitContext) -> u32 {
            let _ = exit($names.syscall, ctx.arg(1), WalkLoop::Unrolled);
            0
        }
        named_as!($fexit_w, $names.fexit_w);
    )*};
}

trampoline_programs! {
    program::UNLINKAT, UNLINKAT => fentry_unlinkat, fexit_unlinkat, fexit_unlinkat_w;
    program::UNLINK, UNLINK => fentry_unlink, fexit_unlink, fexit_unlink_w;
    program::RMDIR, RMDIR => fentry_rmdir, fexit_rmdir, fexit_rmdir_w;
    program::UMOUNT, UMOUNT => fentry_umount, fexit_umount, fexit_umount_w;
}
