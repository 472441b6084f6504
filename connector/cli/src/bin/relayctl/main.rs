//! `relayctl`: operator commands against a relay agent (`leases`, `status`, `kill`, `protect`,
//! `gc`, `forget`, `stop`, `upgrade`).
//!
//! This file only parses arguments, runs, prints the error chain once and picks the exit code
//! (0 success, also when the reader of stdout went away; 1 failure — among them "no agent
//! running", as relayctl never starts an agent — or something requested not done; 2 usage
//! errors from clap).
//!
//! Layout: `cli.rs` (clap), `connect.rs` (the one connection, "no agent running"),
//! `commands.rs` (dispatch, `leases`, `status`, `stop`), `lifecycle.rs` (`kill`, `protect`,
//! `gc`, `forget`), `upgrade.rs` (`upgrade`), `targets.rs` (one listing of the leases, filters,
//! IDs → exact bindings; no IO), `confirm.rs` (the y/N question), `render.rs` (tables, JSON,
//! durations), `report.rs` (what kill, gc and forget print), `output.rs` (stdout whose closing
//! by the reader is not an error, stderr notes).

mod cli;
mod commands;
mod confirm;
mod connect;
mod lifecycle;
mod output;
mod render;
mod report;
mod targets;
mod upgrade;

use std::process::ExitCode;

use clap::Parser;

pub use cli::{Cli, Command};

fn main() -> ExitCode {
    let cli = Cli::parse();
    match relay_cli::run_on(1, commands::run(&cli)) {
        Ok(Outcome::Done) => ExitCode::SUCCESS,
        Ok(Outcome::NotAllDone) => ExitCode::FAILURE,
        // `relayctl leases | head -1`: the reader had what it wanted (see output.rs).
        Err(err) if err.downcast_ref::<output::StdoutClosed>().is_some() => ExitCode::SUCCESS,
        Err(err) => {
            // The whole chain: the connector's sentence and its causes (each once).
            output::note!("relayctl: {}", relay_connector::report(err.as_ref()));
            ExitCode::FAILURE
        }
    }
}

/// How a command that ran to its end went.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Everything requested was done.
    Done,
    /// The command reported what it could not do (refused, kept, unverified, not ended).
    NotAllDone,
}

impl Outcome {
    /// [`Outcome::Done`] when `done`.
    pub fn of(done: bool) -> Outcome {
        if done {
            Outcome::Done
        } else {
            Outcome::NotAllDone
        }
    }
}
