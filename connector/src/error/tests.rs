//! The error kinds: each is matchable, keeps its retry class, carries its cause as the source,
//! and reads for a person as it did when the cause was formatted into the message.

use std::error::Error as _;

use super::*;

fn s() -> String {
    "x".to_string()
}

fn io(kind: std::io::ErrorKind) -> std::io::Error {
    std::io::Error::new(kind, "the io cause")
}

/// One error of every kind, and whether a retry may fix it (the module docs' table). The
/// exhaustive match in [`kind`] makes a new variant fail to compile until it is listed here.
fn every_kind() -> Vec<(Error, bool)> {
    use std::io::ErrorKind::{ConnectionRefused, Other};
    vec![
        (Error::from(ErrorReply::BadRequest { message: s() }), false),
        (Error::connection_lost(s()), true),
        (Error::connection_lost(s()).caused_by(io(Other)), true),
        (Error::Handshake(s()), false),
        (Error::HandshakeTimeout(s()), true),
        (Error::bridge_exited(s()), true),
        (Error::bridge_exited(s()).caused_by(io(Other)), true),
        (
            Error::Protocol(DecodeError::TrailingBytes { count: 1 }),
            false,
        ),
        (Error::UnexpectedReply(s()), false),
        (Error::Unsupported(s()), false),
        (Error::spawn(s()), true),
        (Error::spawn(s()).caused_by(io(Other)), true),
        (Error::no_agent_binary(s()), false),
        (Error::no_agent_binary(s()).caused_by(io(Other)), false),
        (Error::AgentCannotRun(s()), false),
        (
            Error::ConnectRefused {
                message: s(),
                source: io(ConnectionRefused),
            },
            true,
        ),
        (Error::ConnectTimeout(s()), true),
        (Error::ssh(s()), true),
        (Error::ssh(s()).caused_by(russh::Error::Disconnect), true),
        (Error::host_key(s()), false),
        (Error::host_key(s()).caused_by(io(Other)), false),
        (Error::HostKeyChanged(s()), false),
        (Error::Auth(s()), false),
        (Error::config(s()), false),
        (Error::config(s()).caused_by(io(Other)), false),
        (Error::deploy(s()), true),
        (Error::deploy(s()).caused_by(io(Other)), true),
        (Error::Io(io(Other)), true),
        (Error::Policy(s()), false),
        (Error::NoAgent(s()), false),
        (Error::Incompatible(s()), false),
        (Error::Timeout(s()), true),
        (Error::InputFull(s()), true),
        (Error::PaneGone(s()), false),
        (Error::HostDown(s()), false),
    ]
}

/// The kind's name, by an exhaustive match (no wildcard): every kind can be matched on.
fn kind(e: &Error) -> &'static str {
    match e {
        Error::Agent(_) => "Agent",
        Error::ConnectionLost { .. } => "ConnectionLost",
        Error::Handshake(_) => "Handshake",
        Error::HandshakeTimeout(_) => "HandshakeTimeout",
        Error::BridgeExited { .. } => "BridgeExited",
        Error::Protocol(_) => "Protocol",
        Error::UnexpectedReply(_) => "UnexpectedReply",
        Error::Unsupported(_) => "Unsupported",
        Error::Spawn { .. } => "Spawn",
        Error::NoAgentBinary { .. } => "NoAgentBinary",
        Error::AgentCannotRun(_) => "AgentCannotRun",
        Error::ConnectRefused { .. } => "ConnectRefused",
        Error::ConnectTimeout(_) => "ConnectTimeout",
        Error::Ssh { .. } => "Ssh",
        Error::HostKey { .. } => "HostKey",
        Error::HostKeyChanged(_) => "HostKeyChanged",
        Error::Auth(_) => "Auth",
        Error::Config { .. } => "Config",
        Error::Deploy { .. } => "Deploy",
        Error::Io(_) => "Io",
        Error::Policy(_) => "Policy",
        Error::NoAgent(_) => "NoAgent",
        Error::Incompatible(_) => "Incompatible",
        Error::Timeout(_) => "Timeout",
        Error::InputFull(_) => "InputFull",
        Error::PaneGone(_) => "PaneGone",
        Error::HostDown(_) => "HostDown",
    }
}

/// The retry table of the module docs, row by row, for every kind with and without a source: a
/// reconnect loop keeps trying exactly the transient ones, and a cause never changes the class.
#[test]
fn retry_classes_follow_the_table() {
    let all = every_kind();
    for (e, transient) in &all {
        assert_eq!(e.is_transient(), *transient, "{} ({e:?})", kind(e));
    }
    let mut kinds: Vec<_> = all.iter().map(|(e, _)| kind(e)).collect();
    kinds.dedup();
    assert_eq!(
        kinds.len(),
        27,
        "every kind is in the table once: {kinds:?}"
    );
}

/// The other predicates answer for their own kind only.
#[test]
fn predicates_name_their_kind_only() {
    for (e, _) in every_kind() {
        let k = kind(&e);
        assert_eq!(e.is_no_agent(), k == "NoAgent", "{k}");
        assert_eq!(e.is_timeout(), k == "Timeout", "{k}");
        assert_eq!(e.is_connection_lost(), k == "ConnectionLost", "{k}");
        assert_eq!(e.agent_reply().is_some(), k == "Agent", "{k}");
    }
}

/// A cause given to an error is its source, and downcasts to the error it was.
#[test]
fn the_cause_is_the_source_and_downcasts() {
    let err = Error::Io(io(std::io::ErrorKind::PermissionDenied));
    let cause = err
        .source()
        .and_then(|s| s.downcast_ref::<std::io::Error>());
    assert_eq!(
        cause.map(std::io::Error::kind),
        Some(std::io::ErrorKind::PermissionDenied)
    );
    assert_eq!(err.report(), "io: the io cause");

    let err =
        Error::spawn("cannot run `relay-agent bridge`").caused_by(io(std::io::ErrorKind::NotFound));
    let cause = err
        .source()
        .and_then(|s| s.downcast_ref::<std::io::Error>());
    assert_eq!(
        cause.map(std::io::Error::kind),
        Some(std::io::ErrorKind::NotFound)
    );

    let err = Error::ssh("connecting to h:22").caused_by(russh::Error::Disconnect);
    assert!(matches!(
        err.source().and_then(|s| s.downcast_ref::<russh::Error>()),
        Some(russh::Error::Disconnect)
    ));

    // Without a cause there is no source.
    for (e, _) in every_kind() {
        if let Error::Ssh { source: None, .. } | Error::HostKeyChanged(_) | Error::Auth(_) = e {
            assert!(e.source().is_none(), "{e:?}");
        }
    }
}

/// What a person sees for the common failures is the text they saw when the cause was formatted
/// into the message (the old `format!` on the left).
#[test]
fn reports_read_as_before() {
    let refused = io(std::io::ErrorKind::ConnectionRefused);
    let before = format!("ssh: cannot connect to h:22: {refused}");
    let err = Error::ConnectRefused {
        message: "cannot connect to h:22".into(),
        source: refused,
    };
    assert_eq!(err.report(), before);

    let cases = [
        (
            Error::ConnectTimeout(
                "connecting to h:22 timed out after 15 s (ConnectTimeout)".into(),
            ),
            "ssh: connecting to h:22 timed out after 15 s (ConnectTimeout)",
        ),
        (
            Error::host_key("the ED25519 host key of h is not known (fingerprint SHA256:x)"),
            "host key: the ED25519 host key of h is not known (fingerprint SHA256:x)",
        ),
        (
            Error::HostKeyChanged("the host key of h changed (known_hosts:3)".into()),
            "host key: the host key of h changed (known_hosts:3)",
        ),
        (
            Error::Auth("h refused user \"u\": no key worked".into()),
            "authentication failed: h refused user \"u\": no key worked",
        ),
        (
            Error::AgentCannotRun("the host has glibc 2.17".into()),
            "the agent cannot run on the host: the host has glibc 2.17",
        ),
        (
            Error::ssh("connecting to h:22").caused_by(russh::Error::Disconnect),
            "ssh: connecting to h:22: Disconnected",
        ),
        (
            Error::config("cannot read /c").caused_by(io(std::io::ErrorKind::NotFound)),
            "ssh config: cannot read /c: the io cause",
        ),
    ];
    for (err, want) in cases {
        assert_eq!(err.report(), want, "{err:?}");
    }
}

/// `Display` is the connector's sentence only; the report adds each cause once, also when a
/// cause repeats its own source in its text.
#[test]
fn report_joins_the_chain_and_skips_repeats() {
    #[derive(Debug, thiserror::Error)]
    #[error("outer: {0}")]
    struct Repeats(#[source] std::io::Error);

    let err = Error::deploy("hashing failed").caused_by(Repeats(io(std::io::ErrorKind::Other)));
    assert_eq!(err.to_string(), "deploy: hashing failed");
    assert_eq!(err.report(), "deploy: hashing failed: outer: the io cause");
    assert_eq!(report(&err), err.report());
}

/// An agent's typed refusal reads as its reply, with nothing appended.
#[test]
fn agent_replies_report_their_own_text() {
    let reply = ErrorReply::BadRequest {
        message: "no such thing".into(),
    };
    let want = reply.to_string();
    let err = Error::from(reply);
    assert_eq!(err.report(), want);
}
