//! Signal numbers on the wire (`Signal` request, docs/protocol.md §5) are **Linux's** numbers
//! (the x86/ARM/RISC-V numbering: 1 = SIGHUP … 31 = SIGSYS), whatever host the agent runs on.
//! This module maps them to the host's [`Signal`] by name, explicitly, instead of casting the
//! number: on a host whose numbering differs (MIPS, SPARC, Alpha, the BSDs), a cast would send a
//! different signal than the one the user pressed. Real-time signals (32 and up) and 0 are not
//! part of the wire set and are refused.

use nix::sys::signal::Signal;
use relay_protocol::ErrorReply;

/// The wire numbering, `(Linux number, signal)`, 1 through 31 (only 16, `SIGSTKFLT`, which
/// exists on Linux alone, is left out; it is refused like an unknown number).
pub const WIRE_SIGNALS: [(i32, Signal); 30] = [
    (1, Signal::SIGHUP),
    (2, Signal::SIGINT),
    (3, Signal::SIGQUIT),
    (4, Signal::SIGILL),
    (5, Signal::SIGTRAP),
    (6, Signal::SIGABRT),
    (7, Signal::SIGBUS),
    (8, Signal::SIGFPE),
    (9, Signal::SIGKILL),
    (10, Signal::SIGUSR1),
    (11, Signal::SIGSEGV),
    (12, Signal::SIGUSR2),
    (13, Signal::SIGPIPE),
    (14, Signal::SIGALRM),
    (15, Signal::SIGTERM),
    (17, Signal::SIGCHLD),
    (18, Signal::SIGCONT),
    (19, Signal::SIGSTOP),
    (20, Signal::SIGTSTP),
    (21, Signal::SIGTTIN),
    (22, Signal::SIGTTOU),
    (23, Signal::SIGURG),
    (24, Signal::SIGXCPU),
    (25, Signal::SIGXFSZ),
    (26, Signal::SIGVTALRM),
    (27, Signal::SIGPROF),
    (28, Signal::SIGWINCH),
    (29, Signal::SIGIO),
    (30, Signal::SIGPWR),
    (31, Signal::SIGSYS),
];

/// The host signal for wire number `number` (a Linux signal number).
///
/// # Errors
/// [`ErrorReply::BadRequest`] naming the number and the accepted range when it is not one of
/// [`WIRE_SIGNALS`] (0, negative, 16, real-time signals, anything above 31).
pub fn from_wire(number: i32) -> Result<Signal, ErrorReply> {
    WIRE_SIGNALS
        .iter()
        .find(|(n, _)| *n == number)
        .map(|(_, s)| *s)
        .ok_or_else(|| ErrorReply::BadRequest {
            message: format!(
                "signal {number} is not a signal on the wire; send a Linux signal number from 1 \
                 to 31 (e.g. 2 for SIGINT, 15 for SIGTERM; 16 and real-time signals are not \
                 supported)"
            ),
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn wire_numbers_are_linux_numbers_mapped_by_name() {
        let cases = [
            (1, "SIGHUP"),
            (2, "SIGINT"),
            (3, "SIGQUIT"),
            (9, "SIGKILL"),
            (10, "SIGUSR1"),
            (12, "SIGUSR2"),
            (15, "SIGTERM"),
            (17, "SIGCHLD"),
            (18, "SIGCONT"),
            (19, "SIGSTOP"),
            (20, "SIGTSTP"),
            (28, "SIGWINCH"),
            (29, "SIGIO"),
            (30, "SIGPWR"),
            (31, "SIGSYS"),
        ];
        for (number, name) in cases {
            assert_eq!(from_wire(number).map(|s| s.as_str()), Ok(name), "{number}");
        }
        // On Linux hosts the wire numbering is the host numbering: every entry round-trips.
        #[cfg(target_os = "linux")]
        for (number, signal) in WIRE_SIGNALS {
            assert_eq!(signal as i32, number, "{signal}");
        }
    }

    #[test]
    fn numbers_outside_the_wire_set_are_refused_with_the_range() {
        for number in [0, -2, 16, 32, 34, 64, 65, i32::MAX, i32::MIN] {
            match from_wire(number) {
                Err(ErrorReply::BadRequest { message }) => {
                    assert!(
                        message.contains(&format!("signal {number} "))
                            && message.contains("from 1 to 31"),
                        "{message}"
                    );
                }
                other => panic!("{number}: expected BadRequest, got {other:?}"),
            }
        }
    }
}
