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
        /// Live upgrade: continue the daemon whose state is at this descriptor (given by the
        /// old code across execve; not for people).
        #[arg(long, hide = true, value_name = "FD")]
        resume_fd: Option<i32>,
        /// Live upgrade: the old binary, open, to return to if resuming fails.
        #[arg(long, hide = true, value_name = "FD", requires = "resume_fd")]
        fallback_fd: Option<i32>,
        /// Live upgrade: this is the old binary taking its shells back, and why.
        #[arg(long, hide = true, value_name = "WHY", requires = "resume_fd")]
        fallback_reason: Option<String>,
    },
    /// Live upgrade probe: print this binary's version and the handover states it reads.
    #[command(hide = true)]
    HandoverInfo,
    /// Live upgrade probe: check that the handover state at descriptor FD can be read.
    #[command(hide = true)]
    HandoverCheck {
        /// The state's descriptor.
        #[arg(long)]
        fd: i32,
    },
    /// Pipe stdin/stdout to the daemon's socket, starting the daemon if needed.
    Bridge {
        /// Never start a daemon: when none answers, exit with status 69 ("no agent running").
        #[arg(long = "no-start")]
        no_start: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    match cli.command {
        Cmd::HandoverInfo => {
            println!("{}", relay_agent::upgrade::probe::info_line());
            return ExitCode::SUCCESS;
        }
        Cmd::HandoverCheck { fd } => {
            return match relay_agent::upgrade::check_fd(fd) {
                Ok(n) => {
                    println!("{}", relay_agent::upgrade::probe::check_line(n));
                    ExitCode::SUCCESS
                }
                Err(e) => {
                    eprintln!("relay-agent: {e}");
                    ExitCode::FAILURE
                }
            };
        }
        _ => {}
    }
    let result = Paths::from_env()
        .map_err(anyhow::Error::from)
        .and_then(|paths| match cli.command {
            Cmd::Daemon {
                resume_fd: Some(fd),
                fallback_fd,
                fallback_reason,
                ..
            } => relay_agent::daemon::resume(&paths, fd, fallback_fd, fallback_reason),
            Cmd::Daemon { foreground, .. } => relay_agent::daemon::main(&paths, foreground),
            Cmd::Bridge { no_start: false } => {
                relay_agent::bridge::main(&paths).map(|()| ExitCode::SUCCESS)
            }
            Cmd::Bridge { no_start: true } => {
                relay_agent::bridge::main_connect_only(&paths).map(|()| ExitCode::SUCCESS)
            }
            Cmd::HandoverInfo | Cmd::HandoverCheck { .. } => unreachable!("handled above"),
        });
    match result {
        Ok(code) => code,
        Err(e) if e.downcast_ref::<relay_agent::bridge::NoAgent>().is_some() => {
            eprintln!("relay-agent: {e}");
            ExitCode::from(relay_agent::bridge::EXIT_NO_AGENT as u8)
        }
        Err(e) => {
            // Read by the connector (bridge) and shown to the user: no escape codes.
            let message = format!("{e:#}");
            eprintln!("relay-agent: error: {}", relay_agent::log::plain(&message));
            ExitCode::FAILURE
        }
    }
}
