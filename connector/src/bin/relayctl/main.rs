//! `relayctl`: operator commands against a relay agent (`leases`, `status`, `kill`, `protect`).
//!
//! This file only parses arguments, runs, prints the error chain once and picks the exit code
//! (0 success, 1 failure, 2 usage errors from clap).

mod commands;
#[path = "../common/mod.rs"]
mod common;
mod render;

use std::process::ExitCode;
use std::time::Duration;

use clap::{Parser, Subcommand};

/// Inspect and manage the shells a relay agent keeps.
#[derive(Debug, Parser)]
#[command(name = "relayctl", version)]
pub struct Cli {
    /// Manage the agent on this SSH host (`user@host[:port]` or an ssh_config alias).
    #[arg(long, global = true, value_name = "HOST")]
    pub ssh: Option<String>,
    /// SSH flags for --ssh (--accept-new, -F, -i, --port).
    #[command(flatten)]
    pub ssh_args: crate::common::ssh_args::SshArgs,
    /// Give up when the agent has not answered a request within SECS seconds (a stopped or
    /// overloaded agent). Also bounds reaching the local agent; an SSH connection has its own
    /// bounds (ConnectTimeout, 30 s for the agent's hello).
    #[arg(long, global = true, value_name = "SECS", default_value = "10", value_parser = parse_secs)]
    pub timeout: Duration,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List every lease (live, detached, ended, superseded). Never creates anything.
    Leases {
        /// Print a JSON array instead of a table (fields: pane{workspace,tab,leaf}, pty, pid,
        /// state, since_ms, last_output_ms, bytes_out, command, exit{code,signal}, reason,
        /// protected, attached).
        #[arg(long)]
        json: bool,
    },
    /// Show the agent's version, incarnation, pid, uptime, lease counts and connections.
    Status {
        /// Print JSON instead of text.
        #[arg(long)]
        json: bool,
    },
    /// End exactly one shell: the pane's PTY with this id (see `relayctl leases`).
    Kill {
        /// Pane key as `workspace/tab/leaf`.
        pane: String,
        /// PTY id as shown by `relayctl leases` (`<incarnation>.<counter>`).
        #[arg(long)]
        pty: String,
    },
    /// Stop the agent daemon on this machine (SIGTERM). It ends every shell it keeps; they are
    /// reported `agent restarted` afterwards. Refuses while shells run unless --yes is given.
    Stop {
        /// Stop even though shells are running (they end with the agent).
        #[arg(long)]
        yes: bool,
    },
    /// Exempt a shell from lifecycle expiry (or take the exemption back with --off).
    Protect {
        /// Pane key as `workspace/tab/leaf`.
        pane: String,
        /// PTY id as shown by `relayctl leases` (`<incarnation>.<counter>`).
        #[arg(long)]
        pty: String,
        /// Remove the protection.
        #[arg(long)]
        off: bool,
    },
}

/// A positive number of seconds (fractions allowed), at most a day.
fn parse_secs(s: &str) -> Result<Duration, String> {
    let secs: f64 = s
        .parse()
        .map_err(|_| format!("{s:?} is not a number of seconds (e.g. 10 or 0.5)"))?;
    if !(secs > 0.0 && secs <= 86_400.0) {
        return Err(format!("{s} must be more than 0 and at most 86400 seconds"));
    }
    Ok(Duration::from_secs_f64(secs))
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = common::run(commands::run(&cli));
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("relayctl: {err:#}");
            ExitCode::FAILURE
        }
    }
}
