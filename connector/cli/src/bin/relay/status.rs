//! Tells the user what the connection is doing while a pane is on screen.
//!
//! On a terminal the message is drawn over the top row (cursor and attributes saved and restored
//! with DECSC/DECRC, so the program's cursor does not move and nothing scrolls) and updated in
//! place; when the host answers again the row is cleared. The way out (`~.`) comes first and the
//! cause last, so a narrow terminal cuts the cause, never the way out. Without a terminal each
//! change of state (not each tick of a countdown) is one line on stderr.

use std::time::Duration;

use relay_connector::HostState;

/// The message for a state, or `None` when there is nothing to say (connected). `tty`: the
/// user can type escapes, so the message names `~.`.
pub fn message(state: &HostState, destination: &str, tty: bool) -> Option<String> {
    let hint = if tty { " ~. detaches;" } else { "" };
    let text = match state {
        HostState::Connected { .. } | HostState::Closed => return None,
        HostState::Unresponsive { last_contact, .. } => format!(
            "no answer from {destination}; last contact {} s ago;{hint} waiting",
            last_contact.elapsed().as_secs()
        ),
        HostState::Reconnecting {
            attempt,
            last_error,
            ..
        } => format!(
            "connection lost; reconnecting in {}, attempt {};{hint} cause: {}",
            seconds(state.retry_in().unwrap_or_default()),
            attempt + 1,
            first_clause(&last_error.report()),
        ),
        HostState::Connecting { attempt } => {
            format!("reconnecting to {destination}, attempt {attempt};{hint} waiting")
        }
        HostState::Failed { error } => format!("cannot reconnect: {}", error.report()),
        _ => format!("{state}"),
    };
    Some(format!("[relay: {text}]"))
}

/// Whether the message of `state` changes by itself over time (a countdown or a silence), so
/// it is redrawn every second on a terminal.
pub fn ticking(state: &HostState) -> bool {
    matches!(
        state,
        HostState::Unresponsive { .. } | HostState::Reconnecting { .. }
    )
}

/// `2.1 s`, `12 s`.
fn seconds(d: Duration) -> String {
    if d < Duration::from_secs(10) {
        format!("{:.1} s", d.as_secs_f64())
    } else {
        format!("{} s", d.as_secs())
    }
}

/// The error's first clause (up to `; `).
fn first_clause(error: &str) -> &str {
    &error[..error.find("; ").unwrap_or(error.len())]
}

/// The drawing side.
pub struct StatusLine {
    tty: bool,
    /// What is on screen (terminal) or what kind of state was last printed (no terminal).
    shown: Option<String>,
}

impl StatusLine {
    /// `tty`: draw over the top row; otherwise print lines to stderr.
    pub fn new(tty: bool) -> StatusLine {
        StatusLine { tty, shown: None }
    }

    /// Bytes to write to the terminal to show `text` (or clear the line when `None`); `cols` is
    /// the terminal width. Without a terminal, prints a line to stderr when the kind of
    /// message changes (`kind`: the message without its numbers) and returns nothing.
    pub fn update(&mut self, text: Option<String>, cols: u16) -> Vec<u8> {
        if !self.tty {
            let kind = text.as_deref().map(without_digits);
            if kind != self.shown {
                match &text {
                    Some(t) => eprintln!("{t}"),
                    None if self.shown.is_some() => eprintln!("[relay: connected again]"),
                    None => {}
                }
                self.shown = kind;
            }
            return Vec::new();
        }
        if text == self.shown {
            return Vec::new();
        }
        let mut out = Vec::new();
        match &text {
            Some(t) => {
                let t: String = t.chars().take(usize::from(cols.max(10))).collect();
                // Save cursor, home, reverse video, text, erase the rest, restore.
                out.extend_from_slice(b"\x1b7\x1b[1;1H\x1b[7m");
                out.extend_from_slice(t.as_bytes());
                out.extend_from_slice(b"\x1b[K\x1b[0m\x1b8");
            }
            None => out.extend_from_slice(b"\x1b7\x1b[1;1H\x1b[2K\x1b8"),
        }
        self.shown = text;
        out
    }

    /// Whether a message is on screen (terminal) or the last line printed reports trouble.
    pub fn is_shown(&self) -> bool {
        self.shown.is_some()
    }
}

/// `text` with its digits removed: "attempt 3, in 2.1 s" and "attempt 4, in 8.0 s" are the same
/// kind of message.
fn without_digits(text: &str) -> String {
    text.chars().filter(|c| !c.is_ascii_digit()).collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    fn reconnecting() -> HostState {
        HostState::Reconnecting {
            attempt: 2,
            next_retry_at: Instant::now() + Duration::from_millis(2150),
            last_error: Arc::new(relay_connector::Error::ssh(
                "ssh keepalive timeout (no answer from host for 3 s); more",
            )),
        }
    }

    #[test]
    fn the_way_out_comes_before_the_cause_so_a_narrow_terminal_keeps_it() {
        let text = message(&reconnecting(), "db1", true).unwrap();
        assert!(
            text.starts_with("[relay: connection lost; reconnecting in 2.1 s, attempt 3; ~. detaches; cause: ssh: ssh keepalive timeout")
                || text.starts_with("[relay: connection lost; reconnecting in 2.0 s, attempt 3; ~. detaches; cause: ssh: ssh keepalive timeout"),
            "{text}"
        );
        assert!(!text.contains("more"), "one clause: {text}");
        assert!(ticking(&reconnecting()));
        let piped = message(&reconnecting(), "db1", false).unwrap();
        assert!(
            !piped.contains("~."),
            "no escapes without a terminal: {piped}"
        );
    }

    #[test]
    fn the_tty_line_is_drawn_in_place_and_cleared() {
        let mut line = StatusLine::new(true);
        let drawn = line.update(Some("[relay: x]".into()), 80);
        assert!(
            drawn.starts_with(b"\x1b7\x1b[1;1H"),
            "cursor saved, top row"
        );
        assert!(drawn.ends_with(b"\x1b8"), "cursor restored");
        assert!(
            line.update(Some("[relay: x]".into()), 80).is_empty(),
            "no redraw of the same text"
        );
        assert_eq!(line.update(None, 80), b"\x1b7\x1b[1;1H\x1b[2K\x1b8");
        assert!(!line.is_shown());
    }

    /// Regression: without a terminal every countdown tick printed a line (one a second).
    #[test]
    fn without_a_terminal_only_a_new_kind_of_message_is_printed() {
        let mut line = StatusLine::new(false);
        line.update(Some("[relay: reconnecting in 2.1 s, attempt 3]".into()), 80);
        assert!(line.is_shown());
        let kind = line.shown.clone();
        line.update(Some("[relay: reconnecting in 1.1 s, attempt 3]".into()), 80);
        line.update(Some("[relay: reconnecting in 8.0 s, attempt 4]".into()), 80);
        assert_eq!(line.shown, kind, "the same kind: nothing printed");
        line.update(None, 80);
        assert!(!line.is_shown());
    }
}
