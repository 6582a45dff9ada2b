//! `podstuck watch`: trace the node until told to stop, printing each call
//! as it completes, then a closing line with what was seen and what was
//! lost; with `--histograms DIR`, keep latency histograms and refresh their
//! files every interval. SIGINT and SIGTERM stop it cleanly; the programs
//! detach when the tracer is dropped.

use std::io::{BufWriter, ErrorKind, Write};
use std::path::PathBuf;
use std::time::{Duration, SystemTime};

use podstuck_common::{KernelFilter, Syscall};

use anyhow::{Context, Result};
use tokio::signal::unix::{signal, SignalKind};

use crate::collect::{RunTotals, Tracer};
use crate::export::{Exporter, RunInfo};
use crate::latency::LatencyBook;
use crate::event::{syscall_name, CallEvent, DecodeError};
use crate::identify::pod::PodUid;
use crate::identify::{Identifier, NodeLayout, PodFilter, DEFAULT_KUBELET_ROOT};
use crate::output::{end_json, end_text, event_json, event_text, rfc3339, start_json, StartLine};
use crate::preflight::{problems, NodeFacts, Problem};

#[derive(Clone, Debug)]
pub struct WatchOptions {
    /// JSON lines instead of text.
    pub json: bool,
    /// Stop by itself after this long.
    pub duration: Option<Duration>,
    /// Follow these pods only; empty = the whole node.
    pub pods: Vec<PodUid>,
    pub kubelet_root: PathBuf,
    /// Failed calls only (decided in the kernel).
    pub errors_only: bool,
    /// These syscalls only (decided in the kernel); empty = all four.
    pub syscalls: Vec<Syscall>,
    /// Where to keep latency histogram files, if anywhere.
    pub histograms: Option<PathBuf>,
    /// Overwrite an earlier run's files in `histograms`.
    pub force: bool,
    /// How often histogram files are refreshed (and interval histograms cut).
    pub interval: Duration,
}

impl Default for WatchOptions {
    fn default() -> WatchOptions {
        WatchOptions {
            json: false,
            duration: None,
            pods: Vec::new(),
            kubelet_root: PathBuf::from(DEFAULT_KUBELET_ROOT),
            errors_only: false,
            syscalls: Vec::new(),
            histograms: None,
            force: false,
            interval: Duration::from_secs(5),
        }
    }
}

impl WatchOptions {
    /// The syscalls traced: those asked for, or all four.
    fn syscalls(&self) -> &[Syscall] {
        if self.syscalls.is_empty() {
            &Syscall::ALL
        } else {
            &self.syscalls
        }
    }

    fn kernel_filter(&self) -> KernelFilter {
        KernelFilter {
            syscalls: self.syscalls().iter().fold(0, |mask, s| mask | 1 << *s as u32),
            errors_only: self.errors_only as u32,
        }
    }

    /// "the whole node" or "pod <uid>, pod <uid>"; plus the kernel filters.
    fn scope(&self) -> String {
        let mut scope = if self.pods.is_empty() {
            "the whole node".to_string()
        } else {
            self.pods.iter().map(|p| format!("pod {p}")).collect::<Vec<_>>().join(", ")
        };
        if self.errors_only {
            scope.push_str(", failed calls only");
        }
        scope
    }

    fn syscall_names(&self) -> Vec<&'static str> {
        self.syscalls().iter().map(|s| syscall_name(*s)).collect()
    }
}

/// The node cannot run podstuck; each problem says what to do.
#[derive(Debug)]
pub struct NodeNotReady(pub Vec<Problem>);

impl std::fmt::Display for NodeNotReady {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let lines: Vec<String> = self.0.iter().map(|p| p.to_string()).collect();
        write!(f, "{}", lines.join("\n"))
    }
}

impl std::error::Error for NodeNotReady {}

/// Where each decoded record goes: identified, filtered to the pods asked
/// for, printed, and counted in the latency book.
struct Sink<W: Write> {
    out: W,
    json: bool,
    identifier: Identifier,
    filter: PodFilter,
    book: Option<LatencyBook>,
}

impl<W: Write> Sink<W> {
    fn take(&mut self, decoded: Result<CallEvent, DecodeError>) -> std::io::Result<()> {
        match decoded {
            Ok(event) => {
                let identity = self.identifier.identify(&event);
                if !self.filter.admits(&identity) {
                    return Ok(());
                }
                if let Some(book) = self.book.as_mut() {
                    book.record(&event, &identity);
                }
                let line = if self.json { event_json(&event, &identity) } else { event_text(&event, &identity) };
                writeln!(self.out, "{line}")
            }
            // Counted in the totals; said here so it is never silent.
            Err(e) => {
                eprintln!("podstuck: skipped a record: {e}");
                Ok(())
            }
        }
    }
}

/// The run's metadata for the histogram files, as of now.
fn run_info(options: &WatchOptions, start: &StartLine, started: SystemTime, totals: &RunTotals, finished: bool) -> RunInfo {
    let now = SystemTime::now();
    RunInfo {
        node: nix::sys::utsname::uname().map(|u| u.nodename().to_string_lossy().into_owned()).unwrap_or_default(),
        kernel: start.kernel.clone(),
        podstuck_version: start.version.to_string(),
        pods: options.pods.iter().map(|p| p.to_string()).collect(),
        kubelet_root: start.kubelet_root.clone(),
        syscalls: start.syscalls.iter().map(|s| s.to_string()).collect(),
        errors_only: options.errors_only,
        started: rfc3339(started),
        updated: rfc3339(now),
        duration_s: now.duration_since(started).unwrap_or_default().as_secs_f64(),
        interval_s: options.interval.as_secs_f64(),
        events_seen: totals.events_seen,
        events_lost: totals.events_lost,
        calls_counted: totals.calls.iter().map(|(s, n)| (syscall_name(*s).to_string(), *n)).collect(),
        finished,
    }
}

fn is_broken_pipe(e: &anyhow::Error) -> bool {
    e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == ErrorKind::BrokenPipe)
}

/// Runs `podstuck watch` on standard output.
pub async fn watch(options: &WatchOptions) -> Result<()> {
    let facts = NodeFacts::gather();
    let found = problems(&facts);
    if !found.is_empty() {
        return Err(NodeNotReady(found).into());
    }
    let started = SystemTime::now();
    // A bad output directory fails now, not after an hour of tracing.
    let mut exporter = match &options.histograms {
        Some(dir) => Some(Exporter::open(dir, options.force, started)?),
        None => None,
    };
    let filter = PodFilter::new(options.pods.iter().cloned());
    let identifier = Identifier::new(NodeLayout::of_this_node(options.kubelet_root.clone()));
    if !options.kubelet_root.is_dir() {
        eprintln!(
            "podstuck: kubelet root {} not found: pods are recognised by cgroup and container only (set --kubelet-root if kubelet runs with --root-dir)",
            options.kubelet_root.display()
        );
    }
    for uid in filter.pods_not_on_node(&options.kubelet_root) {
        eprintln!("podstuck: pod {uid} has no directory under {}/pods on this node; watching for it anyway", options.kubelet_root.display());
    }
    let mut tracer = Tracer::start(options.kernel_filter())?;
    let mut sink = Sink {
        out: BufWriter::new(std::io::stdout().lock()),
        json: options.json,
        identifier,
        filter,
        book: exporter.as_ref().map(|_| LatencyBook::new(started)),
    };

    let start = StartLine {
        r#type: "start",
        ts: rfc3339(SystemTime::now()),
        version: env!("CARGO_PKG_VERSION"),
        kernel: facts.kernel_release.clone(),
        pid: std::process::id(),
        program_ids: tracer.program_ids().to_vec(),
        pods: options.pods.clone(),
        kubelet_root: options.kubelet_root.to_string_lossy().into_owned(),
        syscalls: options.syscall_names(),
        errors_only: options.errors_only,
    };
    if options.json {
        writeln!(sink.out, "{}", start_json(&start))?;
    } else {
        eprintln!(
            "podstuck {}: tracing {} on {} (kernel {}); Ctrl-C to stop",
            start.version,
            start.syscalls.join(", "),
            options.scope(),
            start.kernel
        );
    }
    sink.out.flush()?;

    let mut sigint = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut sigterm = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let deadline = tokio::time::sleep(options.duration.unwrap_or(Duration::MAX / 4));
    tokio::pin!(deadline);
    let mut refresh = tokio::time::interval_at(tokio::time::Instant::now() + options.interval, options.interval);

    let stopped_by = loop {
        tokio::select! {
            batch = tracer.next_batch(|e| sink.take(e)) => {
                let flushed = batch.and_then(|()| sink.out.flush());
                match flushed {
                    Ok(()) => {}
                    // The reader went away (`podstuck watch --json | head`): stop quietly.
                    Err(e) if e.kind() == ErrorKind::BrokenPipe => return Ok(()),
                    Err(e) => return Err(e).context("writing events"),
                }
            }
            _ = sigint.recv() => break Some("SIGINT"),
            _ = sigterm.recv() => break Some("SIGTERM"),
            _ = &mut deadline => break None,
            _ = refresh.tick(), if exporter.is_some() => {
                let (Some(exporter), Some(book)) = (exporter.as_mut(), sink.book.as_mut()) else { continue };
                let run = run_info(options, &start, started, &tracer.totals()?, false);
                // A failed refresh (disk full) is said and retried next
                // interval; tracing goes on, the book keeps every call.
                if let Err(e) = exporter.refresh(book, &run, SystemTime::now()) {
                    eprintln!("podstuck: cannot refresh histogram files in {}: {e:#}", exporter.dir().display());
                }
            }
        }
    };

    let finish = (|| -> Result<()> {
        tracer.drain(&mut |e| sink.take(e))?;
        let totals = tracer.totals()?;
        if let (Some(exporter), Some(book)) = (exporter.as_mut(), sink.book.as_mut()) {
            let run = run_info(options, &start, started, &totals, true);
            exporter
                .refresh(book, &run, SystemTime::now())
                .with_context(|| format!("writing histogram files in {}", exporter.dir().display()))?;
        }
        let end = if options.json { end_json(&totals, stopped_by) } else { end_text(&totals, stopped_by) };
        writeln!(sink.out, "{end}")?;
        sink.out.flush()?;
        Ok(())
    })();
    match finish {
        Err(e) if is_broken_pipe(&e) => Ok(()),
        other => other,
    }
}
