//! The lifecycle requests of a [`Session`] (protocol 1.4, capability `lifecycle`; spec in
//! `docs/protocol.md` §6b): stating the cleanup policy, the per-lease lifecycle view, exact ends
//! with a per-target outcome, supersede and pruning of ended history. Each one is sent only to an
//! agent that advertised `lifecycle` (rule H).
//!
//! The operator-level calls built on these (`kill_all`, `gc`) are in [`crate::lifecycle`].

use relay_protocol::message::{
    Created, End, EndResult, EndWhen, Forget, Forgot, Inspect, Inspected, Replace, SetPolicy,
};
use relay_protocol::{Binding, Capability, ErrorReply, PtyId, Request, Response, SpawnSpec};
use tokio::sync::oneshot;

use super::handshake::HANDSHAKE_TIMEOUT;
use super::reply::{done, unexpected};
use super::Session;
use crate::Error;

impl Session {
    /// States the cleanup policy for the PTYs this connection creates from now on (`spec` as in
    /// `docs/protocol.md` §6b.1, e.g. `"unused=10m;idle=off"`; `""` = the agent's defaults).
    /// [`Session::connect_with`] already states [`ConnectOptions::policy`](super::ConnectOptions)
    /// right after the hello; call this only to change it.
    ///
    /// # Errors
    /// [`Error::Agent`] with `BadRequest` naming an unknown condition or a value out of bounds
    /// (nothing changes); [`Error::Unsupported`] without the `lifecycle` capability (nothing is
    /// sent); [`Error::ConnectionLost`]; [`Error::Timeout`].
    pub async fn set_policy(&self, spec: &str) -> Result<(), Error> {
        self.require(Capability::LIFECYCLE, "cleanup policies")?;
        let req = Request::SetPolicy(SetPolicy {
            spec: spec.to_string(),
        });
        done("set policy", self.call(req).await?)
    }

    /// Every lease with its lifecycle view (tag, end detail, used, last input, stated policy),
    /// the agent's cleanup settings and its resident memory. Never creates or ends anything.
    ///
    /// # Errors
    /// [`Error::Unsupported`] without the `lifecycle` capability (use
    /// [`Session::list_leases`] then); [`Error::ConnectionLost`]; [`Error::Timeout`].
    pub async fn inspect(&self) -> Result<Inspected, Error> {
        self.require(Capability::LIFECYCLE, "inspecting leases")?;
        match self.call(Request::Inspect(Inspect {})).await? {
            Response::Inspected(i) => Ok(i),
            other => Err(unexpected("inspect", other.op())),
        }
    }

    /// Ends exactly `targets`, each fenced on its binding (rule C), as far as `when` allows, and
    /// returns what became of each: one [`EndResult`] per target, in request order. The agent
    /// answers once every target ended or could not be verified (about twice its 3 s kill
    /// grace), so a request timeout below ~10 s may expire first. At most a frame's worth of
    /// targets per request (≈1000); [`Session::kill_all`] splits larger snapshots.
    ///
    /// # Errors
    /// [`Error::Unsupported`] without the `lifecycle` capability (nothing is sent);
    /// [`Error::ConnectionLost`] and [`Error::Timeout`] (what was ended is then unknown: list
    /// again); per-target refusals are outcomes, not errors.
    pub async fn end(&self, targets: &[Binding], when: EndWhen) -> Result<Vec<EndResult>, Error> {
        self.require(Capability::LIFECYCLE, "ending shells with a report")?;
        let req = Request::End(End {
            targets: targets.to_vec(),
            when,
        });
        match self.call(req).await? {
            Response::EndReport(r) => Ok(r.results),
            other => Err(unexpected("end", other.op())),
        }
    }

    /// Replaces the pane's shell (the app's "restart terminal"; rule D): `old`, the pane's live
    /// binding, becomes `superseded` — its process keeps running and stays listed, eligible for
    /// cleanup like any detached shell — and a new PTY running `spec` is created for the pane.
    /// Does not attach: attach to the returned binding. A handle still attached to `old` keeps
    /// its stream; a re-attach of it later fails with `Mismatch`.
    ///
    /// # Errors
    /// [`Error::Agent`] with `Mismatch` (the pane has another PTY now), `NotFound`, `Ended`,
    /// `SpawnFailed` or `BadRequest`; [`Error::Unsupported`] without the `lifecycle`
    /// capability; [`Error::ConnectionLost`].
    pub async fn replace(&self, old: &Binding, spec: SpawnSpec) -> Result<Created, Error> {
        self.require(Capability::LIFECYCLE, "replacing a pane's shell")?;
        let req = Request::Replace(Replace {
            old: old.clone(),
            spec,
        });
        match self.call(req).await? {
            Response::Created(c) => Ok(c),
            other => Err(unexpected("replace", other.op())),
        }
    }

    /// Forgets ended leases: the named PTYs, or every ended lease when `ptys` is empty. Live and
    /// superseded leases are never forgotten (they come back in `not_ended`). A connector that
    /// still holds a forgotten binding is told `Ended` with reason `forgotten`.
    ///
    /// # Errors
    /// [`Error::Unsupported`] without the `lifecycle` capability; [`Error::ConnectionLost`];
    /// [`Error::Timeout`].
    pub async fn forget(&self, ptys: &[PtyId]) -> Result<Forgot, Error> {
        self.require(Capability::LIFECYCLE, "forgetting ended leases")?;
        let req = Request::Forget(Forget {
            ptys: ptys.to_vec(),
        });
        match self.call(req).await? {
            Response::Forgot(f) => Ok(f),
            other => Err(unexpected("forget", other.op())),
        }
    }

    /// Waits for the agent's `reply` to `policy`, which a new connection states right behind
    /// its hello ([`super::handshake::opening`]). An agent without the `lifecycle` capability
    /// has no per-connection policy: whatever it answers (`Unsupported`) is ignored.
    ///
    /// # Errors
    /// [`Error::Policy`] when the agent refuses the policy; [`Error::Timeout`] when it does not
    /// answer within the handshake bound; [`Error::ConnectionLost`].
    pub(super) async fn policy_stated(
        &self,
        policy: &str,
        reply: oneshot::Receiver<Result<Response, Error>>,
    ) -> Result<(), Error> {
        let answer = self
            .with_request_timeout(Some(HANDSHAKE_TIMEOUT))
            .bounded("set policy", async {
                reply
                    .await
                    .unwrap_or_else(|_| Err(self.inner.shared.lost()))
            })
            .await;
        if !self.inner.welcome.has(Capability::LIFECYCLE) {
            tracing::debug!(
                destination = %self.inner.destination,
                answer = ?answer.as_ref().map(Response::op),
                "agent without lifecycle: no cleanup policy stated"
            );
            return match answer {
                Ok(_) | Err(Error::Agent(_)) => Ok(()),
                Err(e) => Err(e),
            };
        }
        match answer.and_then(|r| done("set policy", r)) {
            Err(Error::Agent(reply)) => match *reply {
                ErrorReply::BadRequest { message } => Err(Error::Policy(format!(
                    "the agent on {} refused the cleanup policy {policy:?}: {message}",
                    self.inner.destination
                ))),
                other => Err(Error::Agent(Box::new(other))),
            },
            other => other,
        }
    }
}
