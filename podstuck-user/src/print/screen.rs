//! On a terminal: the live view while the run lasts (findings first, with
//! their fix; the busiest series; the calls still waiting; notes), then,
//! with the terminal given back, a summary on the user's own screen, fit
//! to paste into an incident channel. Messages go on the screen while it
//! lasts (stderr would tear it), and to stderr after the summary.

use std::io;
use std::time::Duration;

use crate::diagnose::Report;
use crate::run::{RunFacts, Tracing};
use crate::view::model::Notes;
use crate::view::text::summary;
use crate::view::{LiveTerminal, LiveView, Moment, Quit, RunHeading};

use super::{stderr_line, Ending, Out, Printer};

/// How often the live view is redrawn: often enough to feel live, rarely
/// enough to cost nothing.
const SCREEN_EVERY: Duration = Duration::from_millis(250);

/// The live view, then its summary.
pub struct Screen {
    /// Until the run ends.
    terminal: Option<LiveTerminal>,
    view: LiveView,
    /// What would go to stderr while the view owns the terminal.
    notes: Notes,
    /// Said on stderr before the view took the screen (they stay above the
    /// summary) and shown on it: not said again after it.
    warnings: Vec<String>,
}

impl Screen {
    pub fn new(terminal: LiveTerminal, run: &RunFacts, warnings: &[String]) -> Screen {
        let mut notes = Notes::default();
        for warning in warnings {
            notes.add(warning.trim_start_matches("podstuck: "));
        }
        Screen {
            terminal: Some(terminal),
            view: LiveView::new(RunHeading::of(run)),
            notes,
            warnings: warnings.to_vec(),
        }
    }
}

impl Printer for Screen {
    // The view's header says it.
    fn start(&mut self, _out: &mut Out, _run: &RunFacts, _tracing: &Tracing) -> io::Result<()> {
        Ok(())
    }

    // The screen shows every finding's latest state.
    fn findings(&mut self, _out: &mut Out, _reports: &[Report]) -> io::Result<()> {
        Ok(())
    }

    fn say(&mut self, message: &str) {
        self.notes.add(message);
    }

    fn shows_every(&self) -> Option<Duration> {
        Some(SCREEN_EVERY)
    }

    fn show(&mut self, moment: &Moment<'_>) {
        if let Some(terminal) = &self.terminal {
            terminal.show(self.view.screen(moment, &self.notes));
        }
    }

    fn finish(&mut self, out: &mut Out, ending: &Ending<'_>) -> io::Result<()> {
        // Give the terminal back first: the summary goes to the user's own screen.
        if let Some(terminal) = self.terminal.take() {
            terminal.close();
        }
        if let Some(moment) = &ending.moment {
            let stopped_by = ending.stopped_by.unwrap_or("the end of --duration");
            // Wherever standard output still goes; nowhere after a hang-up.
            out.text(&summary(self.view.run(), moment, Some(stopped_by)))?;
            out.flush()?;
        }
        // Said on the screen while it lasted; kept for after it.
        for note in self.notes.lines().iter().filter(|n| !self.warnings.iter().any(|w| w.ends_with(n.as_str()))) {
            stderr_line(format_args!("podstuck: {note}"));
        }
        if let Some(Quit::TerminalFailed(why)) = ending.quit {
            stderr_line(format_args!("podstuck: the live view stopped: {why}"));
        }
        Ok(())
    }
}
