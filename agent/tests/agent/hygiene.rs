//! What a daemon and its shells do not inherit from whoever started them: descriptors (a FIFO
//! writer), environment (a stale `SSH_AUTH_SOCK`, relay's `RELAY_*` knobs), and the wire's signal
//! numbering.

use std::io::{ErrorKind, Read};
use std::os::fd::AsRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::process::CommandExt;

use nix::sys::stat::Mode;
use relay_protocol::message::{Open, Signal as SignalReq};
use relay_protocol::{ErrorReply, Request, Response};

use crate::support::{contains, pane, spec, wait_until, Client, Home, WAIT};

/// Runs `command` in a new pane of `c` with `env` added to the spec; returns its whole output.
fn run(c: &mut Client, leaf: &str, command: &[&str], env: &[(&str, &str)]) -> String {
    let mut spec = spec(command);
    spec.env = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let opened = match c.request(Request::Open(Open {
        pane: pane(leaf),
        spec,
        resume_from: Some(0),
    })) {
        Response::Opened(o) => o,
        other => panic!("expected Opened, got {other:?}"),
    };
    let (out, _) = c.output_until_exit(opened.created.binding.pty, 0);
    String::from_utf8_lossy(&out).replace('\r', "")
}

/// Regression ("inherited descriptors"): the daemon kept every descriptor ≥ 3 of
/// the process that started it, so a FIFO writer it inherited stayed open and the reader never
/// saw end-of-file until the daemon stopped.
#[test]
fn a_fifo_writer_the_daemon_inherits_is_closed_so_its_reader_sees_eof() {
    let home = Home::new();
    let fifo = home.path().join("fifo");
    nix::unistd::mkfifo(&fifo, Mode::from_bits_truncate(0o600)).unwrap();
    let mut reader = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(nix::libc::O_NONBLOCK)
        .open(&fifo)
        .unwrap();
    // Close-on-exec in this process (other tests spawn too); only our child gets it, as fd 7.
    let writer = std::fs::OpenOptions::new().write(true).open(&fifo).unwrap();
    let fd = writer.as_raw_fd();
    let mut cmd = home.command(&["daemon"]);
    // Safety: dup2 between fork and exec, async-signal-safe.
    unsafe {
        cmd.pre_exec(move || {
            if nix::libc::dup2(fd, 7) < 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let out = cmd.output().expect("run daemon");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    drop(writer);
    let daemon = home.daemons()[0];

    let mut buf = [0u8; 16];
    let eof = wait_until(WAIT, || match reader.read(&mut buf) {
        Ok(0) => true,
        Ok(_) => false,
        Err(e) if e.kind() == ErrorKind::WouldBlock => false,
        Err(e) => panic!("reading the FIFO: {e}"),
    });
    let held: Vec<String> = std::fs::read_dir(format!("/proc/{daemon}/fd"))
        .unwrap()
        .filter_map(|e| std::fs::read_link(e.ok()?.path()).ok())
        .map(|p| p.display().to_string())
        .filter(|p| p.contains("fifo"))
        .collect();
    assert!(
        eof,
        "the FIFO's reader saw no EOF; the daemon holds {held:?}"
    );
    assert!(held.is_empty(), "{held:?}");
    // The daemon still serves.
    home.client().status();
}

/// Shells get only their PTY: no descriptor of the daemon (socket, journal, log, other PTYs).
#[test]
fn shells_start_with_only_the_standard_descriptors() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    // Another PTY exists, so its master is open in the daemon while the second one spawns.
    c.create(&pane("other"), &["sh", "-c", "sleep 1000"]);
    let listing = run(
        &mut c,
        "fds",
        &[
            "sh",
            "-c",
            // `ls` is a child of this shell writing to the PTY: the listing holds the shell's
            // descriptors only.
            "ls -1 /proc/$$/fd; echo END",
        ],
        &[],
    );
    let fds: Vec<&str> = listing.lines().take_while(|l| *l != "END").collect();
    assert_eq!(fds, ["0", "1", "2"], "{listing}");
}

/// Regression ("shells start with a clean environment"): a shell got the daemon's
/// whole environment — the `SSH_AUTH_SOCK` of whichever SSH connection started the daemon (stale
/// once it closed) and relay's own `RELAY_*` settings. Now it gets a login's variables and what
/// the create request adds.
#[test]
fn shells_get_a_login_environment_not_the_daemons() {
    let home = Home::new();
    home.start_daemon_with(&[
        ("SSH_AUTH_SOCK", "/tmp/ssh-stale/agent.1"),
        ("SSH_CONNECTION", "10.0.0.1 50000 10.0.0.2 22"),
        ("RELAY_WINDOW_BYTES", "65536"),
        ("LANG", "C.UTF-8"),
        ("LC_TIME", "C"),
        ("PATH", "/usr/local/bin:/usr/bin:/bin:/opt/relay-test"),
    ]);
    let mut c = home.client();
    let env = run(&mut c, "env", &["env"], &[("FROM_CREATE", "yes")]);
    let names: Vec<&str> = env
        .lines()
        .filter_map(|l| l.split_once('='))
        .map(|(k, _)| k)
        .collect();
    for gone in ["SSH_AUTH_SOCK", "SSH_CONNECTION"] {
        assert!(!names.contains(&gone), "{gone} leaked:\n{env}");
    }
    assert!(
        !names.iter().any(|n| n.starts_with("RELAY_")),
        "RELAY_* leaked:\n{env}"
    );
    let home_dir = format!("HOME={}", home.path().join("home").display());
    for line in [
        home_dir.as_str(),
        "TERM=xterm-256color",
        "LANG=C.UTF-8",
        "LC_TIME=C",
        "PATH=/usr/local/bin:/usr/bin:/bin:/opt/relay-test",
        "FROM_CREATE=yes",
    ] {
        assert!(env.lines().any(|l| l == line), "{line} missing:\n{env}");
    }
    for name in ["USER", "LOGNAME", "SHELL"] {
        assert!(names.contains(&name), "{name} missing:\n{env}");
    }
}

/// Signal numbers are Linux numbers; one outside the wire set is refused with the range, and
/// the shell is unaffected.
#[test]
fn a_signal_number_outside_the_wire_set_is_refused_and_a_valid_one_is_sent() {
    let home = Home::new();
    home.start_daemon();
    let mut c = home.client();
    let opened = c
        .open(
            &pane("sig"),
            &[
                "sh",
                "-c",
                "trap 'echo got-usr1' USR1; echo ready; while :; do sleep 0.1; done",
            ],
            Some(0),
        )
        .unwrap();
    let b = opened.created.binding;
    let first = c.output_until(b.pty, 0, |o| contains(o, "ready\r\n"));
    let refused = c.mutate(Request::Signal(SignalReq {
        binding: b.clone(),
        signal: 64,
    }));
    match refused {
        Err(ErrorReply::BadRequest { message }) => {
            assert!(
                message.contains("signal 64") && message.contains("from 1 to 31"),
                "{message}"
            )
        }
        other => panic!("expected BadRequest, got {other:?}"),
    }
    c.mutate(Request::Signal(SignalReq {
        binding: b.clone(),
        signal: 10, // Linux SIGUSR1
    }))
    .unwrap();
    let out = c.output_until(b.pty, first.len() as u64, |o| contains(o, "got-usr1"));
    assert!(contains(&out, "got-usr1"));
}
