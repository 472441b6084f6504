//! `relayctl` lifecycle commands against a real agent and real shells: tags, protect, gc with
//! re-verification, kill by one id, kill --all from a snapshot with an honest summary, forget.

use relay_connector::Session;
use relay_protocol::{Binding, PaneKey, SpawnSpec};
use serde_json::Value;

use super::{sh, TestHome};
use relay_tests::eventually;

fn text(out: &std::process::Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

/// The live leases `relayctl leases --json` prints (ended ones left out).
fn live_json(home: &TestHome) -> Vec<Value> {
    let out = home.relayctl(&["leases", "--json"]);
    assert!(out.status.success(), "{}", text(&out).1);
    serde_json::from_slice(&out.stdout).unwrap()
}

fn row<'a>(rows: &'a [Value], b: &Binding) -> Option<&'a Value> {
    rows.iter().find(|l| l["pty"] == b.pty.to_string())
}

fn tag_kind(home: &TestHome, b: &Binding) -> String {
    let rows = home.leases_json();
    row(&rows, b).map_or("none".into(), |r| {
        r["tag"]["kind"].as_str().unwrap_or("none").to_string()
    })
}

async fn create(session: &Session, leaf: &str, spec: SpawnSpec) -> Binding {
    let pane = PaneKey::new("ops", leaf, "0");
    session.create(pane, spec).await.unwrap().binding
}

/// An operator sees tags, protects by one id, lets `gc` end exactly the eligible shells (a shell
/// that became busy after the listing is kept with the reason), and `kill --all` ends exactly its
/// snapshot with a summary; ended history is only shown with `--all` and pruned by `forget`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relayctl_tags_protects_gcs_and_kills_exactly() {
    let home = TestHome::with_env(&[("RELAY_UNUSED_GRACE", "1h"), ("RELAY_SUGGEST_AFTER", "1s")]);
    let session = home.session().await;
    // Login shells (a command pane counts as running something and is never suggested).
    let unused = create(&session, "unused", SpawnSpec::default()).await;
    let idle = create(&session, "idle", SpawnSpec::default()).await;
    let busy = create(&session, "busy", SpawnSpec::default()).await;
    let guarded = create(&session, "guarded", SpawnSpec::default()).await;
    for b in [&idle, &busy, &guarded] {
        session.input(b, b"echo typed\n").await.unwrap();
    }
    let job = create(&session, "job", sh("sleep 1000")).await;

    // Tags: the unused shell's cleanup is scheduled; the others become suggested when idle 1 s.
    eventually("tags", || {
        (tag_kind(&home, &unused) == "cleanup"
            && tag_kind(&home, &idle) == "suggested"
            && tag_kind(&home, &busy) == "suggested")
            .then_some(())
    });
    let rows = home.leases_json();
    let job_tag = &row(&rows, &job).unwrap()["tag"];
    assert_eq!(job_tag["why"], "running its command", "{job_tag}");
    let out = home.relayctl(&["leases"]);
    let (table, _) = text(&out);
    assert!(table.lines().next().unwrap().contains("TAG"), "{table}");
    assert!(
        table.contains("cleanup in 59m") || table.contains("cleanup in 1h"),
        "{table}"
    );

    // Protect by the PTY id alone.
    let out = home.relayctl(&["protect", &guarded.pty.to_string()]);
    assert!(out.status.success(), "{}", text(&out).1);
    assert_eq!(tag_kind(&home, &guarded), "protected");

    // gc --dry-run lists exactly the eligible shells and ends nothing.
    let out = home.relayctl(&["gc", "--dry-run"]);
    let (plan, err) = text(&out);
    assert!(out.status.success(), "{err}");
    for b in [&idle, &busy] {
        assert!(plan.contains(&b.pty.to_string()), "{b} listed: {plan}");
    }
    for b in [&unused, &guarded, &job] {
        assert!(
            !plan.contains(&b.pty.to_string()),
            "{b} not eligible: {plan}"
        );
    }
    assert_eq!(live_json(&home).len(), 5, "a dry run ends nothing");

    // Without a terminal and without --yes, nothing is ended.
    let out = home.relayctl(&["gc"]);
    assert!(!out.status.success());
    assert!(text(&out).1.contains("--yes"), "{}", text(&out).1);

    // One shell starts work: it is kept (tagged so) and gc ends only the idle one. (A shell
    // that starts work between gc's listing and its end is kept by the agent's re-check:
    // agent/tests/agent/policy.rs.)
    session.input(&busy, b"sleep 1000\n").await.unwrap();
    eventually("the busy shell kept for its child", || {
        let rows = home.leases_json();
        let tag = &row(&rows, &busy).unwrap()["tag"];
        (tag["kind"] == "kept" && tag["why"] == "has children").then_some(())
    });
    let out = home.relayctl(&["gc", "--yes"]);
    let (report, err) = text(&out);
    assert!(out.status.success(), "{report}{err}");
    assert!(report.contains(&idle.pty.to_string()), "{report}");
    assert!(!report.contains(&busy.pty.to_string()), "{report}");
    let rows = home.leases_json();
    assert_eq!(row(&rows, &idle).unwrap()["state"], "ended");
    assert_eq!(row(&rows, &busy).unwrap()["state"], "detached");

    // kill --all: the snapshot is taken once; a protected shell is left alone and said so.
    let out = home.relayctl(&["kill", "--all", "--workspace", "ops", "--yes"]);
    let (summary, err) = text(&out);
    assert!(out.status.success(), "{summary}{err}");
    assert!(summary.contains("targets 3, ended 3"), "{summary}");
    assert!(err.contains("protected"), "{err}");
    let live = live_json(&home);
    assert_eq!(live.len(), 1, "only the protected shell is live: {live:?}");
    assert_eq!(live[0]["pty"], guarded.pty.to_string());

    // Kill one shell by its pane key alone; a second kill says it is already gone.
    let out = home.relayctl(&["kill", "ops/guarded/0", "--yes"]);
    assert!(out.status.success(), "{}", text(&out).1);
    let rows = home.leases_json();
    let g = row(&rows, &guarded).unwrap();
    assert_eq!(g["state"], "ended");
    assert!(
        g["detail"]
            .as_str()
            .unwrap()
            .starts_with("killed by operator"),
        "{g}"
    );
    let out = home.relayctl(&["kill", &guarded.pty.to_string(), "--yes"]);
    assert!(
        out.status.success(),
        "already gone counts as done: {}",
        text(&out).1
    );
    assert!(text(&out).0.contains("already gone 1"), "{}", text(&out).0);

    // History: only with --all, pruned by forget.
    assert!(live_json(&home).is_empty());
    assert_eq!(home.leases_json().len(), 5);
    let out = home.relayctl(&["forget", "--all"]);
    assert!(out.status.success(), "{}", text(&out).1);
    assert!(home.leases_json().is_empty());

    // An id that matches nothing is a clear error naming it.
    let out = home.relayctl(&["kill", "nope/nope/0", "--yes"]);
    assert!(!out.status.success());
    assert!(text(&out).1.contains("nope/nope/0"), "{}", text(&out).1);
}

/// `relayctl` never starts an agent (tmux's "no server running"): on a machine
/// without one, every command says so, fails, and leaves no process and no file behind. With
/// an agent running they work (control).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relayctl_without_an_agent_says_no_agent_running_and_starts_none() {
    let home = TestHome::new();
    let commands: [&[&str]; 11] = [
        &["status"],
        &["status", "--json"],
        &["leases"],
        &["leases", "--all", "--json"],
        &["kill", "ops/a/0", "--yes"],
        &["kill", "--all", "--yes"],
        &["protect", "ops/a/0"],
        &["gc", "--dry-run"],
        &["gc", "--yes"],
        &["forget", "--all"],
        &["stop", "--yes"],
    ];
    for args in commands {
        let out = home.relayctl(args);
        let (stdout, stderr) = text(&out);
        assert_eq!(out.status.code(), Some(1), "relayctl {args:?}: {stderr}");
        assert!(
            stderr.contains("no agent running on this machine"),
            "relayctl {args:?}: {stderr}"
        );
        assert_eq!(stdout, "", "relayctl {args:?}");
    }
    assert_eq!(home.pids(), Vec::<i32>::new(), "no daemon, no bridge left");
    assert!(!home.daemon_running());
    assert!(
        !home.path().join("run").exists(),
        "nothing was created under RELAY_HOME"
    );

    // Control: once something started the agent, the same commands reach it.
    let session = home.session().await;
    let out = home.relayctl(&["status", "--json"]);
    assert!(out.status.success(), "{}", text(&out).1);
    let status: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(status["pid"], session.status().await.unwrap().pid);
}

/// `relayctl leases | head -1` — a reader that goes away ends relayctl with exit
/// status 0, as ripgrep does (not killed by SIGPIPE, no panic, no message); a command that acts
/// still does its work and its exit status says how that went.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relayctl_into_a_closed_pipe_exits_0_and_still_acts() {
    let home = TestHome::new();
    let session = home.session().await;
    create(&session, "a", sh("sleep 1000")).await;
    let closed_stdout = || {
        let (reader, writer) = std::io::pipe().unwrap();
        drop(reader);
        writer
    };
    let run = |args: &[&str]| {
        home.command(&relay_tests::bins().relayctl)
            .args(args)
            .stdin(std::process::Stdio::null())
            .stdout(closed_stdout())
            .output()
            .unwrap()
    };
    for args in [&["leases"][..], &["leases", "--json"], &["status"]] {
        let out = run(args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(
            out.status.code(),
            Some(0),
            "relayctl {args:?} ({:?}): {stderr}",
            out.status
        );
        assert_eq!(stderr, "", "relayctl {args:?}");
    }
    let out = run(&["kill", "--all", "--yes"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out).1);
    assert!(
        live_json(&home).is_empty(),
        "the shell was ended all the same"
    );
}

/// The cleanup policy rides behind the hello (no round trip of its own): the real agent applies
/// it before the connection's first create, a refused one fails the connect with
/// `Error::Policy` naming the condition and leaves other connections untouched, and a connection
/// that states none creates PTYs no timer ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_policy_stated_behind_the_hello_applies_to_the_first_create() {
    use relay_connector::{ConnectOptions, Error};

    let home = TestHome::new();
    let transport = home.transport();
    let mut options = ConnectOptions::new("policy-test");
    options.policy = Some("unused=10m;idle=off".into());
    let stated = Session::connect_with(&transport, &options).await.unwrap();
    let with_policy = create(&stated, "stated", sh("sleep 1000")).await;

    options.policy = Some("unsed=10m".into());
    let err = Session::connect_with(&transport, &options)
        .await
        .expect_err("a misspelt condition is refused");
    assert!(matches!(err, Error::Policy(_)), "{err:?}");
    assert!(
        err.to_string().contains("unsed"),
        "names the condition: {err}"
    );

    options.policy = None;
    let none = Session::connect_with(&transport, &options).await.unwrap();
    let without = create(&none, "none", sh("sleep 1000")).await;

    let rows = stated.inspect().await.unwrap().leases;
    let policy_of = |b: &Binding| {
        let row = rows.iter().find(|r| r.info.binding == *b).expect("listed");
        row.policy.clone()
    };
    assert_eq!(
        policy_of(&with_policy).as_deref(),
        Some("unused=10m;idle=off")
    );
    assert_eq!(
        policy_of(&without),
        None,
        "stated none: never ended by a timer"
    );
    stated
        .ping()
        .await
        .expect("the refusal touched no other connection");
}
