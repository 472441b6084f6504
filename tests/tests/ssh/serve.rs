//! `relay serve --stdio` against the fixture SSH host: the app is asked about an unknown host
//! key, a changed key and a failed login fail the host with stable codes, and a real Node client
//! (`tests/clients/node/app_test.mjs`) plays an app that crashes and rebuilds its terminals from
//! the host.

use relay_tests::images::repo_root;
use relay_tests::sidecar::{b64, Sidecar};
use relay_tests::TestHome;
use serde_json::{json, Value};

use super::*;

/// A sidecar whose local agent lives in `home`, with no ssh-agent.
pub(super) fn sidecar(home: &TestHome) -> Sidecar {
    let mut cmd = home.command(&bins().relay);
    cmd.env_remove("SSH_AUTH_SOCK")
        .env("RELAY_AGENT_BIN", agent_bin());
    Sidecar::spawn(cmd)
}

/// `host.open` of the fixture with its isolated config and `identity`; returns the host id.
fn open_host(app: &mut Sidecar, host: &SshHost, identity: &Path) -> String {
    let config = options(host).resolve.config_file.unwrap();
    let r = app
        .call(
            "host.open",
            json!({"destination": host.destination(), "ssh_config": config,
                   "identity": [identity]}),
        )
        .unwrap();
    r["host"].as_str().unwrap().to_string()
}

/// The next `host.state` of `id` other than connecting/reconnecting.
fn settled_state(app: &mut Sidecar, id: &str) -> Value {
    app.take("a settled host.state", |m| {
        m["method"] == "host.state"
            && m["params"]["host"] == id
            && !matches!(
                m["params"]["state"].as_str(),
                Some("connecting" | "reconnecting")
            )
    })["params"]
        .clone()
}

/// Errors a retry cannot fix reach the app with stable codes: an unknown host key is put to the
/// app (`host_key.confirm`; answered after ConnectTimeout has passed, which does not count a
/// person's decision) and, declined, fails the host with `host_key_unknown` (pane.open
/// says the same); a changed key fails with `host_key_changed` without asking; a key the host
/// does not accept fails with `auth_failed`. Fixed, the host connects and serves a pane.
#[tokio::test(flavor = "multi_thread")]
async fn ssh_failures_reach_the_app_with_stable_codes() {
    let host = SshHost::start().await.unwrap();
    let home = TestHome::new();
    let mut app = sidecar(&home);

    // ConnectTimeout 2 s: a person taking longer to answer must not turn into a timeout and a
    // second question.
    let base = options(&host).resolve.config_file.unwrap();
    let slow = host.home().join(".ssh/slow_config");
    let text = std::fs::read_to_string(&base).unwrap() + "  ConnectTimeout 2\n";
    std::fs::write(&slow, text).unwrap();
    let r = app
        .call(
            "host.open",
            json!({"destination": host.destination(), "ssh_config": slow,
                   "identity": host.key_path()}),
        )
        .unwrap();
    let id = r["host"].as_str().unwrap().to_string();
    let question = app.take("host_key.confirm", |m| m["method"] == "host_key.confirm");
    std::thread::sleep(std::time::Duration::from_secs(4));
    assert_eq!(question["params"]["host"], id.as_str());
    assert!(
        question["params"]["fingerprint"]
            .as_str()
            .unwrap()
            .starts_with("SHA256:"),
        "{question}"
    );
    app.reply(&question["id"], json!({"accept": false}));
    let state = settled_state(&mut app, &id);
    assert_eq!(state["state"], "failed", "{state}");
    assert_eq!(state["error"]["code"], "host_key_unknown", "{state}");
    let p = json!({"host": id, "pane": {"workspace": "w", "tab": "t", "leaf": "0"}});
    assert_eq!(app.error_code("pane.open", p), "host_key_unknown");
    assert!(
        !host.known_hosts_path().exists(),
        "a declined key is not recorded"
    );
    assert!(
        app.try_take(|m| m["method"] == "host_key.confirm")
            .is_none(),
        "asked once: the slow answer did not time the attempt out"
    );
    app.call("host.close", json!({ "host": id })).unwrap();

    // Another key recorded for the host: refused as changed, nobody asked.
    let other = host.home().join("other_key");
    let other_pub = relay_tests::fixture::keygen(&other, "").unwrap();
    let fields: Vec<&str> = other_pub.split_whitespace().collect();
    std::fs::write(
        host.known_hosts_path(),
        format!("[127.0.0.1]:{} {} {}\n", host.port(), fields[0], fields[1]),
    )
    .unwrap();
    let id = open_host(&mut app, &host, host.key_path());
    let state = settled_state(&mut app, &id);
    assert_eq!(state["error"]["code"], "host_key_changed", "{state}");
    assert!(
        app.try_take(|m| m["method"] == "host_key.confirm")
            .is_none(),
        "a changed key is refused without asking"
    );
    app.call("host.close", json!({ "host": id })).unwrap();

    // The right host key, a key the host does not accept.
    host.write_known_hosts().unwrap();
    let id = open_host(&mut app, &host, &other);
    let state = settled_state(&mut app, &id);
    assert_eq!(state["error"]["code"], "auth_failed", "{state}");
    app.call("host.close", json!({ "host": id })).unwrap();

    // Fixed: it connects (deploying the agent) and a pane answers.
    let id = open_host(&mut app, &host, host.key_path());
    let state = settled_state(&mut app, &id);
    assert_eq!(state["state"], "connected", "{state}");
    let r = app
        .call(
            "pane.open",
            json!({"host": id, "pane": {"workspace": "w", "tab": "t", "leaf": "0"},
                   "command": ["sh", "-i"]}),
        )
        .unwrap();
    let binding = r["binding"].clone();
    app.call(
        "pane.input",
        json!({"binding": binding, "data": b64(b"echo over-ssh-$((2*21))\n")}),
    )
    .unwrap();
    app.read_until(&binding, "over-ssh-42");
    let progress =
        app.try_take(|m| m["method"] == "deploy.progress" && m["params"]["step"] == "installed");
    assert!(progress.is_some(), "the deploy was reported to the app");
}

/// The Node client (`tests/clients/node/app_test.mjs`, no packages, the machine's `node`)
/// plays an app through a crash: see the script's header. Rule A: the crash ends nothing; rule
/// B: the second sidecar attaches, never creates. On the host afterwards exactly one shell
/// runs (the one kill_all did not target).
#[tokio::test(flavor = "multi_thread")]
async fn a_node_app_survives_its_crash_and_rebuilds_from_the_host() {
    let host = SshHost::start().await.unwrap();
    run_node_app(&host, &bins().relay, &[]).await;
}

/// Runs the Node app (`tests/clients/node/app_test.mjs`) against `relay serve --stdio` and the
/// SSH `host`, with `env` added (another relay build, a runner for it, no local agent); asserts
/// it passed and left exactly one shell on the host. Returns what it printed (its steps).
pub(super) async fn run_node_app(
    host: &SshHost,
    relay: &Path,
    env: &[(&str, &std::ffi::OsStr)],
) -> String {
    let home = TestHome::new();
    let config = options(host).resolve.config_file.unwrap();
    let script = repo_root().join("tests/clients/node/app_test.mjs");
    let mut node = home.command(Path::new("node"));
    node.arg(&script)
        .env_remove("SSH_AUTH_SOCK")
        .env("RELAY_AGENT_BIN", agent_bin())
        .env("RELAY_BIN", relay)
        .env("RELAY_SSH_DEST", host.destination())
        .env("RELAY_SSH_CONFIG", &config)
        .env("RELAY_SSH_IDENTITY", host.key_path())
        .envs(env.iter().copied())
        .stdin(std::process::Stdio::null());
    let out = tokio::task::spawn_blocking(move || node.output())
        .await
        .unwrap()
        .unwrap_or_else(|e| {
            panic!(
                "running node {} (is Node.js installed?): {e}",
                script.display()
            )
        });
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(out.status.success(), "the node app failed:\n{stderr}");
    assert!(stderr.contains("node app: passed"), "{stderr}");
    assert_eq!(
        host.shell_pids().await.unwrap().len(),
        1,
        "one shell left on the host: the crash ended nothing and re-attach created nothing"
    );
    stderr
}
