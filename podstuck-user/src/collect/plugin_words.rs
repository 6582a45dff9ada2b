//! The program that reads what running CNI plugins write on their stdout
//! (`plugin_write`, on `syscalls:sys_enter_write`), attached only while a
//! sandbox's DEL is failing: every write of the node passes a tracepoint
//! program while it is, so it is loaded at start and attached when the
//! diagnosis asks, detached when it no longer does.

use aya::programs::{trace_point::TracePointLinkId, TracePoint};
use aya::Ebpf;
use podstuck_common::program;

/// The program's state, and why it cannot be attached when it cannot.
pub(super) struct PluginWords {
    loaded: Result<(), String>,
    link: Option<TracePointLinkId>,
    /// Why it cannot be attached was handed to the caller.
    said: bool,
}

impl PluginWords {
    /// Loads the program (attached later, on demand); a kernel that
    /// refuses it keeps the rest.
    pub(super) fn load(ebpf: &mut Ebpf) -> (PluginWords, Option<u32>) {
        let loaded = (|| -> anyhow::Result<u32> {
            let program: &mut TracePoint = ebpf
                .program_mut(program::PLUGIN_WRITE)
                .ok_or_else(|| anyhow::anyhow!("program {} missing from the embedded object", program::PLUGIN_WRITE))?
                .try_into()?;
            program.load()?;
            Ok(program.info()?.id())
        })();
        match loaded {
            Ok(id) => (PluginWords { loaded: Ok(()), link: None, said: false }, Some(id)),
            Err(e) => {
                (PluginWords::missing(super::one_line(&format!("loading {}: {e:#}", program::PLUGIN_WRITE))), None)
            }
        }
    }

    /// Never attached, for `why`.
    pub(super) fn missing(why: String) -> PluginWords {
        PluginWords { loaded: Err(why), link: None, said: false }
    }

    /// Attaches or detaches the program as `on` says; why not, the first
    /// time it is asked for and cannot be attached.
    pub(super) fn follow(&mut self, ebpf: &mut Ebpf, on: bool) -> Result<(), String> {
        if let Err(why) = &self.loaded {
            if on && !self.said {
                self.said = true;
                return Err(why.clone());
            }
            return Ok(());
        }
        let Some(program) = ebpf.program_mut(program::PLUGIN_WRITE) else { return Ok(()) };
        let Ok(program): Result<&mut TracePoint, _> = program.try_into() else { return Ok(()) };
        match (on, self.link.take()) {
            (true, None) => match program.attach("syscalls", "sys_enter_write") {
                Ok(link) => self.link = Some(link),
                Err(e) => {
                    let why = format!("attaching to tracepoint syscalls:sys_enter_write: {e}");
                    self.loaded = Err(why.clone());
                    self.said = true;
                    return Err(why);
                }
            },
            (false, Some(link)) => {
                let _ = program.detach(link);
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
