//! The program that reads what running CNI plugins write on their stdout
//! (`plugin_write`, on `syscalls:sys_enter_write`), there only while a
//! sandbox's DEL is failing: every write of the node passes a tracepoint
//! program while it is attached, so it is loaded and attached when the
//! diagnosis asks and unloaded when it no longer does (podstuck holds no
//! program it does not run).

use aya::programs::{trace_point::TracePointLinkId, TracePoint};
use aya::Ebpf;
use podstuck_common::program;

/// The program's state, and why it cannot be attached when it cannot.
pub(super) struct PluginWords {
    /// Why it cannot be loaded or attached here, once known (or from the
    /// start: the lifecycle's programs are not attached).
    refused: Option<String>,
    link: Option<TracePointLinkId>,
    /// Why it cannot be attached was handed to the caller.
    said: bool,
}

impl PluginWords {
    /// Attached when asked.
    pub(super) fn ready() -> PluginWords {
        PluginWords { refused: None, link: None, said: false }
    }

    /// Never attached, for `why`.
    pub(super) fn missing(why: String) -> PluginWords {
        PluginWords { refused: Some(why), link: None, said: false }
    }

    /// Loads and attaches the program, or detaches and unloads it, as `on`
    /// says; why not, the first time it is asked for and cannot be.
    pub(super) fn follow(&mut self, ebpf: &mut Ebpf, on: bool) -> Result<(), String> {
        if self.refused.is_none() {
            if let Err(why) = self.switch(ebpf, on) {
                self.refused = Some(why);
            }
        }
        match &self.refused {
            Some(why) if on && !self.said => {
                self.said = true;
                Err(why.clone())
            }
            _ => Ok(()),
        }
    }

    /// The program attached (loaded first) or detached (and unloaded).
    fn switch(&mut self, ebpf: &mut Ebpf, on: bool) -> Result<(), String> {
        let program: &mut TracePoint = ebpf
            .program_mut(program::PLUGIN_WRITE)
            .ok_or_else(|| format!("program {} missing from the embedded object", program::PLUGIN_WRITE))?
            .try_into()
            .map_err(|e| format!("program {}: {e}", program::PLUGIN_WRITE))?;
        match (on, self.link.take()) {
            (true, None) => match program.load().and_then(|()| program.attach("syscalls", "sys_enter_write")) {
                Ok(link) => self.link = Some(link),
                Err(e) => {
                    let _ = program.unload();
                    return Err(super::one_line(&format!(
                        "loading {} on tracepoint syscalls:sys_enter_write: {e:#}",
                        program::PLUGIN_WRITE
                    )));
                }
            },
            (false, Some(link)) => {
                let _ = program.detach(link);
                let _ = program.unload();
            }
            (_, link) => self.link = link,
        }
        Ok(())
    }

    /// Whether the program is attached now.
    pub(super) fn attached(&self) -> bool {
        self.link.is_some()
    }
}
