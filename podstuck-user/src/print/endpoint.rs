//! `--listen`: the metrics endpoint, one more output beside whichever the
//! user sees. Each second it renders the run as it stands, `/metrics`
//! (the same renderer as `metrics.prom`, [`crate::export::prom`]) and
//! `/findings` (the current findings, shaped as `--json`'s finding lines,
//! with the node), and publishes both to the server of
//! [`crate::serve`], which only copies them out.
//!
//! [`WithEndpoint`] puts it beside the user's printer: that printer keeps
//! standard output, its messages and its pace; the endpoint only watches.

use std::io;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use serde::Serialize;
use tokio::sync::watch;

use crate::diagnose::{Finding, Report};
use crate::event::CallEvent;
use crate::export::prom::{render_endpoint, OwnCost, ProcessStats};
use crate::export::RunInfo;
use crate::identify::Identity;
use crate::latency::LatencyBook;
use crate::run::RunTotals;
use crate::run::{RunFacts, Tracing};
use crate::serve::{Pages, Published};
use crate::view::Moment;
use crate::words::rfc3339;

use super::json_lines::FindingLine;
use super::{Ending, Out, Printer};

/// How often the pages are rendered again: under the shortest scrape
/// interval anyone sets, and cheap (the book is bounded).
pub const RENDER_EVERY: Duration = Duration::from_secs(1);

/// Findings listed on `/findings` at most, the most pressing first (as
/// [`crate::diagnose::Diagnoser::findings`] orders them); the rest are
/// counted in `omitted`.
pub const MAX_FINDINGS_LISTED: usize = 500;

/// What `/ready` says of a run that traces.
pub const READY: &str = "tracing: podstuck's programs are attached";

/// Renders the pages and publishes them.
pub struct Endpoint {
    pages: watch::Sender<Arc<Pages>>,
    /// The run, once started; `node` names it on every page.
    run: Option<RunFacts>,
    /// The histogram files' interval, said in the run's metadata as in them.
    interval: Duration,
    rendered: Option<std::time::Instant>,
}

impl Endpoint {
    /// An endpoint and what its server reads.
    pub fn new(interval: Duration) -> (Endpoint, Published) {
        let (pages, published) = watch::channel(Arc::new(Pages::default()));
        (Endpoint { pages, run: None, interval, rendered: None }, published)
    }

    /// Renders the pages of `findings` and `book` now.
    fn publish(&mut self, book: &LatencyBook, totals: &RunTotals, findings: &[&Finding]) {
        let Some(run) = &self.run else { return };
        let now = SystemTime::now();
        let info = RunInfo::of_run(run, totals, self.interval, now, false);
        let cost = OwnCost { process: ProcessStats::now(), programs: totals.programs.clone() };
        let pages = Pages {
            metrics: render_endpoint(book, &info, findings, &cost),
            findings: findings_page(&run.node, now, findings),
            rendered: Some(std::time::Instant::now()),
            // Published from `start` on, which the run calls once every
            // program is attached: /ready's word for a rollout.
            ready: Some(READY.to_string()),
        };
        self.pages.send_replace(Arc::new(pages));
        self.rendered = Some(std::time::Instant::now());
    }
}

impl Printer for Endpoint {
    fn start(&mut self, _out: &mut Out, run: &RunFacts, _tracing: &Tracing) -> io::Result<()> {
        self.run = Some(run.clone());
        // Up, with nothing counted yet, until the first moment is shown.
        self.publish(&LatencyBook::new(run.started), &RunTotals::default(), &[]);
        Ok(())
    }

    fn findings(&mut self, _out: &mut Out, _reports: &[Report]) -> io::Result<()> {
        Ok(())
    }

    fn finish(&mut self, _out: &mut Out, ending: &Ending<'_>) -> io::Result<()> {
        if let Some(moment) = &ending.moment {
            self.publish(moment.book, moment.totals, moment.findings);
        }
        Ok(())
    }

    fn shows_every(&self) -> Option<Duration> {
        Some(RENDER_EVERY)
    }

    fn show(&mut self, moment: &Moment<'_>) {
        // Shown as often as the printer beside it redraws; rendered once a second.
        if self.rendered.is_some_and(|at| at.elapsed() < RENDER_EVERY - Duration::from_millis(50)) {
            return;
        }
        self.publish(moment.book, moment.totals, moment.findings);
    }
}

/// `/findings`: the node, when, and its findings as they stand.
#[derive(Serialize)]
struct FindingsPage<'a> {
    node: &'a str,
    updated: String,
    findings: Vec<FindingLine<'a>>,
    /// Findings past [`MAX_FINDINGS_LISTED`], not listed.
    omitted: usize,
}

/// The `/findings` document.
fn findings_page(node: &str, now: SystemTime, findings: &[&Finding]) -> String {
    let page = FindingsPage {
        node,
        updated: rfc3339(now),
        findings: findings.iter().take(MAX_FINDINGS_LISTED).map(|f| FindingLine::current(f, node)).collect(),
        omitted: findings.len().saturating_sub(MAX_FINDINGS_LISTED),
    };
    serde_json::to_string(&page).expect("findings serialise")
}

/// The user's printer, and the endpoint beside it.
pub struct WithEndpoint {
    printer: Box<dyn Printer>,
    endpoint: Endpoint,
}

impl WithEndpoint {
    pub fn new(printer: Box<dyn Printer>, endpoint: Endpoint) -> WithEndpoint {
        WithEndpoint { printer, endpoint }
    }
}

impl Printer for WithEndpoint {
    fn start(&mut self, out: &mut Out, run: &RunFacts, tracing: &Tracing) -> io::Result<()> {
        self.endpoint.start(out, run, tracing)?;
        self.printer.start(out, run, tracing)
    }

    fn findings(&mut self, out: &mut Out, reports: &[Report]) -> io::Result<()> {
        self.printer.findings(out, reports)
    }

    fn finish(&mut self, out: &mut Out, ending: &Ending<'_>) -> io::Result<()> {
        self.endpoint.finish(out, ending)?;
        self.printer.finish(out, ending)
    }

    fn call(&mut self, out: &mut Out, event: &CallEvent, identity: &Identity) -> io::Result<()> {
        self.printer.call(out, event, identity)
    }

    fn say(&mut self, message: &str) {
        self.printer.say(message);
    }

    fn shows_every(&self) -> Option<Duration> {
        match self.printer.shows_every() {
            Some(every) => Some(every.min(RENDER_EVERY)),
            None => Some(RENDER_EVERY),
        }
    }

    fn show(&mut self, moment: &Moment<'_>) {
        if self.printer.shows_every().is_some() {
            self.printer.show(moment);
        }
        self.endpoint.show(moment);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::diagnose::Status;
    use crate::view::model::tests::{volume_finding, POD};
    use serde_json::Value;

    #[test]
    fn the_findings_page_names_the_node_and_is_bounded() {
        let mut resolved = volume_finding();
        resolved.status = Status::Resolved;
        let active = volume_finding();
        let page: Value =
            serde_json::from_str(&findings_page("node-7", SystemTime::UNIX_EPOCH, &[&active, &resolved])).unwrap();
        assert_eq!(page["node"], "node-7");
        assert_eq!(page["updated"], "1970-01-01T00:00:00.000000000Z");
        assert_eq!(page["omitted"], 0);
        let first = &page["findings"][0];
        assert_eq!(first["type"], "finding");
        assert_eq!(first["node"], "node-7");
        assert_eq!(first["kind"], "volume-still-mounted");
        assert_eq!(first["pod_uid"], POD);
        assert_eq!(page["findings"][1]["status"], "resolved");
        // The same fields as a --json finding line, and the node.
        let line: Value =
            serde_json::from_str(&super::super::json_lines::finding_json(&Report::New(active.clone()))).unwrap();
        for key in line.as_object().unwrap().keys() {
            assert_eq!(first[key], line[key], "{key}");
        }
        assert_eq!(first.as_object().unwrap().len(), line.as_object().unwrap().len() + 1);

        let many: Vec<Finding> = (0..MAX_FINDINGS_LISTED + 3).map(|_| volume_finding()).collect();
        let refs: Vec<&Finding> = many.iter().collect();
        let page: Value = serde_json::from_str(&findings_page("n", SystemTime::UNIX_EPOCH, &refs)).unwrap();
        assert_eq!(page["findings"].as_array().unwrap().len(), MAX_FINDINGS_LISTED);
        assert_eq!(page["omitted"], 3);
    }
}
