//! `relayctl upgrade`: order a live upgrade, then connect again and say what runs now.
//!
//! Success is judged by what the agent reports after the handover, not by the order's answer:
//! the same pid, no upgrade in progress, no failure recorded (the old code records one whenever
//! it serves on or takes its shells back; the new code starts without).

use std::time::Duration;

use anyhow::Context;
use relay_cli::destination::Destination;
use relay_connector::Session;
use relay_protocol::message::UpgradeReport;
use relay_protocol::Capability;

use crate::confirm::confirm;
use crate::connect::{connect, NoAgentRunning};
use crate::output;
use crate::{Cli, Outcome};

/// How long the agent may take to serve again after the order (settling, the probe of the
/// state, `execve`, the new code's start).
const BACK_WITHIN: Duration = Duration::from_secs(30);
/// How long the order itself may take: the agent runs the new binary first (up to 10 s).
const ORDER_WITHIN: Duration = Duration::from_secs(30);

/// Runs `relayctl upgrade` (see the command's help).
pub async fn upgrade(
    cli: &Cli,
    session: Session,
    destination: &Destination,
    to: Option<String>,
    force: bool,
    yes: bool,
) -> anyhow::Result<Outcome> {
    if !session.welcome().has(Capability::UPGRADE) {
        anyhow::bail!(
            "the agent on {destination} (version {}) predates live upgrade and cannot hand its \
             shells over; `relayctl stop` when they are done, and the next connection starts \
             the new one",
            session.welcome().agent_version
        );
    }
    // On this machine a relative path means what it means in the operator's shell; on an SSH
    // host there is no such directory, and the agent asks for an absolute path.
    let to = match (to, destination) {
        (Some(path), Destination::Local) if !std::path::Path::new(&path).is_absolute() => Some(
            std::env::current_dir()
                .context("the current directory, to make --to absolute")?
                .join(&path)
                .display()
                .to_string(),
        ),
        (to, _) => to,
    };
    let before = session.status().await?;
    let report = session.upgrade_info().await?;
    let target = match (&to, &report.newest_installed) {
        (Some(path), _) => path.clone(),
        (None, Some(n)) => format!("{} ({})", n.version, n.path),
        (None, None) => anyhow::bail!(
            "no agent is installed on {destination} (in the agent's $RELAY_HOME/bin, where relay \
             deploys one over SSH); name a binary with --to"
        ),
    };
    let running = before.leases.attached + before.leases.detached + before.leases.superseded;
    let question = format!(
        "hand {running} running shell(s) of agent {} (pid {}) on {destination} to {target}?\n\
         (the shells keep running; clients reconnect)",
        report.running.version, before.pid
    );
    if !confirm(&question, yes).await? {
        output::note!("nothing done");
        return Ok(Outcome::NotAllDone);
    }
    let order = session.with_request_timeout(Some(cli.timeout.max(ORDER_WITHIN)));
    let started = order.upgrade(to, force).await?;
    drop((order, session));
    let after = wait_for_new_code(cli, destination, before.pid).await?;
    let (status, now) = after;
    if status.pid != before.pid {
        anyhow::bail!(
            "the agent on {destination} now has pid {} (was {}): the daemon restarted instead of \
             upgrading, and its shells ended; see its agent.log",
            status.pid,
            before.pid
        );
    }
    // The new code is a fresh process image that has recorded no failure; the old code that
    // serves on (or took its shells back) records why the handover did not happen.
    if let Some(why) = &now.last_failure {
        output::note!(
            "relayctl: upgrade failed, agent {} keeps serving every shell: {why}",
            now.running.version
        );
        return Ok(Outcome::NotAllDone);
    }
    output::show(format_args!(
        "upgraded agent {} → {} on {destination}: pid {} kept, {} shell(s) handed over\nnow \
         running {}\n",
        started.from.version, now.running.version, status.pid, started.ptys, now.running.path
    ))?;
    Ok(Outcome::Done)
}

/// Connects again until the agent answers with the upgrade finished (or failed).
async fn wait_for_new_code(
    cli: &Cli,
    destination: &Destination,
    pid: u32,
) -> anyhow::Result<(relay_protocol::message::Status, UpgradeReport)> {
    let deadline = tokio::time::Instant::now() + BACK_WITHIN;
    let mut last_error = None;
    while tokio::time::Instant::now() < deadline {
        match look(cli, destination).await {
            Ok((status, report)) if status.pid != pid || !report.in_progress => {
                return Ok((status, report))
            }
            Ok(_) => last_error = None,
            // The socket is still there during a handover (connections wait in its backlog):
            // nothing listening means the process is gone, and its shells with it.
            Err(e) if e.downcast_ref::<NoAgentRunning>().is_some() => anyhow::bail!(
                "the agent process on {destination} is gone: the new binary did not take over \
                 and the shells ended with the process (they are listed as `agent restarted` \
                 once an agent runs again); see its agent.log"
            ),
            Err(e) => last_error = Some(e),
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let why = last_error.map(|e| format!(": {e:#}")).unwrap_or_default();
    anyhow::bail!(
        "the agent on {destination} did not finish the upgrade within {BACK_WITHIN:?}{why}; \
         `relayctl status` shows what runs"
    )
}

async fn look(
    cli: &Cli,
    destination: &Destination,
) -> anyhow::Result<(relay_protocol::message::Status, UpgradeReport)> {
    let session = connect(cli, destination).await?;
    let status = session.status().await.context("status after the upgrade")?;
    let report = session
        .upgrade_info()
        .await
        .context("upgrade info after the upgrade")?;
    Ok((status, report))
}
