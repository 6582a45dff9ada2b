//! SIGINT, SIGTERM and SIGHUP, counted instead of obeyed: the plugin
//! must first stop the trace cleanly, copy its files and delete the debug
//! pod; a second signal means "now".

use std::sync::atomic::{AtomicI32, AtomicU32, Ordering};

use anyhow::{Context, Result};
use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};

static RECEIVED: AtomicU32 = AtomicU32::new(0);
static LAST: AtomicI32 = AtomicI32::new(0);

extern "C" fn note(signal: libc::c_int) {
    // Atomics only: all a signal handler may safely do.
    LAST.store(signal, Ordering::SeqCst);
    RECEIVED.fetch_add(1, Ordering::SeqCst);
}

/// The stop signals, caught for the rest of the process's life.
pub struct StopSignals(());

impl StopSignals {
    pub fn install() -> Result<StopSignals> {
        let action = SigAction::new(SigHandler::Handler(note), SaFlags::SA_RESTART, SigSet::empty());
        for signal in [Signal::SIGINT, Signal::SIGTERM, Signal::SIGHUP] {
            // SAFETY: the handler only touches atomics.
            unsafe { sigaction(signal, &action) }.with_context(|| format!("catching {signal}"))?;
        }
        Ok(StopSignals(()))
    }

    /// How many stop signals arrived so far.
    pub fn count(&self) -> u32 {
        RECEIVED.load(Ordering::SeqCst)
    }

    /// The last one's name ("SIGINT"), if any arrived.
    pub fn last(&self) -> Option<&'static str> {
        Signal::try_from(LAST.load(Ordering::SeqCst)).ok().map(Signal::as_str)
    }
}
