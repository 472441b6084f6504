//! The russh client handler: verifies the server's host key, and maps russh errors to
//! [`Error`](crate::Error) kinds (transient network failures vs. host key/auth refusals).

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use russh::keys::PublicKeyOrCertificate;

use super::known_hosts::{self, HostKeyPolicy, HostKeyPrompt};
use crate::sync::LockExt;
use crate::Error;

/// Error type of the russh session task: either russh's own, or our host key refusal (kept
/// separate so that it is reported as [`Error::HostKey`] and not as a network failure).
#[derive(Debug)]
pub(crate) enum HandlerError {
    /// russh failed (network, protocol, keepalive).
    Russh(russh::Error),
    /// The host key was refused ([`Error::HostKey`] or [`Error::HostKeyChanged`]); the message
    /// names the fingerprint or the file and line.
    HostKey(Error),
}

impl From<russh::Error> for HandlerError {
    fn from(e: russh::Error) -> Self {
        HandlerError::Russh(e)
    }
}

impl HandlerError {
    /// Converts to the connector's error, saying what was being done (`context`).
    pub(crate) fn into_error(self, context: &str) -> Error {
        match self {
            HandlerError::HostKey(e) => e,
            HandlerError::Russh(e) => russh_error(context, e),
        }
    }
}

/// Classifies a russh error: everything russh reports after the host key check is a network or
/// protocol failure that a retry may fix, except a refused key type, which configuration must fix.
pub(crate) fn russh_error(context: &str, e: russh::Error) -> Error {
    match e {
        russh::Error::NoCommonAlgo { .. } | russh::Error::UnknownAlgo => Error::config(format!(
            "{context}: no common algorithm with the server (the server's SSH configuration \
             allows no algorithm relay supports)"
        ))
        .caused_by(e),
        other => Error::ssh(context).caused_by(other),
    }
}

/// The per-connection handler.
pub(crate) struct ClientHandler {
    /// Host name as used in known_hosts.
    pub(crate) host: String,
    /// Port as used in known_hosts.
    pub(crate) port: u16,
    /// known_hosts files to consult; the first receives accepted keys.
    pub(crate) known_hosts: Vec<PathBuf>,
    /// What to do with unknown keys.
    pub(crate) policy: HostKeyPolicy,
    /// Asked about unknown keys under [`HostKeyPolicy::Ask`].
    pub(crate) prompt: Option<HostKeyPrompt>,
    /// Set while `prompt` runs: the connect timeout does not count a person's decision.
    pub(crate) asking: Arc<std::sync::atomic::AtomicBool>,
    /// Keepalive interval × count: how long an unanswered host is waited for (for messages).
    pub(crate) keepalive_budget: Duration,
    /// Why the connection ended, set when russh reports the disconnect (read by the bridge
    /// reader so that a lost connection is reported with its SSH cause).
    pub(crate) lost: LostReason,
}

/// Shared slot for the reason an SSH connection ended.
pub(crate) type LostReason = Arc<Mutex<Option<String>>>;

/// Reads a [`LostReason`].
pub(crate) fn lost_reason(slot: &LostReason) -> Option<String> {
    slot.lock_unpoisoned().clone()
}

impl russh::client::Handler for ClientHandler {
    type Error = HandlerError;

    async fn disconnected(
        &mut self,
        reason: russh::client::DisconnectReason<Self::Error>,
    ) -> Result<(), Self::Error> {
        use russh::client::DisconnectReason;
        let text = match &reason {
            DisconnectReason::ReceivedDisconnect(info) => format!(
                "the host closed the ssh connection ({:?}: {})",
                info.reason_code, info.message
            ),
            DisconnectReason::Error(HandlerError::Russh(russh::Error::KeepaliveTimeout)) => {
                format!(
                    "ssh keepalive timeout (no answer from host for {} s)",
                    self.keepalive_budget.as_secs()
                )
            }
            DisconnectReason::Error(HandlerError::Russh(e)) => {
                format!("ssh connection failed: {e}")
            }
            DisconnectReason::Error(HandlerError::HostKey(e)) => e.report(),
        };
        tracing::debug!("ssh disconnected: {text}");
        *self.lost.lock_unpoisoned() = Some(text);
        match reason {
            DisconnectReason::ReceivedDisconnect(_) => Ok(()),
            DisconnectReason::Error(e) => Err(e),
        }
    }

    async fn check_server_key(
        &mut self,
        server_public_key: &PublicKeyOrCertificate,
    ) -> Result<bool, Self::Error> {
        let key = match server_public_key {
            PublicKeyOrCertificate::PublicKey { key, .. } => key.clone(),
            // Host certificates (@cert-authority) are not supported: check the certified key
            // itself against known_hosts like a plain key.
            PublicKeyOrCertificate::Certificate(cert) => {
                russh::keys::PublicKey::from(cert.public_key().clone())
            }
        };
        let (host, port, files, policy) = (
            self.host.clone(),
            self.port,
            self.known_hosts.clone(),
            self.policy,
        );
        let asking = self.asking.clone();
        let prompt: Option<HostKeyPrompt> = self.prompt.clone().map(|ask| {
            let wrapped: HostKeyPrompt = Arc::new(move |key| {
                use std::sync::atomic::Ordering;
                asking.store(true, Ordering::Release);
                let yes = ask(key);
                asking.store(false, Ordering::Release);
                yes
            });
            wrapped
        });
        // File IO and perhaps a question to a person: keep it off the async worker.
        let verdict = tokio::task::spawn_blocking(move || {
            known_hosts::verify(&host, port, &key, &files, policy, prompt.as_ref())
        })
        .await
        .map_err(|e| {
            HandlerError::HostKey(Error::host_key("host key check failed").caused_by(e))
        })?;
        match verdict {
            Ok(()) => Ok(true),
            Err(e @ (Error::HostKey { .. } | Error::HostKeyChanged(_))) => {
                Err(HandlerError::HostKey(e))
            }
            Err(other) => Err(HandlerError::HostKey(Error::host_key(other.report()))),
        }
    }
}
