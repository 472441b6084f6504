//! Command-line definition of `relay` (clap derive); checks what the user typed, nothing more.

use clap::{Args, Parser, Subcommand};
use relay_connector::Destination;
use relay_protocol::PaneKey;

/// Terminals that outlive their connection.
///
/// `relay shell` opens a pane's shell (creating it the first time) and attaches to it like ssh;
/// type `~.` after Enter to detach and leave it running. Running the same command again
/// re-attaches and replays the output you missed.
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
    Shell(PaneArgs),
    /// Attach to an existing pane's shell; never creates one.
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
    /// Workspace the pane belongs to.
    #[arg(long, short = 'w', value_name = "W", default_value = "default")]
    pub workspace: String,
    /// Name of the pane inside the workspace.
    #[arg(long, short = 'p', value_name = "NAME", default_value = "main")]
    pub pane: String,
    /// SSH flags (--accept-new, -F, -i, --port).
    #[command(flatten)]
    pub ssh: relay_connector::ssh::cli::SshArgs,
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
