//! `podstuck watch`: trace the node until told to stop, printing each call
//! as it completes, then a closing line with what was seen and what was
//! lost. SIGINT and SIGTERM stop it cleanly; the programs detach when the
//! tracer is dropped.

use std::io::{BufWriter, ErrorKind, Write};
use std::time::{Duration, SystemTime};

use anyhow::{Context, Result};
use tokio::signal::unix::{signal, SignalKind};

use crate::collect::Tracer;
use crate::event::{CallEvent, DecodeError};
use crate::output::{end_json, end_text, event_json, event_text, rfc3339, start_json, StartLine};
use crate::preflight::{problems, NodeFacts, Problem};

#[derive(Clone, Debug, Default)]
pub struct WatchOptions {
    /// JSON lines instead of text.
    pub json: bool,
    /// Stop by itself after this long.
    pub duration: Option<Duration>,
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

fn write_event(out: &mut impl Write, json: bool, decoded: Result<CallEvent, DecodeError>) -> std::io::Result<()> {
    match decoded {
        Ok(event) => {
            let line = if json { event_json(&event) } else { event_text(&event) };
            writeln!(out, "{line}")
        }
        // Counted in the totals; said once here so it is never silent.
        Err(e) => {
            eprintln!("podstuck: skipped a record: {e}");
            Ok(())
        }
    }
}

/// Runs `podstuck watch` on standard output.
pub async fn watch(options: &WatchOptions) -> Result<()> {
    let facts = NodeFacts::gather();
    let found = problems(&facts);
    if !found.is_empty() {
        return Err(NodeNotReady(found).into());
    }
    let mut tracer = Tracer::start()?;
    let mut out = BufWriter::new(std::io::stdout().lock());
    let json = options.json;

    let start = StartLine {
        r#type: "start",
        ts: rfc3339(SystemTime::now()),
        version: env!("CARGO_PKG_VERSION"),
        kernel: facts.kernel_release.clone(),
        pid: std::process::id(),
        program_ids: tracer.program_ids().to_vec(),
    };
    if json {
        writeln!(out, "{}", start_json(&start))?;
    } else {
        eprintln!(
            "podstuck {}: tracing unlinkat, unlink, rmdir and umount2 on the whole node (kernel {}); Ctrl-C to stop",
            start.version, start.kernel
        );
    }
    out.flush()?;

    let mut sigint = signal(SignalKind::interrupt()).context("installing the SIGINT handler")?;
    let mut sigterm = signal(SignalKind::terminate()).context("installing the SIGTERM handler")?;
    let deadline = tokio::time::sleep(options.duration.unwrap_or(Duration::MAX / 4));
    tokio::pin!(deadline);

    let stopped_by = loop {
        tokio::select! {
            batch = tracer.next_batch(|e| write_event(&mut out, json, e)) => {
                let flushed = batch.and_then(|()| out.flush());
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
        }
    };

    let finish = (|| -> Result<()> {
        tracer.drain(&mut |e| write_event(&mut out, json, e))?;
        let totals = tracer.totals()?;
        let end = if json { end_json(&totals, stopped_by) } else { end_text(&totals, stopped_by) };
        writeln!(out, "{end}")?;
        out.flush()?;
        Ok(())
    })();
    match finish {
        Err(e) if e.downcast_ref::<std::io::Error>().is_some_and(|io| io.kind() == ErrorKind::BrokenPipe) => Ok(()),
        other => other,
    }
}
