//! The agent serves only its own user (SO_PEERCRED), proven with two unprivileged users in a
//! container — whatever uid runs the tests, so the check can never pass by being skipped.

use relay_protocol::{Hello, Message, Request};

use super::*;

/// A client in Perl (part of every Debian base): connects to the socket `$ARGV[0]`, sends the
/// frame `$ARGV[1]` (hex), and prints what the first read of the reply gave (`read N`), or
/// `error ...` when the daemon had already closed the connection.
const PROBE: &str = r#"$SIG{PIPE} = "IGNORE"; use IO::Socket::UNIX; my $s = IO::Socket::UNIX->new(Peer => $ARGV[0]) or die "connect: $!"; defined syswrite($s, pack("H*", $ARGV[1])) or do { print "error write: $!"; exit }; my $n = sysread($s, my $b, 4); print defined $n ? "read $n" : "error $!";"#;

/// A connection from another user (`nobody`) to `relay`'s agent gets no answer to
/// a valid hello, is closed, and is logged; the same probe as `relay` gets the welcome, so a
/// daemon that served everyone would fail this test.
#[tokio::test(flavor = "multi_thread")]
async fn another_users_hello_is_refused_and_logged() {
    let host = SshHost::start().await.unwrap();
    let session = Session::connect(&trusted(&host), "ssh-tests")
        .await
        .unwrap();
    // Open the path to the socket for everyone, so that only the uid check can refuse.
    host.exec_ok("chmod 711 ~ ~/.relay ~/.relay/run && chmod 666 ~/.relay/run/agent.sock")
        .await
        .unwrap();
    let socket = format!(
        "{}/.relay/run/agent.sock",
        host.exec_ok("echo $HOME").await.unwrap().out()
    );
    let hello = Message::Request(1, Request::Hello(Hello::new("intruder", "0.0.0"))).to_bytes();
    let mut frame = (hello.len() as u32).to_be_bytes().to_vec();
    frame.extend_from_slice(&hello);
    let hex: String = frame.iter().map(|b| format!("{b:02x}")).collect();
    let probe = format!("timeout 10 perl -e '{PROBE}' {socket} {hex}");

    let intruder = host.exec_as("nobody", &probe).await.unwrap();
    assert!(
        intruder.stdout == "read 0" || intruder.stdout.starts_with("error"),
        "the daemon must close another user's connection unanswered: {intruder:?}"
    );
    eventually_async("the refusal in the agent log", || async {
        host.exec("cat ~/.relay/log/agent.log")
            .await
            .unwrap()
            .stdout
            .contains("refused a connection from uid 65534")
    })
    .await;

    // Control: the same probe as the agent's own user is answered, and the session still works.
    let owner = host.exec(&probe).await.unwrap();
    assert_eq!(owner.stdout, "read 4", "{owner:?}");
    session.list_leases().await.unwrap();
}
