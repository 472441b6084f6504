//! Live agent upgrade requests of a [`Session`] (protocol 1.5, capability `upgrade`; spec in
//! `docs/protocol.md`, "Live upgrade"). Sent only to an agent that advertised `upgrade` (rule H).

use relay_protocol::message::{Upgrade, UpgradeInfo, UpgradeReport, UpgradeStarted};
use relay_protocol::{Capability, Request, Response};

use super::reply::unexpected;
use super::Session;
use crate::Error;

impl Session {
    /// What the agent runs (path and version), the newest agent installed in its
    /// `$RELAY_HOME/bin`, whether that is newer, and how its last upgrade went.
    ///
    /// # Errors
    /// [`Error::Unsupported`] for an agent without live upgrade (nothing is sent);
    /// [`Error::ConnectionLost`]; [`Error::Timeout`].
    pub async fn upgrade_info(&self) -> Result<UpgradeReport, Error> {
        self.require(Capability::UPGRADE, "live upgrade")?;
        match self.call(Request::UpgradeInfo(UpgradeInfo {})).await? {
            Response::UpgradeReport(r) => Ok(r),
            other => Err(unexpected("upgrade info", other.op())),
        }
    }

    /// Orders the agent to hand its shells to the binary `to` (an absolute path on the host;
    /// `None`: the newest installed one) in the same process. On success the connection then
    /// closes; the agent serves again within moments, with the same pid, PTY ids and offsets
    /// (connect again, then [`Session::upgrade_info`] tells whether the new code runs).
    ///
    /// # Errors
    /// [`Error::Agent`] with `UpgradeRefused` (cannot run, cannot read the state, a downgrade
    /// without `force`, nothing newer) or `BadRequest` (relative path): nothing was handed over;
    /// [`Error::Unsupported`] for an agent without live upgrade; [`Error::ConnectionLost`];
    /// [`Error::Timeout`].
    pub async fn upgrade(&self, to: Option<String>, force: bool) -> Result<UpgradeStarted, Error> {
        self.require(Capability::UPGRADE, "live upgrade")?;
        match self.call(Request::Upgrade(Upgrade { to, force })).await? {
            Response::UpgradeStarted(s) => Ok(s),
            other => Err(unexpected("upgrade", other.op())),
        }
    }
}
