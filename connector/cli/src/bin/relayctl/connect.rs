//! relayctl's one connection to an agent: never starting one, stating no cleanup policy, and
//! saying "no agent running" when there is none. Shared by every subcommand, `upgrade` included.

use relay_cli::destination::Destination;
use relay_connector::{ConnectOptions, Session};

use crate::Cli;

/// One connection to a running agent, stating no cleanup policy: relayctl never creates, and
/// the agent's timers only apply to PTYs created by a connection that stated one. It never
/// starts an agent either (`start_agent: false`): an operator command on a host without one
/// says so and leaves nothing behind.
pub async fn connect(cli: &Cli, destination: &Destination) -> anyhow::Result<Session> {
    let transport = destination.transport_with(&cli.ssh_args)?;
    let options = ConnectOptions {
        policy: None,
        start_agent: false,
        ..ConnectOptions::new(format!("relayctl/{}", std::process::id()))
    };
    let connect = Session::connect_with(transport.as_ref(), &options);
    let connected = match destination {
        // A local agent answers at once (waiting at most for one that another client is
        // starting).
        Destination::Local => tokio::time::timeout(cli.timeout, connect)
            .await
            .map_err(|_| not_answering(destination, cli.timeout))?,
        // SSH setup (connect, authenticate, deploy an agent) has its own bounds.
        Destination::Host(_) => connect.await,
    };
    match connected {
        Ok(session) => Ok(session.with_request_timeout(Some(cli.timeout))),
        Err(e) if e.is_no_agent() => Err(no_agent(destination)),
        Err(e) => {
            Err(anyhow::Error::new(e)
                .context(format!("cannot reach the relay agent ({destination})")))
        }
    }
}

/// The error of [`connect`] when no agent runs (its message says where and what starts one).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct NoAgentRunning(String);

/// "no agent running", with where and what starts one (tmux says "no server running").
fn no_agent(destination: &Destination) -> anyhow::Error {
    anyhow::Error::new(NoAgentRunning(no_agent_text(destination)))
}

fn no_agent_text(destination: &Destination) -> String {
    match destination {
        Destination::Local => "no agent running on this machine (relayctl never starts one; \
                               `relay shell --local` does)"
            .to_string(),
        Destination::Host(host) => format!(
            "no agent running on {host} (relayctl never starts one; `relay shell {host}` with \
             the same ssh options does)"
        ),
    }
}

/// The error for an agent that accepted the connection but did not complete the hello in time.
fn not_answering(destination: &Destination, limit: std::time::Duration) -> anyhow::Error {
    anyhow::anyhow!(
        "connecting to the relay agent ({destination}): the agent did not answer within {} s; it \
         may be stopped or overloaded (check `relayctl status` / the agent log)",
        limit.as_secs_f64()
    )
}
