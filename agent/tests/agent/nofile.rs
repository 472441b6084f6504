//! The daemon's descriptor limit (`relay_agent::pty::nofile`): raised to the hard limit, so that a
//! thousand panes fit under the 1024 an sshd session usually gets; every program it starts gets
//! the soft limit the daemon was started with.

use std::os::unix::process::CommandExt;
use std::process::Stdio;

use crate::support::{contains, pane, Home};

/// Soft limit the daemon is started with in these tests (below any default).
const SOFT: u64 = 256;

/// The hard limit the daemon is started with: 4096, or this process's own hard limit if lower.
fn hard() -> u64 {
    let (_, hard) = nix::sys::resource::getrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE)
        .expect("getrlimit");
    hard.min(4096)
}

/// Starts `home`'s daemon with a soft descriptor limit of [`SOFT`] and a hard one of [`hard`].
fn start_daemon_with_low_limit(home: &Home) {
    let hard = hard();
    let mut cmd = home.command(&["daemon"]);
    // Safety: only setrlimit, async-signal-safe, between fork and exec.
    unsafe {
        cmd.pre_exec(move || {
            nix::sys::resource::setrlimit(nix::sys::resource::Resource::RLIMIT_NOFILE, SOFT, hard)
                .map_err(std::io::Error::from)
        });
    }
    let out = cmd
        .stdin(Stdio::null())
        .output()
        .expect("relay-agent daemon");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
}

/// `(soft, hard)` "Max open files" of `pid`, from `/proc/<pid>/limits`.
fn nofile_of(pid: u32) -> (u64, u64) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("a Max open files line");
    let mut numbers = line
        .split_whitespace()
        .filter_map(|w| w.parse::<u64>().ok());
    (numbers.next().unwrap(), numbers.next().unwrap())
}

#[test]
fn the_daemon_raises_its_descriptor_limit_and_programs_get_the_original() {
    if hard() <= SOFT {
        relay_testkit::skip(
            "the_daemon_raises_its_descriptor_limit_and_programs_get_the_original",
            &format!("a hard descriptor limit above {SOFT}"),
        );
        return;
    }
    let home = Home::new();
    start_daemon_with_low_limit(&home);
    let mut c = home.client();
    let daemon = c.status().pid;
    assert_eq!(
        nofile_of(daemon),
        (hard(), hard()),
        "the daemon's own limit"
    );
    assert!(
        home.log().contains(&format!("programs_get={SOFT}")),
        "{}",
        home.log()
    );

    let p = pane("limits");
    let created = c.create(
        &p,
        &[
            "sh",
            "-c",
            "echo soft=$(ulimit -Sn) hard=$(ulimit -Hn); exec cat",
        ],
    );
    // From offset 0: the program prints once, maybe before the attach (attaching at the end
    // would then wait for output that never comes).
    let a = c.attach(&p, Some(created.binding.pty), Some(0)).unwrap();
    assert_eq!(a.replay_from, 0);
    let want = format!("soft={SOFT} hard={}", hard());
    let out = c.output_until(created.binding.pty, 0, |o| contains(o, &want));
    assert!(contains(&out, &want), "{}", String::from_utf8_lossy(&out));
}
