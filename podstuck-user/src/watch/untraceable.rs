//! `watch --listen --stay-up` on a node podstuck cannot trace (kernel
//! lockdown, no BTF, no privileges, no tracefs, programs refused at load):
//! the DaemonSet's pod stays up and says why, instead of exiting 2 and
//! crash-looping on every such node, where a restart changes nothing and
//! the back-off only hides the reason. It says it once in its log, and on
//! every scrape: `podstuck_up 0` and `podstuck_cannot_trace{reason}` on
//! `/metrics` (one alert per node), the whole sentence on `/findings`,
//! `/healthz` 200 (alive, and a restart would not help). It stops on
//! SIGTERM, SIGINT or SIGHUP and exits 0.

use std::sync::Arc;
use std::time::{Duration, SystemTime};

use anyhow::Result;
use serde::Serialize;
use tokio::sync::watch;

use crate::export::prom::{render_untraceable, OwnCost, ProcessStats};
use crate::print::endpoint::RENDER_EVERY;
use crate::print::stderr_line;
use crate::serve::{ListenAddr, Listener, Pages};
use crate::words::rfc3339;

use super::{NodeNotReady, StopSignals, Verdict};

/// Tracing was refused after the node looked ready: the programs would
/// not load or attach (a kernel that refuses them at load under lockdown,
/// a verifier that rejects them).
#[derive(Debug)]
pub struct TracingRefused(pub String);

impl std::fmt::Display for TracingRefused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for TracingRefused {}

/// Why this node cannot be traced, if `error` says so: (reason in one
/// word, the whole sentence). Anything else (a busy port, a bad path, the
/// tracer lock) is no state of the node and still ends the run.
pub fn cannot_trace(error: &anyhow::Error) -> Option<(&'static str, String)> {
    let words = if let Some(NodeNotReady(problems)) = error.downcast_ref::<NodeNotReady>() {
        problems.iter().map(|p| format!("{} (what to do: {})", p.what, p.fix)).collect::<Vec<_>>().join("; ")
    } else if let Some(TracingRefused(why)) = error.downcast_ref::<TracingRefused>() {
        why.clone()
    } else {
        return None;
    };
    Some((reason(&words, error.is::<TracingRefused>()), words))
}

/// One word for the alert's label, from what was said.
fn reason(words: &str, at_load: bool) -> &'static str {
    let lower = words.to_ascii_lowercase();
    if lower.contains("lockdown") {
        "lockdown"
    } else if at_load {
        "load-failed"
    } else if lower.contains("btf") {
        "no-btf"
    } else if lower.contains("privileges") {
        "privileges"
    } else if lower.contains("tracefs") {
        "tracefs"
    } else {
        "kernel"
    }
}

/// `/findings` while untraceable: no finding, and why.
#[derive(Serialize)]
struct FindingsPage<'a> {
    node: &'a str,
    updated: String,
    findings: [(); 0],
    omitted: usize,
    cannot_trace: &'a str,
    reason: &'a str,
}

/// Serves why this node cannot be traced on `addr` until a stop signal.
pub async fn serve(
    addr: ListenAddr,
    node: &str,
    kernel: &str,
    (reason, why): (&'static str, String),
    signals: &mut StopSignals,
) -> Result<Verdict> {
    let listener = Listener::bind(addr)?;
    let serving = listener.local_addr().map(|a| a.to_string()).unwrap_or_else(|| addr.to_string());
    let render = || {
        let cost = OwnCost { process: ProcessStats::now(), programs: Vec::new() };
        let findings = FindingsPage {
            node,
            updated: rfc3339(SystemTime::now()),
            findings: [],
            omitted: 0,
            cannot_trace: &why,
            reason,
        };
        Arc::new(Pages {
            metrics: render_untraceable(node, env!("CARGO_PKG_VERSION"), kernel, reason, &cost),
            findings: serde_json::to_string(&findings).expect("the page serialises"),
            rendered: Some(std::time::Instant::now()),
            // Ready on purpose: a restart would not change the node, and a
            // rollout must not stall on nodes that cannot be traced.
            ready: Some(format!(
                "not tracing on purpose (--stay-up): cannot trace this node ({reason}); /findings says why"
            )),
        })
    };
    let (pages, published) = watch::channel(render());
    listener.serve(published);
    stderr_line(format_args!(
        "podstuck: cannot trace this node ({reason}): {why}. Staying up (--stay-up): http://{serving}/metrics says podstuck_up 0 and podstuck_cannot_trace{{reason=\"{reason}\"}}, /findings says why; a restart would not change it"
    ));
    let mut every = tokio::time::interval(RENDER_EVERY.max(Duration::from_millis(100)));
    let StopSignals { int, term, hup } = signals;
    loop {
        tokio::select! {
            _ = every.tick() => { pages.send_replace(render()); }
            _ = int.recv() => break,
            _ = term.recv() => break,
            _ = hup.recv() => break,
        }
    }
    Ok(Verdict { critical_active: 0, ran_its_duration: false })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::preflight::Problem;

    #[test]
    fn each_cause_gets_its_one_word() {
        let node = |what: &str| -> anyhow::Error {
            NodeNotReady(vec![Problem { what: what.into(), fix: "do this".into() }]).into()
        };
        let said = |e: anyhow::Error| cannot_trace(&e).map(|(r, _)| r);
        assert_eq!(said(node("kernel lockdown=confidentiality refuses ...")), Some("lockdown"));
        assert_eq!(said(node("this kernel has no BTF")), Some("no-btf"));
        assert_eq!(said(node("podstuck lacks the privileges to load kernel programs")), Some("privileges"));
        assert_eq!(said(node("tracefs is not mounted")), Some("tracefs"));
        assert_eq!(said(node("no BPF ring buffer in 5.4")), Some("kernel"));
        assert_eq!(said(TracingRefused("verifier said no".into()).into()), Some("load-failed"));
        let lockdown_at_load = TracingRefused("loading: kernel lockdown=confidentiality refuses BPF programs".into());
        assert_eq!(said(lockdown_at_load.into()), Some("lockdown"));
        // A busy port is no state of the node: the run still ends on it.
        assert_eq!(said(anyhow::anyhow!("--listen 0.0.0.0:9464: the port is in use")), None);
    }

    #[test]
    fn the_whole_sentence_keeps_what_to_do() {
        let e: anyhow::Error =
            NodeNotReady(vec![Problem { what: "no BTF".into(), fix: "give --btf FILE".into() }]).into();
        assert_eq!(cannot_trace(&e).unwrap().1, "no BTF (what to do: give --btf FILE)");
    }
}
