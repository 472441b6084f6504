//! The subcommands: connect once, do one thing, print it.

use std::io::Write;

use anyhow::Context;
use relay_connector::{Destination, Session};
use relay_protocol::{Binding, Incarnation, PaneKey, PtyId};

use crate::{render, Cli, Command};

/// Runs `cli`'s command.
pub async fn run(cli: &Cli) -> anyhow::Result<()> {
    let destination = Destination::from_args(false, cli.ssh.as_deref())?;
    let transport = destination.transport_with(&cli.ssh_args)?;
    let client_id = format!("relayctl/{}", std::process::id());
    let session = Session::connect(transport.as_ref(), &client_id)
        .await
        .with_context(|| format!("cannot reach the relay agent ({destination})"))?;
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

fn parse_binding(pane: &str, pty: &str) -> anyhow::Result<Binding> {
    Ok(Binding {
        pane: parse_pane(pane)?,
        pty: parse_pty(pty)?,
    })
}

/// `workspace/tab/leaf`; the workspace may itself contain `/`.
fn parse_pane(s: &str) -> anyhow::Result<PaneKey> {
    let mut parts = s.rsplitn(3, '/');
    match (parts.next(), parts.next(), parts.next()) {
        (Some(leaf), Some(tab), Some(ws))
            if !leaf.is_empty() && !tab.is_empty() && !ws.is_empty() =>
        {
            Ok(PaneKey::new(ws, tab, leaf))
        }
        _ => anyhow::bail!("pane {s:?} is not `workspace/tab/leaf` (see `relayctl leases`)"),
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
        let pane = PaneKey::new("org/repo", "tab", "0");
        assert_eq!(parse_pane(&pane.to_string()).unwrap(), pane);
        let pty = PtyId {
            incarnation: Incarnation(0xdead_beef),
            counter: 12,
        };
        assert_eq!(parse_pty(&pty.to_string()).unwrap(), pty);
        assert!(parse_pane("just-one").is_err());
        assert!(parse_pty("xyz").is_err());
    }
}
