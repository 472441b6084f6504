//! Tells the user what the connection is doing while a pane is on screen.
//!
//! On a terminal the message is drawn over the top row (cursor and attributes saved and restored
//! with DECSC/DECRC, so the program's cursor does not move and nothing scrolls) and updated in
//! place; when the host answers again the row is cleared. Without a terminal each change of
//! state is one line on stderr.

use std::time::Duration;

use relay_connector::HostState;

/// The message for a state, or `None` when there is nothing to say (connected).
pub fn message(state: &HostState, destination: &str) -> Option<String> {
    let text = match state {
        HostState::Connected { .. } | HostState::Closed => return None,
        HostState::Unresponsive { last_contact, .. } => format!(
            "no answer from {destination}; last contact {} s ago; ~. detaches",
            last_contact.elapsed().as_secs()
        ),
        HostState::Reconnecting {
            attempt,
            last_error,
            ..
        } => format!(
            "connection lost ({}); reconnecting in {}, attempt {}; ~. detaches",
            short(&last_error.to_string()),
            seconds(state.retry_in().unwrap_or_default()),
            attempt + 1
        ),
        HostState::Connecting { attempt } => {
            format!("reconnecting to {destination}, attempt {attempt}; ~. detaches")
        }
        HostState::Failed { error } => format!("cannot reconnect: {error}"),
        _ => format!("{state}"),
    };
    Some(format!("[relay: {text}]"))
}

/// Whether the message of `state` changes by itself over time (a countdown or a silence), so
/// it is redrawn every second.
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

/// The error's first clause: the status line has one row.
fn short(error: &str) -> &str {
    let end = error.find("; ").unwrap_or(error.len()).min(120);
    let mut end = end;
    while !error.is_char_boundary(end) {
        end -= 1;
    }
    &error[..end]
}

/// The drawing side.
pub struct StatusLine {
    tty: bool,
    shown: Option<String>,
}

impl StatusLine {
    /// `tty`: draw over the top row; otherwise print lines to stderr.
    pub fn new(tty: bool) -> StatusLine {
        StatusLine { tty, shown: None }
    }

    /// Bytes to write to the terminal (empty without one) to show `text`, or to clear the line
    /// when `text` is `None`. `cols` is the terminal width.
    pub fn update(&mut self, text: Option<String>, cols: u16) -> Vec<u8> {
        if text == self.shown {
            return Vec::new();
        }
        let mut out = Vec::new();
        match (&text, self.tty) {
            (Some(t), true) => {
                let t: String = t.chars().take(usize::from(cols.max(10))).collect();
                // Save cursor, home, reverse video, text, erase the rest, restore.
                out.extend_from_slice(b"\x1b7\x1b[1;1H\x1b[7m");
                out.extend_from_slice(t.as_bytes());
                out.extend_from_slice(b"\x1b[K\x1b[0m\x1b8");
            }
            (None, true) => out.extend_from_slice(b"\x1b7\x1b[1;1H\x1b[2K\x1b8"),
            (Some(t), false) => eprintln!("{t}"),
            (None, false) => eprintln!("[relay: connected again]"),
        }
        self.shown = text;
        out
    }

    /// Whether a message is on screen.
    pub fn is_shown(&self) -> bool {
        self.shown.is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::time::Instant;

    #[test]
    fn reconnecting_names_the_cause_the_countdown_the_attempt_and_the_way_out() {
        let state = HostState::Reconnecting {
            attempt: 2,
            next_retry_at: Instant::now() + Duration::from_millis(2150),
            last_error: Arc::new(relay_connector::Error::Ssh(
                "ssh keepalive timeout (no answer from host for 3 s); more".into(),
            )),
        };
        let text = message(&state, "db1").unwrap();
        assert!(
            text.starts_with("[relay: connection lost (ssh: ssh keepalive timeout"),
            "{text}"
        );
        assert!(!text.contains("more"), "one clause: {text}");
        assert!(
            text.contains("reconnecting in 2.1 s") || text.contains("reconnecting in 2.0 s"),
            "{text}"
        );
        assert!(text.contains("attempt 3; ~. detaches]"), "{text}");
        assert!(ticking(&state));
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
}
