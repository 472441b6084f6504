//! `kill`, `protect`, `gc` and `forget`: list once, resolve what the operator named into exact
//! bindings, show it, ask, act, and print what became of each.

use anyhow::Context;
use relay_cli::destination::Destination;
use relay_connector::Session;
use relay_protocol::message::{EndWhen, LeaseRow};
use relay_protocol::{Capability, LeaseState, PtyId};

use crate::confirm::confirm;
use crate::output::{note, show};
use crate::report::{
    forget_report, gc_outcome, gc_report, gc_table, kill_outcome, kill_report, targets_table,
};
use crate::targets::{self, is_live, Id, Listing};
use crate::Outcome;

/// Where the commands run.
pub struct Ctl<'a> {
    /// The connection.
    pub session: &'a Session,
    /// Where it goes, for messages.
    pub destination: &'a Destination,
}

impl Ctl<'_> {
    /// `relayctl kill ID... [--pty ID]`: exactly the named shells, protected ones included.
    pub async fn kill(
        &self,
        ids: &[String],
        pty: Option<&str>,
        yes: bool,
    ) -> anyhow::Result<Outcome> {
        let ids = Id::parse_all(ids, pty)?;
        let listing = targets::list(self.session).await?;
        let rows = targets::resolve_all(&listing, &ids)?;
        self.end(&rows, EndWhen::Always, yes).await
    }

    /// `relayctl kill --all [--workspace W]`: every live unprotected shell of one listing.
    pub async fn kill_all(&self, workspace: Option<&str>, yes: bool) -> anyhow::Result<Outcome> {
        self.need_lifecycle(
            "kill --all",
            "or kill shells one by one with `relayctl kill ID`",
        )?;
        let listing = targets::list(self.session).await?;
        let in_scope =
            |state: LeaseState, ws: &str| is_live(state) && workspace.is_none_or(|w| w == ws);
        let (protected, rows): (Vec<_>, Vec<_>) = listing
            .rows
            .iter()
            .filter(|r| in_scope(r.info.state, &r.info.binding.pane.workspace.0))
            .partition(|r| r.info.protected);
        if !protected.is_empty() {
            note!(
                "leaving {} protected shell(s) alone (`relayctl protect ID --off` first to end \
                 them)",
                protected.len()
            );
        }
        if rows.is_empty() {
            note!("no live shell to end on {}", self.destination);
            return Ok(Outcome::Done);
        }
        self.end(&rows, EndWhen::Unprotected, yes).await
    }

    /// Shows `rows`, asks, ends exactly their bindings and prints the summary.
    async fn end(&self, rows: &[&LeaseRow], when: EndWhen, yes: bool) -> anyhow::Result<Outcome> {
        show(targets_table(rows, crate::render::now_ms()))?;
        let question = format!("end these {} shell(s) on {}?", rows.len(), self.destination);
        if !confirm(&question, yes).await? {
            note!("nothing ended");
            return Ok(Outcome::NotAllDone);
        }
        let bindings: Vec<_> = rows.iter().map(|r| r.info.binding.clone()).collect();
        let summary = self.session.kill_all(&bindings, when).await?;
        show(kill_report(&summary))?;
        Ok(kill_outcome(&summary))
    }

    /// `relayctl protect ID [--pty ID] [--off]`.
    pub async fn protect(&self, id: &str, pty: Option<&str>, on: bool) -> anyhow::Result<Outcome> {
        let ids = Id::parse_all(&[id.to_string()], pty)?;
        let listing = targets::list(self.session).await?;
        let row = targets::resolve(&listing, &ids[0])?;
        let binding = &row.info.binding;
        self.session
            .protect(binding, on)
            .await
            .with_context(|| format!("cannot change protection of {binding}"))?;
        let what = if on { "protected" } else { "unprotected" };
        show(format_args!("{what} {} ({})\n", binding.pane, binding.pty))?;
        Ok(Outcome::Done)
    }

    /// `relayctl gc [--dry-run] [--yes]`.
    pub async fn gc(&self, dry_run: bool, yes: bool) -> anyhow::Result<Outcome> {
        self.need_lifecycle("gc", "or end shells one by one with `relayctl kill ID`")?;
        let plan = self.session.gc_plan().await?;
        if plan.is_empty() {
            note!("no shell is eligible for cleanup on {}", self.destination);
            return Ok(Outcome::Done);
        }
        show(gc_table(&plan))?;
        if dry_run {
            return Ok(Outcome::Done);
        }
        let question = format!(
            "end these {} shell(s) on {} if they are still eligible?",
            plan.candidates.len(),
            self.destination
        );
        if !confirm(&question, yes).await? {
            note!("nothing ended");
            return Ok(Outcome::NotAllDone);
        }
        let summary = self.session.gc(&plan).await?;
        show(gc_report(&summary))?;
        Ok(gc_outcome(&summary))
    }

    /// `relayctl forget --all | ID...`: PTY ids as named; a pane key names the pane's ended
    /// leases.
    pub async fn forget(&self, ids: &[String], all: bool) -> anyhow::Result<Outcome> {
        self.need_lifecycle(
            "forget",
            "(until then ended leases stay; `relayctl leases` lists only live ones)",
        )?;
        let ptys = if all {
            Vec::new()
        } else {
            let ids = Id::parse_all(ids, None)?;
            ptys_to_forget(&ids, &targets::list(self.session).await?)?
        };
        let forgot = self.session.forget(&ptys).await?;
        show(forget_report(&forgot))?;
        Ok(Outcome::of(
            forgot.not_ended.is_empty() && forgot.unknown.is_empty(),
        ))
    }

    /// Refuses `what` before asking anything when the agent lacks the lifecycle policy;
    /// `instead` ends the message (`or ...`).
    fn need_lifecycle(&self, what: &str, instead: &str) -> anyhow::Result<()> {
        let welcome = self.session.welcome();
        if welcome.has(Capability::LIFECYCLE) {
            return Ok(());
        }
        anyhow::bail!(
            "the agent on {} (version {}) does not support `relayctl {what}` (capability \
             \"lifecycle\"); upgrade the agent {instead}",
            self.destination,
            welcome.agent_version
        )
    }
}

/// The PTYs `forget` names: PTY ids as given, pane keys as every ended lease of the pane.
fn ptys_to_forget(ids: &[Id], listing: &Listing) -> anyhow::Result<Vec<PtyId>> {
    let mut ptys = Vec::new();
    for id in ids {
        match id {
            Id::Pty(pty) => ptys.push(*pty),
            Id::Binding(b) => ptys.push(b.pty),
            Id::Pane(pane) => {
                let ended: Vec<_> = listing
                    .rows
                    .iter()
                    .filter(|r| r.info.binding.pane == *pane && r.info.state == LeaseState::Ended)
                    .map(|r| r.info.binding.pty)
                    .collect();
                if ended.is_empty() {
                    anyhow::bail!(
                        "pane {pane} has no ended lease to forget; see `relayctl leases --all`"
                    );
                }
                ptys.extend(ended);
            }
        }
    }
    Ok(ptys)
}
