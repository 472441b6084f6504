//! The accept loop: `run(listener, state, shutdown)`, until shutdown or an upgrade.
//!
//! Only connections from this daemon's own uid are served (SO_PEERCRED); others are refused and
//! logged. Each connection runs in its own task; shutdown cancels them all and waits (bounded)
//! for them to finish.

use std::future::Future;
use std::time::Duration;

use tokio::net::UnixListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use crate::daemon::connection;
use crate::log::limit::REFUSED;
use crate::state::State;

/// How long connections may take to wind down after shutdown was requested.
const CONNECTION_GRACE: Duration = Duration::from_secs(3);

/// Accepts connections on `listener` until `stop` completes, then closes every connection and
/// returns what `stop` gave (why: a signal, or an upgrade to hand over to).
pub async fn run<T>(listener: &UnixListener, state: State, stop: impl Future<Output = T>) -> T {
    let shutdown = stop;
    let cancel = CancellationToken::new();
    let tracker = TaskTracker::new();
    let uid = nix::unistd::getuid().as_raw();
    tokio::pin!(shutdown);
    let why = loop {
        let accepted = tokio::select! {
            why = &mut shutdown => break why,
            accepted = listener.accept() => accepted,
        };
        let stream = match accepted {
            Ok((stream, _)) => stream,
            Err(e) => {
                // E.g. out of file descriptors: back off instead of spinning.
                if REFUSED.admit() {
                    tracing::warn!("accept failed: {e}");
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                continue;
            }
        };
        match stream.peer_cred() {
            Ok(cred) if cred.uid() == uid => {
                tracker.spawn(connection::serve(
                    stream,
                    state.clone(),
                    cancel.child_token(),
                ));
            }
            Ok(cred) => {
                if REFUSED.admit() {
                    tracing::warn!(
                        "refused a connection from uid {} (pid {:?}); only uid {uid} may use \
                         this agent",
                        cred.uid(),
                        cred.pid()
                    );
                }
            }
            Err(e) => {
                if REFUSED.admit() {
                    tracing::warn!("refused a connection whose peer is unknown: {e}");
                }
            }
        }
    };
    cancel.cancel();
    tracker.close();
    if tokio::time::timeout(CONNECTION_GRACE, tracker.wait())
        .await
        .is_err()
    {
        tracing::warn!("some connections did not close within {CONNECTION_GRACE:?}");
    }
    why
}
