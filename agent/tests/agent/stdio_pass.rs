//! The bridge hands its stdin and stdout to a daemon of the same executable
//! (`relay_agent::daemon::stdio_pass`), and copies for any other daemon or when the daemon refuses.

use std::process::{Child, Command};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use relay_protocol::LeaseState;

use crate::support::{contains, pane, wait_until, Client, Home, WAIT};

/// The bridge's exit status once it exits; panics (killing it) if it has not within [`WAIT`].
fn exit_of(child: &mut Child) -> std::process::ExitStatus {
    let mut status = None;
    wait_until(WAIT, || {
        status = child.try_wait().unwrap();
        status.is_some()
    });
    status.unwrap_or_else(|| {
        let _ = child.kill();
        panic!("the bridge did not exit within {WAIT:?}")
    })
}

/// What fds 0 and 1 of `pid` are (`/dev/null`, `pipe:[123]`).
fn stdio_of(pid: u32) -> [String; 2] {
    [0, 1].map(|fd| {
        std::fs::read_link(format!("/proc/{pid}/fd/{fd}"))
            .unwrap()
            .to_string_lossy()
            .into_owned()
    })
}

/// Whether `pid` holds a pipe with this inode.
fn holds_pipe(pid: u32, inode: u64) -> bool {
    let want = format!("pipe:[{inode}]");
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .any(|target| target.to_string_lossy() == want)
}

/// The daemon takes the pipes: the bridge keeps only `/dev/null` and lives as long as the
/// connection, output flows over the pipes, and when the client closes its end the bridge exits
/// with status 0; killing the bridge ends the connection (its lease is detached) as it would
/// with a copying bridge, and leaves the shell running.
#[test]
fn a_bridge_hands_its_pipes_to_a_daemon_of_the_same_file_and_lives_as_long_as_the_connection() {
    let home = Home::new();
    let (mut child, mut c, pipes) = home.bridge_over_pipes();
    let daemon = c.status().pid;
    // The bridge lets go of its copies right after the daemon's answer, which may be after the
    // daemon's first reply.
    assert!(
        wait_until(WAIT, || stdio_of(child.id()) == ["/dev/null", "/dev/null"]),
        "{:?}",
        stdio_of(child.id())
    );
    assert!(
        holds_pipe(daemon, pipes[0]),
        "the daemon reads our stdin pipe"
    );
    assert!(
        holds_pipe(daemon, pipes[1]),
        "the daemon writes our stdout pipe"
    );

    let p = pane("passed");
    let created = c.create(&p, &["sh"]);
    let a = c.attach(&p, Some(created.binding.pty), None).unwrap();
    c.input(&created.binding, "echo via-$((40+2))\n").unwrap();
    let out = c.output_until(created.binding.pty, a.replay_from, |o| {
        contains(o, "via-42")
    });
    assert!(contains(&out, "via-42"));
    assert!(child.try_wait().unwrap().is_none(), "the bridge waits");

    while c.push(std::time::Duration::from_millis(300)).is_some() {} // The prompt after it.

    // Killing the bridge ends the connection, though our pipes are still open.
    kill(Pid::from_raw(child.id() as i32), Signal::SIGKILL).unwrap();
    exit_of(&mut child);
    assert!(c.closed_within(WAIT), "the daemon closed the connection");
    let mut other = home.client();
    assert!(wait_until(WAIT, || other.lease(created.binding.pty).state
        == LeaseState::Detached));
    assert!(
        other.lease(created.binding.pty).pid.is_some(),
        "the shell lives"
    );

    // A clean end: the client closes the pipes, the daemon closes the socket, the bridge exits 0.
    let (mut child, c, _) = home.bridge_over_pipes();
    drop(c);
    assert!(exit_of(&mut child).success());
}

/// `RELAY_PASS_STDIO=off`: the daemon refuses the offer and the same socket carries the frames
/// (the bridge copies, its stdin and stdout stay the pipes).
#[test]
fn a_daemon_that_refuses_the_pipes_is_served_through_a_copying_bridge() {
    let home = Home::new();
    home.start_daemon_with(&[("RELAY_PASS_STDIO", "off")]);
    let (mut child, mut c, pipes) = home.bridge_over_pipes();
    let daemon = c.status().pid;
    assert_eq!(
        stdio_of(child.id()),
        pipes.map(|inode| format!("pipe:[{inode}]"))
    );
    assert!(!holds_pipe(daemon, pipes[0]));
    c.ping(7);
    drop(c);
    assert!(exit_of(&mut child).success());
    assert!(home.log().contains("pass_stdio=false"), "{}", home.log());
}

/// A daemon running another file (an older agent, before a live upgrade) is never offered the
/// pipes: it would read the marker as a frame.
#[test]
fn a_bridge_copies_for_a_daemon_of_another_file() {
    use std::os::unix::fs::PermissionsExt;

    let home = Home::new();
    // Named like the agent, so that `Home` finds (and stops) the daemon it runs.
    let dir = home.path().join("other");
    std::fs::create_dir(&dir).unwrap();
    let other = dir.join("relay-agent");
    std::fs::copy(crate::support::BIN, &other).unwrap();
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o700)).unwrap();
    let template = home.command(&["daemon"]);
    let envs: Vec<_> = template
        .get_envs()
        .filter_map(|(k, v)| Some((k.to_owned(), v?.to_owned())))
        .collect();
    let started = crate::support::spawn_fresh_file(Command::new(&other).arg("daemon").envs(envs))
        .wait_with_output()
        .unwrap();
    assert!(started.status.success());

    let (mut child, mut c, pipes) = home.bridge_over_pipes();
    let daemon = c.status().pid;
    assert!(
        std::fs::read_link(format!("/proc/{daemon}/exe"))
            .unwrap()
            .ends_with("other/relay-agent"),
        "the daemon runs the copy"
    );
    // The daemon answers before the bridge lets go of its pipes, so it would hold them by now.
    assert!(
        !holds_pipe(daemon, pipes[0]),
        "the other daemon was offered the pipes"
    );
    assert_eq!(
        stdio_of(child.id()),
        pipes.map(|inode| format!("pipe:[{inode}]"))
    );
    c.ping(9);
    drop(c);
    assert!(exit_of(&mut child).success());
    assert!(!home.log().contains("bad frame"), "{}", home.log());
}

/// Sends the offer's marker on a raw socket with `fds` attached and returns the daemon's answer.
fn offer_raw(socket: &std::os::unix::net::UnixStream, fds: &[std::os::fd::RawFd]) -> u8 {
    use nix::sys::socket::{sendmsg, ControlMessage, MsgFlags};
    use std::io::{IoSlice, Read};
    use std::os::fd::AsRawFd;

    let rights = [ControlMessage::ScmRights(fds)];
    sendmsg::<()>(
        socket.as_raw_fd(),
        &[IoSlice::new(&[relay_agent::daemon::stdio_pass::MARKER])],
        &rights,
        MsgFlags::empty(),
        None,
    )
    .expect("sendmsg");
    let mut answer = [0u8; 1];
    (&*socket)
        .read_exact(&mut answer)
        .expect("the daemon's answer");
    answer[0]
}

/// How many fds `pid` has open.
fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd"))
        .unwrap()
        .count()
}

/// An offer the daemon cannot use unchanged (three fds; a regular file as stdin; stdin open
/// only for writing) is refused and logged with the reason, every fd that came is closed
/// again, no flag of the file is changed, and the same socket then serves as an ordinary
/// connection.
#[test]
fn an_offer_the_daemon_cannot_use_is_refused_and_leaks_nothing() {
    use nix::fcntl::{fcntl, FcntlArg, OFlag};
    use relay_agent::daemon::stdio_pass::REFUSED;
    use std::os::fd::AsRawFd;

    let home = Home::new();
    home.start_daemon();
    let mut first = home.client();
    let daemon = first.status().pid;
    let baseline = fd_count(daemon);

    let (r, w) = nix::unistd::pipe().unwrap();
    let file = std::fs::File::open(crate::support::BIN).unwrap();
    let cases: [(&str, Vec<std::os::fd::RawFd>); 3] = [
        (
            "three fds",
            vec![r.as_raw_fd(), w.as_raw_fd(), r.as_raw_fd()],
        ),
        ("a file as stdin", vec![file.as_raw_fd(), w.as_raw_fd()]),
        ("stdin open for writing", vec![w.as_raw_fd(), w.as_raw_fd()]),
    ];
    for (what, fds) in cases {
        let socket = Client::socket(&home);
        assert_eq!(offer_raw(&socket, &fds), REFUSED, "{what}");
        let mut c = Client::hello(Client::over(
            socket.try_clone().unwrap(),
            socket.try_clone().unwrap(),
        ));
        c.ping(3);
        socket.shutdown(std::net::Shutdown::Both).unwrap();
    }
    for why in [
        "3 descriptors came with it, not 2",
        "its stdin is not a pipe or socket open for reading",
    ] {
        assert!(
            home.wait_log(&format!(
                "refused a bridge's offer of its stdin and stdout: {why}"
            )),
            "{}",
            home.log()
        );
    }
    let flags = OFlag::from_bits_truncate(fcntl(&file, FcntlArg::F_GETFL).unwrap());
    assert!(
        !flags.contains(OFlag::O_NONBLOCK),
        "the file's flags were changed"
    );
    assert!(
        wait_until(WAIT, || fd_count(daemon) <= baseline),
        "the daemon holds {} fds, {baseline} before the offers",
        fd_count(daemon)
    );
}

/// A first byte of `0xFE` with no fds attached is not a bridge's offer but another peer's frame
/// announcing over 4 GiB: the daemon closes that connection, logging why, and writes nothing
/// into it (no answer byte a frame reader would take for garbage). Other connections go on.
/// Found by the `agent` fuzz target.
#[test]
fn a_marker_without_descriptors_closes_the_connection_with_no_answer_byte() {
    use std::io::{Read, Write};

    let home = Home::new();
    home.start_daemon();
    let mut other = home.client();

    let mut socket = Client::socket(&home);
    socket
        .write_all(&[
            relay_agent::daemon::stdio_pass::MARKER,
            0xff,
            0xff,
            0xfc,
            0x00,
        ])
        .unwrap();
    socket.set_read_timeout(Some(WAIT)).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 64];
    loop {
        match socket.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
            // Closed with our bytes unread: a reset, which is a close too.
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break,
            Err(e) => panic!("the daemon did not close the connection within {WAIT:?}: {e}"),
        }
    }
    assert!(
        got.is_empty(),
        "the daemon wrote {got:?} into a non-bridge's stream"
    );
    assert!(
        home.wait_log("neither a bridge's offer (no descriptors came with it)"),
        "{}",
        home.log()
    );
    other.ping(7);
}
