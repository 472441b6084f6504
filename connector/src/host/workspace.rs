//! [`Workspace`]: the panes of one project on one host, addressed by `(tab, leaf)`.
//!
//! A workspace handle scopes what it touches to its own pane keys: it cannot open, attach or
//! list another workspace's panes, and every error it returns is about its own panes (rule F).
//! All workspaces of a host share its one connection; each pane has its own queue and credit
//! window, so a flood or an unread pane in one workspace does not hold up another.

use relay_protocol::message::Created;
use relay_protocol::{LeaseInfo, PaneKey, PtyId, Resume, SpawnSpec, WorkspaceId};

use super::Host;
use crate::{Error, PaneHandle};

/// One workspace of a [`Host`]. Cheap to clone.
#[derive(Debug, Clone)]
pub struct Workspace {
    host: Host,
    id: WorkspaceId,
}

impl Workspace {
    pub(crate) fn new(host: Host, id: String) -> Workspace {
        Workspace {
            host,
            id: WorkspaceId(id),
        }
    }

    /// The workspace id.
    pub fn id(&self) -> &WorkspaceId {
        &self.id
    }

    /// The host it belongs to.
    pub fn host(&self) -> &Host {
        &self.host
    }

    /// The pane key of `(tab, leaf)` in this workspace.
    pub fn pane(&self, tab: &str, leaf: &str) -> PaneKey {
        PaneKey::new(self.id.0.clone(), tab, leaf)
    }

    /// Creates-or-attaches the pane `(tab, leaf)` with output from offset 0 — or, for a live
    /// pane whose early output the agent no longer holds, from a snapshot (see
    /// [`Host::open_pane`]).
    ///
    /// # Errors
    /// As [`Host::open_pane`].
    pub async fn open(
        &self,
        tab: &str,
        leaf: &str,
        spec: SpawnSpec,
    ) -> Result<(Created, PaneHandle), Error> {
        self.host
            .open_pane(self.pane(tab, leaf), spec, Resume::From(0))
            .await
    }

    /// Attaches to the pane `(tab, leaf)`; never creates (see [`Host::attach_pane`]).
    ///
    /// # Errors
    /// As [`Host::attach_pane`].
    pub async fn attach(
        &self,
        tab: &str,
        leaf: &str,
        expect: Option<PtyId>,
        resume: Resume,
    ) -> Result<PaneHandle, Error> {
        self.host
            .attach_pane(self.pane(tab, leaf), expect, resume)
            .await
    }

    /// Every lease the host's agent knows in this workspace (live, detached, ended,
    /// superseded). Never creates anything.
    ///
    /// # Errors
    /// As [`Host::session`] and
    /// [`Session::list_workspace_leases`](crate::Session::list_workspace_leases).
    pub async fn leases(&self) -> Result<Vec<LeaseInfo>, Error> {
        let session = self.host.session().await?;
        session.list_workspace_leases(&self.id).await
    }
}
