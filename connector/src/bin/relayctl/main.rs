//! `relayctl`: operator commands against a relay agent (`leases`, `status`, `kill`, `protect`,
//! `gc`, `forget`, `stop`).
//!
//! This file only parses arguments, runs, prints the error chain once and picks the exit code
//! (0 success, 1 failure or something requested not done, 2 usage errors from clap).
//!
//! Layout: `cli.rs` (clap), `commands.rs` (connect, dispatch, `leases`, `status`, `stop`),
//! `lifecycle.rs` (`kill`, `protect`, `gc`, `forget`), `targets.rs` (one listing of the leases,
//! filters, IDs → exact bindings; no IO), `confirm.rs` (the y/N question), `render.rs` (tables,
//! JSON, durations), `report.rs` (what kill, gc and forget print).

mod cli;
mod commands;
#[path = "../common/mod.rs"]
mod common;
mod confirm;
mod lifecycle;
mod render;
mod report;
mod targets;

use std::process::ExitCode;

use clap::Parser;

pub use cli::{Cli, Command};

fn main() -> ExitCode {
    // Output piped into `head` and closed early ends relayctl quietly, as for other Unix tools,
    // instead of a panic on the failed write (Rust ignores SIGPIPE by default).
    // SAFETY: restoring the default disposition before any thread starts.
    unsafe {
        let _ = nix::sys::signal::signal(
            nix::sys::signal::Signal::SIGPIPE,
            nix::sys::signal::SigHandler::SigDfl,
        );
    }
    let cli = Cli::parse();
    match common::run(commands::run(&cli)) {
        Ok(Outcome::Done) => ExitCode::SUCCESS,
        Ok(Outcome::NotAllDone) => ExitCode::FAILURE,
        Err(err) => {
            eprintln!("relayctl: {err:#}");
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
