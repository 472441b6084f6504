//! The subcommands: connect once, do one thing, print it. `leases`, `status` and `stop` are
//! here; the ones that end or protect shells are in `lifecycle.rs`.

use anyhow::Context;
use relay_cli::destination::Destination;
use relay_connector::Session;
use relay_protocol::Capability;

use crate::connect::connect;
use crate::lifecycle::Ctl;
use crate::output::{self, note};
use crate::render::{self, TagCounts};
use crate::targets::{self, Filter};
use crate::{Cli, Command, Outcome};

/// Runs `cli`'s command; every request to the agent is bounded by `--timeout`.
pub async fn run(cli: &Cli) -> anyhow::Result<Outcome> {
    let destination = Destination::from_args(false, cli.ssh.as_deref())?;
    let session = connect(cli, &destination).await?;
    let ctl = Ctl {
        session: &session,
        destination: &destination,
    };
    match &cli.command {
        Command::Leases {
            json,
            all,
            state,
            workspace,
        } => {
            let filter = Filter {
                all: *all,
                states: state.iter().map(|s| (*s).into()).collect(),
                workspace: workspace.clone(),
            };
            leases(&session, &destination, &filter, *json).await?;
        }
        Command::Status { json } => status(&session, *json).await?,
        Command::Kill {
            ids,
            pty,
            all: false,
            yes,
            ..
        } => return ctl.kill(ids, pty.as_deref(), *yes).await,
        Command::Kill {
            all: true,
            workspace,
            yes,
            ..
        } => return ctl.kill_all(workspace.as_deref(), *yes).await,
        Command::Protect { id, pty, off } => return ctl.protect(id, pty.as_deref(), !off).await,
        Command::Gc { dry_run, yes } => return ctl.gc(*dry_run, *yes).await,
        Command::Forget { ids, all } => return ctl.forget(ids, *all).await,
        Command::Stop { yes } => stop(session, &destination, *yes).await?,
        Command::Upgrade { to, force, yes } => {
            return crate::upgrade::upgrade(cli, session, &destination, to.clone(), *force, *yes)
                .await
        }
    }
    Ok(Outcome::Done)
}

/// `relayctl leases`: one listing, filtered, as a table or JSON.
async fn leases(
    session: &Session,
    destination: &Destination,
    filter: &Filter,
    json: bool,
) -> anyhow::Result<()> {
    let listing = targets::list(session).await?;
    let rows: Vec<_> = listing
        .rows
        .iter()
        .filter(|r| filter.keeps(&r.info))
        .collect();
    if json {
        output::print(format_args!("{}\n", render::leases_json(&rows)))?;
    } else if rows.is_empty() {
        let hidden = listing.rows.len();
        let filtered = filter.workspace.is_some() || !filter.states.is_empty();
        let hint = match (hidden, filtered, filter.all) {
            (0, _, _) => String::new(),
            (n, true, _) => format!(" ({n} not matching the filters)"),
            (n, false, false) => format!(" ({n} ended; `--all` shows them)"),
            (_, false, true) => String::new(),
        };
        note!("no leases on {destination}{hint}");
    } else {
        let tags = listing.lifecycle.is_some();
        output::print(render::leases_table(&rows, tags, render::now_ms()))?;
    }
    if let Some(cut) = listing
        .lifecycle
        .as_ref()
        .map(|l| l.left_out)
        .filter(|n| *n > 0)
    {
        note!(
            "{cut} ended lease(s) were left out to fit the agent's reply (`relayctl forget \
             --all` prunes ended history)"
        );
    }
    Ok(())
}

/// `relayctl status`: the agent's status, and with the lifecycle policy its listing's policy,
/// tags and memory.
async fn status(session: &Session, json: bool) -> anyhow::Result<()> {
    let status = session.status().await?;
    let listing = if session.welcome().has(Capability::LIFECYCLE) {
        Some(targets::list(session).await?)
    } else {
        None
    };
    let lifecycle = listing
        .as_ref()
        .and_then(|l| Some((l.lifecycle.as_ref()?, TagCounts::of(&l.rows))));
    let upgrade = if session.welcome().has(Capability::UPGRADE) {
        Some(session.upgrade_info().await?)
    } else {
        None
    };
    if json {
        output::print(format_args!(
            "{}\n",
            render::status_json(&status, lifecycle, upgrade.as_ref())
        ))?;
    } else {
        output::print(render::status_text(&status, lifecycle, upgrade.as_ref()))?;
    }
    Ok(())
}

/// `relayctl stop`: SIGTERM to the local daemon, refused while shells run unless `yes`.
async fn stop(session: Session, destination: &Destination, yes: bool) -> anyhow::Result<()> {
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
    output::show(format_args!("stopped relay-agent (pid {})\n", status.pid))?;
    Ok(())
}

/// Sends SIGTERM to the daemon `pid` and waits (at most 10 s) until it is gone.
async fn stop_daemon(pid: u32) -> anyhow::Result<()> {
    relay_cli::sys::terminate(pid)
        .with_context(|| format!("cannot signal the agent (pid {pid})"))?;
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(10);
    while relay_cli::sys::is_running(pid) {
        if tokio::time::Instant::now() > deadline {
            anyhow::bail!("the agent (pid {pid}) is still running 10 s after SIGTERM");
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    Ok(())
}
