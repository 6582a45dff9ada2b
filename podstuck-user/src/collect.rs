//! Loads podstuck's kernel programs, attaches them, and drains what they
//! send: decoded call events from the ring buffer (read by a thread of
//! its own, [`drain`], so they are read while the collector waits on the
//! node), the per-CPU counters and the per-series counts and latency
//! buckets that stay exact when the ring buffer overflows.
//!
//! Nothing is pinned: every program and map lives as long as the
//! [`Tracer`], so dropping it (or the process dying, even by SIGKILL)
//! detaches everything.

use std::collections::BTreeMap;
use std::io::IoSliceMut;
use std::path::PathBuf;

use crate::btf::{Btf, VMLINUX_BTF};
use crate::event::{CallEvent, DecodeError, Flight, WallClock};
use crate::kernel_features::{AttachPoint, PathWalk};
use crate::lifecycle::LifecycleEvent;
use crate::run::{ProgramCost, RunTotals};
use crate::series::SeriesDelta;
use anyhow::{bail, Context, Result};
use aya::maps::{HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf};
use aya::programs::{BtfTracePoint, FEntry, FExit, Program, RawTracePoint, TracePoint};
use aya::Ebpf;
use nix::sys::uio::{process_vm_readv, RemoteIoVec};
use nix::unistd::Pid;
use podstuck_common::{
    counter, program, CallEntry, KernelFilter, PluginFile, SeriesKey as KernelSeriesKey, SeriesValue, Syscall,
    LATENCY_BUCKETS, PATH_MAX, SERIES_OVERFLOW_SLOTS,
};

mod attach;
mod drain;

pub(crate) use attach::EBPF_OBJECT;
use attach::{kernel_btf, load_object_with, KERNEL_BTF};
pub use attach::{TracerOptions, SYSCALL_PREFIX};
pub(crate) mod maps;
mod plugin_files;
mod plugin_words;

pub use drain::{QueueTotals, QUEUE_RECORDS};

/// One record from either ring buffer, decoded.
pub enum Received {
    Call(Result<CallEvent, DecodeError>),
    Lifecycle(Result<LifecycleEvent, DecodeError>),
}

/// Records a series may stream per window, and the window: past that, its
/// calls are counted in the kernel and carried by its next record. 500 a
/// second per process and outcome is far more than any detector needs,
/// and a storm of millions costs user space next to nothing.
pub const WINDOW_BUDGET: u32 = 50;
pub const WINDOW: std::time::Duration = std::time::Duration::from_millis(100);
/// A call this slow is streamed whatever the budget.
pub const SLOW_CALL: std::time::Duration = std::time::Duration::from_millis(10);

/// The kernel's filter: the syscalls to stream (bit `Syscall as u8`),
/// failed calls only, or every call past the streaming budget.
pub fn kernel_filter(syscalls: u32, errors_only: bool, every_call: bool) -> KernelFilter {
    KernelFilter {
        syscalls,
        errors_only: errors_only as u32,
        every_call: every_call as u32,
        window_budget: WINDOW_BUDGET,
        window_ns: WINDOW.as_nanos() as u64,
        slow_ns: SLOW_CALL.as_nanos() as u64,
        own_tgid: std::process::id(),
        _pad: 0,
    }
}

/// Whether the kernel streams records of calls of `syscall` ending with
/// `errno` (0: success) under `filter`: those of the others never come.
pub fn streams(filter: &KernelFilter, syscall: Syscall, errno: u16) -> bool {
    filter.syscalls & (1 << syscall as u32) != 0 && (filter.errors_only == 0 || errno != 0)
}

/// What a series added since last read: calls, nanoseconds, and the
/// (bucket index, calls) pairs that changed.
type Added = (u64, u64, Vec<(usize, u64)>);

/// A series' running totals as last read.
#[derive(Clone)]
struct SeriesSnapshot {
    count: u64,
    sum_ns: u64,
    buckets: Box<[u32; LATENCY_BUCKETS]>,
}

impl SeriesSnapshot {
    fn empty() -> SeriesSnapshot {
        SeriesSnapshot { count: 0, sum_ns: 0, buckets: Box::new([0; LATENCY_BUCKETS]) }
    }

    /// What `now` adds to this snapshot, which becomes `now`. The kernel's
    /// buckets count modulo 2^32: a difference is exact while a bucket
    /// gains fewer than 2^32 calls between two reads.
    fn advance(&mut self, count: u64, sum_ns: u64, buckets: &[u32; LATENCY_BUCKETS]) -> Option<Added> {
        if count == self.count {
            return None;
        }
        let changed = buckets
            .iter()
            .zip(self.buckets.iter())
            .enumerate()
            .filter(|(_, (now, before))| now != before)
            .map(|(i, (now, before))| (i, u64::from(now.wrapping_sub(*before))))
            .collect();
        let delta = (count.wrapping_sub(self.count), sum_ns.wrapping_sub(self.sum_ns), changed);
        self.count = count;
        self.sum_ns = sum_ns;
        self.buckets.copy_from_slice(buckets);
        Some(delta)
    }
}

/// What the programs with these ids cost so far, by name.
pub fn program_costs(ids: &[u32]) -> Vec<ProgramCost> {
    let mut costs: Vec<ProgramCost> = aya::programs::loaded_programs()
        .filter_map(|p| p.ok())
        .filter(|p| ids.contains(&p.id()))
        .map(|p| ProgramCost {
            name: p.name_as_str().unwrap_or("?").to_string(),
            runs: p.run_count(),
            run_time_ns: p.run_time().as_nanos() as u64,
        })
        .collect();
    costs.sort_by(|a, b| a.name.cmp(&b.name));
    costs
}

/// A NUL-terminated string of process `pid` at `addr`, read page by page
/// (a read across into an unmapped page would fail as a whole).
fn read_user_string(pid: u32, addr: u64) -> Option<Vec<u8>> {
    const PAGE: u64 = 4096;
    let mut out = Vec::new();
    let mut at = addr;
    while out.len() < PATH_MAX {
        let chunk = ((PAGE - at % PAGE) as usize).min(PATH_MAX - out.len());
        let mut buf = vec![0u8; chunk];
        let remote = RemoteIoVec { base: at as usize, len: chunk };
        let got = process_vm_readv(Pid::from_raw(pid as i32), &mut [IoSliceMut::new(&mut buf)], &[remote]).ok()?;
        if got == 0 {
            return None;
        }
        buf.truncate(got);
        if let Some(end) = buf.iter().position(|b| *b == 0) {
            out.extend_from_slice(&buf[..end]);
            return Some(out);
        }
        out.extend_from_slice(&buf);
        at += got as u64;
    }
    None
}

/// The loaded, attached programs and the maps user space reads.
pub struct Tracer {
    // Keeps programs and links alive until `stop_programs` or `drop`.
    ebpf: Option<Ebpf>,
    /// The thread detaching the programs, from `stop_programs` on; joined
    /// in `drop`.
    detaching: Option<std::thread::JoinHandle<()>>,
    /// What the programs had cost when they were told to stop.
    costs_at_stop: Option<Vec<ProgramCost>>,
    /// The thread that reads both rings (the lifecycle programs' when
    /// they are attached: `lifecycle_missing` says why not) into a queue.
    drain: drain::Drain,
    lifecycle_lost: Option<PerCpuArray<MapData, u64>>,
    lifecycle_missing: Option<String>,
    /// Why kubelet's connect programs are not attached, when the rest of
    /// the lifecycle's are.
    connect_missing: Option<String>,
    /// The node's CNI plugin files the exec program knows, as it knows them.
    plugin_files: Option<plugin_files::KernelPluginFiles>,
    /// What running plugins write, read while a sandbox's DEL fails.
    plugin_words: plugin_words::PluginWords,
    proc_root: PathBuf,
    counters: PerCpuArray<MapData, u64>,
    in_flight: BpfHashMap<MapData, u32, CallEntry>,
    series: BpfHashMap<MapData, KernelSeriesKey, SeriesValue>,
    series_overflow: PerCpuArray<MapData, SeriesValue>,
    series_read: std::collections::HashMap<KernelSeriesKey, SeriesSnapshot>,
    /// Series whose process was found gone after the last read: the next
    /// read of them is their last.
    series_ended: std::collections::HashSet<KernelSeriesKey>,
    overflow_read: Vec<SeriesSnapshot>,
    clock: WallClock,
    /// What the programs stream, as loaded.
    filter: KernelFilter,
    program_ids: Vec<u32>,
    attached: AttachPoint,
    /// Why `Auto` fell back to the tracepoints.
    fallback: Option<String>,
    /// How many times the calls' programs were attached before the kernel
    /// was seen running them (1: at once).
    attach_attempts: u32,
    events_seen: u64,
    /// The lifecycle's records received, by kind.
    lifecycle_seen: BTreeMap<&'static str, u64>,
    records_undecodable: u64,
}

impl Drop for Tracer {
    /// The programs detached, by the thread `stop_programs` started or
    /// here, before anything else of the tracer goes.
    fn drop(&mut self) {
        if let Some(ebpf) = self.ebpf.take() {
            detach_all(ebpf);
        }
        if let Some(detaching) = self.detaching.take() {
            let _ = detaching.join();
        }
    }
}

/// Detaches every program side by side: each detach waits for the
/// kernel's readers to be done with it, a trampoline's for an RCU tasks
/// grace period, and those of different functions overlap. A syscall
/// tracepoint's perf event waits for two grace periods (~30 ms) under a
/// kernel lock (`event_mutex`) all such teardowns queue on, so those take
/// their number times that whatever is done here: the reason
/// `stop_programs` starts them while the stop's last work goes on.
fn detach_all(mut ebpf: Ebpf) {
    std::thread::scope(|scope| {
        for (_, program) in ebpf.programs_mut() {
            scope.spawn(move || unload(program));
        }
    });
}

/// Unloads `program`, which drops its links: it runs no more. Programs of
/// the kinds podstuck never attaches, or never loaded, are left as they are.
fn unload(program: &mut Program) {
    let _ = match program {
        Program::TracePoint(p) => p.unload(),
        Program::RawTracePoint(p) => p.unload(),
        Program::BtfTracePoint(p) => p.unload(),
        Program::FEntry(p) => p.unload(),
        Program::FExit(p) => p.unload(),
        _ => Ok(()),
    };
}

/// Returns the heap's free pages to the kernel (glibc keeps them otherwise).
pub fn give_back_freed_memory() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim only releases memory malloc holds free.
    unsafe {
        libc::malloc_trim(0);
    }
}

/// Whether BPF tracing programs load and attach here: the object's
/// do-nothing `cost_fentry` on the unlinkat syscall function, attached and
/// dropped at once.
pub fn probe_fentry() -> crate::kernel_features::Probed {
    use crate::kernel_features::Probed;
    let options = TracerOptions {
        filter: kernel_filter(0, false, false),
        attach: AttachPoint::Fentry,
        walk: PathWalk::Unrolled,
        btf: PathBuf::from(VMLINUX_BTF),
        ring_buffer_bytes: Some(4096),
        cgroup_v1: Vec::new(),
        proc_root: PathBuf::from("/proc"),
    };
    let attached = (|| -> Result<()> {
        // Its maps unused: the threads' entries and the series,
        // preallocated, would cost the kernel time and memory at full size.
        let mut ebpf =
            load_object_with(EBPF_OBJECT, &podstuck_common::KernelOffsets::default(), &options, &maps::UNUSED)?;
        let btf = kernel_btf()?;
        let program: &mut FEntry = ebpf
            .program_mut(program::COST_FENTRY)
            .with_context(|| format!("{} missing", program::COST_FENTRY))?
            .try_into()?;
        program.load(&format!("{SYSCALL_PREFIX}{}", program::UNLINKAT.function), &btf)?;
        program.attach()?;
        Ok(())
    })();
    match attached {
        Ok(()) => Probed::Yes,
        Err(e) => Probed::No(format!("refused: {}", e.root_cause())),
    }
}

/// Where a lifecycle program is attached.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Hook {
    /// A plain tracepoint: (category, name).
    Tracepoint(&'static str, &'static str),
    /// A raw tracepoint, by name.
    Raw(&'static str),
    /// A BTF tracepoint, by name; where the kernel refuses it, the raw
    /// tracepoint of that name with the program named second, its twin.
    Btf(&'static str, &'static str),
    /// fexit on this kernel function.
    Fexit(&'static str),
}

/// The lifecycle programs and their hooks, present on every kernel
/// podstuck supports (5.10 on) and on every architecture: the exec
/// program on the BTF tracepoint, or the raw one where the kernel refuses
/// that (either hands it the `linux_binprm` naming the file the kernel
/// runs), the exit program on the raw one (it reads only
/// the current task: the raw one spares each exit the plain one's record,
/// and the stop a perf event's teardown), and the signal
/// program on the raw one where kernel memory may be read (the target
/// task: was its process already exiting?), else on the plain one, whose
/// fields need no kernel read, so signals are seen under lockdown too.
fn lifecycle_programs(reads_kernel: bool) -> Vec<(&'static str, Hook)> {
    let signal = match reads_kernel {
        true => (program::LIFECYCLE_SIGNAL_TASK, Hook::Raw("signal_generate")),
        false => (program::LIFECYCLE_SIGNAL, Hook::Tracepoint("signal", "signal_generate")),
    };
    // The exec program reads the exec'd file of every exec on the node: as
    // a BTF tracepoint those reads are plain loads. Without kernel reads it
    // reads nothing, and the raw one does.
    let exec = match reads_kernel {
        true => (program::LIFECYCLE_EXEC_BTF, Hook::Btf("sched_process_exec", program::LIFECYCLE_EXEC)),
        false => (program::LIFECYCLE_EXEC, Hook::Raw("sched_process_exec")),
    };
    vec![(program::LIFECYCLE_EXIT, Hook::Raw("sched_process_exit")), signal, exec]
}

/// kubelet's failing connects, on the calls' plan: fexit on the unix
/// stream sockets' connect where the calls' programs are on fentry/fexit
/// (attaching syscall tracepoints there would send every syscall of the
/// node through the slow path), else the connect syscall's tracepoints,
/// the exit first, as with the calls: a connect entered before the exit
/// program runs is never half-kept. Into the lifecycle's ring, attached
/// once the lifecycle's are.
fn connect_programs(plan: AttachPoint) -> Vec<(&'static str, Hook)> {
    match plan {
        AttachPoint::Fentry => vec![(program::KUBELET_CONNECT_FEXIT, Hook::Fexit(program::CONNECT_FUNCTION))],
        AttachPoint::Tracepoint | AttachPoint::Auto => vec![
            (program::KUBELET_CONNECT_EXIT, Hook::Tracepoint("syscalls", "sys_exit_connect")),
            (program::KUBELET_CONNECT_ENTER, Hook::Tracepoint("syscalls", "sys_enter_connect")),
        ],
    }
}

/// Attaches a set of lifecycle programs (exits first, so an exit of a
/// process named after attaching is never missed); their ids. All or
/// none: a set attached in part would feed a ring nothing drains, or
/// keep entries no exit takes, so a failure detaches those already
/// attached.
fn attach_lifecycle(ebpf: &mut Ebpf, programs: Vec<(&'static str, Hook)>) -> Result<Vec<u32>> {
    let mut ids = Vec::new();
    let mut attached = Vec::new();
    for (name, hook) in programs {
        match attach_lifecycle_program(ebpf, name, hook) {
            Ok((id, name)) => {
                ids.push(id);
                attached.push(name);
            }
            Err(e) => {
                for name in attached {
                    detach_lifecycle_program(ebpf, name);
                }
                return Err(e);
            }
        }
    }
    Ok(ids)
}

/// Attaches program `name` on `hook`, or its twin where the hook says so;
/// the id of the program attached, and its name.
fn attach_lifecycle_program(ebpf: &mut Ebpf, name: &'static str, hook: Hook) -> Result<(u32, &'static str)> {
    if let Hook::Btf(tracepoint, twin) = hook {
        return match attach_btf_tracepoint(ebpf, name, tracepoint) {
            Ok(id) => Ok((id, name)),
            Err(_) => {
                // Refused (a kernel or policy without tp_btf): the raw twin
                // reads the same with the read helper.
                detach_lifecycle_program(ebpf, name);
                attach_lifecycle_program(ebpf, twin, Hook::Raw(tracepoint))
            }
        };
    }
    let program = ebpf.program_mut(name).with_context(|| format!("program {name} missing from the embedded object"))?;
    let id = match hook {
        Hook::Raw(tracepoint) => {
            let program: &mut RawTracePoint = program.try_into()?;
            program.load().with_context(|| format!("loading program {name}"))?;
            program.attach(tracepoint).with_context(|| format!("attaching to raw tracepoint {tracepoint}"))?;
            program.info()?.id()
        }
        Hook::Tracepoint(category, tracepoint) => {
            let program: &mut TracePoint = program.try_into()?;
            program.load().with_context(|| format!("loading program {name}"))?;
            program
                .attach(category, tracepoint)
                .with_context(|| format!("attaching to tracepoint {category}:{tracepoint}"))?;
            program.info()?.id()
        }
        Hook::Fexit(function) => {
            let btf = kernel_btf().context("reading the kernel's BTF for fexit")?;
            let program: &mut FExit = program.try_into()?;
            program.load(function, &btf).with_context(|| format!("loading {name} on {function}"))?;
            program.attach().with_context(|| format!("attaching fexit to {function}"))?;
            program.info()?.id()
        }
        Hook::Btf(..) => unreachable!("a BTF tracepoint is attached above"),
    };
    Ok((id, name))
}

/// Loads program `name` as a BTF tracepoint on `tracepoint` and attaches it.
fn attach_btf_tracepoint(ebpf: &mut Ebpf, name: &str, tracepoint: &str) -> Result<u32> {
    let btf = kernel_btf().context("reading the kernel's BTF for a BTF tracepoint")?;
    let program: &mut BtfTracePoint = ebpf
        .program_mut(name)
        .with_context(|| format!("program {name} missing from the embedded object"))?
        .try_into()?;
    program.load(tracepoint, &btf).with_context(|| format!("loading {name} on tp_btf {tracepoint}"))?;
    program.attach().with_context(|| format!("attaching tp_btf {tracepoint}"))?;
    Ok(program.info()?.id())
}

/// Unloads a lifecycle program, which drops its links: it runs no more.
fn detach_lifecycle_program(ebpf: &mut Ebpf, name: &str) {
    if let Some(program) = ebpf.program_mut(name) {
        unload(program);
    }
}

/// An error as one line: a verifier's log (dozens of lines of bytecode)
/// keeps its first line and the line that says what was refused (the last
/// but the verifier's totals and the error's own repeat).
fn one_line(error: &str) -> String {
    let tally = |l: &&str| {
        l.starts_with(':')
            || l.starts_with("processed ")
            || l.starts_with("verification time")
            || l.starts_with("stack depth")
    };
    let mut lines: Vec<&str> = error.lines().map(str::trim).filter(|l| !l.is_empty()).collect();
    while lines.len() > 1 && lines.last().is_some_and(tally) {
        lines.pop();
    }
    match lines.as_slice() {
        [] => String::new(),
        [only] => only.to_string(),
        [first, .., last] => format!("{first} ... {last}"),
    }
}

/// A ring buffer map of `ebpf`.
fn ring(ebpf: &mut Ebpf, name: &str) -> Result<RingBuf<MapData>> {
    Ok(RingBuf::try_from(ebpf.take_map(name).with_context(|| format!("{name} map missing"))?)?)
}

impl Tracer {
    /// Loads and attaches every program, streaming what the filter lets
    /// through (every call is counted regardless). Must run inside a tokio
    /// runtime.
    pub fn start(options: TracerOptions) -> Result<Tracer> {
        let btf = Btf::from_file(&options.btf)?;
        let offsets = btf
            .kernel_offsets()
            .with_context(|| format!("finding task_struct and namespace layouts in {}", options.btf.display()))?;
        let offsets = btf.with_v1_hierarchies(offsets, &options.cgroup_v1);
        let mut fallback = None;
        let mut attempts = 0;
        let (mut ebpf, program_ids, attached) = loop {
            attempts += 1;
            let (ebpf, ids, attached) = attach::attach_calls(&offsets, &options, &mut fallback)?;
            let unseen = attach::programs_run(&ebpf)?;
            if unseen.is_empty() {
                break (ebpf, ids, attached);
            }
            // Their links go with the object; a fresh one is attached.
            drop(ebpf);
            if attempts == attach::ATTACH_ATTEMPTS {
                let names: Vec<&str> = unseen.iter().map(|s| crate::event::syscall_name(*s)).collect();
                bail!(
                    "the kernel does not run podstuck's programs for {} after attaching them ({attempts} times, {}): a call of podstuck's own was not seen within {:?}; those calls would go untraced, so podstuck stops here rather than report a quiet node",
                    names.join(", "),
                    attached.as_str(),
                    attach::PROGRAMS_RUN_WITHIN
                );
            }
        };
        // The causes beyond the calls: missing them is said, never fatal,
        // as the calls are what most stuck pods show.
        let (mut program_ids, mut lifecycle, mut lifecycle_lost, mut lifecycle_missing) =
            (program_ids, None, None, None);
        let mut connect_missing = None;
        let mut plugin_words = plugin_words::PluginWords::missing("the lifecycle's programs are not attached".into());
        let attached_lifecycle = attach_lifecycle(&mut ebpf, lifecycle_programs(options.walk.reads_kernel()));
        if let Ok(ids) = &attached_lifecycle {
            program_ids.extend(ids);
            // kubelet's connects apart: a kernel that refuses them keeps
            // the rest of the lifecycle.
            match attach_lifecycle(&mut ebpf, connect_programs(attached)) {
                Ok(ids) => program_ids.extend(ids),
                Err(e) => connect_missing = Some(one_line(&format!("{e:#}"))),
            }
            plugin_words = plugin_words::PluginWords::ready();
        }
        // Loading parsed the kernel's BTF (aya's loader and the fentry
        // targets, some 40 MB of small allocations): forgotten now, its
        // pages handed back with the rest of start-up's
        // (`give_back_freed_memory`, once the watch has started).
        KERNEL_BTF.lock().unwrap_or_else(|e| e.into_inner()).take();
        match attached_lifecycle {
            Ok(_) => {
                lifecycle = Some(ring(&mut ebpf, "LIFECYCLE")?);
                lifecycle_lost = Some(PerCpuArray::try_from(
                    ebpf.take_map("LIFECYCLE_LOST").context("LIFECYCLE_LOST map missing")?,
                )?);
            }
            Err(e) => lifecycle_missing = Some(one_line(&format!("{e:#}"))),
        }
        let plugin_files = match lifecycle {
            Some(_) => Some(plugin_files::KernelPluginFiles::take(&mut ebpf)?),
            None => None,
        };
        let calls = ring(&mut ebpf, "EVENTS")?;
        let counters = PerCpuArray::try_from(ebpf.take_map("COUNTERS").context("COUNTERS map missing")?)?;
        let in_flight =
            BpfHashMap::try_from(ebpf.take_map(maps::CALLS_IN_FLIGHT).context("CALLS_IN_FLIGHT map missing")?)?;
        let series = BpfHashMap::try_from(ebpf.take_map(maps::SERIES).context("SERIES map missing")?)?;
        let series_overflow =
            PerCpuArray::try_from(ebpf.take_map("SERIES_OVERFLOW").context("SERIES_OVERFLOW map missing")?)?;
        let clock = WallClock::now();
        let drain = drain::Drain::start(calls, lifecycle, clock).context("starting the ring buffers' reader")?;
        Ok(Tracer {
            ebpf: Some(ebpf),
            detaching: None,
            costs_at_stop: None,
            drain,
            lifecycle_lost,
            lifecycle_missing,
            connect_missing,
            plugin_files,
            plugin_words,
            proc_root: options.proc_root,
            counters,
            in_flight,
            series,
            series_overflow,
            series_read: std::collections::HashMap::new(),
            series_ended: std::collections::HashSet::new(),
            overflow_read: (0..SERIES_OVERFLOW_SLOTS).map(|_| SeriesSnapshot::empty()).collect(),
            clock,
            filter: options.filter,
            program_ids,
            attached,
            fallback,
            attach_attempts: attempts,
            events_seen: 0,
            lifecycle_seen: BTreeMap::new(),
            records_undecodable: 0,
        })
    }

    /// What each program cost so far (until `stop_programs`), when BPF
    /// run-time statistics are on.
    pub fn program_costs(&self) -> Vec<ProgramCost> {
        match &self.costs_at_stop {
            Some(costs) => costs.clone(),
            None => program_costs(&self.program_ids),
        }
    }

    /// Starts detaching every program, on a thread of its own, and returns
    /// at once: the stop's last reads (the rings, the series, the review)
    /// go on meanwhile, and what the kernel still sends while the programs
    /// go is read with them. The maps stay until the tracer is dropped,
    /// which waits for the detach to end. With `keep_costs`, what the
    /// programs cost is kept as it stands now (their statistics go with
    /// them); without, none is read (each read walks the node's programs).
    pub fn stop_programs(&mut self, keep_costs: bool) {
        let Some(ebpf) = self.ebpf.take() else { return };
        self.costs_at_stop = Some(match keep_costs {
            true => program_costs(&self.program_ids),
            false => Vec::new(),
        });
        // Should the thread not start, the object is dropped with the
        // closure, which detaches each program in turn.
        self.detaching =
            std::thread::Builder::new().name("podstuck-detach".into()).spawn(move || detach_all(ebpf)).ok();
    }

    /// Tells the exec program the node's CNI plugin files are `files`, as
    /// found now: those new are added, those gone removed. Files past the
    /// kernel table's room are left out and counted.
    pub fn set_plugin_files<'a>(&mut self, files: impl IntoIterator<Item = &'a PluginFile>) -> Result<usize> {
        let Some(kernel) = self.plugin_files.as_mut() else { return Ok(0) };
        kernel.set(files.into_iter().copied().collect())
    }

    /// Why the lifecycle programs (exec, exit, signals) are not attached.
    pub fn lifecycle_missing(&self) -> Option<&str> {
        self.lifecycle_missing.as_deref()
    }

    /// Reads what running CNI plugins write on their stdout while `on`
    /// (a sandbox's DEL is failing), and stops when not; why it cannot,
    /// the first time it cannot.
    pub fn follow_plugin_words(&mut self, on: bool) -> Result<(), String> {
        match self.ebpf.as_mut() {
            Some(ebpf) => self.plugin_words.follow(ebpf, on),
            // Stopping: every program is being detached, this one with them.
            None => Ok(()),
        }
    }

    /// Whether what running CNI plugins write is read now.
    pub fn plugin_words_followed(&self) -> bool {
        self.plugin_words.attached()
    }

    /// Why kubelet's failing connects (a CSI plugin it cannot reach) are not
    /// traced, when the rest of the lifecycle is.
    pub fn connect_missing(&self) -> Option<&str> {
        self.connect_missing.as_deref()
    }

    /// Why the programs are on the tracepoints though fentry was preferred.
    pub fn fallback(&self) -> Option<&str> {
        self.fallback.as_deref()
    }

    /// How many times the calls' programs were attached before the kernel
    /// ran them (see `programs_run`): more than 1 is worth saying.
    pub fn attach_attempts(&self) -> u32 {
        self.attach_attempts
    }

    /// Where the programs attached (never `Auto`).
    pub fn attach_point(&self) -> AttachPoint {
        self.attached
    }

    /// What every series counted since the last call, read from the kernel.
    /// Series of processes that have exited are read one last time and
    /// removed from the kernel's map, which keeps it from filling up.
    pub fn series_deltas(&mut self) -> Vec<SeriesDelta> {
        let mut deltas = Vec::new();
        let mut gone = Vec::new();
        let mut ended = std::collections::HashSet::new();
        let mut current: Vec<(KernelSeriesKey, SeriesValue)> = Vec::new();
        for item in self.series.iter() {
            let Ok((key, value)) = item else { continue };
            current.push((key, value));
        }
        for (key, value) in &current {
            let Some(syscall) = Syscall::from_u8(key.syscall) else { continue };
            let snapshot = self.series_read.entry(*key).or_insert_with(SeriesSnapshot::empty);
            if let Some((count, sum_ns, buckets)) = snapshot.advance(value.count, value.sum_ns, &value.buckets) {
                let streamed = streams(&self.filter, syscall, key.errno);
                deltas.push(SeriesDelta {
                    caller: Some((key.pid, key.cgroup_id)),
                    syscall,
                    errno: key.errno,
                    streamed,
                    count,
                    sum_ns,
                    buckets,
                });
            }
            // Removed only when its process was already gone before this
            // read: a process found gone after the read may have made its
            // last call between the two, which this read did not see. (A
            // reused pid makes a new series from scratch.)
            if self.series_ended.contains(key) {
                gone.push(*key);
            } else if !self.proc_root.join(key.pid.to_string()).exists() {
                ended.insert(*key);
            }
        }
        self.series_ended = ended;
        for key in gone {
            let _ = self.series.remove(&key);
            self.series_read.remove(&key);
        }
        for slot in 0..SERIES_OVERFLOW_SLOTS {
            let Ok(per_cpu) = self.series_overflow.get(&slot, 0) else { continue };
            let mut count = 0u64;
            let mut sum_ns = 0u64;
            let mut buckets = Box::new([0u32; LATENCY_BUCKETS]);
            for value in per_cpu.iter() {
                count += value.count;
                sum_ns += value.sum_ns;
                // Modulo 2^32 as each CPU's own: the sum's difference
                // between two reads is still exact.
                for (total, n) in buckets.iter_mut().zip(value.buckets.iter()) {
                    *total = total.wrapping_add(*n);
                }
            }
            let Some(syscall) = Syscall::from_u8((slot / 2) as u8) else { continue };
            if let Some((count, sum_ns, buckets)) = self.overflow_read[slot as usize].advance(count, sum_ns, &buckets) {
                let errno = if slot % 2 == 1 { u16::MAX } else { 0 };
                deltas.push(SeriesDelta { caller: None, syscall, errno, streamed: false, count, sum_ns, buckets });
            }
        }
        deltas
    }

    /// Kernel ids of the loaded programs.
    pub fn program_ids(&self) -> &[u32] {
        &self.program_ids
    }

    /// Waits until records are queued, then hands each one to `each`.
    /// Cancel-safe: a record is taken from the queue only when handed on.
    pub async fn next_batch<F>(&mut self, mut each: F) -> std::io::Result<()>
    where
        F: FnMut(Received) -> std::io::Result<()>,
    {
        let Some(first) = self.drain.next().await else {
            return Err(std::io::Error::other("the ring buffers' reader stopped"));
        };
        self.count(&first);
        each(first)?;
        self.drain(&mut each)
    }

    /// Hands every record already queued to `each`, without waiting: used
    /// once more at shutdown so nothing received is dropped.
    pub fn drain<F>(&mut self, each: &mut F) -> std::io::Result<()>
    where
        F: FnMut(Received) -> std::io::Result<()>,
    {
        while let Some(record) = self.drain.try_next() {
            self.count(&record);
            each(record)?;
        }
        Ok(())
    }

    fn count(&mut self, record: &Received) {
        let decoded = match record {
            Received::Call(decoded) => decoded.is_ok(),
            Received::Lifecycle(decoded) => decoded.is_ok(),
        };
        if let Received::Lifecycle(Ok(event)) = record {
            *self.lifecycle_seen.entry(event.what.kind()).or_default() += 1;
        }
        match decoded {
            true => self.events_seen += 1,
            false => self.records_undecodable += 1,
        }
    }

    /// What the queue between the rings' reader and the loop went through.
    pub fn queue_totals(&self) -> QueueTotals {
        self.drain.totals()
    }

    /// Calls entered at least `min_age` ago and not returned, from the
    /// kernel's in-flight map, with their path read from the caller's memory
    /// (the argument is still there: the caller is inside the call).
    pub fn calls_in_flight(&mut self, min_age: std::time::Duration) -> Vec<Flight> {
        let now = std::time::SystemTime::now();
        let mut found = Vec::new();
        let mut gone = Vec::new();
        for item in self.in_flight.iter() {
            let Ok((tid, entry)) = item else { continue };
            let started = self.clock.to_wall(entry.enter_ns);
            if now.duration_since(started).unwrap_or_default() < min_age {
                continue;
            }
            // The entry of a thread gone (exited, or killed inside a call) is
            // removed, so the map never fills with them.
            if !self.proc_root.join(tid.to_string()).exists() {
                gone.push(tid);
                continue;
            }
            // Between two calls.
            let Some(syscall) = Syscall::from_u8(entry.syscall) else { continue };
            found.push(Flight {
                tid,
                pid: entry.pid,
                syscall,
                flags: entry.flags,
                dfd: entry.dfd,
                started,
                path: read_user_string(entry.pid, entry.path_ptr),
            });
        }
        for tid in gone {
            let _ = self.in_flight.remove(&tid);
        }
        found
    }

    /// Lifecycle records that did not fit in their ring.
    fn lifecycle_lost(&self) -> Result<u64> {
        let Some(lost) = self.lifecycle_lost.as_ref() else { return Ok(0) };
        Ok(lost.get(&0, 0).context("reading LIFECYCLE_LOST")?.iter().sum())
    }

    fn counter(&self, index: u32) -> Result<u64> {
        let per_cpu = self.counters.get(&index, 0).with_context(|| format!("reading counter {index}"))?;
        Ok(per_cpu.iter().sum())
    }

    /// Reads the kernel's counters and adds what user space saw.
    pub fn totals(&self) -> Result<RunTotals> {
        let mut calls = BTreeMap::new();
        for syscall in Syscall::ALL {
            calls.insert(syscall, self.counter(counter::CALLS + syscall as u32)?);
        }
        let lifecycle_lost = self.lifecycle_lost()?;
        Ok(RunTotals {
            events_seen: self.events_seen,
            events_lost: self.counter(counter::RING_BUFFER_DROPS)? + lifecycle_lost,
            lifecycle_lost,
            lifecycle_seen: self.lifecycle_seen.clone(),
            calls,
            pods_calls: None,
            calls_without_entry: self.counter(counter::EXIT_WITHOUT_ENTRY)?,
            entries_not_stored: self.counter(counter::ENTRY_NOT_STORED)?,
            paths_unreadable: self.counter(counter::PATH_UNREADABLE)?,
            records_undecodable: self.records_undecodable,
            calls_outside_series: self.counter(counter::SERIES_FULL)?,
            programs: Vec::new(),
            lifecycle_dropped: BTreeMap::new(),
            claims_set_aside: BTreeMap::new(),
            claims_naming_another_pod: 0,
            node_reads: Default::default(),
            queue_full: self.drain.totals().full,
            queue_high_water: self.drain.totals().high_water,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kubelets_connects_follow_the_calls_plan_and_their_exit_comes_first() {
        let fentry = connect_programs(AttachPoint::Fentry);
        assert_eq!(fentry, [(program::KUBELET_CONNECT_FEXIT, Hook::Fexit("unix_stream_connect"))]);
        assert!(
            !fentry.iter().any(|(_, hook)| matches!(hook, Hook::Tracepoint("syscalls", _))),
            "a syscall tracepoint on the fentry plan would slow every syscall of the node: {fentry:?}"
        );
        let tracepoints = connect_programs(AttachPoint::Tracepoint);
        let at = |name: &str| tracepoints.iter().position(|(n, _)| *n == name);
        assert!(at(program::KUBELET_CONNECT_EXIT).unwrap() < at(program::KUBELET_CONNECT_ENTER).unwrap());
        assert_eq!(at(program::KUBELET_CONNECT_FEXIT), None);
        let lockdown = lifecycle_programs(false);
        assert!(
            lockdown.iter().any(|(n, _)| *n == program::LIFECYCLE_SIGNAL),
            "under lockdown, the plain signal tracepoint"
        );
    }
}
