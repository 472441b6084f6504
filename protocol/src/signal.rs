//! Signals as the wire names them: **Linux's** numbers (the x86/ARM/RISC-V numbering: 1 = SIGHUP
//! … 31 = SIGSYS), whatever OS the connector or the agent runs on, with the names a user types
//! (`SIGINT`, `INT`) and the descriptions glibc's `strsignal(3)` gives (`"Interrupt"`), which is
//! how an agent reports a signal death in [`ExitStatus::signal`](crate::types::ExitStatus).
//!
//! A table rather than the local C library: on a macOS desktop SIGUSR1 is 30, on Windows there are
//! no such signals at all, and a static agent's libc words some descriptions differently; the
//! numbers and words that cross the wire are the ones here.

/// One signal of the wire set.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WireSignal {
    /// Linux signal number (1–31).
    pub number: i32,
    /// Full name, e.g. `"SIGHUP"`.
    pub name: &'static str,
    /// glibc's `strsignal(3)` text, e.g. `"Hangup"`.
    pub description: &'static str,
}

const fn sig(number: i32, name: &'static str, description: &'static str) -> WireSignal {
    WireSignal {
        number,
        name,
        description,
    }
}

/// The wire set, 1 through 31 in order (16, `SIGSTKFLT`, exists on Linux alone and is left out).
/// Descriptions are glibc 2.17+'s `strsignal` texts (glibc `string/siglist.h`).
pub const WIRE_SIGNALS: [WireSignal; 30] = [
    sig(1, "SIGHUP", "Hangup"),
    sig(2, "SIGINT", "Interrupt"),
    sig(3, "SIGQUIT", "Quit"),
    sig(4, "SIGILL", "Illegal instruction"),
    sig(5, "SIGTRAP", "Trace/breakpoint trap"),
    sig(6, "SIGABRT", "Aborted"),
    sig(7, "SIGBUS", "Bus error"),
    sig(8, "SIGFPE", "Floating point exception"),
    sig(9, "SIGKILL", "Killed"),
    sig(10, "SIGUSR1", "User defined signal 1"),
    sig(11, "SIGSEGV", "Segmentation fault"),
    sig(12, "SIGUSR2", "User defined signal 2"),
    sig(13, "SIGPIPE", "Broken pipe"),
    sig(14, "SIGALRM", "Alarm clock"),
    sig(15, "SIGTERM", "Terminated"),
    sig(17, "SIGCHLD", "Child exited"),
    sig(18, "SIGCONT", "Continued"),
    sig(19, "SIGSTOP", "Stopped (signal)"),
    sig(20, "SIGTSTP", "Stopped"),
    sig(21, "SIGTTIN", "Stopped (tty input)"),
    sig(22, "SIGTTOU", "Stopped (tty output)"),
    sig(23, "SIGURG", "Urgent I/O condition"),
    sig(24, "SIGXCPU", "CPU time limit exceeded"),
    sig(25, "SIGXFSZ", "File size limit exceeded"),
    sig(26, "SIGVTALRM", "Virtual timer expired"),
    sig(27, "SIGPROF", "Profiling timer expired"),
    sig(28, "SIGWINCH", "Window changed"),
    sig(29, "SIGIO", "I/O possible"),
    sig(30, "SIGPWR", "Power failure"),
    sig(31, "SIGSYS", "Bad system call"),
];

/// The wire signal numbered `number`; `None` outside [`WIRE_SIGNALS`].
pub fn by_number(number: i32) -> Option<&'static WireSignal> {
    WIRE_SIGNALS.iter().find(|s| s.number == number)
}

/// The wire signal a user or an agent named: a number (`"15"`), a full or short name in any case
/// (`"SIGTERM"`, `"term"`) or a `strsignal` description (`"Terminated"`). `None` when nothing in
/// [`WIRE_SIGNALS`] matches.
pub fn parse(text: &str) -> Option<&'static WireSignal> {
    let text = text.trim();
    if let Ok(n) = text.parse::<i32>() {
        return by_number(n);
    }
    WIRE_SIGNALS.iter().find(|s| {
        text.eq_ignore_ascii_case(s.name)
            || text.eq_ignore_ascii_case(&s.name[3..])
            || text.eq_ignore_ascii_case(s.description)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn numbers_names_and_descriptions_all_find_the_same_signal() {
        for text in ["1", "SIGHUP", "hup", "Hangup", " HANGUP "] {
            assert_eq!(parse(text).map(|s| s.number), Some(1), "{text}");
        }
        assert_eq!(parse("Killed").map(|s| s.number), Some(9));
        assert_eq!(parse("usr1").map(|s| s.number), Some(10), "Linux numbering");
        assert_eq!(parse("sigterm").map(|s| s.description), Some("Terminated"));
        for bad in ["0", "16", "32", "-1", "SIGFOO", "", "SIG"] {
            assert_eq!(parse(bad), None, "{bad}");
        }
    }

    #[test]
    fn the_table_is_in_order_with_unique_names() {
        let numbers: Vec<i32> = WIRE_SIGNALS.iter().map(|s| s.number).collect();
        let expected: Vec<i32> = (1..=31).filter(|&n| n != 16).collect();
        assert_eq!(numbers, expected);
        for s in WIRE_SIGNALS {
            assert!(s.name.starts_with("SIG"), "{}", s.name);
            assert_eq!(WIRE_SIGNALS.iter().filter(|t| t.name == s.name).count(), 1);
        }
    }
}
