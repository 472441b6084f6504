//! The first exchange of a connection: send [`Hello`], expect [`Welcome`] (rule H). The hello
//! goes out with the stream's opening ([`Transport::open_and_send`]: over SSH in the same round
//! trip as the bridge command), then [`run`] waits for the welcome. The cleanup policy rides
//! right behind the hello ([`opening`]), so stating it costs no round trip of its own: the agent
//! handles a connection's requests in order, and one that does not know `SetPolicy` answers
//! `Unsupported` and keeps the connection (rule H).
//!
//! The agent stream may run over an SSH exec channel, where a shell startup file that prints text
//! (a banner, `echo` in `.bashrc`) corrupts the first bytes. Such bytes are reported as a
//! handshake error with the hint to check the shell startup output, never as a confusing
//! protocol error.
//!
//! A bridge that exits without answering is explained by what it printed on stderr, when the
//! transport collected it (the local transport does: [`crate::transport::local`]), and by its exit status:
//! [`EXIT_NO_AGENT`] (`bridge --no-start` found no daemon) becomes [`Error::NoAgent`], and
//! [`EXIT_USAGE`] (a bridge that does not know its flags: an older agent) [`Error::Incompatible`].

use std::time::Duration;

use bytes::{Bytes, BytesMut};
use futures_util::StreamExt;
use relay_protocol::bridge::{EXIT_NO_AGENT, EXIT_USAGE, NO_START_FLAG};
use relay_protocol::frame::FrameError;
use relay_protocol::message::SetPolicy;
use relay_protocol::{
    ErrorReply, Hello, Message, Request, Response, Welcome, MAGIC, PROTOCOL_MAJOR, PROTOCOL_MINOR,
};
use tokio_util::codec::{Encoder, FramedRead};

#[cfg(doc)]
use crate::transport::Transport;
use crate::transport::{BoxReader, BridgeEnd, StreamGuard};
use crate::Error;
use relay_protocol::FrameCodec;

/// How long the agent may take to answer the hello (includes starting the daemon).
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(30);

/// Request id of the hello.
const HELLO_ID: u64 = 1;

/// Request id of the `SetPolicy` sent behind the hello ([`opening`]); request ids of the
/// connection's other requests start after it.
pub(crate) const POLICY_ID: u64 = 2;

const HINT: &str = "check your shell startup output (files like ~/.bashrc must not print anything \
                    for non-interactive shells)";

/// The first bytes of every stream, as frames (length prefix and message): the hello of
/// `client_id` (id 1) and, when `policy` is set, a `SetPolicy` stating it (id [`POLICY_ID`]).
///
/// # Errors
/// [`Error::Config`] when the hello or the policy does not fit in a frame (a client id or a
/// policy of about 1 MiB).
pub(crate) fn opening(client_id: &str, policy: Option<&str>) -> Result<Bytes, Error> {
    let hello = Hello::new(client_id, env!("CARGO_PKG_VERSION"));
    let mut frames = BytesMut::new();
    encode(
        Message::Request(HELLO_ID, Request::Hello(hello)),
        &mut frames,
    )
    .map_err(|e| {
        Error::config(format!(
            "the client id ({} bytes) does not fit in a hello (use a short id)",
            client_id.len()
        ))
        .caused_by(e)
    })?;
    if let Some(spec) = policy {
        let request = Request::SetPolicy(SetPolicy {
            spec: spec.to_string(),
        });
        encode(Message::Request(POLICY_ID, request), &mut frames).map_err(|e| {
            Error::config(format!(
                "the cleanup policy ({} bytes) does not fit in a frame (state a short policy \
                 such as \"unused=10m\")",
                spec.len()
            ))
            .caused_by(e)
        })?;
    }
    Ok(frames.freeze())
}

/// Appends `message` as one frame of at most the protocol's minimum frame size to `frames`.
fn encode(message: Message, frames: &mut BytesMut) -> Result<(), FrameError> {
    FrameCodec::new(relay_protocol::frame::DEFAULT_MAX_FRAME)
        .encode(Bytes::from(message.to_bytes()), frames)
}

/// Waits for the welcome to the hello ([`opening`]) the transport sent. `guard` is the
/// stream's guard, asked for the bridge's stderr when the stream ends before the welcome.
///
/// # Errors
/// [`Error::Handshake`] for anything that is not a relay welcome (with a hint when it looks like
/// text), [`Error::BridgeExited`] when the stream ended first (with the bridge's own words when
/// the transport has them), [`Error::NoAgent`] when it ended because no daemon runs and none
/// was to be started, [`Error::Incompatible`] when the bridge did not understand its flags, [`Error::HandshakeTimeout`] when nothing came within
/// [`HANDSHAKE_TIMEOUT`], [`Error::Incompatible`] for another protocol major version.
pub(crate) async fn run(
    reader: &mut FramedRead<BoxReader, FrameCodec>,
    guard: &mut dyn StreamGuard,
    destination: &str,
    start_agent: bool,
) -> Result<Welcome, Error> {
    let first = match tokio::time::timeout(HANDSHAKE_TIMEOUT, reader.next()).await {
        Err(_) => {
            return Err(Error::HandshakeTimeout(format!(
                "the agent on {destination} did not answer within {}s",
                HANDSHAKE_TIMEOUT.as_secs()
            )))
        }
        Ok(first) => first,
    };
    if matches!(first, None | Some(Err(FrameError::Io(_)))) {
        if let Some(e) = exit_error(guard.exit_code().await, destination, start_agent) {
            return Err(e);
        }
    }
    let result = match first {
        None => {
            let said = guard.failure().await;
            Err(closed_early(destination, said))
        }
        // The transport's own account of how its bridge ended (SSH: exit status and stderr).
        Some(Err(FrameError::Io(io)))
            if io
                .get_ref()
                .is_some_and(|e| e.downcast_ref::<BridgeEnd>().is_some()) =>
        {
            Err(bridge_ended(io, destination))
        }
        Some(Err(FrameError::Io(io))) => match guard.failure().await {
            Some(exit) => Err(Error::bridge_exited(format!(
                "reading the welcome from {destination} failed; the agent bridge exited{exit}"
            ))
            .caused_by(io)),
            None => Err(frame_error(FrameError::Io(io), destination)),
        },
        Some(Err(e)) => Err(frame_error(e, destination)),
        Some(Ok(frame)) => check_welcome(&frame, destination),
    };
    if result.is_ok() {
        guard.ready();
    }
    result
}

/// The bridge ended before the welcome, as its transport reported it in `io` (a [`BridgeEnd`]):
/// [`Error::AgentCannotRun`] when the host could not execute the agent, else
/// [`Error::BridgeExited`].
fn bridge_ended(io: std::io::Error, destination: &str) -> Error {
    match io.get_ref().and_then(|e| e.downcast_ref::<BridgeEnd>()) {
        Some(end) if end.cannot_run => Error::AgentCannotRun(format!(
            "{destination} could not execute the agent: {}; if the C library is the cause, \
             run deploy/build-agents.sh to build agents that need only glibc 2.17",
            end.text
        )),
        _ => Error::bridge_exited(format!("on {destination}")).caused_by(io),
    }
}

/// The error a bridge's exit status before the welcome means by itself, if any: no agent
/// running (`bridge --no-start`), or a bridge that did not understand that flag (only when it
/// was passed: `start_agent` off).
fn exit_error(code: Option<i32>, destination: &str, start_agent: bool) -> Option<Error> {
    match code? {
        EXIT_NO_AGENT => Some(Error::NoAgent(format!("no agent running on {destination}"))),
        EXIT_USAGE if !start_agent => Some(Error::Incompatible(format!(
            "the agent bridge on {destination} did not understand its command line (exit \
             status {EXIT_USAGE}): the agent binary is older than this connector (`bridge \
             {NO_START_FLAG}` is new in protocol 1.4); deploy the agent that matches this \
             connector, or point RELAY_AGENT_BIN at it"
        ))),
        _ => None,
    }
}

/// The stream ended before the welcome; `exit` is how the bridge ended, when the transport knows.
fn closed_early(destination: &str, exit: Option<String>) -> Error {
    Error::bridge_exited(match exit {
        Some(exit) => format!("the agent bridge on {destination} exited before answering{exit}"),
        None => format!(
            "the agent bridge on {destination} closed the stream before answering; see \
             its stderr and the agent log ($RELAY_HOME/log/agent.log on the agent's host)"
        ),
    })
}

fn frame_error(e: FrameError, destination: &str) -> Error {
    match e {
        FrameError::TooLarge { len, .. } => {
            // The "length" is the first four bytes of whatever was printed.
            let head = (len as u32).to_be_bytes();
            let text = if head.iter().all(|b| b.is_ascii_graphic() || *b == b' ') {
                format!(" (it starts with {:?})", String::from_utf8_lossy(&head))
            } else {
                String::new()
            };
            Error::Handshake(format!(
                "the first bytes from {destination} are not a relay welcome{text}; {HINT}"
            ))
        }
        // The stream ended inside what was taken for a frame. Text instead of relay nearly
        // always reads as an oversized length (above); a frame cut short is a connection cut
        // while the welcome was on its way (a killed TCP connection), which a retry fixes.
        // Regression: this was "failed for good", and a host whose connections were killed
        // every 2 s stayed down until the app asked again.
        FrameError::Io(io) if io.kind() == std::io::ErrorKind::UnexpectedEof => {
            Error::connection_lost(format!(
                "the stream from {destination} ended inside the welcome; if this repeats, \
                 {HINT}"
            ))
            .caused_by(io)
        }
        // A reset or a dropped link: a retry may succeed.
        FrameError::Io(io) => {
            Error::connection_lost(format!("reading the welcome from {destination} failed"))
                .caused_by(io)
        }
    }
}

/// Checks the first frame (no IO).
pub(crate) fn check_welcome(frame: &[u8], destination: &str) -> Result<Welcome, Error> {
    let msg = Message::from_bytes(frame).map_err(|e| {
        Error::Handshake(format!(
            "the first message from {destination} is not a relay welcome ({e}); {HINT}"
        ))
    })?;
    match msg {
        Message::Response(_, Response::Welcome(w)) => {
            if w.magic != MAGIC {
                return Err(Error::Handshake(format!(
                    "the welcome from {destination} has the wrong magic {:#010x}; {HINT}",
                    w.magic
                )));
            }
            if w.major != PROTOCOL_MAJOR {
                return Err(Error::Incompatible(incompatible_message(
                    destination,
                    w.major,
                    w.minor,
                    &w.agent_version,
                )));
            }
            Ok(w)
        }
        Message::Response(_, Response::Error(ErrorReply::Incompatible { message })) => {
            Err(Error::Incompatible(format!(
                "the agent on {destination} refused protocol {PROTOCOL_MAJOR}.{PROTOCOL_MINOR}: \
                 {message}; install a relay connector that matches the agent, or redeploy the \
                 agent"
            )))
        }
        Message::Response(_, Response::Error(e)) => Err(Error::Handshake(format!(
            "the agent on {destination} refused the hello: {e}"
        ))),
        other => Err(Error::Handshake(format!(
            "expected a welcome from {destination}, got {:?}; {HINT}",
            other.to_envelope().op
        ))),
    }
}

fn incompatible_message(destination: &str, major: u16, minor: u16, version: &str) -> String {
    let fix = if major > PROTOCOL_MAJOR {
        "upgrade relay on this machine"
    } else {
        "the agent is older: let the connector deploy a matching agent (running shells stay on \
         the old daemon until they end)"
    };
    format!(
        "the agent on {destination} (version {version}) speaks protocol {major}.{minor}, this \
         connector speaks {PROTOCOL_MAJOR}.{PROTOCOL_MINOR}; {fix}"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_protocol::{Capability, Incarnation, Limits};

    fn welcome(major: u16) -> Welcome {
        Welcome {
            magic: MAGIC,
            major,
            minor: 0,
            agent_version: "9.9.9".into(),
            incarnation: Incarnation(1),
            capabilities: Capability::all(),
            limits: Limits {
                max_frame: 1 << 20,
                window: 1 << 20,
                max_chunk: 1 << 16,
                replay_bytes: 1 << 22,
            },
        }
    }

    #[test]
    fn a_welcome_of_the_same_major_is_accepted() {
        let f = Message::Response(1, Response::Welcome(welcome(PROTOCOL_MAJOR))).to_bytes();
        assert_eq!(check_welcome(&f, "local").unwrap().agent_version, "9.9.9");
    }

    #[test]
    fn another_major_is_a_typed_incompatibility_with_a_fix() {
        let f = Message::Response(1, Response::Welcome(welcome(PROTOCOL_MAJOR + 1))).to_bytes();
        let err = check_welcome(&f, "local").unwrap_err();
        assert!(matches!(err, Error::Incompatible(_)), "{err}");
        assert!(err.to_string().contains("upgrade relay"), "{err}");
    }

    #[test]
    fn an_incompatible_refusal_is_typed() {
        let f = Message::Response(
            1,
            Response::Error(ErrorReply::Incompatible {
                message: "agent speaks 3.0".into(),
            }),
        )
        .to_bytes();
        assert!(matches!(
            check_welcome(&f, "h").unwrap_err(),
            Error::Incompatible(_)
        ));
    }

    /// A reader that fails the way the SSH bridge reader does when its channel ends.
    struct Ended(Option<BridgeEnd>);

    impl tokio::io::AsyncRead for Ended {
        fn poll_read(
            mut self: std::pin::Pin<&mut Self>,
            _: &mut std::task::Context<'_>,
            _: &mut tokio::io::ReadBuf<'_>,
        ) -> std::task::Poll<std::io::Result<()>> {
            let end = self.0.take().expect("read once");
            std::task::Poll::Ready(Err(std::io::Error::other(end)))
        }
    }

    async fn handshake_with(end: BridgeEnd) -> Error {
        let reader: BoxReader = Box::pin(Ended(Some(end)));
        let mut reader = FramedRead::new(reader, FrameCodec::new(1 << 20));
        run(&mut reader, &mut (), "db1", true).await.unwrap_err()
    }

    #[tokio::test]
    async fn a_bridge_the_host_cannot_execute_is_permanent_and_gets_no_banner_hint() {
        let glibc = "relay-agent: /lib/x86_64-linux-gnu/libc.so.6: version `GLIBC_2.34' not found";
        let err = handshake_with(BridgeEnd {
            text: format!("the agent bridge ended (exit status 1); its stderr: {glibc}"),
            cannot_run: true,
        })
        .await;
        let msg = err.to_string();
        assert!(matches!(err, Error::AgentCannotRun(_)), "{err:?}");
        assert!(!err.is_transient());
        assert!(
            msg.contains("GLIBC_2.34") && msg.contains("deploy/build-agents.sh"),
            "{msg}"
        );
        assert!(!msg.contains("bashrc"), "{msg}");

        let err = handshake_with(BridgeEnd {
            text: "the agent bridge ended (exit status 1); its stderr: cannot create /ro".into(),
            cannot_run: false,
        })
        .await;
        assert!(matches!(err, Error::BridgeExited { .. }), "{err:?}");
        assert!(err.is_transient());
        // The bridge's own account is the source; a person sees it in the report.
        let io = std::error::Error::source(&err).and_then(|s| s.downcast_ref::<std::io::Error>());
        assert!(io.is_some(), "{err:?}");
        assert!(err.report().contains("cannot create /ro"), "{err:?}");
    }

    #[test]
    fn a_welcome_cut_short_is_retried() {
        let cut = std::io::Error::from(std::io::ErrorKind::UnexpectedEof);
        let err = frame_error(FrameError::Io(cut), "db1");
        assert!(err.is_transient(), "{err:?}");
        assert!(err.report().contains("ended inside the welcome"), "{err:?}");
    }

    #[test]
    fn text_instead_of_a_frame_gets_the_shell_startup_hint() {
        let len = u32::from_be_bytes(*b"Welc") as u64;
        let err = frame_error(FrameError::TooLarge { len, max: 1 << 20 }, "db1");
        let msg = err.to_string();
        assert!(msg.contains("check your shell startup output"), "{msg}");
        assert!(msg.contains("Welc"), "{msg}");
        let err = check_welcome(b"garbage here", "db1").unwrap_err();
        assert!(err.to_string().contains("check your shell startup output"));
    }
}
