//! Command-line definition of `relayctl` (clap derive); checks what the user typed, nothing more.

use std::time::Duration;

use clap::{Parser, Subcommand, ValueEnum};
use relay_protocol::LeaseState;

/// Inspect and manage the shells a relay agent keeps.
///
/// IDs: every command that names shells takes what `relayctl leases` prints: a PTY id
/// (`<incarnation>.<counter>`) or a pane key (`workspace/tab/leaf`, meaning the pane's live PTY
/// at the moment relayctl lists the leases; only that exact PTY is acted on).
///
/// Exit status: 0 when everything requested was done, 1 when something was not (an error, a
/// shell that was refused, kept or could not be verified), 2 for usage errors.
#[derive(Debug, Parser)]
#[command(name = "relayctl", version)]
pub struct Cli {
    /// Manage the agent on this SSH host (`user@host[:port]` or an ssh_config alias).
    #[arg(long, global = true, value_name = "HOST")]
    pub ssh: Option<String>,
    /// SSH flags for --ssh (--accept-new, -F, -i, --port).
    #[command(flatten)]
    pub ssh_args: relay_cli::ssh_args::SshArgs,
    /// Give up when the agent has not answered a request within SECS seconds (a stopped or
    /// overloaded agent). Also bounds reaching the local agent; an SSH connection has its own
    /// bounds (ConnectTimeout, 30 s for the agent's hello). Ending shells takes the agent up to
    /// about 7 s (SIGHUP, then SIGKILL after 3 s).
    #[arg(long, global = true, value_name = "SECS", default_value = "10", value_parser = parse_secs)]
    pub timeout: Duration,
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Debug, Subcommand)]
pub enum Command {
    /// List the live leases (attached, detached, superseded); --all adds ended ones. Never
    /// creates anything.
    ///
    /// With an agent that has the lifecycle policy, a TAG column says what the policy will do:
    /// `protected`, `cleanup in 4m` (`cleanup due` once past), `suggested` (for `relayctl gc`),
    /// `kept: has children`; for an ended lease it shows how it ended
    /// (`policy: never used, detached 10m`).
    Leases {
        /// Print a JSON array instead of a table. Fields: pane{workspace,tab,leaf}, pty, pid,
        /// state, since_ms, last_output_ms, bytes_out, command, exit{code,signal}, reason,
        /// protected, attached, tag, detail. `tag` is null or
        /// {kind: protected|cleanup|suggested|kept, at_ms (cleanup: deadline, ms since the Unix
        /// epoch), why (cleanup, suggested, kept)}; `detail` is null or how an ended lease ended
        /// (both null with an agent without the lifecycle policy).
        #[arg(long)]
        json: bool,
        /// Include ended leases (like `docker ps -a`).
        #[arg(long)]
        all: bool,
        /// Only leases in this state (repeat for several); `ended` needs no --all.
        #[arg(long, value_enum, value_name = "STATE")]
        state: Vec<StateArg>,
        /// Only leases of panes in this workspace.
        #[arg(long, value_name = "W")]
        workspace: Option<String>,
    },
    /// Show the agent's version, incarnation, pid, uptime, lease counts and connections; with
    /// the lifecycle policy also the policy in force, counts by tag and the daemon's memory;
    /// with live upgrade the running binary and whether a newer agent is installed.
    Status {
        /// Print JSON instead of text (fields: agent_version, incarnation, pid, started_ms,
        /// uptime_ms, leases{attached,detached,ended,superseded}, connections, and
        /// policy{unused_grace_ms,idle_expiry_ms,suggest_after_ms}, tags{protected,cleanup,
        /// suggested,kept}, rss_bytes, which are null without the lifecycle policy; agent_path,
        /// newest_installed{path,version}, newer_installed, null without live upgrade).
        #[arg(long)]
        json: bool,
    },
    /// End exactly the named shells (PTY ids or pane keys from `relayctl leases`), or with --all
    /// every live unprotected one. Shows what it ends and asks first; then prints what became
    /// of each. Exit status 1 when one was refused, kept or could not be verified.
    Kill {
        /// PTY ids or pane keys (see `relayctl --help`).
        #[arg(value_name = "ID", required_unless_present = "all")]
        ids: Vec<String>,
        /// Old form `relayctl kill PANE --pty ID`: the PTY id of the one pane named.
        #[arg(long, value_name = "PTY_ID", conflicts_with = "all")]
        pty: Option<String>,
        /// Every live shell that is not protected, as listed once before asking.
        #[arg(long, conflicts_with = "ids")]
        all: bool,
        /// With --all: only shells of this workspace.
        #[arg(long, value_name = "W", conflicts_with_all = ["ids", "pty"])]
        workspace: Option<String>,
        /// Do not ask (needed when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
    },
    /// Exempt a shell from cleanup by the lifecycle policy and `gc` (or take the exemption back
    /// with --off).
    Protect {
        /// PTY id or pane key (see `relayctl --help`).
        #[arg(value_name = "ID")]
        id: String,
        /// Old form `relayctl protect PANE --pty ID`: the PTY id of the pane named.
        #[arg(long, value_name = "PTY_ID")]
        pty: Option<String>,
        /// Remove the protection.
        #[arg(long)]
        off: bool,
    },
    /// End all eligible shells: lists exactly the ones whose cleanup is due or suggested, with
    /// the reason, asks, then lets the agent check each again and end it only if it is still
    /// eligible. Exit status 1 when one was refused or could not be verified (a shell kept
    /// because it changed is a normal answer).
    Gc {
        /// Only list the eligible shells.
        #[arg(long)]
        dry_run: bool,
        /// Do not ask (needed when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
    },
    /// Prune the history of ended leases: every ended one (--all), or those named (PTY ids, or
    /// pane keys for all ended leases of the pane). Live shells are never touched.
    Forget {
        /// PTY ids or pane keys of ended leases.
        #[arg(value_name = "ID", required_unless_present = "all")]
        ids: Vec<String>,
        /// Every ended lease.
        #[arg(long, conflicts_with = "ids")]
        all: bool,
    },
    /// Stop the agent daemon on this machine (SIGTERM). It ends every shell it keeps; they are
    /// reported `agent restarted` afterwards. Refuses while shells run unless --yes is given.
    Stop {
        /// Stop even though shells are running (they end with the agent).
        #[arg(long)]
        yes: bool,
    },
    /// Swap the running agent's code under its shells (live upgrade): the daemon hands every
    /// PTY to the newest agent installed in $RELAY_HOME/bin (or the binary named by --to) in the
    /// same process. Shells, their pids, PTY ids and output offsets stay; clients reconnect by
    /// themselves. The new binary is checked first: one that cannot run or cannot read the
    /// daemon's state is refused and the daemon keeps serving. Asks first.
    Upgrade {
        /// The agent binary to hand over to: a path on the agent's host (absolute with --ssh;
        /// for the local agent a relative one is taken from the current directory). Without
        /// it: the newest agent in the agent's $RELAY_HOME/bin (default ~/.relay/bin).
        #[arg(long, value_name = "AGENT_BINARY", value_parser = clap::builder::NonEmptyStringValueParser::new())]
        to: Option<String>,
        /// Allow a downgrade to an older version, or the running version from $RELAY_HOME/bin.
        #[arg(long)]
        force: bool,
        /// Do not ask (needed when stdin is not a terminal).
        #[arg(long)]
        yes: bool,
    },
}

/// A lease state as typed on the command line.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum StateArg {
    /// A connection holds it.
    Attached,
    /// No connection; the shell runs.
    Detached,
    /// The shell is gone.
    Ended,
    /// Replaced for its pane; the shell may still run.
    Superseded,
}

impl From<StateArg> for LeaseState {
    fn from(s: StateArg) -> LeaseState {
        match s {
            StateArg::Attached => LeaseState::Attached,
            StateArg::Detached => LeaseState::Detached,
            StateArg::Ended => LeaseState::Ended,
            StateArg::Superseded => LeaseState::Superseded,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("relayctl").chain(args.iter().copied()))
    }

    #[test]
    fn the_definition_is_consistent() {
        use clap::CommandFactory;
        Cli::command().debug_assert();
    }

    #[test]
    fn kill_needs_ids_or_all_and_not_both() {
        assert!(parse(&["kill"]).is_err());
        assert!(parse(&["kill", "--all", "w/t/0"]).is_err());
        assert!(parse(&["kill", "--workspace", "w", "w/t/0"]).is_err());
        assert!(
            parse(&["kill", "--workspace", "w"]).is_err(),
            "--workspace needs --all"
        );
        assert!(parse(&["kill", "--all", "--workspace", "w", "--yes"]).is_ok());
        assert!(parse(&["kill", "w/t/0", "--pty", "ab.1"]).is_ok());
        assert!(parse(&["forget"]).is_err());
        assert!(parse(&["forget", "--all"]).is_ok());
    }
}
