//! Request limits and connection-level details: key and spec sizes, the Hello's `max_frame`, an
//! empty `term`, log context of connection warnings, and plain stderr.

use std::io::{Read, Write};
use std::net::Shutdown;
use std::os::unix::net::UnixStream;
use std::process::Stdio;

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use relay_protocol::message::{Attach, Create, Open};
use relay_protocol::{ErrorReply, Hello, PaneKey, Request, Response, SpawnSpec};

use crate::support::{contains, pane, spec, wait_until, Client, Home, WAIT};

fn limit_error(reply: Response) -> (String, u64) {
    match reply {
        Response::Error(ErrorReply::LimitExceeded { what, limit }) => (what, limit),
        other => panic!("expected LimitExceeded, got {other:?}"),
    }
}

/// Regression: 400 KB workspace names were accepted, so ListLeases exceeded the frame maximum for
/// every client (rule F) and the journal bloated. Create, Open and Attach refuse oversized keys
/// and specs naming the field and the limit; nothing is spawned and ListLeases keeps working.
#[test]
fn oversized_pane_keys_and_specs_are_refused_naming_the_field() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    let huge = PaneKey::new("V".repeat(400_000), "t", "x");
    let (what, limit) = limit_error(c.request(Request::Create(Create {
        pane: huge.clone(),
        spec: spec(&["true"]),
    })));
    assert!(what.contains("workspace"), "{what}");
    assert_eq!(limit, 256);
    let (what, _) = limit_error(c.request(Request::Open(Open {
        pane: huge.clone(),
        spec: spec(&["true"]),
        resume_from: None,
    })));
    assert!(what.contains("workspace"), "{what}");
    let (what, _) = limit_error(c.request(Request::Attach(Attach {
        pane: huge,
        expect: None,
        resume_from: None,
    })));
    assert!(what.contains("workspace"), "{what}");

    let long_arg = "a".repeat(70_000);
    let (what, limit) = limit_error(c.request(Request::Create(Create {
        pane: pane("long-command"),
        spec: spec(&["echo", &long_arg]),
    })));
    assert!(what.starts_with("command"), "{what}");
    assert_eq!(limit, 64 * 1024);
    let mut env_spec = spec(&["true"]);
    env_spec.env = vec![("BIG".into(), "v".repeat(70_000))];
    let (what, _) = limit_error(c.request(Request::Create(Create {
        pane: pane("big-env"),
        spec: env_spec,
    })));
    assert!(what.starts_with("env"), "{what}");
    match c.request(Request::Create(Create {
        pane: PaneKey::new("w", "", "x"),
        spec: spec(&["true"]),
    })) {
        Response::Error(ErrorReply::BadRequest { message }) => {
            assert!(message.contains("tab is empty"), "{message}")
        }
        other => panic!("expected BadRequest, got {other:?}"),
    }
    assert!(c.leases().is_empty(), "nothing was spawned");
}

/// docs/protocol.md §2: announced `max_frame` values must be at least 1 MiB. A smaller one is
/// refused with Incompatible naming the value (it used to be silently raised).
#[test]
fn hello_with_max_frame_below_the_minimum_is_incompatible() {
    let home = Home::new();
    home.start_daemon();
    let mut c = Client::connect(&home);
    let mut hello = Hello::new("agent-tests", "0.0.0");
    hello.max_frame = 4096;
    match c.request(Request::Hello(hello)) {
        Response::Error(ErrorReply::Incompatible { message }) => {
            assert!(message.contains("max_frame 4096"), "{message}");
            assert!(message.contains("1048576"), "{message}");
        }
        other => panic!("expected Incompatible, got {other:?}"),
    }
    assert!(c.closed_within(WAIT));
}

/// `term: ""` means the default TERM, like `None`.
#[test]
fn empty_term_starts_with_the_default_term() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    let spec = SpawnSpec {
        term: Some(String::new()),
        ..spec(&["sh", "-c", "echo \"[$TERM]\""])
    };
    let opened = match c.request(Request::Open(Open {
        pane: pane("term"),
        spec,
        resume_from: Some(0),
    })) {
        Response::Opened(o) => o,
        other => panic!("expected Opened, got {other:?}"),
    };
    let (out, _) = c.output_until_exit(opened.created.binding.pty, 0);
    assert!(
        contains(&out, "[xterm-256color]"),
        "{}",
        String::from_utf8_lossy(&out)
    );
}

/// Connection-level warnings name the connection and, once known, the client id (a span).
#[test]
fn connection_warnings_carry_the_connection_and_client() {
    let home = Home::new();
    home.start_daemon();
    let raw = UnixStream::connect(home.socket()).unwrap();
    let mut bad = Client::hello_with(
        Client::over(raw.try_clone().unwrap(), raw.try_clone().unwrap()),
        Hello::new("span-probe", "0.0.0"),
    );
    (&raw).write_all(&[0xff, 0xff, 0xff, 0xff, 1]).unwrap();
    raw.shutdown(Shutdown::Write).unwrap();
    assert!(bad.closed_within(WAIT));
    assert!(home.wait_log("closing connection: bad frame"));
    let log = home.log();
    let line = log
        .lines()
        .find(|l| l.contains("closing connection: bad frame"))
        .unwrap();
    assert!(line.contains("conn{id="), "{line}");
    assert!(line.contains("client=\"span-probe\""), "{line}");
}

/// Stderr read by a program gets no ANSI colour codes: a `--foreground` daemon whose stderr is a
/// pipe logs plain text there.
#[test]
fn foreground_daemon_logs_plain_text_to_a_pipe() {
    let home = Home::new();
    let mut child = home
        .command(&["daemon", "--foreground"])
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    assert!(wait_until(WAIT, || UnixStream::connect(home.socket()).is_ok()));
    kill(Pid::from_raw(child.id() as i32), Signal::SIGTERM).unwrap();
    let mut err = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut err)
        .unwrap();
    child.wait().unwrap();
    assert!(err.contains("listening on"), "{err}");
    assert!(!err.contains('\u{1b}'), "escape codes in: {err:?}");
}

/// `ListWorkspace` answers one workspace's leases (ended ones included) exactly as `ListLeases`
/// lists them, and none of a workspace whose name only starts the same: a desktop app that
/// hydrates a workspace no longer receives every lease the agent ever held.
#[test]
fn list_workspace_answers_exactly_that_workspaces_leases() {
    use relay_protocol::message::ListWorkspace;
    use relay_protocol::WorkspaceId;
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    for ws in ["a", "ab", "b"] {
        for tab in ["t1", "t2"] {
            c.create(&PaneKey::new(ws, tab, "0"), &["sleep", "600"]);
        }
    }
    let gone = c.create(&PaneKey::new("a", "quick", "0"), &["true"]);
    assert!(wait_until(WAIT, || {
        c.lease(gone.binding.pty).state == relay_protocol::LeaseState::Ended
    }));
    let all = c.leases();
    for ws in ["a", "ab", "b", "none"] {
        let got = match c.request(Request::ListWorkspace(ListWorkspace {
            workspace: WorkspaceId(ws.into()),
        })) {
            Response::Leases(l) => l.leases,
            other => panic!("expected Leases, got {other:?}"),
        };
        let want: Vec<_> = all
            .iter()
            .filter(|l| l.binding.pane.workspace.0 == ws)
            .cloned()
            .collect();
        assert_eq!(got, want, "workspace {ws}");
    }
    assert_eq!(
        all.iter()
            .filter(|l| l.binding.pane.workspace.0 == "a")
            .count(),
        3,
        "two running and one ended"
    );
}
