//! `relay`: an ssh-like client for terminals that outlive their connection.
//!
//! This file only parses arguments, runs, and turns the outcome into an exit code: the shell's own
//! code after it exits, 0 after a detach, 2 when the pane does not exist (or has ended) for
//! `relay attach`, 1 for other errors. Errors are printed once, here.

mod cli;
#[path = "../common/mod.rs"]
mod common;
mod escape;
mod input;
mod modes;
mod policy;
mod screen;
mod serve;
mod shell;
mod status;
mod terminal;

use std::process::ExitCode;

use clap::Parser;

/// An error with a chosen exit code.
#[derive(Debug, thiserror::Error)]
#[error("{message}")]
pub struct Failure {
    /// Process exit code.
    pub code: u8,
    /// What went wrong and how to fix it.
    pub message: String,
}

fn main() -> ExitCode {
    let cli = cli::Cli::parse();
    // The sidecar serves many panes at once; a terminal client needs one thread.
    let workers = if matches!(cli.command, cli::Command::Serve(_)) {
        2
    } else {
        1
    };
    let result = common::run_on(workers, async {
        match &cli.command {
            cli::Command::Shell(args) => shell::run(args, shell::Mode::Shell).await,
            cli::Command::Attach(args) => shell::run(args, shell::Mode::Attach).await,
            cli::Command::Serve(_) => serve::run().await,
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            eprintln!("relay: {err:#}");
            ExitCode::from(exit_code(&err))
        }
    }
}

fn exit_code(err: &anyhow::Error) -> u8 {
    if let Some(f) = err.downcast_ref::<Failure>() {
        return f.code;
    }
    1
}
