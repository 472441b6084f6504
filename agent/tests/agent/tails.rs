//! Rule E after an absence: a client that was away when its pane ended re-attaches with
//! `expect` = that PTY and the offset it has seen, and gets the rest of the output, then the
//! exit; nothing is spawned (rule B), and every other attach of the ended pane is `Ended`.

use relay_protocol::{EndReason, ErrorReply, LeaseState};

use crate::support::{children, contains, pane, wait_until, Home, WAIT};

#[test]
fn rule_e_a_pane_that_ended_while_its_client_was_away_gives_the_rest_of_its_output() {
    let home = Home::new();
    let (_bridge, mut c) = home.bridge();
    let daemon = c.status().pid;
    let p = pane("away");
    let created = c.create(
        &p,
        &[
            "sh",
            "-c",
            "echo HEAD; read go; seq 1 20000; echo TAIL; exit 3",
        ],
    );
    let pty = created.binding.pty;
    let a = c.attach(&p, Some(pty), Some(0)).unwrap();
    let seen = c.output_until(pty, a.replay_from, |o| contains(o, "HEAD\r\n"));
    let seen = a.replay_from + seen.len() as u64;
    c.input(&created.binding, "go\n").unwrap();
    drop(c); // The client goes away before the rest is read.

    let mut c = home.client();
    assert!(wait_until(WAIT, || c.lease(pty).state == LeaseState::Ended));
    let before = children(daemon);

    let back = c
        .attach(&p, Some(pty), Some(seen))
        .expect("the rest is kept");
    assert_eq!(back.binding, created.binding);
    assert_eq!((back.replay_from, back.lost), (seen, 0));
    let (rest, exited) = c.output_until_exit(pty, seen);
    let text = String::from_utf8_lossy(&rest);
    assert!(text.contains("\r\n20000\r\nTAIL\r\n"), "{text}");
    assert!(
        text.contains("\r\n1\r\n2\r\n"),
        "from the offset on: {text}"
    );
    assert_eq!(exited.exit.code, 3);
    assert_eq!(exited.reason, EndReason::Exited);
    assert_eq!(
        exited.event_key,
        seen + rest.len() as u64,
        "every byte up to the end"
    );
    assert_eq!(children(daemon), before, "nothing was spawned");

    // Nothing left to send, or no offset named, or no PTY named: Ended, as always.
    for (expect, from) in [
        (Some(pty), Some(exited.event_key)),
        (Some(pty), None),
        (None, Some(seen)),
    ] {
        assert!(
            matches!(c.attach(&p, expect, from), Err(ErrorReply::Ended { .. })),
            "{expect:?} {from:?}"
        );
    }
    assert_eq!(c.lease(pty).state, LeaseState::Ended);
}

/// Kept ends are bounded: after more panes than [`MAX_TAILS`] ended with no client attached,
/// the daemon holds at most one descriptor per kept end, the oldest end is no longer kept (its
/// attach is `Ended`) and the newest still is.
#[test]
fn kept_ends_are_bounded_and_the_oldest_go_first() {
    use relay_agent::state::tails::MAX_TAILS;

    let home = Home::new();
    let (_bridge, mut c) = home.bridge();
    let daemon = c.status().pid;
    let fds = || {
        std::fs::read_dir(format!("/proc/{daemon}/fd"))
            .unwrap()
            .count()
    };
    let baseline = fds();
    let mut ended = Vec::new();
    for i in 0..MAX_TAILS + 16 {
        let p = pane(&format!("bounded-{i}"));
        // Create does not attach: each pane ends with no client attached.
        let created = c.create(&p, &["sh", "-c", "read x; echo bye-$x"]);
        c.input(&created.binding, &format!("{i}\n")).unwrap();
        let pty = created.binding.pty;
        assert!(wait_until(WAIT, || c.lease(pty).state == LeaseState::Ended));
        ended.push((p, pty));
    }
    assert!(
        wait_until(WAIT, || fds() <= baseline + MAX_TAILS + 4),
        "{} descriptors for {} kept ends (baseline {baseline})",
        fds(),
        MAX_TAILS
    );
    let (oldest, oldest_pty) = &ended[0];
    assert!(matches!(
        c.attach(oldest, Some(*oldest_pty), Some(0)),
        Err(ErrorReply::Ended { .. })
    ));
    let (newest, newest_pty) = ended.last().unwrap();
    c.attach(newest, Some(*newest_pty), Some(0))
        .expect("the newest end is kept");
    let (out, exited) = c.output_until_exit(*newest_pty, 0);
    let last = MAX_TAILS + 15;
    assert!(
        contains(&out, &format!("bye-{last}")),
        "{}",
        String::from_utf8_lossy(&out)
    );
    assert_eq!(exited.exit.code, 0);
}
