//! The local transport's bridge as a session sees it: how a bridge that exits instead of
//! answering the hello is reported. Across two layers (transport and session), so an integration
//! test on the public API rather than a unit test of either. Unix only: Windows has no local agent
//! (`transport/local.rs` tests what it says instead).
#![cfg(unix)]

use std::os::unix::fs::PermissionsExt;

use relay_connector::{ConnectOptions, Error, LocalConfig, LocalTransport, Session};

/// Regression: with `RELAY_HOME` on a read-only mount the handshake error only said the
/// bridge "closed the stream before answering" and pointed at a log that does not exist; the
/// bridge's own reason must be in the error.
#[tokio::test]
async fn a_bridge_that_exits_before_answering_is_quoted_in_the_handshake_error() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("agent");
    std::fs::write(
        &path,
        "#!/bin/sh\nprintf '\\033[31mrelay-agent: error: create /ro/run: Read-only file \
         system (os error 30)\\033[0m\\n' >&2\nexit 1\n",
    )
    .unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    let transport = LocalTransport::with_config(LocalConfig {
        agent_bin: Some(path),
        ..LocalConfig::default()
    });
    let err = Session::connect(&transport, "t").await.unwrap_err();
    let msg = err.report();
    assert!(matches!(err, Error::BridgeExited { .. }), "{msg}");
    assert!(
        msg.contains("create /ro/run: Read-only file system (os error 30)"),
        "{msg}"
    );
    assert!(msg.contains("exit status: 1"), "{msg}");
    assert!(!msg.contains('\u{1b}'), "escape codes stripped: {msg:?}");
    assert!(!msg.contains("agent.log"), "no pointer to a log: {msg}");
}

/// A connect-only open runs `bridge --no-start`; its exit status 69 is "no
/// agent running", and an older agent binary that does not know the flag (clap's usage
/// error, status 2) is reported as incompatible, never as a reason to start a daemon.
#[tokio::test]
async fn connect_only_bridge_exit_status_tells_no_agent_from_an_older_agent() {
    let dir = tempfile::tempdir().unwrap();
    let args = dir.path().join("args");
    let agent = |name: &str, script: &str| {
        let path = dir.path().join(name);
        std::fs::write(
            &path,
            format!("#!/bin/sh\necho \"$@\" > {}\n{script}", args.display()),
        )
        .unwrap();
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
        LocalTransport::with_config(LocalConfig {
            agent_bin: Some(path),
            ..LocalConfig::default()
        })
    };
    let connect_only = ConnectOptions {
        start_agent: false,
        ..ConnectOptions::new("t")
    };
    let current = agent(
        "current",
        "echo 'relay-agent: no agent running' >&2; exit 69\n",
    );
    let err = Session::connect_with(&current, &connect_only)
        .await
        .unwrap_err();
    assert!(err.is_no_agent(), "{err:?}");
    assert_eq!(err.to_string(), "no agent running on local");
    assert_eq!(
        std::fs::read_to_string(&args).unwrap(),
        "bridge --no-start\n"
    );

    let older = agent(
        "older",
        "echo \"error: unexpected argument '--no-start' found\" >&2; exit 2\n",
    );
    let err = Session::connect_with(&older, &connect_only)
        .await
        .unwrap_err();
    assert!(matches!(err, Error::Incompatible(_)), "{err:?}");
    assert!(
        err.to_string().contains("older than this connector"),
        "{err}"
    );

    // An app's open passes no flag.
    let _ = Session::connect(&current, "t").await.unwrap_err();
    assert_eq!(std::fs::read_to_string(&args).unwrap(), "bridge\n");
}
