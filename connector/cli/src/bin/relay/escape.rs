//! ssh-style escape sequences on the keystroke stream (no IO).
//!
//! The escape character `~` is recognised only at the start of a line (right after Enter, or as
//! the very first keystroke): `~.` detaches, `~?` shows help, `~~` sends one `~`. A `~` followed
//! by anything else sends both characters unchanged.
//!
//! The recogniser sees bytes, not keystrokes, so pasted text is treated like typed text, as in
//! ssh: a paste containing a line that starts with `~.` (`"...\n~...."`) detaches at that point,
//! and the rest of the paste is not sent. What came before it is sent. `relay shell --help`
//! says so too.

/// What to do with a chunk of keystrokes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Send these bytes to the pane.
    Send(Vec<u8>),
    /// Detach and leave the shell running.
    Detach,
    /// Show the escape help.
    Help,
}

/// Help shown for `~?`.
pub const HELP: &str = "\r\nSupported escape sequences (after Enter):\r\n \
                        ~.  - detach (the shell keeps running; run the same command to reattach)\r\n \
                        ~?  - this message\r\n \
                        ~~  - send the escape character\r\n";

/// Escape-sequence state across chunks.
#[derive(Debug, Clone)]
pub struct Escapes {
    enabled: bool,
    at_line_start: bool,
    saw_tilde: bool,
}

impl Escapes {
    /// A recogniser; when `enabled` is false every byte is passed through.
    pub fn new(enabled: bool) -> Self {
        Escapes {
            enabled,
            at_line_start: true,
            saw_tilde: false,
        }
    }

    /// Feeds keystrokes; returns the actions in order.
    pub fn feed(&mut self, input: &[u8]) -> Vec<Action> {
        if !self.enabled {
            return vec![Action::Send(input.to_vec())];
        }
        let mut actions = Vec::new();
        let mut out = Vec::with_capacity(input.len());
        for &b in input {
            if self.saw_tilde {
                self.saw_tilde = false;
                match b {
                    b'.' => {
                        flush(&mut out, &mut actions);
                        actions.push(Action::Detach);
                        return actions;
                    }
                    b'?' => {
                        flush(&mut out, &mut actions);
                        actions.push(Action::Help);
                        self.at_line_start = true;
                        continue;
                    }
                    b'~' => out.push(b'~'),
                    other => out.extend_from_slice(&[b'~', other]),
                }
                self.at_line_start = is_enter(b);
            } else if self.at_line_start && b == b'~' {
                self.saw_tilde = true;
            } else {
                out.push(b);
                self.at_line_start = is_enter(b);
            }
        }
        flush(&mut out, &mut actions);
        actions
    }
}

fn is_enter(b: u8) -> bool {
    b == b'\r' || b == b'\n'
}

fn flush(out: &mut Vec<u8>, actions: &mut Vec<Action>) {
    if !out.is_empty() {
        actions.push(Action::Send(std::mem::take(out)));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn send(b: &[u8]) -> Action {
        Action::Send(b.to_vec())
    }

    #[test]
    fn tilde_dot_after_enter_detaches_after_sending_what_came_before() {
        let mut e = Escapes::new(true);
        assert_eq!(e.feed(b"ls\r~."), vec![send(b"ls\r"), Action::Detach]);
    }

    #[test]
    fn tilde_dot_at_the_very_start_detaches() {
        assert_eq!(Escapes::new(true).feed(b"~."), vec![Action::Detach]);
    }

    #[test]
    fn escape_split_across_chunks_is_recognised() {
        let mut e = Escapes::new(true);
        assert_eq!(e.feed(b"\r~"), vec![send(b"\r")]);
        assert_eq!(e.feed(b"."), vec![Action::Detach]);
    }

    #[test]
    fn tilde_in_the_middle_of_a_line_is_plain_text() {
        assert_eq!(Escapes::new(true).feed(b"cd ~.x"), vec![send(b"cd ~.x")]);
    }

    #[test]
    fn double_tilde_sends_one_and_other_chars_pass_through() {
        let mut e = Escapes::new(true);
        assert_eq!(e.feed(b"~~x"), vec![send(b"~x")]);
        assert_eq!(e.feed(b"\r~/bin\r"), vec![send(b"\r~/bin\r")]);
        assert_eq!(e.feed(b"~?"), vec![Action::Help]);
        assert_eq!(
            e.feed(b"~."),
            vec![Action::Detach],
            "still at line start after help"
        );
    }

    /// Documented ssh behaviour: `~.` at a line start inside a paste detaches, the rest of the
    /// paste is dropped.
    #[test]
    fn tilde_dot_inside_a_paste_detaches_and_drops_the_rest() {
        let mut e = Escapes::new(true);
        assert_eq!(
            e.feed(b"echo one\n~.echo two\n"),
            vec![send(b"echo one\n"), Action::Detach]
        );
    }

    #[test]
    fn disabled_passes_everything() {
        assert_eq!(Escapes::new(false).feed(b"~."), vec![send(b"~.")]);
    }
}
