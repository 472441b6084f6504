//! What a [`Host`] does with re-attach answers that a real agent does not give on demand (the
//! pane not found for a PTY of its own incarnation, an internal error), against a scripted agent
//! it reconnects to, and when it retries a transport that keeps failing. The answers a real
//! agent gives (re-attached, ended, another PTY) are tested against one in `tests/tests/local/`.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use relay_protocol::message::{Attach, Attached, Done, Pong};
use relay_protocol::{Binding, Capability, ErrorReply, Request, Response, Resume, TermSize};
use tokio::sync::mpsc;

use super::{Host, HostOptions, HostState};
use crate::session::test_peer::{binding_of, next_request, reply, welcome, Peer, Pipes};
use crate::transport::{OpenFuture, OpenOptions, Transport};
use crate::{Error, PaneEvent};

/// Waits for the host's next connection and answers its hello and stated policy.
async fn accept(connections: &mut mpsc::UnboundedReceiver<Peer>) -> Peer {
    let mut peer = connections.recv().await.expect("a connection");
    let (id, hello) = next_request(&mut peer).await;
    assert!(matches!(hello, Request::Hello(_)), "{hello:?}");
    let caps = [Capability::PTY, Capability::LIFECYCLE];
    reply(&mut peer, id, Response::Welcome(welcome(&caps))).await;
    peer
}

/// The next request other than the ones any agent answers alike (pings, the stated policy).
async fn next_call(peer: &mut Peer) -> (u64, Request) {
    loop {
        match next_request(peer).await {
            (id, Request::Ping(p)) => {
                reply(peer, id, Response::Pong(Pong { nonce: p.nonce })).await
            }
            (id, Request::SetPolicy(_)) => reply(peer, id, Response::Done(Done {})).await,
            other => return other,
        }
    }
}

/// The next request, which must re-attach exactly `binding` (rule B: never a create, never the
/// pane key alone).
async fn next_reattach(peer: &mut Peer, binding: &Binding) -> u64 {
    let (id, req) = next_call(peer).await;
    match &req {
        Request::Attach(Attach { pane, expect, .. })
            if *pane == binding.pane && *expect == Some(binding.pty) => {}
        _ => panic!("expected a re-attach of exactly {binding}, got {req:?}"),
    }
    id
}

fn attached(binding: &Binding) -> Response {
    Response::Attached(Attached {
        binding: binding.clone(),
        replay_from: 0,
        end_offset: 0,
        lost: 0,
        size: TermSize { cols: 80, rows: 24 },
    })
}

async fn next_event(pane: &mut crate::PaneHandle) -> PaneEvent {
    tokio::time::timeout(Duration::from_secs(10), pane.next())
        .await
        .expect("a pane event within 10 s")
        .expect("the pane's stream goes on")
}

/// Rule A: re-attach answers that prove nothing — the agent does not know the pane (`NotFound`),
/// or failed (`Internal`) — leave the pane waiting, never ended: it sees `Unresolved` and is
/// re-attached on the next pass (`retry_now`) and on the next connection, where the agent has
/// its PTY and the stream resumes. Every re-attach names the exact PTY; nothing is created.
#[tokio::test]
async fn a_reattach_that_proves_nothing_keeps_the_pane_for_the_next_try() {
    let (tx, mut connections) = mpsc::unbounded_channel();
    let mut options = HostOptions::new("t");
    options.backoff.first = Duration::from_millis(10);
    let host = Host::open(Pipes(tx), options);
    let binding = binding_of("kept", 7);

    let mut agent = accept(&mut connections).await;
    let attaching = tokio::spawn({
        let host = host.clone();
        let binding = binding.clone();
        async move {
            host.attach_pane(binding.pane, Some(binding.pty), Resume::From(0))
                .await
        }
    });
    let id = next_reattach(&mut agent, &binding).await;
    reply(&mut agent, id, attached(&binding)).await;
    let mut pane = attaching.await.unwrap().unwrap();

    drop(agent); // The connection is lost.
    assert!(
        matches!(next_event(&mut pane).await, PaneEvent::Interrupted { .. }),
        "interrupted first"
    );
    let mut agent = accept(&mut connections).await;
    let answers = [
        (
            ErrorReply::NotFound {
                pane: binding.pane.clone(),
            },
            "no pane w/t/kept",
        ),
        (
            ErrorReply::Internal {
                message: "the journal is busy".into(),
            },
            "the journal is busy",
        ),
    ];
    for (round, (answer, says)) in answers.into_iter().enumerate() {
        if round > 0 {
            host.retry_now(); // Re-attaches panes whose re-attach was unresolved.
        }
        let id = next_reattach(&mut agent, &binding).await;
        reply(&mut agent, id, Response::Error(answer)).await;
        match next_event(&mut pane).await {
            PaneEvent::Unresolved { reason } => assert!(reason.contains(says), "{reason}"),
            other => panic!("expected Unresolved, got {other:?}"),
        }
    }

    drop(agent); // Another connection: the pane is tried again, and this agent has its PTY.
    let mut agent = accept(&mut connections).await;
    let id = next_reattach(&mut agent, &binding).await;
    reply(&mut agent, id, attached(&binding)).await;
    loop {
        match next_event(&mut pane).await {
            PaneEvent::Resumed { from } => {
                assert_eq!(from, 0);
                break;
            }
            PaneEvent::Interrupted { .. } | PaneEvent::Unresolved { .. } => {}
            other => panic!("expected the stream to resume, got {other:?}"),
        }
    }
}

/// A transport whose every open fails at once with a transient error, noting when it was asked.
struct Refusing(Arc<Mutex<Vec<Instant>>>);

impl Transport for Refusing {
    fn open(&self, _: OpenOptions) -> OpenFuture<'_> {
        self.0.lock().unwrap().push(Instant::now());
        Box::pin(async { Err(Error::connection_lost("connection refused")) })
    }

    fn describe(&self) -> String {
        "refusing".into()
    }
}

/// Rule G: the app is told when the next attempt starts (`Reconnecting.next_retry_at`), and
/// that is when it starts — never earlier, and not later than the timer's slack (generous:
/// 500 ms on a loaded machine). Six attempts, delays doubling from 100 ms towards the 2 s cap,
/// so a state that told one delay while the supervisor waited another would be off by more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_next_retry_time_told_to_the_app_is_when_the_next_attempt_starts() {
    let opened = Arc::new(Mutex::new(Vec::new()));
    let mut options = HostOptions::new("t");
    options.backoff.first = Duration::from_millis(100);
    options.backoff.cap = Duration::from_secs(2);
    let host = Host::open(Refusing(opened.clone()), options);
    let mut states = host.state();
    let mut told = Vec::new();
    while told.len() < 6 {
        tokio::time::timeout(Duration::from_secs(10), states.changed())
            .await
            .expect("a state change within 10 s")
            .unwrap();
        if let HostState::Reconnecting { next_retry_at, .. } = *states.borrow_and_update() {
            told.push(next_retry_at);
        }
    }
    // The attempt after the last one told.
    let wait_for_it = async {
        while opened.lock().unwrap().len() <= told.len() {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    };
    tokio::time::timeout(Duration::from_secs(10), wait_for_it)
        .await
        .expect("the attempt after the last time told, within 10 s");
    let opened = opened.lock().unwrap().clone();
    for (i, at) in told.iter().enumerate() {
        let started = opened[i + 1];
        assert!(
            started >= *at,
            "attempt {} started before the time told",
            i + 2
        );
        let late = started - *at;
        assert!(
            late <= Duration::from_millis(500),
            "attempt {} started {late:?} after the time told",
            i + 2
        );
        let waited = *at - opened[i];
        assert!(
            waited <= Duration::from_secs(2),
            "waited {waited:?}, cap 2 s"
        );
    }
    let last_wait = *told.last().unwrap() - opened[told.len() - 1];
    assert!(
        last_wait >= Duration::from_millis(600),
        "the delays grew: the last one {last_wait:?}"
    );
}
