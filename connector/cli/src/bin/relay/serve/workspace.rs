//! `workspace.hydrate` (the host's answer of which panes exist; never created, never guessed)
//! and `workspace.kill_all` (an exact snapshot, ended with an honest summary).

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use relay_connector::{Host, KillSummary};
use relay_protocol::message::{EndOutcome, EndWhen};
use relay_protocol::{Binding, LeaseInfo, LeaseState, PaneKey};
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::params::Params;
use super::rpc::{self, RpcError};
use super::wire;
use super::Server;

/// How long a call waits for its host by default (`timeout_ms`): 30 s.
const WAIT_WITHIN: Duration = Duration::from_secs(30);

/// Runs `call`, which waits for `host`, within the call's `timeout_ms` (default 30 s); then
/// fails with `timeout`, saying what the host is doing. Nothing is known then: a `pane.open`
/// may still take effect (opening again is safe), a hydrate has learned nothing.
pub(super) async fn within<T>(
    p: &Params<'_>,
    host_id: &str,
    host: &Host,
    call: impl std::future::Future<Output = T>,
) -> Result<T, RpcError> {
    within_bound(wait_bound(p)?, host_id, host, call).await
}

/// The call's `timeout_ms` (default 30 s).
fn wait_bound(p: &Params<'_>) -> Result<Duration, RpcError> {
    Ok(p.opt_u64("timeout_ms")?
        .map(Duration::from_millis)
        .unwrap_or(WAIT_WITHIN))
}

/// [`within`] with the bound already read.
async fn within_bound<T>(
    bound: Duration,
    host_id: &str,
    host: &Host,
    call: impl std::future::Future<Output = T>,
) -> Result<T, RpcError> {
    tokio::time::timeout(bound, call).await.map_err(|_| {
        let state = host.state().borrow().to_string();
        RpcError::new(
            "timeout",
            format!(
                "host {host_id} did not answer within {} ms (it is {state}); nothing is known \
                 yet: keep the app's terminals pending and ask again, do not create new ones",
                bound.as_millis()
            ),
        )
        .with("transient", json!(true))
    })
}

impl Server {
    /// `workspace.hydrate {host, workspace, timeout_ms?}` → `{panes}`: one row per pane key the
    /// host knows in the workspace (its current lease), asked of the host now. When the host
    /// does not answer in time (see [`within`]) the call fails with `timeout`: an empty list always means the
    /// host said so, never that it was not asked (a caller must not create panes on a guess).
    pub(super) async fn hydrate(&self, p: Params<'_>) -> Result<Value, RpcError> {
        p.only(&["host", "workspace", "timeout_ms"])?;
        let host_id = p.str("host")?;
        let (host, listing) = self.host_listing(host_id)?;
        let workspace = host.workspace(p.name("workspace")?);
        let leases = within(&p, host_id, &host, list(&listing, &workspace)).await?;
        let leases = leases.map_err(|e| self.host_error(&host, e))?;
        let panes: Vec<Value> = current_leases(leases)
            .into_iter()
            .map(|lease| {
                let running = matches!(lease.state, LeaseState::Attached | LeaseState::Detached);
                let held = self.holds(host_id, &lease.binding);
                wire::lease_json(&lease, running && !held)
            })
            .collect();
        Ok(json!({"panes": panes}))
    }

    /// Whether this sidecar holds a stream of exactly `binding` on `host_id`.
    fn holds(&self, host_id: &str, binding: &Binding) -> bool {
        self.panes()
            .get(&(host_id.to_string(), binding.pty))
            .is_some_and(|e| e.binding == *binding)
    }

    /// `workspace.kill_all {host, workspace}` or `{host, panes: [binding, ...]}` → the summary.
    /// The targets are snapshotted once (every running pane of the workspace, or exactly the
    /// bindings given); exactly those are ended, protected ones refused; nothing created later
    /// is touched, and nothing is swept by listing again.
    ///
    /// `params` are read here and their JSON tree freed before waiting for the host: a list of
    /// bindings takes ~20× its text as a tree, ~150 bytes a binding once read.
    pub(super) async fn kill_all(&self, params: Box<RawValue>) -> Result<Value, RpcError> {
        let KillAll {
            host_id,
            host,
            listing,
            bound,
            targets,
        } = {
            let tree = rpc::params_value(&params)?;
            drop(params);
            self.kill_all_request(Params(&tree))?
            // The tree is freed here, before the call waits for its host.
        };
        let targets = match targets {
            Targets::Exact(bindings) => bindings,
            Targets::Workspace(workspace) => {
                let leases = within_bound(bound, &host_id, &host, list(&listing, &workspace));
                let leases = leases.await?.map_err(|e| self.host_error(&host, e))?;
                leases
                    .into_iter()
                    .filter(|l| matches!(l.state, LeaseState::Attached | LeaseState::Detached))
                    .map(|l| l.binding)
                    .collect()
            }
        };
        let session = within_bound(bound, &host_id, &host, host.session()).await?;
        let session = session.map_err(|e| self.host_error(&host, e))?;
        let summary = session
            .kill_all(&targets, EndWhen::Unprotected)
            .await
            .map_err(|e| wire::from_error(&e))?;
        Ok(summary_json(&host_id, &summary))
    }

    /// Reads a `workspace.kill_all` call.
    fn kill_all_request(&self, p: Params<'_>) -> Result<KillAll, RpcError> {
        p.only(&["host", "workspace", "panes", "timeout_ms"])?;
        let host_id = p.str("host")?;
        let (host, listing) = self.host_listing(host_id)?;
        if p.0.get("panes").is_some() && p.0.get("workspace").is_some() {
            return Err(RpcError::params(
                "give `workspace` (all its running panes) or `panes` (exact bindings), not both",
            ));
        }
        let targets = match p.0.get("panes") {
            Some(Value::Array(items)) => Targets::Exact(
                items
                    .iter()
                    .map(|item| {
                        let wrapped = json!({ "b": item });
                        let (h, binding) = Params(&wrapped).binding("b")?;
                        if h != host_id {
                            return Err(RpcError::params(format!(
                                "binding {binding} belongs to host {h:?}, not {host_id:?}"
                            )));
                        }
                        Ok(binding)
                    })
                    .collect::<Result<_, _>>()?,
            ),
            Some(_) => return Err(RpcError::params("`panes` must be an array of bindings")),
            None => Targets::Workspace(host.workspace(p.name("workspace")?)),
        };
        Ok(KillAll {
            host_id: host_id.to_string(),
            host,
            listing,
            bound: wait_bound(&p)?,
            targets,
        })
    }
}

/// A `workspace.kill_all` call, read.
struct KillAll {
    host_id: String,
    host: Host,
    listing: Arc<tokio::sync::Semaphore>,
    bound: Duration,
    targets: Targets,
}

/// What `workspace.kill_all` ends.
enum Targets {
    /// Exactly these bindings.
    Exact(Vec<Binding>),
    /// Every running pane of this workspace, listed once.
    Workspace(relay_connector::Workspace),
}

/// The workspace's leases, asked of the host when one of its turns to list is free
/// (`LISTS_PER_HOST`).
async fn list(
    listing: &tokio::sync::Semaphore,
    workspace: &relay_connector::Workspace,
) -> Result<Vec<LeaseInfo>, relay_connector::Error> {
    // Never closed: the semaphore lives as long as its host entry.
    let _turn = listing.acquire().await;
    workspace.leases().await
}

/// The current lease of each pane key: a running one if there is one, else the newest.
/// Superseded bindings (replaced by a newer one of the pane) are left out.
fn current_leases(leases: Vec<LeaseInfo>) -> Vec<LeaseInfo> {
    let mut by_pane: BTreeMap<PaneKey, LeaseInfo> = BTreeMap::new();
    for lease in leases {
        if lease.state == LeaseState::Superseded {
            continue;
        }
        let rank = |l: &LeaseInfo| (l.state != LeaseState::Ended, l.since_ms, l.binding.pty);
        match by_pane.get(&lease.binding.pane) {
            Some(kept) if rank(kept) >= rank(&lease) => {}
            _ => {
                by_pane.insert(lease.binding.pane.clone(), lease);
            }
        }
    }
    by_pane.into_values().collect()
}

/// `{targets, ended, already_gone, refused, unverified, complete, results}`.
fn summary_json(host_id: &str, summary: &KillSummary) -> Value {
    let results: Vec<Value> = summary
        .results
        .iter()
        .map(|r| {
            let (outcome, detail) = match &r.outcome {
                EndOutcome::Ended { exit, detail } => (
                    "ended",
                    json!({"exit": exit.as_ref().map(wire::exit_json), "detail": detail}),
                ),
                EndOutcome::AlreadyGone { reason } => (
                    "already_gone",
                    json!({"reason": reason.as_ref().map(wire::reason_json)}),
                ),
                EndOutcome::Refused { why } => ("refused", json!({ "why": why })),
                EndOutcome::Kept { why } => ("kept", json!({ "why": why })),
                EndOutcome::Unverified { why } => ("unverified", json!({ "why": why })),
            };
            let mut row = detail;
            row["binding"] = wire::binding_json(host_id, &r.binding);
            row["outcome"] = json!(outcome);
            row
        })
        .collect();
    json!({
        "targets": summary.targets(),
        "ended": summary.ended(),
        "already_gone": summary.already_gone(),
        "refused": summary.refused(),
        "kept": summary.kept(),
        "unverified": summary.unverified(),
        "complete": summary.complete(),
        "results": results,
    })
}
