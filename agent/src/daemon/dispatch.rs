//! The request dispatch: one exhaustive `match` from [`Request`] to handler, turning handler
//! errors into `Response::Error` replies. Adding a request variant fails to compile here until it
//! is handled.

use relay_protocol::message::{Done, Leases, Pong};
use relay_protocol::{EndReason, ErrorReply, Message, Request, Response};
use tracing::Instrument;

use crate::daemon::subscriptions::Session;

/// Handles one request with id `id`. Returns the reply to queue now, or `None` when there is
/// none (`Ack`) or the reply is sent later: by a spawned task (`Create`, `Replace`, `End`,
/// `Upgrade`, which may take a while and must not hold up this connection's other requests), or for `Open` by the
/// read loop once its task finished ([`Session::finish_open`]).
pub async fn dispatch(session: &mut Session, id: u64, req: Request) -> Option<Response> {
    let state = session.state().clone();
    let result: Result<Response, ErrorReply> = match req {
        Request::Hello(_) => Err(ErrorReply::BadRequest {
            message: "Hello was already exchanged on this connection; send it only once".into(),
        }),
        Request::Ping(p) => Ok(Response::Pong(Pong { nonce: p.nonce })),
        Request::Create(c) => {
            let policy = session.policy();
            reply_later(session, id, async move {
                let created = state.create(c, policy).await;
                created.map_or_else(Response::Error, Response::Created)
            });
            return None;
        }
        Request::Attach(a) => session.attach(a).map(Response::Attached),
        Request::AttachScreen(a) => session.attach_screen(a).map(Response::ScreenAttached),
        Request::AttachLossless(a) => session.attach_lossless(a).map(Response::Attached),
        Request::Input(i) => state.input(i).map(done),
        Request::InputSeq(i) => state.input_seq(i).map(done),
        // A resize first parses the output the model has not seen (at most a ring).
        Request::Resize(r) => crate::runtime::blocking(|| state.resize(r)).map(done),
        Request::Signal(s) => state.signal(s).map(done),
        Request::Kill(k) => state.kill(k).map(done),
        Request::Detach(d) => session.detach(d).map(done),
        Request::ListLeases(_) => Ok(Response::Leases(Leases {
            leases: session.list_leases(),
        })),
        Request::ListWorkspace(w) => Ok(Response::Leases(Leases {
            leases: session.list_workspace(&w.workspace),
        })),
        Request::Ack(a) => {
            session.ack(a);
            return None;
        }
        Request::Status(_) => Ok(Response::StatusReply(state.status())),
        Request::Protect(p) => state.protect(p).map(done),
        Request::Open(o) => {
            session.open(id, o);
            return None;
        }
        Request::OpenScreen(o) => match session.open_screen(id, o) {
            Ok(()) => return None,
            Err(e) => Err(e),
        },
        Request::OpenLossless(o) => match session.open_lossless(id, o) {
            Ok(()) => return None,
            Err(e) => Err(e),
        },
        Request::SetPolicy(p) => session.set_policy(&p.spec).map(done),
        Request::Inspect(_) => Ok(Response::Inspected(state.inspect(session.max_frame()))),
        Request::End(e) => {
            reply_later(session, id, async move {
                Response::EndReport(state.end(e).await)
            });
            return None;
        }
        Request::Replace(r) => {
            let policy = session.policy();
            reply_later(session, id, async move {
                let created = state.replace(r, policy).await;
                created.map_or_else(Response::Error, Response::Created)
            });
            return None;
        }
        Request::Forget(f) => state.forget(&f.ptys).map(Response::Forgot),
        Request::UpgradeInfo(_) => Ok(Response::UpgradeReport(state.upgrade_report())),
        Request::Upgrade(u) => {
            // The order goes to the daemon loop only once the reply is queued: connections
            // close for the handover and drain what they have queued first.
            let out = session.out().clone();
            let task = async move {
                let result = state.upgrade(u).await;
                let accepted = result.is_ok();
                let reply = result.map_or_else(Response::Error, Response::UpgradeStarted);
                let _ = out.send(Message::Response(id, reply)).await;
                if accepted {
                    state.release_upgrade_order();
                }
            };
            tokio::spawn(task.in_current_span());
            return None;
        }
    };
    let reply = result.unwrap_or_else(Response::Error);
    Some(if session.knows_lifecycle() {
        reply
    } else {
        downgrade(reply)
    })
}

/// A reply for a peer without the `lifecycle` capability: it cannot decode
/// `EndReason::Forgotten`, so it reads `Exited` with no exit status (the PTY does not run).
fn downgrade(reply: Response) -> Response {
    match reply {
        Response::Error(ErrorReply::Ended {
            pane,
            pty,
            exit,
            reason: EndReason::Forgotten,
        }) => Response::Error(ErrorReply::Ended {
            pane,
            pty,
            exit,
            reason: EndReason::Exited,
        }),
        other => other,
    }
}

/// Answers request `id` from its own task: an op that may take a while (a spawn, an end waiting
/// for its confirmation) must not hold up the connection's other requests.
fn reply_later(
    session: &Session,
    id: u64,
    reply: impl std::future::Future<Output = Response> + Send + 'static,
) {
    let out = session.out().clone();
    let task = async move {
        let _ = out.send(Message::Response(id, reply.await)).await;
    };
    tokio::spawn(task.in_current_span());
}

fn done(_: ()) -> Response {
    Response::Done(Done {})
}
