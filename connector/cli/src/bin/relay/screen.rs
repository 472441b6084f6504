//! The user's side of the pane's output: a task that writes to stdout, so a terminal (or pipe)
//! that does not take output never stops the terminal loop from handling `~.`, SIGTERM or
//! SIGHUP (rule G), and the status line, drawn only between escape sequences.
//!
//! Output waiting for stdout is bounded ([`MAX_QUEUED`] bytes): beyond it the loop stops taking
//! pane events, which holds back credit, which stops the agent forwarding (it keeps draining the
//! PTY). The status line is never written into the middle of an escape sequence or a UTF-8
//! character the program is writing: it waits until the output is back at ground state.
//!
//! When relay leaves, the terminal is given back as it was found: after the queued output, the
//! resets for the modes the program left on (see [`crate::modes`]).
//!
//! On a terminal, typed keys may be shown before the host echoes them (see [`crate::predict`]):
//! the prediction's bytes go through the same queue, between output chunks, and what it drew is
//! restored before each chunk, so the program's bytes land on the screen it expects.
//!
//! When stdout is not a terminal (a file, a pipe) it gets the program's bytes and nothing else:
//! relay's notes go to stderr, no status line is drawn, and a snapshot is never written (the
//! pane is attached losslessly then, so none should come; one that does counts as lost
//! output). Lost output is counted, so relay can fail loudly at the end.

use std::io::IsTerminal;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use relay_connector::predict::PredictMode;

use tokio::io::AsyncWriteExt;
use tokio::sync::{mpsc, Notify};
use tokio::task::JoinHandle;

use crate::modes::Modes;
use crate::predict::Predictions;
use crate::status::StatusLine;

/// Bytes of output that may wait for stdout before pane events are no longer taken.
pub const MAX_QUEUED: usize = 256 * 1024;

/// Where the pane's output and relay's own notes go.
pub struct Screen {
    tx: Option<mpsc::UnboundedSender<Vec<u8>>>,
    queued: Arc<AtomicUsize>,
    room: Arc<Notify>,
    task: JoinHandle<std::io::Result<()>>,
    parser: Parser,
    /// The modes the program set on the terminal, undone by [`Screen::finish`].
    modes: Modes,
    /// stdout is a terminal: the modes are undone on leaving (a pipe gets the bytes as they are).
    restore: bool,
    tty: bool,
    /// stdout is a file or a pipe: it gets the program's bytes only.
    pipe: bool,
    /// Output bytes the pane lost before reaching stdout (gaps).
    lost: u64,
    /// Screens not written into a file or pipe in place of output (see [`Screen::snapshot`]).
    skipped: u32,
    line: StatusLine,
    /// A status update that waits for the output to reach ground state.
    deferred: Option<(Option<String>, u16)>,
    /// Predictive local echo; `None` when off (not a terminal, `--predict=never`).
    predict: Option<Predictions>,
}

impl Screen {
    /// Starts the writer task on stdout. `tty`: the status line is drawn on the terminal (when
    /// stdout is one too); `predict`: when typed keys are shown before their echo, on a terminal
    /// of `size` (columns×rows) whose stdin and stdout are both terminals (the cursor question
    /// needs both).
    pub fn start(tty: bool, predict: PredictMode, size: Option<(u16, u16)>) -> Screen {
        let pipe = !std::io::stdout().is_terminal();
        let tty = tty && !pipe;
        let (tx, mut rx) = mpsc::unbounded_channel::<Vec<u8>>();
        let queued = Arc::new(AtomicUsize::new(0));
        let room = Arc::new(Notify::new());
        let task = tokio::spawn({
            let (queued, room) = (queued.clone(), room.clone());
            async move {
                let mut out = tokio::io::stdout();
                while let Some(data) = rx.recv().await {
                    let result = async {
                        out.write_all(&data).await?;
                        out.flush().await
                    }
                    .await;
                    queued.fetch_sub(data.len(), Ordering::AcqRel);
                    room.notify_waiters();
                    if let Err(e) = result {
                        // Nothing more will be written: let waiters for room go.
                        queued.store(0, Ordering::Release);
                        room.notify_waiters();
                        return Err(e);
                    }
                }
                Ok(())
            }
        });
        let predict = size
            .filter(|_| tty)
            .and_then(|(cols, rows)| Predictions::new(cols, rows, predict));
        let mut screen = Screen {
            tx: Some(tx),
            queued,
            room,
            task,
            parser: Parser::default(),
            modes: Modes::default(),
            restore: !pipe,
            tty,
            pipe,
            lost: 0,
            skipped: 0,
            line: StatusLine::new(tty),
            deferred: None,
            predict,
        };
        if let Some(p) = &mut screen.predict {
            let ask = p.ask(Instant::now()).to_vec();
            screen.send(ask);
        }
        screen
    }

    /// Whether more pane output may be taken now.
    pub fn has_room(&self) -> bool {
        self.queued.load(Ordering::Acquire) < MAX_QUEUED
    }

    /// Whether pane output may be taken now: there is room, and the terminal is not being
    /// asked where its cursor is (see [`crate::predict`]).
    pub fn takes_output(&self) -> bool {
        self.has_room() && !self.predict.as_ref().is_some_and(Predictions::holds_output)
    }

    /// Whether keystrokes may be predicted (relay then measures round trips for it).
    pub fn predicts(&self) -> bool {
        self.predict.is_some()
    }

    /// Takes the terminal's answer to relay's cursor question out of `input` (stdin's bytes).
    pub fn take_answer(&mut self, input: &mut Vec<u8>) {
        if let Some(p) = &mut self.predict {
            p.take_answer(input, Instant::now());
        }
    }

    /// Keystrokes on their way to the pane: drawn at once when predicted.
    pub fn typed(&mut self, data: &[u8]) {
        let ground = self.parser.at_ground();
        if let Some(p) = &mut self.predict {
            let drawn = p.typed(data, Instant::now(), ground);
            self.send(drawn);
        }
    }

    /// A measured round trip to the agent, for the prediction engine.
    pub fn rtt(&mut self, rtt: Duration) {
        let ground = self.parser.at_ground();
        if let Some(p) = &mut self.predict {
            let drawn = p.rtt(rtt, ground);
            self.send(drawn);
        }
    }

    /// When [`Screen::tick`] has work: a prediction to withdraw, an answer no longer awaited.
    pub fn deadline(&self) -> Option<Instant> {
        self.predict.as_ref().and_then(Predictions::deadline)
    }

    /// Lets the prediction engine see time pass (see [`Screen::deadline`]).
    pub fn tick(&mut self) {
        let ground = self.parser.at_ground();
        if let Some(p) = &mut self.predict {
            let drawn = p.tick(Instant::now(), ground);
            self.send(drawn);
        }
    }

    /// The terminal was resized to `cols` × `rows`.
    pub fn resize(&mut self, cols: u16, rows: u16) {
        if let Some(p) = &mut self.predict {
            let bytes = p.resize(cols, rows, Instant::now());
            self.send(bytes);
        }
    }

    /// A waiter for room, usable while the screen is borrowed elsewhere.
    pub fn room(&self) -> Room {
        Room {
            queued: self.queued.clone(),
            notify: self.room.clone(),
        }
    }

    /// Whether writing failed (stdout closed, ...): the writer task has ended early.
    pub fn is_broken(&self) -> bool {
        self.task.is_finished() && self.tx.is_some()
    }

    /// Queues the program's output.
    pub fn output(&mut self, data: Vec<u8>) {
        let restore = self.predict.as_mut().map(Predictions::before_output);
        self.parser.feed(&data);
        self.modes.feed(&data);
        let ground = self.parser.at_ground();
        let drawn = self
            .predict
            .as_mut()
            .map(|p| p.output(&data, Instant::now(), ground));
        if let Some(restore) = restore {
            self.send(restore);
        }
        self.send(data);
        if let Some(drawn) = drawn {
            self.send(drawn);
        }
        if self.parser.at_ground() {
            if let Some((text, cols)) = self.deferred.take() {
                self.draw(text, cols);
            }
        }
    }

    /// Queues relay's own text (a note, the escape help) between the program's output; into a
    /// file or pipe it goes to stderr instead (the text starts and ends with a line break).
    pub fn note(&mut self, text: &str) {
        if self.pipe {
            eprintln!("{}", text.trim_matches(['\r', '\n']));
        } else {
            // Through the prediction's model too: the terminal shows it.
            self.output(text.as_bytes().to_vec());
        }
    }

    /// The screen as it is, drawn over the terminal's (on attach, or instead of a gap). Into a
    /// file or pipe it is not written: those bytes would not be the program's output.
    pub fn snapshot(&mut self, data: Vec<u8>) {
        if !self.pipe {
            self.output(data);
            return;
        }
        self.skipped += 1;
        self.note("[relay: output was skipped to the current screen: the agent could not hold it]");
    }

    /// Bytes `from..to` of the output are lost: says so and counts them.
    pub fn gap(&mut self, from: u64, to: u64) {
        self.lost += to - from;
        self.note(&format!(
            "\r\n[relay: {} bytes of output were lost (offsets {from}..{to}): the agent no longer \
             held them]\r\n",
            to - from
        ));
    }

    /// What was lost on the way to stdout, in one sentence; `None` when every byte arrived.
    pub fn loss(&self) -> Option<String> {
        match (self.lost, self.skipped) {
            (0, 0) => None,
            (n, 0) => Some(format!("{n} bytes of output were lost")),
            (0, s) => Some(format!("output was skipped {s} time(s)")),
            (n, s) => Some(format!(
                "{n} bytes of output were lost and output was skipped {s} time(s)"
            )),
        }
    }

    /// Shows `text` on the status line (clears it when `None`); `cols` is the terminal width.
    /// Waits for ground state when the program is in the middle of a sequence.
    pub fn status(&mut self, text: Option<String>, cols: u16) {
        if self.parser.at_ground() {
            self.deferred = None;
            self.draw(text, cols);
        } else {
            self.deferred = Some((text, cols));
        }
    }

    /// Whether the status line shows something.
    pub fn status_shown(&self) -> bool {
        self.line.is_shown() || self.deferred.as_ref().is_some_and(|d| d.0.is_some())
    }

    fn draw(&mut self, text: Option<String>, cols: u16) {
        if let Some(p) = &mut self.predict {
            // The status line is drawn over the top row: predictions keep off it.
            p.reserve_row(text.is_some().then_some(0));
        }
        let bytes = self.line.update(text, cols);
        if !bytes.is_empty() {
            self.send(bytes);
        }
    }

    fn send(&mut self, data: Vec<u8>) {
        if data.is_empty() {
            return;
        }
        if let Some(tx) = &self.tx {
            self.queued.fetch_add(data.len(), Ordering::AcqRel);
            let _ = tx.send(data);
        }
    }

    /// Clears the status line, writes everything queued and then puts the terminal back: leaves
    /// the alternate screen and turns off the modes the program left on. Unbounded (stdout may
    /// not take it): the caller bounds it.
    pub async fn finish(mut self) {
        if let Some(mut p) = self.predict.take() {
            let restore = p.before_output();
            self.send(restore);
            // For benchmarks and bug reports: `RELAY_LOG=relay::predict=info`.
            let stats = p.stats();
            tracing::info!(
                target: "relay::predict",
                predicted = stats.predicted,
                shown = stats.shown,
                confirmed = stats.confirmed,
                mispredicted = stats.mispredicted,
                withdrawn = stats.withdrawn,
                "prediction statistics"
            );
        }
        if self.tty && self.line.is_shown() && self.parser.at_ground() {
            self.draw(None, 80);
        }
        if self.restore {
            // Every reset starts with ESC, which also ends a sequence the output left unfinished.
            let resets = self.modes.resets();
            if !resets.is_empty() {
                self.send(resets);
            }
        }
        self.tx = None;
        let _ = (&mut self.task).await;
    }
}

/// Waits for room in a [`Screen`]'s output queue.
#[derive(Clone)]
pub struct Room {
    queued: Arc<AtomicUsize>,
    notify: Arc<Notify>,
}

impl Room {
    /// Resolves when the queue has room again (or its writer is gone). Cancel-safe.
    pub async fn wait(&self) {
        loop {
            let notified = self.notify.notified();
            if self.queued.load(Ordering::Acquire) < MAX_QUEUED {
                return;
            }
            notified.await;
        }
    }
}

/// Just enough of a terminal parser to know whether the output stream is between sequences
/// (ECMA-48 escape, CSI and string sequences; UTF-8 characters).
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
enum Parser {
    #[default]
    Ground,
    /// UTF-8 continuation bytes still expected.
    Utf8(u8),
    /// After ESC.
    Escape,
    /// ESC followed by intermediates (`ESC ( B`).
    Intermediate,
    /// Inside a control sequence (`ESC [ ... final`).
    Csi,
    /// Inside a string (`ESC ] ...`, DCS, SOS, PM, APC) until BEL or ST.
    Text,
    /// ESC inside a string (ST is `ESC \`).
    TextEscape,
}

impl Parser {
    fn feed(&mut self, data: &[u8]) {
        for &b in data {
            *self = self.next(b);
        }
    }

    fn next(self, b: u8) -> Parser {
        use Parser::*;
        match self {
            Ground | Utf8(_) if b == 0x1b => Escape,
            Ground => match b {
                0xC0..=0xDF => Utf8(1),
                0xE0..=0xEF => Utf8(2),
                0xF0..=0xF7 => Utf8(3),
                _ => Ground,
            },
            Utf8(n) => match b {
                0x80..=0xBF if n > 1 => Utf8(n - 1),
                _ => Ground,
            },
            Escape => match b {
                b'[' => Csi,
                b']' | b'P' | b'X' | b'^' | b'_' => Text,
                0x20..=0x2F => Intermediate,
                0x1b => Escape,
                _ => Ground,
            },
            Intermediate => match b {
                0x20..=0x2F => Intermediate,
                _ => Ground,
            },
            Csi => match b {
                0x40..=0x7E => Ground,
                0x1b => Escape,
                _ => Csi,
            },
            Text => match b {
                0x07 => Ground,
                0x1b => TextEscape,
                _ => Text,
            },
            TextEscape => match b {
                b'\\' => Ground,
                _ => Escape.next(b),
            },
        }
    }

    fn at_ground(self) -> bool {
        self == Parser::Ground
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn after(chunks: &[&[u8]]) -> bool {
        let mut p = Parser::default();
        for c in chunks {
            p.feed(c);
        }
        p.at_ground()
    }

    /// Regression: the status line was drawn between `\e[3` and `1m`, so the terminal dropped
    /// the colour sequence and printed `1mRED`.
    #[test]
    fn a_sequence_split_across_chunks_is_not_ground() {
        assert!(!after(&[b"before\n\x1b[3"]));
        assert!(after(&[b"before\n\x1b[3", b"1mRED\x1b[0m"]));
        assert!(!after(&[b"\x1b]0;title"]), "an OSC without its end");
        assert!(after(&[b"\x1b]0;title\x07"]));
        assert!(after(&[b"\x1b]0;title\x1b\\ok"]));
        assert!(!after(&[b"\x1b("]));
        assert!(after(&[b"\x1b(B"]));
        assert!(
            !after(&["é".as_bytes()[..1].as_ref()]),
            "half a UTF-8 character"
        );
        assert!(after(&["é€𝄞 plain".as_bytes()]));
        assert!(after(&[b"\x1b7\x1b[1;1H\x1b[7mhi\x1b[K\x1b[0m\x1b8"]));
    }
}
