//! The subcommands: connect once, do one thing, print it.

use std::io::Write;

use anyhow::Context;
use relay_connector::{ConnectOptions, Session};

use crate::common::destination::Destination;
use relay_protocol::{Binding, Incarnation, PaneKey, PtyId};

use crate::{render, Cli, Command};

/// Runs `cli`'s command; every request to the agent is bounded by `--timeout`.
pub async fn run(cli: &Cli) -> anyhow::Result<()> {
    let destination = Destination::from_args(false, cli.ssh.as_deref())?;
    let transport = destination.transport_with(&cli.ssh_args)?;
    // relayctl never creates, so it states no cleanup policy (the agent's timers only apply to
    // PTYs created by a connection that stated one).
    let options = ConnectOptions {
        policy: None,
        ..ConnectOptions::new(format!("relayctl/{}", std::process::id()))
    };
    let connect = Session::connect_with(transport.as_ref(), &options);
    let connected = match destination {
        // Reaching the local agent includes starting it (at most a few seconds).
        Destination::Local => tokio::time::timeout(cli.timeout, connect)
            .await
            .map_err(|_| not_answering(&destination, cli.timeout))?,
        // SSH setup (connect, authenticate, deploy an agent) has its own bounds.
        Destination::Host(_) => connect.await,
    };
    let session = connected
        .with_context(|| format!("cannot reach the relay agent ({destination})"))?
        .with_request_timeout(Some(cli.timeout));
    let mut out = std::io::stdout().lock();
    match &cli.command {
        Command::Leases { json } => {
            let leases = session.list_leases().await?;
            let now = render::now_ms();
            if *json {
                writeln!(out, "{}", render::leases_json(&leases))?;
            } else if leases.is_empty() {
                eprintln!("no leases on {destination}");
            } else {
                write!(out, "{}", render::leases_table(&leases, now))?;
            }
        }
        Command::Status { json } => {
            let status = session.status().await?;
            if *json {
                writeln!(out, "{}", render::status_json(&status))?;
            } else {
                write!(out, "{}", render::status_text(&status))?;
            }
        }
        Command::Kill { pane, pty } => {
            let binding = parse_binding(pane, pty)?;
            session
                .kill(&binding)
                .await
                .with_context(|| format!("cannot kill {binding}"))?;
            writeln!(out, "killed {binding}")?;
        }
        Command::Stop { yes } => {
            let Destination::Local = destination else {
                anyhow::bail!(
                    "relayctl stop stops the agent on this machine only; to stop the one on \
                     {destination}, run `relayctl --ssh {destination} status` for its pid and \
                     `ssh {destination} kill PID`"
                );
            };
            let status = session.status().await?;
            let live = status.leases.attached + status.leases.detached;
            if live > 0 && !yes {
                anyhow::bail!(
                    "{live} shell(s) are running and would end with the agent; pass --yes to stop \
                     it anyway (`relayctl leases` lists them)"
                );
            }
            drop(session);
            stop_daemon(status.pid).await?;
            writeln!(out, "stopped relay-agent (pid {})", status.pid)?;
        }
        Command::Protect { pane, pty, off } => {
            let binding = parse_binding(pane, pty)?;
            session
                .protect(&binding, !off)
                .await
                .with_context(|| format!("cannot change protection of {binding}"))?;
            let what = if *off { "unprotected" } else { "protected" };
            writeln!(out, "{what} {binding}")?;
        }
    }
    Ok(())
}

/// Sends SIGTERM to the daemon `pid` and waits (at most 10 s) until it is gone.
async fn stop_daemon(pid: u32) -> anyhow::Result<()> {
    use nix::sys::signal::{kill, Signal};
    use nix::unistd::Pid;
    let pid = Pid::from_raw(i32::try_from(pid).context("the agent reported a bad pid")?);
    kill(pid, Signal::SIGTERM).with_context(|| format!("cannot signal the agent (pid {pid})"))?;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while kill(pid, None).is_ok() {
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!("the agent (pid {pid}) is still running 10 s after SIGTERM");
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    Ok(())
}

/// The error for an agent that accepted the connection but did not complete the hello in time.
fn not_answering(destination: &Destination, limit: std::time::Duration) -> anyhow::Error {
    anyhow::anyhow!(
        "connecting to the relay agent ({destination}): the agent did not answer within {} s; it \
         may be stopped or overloaded (check `relayctl status` / the agent log)",
        limit.as_secs_f64()
    )
}

fn parse_binding(pane: &str, pty: &str) -> anyhow::Result<Binding> {
    Ok(Binding {
        pane: parse_pane(pane)?,
        pty: parse_pty(pty)?,
    })
}

/// Exactly `workspace/tab/leaf`: three non-empty parts, none containing `/` (the form `relay`
/// accepts and `relayctl leases` prints).
fn parse_pane(s: &str) -> anyhow::Result<PaneKey> {
    let parts: Vec<&str> = s.split('/').collect();
    match parts[..] {
        [ws, tab, leaf] if !ws.is_empty() && !tab.is_empty() && !leaf.is_empty() => {
            Ok(PaneKey::new(ws, tab, leaf))
        }
        _ => anyhow::bail!(
            "pane {s:?} is not `workspace/tab/leaf` (exactly three non-empty parts separated by \
             `/`, as printed by `relayctl leases`)"
        ),
    }
}

/// `<incarnation hex>.<counter>`, as printed by `relayctl leases`.
fn parse_pty(s: &str) -> anyhow::Result<PtyId> {
    let parsed = s.split_once('.').and_then(|(inc, counter)| {
        Some(PtyId {
            incarnation: Incarnation(u64::from_str_radix(inc, 16).ok()?),
            counter: counter.parse().ok()?,
        })
    });
    parsed.with_context(|| {
        format!("PTY id {s:?} is not `<incarnation>.<counter>` (copy it from `relayctl leases`)")
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pane_and_pty_round_trip_through_their_printed_form() {
        let pane = PaneKey::new("org", "tab", "0");
        assert_eq!(parse_pane(&pane.to_string()).unwrap(), pane);
        let pty = PtyId {
            incarnation: Incarnation(0xdead_beef),
            counter: 12,
        };
        assert_eq!(parse_pty(&pty.to_string()).unwrap(), pty);
        assert!(parse_pane("just-one").is_err());
        assert!(parse_pty("xyz").is_err());
    }

    /// Regression: `rsplitn` read `default/p/q/0` as workspace `default/p`, and `//0`-style keys
    /// with empty parts slipped through; only exactly three non-empty parts are a pane.
    #[test]
    fn a_pane_is_exactly_three_non_empty_parts() {
        for bad in ["default/p/q/0", "//0", "w//0", "w/t/", "/t/0", "w/t", ""] {
            let err = parse_pane(bad).unwrap_err().to_string();
            assert!(
                err.contains("`workspace/tab/leaf`") && err.contains("exactly three non-empty"),
                "{bad:?}: {err}"
            );
        }
        assert_eq!(
            parse_pane("wörk/t/é").unwrap(),
            PaneKey::new("wörk", "t", "é")
        );
    }
}
