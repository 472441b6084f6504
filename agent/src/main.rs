//! `relay-agent`: the daemon that owns PTYs, and the bridge that connects stdio to it.
//! See the library docs (`relay_agent`) for the design.

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use relay_agent::paths::Paths;

/// relay's host-side agent.
#[derive(Debug, Parser)]
#[command(name = "relay-agent", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Cmd,
}

#[derive(Debug, Subcommand)]
enum Cmd {
    /// Run the per-user daemon (detaches itself unless --foreground).
    Daemon {
        /// Stay in the foreground and also log to stderr.
        #[arg(long)]
        foreground: bool,
    },
    /// Pipe stdin/stdout to the daemon's socket, starting the daemon if needed.
    Bridge,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = Paths::from_env()
        .map_err(anyhow::Error::from)
        .and_then(|paths| match cli.command {
            Cmd::Daemon { foreground } => relay_agent::daemon::main(&paths, foreground),
            Cmd::Bridge => relay_agent::bridge::main(&paths).map(|()| ExitCode::SUCCESS),
        });
    match result {
        Ok(code) => code,
        Err(e) => {
            // Read by the connector (bridge) and shown to the user: no escape codes.
            let message = format!("{e:#}");
            eprintln!(
                "relay-agent: error: {}",
                relay_agent::logging::plain(&message)
            );
            ExitCode::FAILURE
        }
    }
}
