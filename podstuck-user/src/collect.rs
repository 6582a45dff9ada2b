//! Loads podstuck's kernel programs, attaches them, and drains what they
//! send: decoded call events from the ring buffer, and the per-CPU counters
//! that stay exact when the ring buffer overflows.
//!
//! Nothing is pinned: every program and map lives as long as the
//! [`Tracer`], so dropping it (or the process dying, even by SIGKILL)
//! detaches everything.

use std::collections::BTreeMap;
use std::path::Path;

use anyhow::{Context, Result};
use aya::maps::{HashMap as BpfHashMap, MapData, PerCpuArray, RingBuf};
use aya::programs::TracePoint;
use aya::{Ebpf, EbpfLoader};
use podstuck_common::{counter, CallInFlight, KernelFilter, Syscall, PATH_MAX};
use tokio::io::unix::AsyncFd;

use crate::btf::{Btf, VMLINUX_BTF};
use crate::event::{decode, CallEvent, DecodeError, WallClock};

/// The eBPF object built from `podstuck-ebpf` by this crate's build script.
static EBPF_OBJECT: &[u8] = aya::include_bytes_aligned!(concat!(env!("OUT_DIR"), "/podstuck.bpf.o"));

/// (program, tracepoint in the `syscalls` category). Exits come first so
/// that a call entered before attaching is counted as such at its exit,
/// rather than leaving an entry with no exit.
const PROBES: [(&str, &str); 8] = [
    ("exit_unlinkat", "sys_exit_unlinkat"),
    ("exit_unlink", "sys_exit_unlink"),
    ("exit_rmdir", "sys_exit_rmdir"),
    ("exit_umount", "sys_exit_umount"),
    ("enter_unlinkat", "sys_enter_unlinkat"),
    ("enter_unlink", "sys_enter_unlink"),
    ("enter_rmdir", "sys_enter_rmdir"),
    ("enter_umount", "sys_enter_umount"),
];

/// A call in flight as the kernel keeps it, with its path argument.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Flight {
    pub tid: u32,
    pub pid: u32,
    pub syscall: Syscall,
    pub flags: u64,
    pub dfd: i32,
    pub started: std::time::SystemTime,
    /// The path argument as passed (may be relative), when readable.
    pub path: Option<Vec<u8>>,
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
        let local = libc::iovec { iov_base: buf.as_mut_ptr().cast(), iov_len: chunk };
        let remote = libc::iovec { iov_base: at as *mut libc::c_void, iov_len: chunk };
        // SAFETY: one local iovec over our own buffer; the remote one is only
        // read by the kernel, which checks it against the target's mappings.
        let got = unsafe { libc::process_vm_readv(pid as libc::pid_t, &local, 1, &remote, 1, 0) };
        if got <= 0 {
            return None;
        }
        buf.truncate(got as usize);
        if let Some(end) = buf.iter().position(|b| *b == 0) {
            out.extend_from_slice(&buf[..end]);
            return Some(out);
        }
        out.extend_from_slice(&buf);
        at += got as u64;
    }
    None
}

/// Totals for a run, as shown in the closing line.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RunTotals {
    /// Records received and decoded.
    pub events_seen: u64,
    /// Records the kernel could not put in the ring buffer.
    pub events_lost: u64,
    /// Every completed call, counted in the kernel.
    pub calls: BTreeMap<Syscall, u64>,
    pub calls_without_entry: u64,
    pub entries_not_stored: u64,
    pub paths_unreadable: u64,
    pub records_undecodable: u64,
}

/// The loaded, attached programs and the maps user space reads.
pub struct Tracer {
    // Keeps programs and links alive; dropped last.
    _ebpf: Ebpf,
    ring: AsyncFd<RingBuf<MapData>>,
    counters: PerCpuArray<MapData, u64>,
    in_flight: BpfHashMap<MapData, u32, CallInFlight>,
    clock: WallClock,
    program_ids: Vec<u32>,
    events_seen: u64,
    records_undecodable: u64,
}

impl Tracer {
    /// Loads and attaches every program, streaming what `filter` lets
    /// through (every call is counted regardless). Must run inside a tokio
    /// runtime.
    pub fn start(filter: KernelFilter) -> Result<Tracer> {
        let offsets = Btf::from_file(Path::new(VMLINUX_BTF))?
            .kernel_offsets()
            .context("finding task_struct and namespace layouts in the kernel's BTF")?;
        let mut ebpf = EbpfLoader::new()
            .override_global("OFFSETS", &offsets, true)
            .override_global("FILTER", &filter, true)
            .load(EBPF_OBJECT)
            .context("loading podstuck's kernel programs (the verifier's log above says why)")?;
        let mut program_ids = Vec::new();
        for (name, tracepoint) in PROBES {
            let program: &mut TracePoint = ebpf
                .program_mut(name)
                .with_context(|| format!("program {name} missing from the embedded object"))?
                .try_into()?;
            program.load().with_context(|| format!("loading program {name}"))?;
            program
                .attach("syscalls", tracepoint)
                .with_context(|| format!("attaching to tracepoint syscalls:{tracepoint}"))?;
            program_ids.push(program.info()?.id());
        }
        let ring = RingBuf::try_from(ebpf.take_map("EVENTS").context("EVENTS map missing")?)?;
        let counters = PerCpuArray::try_from(ebpf.take_map("COUNTERS").context("COUNTERS map missing")?)?;
        let in_flight = BpfHashMap::try_from(ebpf.take_map("CALLS_IN_FLIGHT").context("CALLS_IN_FLIGHT map missing")?)?;
        // SAFETY: the RingBuf owns its map fd and keeps it open, unchanged,
        // for as long as it lives, which is as long as the AsyncFd.
        let ring = unsafe { AsyncFd::register_with_interest(ring, tokio::io::Interest::READABLE) }
            .map_err(|e| e.into_parts().1)
            .context("registering the ring buffer with tokio")?;
        Ok(Tracer {
            _ebpf: ebpf,
            ring,
            counters,
            in_flight,
            clock: WallClock::now(),
            program_ids,
            events_seen: 0,
            records_undecodable: 0,
        })
    }

    /// Kernel ids of the loaded programs.
    pub fn program_ids(&self) -> &[u32] {
        &self.program_ids
    }

    /// Waits until records arrive, then hands each one to `each`.
    pub async fn next_batch<F>(&mut self, mut each: F) -> std::io::Result<()>
    where
        F: FnMut(Result<CallEvent, DecodeError>) -> std::io::Result<()>,
    {
        let mut guard = self.ring.readable_mut().await?;
        guard.clear_ready();
        self.drain(&mut each)
    }

    /// Hands every record already in the ring buffer to `each`, without
    /// waiting: used once more at shutdown so nothing received is dropped.
    pub fn drain<F>(&mut self, each: &mut F) -> std::io::Result<()>
    where
        F: FnMut(Result<CallEvent, DecodeError>) -> std::io::Result<()>,
    {
        loop {
            let decoded = match self.ring.get_mut().next() {
                Some(item) => decode(&item, &self.clock),
                None => return Ok(()),
            };
            match decoded {
                Ok(_) => self.events_seen += 1,
                Err(_) => self.records_undecodable += 1,
            }
            each(decoded)?;
        }
    }

    /// Calls entered at least `min_age` ago and not returned, from the
    /// kernel's in-flight map, with their path read from the caller's memory
    /// (the argument is still there: the caller is inside the call).
    pub fn calls_in_flight(&self, min_age: std::time::Duration) -> Vec<Flight> {
        let now = std::time::SystemTime::now();
        let mut found = Vec::new();
        for item in self.in_flight.iter() {
            let Ok((tid, entry)) = item else { continue };
            let Some(syscall) = Syscall::from_u8(entry.syscall) else { continue };
            let started = self.clock.to_wall(entry.enter_ns);
            if now.duration_since(started).unwrap_or_default() < min_age {
                continue;
            }
            // An entry whose thread is gone (killed inside the call) is not a call.
            if !Path::new(&format!("/proc/{tid}")).exists() {
                continue;
            }
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
        found
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
        Ok(RunTotals {
            events_seen: self.events_seen,
            events_lost: self.counter(counter::RING_BUFFER_DROPS)?,
            calls,
            calls_without_entry: self.counter(counter::EXIT_WITHOUT_ENTRY)?,
            entries_not_stored: self.counter(counter::ENTRY_NOT_STORED)?,
            paths_unreadable: self.counter(counter::PATH_UNREADABLE)?,
            records_undecodable: self.records_undecodable,
        })
    }
}
