//! Command-line definition of `relay` (clap derive); checks what the user typed, nothing more.

use crate::common::destination::Destination;
use clap::{Args, Parser, Subcommand};
use relay_protocol::PaneKey;

/// Terminals that outlive their connection.
///
/// `relay shell` opens a pane's shell (creating it the first time) and attaches to it like ssh;
/// type `~.` after Enter to detach and leave it running. Running the same command again
/// re-attaches and replays the output you missed.
///
/// Escapes (only when stdin is a terminal, and only right after Enter): `~.` detaches, `~?` shows
/// help, `~~` sends a `~`. As in ssh, a `~.` at the start of a line inside pasted text detaches
/// too, and the rest of that paste is not sent. Input is a byte stream: a Ctrl-C typed while a
/// huge paste is still being delivered reaches the shell after the paste.
#[derive(Debug, Parser)]
#[command(name = "relay", version)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// Attach to the pane's shell, creating the shell if the pane has none.
    ///
    /// Type `~.` after Enter to detach (the shell keeps running), `~?` for help, `~~` to send a
    /// `~`. As in ssh, a `~.` at the start of a line inside pasted text detaches too, and the rest
    /// of that paste is not sent. SIGTERM or SIGHUP end relay at once and leave the shell
    /// running.
    Shell(PaneArgs),
    /// Attach to an existing pane's shell; never creates one.
    ///
    /// Escapes and signals work as for `relay shell`.
    Attach(PaneArgs),
}

/// Which pane, where.
#[derive(Debug, Args)]
pub struct PaneArgs {
    /// SSH destination (user@host or an ssh_config alias). Omit it (or pass --local) for this
    /// machine.
    #[arg(value_name = "HOST")]
    pub host: Option<String>,
    /// Use the agent on this machine.
    #[arg(long, conflicts_with = "host")]
    pub local: bool,
    /// Workspace the pane belongs to (non-empty, no `/`, no control characters, at most 256
    /// bytes).
    #[arg(long, short = 'w', value_name = "W", default_value = "default", value_parser = name)]
    pub workspace: String,
    /// Name of the pane inside the workspace (same rules as the workspace).
    #[arg(long, short = 'p', value_name = "NAME", default_value = "main", value_parser = name)]
    pub pane: String,
    /// SSH flags (--accept-new, -F, -i, --port).
    #[command(flatten)]
    pub ssh: crate::common::ssh_args::SshArgs,
}

impl PaneArgs {
    /// Where to connect (the one place that resolves `--local` versus HOST).
    pub fn destination(&self) -> Result<Destination, relay_connector::Error> {
        Destination::from_args(self.local, self.host.as_deref())
    }

    /// The pane key: `(workspace, pane name, "0")`.
    pub fn pane_key(&self) -> PaneKey {
        PaneKey::new(&self.workspace, &self.pane, "0")
    }
}

/// Longest workspace or pane name, in bytes.
pub const MAX_NAME: usize = 256;

/// Checks a workspace or pane name: it becomes one part of the pane key `workspace/pane/0`, which
/// `relayctl` must be able to address.
fn name(s: &str) -> Result<String, String> {
    const FORM: &str = "use a non-empty name without `/` or control characters, at most 256 bytes";
    if s.is_empty() {
        return Err(format!("the name is empty; {FORM}"));
    }
    if s.contains('/') {
        return Err(format!(
            "{s:?} contains `/`, which separates the parts of a pane key; {FORM}"
        ));
    }
    if s.chars().any(char::is_control) {
        return Err(format!("{s:?} contains a control character; {FORM}"));
    }
    if s.len() > MAX_NAME {
        return Err(format!("the name is {} bytes long; {FORM}", s.len()));
    }
    Ok(s.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("relay").chain(args.iter().copied()))
    }

    /// Regression: `--pane p/q` created `default/p/q/0` and `-w '' --pane ''` created `//0`,
    /// neither of which `relayctl kill` could address.
    #[test]
    fn pane_and_workspace_names_that_break_the_key_are_refused() {
        let long = "x".repeat(MAX_NAME + 1);
        for bad in [
            &["shell", "--pane", "p/q"][..],
            &["shell", "-w", "", "--pane", "x"],
            &["shell", "--pane", ""],
            &["attach", "-w", "a\u{1b}b"],
            &["shell", "--pane", &long],
        ] {
            let err = parse(bad).unwrap_err();
            assert_eq!(
                err.kind(),
                clap::error::ErrorKind::ValueValidation,
                "{bad:?}"
            );
            assert!(err.to_string().contains("without `/`"), "{bad:?}: {err}");
        }
        let ok = parse(&["shell", "-w", "wörk", "--pane", &"é".repeat(128)]).unwrap();
        let Command::Shell(args) = ok.command else {
            panic!("shell");
        };
        assert_eq!(
            args.pane_key().to_string(),
            format!("wörk/{}/0", "é".repeat(128))
        );
    }
}
