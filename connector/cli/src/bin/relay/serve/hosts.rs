//! `host.open`, `host.close`, `host.retry`; the `host.state` and `deploy.progress`
//! notifications; the SSH transport's questions (`host_key.confirm`, `auth.passphrase`) put to
//! the app.

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use relay_cli::ssh_args::SshArgs;
use relay_connector::ssh::{DeployEvent, SshTransport, UnknownHostKey};
use relay_connector::{Error, Host, HostOptions, HostState, LocalTransport, Transport};
use serde_json::{json, Value};
use tokio::sync::mpsc;

use super::params::Params;
use super::rpc::{Out, RpcError};
use super::wire;
use super::{done, HostEntry, Server};

impl Server {
    /// `host.open {destination, ssh_config?, identity?, port?, accept_new?}` →
    /// `{host, existing}`. Opening
    /// a destination that is open already returns its host (and ignores the other fields).
    pub(super) fn host_open(&self, p: Params<'_>) -> Result<Value, RpcError> {
        p.only(&[
            "destination",
            "ssh_config",
            "identity",
            "port",
            "accept_new",
        ])?;
        let destination = p.non_empty("destination")?;
        let args = SshArgs {
            accept_new: p.flag("accept_new")?,
            ssh_config: p.opt_str("ssh_config")?.map(PathBuf::from),
            identity: p
                .strings("identity")?
                .into_iter()
                .map(PathBuf::from)
                .collect(),
            port: match p.opt_u64("port")? {
                None => None,
                Some(n) => Some(
                    u16::try_from(n)
                        .ok()
                        .filter(|p| *p > 0)
                        .ok_or_else(|| RpcError::params("`port` must be 1..65535"))?,
                ),
            },
        };
        let mut hosts = self.hosts();
        if let Some((id, _)) = hosts.iter().find(|(_, h)| h.destination == destination) {
            return Ok(json!({"host": id, "existing": true}));
        }
        let id = format!("h{}", self.next_host.fetch_add(1, Ordering::Relaxed));
        let transport: Box<dyn Transport> = if destination == "local" {
            Box::new(LocalTransport::new())
        } else {
            Box::new(self.ssh_transport(&id, destination, &args))
        };
        let mut options = HostOptions::new(format!("relay-serve/{}", std::process::id()));
        options.policy = Some(crate::policy::from_env());
        let host = Host::open(transport, options);
        tokio::spawn(forward_states(self.out.clone(), id.clone(), host.clone()));
        hosts.insert(
            id.clone(),
            HostEntry {
                destination: destination.to_string(),
                host,
                listing: Arc::new(tokio::sync::Semaphore::new(super::LISTS_PER_HOST)),
                round_trips: std::sync::OnceLock::new(),
            },
        );
        Ok(json!({"host": id, "existing": false}))
    }

    /// The SSH transport of `destination`, whose questions go to the app.
    fn ssh_transport(&self, id: &str, destination: &str, args: &SshArgs) -> SshTransport {
        let mut opts = args.options(destination);
        let (out, host) = (self.out.clone(), id.to_string());
        opts.host_key_prompt = Some(Arc::new(move |key: &UnknownHostKey| {
            let answer = out.ask_blocking(
                "host_key.confirm",
                json!({
                    "host": host,
                    "name": key.host,
                    "algorithm": key.algorithm,
                    "fingerprint": key.fingerprint,
                    "known_hosts": key.file.display().to_string(),
                }),
            );
            answer.and_then(|a| a.get("accept")?.as_bool()) == Some(true)
        }));
        let (out, host) = (self.out.clone(), id.to_string());
        opts.auth.passphrase = Some(Arc::new(move |path: &std::path::Path, attempt| {
            let answer = out.ask_blocking(
                "auth.passphrase",
                json!({"host": host, "key": path.display().to_string(), "attempt": attempt}),
            );
            answer
                .and_then(|a| a.get("passphrase")?.as_str().map(str::to_string))
                .filter(|p| !p.is_empty())
        }));
        // The callback runs on the connecting task and must not wait: events go, in order,
        // through a queue to a task that writes them.
        let (tx, mut rx) = mpsc::unbounded_channel::<Value>();
        let out = self.out.clone();
        tokio::spawn(async move {
            while let Some(params) = rx.recv().await {
                out.notify("deploy.progress", params).await;
            }
        });
        let host = id.to_string();
        opts.progress = Some(Arc::new(move |ev: &DeployEvent| {
            let mut p = match ev {
                DeployEvent::Probed { platform, target } => {
                    json!({"step": "probed", "platform": platform, "target": target})
                }
                DeployEvent::AlreadyPresent { path } => {
                    json!({"step": "already_present", "path": path})
                }
                DeployEvent::Uploading { sent, total } => {
                    json!({"step": "uploading", "sent": sent, "total": total})
                }
                DeployEvent::Installed { path } => json!({"step": "installed", "path": path}),
            };
            p["host"] = json!(host);
            let _ = tx.send(p);
        }));
        SshTransport::new(opts)
    }

    /// `host.close {host}`: stops reconnecting and closes the connection; the host's PTYs keep
    /// running. Its panes' streams end with `pane.closed`.
    pub(super) async fn host_close(&self, p: Params<'_>) -> Result<Value, RpcError> {
        p.only(&["host"])?;
        let id = p.str("host")?;
        let entry = self.hosts().remove(id).ok_or_else(|| {
            RpcError::new(
                "unknown_host",
                format!("no host {id:?} is open in this sidecar"),
            )
        })?;
        entry.host.close();
        // A pump waiting for the app's credit would never see its stream end: end every held
        // pane of the host here (a pump that already ended removed its own entry).
        let held: Vec<_> = {
            let mut panes = self.panes();
            let keys: Vec<_> = panes.keys().filter(|(h, _)| h == id).cloned().collect();
            keys.iter().filter_map(|k| panes.remove(k)).collect()
        };
        for pane in held {
            let binding = wire::binding_json(id, &pane.binding);
            drop(pane);
            let params = json!({"binding": binding, "reason": "the host was closed"});
            self.out.notify("pane.closed", params).await;
        }
        Ok(done())
    }

    /// `host.retry {host}`: skips the wait before the next connection attempt (also after
    /// `failed`, once its cause was fixed).
    pub(super) fn host_retry(&self, p: Params<'_>) -> Result<Value, RpcError> {
        p.only(&["host"])?;
        self.host(p.str("host")?)?.retry_now();
        Ok(done())
    }

    /// The error of a call on `host`: when the host is down for good, the cause that made it
    /// so (`host_key_unknown`, `auth_failed`, ...) rather than "host down".
    pub(super) fn host_error(&self, host: &Host, e: Error) -> RpcError {
        if matches!(e, Error::HostDown(_)) {
            if let HostState::Failed { error } = &*host.state().borrow() {
                return wire::from_error(error);
            }
        }
        wire::from_error(&e)
    }
}

/// Sends `host.state` for every state `host` goes through, starting with the current one.
async fn forward_states(out: Out, id: String, host: Host) {
    let mut states = host.state();
    // Held by the watcher only through the receiver: the host stops when the app closes it.
    drop(host);
    loop {
        let state = states.borrow_and_update().clone();
        out.notify("host.state", wire::state_json(&id, &state))
            .await;
        if matches!(state, HostState::Closed) || states.changed().await.is_err() {
            return;
        }
    }
}
