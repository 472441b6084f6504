//! Command-line definition of `relay` (clap derive); checks what the user typed, nothing more.

use clap::{Args, Parser, Subcommand};
use relay_cli::destination::Destination;
use relay_connector::predict::PredictMode;
use relay_protocol::PaneKey;

/// Terminals that outlive their connection.
///
/// `relay shell` opens a pane's shell (creating it the first time) and attaches to it like ssh;
/// type `~.` after Enter to detach and leave it running. Running the same command again
/// re-attaches and replays the output you missed. When the connection drops, relay says so on
/// the top line and comes back to the same shell by itself.
///
/// Exit status: the shell's (or the command's), 0 after a detach, 2 when `relay attach` finds no
/// such pane, 255 when relay could not connect or a retry cannot fix the connection (host key,
/// authentication, an agent that cannot run there) or the shell's end could not be learned, and
/// (as in ssh) when the command line is not valid.
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
    /// `relay shell HOST -- CMD ARGS...` runs CMD in a new pane instead (named `run-...` unless
    /// --pane is given), like `ssh -t HOST CMD`: the words are joined with spaces and run by
    /// `/bin/sh -c` on the host; relay exits with its status.
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
    /// Serve a desktop app over JSON-RPC 2.0 on stdin/stdout (one object per line; logs on
    /// stderr). The app spawns this and talks to it; see docs/embedding.md. Exits when stdin
    /// closes; nothing on any host ends then.
    Serve(ServeArgs),
}

/// How `relay serve` talks to the app.
#[derive(Debug, Args)]
pub struct ServeArgs {
    /// JSON-RPC on stdin and stdout (the only mode).
    #[arg(long, required = true)]
    pub stdio: bool,
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
    /// Name of the pane inside the workspace (same rules as the workspace; default `main`, or a
    /// fresh `run-...` name when a command is given).
    #[arg(long, short = 'p', value_name = "NAME", value_parser = name)]
    pub pane: Option<String>,
    /// When typed keys are shown before the host echoes them (on a terminal): `adaptive` while
    /// the round trip to the host exceeds 30 ms (off again below 20 ms), underlined until
    /// confirmed above 80 ms; `always`; `never`. A key is shown early only once the host has
    /// echoed an earlier key of the same line, so a password prompt never shows one.
    #[arg(
        long,
        value_name = "WHEN",
        env = "RELAY_PREDICT",
        default_value = "adaptive"
    )]
    pub predict: PredictMode,
    /// SSH flags (--accept-new, -F, -i, --port).
    #[command(flatten)]
    pub ssh: relay_cli::ssh_args::SshArgs,
    /// Command to run in a new pane instead of the login shell (after `--`).
    #[arg(last = true, value_name = "CMD", value_parser = CommandWord)]
    pub command: Vec<String>,
}

impl PaneArgs {
    /// Where to connect (the one place that resolves `--local` versus HOST).
    pub fn destination(&self) -> Result<Destination, relay_connector::Error> {
        Destination::from_args(self.local, self.host.as_deref())
    }

    /// How to come back after a detach: the same command, except for a command pane named by relay
    /// (running the same command would start another one).
    pub fn reattach_hint(&self, pane: &PaneKey, destination: &Destination) -> String {
        if self.pane.is_some() || self.command.is_empty() {
            return "run the same command to reattach".into();
        }
        let host = match destination {
            Destination::Local => String::new(),
            Destination::Host(h) => format!(" {h}"),
        };
        format!(
            "reattach with `relay attach{host} --workspace {} --pane {}`",
            pane.workspace, pane.tab
        )
    }

    /// The pane key: `(workspace, pane name, "0")`. Without --pane: `main` for the shell, a
    /// name of its own for each command run (`run-<unix ms>-<pid>`), so a command never lands in
    /// an existing shell.
    pub fn pane_key(&self) -> PaneKey {
        let name = match (&self.pane, self.command.is_empty()) {
            (Some(name), _) => name.clone(),
            (None, true) => "main".to_string(),
            (None, false) => {
                let ms = std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map(|d| d.as_millis())
                    .unwrap_or_default();
                format!("run-{ms}-{}", std::process::id())
            }
        };
        PaneKey::new(&self.workspace, &name, "0")
    }
}

/// A word of `relay shell -- CMD ARGS`: text, or an error that says how to pass other bytes (the
/// protocol carries commands as UTF-8; ssh would pass the bytes as they are).
#[derive(Debug, Clone, Copy)]
struct CommandWord;

impl clap::builder::TypedValueParser for CommandWord {
    type Value = String;

    fn parse_ref(
        &self,
        _cmd: &clap::Command,
        _arg: Option<&clap::Arg>,
        value: &std::ffi::OsStr,
    ) -> Result<String, clap::Error> {
        value.to_str().map(str::to_owned).ok_or_else(|| {
            clap::Error::raw(
                clap::error::ErrorKind::InvalidUtf8,
                format!(
                    "the command word {value:?} is not valid UTF-8, and relay carries commands \
                     as text; let the host's shell make those bytes, e.g. \
                     `relay shell HOST -- \"printf '\\377'\"` or \
                     `-- 'cat \"$(printf \"\\377\")\"'` (one quoted word: the words are joined \
                     and run by /bin/sh on the host)\n"
                ),
            )
        })
    }
}

/// Checks a workspace or pane name: it becomes one part of the pane key `workspace/pane/0`, which
/// `relayctl` must be able to address and print ([`relay_protocol::check_pane_part`]).
fn name(s: &str) -> Result<String, String> {
    relay_protocol::check_pane_part(s)
        .map(|()| s.to_string())
        .map_err(|e| format!("{e}; use {}", relay_protocol::PANE_PART_FORM))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> Result<Cli, clap::Error> {
        Cli::try_parse_from(std::iter::once("relay").chain(args.iter().copied()))
    }

    /// Regression: `--pane p/q` created `default/p/q/0` and `-w '' --pane ''` created `//0`,
    /// neither of which `relayctl kill` could address.
    /// Regression: `relay shell --local -- htop` failed with "--local cannot be used with
    /// [HOST]" (the command was taken for a host).
    #[test]
    fn a_command_after_double_dash_is_not_a_host() {
        let cli = parse(&["shell", "--local", "--", "htop", "-d", "5"]).unwrap();
        let Command::Shell(args) = cli.command else {
            panic!("shell");
        };
        assert!(args.local && args.host.is_none());
        assert_eq!(args.command, ["htop", "-d", "5"]);
        assert!(args.pane_key().tab.starts_with("run-"), "a pane of its own");
        let cli = parse(&["shell", "db1", "--pane", "build", "--", "make"]).unwrap();
        let Command::Shell(args) = cli.command else {
            panic!("shell");
        };
        assert_eq!(args.host.as_deref(), Some("db1"));
        assert_eq!(args.pane_key().to_string(), "default/build/0");
    }

    #[test]
    fn pane_and_workspace_names_that_break_the_key_are_refused() {
        let long = "x".repeat(relay_protocol::MAX_PANE_PART + 1);
        for bad in [
            &["shell", "--pane", "p/q"][..],
            &["shell", "-w", "", "--pane", "x"],
            &["shell", "--pane", ""],
            &["attach", "-w", "a\u{1b}b"],
            &["shell", "--pane", &long],
            &["shell", "--pane", "main\u{202e}gol"],
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
