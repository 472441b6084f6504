//! Signal numbers on the wire (`Signal` request, docs/protocol.md §5) are **Linux's** numbers
//! (the x86/ARM/RISC-V numbering: 1 = SIGHUP … 31 = SIGSYS), whatever host the agent runs on.
//! This module maps them to the host's [`Signal`] by name, explicitly, instead of casting the
//! number: on a host whose numbering differs (MIPS, SPARC, Alpha, the BSDs), a cast would send a
//! different signal than the one the user pressed. Real-time signals (32 and up) and 0 are not
//! part of the wire set and are refused.

use nix::sys::signal::Signal;
use relay_protocol::signal::{self as wire, WIRE_SIGNALS};
use relay_protocol::ErrorReply;

/// The host signal for wire number `number` (a Linux signal number), found by name in
/// [`WIRE_SIGNALS`].
///
/// # Errors
/// [`ErrorReply::BadRequest`] naming the number and the accepted range when it is not one of
/// [`WIRE_SIGNALS`] (0, negative, 16, real-time signals, anything above 31) or this host has no
/// signal of that name.
pub fn from_wire(number: i32) -> Result<Signal, ErrorReply> {
    wire::by_number(number)
        .and_then(|s| s.name.parse::<Signal>().ok())
        .ok_or_else(|| ErrorReply::BadRequest {
            message: format!(
                "signal {number} is not a signal on the wire; send a Linux signal number from 1 \
                 to 31 (e.g. 2 for SIGINT, 15 for SIGTERM; 16 and real-time signals are not \
                 supported)"
            ),
        })
}

/// How an exit status names the host signal numbered `signal`: the wire's description
/// ([`WIRE_SIGNALS`], glibc's `strsignal` words) whatever libc the agent was linked with, so a
/// static agent reports `"Hangup"` as a glibc one does; `"Signal N"` for a number outside the set.
pub fn description(signal: i32) -> String {
    Signal::try_from(signal)
        .ok()
        .and_then(|host| WIRE_SIGNALS.iter().find(|s| s.name == host.as_str()))
        .map_or_else(|| format!("Signal {signal}"), |s| s.description.to_string())
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
        for s in WIRE_SIGNALS {
            assert_eq!(
                from_wire(s.number).map(|h| h as i32),
                Ok(s.number),
                "{}",
                s.name
            );
        }
    }

    /// The table's words are glibc's: a connector that reads them with its own `strsignal` (as
    /// older connectors do) finds the signal.
    #[cfg(all(target_os = "linux", target_env = "gnu"))]
    #[test]
    fn descriptions_are_the_words_of_glibc_strsignal() {
        for s in WIRE_SIGNALS {
            // SAFETY: strsignal returns a NUL-terminated string (or null), copied at once.
            let libc = unsafe {
                let p = nix::libc::strsignal(s.number);
                (!p.is_null()).then(|| std::ffi::CStr::from_ptr(p).to_string_lossy().into_owned())
            };
            assert_eq!(libc.as_deref(), Some(s.description), "{}", s.name);
            assert_eq!(description(s.number), s.description);
        }
        assert_eq!(description(40), "Signal 40");
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
