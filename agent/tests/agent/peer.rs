//! Only the daemon's own uid may use it (SO_PEERCRED).

use std::os::unix::fs::PermissionsExt;
use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::support::Home;

/// A connection from another uid is closed at once and logged; the owner is still served.
/// Needs root (to act as another user; CI runs as root). The same check runs for any uid with
/// two unprivileged users in a container: `tests/tests/ssh/peer.rs`.
#[test]
fn connection_from_another_uid_is_refused_and_logged() {
    if !nix::unistd::getuid().is_root() {
        relay_testkit::skip(
            "connection_from_another_uid_is_refused_and_logged",
            "root to connect as another uid (tests/tests/ssh/peer.rs checks the same in a \
             container)",
        );
        return;
    }
    let home = Home::new();
    home.start_daemon();
    // Open the path for the other user, so only the uid check can refuse it.
    let perm = |p: std::path::PathBuf, mode| {
        std::fs::set_permissions(p, std::fs::Permissions::from_mode(mode)).unwrap()
    };
    perm(home.path().to_path_buf(), 0o711);
    perm(home.path().join("run"), 0o711);
    perm(home.socket(), 0o666);
    let script = r#"use IO::Socket::UNIX; my $s = IO::Socket::UNIX->new(Peer => $ARGV[0]) or die "connect: $!"; my $n = sysread($s, my $b, 1); print defined $n ? "read $n" : "error $!";"#;
    let out = Command::new("perl")
        .args(["-e", script])
        .arg(home.socket())
        .uid(65534)
        .gid(65534)
        .output()
        .expect("run perl as nobody");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout == "read 0" || stdout.starts_with("error"),
        "the daemon must close the connection: {stdout} {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(home.wait_log("refused a connection from uid 65534"));
    home.client().ping(1);
}
