//! The sidecar's JSON shapes (docs/embedding.md, "Shapes"): pane keys, bindings, sizes, pane
//! events, lease rows, host states, and the stable error codes of the library's errors.
//!
//! Shapes are written here by hand, not derived from the protocol's types: the wire format
//! between connector and agent may grow, the JSON contract with apps is documented and stable.

use std::time::{Instant, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use relay_connector::{Error, HostState, PaneEvent};
use relay_protocol::{
    Binding, EndReason, ErrorReply, ExitStatus, LeaseInfo, LeaseState, PaneKey, ScreenEvent,
    TermSize,
};
use serde_json::{json, Map, Value};

#[cfg(test)]
use super::params::Params;
use super::rpc::RpcError;

/// `{workspace, tab, leaf}`.
pub fn pane_json(pane: &PaneKey) -> Value {
    json!({"workspace": pane.workspace.0, "tab": pane.tab, "leaf": pane.leaf})
}

/// `{host, pane, pty}`: what the app passes back unchanged.
pub fn binding_json(host: &str, binding: &Binding) -> Value {
    json!({"host": host, "pane": pane_json(&binding.pane), "pty": binding.pty.to_string()})
}

/// `{cols, rows}`.
pub fn size_json(size: TermSize) -> Value {
    json!({"cols": size.cols, "rows": size.rows})
}

/// `{code, signal}` (`signal` a name such as `"Killed"`, or null).
pub fn exit_json(exit: &ExitStatus) -> Value {
    json!({"code": exit.code, "signal": exit.signal})
}

/// `exited` | `killed` | `agent_restarted` | `expired` | `forgotten`.
pub fn reason_json(reason: &EndReason) -> Value {
    json!(match reason {
        EndReason::Exited => "exited",
        EndReason::Killed => "killed",
        EndReason::AgentRestarted => "agent_restarted",
        EndReason::Expired => "expired",
        EndReason::Forgotten => "forgotten",
    })
}

/// Base64 of `data`.
pub fn b64(data: &[u8]) -> String {
    BASE64.encode(data)
}

/// The `pane.output` line for `data` at `offset`, built without an intermediate JSON tree (the
/// hot path: base64 needs no escaping). `binding` is the binding's serialized JSON.
pub fn output_line(binding: &str, offset: u64, data: &[u8]) -> Vec<u8> {
    use std::fmt::Write as _;
    let mut line = String::with_capacity(data.len() * 4 / 3 + binding.len() + 96);
    line.push_str(r#"{"jsonrpc":"2.0","method":"pane.output","params":{"binding":"#);
    line.push_str(binding);
    let _ = write!(line, r#","offset":{offset},"data":""#);
    BASE64.encode_string(data, &mut line);
    line.push_str("\"}}\n");
    line.into_bytes()
}

/// The notification for one pane event: `(method, params)`. `binding` is the pane's binding
/// JSON, included in every one.
pub fn event_json(binding: &Value, ev: &PaneEvent) -> (&'static str, Value) {
    let mut p = Map::new();
    p.insert("binding".into(), binding.clone());
    let method = match ev {
        PaneEvent::Output { offset, data } => {
            p.insert("offset".into(), json!(offset));
            p.insert("data".into(), json!(b64(data)));
            "pane.output"
        }
        PaneEvent::Snapshot { offset, size, data } => {
            p.insert("offset".into(), json!(offset));
            p.insert("size".into(), size_json(*size));
            p.insert("data".into(), json!(b64(data)));
            "pane.snapshot"
        }
        PaneEvent::Gap { from, to } => {
            p.insert("from".into(), json!(from));
            p.insert("to".into(), json!(to));
            "pane.gap"
        }
        PaneEvent::Event { key, offset, event } => {
            p.insert("key".into(), json!(key));
            p.insert("offset".into(), json!(offset));
            match event {
                ScreenEvent::Bell => p.insert("kind".into(), json!("bell")),
                ScreenEvent::Title(t) => {
                    p.insert("title".into(), json!(t));
                    p.insert("kind".into(), json!("title"))
                }
                ScreenEvent::Cwd(c) => {
                    p.insert("cwd".into(), json!(c));
                    p.insert("kind".into(), json!("cwd"))
                }
                ScreenEvent::CommandFinished { exit_code } => {
                    p.insert("exit_code".into(), json!(exit_code));
                    p.insert("kind".into(), json!("command_finished"))
                }
            };
            "pane.event"
        }
        PaneEvent::Exited {
            exit,
            reason,
            event_key,
        } => {
            p.insert("exit".into(), exit_json(exit));
            p.insert("reason".into(), reason_json(reason));
            p.insert("key".into(), json!(event_key));
            "pane.exited"
        }
        PaneEvent::Ended { reason, exit } => {
            p.insert("exit".into(), exit.as_ref().map(exit_json).into());
            p.insert("reason".into(), reason_json(reason));
            p.insert("key".into(), Value::Null);
            "pane.exited"
        }
        PaneEvent::Mismatch { current } => {
            p.insert("current".into(), json!(current.map(|c| c.to_string())));
            "pane.mismatch"
        }
        PaneEvent::Interrupted { reason } => {
            p.insert("reason".into(), json!(reason));
            "pane.interrupted"
        }
        PaneEvent::Resumed { from } => {
            p.insert("from".into(), json!(from));
            "pane.resumed"
        }
        PaneEvent::Unresolved { reason } => {
            p.insert("reason".into(), json!(reason));
            "pane.unresolved"
        }
        PaneEvent::Disconnected { reason } => {
            p.insert("reason".into(), json!(reason));
            "pane.closed"
        }
        other => {
            p.insert("debug".into(), json!(format!("{other:?}")));
            "pane.other"
        }
    };
    (method, Value::Object(p))
}

/// One row of `workspace.hydrate`: the lease of a pane as the host reports it. `pending`: a
/// pane whose PTY runs and that this sidecar has not attached.
pub fn lease_json(lease: &LeaseInfo, pending: bool) -> Value {
    let state = match lease.state {
        LeaseState::Attached => "live",
        LeaseState::Detached => "detached",
        LeaseState::Ended | LeaseState::Superseded => "ended",
    };
    json!({
        "pane": pane_json(&lease.binding.pane),
        "pty": lease.binding.pty.to_string(),
        "state": state,
        "pending": pending,
        "attached": lease.attached,
        "pid": lease.pid,
        "command": lease.command,
        "size": size_json(lease.size),
        "bytes_out": lease.bytes_out,
        "since_ms": lease.since_ms,
        "last_output_ms": lease.last_output_ms,
        "exit": lease.exit.as_ref().map(exit_json),
        "reason": lease.reason.as_ref().map(reason_json),
        "protected": lease.protected,
    })
}

/// Milliseconds since the Unix epoch of a monotonic instant (for `next_retry_at`).
fn epoch_ms(at: Instant) -> u64 {
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let ahead = at.saturating_duration_since(Instant::now());
    let behind = Instant::now().saturating_duration_since(at);
    (now + ahead).saturating_sub(behind).as_millis() as u64
}

/// `host.state` parameters for `host`.
pub fn state_json(host: &str, state: &HostState) -> Value {
    let mut p = Map::new();
    p.insert("host".into(), json!(host));
    p.insert("text".into(), json!(state.to_string()));
    let name = match state {
        HostState::Connecting { attempt } => {
            p.insert("attempt".into(), json!(attempt));
            "connecting"
        }
        HostState::Connected {
            incarnation,
            agent_version,
        } => {
            p.insert("incarnation".into(), json!(incarnation.to_string()));
            p.insert("agent_version".into(), json!(agent_version));
            "connected"
        }
        HostState::Unresponsive {
            incarnation,
            last_contact,
        } => {
            p.insert("incarnation".into(), json!(incarnation.to_string()));
            p.insert("last_contact_ms".into(), json!(epoch_ms(*last_contact)));
            "unresponsive"
        }
        HostState::Reconnecting {
            attempt,
            next_retry_at,
            last_error,
        } => {
            // The number of the attempt that comes next, as `text` says it.
            p.insert("attempt".into(), json!(attempt + 1));
            p.insert("next_retry_at_ms".into(), json!(epoch_ms(*next_retry_at)));
            p.insert("last_error".into(), error_json(&from_error(last_error)));
            "reconnecting"
        }
        HostState::Failed { error } => {
            p.insert("error".into(), error_json(&from_error(error)));
            "failed"
        }
        HostState::Closed => "closed",
        _ => "other",
    };
    p.insert("state".into(), json!(name));
    Value::Object(p)
}

/// `{code, message}` of an error, for notifications.
pub fn error_json(e: &RpcError) -> Value {
    json!({"code": e.code, "message": e.message})
}

/// The stable code and message of a library error (docs/embedding.md, "Errors").
pub fn from_error(e: &Error) -> RpcError {
    if let Some(reply) = e.agent_reply() {
        return from_reply(reply);
    }
    let code = match e {
        Error::HostKey { .. } => "host_key_unknown",
        Error::HostKeyChanged(_) => "host_key_changed",
        Error::Auth(_) => "auth_failed",
        Error::Unsupported(_) => "unsupported",
        Error::Incompatible(_) => "incompatible",
        Error::NoAgentBinary { .. } => "no_agent_binary",
        Error::AgentCannotRun(_) => "agent_cannot_run",
        Error::Config { .. } => "config",
        Error::Policy(_) => "policy_refused",
        Error::Handshake(_) => "handshake_failed",
        Error::ConnectionLost { .. } => "connection_lost",
        Error::Timeout(_) | Error::HandshakeTimeout(_) => "timeout",
        Error::InputFull(_) => "input_full",
        Error::PaneGone(_) => "pane_gone",
        Error::HostDown(_) => "host_down",
        Error::NoAgent(_) => "no_agent",
        Error::Deploy { .. } => "deploy_failed",
        _ => "transport",
    };
    RpcError::new(code, e.report()).with("transient", json!(e.is_transient()))
}

fn from_reply(reply: &ErrorReply) -> RpcError {
    let message = reply.to_string();
    match reply {
        ErrorReply::NotFound { pane } => {
            RpcError::new("not_found", message).with("pane", pane_json(pane))
        }
        ErrorReply::Ended {
            pane,
            pty,
            exit,
            reason,
        } => RpcError::new("ended", message)
            .with("pane", pane_json(pane))
            .with("pty", json!(pty.to_string()))
            .with("exit", exit.as_ref().map(exit_json).into())
            .with("reason", reason_json(reason)),
        ErrorReply::Mismatch {
            pane,
            expected,
            current,
        } => RpcError::new("mismatch", message)
            .with("pane", pane_json(pane))
            .with("expected", json!(expected.to_string()))
            .with("current", json!(current.map(|c| c.to_string()))),
        ErrorReply::Unsupported { .. } => RpcError::new("unsupported", message),
        ErrorReply::LimitExceeded { limit, .. } => {
            RpcError::new("limit_exceeded", message).with("limit", json!(limit))
        }
        ErrorReply::BadRequest { .. } => RpcError::new("bad_request", message),
        ErrorReply::SpawnFailed { .. } => RpcError::new("spawn_failed", message),
        ErrorReply::Incompatible { .. } => RpcError::new("incompatible", message),
        ErrorReply::Internal { .. } => RpcError::new("agent_error", message),
        _ => RpcError::new("agent_error", message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_binding_round_trips_through_its_json() {
        let binding = Binding {
            pane: PaneKey::new("w", "t", "0"),
            pty: "00000000000000ab.7".parse().unwrap(),
        };
        let v = json!({"b": binding_json("h1", &binding)});
        let (host, back) = Params(&v).binding("b").unwrap();
        assert_eq!((host.as_str(), back), ("h1", binding));
        let bad = json!({"b": {"host": "h1", "pane": {"workspace": "w", "tab": "a/b", "leaf": "0"},
                               "pty": "00ab.7"}});
        assert_eq!(
            Params(&bad).binding("b").unwrap_err().code,
            "invalid_params"
        );
    }

    #[test]
    fn an_output_line_is_the_json_of_its_notification() {
        let binding = json!({"host": "h1", "pane": {"workspace": "w"}, "pty": "01.2"});
        let line = output_line(&binding.to_string(), 42, b"hi\x00\xff");
        assert_eq!(line.last(), Some(&b'\n'));
        let parsed: Value = serde_json::from_slice(&line).unwrap();
        let ev = PaneEvent::Output {
            offset: 42,
            data: b"hi\x00\xff".to_vec(),
        };
        let (method, params) = event_json(&binding, &ev);
        assert_eq!(
            parsed,
            json!({"jsonrpc": "2.0", "method": method, "params": params})
        );
    }

    /// The stable codes of docs/embedding.md, one per library error: an app decides on them,
    /// so a code must not drift when the library's messages change.
    #[test]
    fn every_library_error_has_its_documented_code() {
        let s = || "x".to_string();
        let pane = || PaneKey::new("w", "t", "0");
        let pty = || "01.1".parse().unwrap();
        let table: Vec<(Error, &str)> = vec![
            (Error::host_key(s()), "host_key_unknown"),
            (Error::HostKeyChanged(s()), "host_key_changed"),
            (Error::Auth(s()), "auth_failed"),
            (Error::Unsupported(s()), "unsupported"),
            (Error::Incompatible(s()), "incompatible"),
            (Error::no_agent_binary(s()), "no_agent_binary"),
            (Error::AgentCannotRun(s()), "agent_cannot_run"),
            (Error::config(s()), "config"),
            (Error::Policy(s()), "policy_refused"),
            (Error::Handshake(s()), "handshake_failed"),
            (Error::connection_lost(s()), "connection_lost"),
            (Error::Timeout(s()), "timeout"),
            (Error::HandshakeTimeout(s()), "timeout"),
            (Error::InputFull(s()), "input_full"),
            (Error::PaneGone(s()), "pane_gone"),
            (Error::HostDown(s()), "host_down"),
            (Error::NoAgent(s()), "no_agent"),
            (Error::deploy(s()), "deploy_failed"),
            (Error::ssh(s()), "transport"),
            (Error::bridge_exited(s()), "transport"),
            (Error::spawn(s()), "transport"),
            (
                Error::from(ErrorReply::NotFound { pane: pane() }),
                "not_found",
            ),
            (
                Error::from(ErrorReply::Ended {
                    pane: pane(),
                    pty: pty(),
                    exit: None,
                    reason: EndReason::AgentRestarted,
                }),
                "ended",
            ),
            (
                Error::from(ErrorReply::Mismatch {
                    pane: pane(),
                    expected: pty(),
                    current: None,
                }),
                "mismatch",
            ),
            (
                Error::from(ErrorReply::Unsupported { op: 9 }),
                "unsupported",
            ),
            (
                Error::from(ErrorReply::LimitExceeded {
                    what: s(),
                    limit: 1,
                }),
                "limit_exceeded",
            ),
            (
                Error::from(ErrorReply::BadRequest { message: s() }),
                "bad_request",
            ),
            (
                Error::from(ErrorReply::SpawnFailed { message: s() }),
                "spawn_failed",
            ),
            (
                Error::from(ErrorReply::Incompatible { message: s() }),
                "incompatible",
            ),
            (
                Error::from(ErrorReply::Internal { message: s() }),
                "agent_error",
            ),
        ];
        for (error, code) in table {
            let r = from_error(&error);
            assert_eq!(r.code, code, "{error:?}");
            assert!(!r.message.is_empty());
        }
    }

    #[test]
    fn agent_refusals_keep_their_fields() {
        let e = Error::from(ErrorReply::Mismatch {
            pane: PaneKey::new("w", "t", "0"),
            expected: "01.1".parse().unwrap(),
            current: Some("01.2".parse().unwrap()),
        });
        let r = from_error(&e);
        assert_eq!(r.code, "mismatch");
        assert_eq!(r.data["current"], json!("0000000000000001.2"));
        assert_eq!(
            from_error(&Error::HostKeyChanged("x".into())).code,
            "host_key_changed"
        );
        let v = json!({"d": "!!"});
        assert_eq!(Params(&v).bytes("d").unwrap_err().code, "bad_base64");
    }
}
