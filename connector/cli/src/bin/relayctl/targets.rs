//! One listing of the agent's leases, the filters of `relayctl leases`, and the IDs operators
//! copy from it turned into exact bindings.
//!
//! A target is resolved once, from one listing, into a [`Binding`]; from then on every request
//! names that binding (rule C), so a pane that got a new shell in the meantime is refused by the
//! agent instead of losing the new one. Only [`list`] does IO.

use anyhow::Context;
use relay_connector::Session;
use relay_protocol::message::{LeaseRow, PolicyInfo, Tag};
use relay_protocol::{Binding, Capability, LeaseInfo, LeaseState, PaneKey, PtyId};

/// The leases as one reply listed them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Listing {
    /// Every lease, sorted by pane key then PTY id.
    pub rows: Vec<LeaseRow>,
    /// What only an agent with the lifecycle policy says; `None` for an older agent (its rows
    /// then carry no tag and no detail).
    pub lifecycle: Option<Lifecycle>,
}

/// The lifecycle facts of a listing.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Lifecycle {
    /// The agent's cleanup settings.
    pub policy: PolicyInfo,
    /// The daemon's resident memory, in bytes (0 = unknown).
    pub rss_bytes: u64,
    /// Leases the agent left out to fit its reply (oldest ended ones).
    pub left_out: u32,
}

/// Lists the leases once: `Inspect` when the agent has the lifecycle policy, else `ListLeases`.
pub async fn list(session: &Session) -> anyhow::Result<Listing> {
    if !session.welcome().has(Capability::LIFECYCLE) {
        let leases = session.list_leases().await.context("cannot list leases")?;
        return Ok(Listing {
            rows: leases.into_iter().map(untagged).collect(),
            lifecycle: None,
        });
    }
    let inspected = session.inspect().await.context("cannot list leases")?;
    Ok(Listing {
        rows: inspected.leases,
        lifecycle: Some(Lifecycle {
            policy: inspected.policy,
            rss_bytes: inspected.rss_bytes,
            left_out: inspected.left_out,
        }),
    })
}

/// A row of an agent without the lifecycle policy.
fn untagged(info: LeaseInfo) -> LeaseRow {
    LeaseRow {
        info,
        tag: Tag::None,
        detail: None,
        used: false,
        last_input_ms: None,
        policy: None,
    }
}

/// Whether a lease's shell may still run (attached, detached, superseded).
pub fn is_live(state: LeaseState) -> bool {
    state != LeaseState::Ended
}

/// Which leases `relayctl leases` shows.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// Ended leases too.
    pub all: bool,
    /// Only these states (empty: live ones, or every state with `all`).
    pub states: Vec<LeaseState>,
    /// Only panes of this workspace.
    pub workspace: Option<String>,
}

impl Filter {
    /// Whether `lease` is shown.
    pub fn keeps(&self, lease: &LeaseInfo) -> bool {
        let state = if self.states.is_empty() {
            self.all || is_live(lease.state)
        } else {
            self.states.contains(&lease.state)
        };
        let workspace = self
            .workspace
            .as_ref()
            .is_none_or(|w| lease.binding.pane.workspace.0 == *w);
        state && workspace
    }
}

/// What an operator typed to name a shell.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Id {
    /// A PTY id (`<incarnation>.<counter>`): that lease.
    Pty(PtyId),
    /// A pane key (`workspace/tab/leaf`): the pane's live PTY.
    Pane(PaneKey),
    /// The old form `PANE --pty ID`: that exact binding.
    Binding(Binding),
}

impl Id {
    /// Reads one ID: a pane key when it contains `/`, else a PTY id.
    pub fn parse(s: &str) -> anyhow::Result<Id> {
        if s.contains('/') {
            parse_pane(s).map(Id::Pane)
        } else {
            parse_pty(s).map(Id::Pty)
        }
    }

    /// Reads the IDs of a command; `pty` is the old `--pty` flag, which goes with exactly one
    /// pane key.
    pub fn parse_all(ids: &[String], pty: Option<&str>) -> anyhow::Result<Vec<Id>> {
        let Some(pty) = pty else {
            return ids.iter().map(|s| Id::parse(s)).collect();
        };
        match ids {
            [pane] => Ok(vec![Id::Binding(Binding {
                pane: parse_pane(pane)?,
                pty: parse_pty(pty)?,
            })]),
            _ => anyhow::bail!(
                "--pty goes with exactly one pane key (`PANE --pty ID`); or name PTY ids alone, \
                 as `relayctl leases` prints them"
            ),
        }
    }
}

/// The lease `id` names in `listing`.
///
/// # Errors
/// No lease matches (the message names the ID and how to list them), or a pane key whose pane
/// has no live PTY (or, against the rules, several).
pub fn resolve<'a>(listing: &'a Listing, id: &Id) -> anyhow::Result<&'a LeaseRow> {
    let rows = &listing.rows;
    let found = match id {
        Id::Pty(pty) => rows.iter().find(|r| r.info.binding.pty == *pty),
        Id::Binding(b) => rows.iter().find(|r| r.info.binding == *b),
        Id::Pane(pane) => return live_of(rows, pane),
    };
    found.ok_or_else(|| {
        let what = match id {
            Id::Binding(b) => format!("PTY {} of pane {}", b.pty, b.pane),
            _ => format!("PTY id {}", id_text(id)),
        };
        let cut = listing
            .lifecycle
            .as_ref()
            .filter(|l| l.left_out > 0)
            .map(|l| {
                format!(
                    " ({} ended leases were left out of the listing)",
                    l.left_out
                )
            })
            .unwrap_or_default();
        anyhow::anyhow!(
            "no lease has {what}{cut}; list them with `relayctl leases --all` and copy a PTY id \
             or pane key from there"
        )
    })
}

/// The one live lease of `pane`.
fn live_of<'a>(rows: &'a [LeaseRow], pane: &PaneKey) -> anyhow::Result<&'a LeaseRow> {
    let of_pane: Vec<&LeaseRow> = rows
        .iter()
        .filter(|r| r.info.binding.pane == *pane)
        .collect();
    let live: Vec<&LeaseRow> = of_pane
        .iter()
        .copied()
        .filter(|r| matches!(r.info.state, LeaseState::Attached | LeaseState::Detached))
        .collect();
    match (live.as_slice(), of_pane.last()) {
        ([one], _) => Ok(one),
        ([], None) => anyhow::bail!(
            "no pane {pane} on this host; list the panes with `relayctl leases --all`"
        ),
        ([], Some(last)) => anyhow::bail!(
            "pane {pane} has no live shell: its last PTY {} is {}{}; nothing to act on \
             (`relayctl leases --all` shows its history)",
            last.info.binding.pty,
            last.info.state,
            last.info
                .reason
                .as_ref()
                .map(|r| format!(" ({r})"))
                .unwrap_or_default()
        ),
        (several, _) => anyhow::bail!(
            "pane {pane} has {} live PTYs ({}); name one by its PTY id",
            several.len(),
            several
                .iter()
                .map(|r| r.info.binding.pty.to_string())
                .collect::<Vec<_>>()
                .join(", ")
        ),
    }
}

fn id_text(id: &Id) -> String {
    match id {
        Id::Pty(p) => p.to_string(),
        Id::Pane(k) => k.to_string(),
        Id::Binding(b) => b.to_string(),
    }
}

/// The rows `ids` name in `listing`, each once, in the order named.
///
/// # Errors
/// As [`resolve`], for the first ID that names nothing.
pub fn resolve_all<'a>(listing: &'a Listing, ids: &[Id]) -> anyhow::Result<Vec<&'a LeaseRow>> {
    let mut rows: Vec<&LeaseRow> = Vec::new();
    for id in ids {
        let row = resolve(listing, id)?;
        if !rows.iter().any(|r| r.info.binding == row.info.binding) {
            rows.push(row);
        }
    }
    Ok(rows)
}

/// Exactly `workspace/tab/leaf`: three non-empty parts, none containing `/` (the form `relay`
/// accepts and `relayctl leases` prints).
pub fn parse_pane(s: &str) -> anyhow::Result<PaneKey> {
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
pub fn parse_pty(s: &str) -> anyhow::Result<PtyId> {
    s.parse::<PtyId>().map_err(|_| {
        anyhow::anyhow!(
            "{s:?} is neither a PTY id (`<incarnation>.<counter>`) nor a pane key \
             (`workspace/tab/leaf`); copy one from `relayctl leases`"
        )
    })
}

#[cfg(test)]
pub(crate) mod tests;
