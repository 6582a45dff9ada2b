//! The `podstuck` command: argument parsing and exit codes only; the work
//! is in the library.

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};
use podstuck::watch::{watch, NodeNotReady, WatchOptions};

#[derive(Parser)]
#[command(
    name = "podstuck",
    version,
    about = "Why is this pod stuck in Terminating? Traces unlinkat, unlink, rmdir and umount2 on a Kubernetes node, in the kernel.",
    long_about = None
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Trace every unlinkat, unlink, rmdir and umount2 on the node as it completes.
    Watch {
        /// One JSON object per line (type "start", then "event"s, then "end").
        #[arg(long)]
        json: bool,
        /// Stop by itself after this long (e.g. 30s, 5m); default: until Ctrl-C or SIGTERM.
        #[arg(long, value_parser = humantime::parse_duration)]
        duration: Option<Duration>,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
        Ok(rt) => rt,
        Err(e) => {
            eprintln!("podstuck: cannot start the async runtime: {e}");
            return ExitCode::from(1);
        }
    };
    let result = match cli.command {
        Command::Watch { json, duration } => runtime.block_on(watch(&WatchOptions { json, duration })),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) if e.downcast_ref::<NodeNotReady>().is_some() => {
            eprintln!("podstuck: cannot trace on this node:\n{e}");
            ExitCode::from(2)
        }
        Err(e) => {
            eprintln!("podstuck: error: {e:#}");
            ExitCode::from(1)
        }
    }
}
