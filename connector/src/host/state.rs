//! [`HostState`]: what a [`Host`](super::Host)'s connection is doing, always visible to the app
//! (rule G: the app always sees the state and the next retry time).

use std::fmt;
use std::sync::Arc;
use std::time::{Duration, Instant};

use relay_protocol::Incarnation;

use crate::Error;

/// The state of a host's connection.
#[derive(Debug, Clone)]
#[non_exhaustive]
pub enum HostState {
    /// A connection attempt is under way (SSH connect, deploy, hello). `attempt` counts the
    /// attempts since the last connection (or since the host was opened), from 1.
    Connecting {
        /// Attempt number.
        attempt: u32,
    },
    /// Connected to the agent; every pane of the host is (being) re-attached.
    Connected {
        /// The agent daemon's incarnation (a new one after the host rebooted or the agent
        /// restarted).
        incarnation: Incarnation,
        /// The agent's version.
        agent_version: String,
    },
    /// Connected, but nothing has arrived for a while (typed keys get no echo). Not yet declared
    /// dead; becomes [`HostState::Connected`] again when the agent answers.
    Unresponsive {
        /// The agent daemon's incarnation.
        incarnation: Incarnation,
        /// When the last frame arrived.
        last_contact: Instant,
    },
    /// The connection was lost or an attempt failed; the next attempt is at `next_retry_at`
    /// ([`Host::retry_now`](super::Host::retry_now) skips the wait). Nothing on the host ended
    /// because of it (rule A).
    Reconnecting {
        /// Failed attempts since the last connection (the next one is `attempt + 1`; 0 right
        /// after a connection was lost).
        attempt: u32,
        /// When the next attempt starts.
        next_retry_at: Instant,
        /// Why the connection was lost or the last attempt failed.
        last_error: Arc<Error>,
    },
    /// A retry cannot fix what went wrong (host key, authentication, no agent for the host's
    /// platform, an agent that cannot run there, an incompatible protocol, bad configuration).
    /// The error names the fix; [`Host::retry_now`](super::Host::retry_now) tries again after
    /// it was applied.
    Failed {
        /// What went wrong.
        error: Arc<Error>,
    },
    /// The host handle was closed ([`Host::close`](super::Host::close)) or every handle dropped.
    Closed,
}

impl HostState {
    /// Whether a connection is up (possibly [`HostState::Unresponsive`]).
    pub fn is_connected(&self) -> bool {
        matches!(
            self,
            HostState::Connected { .. } | HostState::Unresponsive { .. }
        )
    }

    /// Time left until the next attempt, when [`HostState::Reconnecting`].
    pub fn retry_in(&self) -> Option<Duration> {
        match self {
            HostState::Reconnecting { next_retry_at, .. } => {
                Some(next_retry_at.saturating_duration_since(Instant::now()))
            }
            _ => None,
        }
    }
}

impl fmt::Display for HostState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HostState::Connecting { attempt: 1 } => write!(f, "connecting"),
            HostState::Connecting { attempt } => write!(f, "connecting (attempt {attempt})"),
            HostState::Connected { incarnation, .. } => {
                write!(f, "connected (agent {incarnation})")
            }
            HostState::Unresponsive { last_contact, .. } => write!(
                f,
                "no answer from the host; last contact {} s ago",
                last_contact.elapsed().as_secs()
            ),
            HostState::Reconnecting {
                attempt,
                last_error,
                ..
            } => write!(
                f,
                "connection lost ({}); reconnecting in {:.1} s, attempt {}",
                last_error.report(),
                self.retry_in().unwrap_or_default().as_secs_f64(),
                attempt + 1
            ),
            HostState::Failed { error } => write!(f, "failed: {}", error.report()),
            HostState::Closed => write!(f, "closed"),
        }
    }
}
