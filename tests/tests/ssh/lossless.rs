//! `relay shell HOST -- CMD > file` over a long link: every byte arrives, in order, while the
//! agent holds the command back for the link; another pane's echo is not held up meanwhile.

use std::process::Stdio;
use std::time::Instant;

use relay_connector::PaneHandle;
use relay_protocol::Binding;
use relay_tests::shaper::{Link, Shaper};

use super::*;

/// `seq 1 3000000` as a terminal shows it: 25,888,896 bytes (`\n` becomes `\r\n`).
const LINES: u32 = 3_000_000;

/// One keystroke's round trip: `x` typed into a PTY that echoes, until it is seen.
async fn echo_once(session: &Session, pane: &mut PaneHandle, binding: &Binding) -> Duration {
    let t = Instant::now();
    session.input(binding, b"x").await.unwrap();
    loop {
        match tokio::time::timeout(Duration::from_secs(30), pane.next()).await {
            Ok(Some(relay_connector::PaneEvent::Output { data, .. })) if data.contains(&b'x') => {
                return t.elapsed();
            }
            Ok(Some(_)) => {}
            other => panic!("no echo: {other:?}"),
        }
    }
}

fn median(mut v: Vec<Duration>) -> Duration {
    v.sort();
    v[v.len() / 2]
}

/// Regression: through a 200 ms round trip, `relay shell HOST -- 'seq 1 3000000' >
/// out` wrote 3,974,121 of 22,888,896 bytes plus 115 screen redraws into the file and exited
/// 0. Now the file is byte-identical to the command's output, and a pane on another connection
/// to the same agent keeps echoing within 2× of its idle round trip meanwhile.
#[tokio::test(flavor = "multi_thread")]
async fn a_piped_command_over_a_long_link_delivers_every_byte() {
    let host = SshHost::start().await.unwrap();
    let target = format!("127.0.0.1:{}", host.port()).parse().unwrap();
    let shaper = Shaper::start(target, Link::rtt_ms(200)).await.unwrap();
    let port = shaper.port();
    let opts = host.options_via(agent_bin(), port).unwrap();
    let config = opts.resolve.config_file.clone().unwrap();

    let session = Session::connect(&SshTransport::new(opts), "lossless-echo")
        .await
        .unwrap();
    let (created, mut echo) = session
        .open(PaneKey::new("link", "echo", "0"), shell("exec cat"), None)
        .await
        .unwrap();
    let binding = created.binding;
    let mut idle = Vec::new();
    for _ in 0..7 {
        idle.push(echo_once(&session, &mut echo, &binding).await);
    }
    let idle = median(idle);

    let dir = tempfile::tempdir().unwrap();
    let out_path = dir.path().join("out");
    let mut relay = tokio::process::Command::new(&bins().relay)
        .arg("shell")
        .arg(format!("relay@127.0.0.1:{port}"))
        .arg("-F")
        .arg(&config)
        .arg("-i")
        .arg(host.key_path())
        .args(["--", &format!("seq 1 {LINES}")])
        .env_remove("SSH_AUTH_SOCK")
        .env("RELAY_AGENT_BIN", agent_bin())
        .stdin(Stdio::null())
        .stdout(std::fs::File::create(&out_path).unwrap())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut busy = Vec::new();
    let started = Instant::now();
    let status = loop {
        if let Some(status) = relay.try_wait().unwrap() {
            break status;
        }
        busy.push(echo_once(&session, &mut echo, &binding).await);
    };
    let took = started.elapsed();
    let mut stderr = String::new();
    tokio::io::AsyncReadExt::read_to_string(&mut relay.stderr.take().unwrap(), &mut stderr)
        .await
        .unwrap();
    assert!(status.success(), "{status}: {stderr}");
    assert!(!stderr.contains("lost"), "{stderr}");

    let got = std::fs::read(&out_path).unwrap();
    let want: Vec<u8> = (1..=LINES)
        .flat_map(|i| format!("{i}\r\n").into_bytes())
        .collect();
    assert_eq!(got.len(), want.len(), "every byte ({stderr})");
    assert!(
        got == want,
        "in order, and nothing else (no screen redraws)"
    );

    assert!(
        busy.len() >= 5,
        "echo samples during the transfer: {busy:?}"
    );
    let (samples, busy) = (busy.len(), median(busy));
    eprintln!(
        "{} bytes in {took:.1?} through 200 ms; echo p50 idle {idle:.1?}, during {busy:.1?} \
         ({samples} samples)",
        got.len()
    );
    assert!(
        busy <= idle * 2,
        "another pane's echo during the transfer: {busy:?}, idle {idle:?}"
    );
}
