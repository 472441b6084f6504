//! SSH command-line flags shared by `relay` and `relayctl`, and the terminal side of the SSH
//! transport's callbacks: the passphrase prompt and the host key question on the terminal
//! (`/dev/tty`, a Windows console's `CONIN$`/`CONOUT$`: [`crate::sys::open_console`]), and the
//! deploy progress line on stderr.

use std::io::{BufRead, IsTerminal, Write};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};

use relay_connector::ssh::{
    DeployEvent, HostKeyPolicy, HostKeyPrompt, PassphraseCallback, ProgressCallback, SshOptions,
    UnknownHostKey,
};
use relay_connector::LockExt;

/// SSH flags (flatten into a clap command with `#[command(flatten)]`).
#[derive(Debug, Clone, Default, clap::Args)]
pub struct SshArgs {
    /// Trust and record an unknown host key (like `StrictHostKeyChecking=accept-new`); a changed
    /// key is still refused.
    #[arg(long, global = true)]
    pub accept_new: bool,
    /// ssh_config file to read instead of ~/.ssh/config (like `ssh -F`).
    #[arg(short = 'F', long = "ssh-config", value_name = "FILE", global = true)]
    pub ssh_config: Option<PathBuf>,
    /// Private key file to try before the configured ones (like `ssh -i`); repeatable.
    #[arg(short = 'i', long = "identity", value_name = "FILE", global = true)]
    pub identity: Vec<PathBuf>,
    /// SSH port (like `ssh -p`; `user@host:port` works too).
    #[arg(long = "port", value_name = "PORT", global = true)]
    pub port: Option<u16>,
}

impl SshArgs {
    /// Transport options for `destination` with these flags, a passphrase prompt and a host key
    /// question on the terminal, and a deploy progress line on stderr.
    pub fn options(&self, destination: &str) -> SshOptions {
        let mut opts = SshOptions {
            destination: destination.to_string(),
            host_key_policy: self.accept_new.then_some(HostKeyPolicy::AcceptNew),
            host_key_prompt: Some(tty_host_key_question()),
            progress: Some(stderr_progress(destination)),
            ..SshOptions::default()
        };
        opts.resolve.config_file = self.ssh_config.clone();
        opts.resolve.port = self.port;
        opts.auth.identities = self
            .identity
            .iter()
            .map(|p| relay_connector::ssh::config::expand_tilde(&p.to_string_lossy()))
            .collect();
        opts.auth.passphrase = Some(tty_passphrase());
        opts
    }
}

/// Asks for a key's passphrase on `/dev/tty` (so it works while stdin/stdout are redirected).
/// Returns `None` (skip the key) when there is no terminal or the answer is empty.
pub fn tty_passphrase() -> PassphraseCallback {
    Arc::new(|path, attempt| {
        let prompt = if attempt == 1 {
            format!("Enter passphrase for key '{}': ", path.display())
        } else {
            format!("Wrong passphrase; try again for key '{}': ", path.display())
        };
        rpassword::prompt_password(prompt)
            .ok()
            .filter(|p| !p.is_empty())
    })
}

/// Asks about an unknown host key on the terminal ([`crate::sys::open_console`]) like OpenSSH
/// (`yes` trusts and records it).
/// Declines without asking when stdin is not a terminal (scripts, tests): then unknown keys are
/// refused with the fingerprint and the `--accept-new` hint, as before.
pub fn tty_host_key_question() -> HostKeyPrompt {
    Arc::new(|key: &UnknownHostKey| {
        if !std::io::stdin().is_terminal() {
            return false;
        }
        let Ok((input, mut tty)) = crate::sys::open_console() else {
            return false;
        };
        let _ = write!(
            tty,
            "The authenticity of host '{}' can't be established.\r\n{} key fingerprint is \
             {}.\r\nAre you sure you want to continue connecting (yes/no)? ",
            key.host, key.algorithm, key.fingerprint
        );
        let _ = tty.flush();
        let mut answer = String::new();
        if std::io::BufReader::new(input)
            .read_line(&mut answer)
            .is_err()
        {
            return false;
        }
        let yes = answer.trim().eq_ignore_ascii_case("yes");
        if yes {
            let _ = write!(
                tty,
                "Recording the key of {} in {}\r\n",
                key.host,
                key.file.display()
            );
        }
        yes
    })
}

/// Shows deploy progress on stderr: a `\r`-updated line on a terminal, one line per step
/// otherwise.
pub fn stderr_progress(destination: &str) -> ProgressCallback {
    let tty = std::io::stderr().is_terminal();
    let dest = destination.to_string();
    let last_percent = Mutex::new(None::<u64>);
    Arc::new(move |ev: &DeployEvent| {
        let mut err = std::io::stderr().lock();
        match ev {
            DeployEvent::Uploading { sent, total } => {
                let percent = sent * 100 / (*total).max(1);
                let mut last = last_percent.lock_unpoisoned();
                if *last == Some(percent) {
                    return;
                }
                *last = Some(percent);
                let mib = |b: u64| b as f64 / (1024.0 * 1024.0);
                if tty {
                    let _ = write!(
                        err,
                        "\rrelay: deploying the agent to {dest}: {percent:3}% ({:.1}/{:.1} MiB)",
                        mib(*sent),
                        mib(*total)
                    );
                    let _ = err.flush();
                } else if *sent == 0 {
                    let _ = writeln!(
                        err,
                        "relay: deploying the agent to {dest} ({:.1} MiB)",
                        mib(*total)
                    );
                }
            }
            DeployEvent::Installed { path } => {
                if tty {
                    let _ = writeln!(err);
                }
                let _ = writeln!(err, "relay: installed {path} on {dest}");
            }
            DeployEvent::Probed { .. } | DeployEvent::AlreadyPresent { .. } => {}
        }
    })
}
