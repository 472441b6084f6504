//! The supervisor task of one [`Host`](super::Host): connect, serve the connection (heartbeat,
//! re-attach), and after a loss wait out the backoff and do it again, for as long as the app holds
//! the host.
//!
//! ```text
//!  Connecting ──ok──▶ Connected ⇄ Unresponsive ──dead / closed──▶ Reconnecting ──delay──▶ Connecting
//!      │ transient error ─────────────────────────────────────────▶ Reconnecting
//!      └ permanent error ──▶ Failed ──retry_now──▶ Connecting
//! ```
//!
//! Architecture invariant: the supervisor never creates (it only sends `Attach` with `expect`)
//! and never ends anything on the host; declaring a link dead closes our side only (rules A, B).

use std::sync::Arc;
use std::time::Instant;

use futures_util::StreamExt;
use relay_protocol::Incarnation;
use tokio::task::JoinSet;

use super::backoff::Backoff;
use super::heartbeat::{Beat, Heartbeat, Now};
use super::panes::{self, Live};
use super::{HostInner, HostState};
use crate::{Error, Session};

/// Runs until the host is closed.
pub(crate) async fn run(inner: Arc<HostInner>) {
    let mut backoff = Backoff::new(inner.options.backoff, None);
    let mut attempt = 0u32;
    let mut generation = 0u64;
    // Every connection, first or re-made, states the host's cleanup policy before re-attaching.
    let options = inner.options.connect_options();
    loop {
        attempt += 1;
        inner.set_state(HostState::Connecting { attempt });
        let connect = Session::connect_with(inner.transport.as_ref(), &options);
        let result = tokio::select! {
            r = connect => r,
            () = inner.shutdown.cancelled() => break,
        };
        let last_error = match result {
            Ok(session) => {
                generation += 1;
                let started = Instant::now();
                let reason = serve(&inner, session, generation).await;
                if inner.shutdown.is_cancelled() {
                    break;
                }
                let lived = started.elapsed();
                // The count restarts with every connection; the schedule only after a healthy
                // one (a flapping link keeps its long delays).
                backoff.connection_ended(lived);
                attempt = 0;
                tracing::info!(
                    destination = %inner.destination,
                    %reason,
                    lived_ms = lived.as_millis() as u64,
                    "connection lost; reconnecting"
                );
                Error::connection_lost(reason)
            }
            Err(e) if !e.is_transient() => {
                tracing::info!(destination = %inner.destination, error = %e.report(), "connect failed for good");
                inner.set_state(HostState::Failed { error: Arc::new(e) });
                tokio::select! {
                    () = inner.wake.notified() => {}
                    () = inner.shutdown.cancelled() => break,
                }
                backoff.reset();
                attempt = 0;
                continue;
            }
            Err(e) => {
                tracing::info!(destination = %inner.destination, error = %e.report(), attempt, "connect failed; will retry");
                e
            }
        };
        let delay = backoff.next_delay();
        let next_retry_at = Instant::now() + delay;
        inner.set_state(HostState::Reconnecting {
            attempt,
            next_retry_at,
            last_error: Arc::new(last_error),
        });
        tokio::select! {
            () = tokio::time::sleep(delay) => {}
            () = inner.wake.notified() => {}
            () = inner.shutdown.cancelled() => break,
        }
    }
    inner.registry().close("the host was closed");
    inner.set_state(HostState::Closed);
}

/// Serves one connection until it is lost (closed by the agent or the transport, or declared
/// dead by the heartbeat) or the host is closed. Returns why it ended.
async fn serve(inner: &Arc<HostInner>, session: Session, generation: u64) -> String {
    let welcome = session.welcome().clone();
    let live = Live {
        generation,
        session: session.clone(),
    };
    let targets = inner.registry().connected(live.clone());
    inner.set_state(connected(&welcome.agent_version, welcome.incarnation));
    tracing::info!(
        destination = %inner.destination,
        incarnation = %welcome.incarnation,
        panes = targets.len(),
        "connected; re-attaching"
    );
    let mut passes = JoinSet::new();
    passes.spawn(reattach_all(inner.clone(), targets, live.clone()));

    let policy = inner.options.heartbeat;
    let mut heartbeat = Heartbeat::new(policy, Now::read(), session.frames_received());
    let mut tick = tokio::time::interval(policy.tick);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut unresponsive = false;
    let reason = loop {
        tokio::select! {
            reason = session.closed() => break reason,
            () = inner.shutdown.cancelled() => {
                session.close("the host was closed");
                break "the host was closed".to_string();
            }
            () = inner.reattach.notified() => {
                let targets = inner.registry().pending();
                passes.spawn(reattach_all(inner.clone(), targets, live.clone()));
            }
            _ = tick.tick() => {
                let beat = heartbeat.observe(Now::read(), session.frames_received());
                let silent = match beat {
                    Beat::Alive => false,
                    Beat::Ping { unresponsive, .. } => {
                        let s = session.clone();
                        let bound = policy.dead_after;
                        tokio::spawn(async move {
                            let _ = tokio::time::timeout(bound, s.ping()).await;
                        });
                        unresponsive
                    }
                    Beat::Waiting { unresponsive, .. } => unresponsive,
                    Beat::Dead { silent } => {
                        let reason = format!(
                            "no answer from the agent for {} s (heartbeat)",
                            silent.as_secs()
                        );
                        session.close(reason.clone());
                        break reason;
                    }
                };
                if silent != unresponsive {
                    unresponsive = silent;
                    inner.set_state(if silent {
                        HostState::Unresponsive {
                            incarnation: welcome.incarnation,
                            last_contact: heartbeat.last_contact(),
                        }
                    } else {
                        connected(&welcome.agent_version, welcome.incarnation)
                    });
                }
            }
        }
    };
    passes.abort_all();
    inner.registry().lost(&reason);
    reason
}

fn connected(agent_version: &str, incarnation: Incarnation) -> HostState {
    HostState::Connected {
        incarnation,
        agent_version: agent_version.to_string(),
    }
}

/// Re-attaches `targets` on `live`, at most `reattach_concurrency` at a time (all are pipelined
/// on the one connection, so 100 panes take about one round trip plus the agent's work).
async fn reattach_all(inner: Arc<HostInner>, targets: Vec<Arc<panes::PaneSlot>>, live: Live) {
    if targets.is_empty() {
        return;
    }
    let started = Instant::now();
    let count = targets.len();
    futures_util::stream::iter(targets)
        .for_each_concurrent(inner.options.reattach_concurrency, |slot| {
            panes::reattach(&inner.registry, slot, live.clone())
        })
        .await;
    tracing::debug!(
        panes = count,
        elapsed_ms = started.elapsed().as_millis() as u64,
        "re-attach pass done"
    );
}
