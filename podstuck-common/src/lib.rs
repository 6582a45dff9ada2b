//! Wire types shared by podstuck's kernel programs and its user-space
//! collector: the layout of a record in the ring buffer, the indices of the
//! per-CPU counters, the struct offsets user space reads from the running
//! kernel's BTF and hands to the programs as a global, and the names by
//! which user space finds the programs.
//!
//! Nothing else lives here: no logic, no allocation, `no_std`. Every type is
//! `#[repr(C)]` and `Copy` so both sides agree on it byte for byte. The one
//! exception is on the host only, behind the `build` feature: [`build`],
//! how the kernel programs are compiled, for podstuck-user's build script
//! and for xtask.
#![no_std]

#[cfg(feature = "build")]
extern crate std;

#[cfg(feature = "build")]
pub mod build;

/// Longest path the kernel accepts, terminating NUL included (`PATH_MAX`).
/// A path argument of this many bytes or more is flagged `PATH_TOO_LONG`.
pub const PATH_MAX: usize = 4096;

/// Room for the caller's base directory (cwd or dirfd), walked in the
/// kernel as NUL-terminated components, leaf first.
pub const BASE_DIR_MAX: usize = 4096;

/// Deepest base directory walked, in path components (mount crossings
/// included). Deeper ones are flagged, never cut silently.
pub const BASE_DIR_MAX_DEPTH: u32 = 64;

/// The same walk on kernels without `bpf_loop` (before 5.17): the steps
/// are checked one by one by the verifier there, so fewer of them.
pub const BASE_DIR_UNROLLED_DEPTH: u32 = 24;

/// Byte size of the ring buffer that carries records to user space with
/// `--every-call`, where a storm streams every call.
pub const RING_BUFFER_BYTES: u32 = 16 * 1024 * 1024;

/// Its size otherwise: each series streams at most its window's budget
/// (500 records a second), so 4 MiB hold a 200 ms poll's records of some
/// 140 series storming at once (~300 bytes a record). The ring's pages
/// count twice in podstuck's RSS (it is mapped twice so a record never
/// wraps): 16 MiB made 32 of an idle podstuck's 45 MB. A loss is counted
/// and said, never silent, and `--ring-buffer-kib` sizes it.
pub const SAMPLED_RING_BUFFER_BYTES: u32 = 4 * 1024 * 1024;

/// How many threads the kernel keeps an entry for (each thread that made
/// a traced call and still lives: the entry stays between its calls),
/// where the map grows as threads appear. A call that finds no room is
/// counted (`ENTRY_NOT_STORED`), never silently lost.
pub const MAX_CALLS_IN_FLIGHT: u32 = 65_536;

/// The same where the kernel needs the map preallocated (the tracepoint
/// plan before Linux 6.1): 8192 threads, 0.9 MiB from the start.
pub const MAX_CALLS_IN_FLIGHT_PREALLOCATED: u32 = 8_192;

/// The traced system calls. The value is what the kernel programs write in
/// [`CallRecord::syscall`].
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Syscall {
    Unlinkat = 0,
    Unlink = 1,
    Rmdir = 2,
    /// `umount2(2)`; its tracepoints are named `umount`.
    Umount2 = 3,
}

impl Syscall {
    pub const ALL: [Syscall; 4] = [Syscall::Unlinkat, Syscall::Unlink, Syscall::Rmdir, Syscall::Umount2];

    pub fn from_u8(v: u8) -> Option<Syscall> {
        match v {
            0 => Some(Syscall::Unlinkat),
            1 => Some(Syscall::Unlink),
            2 => Some(Syscall::Rmdir),
            3 => Some(Syscall::Umount2),
            _ => None,
        }
    }
}

/// The names of the kernel programs, by which user space finds them in the
/// object: a contract between the two sides. A kernel program is named by
/// its Rust fn (aya's attributes take no constant), so podstuck-ebpf checks
/// each fn's name against these at compile time ([`program::same_name`]):
/// renaming either side alone fails to build instead of failing to load.
pub mod program {
    use crate::Syscall;

    /// One syscall's programs, for each way of attaching, and what they
    /// attach to. Each kind has two exits: `exit` walks the base directory
    /// with `bpf_loop`, `exit_w` with a bounded loop for kernels without it.
    #[derive(Clone, Copy, Debug)]
    pub struct SyscallPrograms {
        pub syscall: Syscall,
        /// On the tracepoints `syscalls:<tracepoint_enter>` and
        /// `syscalls:<tracepoint_exit>`.
        pub enter: &'static str,
        pub exit: &'static str,
        pub exit_w: &'static str,
        pub tracepoint_enter: &'static str,
        pub tracepoint_exit: &'static str,
        /// On the syscall function `<arch prefix><function>`
        /// (`__x64_sys_unlinkat`).
        pub fentry: &'static str,
        pub fexit: &'static str,
        pub fexit_w: &'static str,
        pub function: &'static str,
    }

    pub const UNLINKAT: SyscallPrograms = SyscallPrograms {
        syscall: Syscall::Unlinkat,
        enter: "enter_unlinkat",
        exit: "exit_unlinkat",
        exit_w: "exit_unlinkat_w",
        tracepoint_enter: "sys_enter_unlinkat",
        tracepoint_exit: "sys_exit_unlinkat",
        fentry: "fentry_unlinkat",
        fexit: "fexit_unlinkat",
        fexit_w: "fexit_unlinkat_w",
        function: "sys_unlinkat",
    };

    pub const UNLINK: SyscallPrograms = SyscallPrograms {
        syscall: Syscall::Unlink,
        enter: "enter_unlink",
        exit: "exit_unlink",
        exit_w: "exit_unlink_w",
        tracepoint_enter: "sys_enter_unlink",
        tracepoint_exit: "sys_exit_unlink",
        fentry: "fentry_unlink",
        fexit: "fexit_unlink",
        fexit_w: "fexit_unlink_w",
        function: "sys_unlink",
    };

    pub const RMDIR: SyscallPrograms = SyscallPrograms {
        syscall: Syscall::Rmdir,
        enter: "enter_rmdir",
        exit: "exit_rmdir",
        exit_w: "exit_rmdir_w",
        tracepoint_enter: "sys_enter_rmdir",
        tracepoint_exit: "sys_exit_rmdir",
        fentry: "fentry_rmdir",
        fexit: "fexit_rmdir",
        fexit_w: "fexit_rmdir_w",
        function: "sys_rmdir",
    };

    /// umount2: its tracepoints and syscall function are named `umount`
    /// (x86_64 and arm64 alike).
    pub const UMOUNT: SyscallPrograms = SyscallPrograms {
        syscall: Syscall::Umount2,
        enter: "enter_umount",
        exit: "exit_umount",
        exit_w: "exit_umount_w",
        tracepoint_enter: "sys_enter_umount",
        tracepoint_exit: "sys_exit_umount",
        fentry: "fentry_umount",
        fexit: "fexit_umount",
        fexit_w: "fexit_umount_w",
        function: "sys_umount",
    };

    /// Every traced syscall's programs, in `Syscall` order: the object holds
    /// them all; user space loads those of its architecture ([`Arch`]).
    pub const SYSCALLS: [SyscallPrograms; 4] = [UNLINKAT, UNLINK, RMDIR, UMOUNT];

    /// A CPU architecture podstuck runs on, with what differs between them:
    /// which of the traced syscalls exist there, and the prefix of the
    /// syscall functions the fentry programs attach to.
    #[derive(Clone, Copy, Debug, PartialEq, Eq)]
    pub enum Arch {
        X86_64,
        /// arm64 (Graviton, Ampere). Its syscall table is the generic one
        /// (asm-generic/unistd.h): there is no `unlink` and no `rmdir`;
        /// libc and Go remove through `unlinkat` (`AT_REMOVEDIR` for a
        /// directory), so nothing a node does escapes the two it has.
        Aarch64,
    }

    impl Arch {
        /// The architecture user space is built for (none in the BPF build:
        /// the bytecode is the same on every architecture).
        #[cfg(target_arch = "x86_64")]
        pub const HOST: Arch = Arch::X86_64;
        #[cfg(target_arch = "aarch64")]
        pub const HOST: Arch = Arch::Aarch64;

        /// The syscalls this architecture has, of those podstuck traces.
        pub const fn programs(self) -> &'static [SyscallPrograms] {
            match self {
                Arch::X86_64 => &SYSCALLS,
                Arch::Aarch64 => &[UNLINKAT, UMOUNT],
            }
        }

        /// The same, as syscalls.
        pub const fn syscalls(self) -> &'static [Syscall] {
            match self {
                Arch::X86_64 => &Syscall::ALL,
                Arch::Aarch64 => &[Syscall::Unlinkat, Syscall::Umount2],
            }
        }

        /// Whether this architecture has `syscall`.
        pub fn has(self, syscall: Syscall) -> bool {
            self.syscalls().contains(&syscall)
        }

        /// The prefix of its syscall functions (`__x64_sys_unlinkat`).
        pub const fn syscall_prefix(self) -> &'static str {
            match self {
                Arch::X86_64 => "__x64_",
                Arch::Aarch64 => "__arm64_",
            }
        }

        /// Its name as `uname -m` says it.
        pub const fn name(self) -> &'static str {
            match self {
                Arch::X86_64 => "x86_64",
                Arch::Aarch64 => "aarch64",
            }
        }

        /// Its directory in BTFHub's archive (`<distro>/<version>/<dir>/`).
        pub const fn btfhub_dir(self) -> &'static str {
            match self {
                Arch::X86_64 => "x86_64",
                Arch::Aarch64 => "arm64",
            }
        }

        /// Both, in the order podstuck's image index lists them.
        pub const ALL: [Arch; 2] = [Arch::X86_64, Arch::Aarch64];

        /// The architecture of this name (`uname -m`, Rust's `target_arch`
        /// as a build script reads it), if podstuck runs there.
        pub fn of_name(name: &str) -> Option<Arch> {
            Arch::ALL.into_iter().find(|arch| arch.name() == name)
        }

        /// The architecture whose ELF binaries carry this `e_machine`.
        pub fn of_elf_machine(machine: u16) -> Option<Arch> {
            Arch::ALL.into_iter().find(|arch| arch.elf_machine() == machine)
        }

        /// Its Rust target triple (`cargo build --target`).
        pub const fn triple(self) -> &'static str {
            match self {
                Arch::X86_64 => "x86_64-unknown-linux-gnu",
                Arch::Aarch64 => "aarch64-unknown-linux-gnu",
            }
        }

        /// Debian's name of it, which is also OCI's and Go's
        /// (`platform.architecture` of an image, `dpkg --add-architecture`).
        pub const fn debian_arch(self) -> &'static str {
            match self {
                Arch::X86_64 => "amd64",
                Arch::Aarch64 => "arm64",
            }
        }

        /// Its GNU triple: the cross tools' prefix, the multiarch library
        /// directory (`/lib/<gnu>/`) and the cross sysroot (`/usr/<gnu>/`).
        pub const fn gnu_triple(self) -> &'static str {
            match self {
                Arch::X86_64 => "x86_64-linux-gnu",
                Arch::Aarch64 => "aarch64-linux-gnu",
            }
        }

        /// The ELF header's `e_machine` of its binaries (`EM_X86_64`, `EM_AARCH64`).
        pub const fn elf_machine(self) -> u16 {
            match self {
                Arch::X86_64 => 62,
                Arch::Aarch64 => 183,
            }
        }
    }

    /// `podstuck attach-cost`'s do-nothing pairs, each only counting
    /// unlinkat calls: on `syscalls:sys_enter_unlinkat`/`sys_exit_unlinkat`,
    /// on the raw and the BTF tracepoints `sys_enter`/`sys_exit`, and on the
    /// unlinkat syscall function. `COST_FENTRY` also probes whether fentry
    /// attaches here.
    pub const COST_TRACEPOINT_ENTER: &str = "cost_tracepoint_enter";
    pub const COST_TRACEPOINT_EXIT: &str = "cost_tracepoint_exit";
    pub const COST_RAW_ENTER: &str = "cost_raw_enter";
    pub const COST_RAW_EXIT: &str = "cost_raw_exit";
    pub const COST_BTF_ENTER: &str = "cost_btf_enter";
    pub const COST_BTF_EXIT: &str = "cost_btf_exit";
    pub const COST_FENTRY: &str = "cost_fentry";
    /// Variants of the tracepoint pair: the two clock reads an exact
    /// latency needs, alone; and with the per-thread entry carried from
    /// entry to exit as podstuck's programs carry it.
    pub const COST_CLOCKS_ENTER: &str = "cost_clocks_enter";
    pub const COST_CLOCKS_EXIT: &str = "cost_clocks_exit";
    pub const COST_ENTRY_ENTER: &str = "cost_entry_enter";
    pub const COST_ENTRY_EXIT: &str = "cost_entry_exit";
    /// The lifecycle programs, on `sched:sched_process_exec`,
    /// `sched:sched_process_exit` and `signal:signal_generate`.
    pub const LIFECYCLE_EXEC: &str = "lifecycle_exec";
    /// The exec program as a BTF tracepoint: its hot reads plain loads.
    /// Attached instead of `LIFECYCLE_EXEC` where the kernel takes it.
    pub const LIFECYCLE_EXEC_BTF: &str = "lifecycle_exec_btf";
    pub const LIFECYCLE_EXIT: &str = "lifecycle_exit";
    pub const LIFECYCLE_SIGNAL: &str = "lifecycle_signal";
    /// The signal program on the raw tracepoint `signal_generate`, which
    /// hands it the target task: it reads whether the target's process
    /// was already exiting. Attached instead of `LIFECYCLE_SIGNAL`
    /// wherever kernel memory may be read (not under lockdown).
    pub const LIFECYCLE_SIGNAL_TASK: &str = "lifecycle_signal_task";
    /// kubelet's failing `connect()`s to a unix socket (a CSI plugin's, the
    /// runtime's): fexit on `unix_stream_connect` where the calls'
    /// programs are on fentry/fexit, else the pair on
    /// `syscalls:sys_enter_connect` and `sys_exit_connect`, as the calls'
    /// plan is.
    pub const KUBELET_CONNECT_FEXIT: &str = "kubelet_connect_fexit";
    pub const KUBELET_CONNECT_ENTER: &str = "kubelet_connect_enter";
    pub const KUBELET_CONNECT_EXIT: &str = "kubelet_connect_exit";
    /// What a running CNI plugin writes on its stdout (its result, or its
    /// error), on `syscalls:sys_enter_write`: attached only while a
    /// sandbox's DEL is failing, on every plan.
    pub const PLUGIN_WRITE: &str = "plugin_write";
    /// The kernel function the fexit program is on: the unix stream
    /// sockets' connect (`proto_ops.connect`, never inlined).
    pub const CONNECT_FUNCTION: &str = "unix_stream_connect";
    pub const COST_FEXIT: &str = "cost_fexit";
    /// `podstuck attach-cost lifecycle`'s do-nothing programs, on the
    /// lifecycle programs' tracepoints (`sched:sched_process_exec`,
    /// `sched:sched_process_exit`, `signal:signal_generate`), each only
    /// counting its calls.
    pub const COST_EXEC: &str = "cost_exec";
    pub const COST_EXIT: &str = "cost_exit";
    pub const COST_SIGNAL: &str = "cost_signal";

    /// `a == b`, in a constant: `str`'s `==` is not `const`.
    pub const fn same_name(a: &str, b: &str) -> bool {
        let (a, b) = (a.as_bytes(), b.as_bytes());
        if a.len() != b.len() {
            return false;
        }
        let mut i = 0;
        while i < a.len() {
            if a[i] != b[i] {
                return false;
            }
            i += 1;
        }
        true
    }
}

/// How the path argument was read; written in [`CallRecord::path_status`].
pub mod path_status {
    /// The whole path, up to its terminating NUL.
    pub const WHOLE: u8 = 0;
    /// The argument is `PATH_MAX` bytes or longer: the record holds the first
    /// `PATH_MAX - 1` bytes. (The kernel itself fails such a call with
    /// ENAMETOOLONG.)
    pub const TOO_LONG: u8 = 1;
    /// The pointer could not be read (bad address, or a page not resident).
    pub const UNREADABLE: u8 = 2;
}

/// How the directory a relative path is resolved against (cwd or dirfd) was
/// read; written in [`CallRecord::base_status`].
pub mod base_status {
    /// The path argument is absolute (or unreadable): no base needed.
    pub const NOT_NEEDED: u8 = 0;
    /// `base_len` bytes of components follow the path.
    pub const RESOLVED: u8 = 1;
    /// The dirfd is not an open file of the caller.
    pub const BAD_FD: u8 = 2;
    /// Deeper than `BASE_DIR_MAX_DEPTH` components or longer than
    /// `BASE_DIR_MAX` bytes.
    pub const TOO_DEEP: u8 = 3;
    /// The kernel struct offsets were not found in BTF.
    pub const NO_OFFSETS: u8 = 4;
    /// A kernel structure could not be read.
    pub const UNREADABLE: u8 = 5;
    /// Kernel memory may not be read here (lockdown=confidentiality).
    pub const FORBIDDEN: u8 = 6;
}

/// One completed call, as the kernel programs emit it at syscall exit. The
/// path argument follows the header in the same ring-buffer record
/// (`path_len` bytes, no NUL), then the base directory (`base_len` bytes:
/// NUL-terminated names from the directory up to the caller's root).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CallRecord {
    /// `bpf_ktime_get_ns()` (CLOCK_MONOTONIC) at entry and at exit.
    pub enter_ns: u64,
    pub exit_ns: u64,
    /// cgroup v2 id of the caller (`bpf_get_current_cgroup_id`).
    pub cgroup_id: u64,
    /// Return value: 0 or a negated errno.
    pub ret: i64,
    /// Raw `flags` argument (`unlinkat`, `umount2`); 0 for the others.
    pub flags: u64,
    /// Process id (tgid), thread id, parent's process id.
    pub pid: u32,
    pub tid: u32,
    pub ppid: u32,
    /// Inode number of the caller's mount namespace; 0 when unknown.
    pub mntns: u32,
    /// Directory fd of `unlinkat` (`AT_FDCWD` = -100 included); for calls
    /// without one, `AT_FDCWD` since their path is cwd-relative.
    pub dfd: i32,
    pub path_len: u16,
    pub syscall: u8,
    pub path_status: u8,
    pub base_len: u16,
    pub base_status: u8,
    /// Which of the v1 hierarchies user space asked for
    /// (`KernelOffsets::v1_subsys`, from 0) `v1_cgroup_id` is of.
    pub v1_hierarchy: u8,
    /// The caller's real uid (EPERM in a sticky directory depends on it).
    pub uid: u32,
    pub comm: [u8; 16],
    pub pcomm: [u8; 16],
    /// How many completed calls of its series this record stands for: 1,
    /// plus the calls of the same series that were counted in the kernel
    /// but not streamed since the series' previous record.
    pub represents: u32,
    pub _pad: u32,
    /// On cgroup v1 nodes: the caller's cgroup in one v1 hierarchy (its
    /// kernfs node id, the cgroup directory's inode number), read in the
    /// kernel at the call so a caller gone by the time user space looks is
    /// still tied to its pod: the first hierarchy, of those asked, where the
    /// caller is below the root (`v1_hierarchy` says which), else the
    /// first one's root; 0 when not read (cgroup v2 only, no offsets).
    pub v1_cgroup_id: u64,
}

/// v1 hierarchies the kernel programs try for a caller's cgroup, at most:
/// a node mounts a dozen, and the first four with a controller that
/// kubelet and the runtimes make every pod's cgroup in are plenty.
pub const V1_HIERARCHIES: usize = 4;

/// Byte size of the fixed part of a record.
pub const CALL_RECORD_BYTES: usize = size_of::<CallRecord>();

/// A thread's entry in the `CALLS_IN_FLIGHT` map (key: thread id): the
/// call it has entered and not yet returned from (user space's
/// `event::Flight`, with the path argument read). User space reads the map to find
/// calls that hang (a dead NFS or FUSE server). Between two calls a
/// thread's entry stays, with `syscall` set to [`NOT_IN_A_CALL`].
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct CallEntry {
    /// CLOCK_MONOTONIC (bpf_ktime_get_ns) at entry.
    pub enter_ns: u64,
    /// The caller's pointer to the path argument (user memory).
    pub path_ptr: u64,
    pub flags: u64,
    pub dfd: i32,
    /// The thread group id (the process).
    pub pid: u32,
    pub syscall: u8,
    pub _pad: [u8; 7],
}

/// `CallEntry::syscall` of a thread that is not inside a traced call.
pub const NOT_IN_A_CALL: u8 = 0xff;

/// Indices into the per-CPU `COUNTERS` array. User space sums over CPUs.
pub mod counter {
    /// Completed calls seen, per syscall (index = `Syscall as u32`).
    pub const CALLS: u32 = 0;
    /// Records that did not fit in the ring buffer (user space too slow).
    pub const RING_BUFFER_DROPS: u32 = 4;
    /// Calls whose exit was seen without their entry (in flight when podstuck
    /// attached, or evicted from the in-flight map).
    pub const EXIT_WITHOUT_ENTRY: u32 = 5;
    /// Entries that could not be stored in the in-flight map.
    pub const ENTRY_NOT_STORED: u32 = 6;
    /// Path arguments that could not be read.
    pub const PATH_UNREADABLE: u32 = 7;
    /// Calls whose series did not fit in the `SERIES` map: counted in the
    /// per-CPU `SERIES_OVERFLOW` slot of their syscall and outcome instead.
    pub const SERIES_FULL: u32 = 8;
    /// Calls of podstuck's own process (`KernelFilter::own_tgid`), per
    /// syscall (index = `OWN_CALLS + Syscall as u32`): its check, after
    /// attaching, that the kernel runs every syscall's programs. Never
    /// counted as the node's calls, never streamed.
    pub const OWN_CALLS: u32 = 9;
    /// Size of the array.
    pub const LEN: u32 = 13;
}

/// Most series the kernel keeps apart at once (a series: one process, in
/// one cgroup, making one syscall with one outcome), where its map grows
/// as series appear: a quiet node costs a few KB, 4096 series 5.5 MiB.
/// User space removes the series of processes that have exited once it
/// has read them; calls of a series that finds the map full are counted
/// by syscall and outcome (`SERIES_OVERFLOW`), never lost.
pub const MAX_SERIES: u32 = 4096;

/// The same where the kernel needs the map preallocated (the tracepoint
/// plan before Linux 6.1), which costs its whole size from the start:
/// 1024 series, 1.4 MiB. A node at kubelet's default of 110 pods keeps
/// some 9 series a pod apart (say an application process that removes
/// files, its runtime shim, kubelet's own), and few of them at once.
pub const MAX_SERIES_PREALLOCATED: u32 = 1024;

/// Latency buckets kept per series in the kernel: log-linear, 8 per power
/// of two (each at most 12.5 % wide), exact below 8 ns, up to 2^42 ns
/// (73 minutes); longer calls land in the last bucket.
pub const LATENCY_SUB_BITS: u32 = 3;
const SUB_BUCKETS: u64 = 1 << LATENCY_SUB_BITS;
/// Highest power of two with buckets of its own.
const TOP_POWER: u32 = 41;
pub const LATENCY_BUCKETS: usize = (SUB_BUCKETS as usize) * (TOP_POWER - LATENCY_SUB_BITS + 2) as usize;

/// Index of the bit set highest in `v` (> 0), by halving: the eBPF target
/// has no count-leading-zeros instruction.
#[inline(always)]
fn highest_bit(mut v: u64) -> u32 {
    let mut bit = 0;
    if v >> 32 != 0 {
        v >>= 32;
        bit += 32;
    }
    if v >> 16 != 0 {
        v >>= 16;
        bit += 16;
    }
    if v >> 8 != 0 {
        v >>= 8;
        bit += 8;
    }
    if v >> 4 != 0 {
        v >>= 4;
        bit += 4;
    }
    if v >> 2 != 0 {
        v >>= 2;
        bit += 2;
    }
    if v >> 1 != 0 {
        bit += 1;
    }
    bit
}

/// The bucket of a latency in nanoseconds; always `< LATENCY_BUCKETS`.
#[inline(always)]
pub fn latency_bucket(ns: u64) -> usize {
    if ns < SUB_BUCKETS {
        return ns as usize;
    }
    let power = highest_bit(ns);
    if power > TOP_POWER {
        return LATENCY_BUCKETS - 1;
    }
    let sub = (ns >> (power - LATENCY_SUB_BITS)) & (SUB_BUCKETS - 1);
    ((power - LATENCY_SUB_BITS + 1) as u64 * SUB_BUCKETS + sub) as usize
}

/// The lowest and highest latency (ns, inclusive) of a bucket.
pub fn latency_bucket_range(index: usize) -> (u64, u64) {
    let sub_buckets = SUB_BUCKETS as usize;
    if index < sub_buckets {
        return (index as u64, index as u64);
    }
    let power = (index / sub_buckets) as u32 + LATENCY_SUB_BITS - 1;
    let sub = (index % sub_buckets) as u64;
    let width = 1u64 << (power - LATENCY_SUB_BITS);
    let low = (1u64 << power) + sub * width;
    (low, low + width - 1)
}

/// A series as the kernel keys it.
#[repr(C)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct SeriesKey {
    /// cgroup v2 id of the caller.
    pub cgroup_id: u64,
    /// The process (tgid).
    pub pid: u32,
    /// 0 for a call that succeeded, else its errno.
    pub errno: u16,
    pub syscall: u8,
    pub _pad: u8,
}

/// What the kernel keeps of a series: exact count, sum and latency buckets
/// (added atomically, so they stay exact whatever the ring buffer does), and
/// the state that decides which of its calls are streamed one by one. The
/// buckets count modulo 2^32: user space reads them as differences at
/// every review (at least once a second), far within 2^32 calls, and at
/// four bytes a bucket a series takes 1.3 KB instead of 2.6.
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct SeriesValue {
    pub count: u64,
    pub sum_ns: u64,
    /// Calls counted since the series' last streamed record.
    pub pending: u64,
    /// Start (bpf_ktime_get_ns) of the current streaming window, and
    /// records streamed in it.
    pub window_start_ns: u64,
    pub window_streamed: u64,
    pub buckets: [u32; LATENCY_BUCKETS],
}

/// Index in `SERIES_OVERFLOW` of a call whose series found `SERIES` full.
pub fn series_overflow_slot(syscall: u8, failed: bool) -> u32 {
    syscall as u32 * 2 + failed as u32
}
pub const SERIES_OVERFLOW_SLOTS: u32 = 8;

/// Offsets of the kernel struct members the programs follow, in bytes, read
/// from `/sys/kernel/btf/vmlinux` at start-up (Rust eBPF has no CO-RE yet).
/// A zero `valid` makes the programs skip the reads and report 0.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct KernelOffsets {
    pub valid: u64,
    /// `task_struct.real_parent`, `.tgid`, `.comm`, `.nsproxy`.
    pub task_real_parent: u64,
    pub task_tgid: u64,
    pub task_comm: u64,
    pub task_nsproxy: u64,
    /// `nsproxy.mnt_ns`.
    pub nsproxy_mnt_ns: u64,
    /// `mnt_namespace.ns.inum`.
    pub mnt_ns_inum: u64,
    /// `task_struct.fs`, `.files`; `fs_struct.pwd`, `.root`.
    pub task_fs: u64,
    pub task_files: u64,
    pub fs_pwd: u64,
    pub fs_root: u64,
    /// `path.mnt`, `path.dentry`.
    pub path_mnt: u64,
    pub path_dentry: u64,
    /// `files_struct.fdt`; `fdtable.max_fds`, `.fd`; `file.f_path`.
    pub files_fdt: u64,
    pub fdt_max_fds: u64,
    pub fdt_fd: u64,
    pub file_f_path: u64,
    /// `dentry.d_parent`; `dentry.d_name.name`.
    pub dentry_parent: u64,
    pub dentry_name: u64,
    /// `vfsmount.mnt_root`; `mount.mnt` (the embedded vfsmount),
    /// `mount.mnt_parent`, `mount.mnt_mountpoint`.
    pub vfsmount_root: u64,
    pub mount_mnt: u64,
    pub mount_parent: u64,
    pub mount_mountpoint: u64,
    /// Where a syscall's first three arguments sit in `struct pt_regs`
    /// (x86_64: di, si, dx): the fentry programs on the syscall functions
    /// get the caller's registers, not the arguments.
    pub regs_arg: [u64; 3],
    /// Where the syscall number sits in `struct pt_regs` (x86_64: orig_ax).
    pub regs_nr: u64,
    /// `task_struct.cgroups`; `css_set.subsys`; `cgroup_subsys_state.cgroup`
    /// and `.parent`; `cgroup.kn`; `kernfs_node.id`: the caller's cgroup in
    /// the v1 hierarchies.
    pub task_cgroups: u64,
    pub css_set_subsys: u64,
    pub css_cgroup: u64,
    pub css_parent: u64,
    pub cgroup_kn: u64,
    pub kernfs_node_id: u64,
    /// Which v1 hierarchies, in the order they are tried: each by one of
    /// its controllers' `cgroup_subsys_id` (this kernel's, from its BTF)
    /// plus one; 0 reads none there.
    pub v1_subsys: [u64; V1_HIERARCHIES],
    /// `task_struct.mm`; `mm_struct.env_start`, `.env_end`: an exec'd
    /// program's environment (a CNI plugin's `CNI_COMMAND`, `CNI_ARGS`).
    pub task_mm: u64,
    pub mm_env_start: u64,
    pub mm_env_end: u64,
    /// `task_struct.exit_code`: the wait status a process exits with.
    pub task_exit_code: u64,
    /// `task_struct.group_leader`, `.start_boottime`: when a process (its
    /// leader) started, as `/proc/<pid>/stat`'s `starttime` says it in
    /// clock ticks; with its pid, what names one process for good.
    pub task_group_leader: u64,
    pub task_start_boottime: u64,
    /// `task_struct.signal`; `signal_struct.live`: the threads of a process
    /// not yet exiting (0 at its last thread's exit).
    pub task_signal: u64,
    pub signal_live: u64,
    /// `task_struct.pid` (the thread's id); `signal_struct.flags`,
    /// `.group_exit_code`: a signal's target task, whether its process is
    /// exiting (`SIGNAL_GROUP_EXIT`) and what began it (the fatal signal's
    /// number, or exit_group's status).
    pub task_pid: u64,
    pub signal_flags: u64,
    pub signal_group_exit_code: u64,
    /// `linux_binprm.file`, `.filename`; `file.f_inode`; `inode.i_ino`,
    /// `.i_sb`; `super_block.s_dev`: the file an exec runs, as the kernel
    /// opened it, not as its caller named it (for a `#!` script, by
    /// `sched_process_exec`, its interpreter).
    pub binprm_file: u64,
    pub binprm_filename: u64,
    pub file_f_inode: u64,
    pub inode_ino: u64,
    pub inode_sb: u64,
    pub sb_dev: u64,
}

/// The process lifecycle the kernel streams beside the calls (its own
/// ring buffer, `LIFECYCLE`): the causes of a stuck pod that never fail a
/// removal. Filtered in the kernel so a fork or exec storm costs next to
/// nothing: execs of the node's CNI plugin files (by device and inode, in
/// `PLUGIN_FILES`, which user space fills), SIGTERM and SIGKILL as they
/// are generated, and the exits of the processes either named.
pub mod lifecycle {
    /// `LifecycleRecord::kind`.
    pub const EXEC: u8 = 0;
    pub const EXIT: u8 = 1;
    pub const SIGNAL: u8 = 2;
    /// kubelet's `connect()` to a unix socket failed: the socket address
    /// (`struct sockaddr_un`, as kubelet passed it) in the filename field,
    /// `filename_len` bytes of it; the errno in `result`.
    pub const CONNECT_FAILED: u8 = 3;
    /// A CNI plugin that is running wrote on its stdout: the first
    /// `env_len` bytes written in the environment field, the length it
    /// wrote in `env_total`, the file descriptor in `result`.
    pub const PLUGIN_WROTE: u8 = 4;
    /// The bytes of a plugin's write kept: a CNI error's JSON (`code`,
    /// `msg`, `details`) fits, indented as Go's plugins write it.
    pub const PLUGIN_WORDS_MAX: usize = 1024;
    /// A plugin's writes streamed at most, per process: its result or its
    /// error is one write.
    pub const PLUGIN_WRITES_TOLD: u32 = 4;
    /// The longest socket address read: `sizeof(struct sockaddr_un)`.
    pub const SOCKADDR_MAX: usize = 110;
    /// kubelet's failing connects streamed at most once a second per
    /// process and socket path: the sockets told apart, at most.
    pub const CONNECTS_KEPT: u32 = 1024;
    /// Bytes of the ring buffer: these events come a few a second.
    pub const RING_BUFFER_BYTES: u32 = 256 * 1024;
    /// The exec'd file's path kept, and the environment bytes kept.
    pub const FILENAME_MAX: usize = 256;
    pub const ENV_MAX: usize = 4096;
    /// Processes whose exit is reported at once (LRU: the oldest go).
    pub const WATCHED_MAX: u32 = 4096;
    /// The node's CNI plugin files the exec program knows at most.
    pub const PLUGIN_FILES_MAX: u32 = 1024;
    /// Words of `PLUGIN_INODES`, the exec program's filter before
    /// `PLUGIN_FILES`: a bit for each inode number modulo 4096, set for the
    /// plugin files' (a node has a few dozen, so an exec of anything else
    /// passes on one bit in some 99 of 100, without the hash lookup).
    pub const PLUGIN_INODE_WORDS: u32 = 64;

    /// The word of `PLUGIN_INODES` and the bit in it that stand for inode
    /// number `ino`.
    pub const fn plugin_inode_bit(ino: u64) -> (u32, u64) {
        let i = ino % (PLUGIN_INODE_WORDS as u64 * 64);
        ((i / 64) as u32, 1 << (i % 64))
    }
    /// `signal_generate`'s `result` (`enum trace_signal_result`).
    pub const SIGNAL_DELIVERED: i32 = 0;
    pub const SIGNAL_IGNORED: i32 = 1;
    pub const SIGNAL_ALREADY_PENDING: i32 = 2;

    /// `LifecycleRecord::flags`: what the kernel could read. Under
    /// lockdown=confidentiality it reads no kernel memory, and a value
    /// it could not read is said unknown, never a zero taken for a value.
    pub mod flags {
        /// `exit_code` was read.
        pub const EXIT_CODE_READ: u8 = 1;
        /// The exit is its process's last thread's (`signal->live` was 0):
        /// without it, the leader's exit, which a thread may outlive.
        pub const LAST_THREAD: u8 = 2;
        /// `start_ns` was read.
        pub const START_READ: u8 = 4;
        /// `parent_start_ns` was read.
        pub const PARENT_START_READ: u8 = 8;
        /// A signal's: whether its target's process was already exiting
        /// was read, when the signal was generated (`GROUP_EXITING` says
        /// what was found). Without it, unknown: under lockdown.
        pub const EXIT_STATE_READ: u8 = 16;
        /// A signal's: its target's process was already exiting when the
        /// signal came, ended by something else than this signal (a fatal
        /// signal or exit_group had begun ending every thread, or every
        /// thread had exited): the kernel drops the signal, or queues it
        /// for threads that will never take it.
        pub const GROUP_EXITING: u8 = 32;
    }
}

/// One of the node's CNI plugin files, as the kernel names it: the key of
/// `PLUGIN_FILES`. `dev` is the superblock's (`s_dev`, what mountinfo's
/// `major:minor` says), which on btrfs differs from `stat`'s.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PluginFile {
    pub ino: u64,
    pub dev: u32,
    pub _pad: u32,
}

/// One lifecycle event: its header, then (exec and connect only)
/// `filename_len` bytes of the path (a connect's: its socket address) (in a field of `FILENAME_MAX`) and `env_len` bytes of the
/// environment (NUL-separated).
#[repr(C)]
#[derive(Clone, Copy, Debug)]
pub struct LifecycleRecord {
    /// `bpf_ktime_get_ns()`.
    pub ns: u64,
    /// cgroup v2 id of the current task: exec'd or exiting; for a signal,
    /// the sender.
    pub cgroup_id: u64,
    /// Its cgroup in the v1 hierarchies user space chose, as
    /// `CallRecord::v1_cgroup_id` (0: none read).
    pub v1_cgroup_id: u64,
    /// When the current process started (`start_boottime` of its leader,
    /// ns since boot), if `flags::START_READ`.
    pub start_ns: u64,
    /// When its parent process started, if `flags::PARENT_START_READ`.
    pub parent_start_ns: u64,
    /// exec: the file the kernel runs (a `PLUGIN_FILES` key; a script's
    /// interpreter, so a script plugin is never one).
    pub file_ino: u64,
    pub file_dev: u32,
    /// exec: the mount namespace it runs in (`ns.inum`), 0 unread.
    pub mntns: u32,
    /// The process (tgid) exec'd or exiting; for a signal, the sender.
    pub pid: u32,
    /// Its parent's process id.
    pub ppid: u32,
    /// A signal's target task, as `signal_generate` names it (its thread
    /// id: the process's for a signal to the whole process).
    pub target_pid: u32,
    pub sig: i32,
    /// `lifecycle::SIGNAL_*`.
    pub result: i32,
    /// Whether the signal is for the whole thread group.
    pub group: i32,
    /// The exit's wait status (`task_struct.exit_code`), if
    /// `flags::EXIT_CODE_READ`.
    pub exit_code: i32,
    /// exec: the whole environment's length; `env_len` of it follow.
    pub env_total: u32,
    pub filename_len: u16,
    pub env_len: u16,
    pub kind: u8,
    /// `lifecycle::flags`.
    pub flags: u8,
    /// Which of the v1 hierarchies `v1_cgroup_id` is of, as
    /// `CallRecord::v1_hierarchy`.
    pub v1_hierarchy: u8,
    pub _pad: u8,
    /// The current task's command; a signal's target's in `target_comm`.
    pub comm: [u8; 16],
    pub target_comm: [u8; 16],
}

/// Byte size of a lifecycle record's header.
pub const LIFECYCLE_RECORD_BYTES: usize = size_of::<LifecycleRecord>();

/// What the kernel programs stream and count, set by user space before
/// load (the `FILTER` global). Decided in the kernel so that an unrelated
/// storm costs little in user space.
#[repr(C)]
#[derive(Clone, Copy, Debug, Default)]
pub struct KernelFilter {
    /// Bit `Syscall as u8` set: stream that syscall. Calls are counted
    /// whatever the mask.
    pub syscalls: u32,
    /// Non-zero: stream failed calls only.
    pub errors_only: u32,
    /// Non-zero: stream every call (no per-series budget).
    pub every_call: u32,
    /// Records a series may stream per window; calls beyond it are counted
    /// and carried by the series' next record (`CallRecord::represents`).
    pub window_budget: u32,
    pub window_ns: u64,
    /// A call at least this long is streamed whatever the budget.
    pub slow_ns: u64,
    /// podstuck's own process id (as the kernel numbers it): its calls
    /// count in `counter::OWN_CALLS` only.
    pub own_tgid: u32,
    pub _pad: u32,
}

#[cfg(feature = "user")]
mod user {
    // SAFETY: plain-old-data, repr(C), every bit pattern is valid.
    unsafe impl aya::Pod for super::KernelOffsets {}
    // SAFETY: as above.
    unsafe impl aya::Pod for super::KernelFilter {}
    unsafe impl aya::Pod for super::PluginFile {}
    unsafe impl aya::Pod for super::CallEntry {}
    unsafe impl aya::Pod for super::SeriesKey {}
    unsafe impl aya::Pod for super::SeriesValue {}
}
