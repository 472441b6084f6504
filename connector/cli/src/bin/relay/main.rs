//! `relay`: an ssh-like client for terminals that outlive their connection.
//!
//! This file only parses arguments, runs, and turns the outcome into an exit code: the shell's own
//! code after it exits, 0 after a detach, 2 when the pane does not exist (or has ended) for
//! `relay attach`, 255 for a command line that is not valid (as ssh), 1 for other errors. Errors
//! are printed once, here.

mod cli;
mod escape;
mod input;
mod modes;
mod pane;
mod policy;
mod predict;
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
    let cli = match cli::Cli::try_parse() {
        Ok(cli) => cli,
        // `--help` and `--version` are not errors; a bad command line exits 255 like ssh's, so
        // it is never taken for `relay attach`'s "no such pane" (2).
        Err(e) => {
            let _ = e.print();
            return ExitCode::from(if e.use_stderr() { USAGE } else { 0 });
        }
    };
    // The sidecar serves many panes at once; a terminal client needs one thread.
    let workers = if matches!(cli.command, cli::Command::Serve(_)) {
        2
    } else {
        1
    };
    let result = relay_cli::run_on(workers, async {
        match &cli.command {
            cli::Command::Shell(args) => shell::run(args, shell::Mode::Shell).await,
            cli::Command::Attach(args) => shell::run(args, shell::Mode::Attach).await,
            cli::Command::Serve(_) => serve::run().await,
        }
    });
    match result {
        Ok(code) => ExitCode::from(code),
        Err(err) => {
            // The whole chain: the connector's sentence and its causes (each once).
            eprintln!("relay: {}", relay_connector::report(err.as_ref()));
            ExitCode::from(exit_code(&err))
        }
    }
}

/// Exit code of a command line that is not valid (ssh's 255).
const USAGE: u8 = 255;

fn exit_code(err: &anyhow::Error) -> u8 {
    if let Some(f) = err.downcast_ref::<Failure>() {
        return f.code;
    }
    1
}

#[cfg(test)]
mod tests {
    /// A refused connect prints what `{:#}` printed when the cause was formatted into the
    /// connector's message; a cause is printed once.
    #[test]
    fn failures_print_their_whole_chain_once() {
        let io = std::io::Error::from(std::io::ErrorKind::ConnectionRefused);
        let before = format!("cannot reach the relay agent (h): ssh: cannot connect to h:22: {io}");
        let err = anyhow::Error::new(relay_connector::Error::ConnectRefused {
            message: "cannot connect to h:22".into(),
            source: io,
        })
        .context("cannot reach the relay agent (h)");
        assert_eq!(relay_connector::report(err.as_ref()), before);
        assert_eq!(format!("{err:#}"), before);

        let err = anyhow::Error::new(relay_connector::Error::Io(std::io::Error::other(
            "disk full",
        )));
        assert_eq!(relay_connector::report(err.as_ref()), "io: disk full");
    }
}
