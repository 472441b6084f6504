//! The engine and the painter driven by recorded byte streams, with simulated time: a fake
//! line editor on the "host" answers each keystroke one round trip later, and a second vt100
//! parser plays the user's terminal, fed exactly what `relay shell` would write.

mod engine;
mod painter;
mod terminal;

use std::time::{Duration, Instant};

use super::{Overlay, Painter, PredictMode, Predictor};

const COLS: u16 = 40;
const ROWS: u16 = 8;
const PROMPT: &str = "user@h:~$ ";
/// Scrollback kept by the two terminals (the engine's model keeps none).
const SCROLLBACK: usize = 100;

/// One pane as `relay shell` runs it, at a simulated time.
struct Rig {
    predictor: Predictor,
    painter: Painter,
    /// The user's terminal: output chunks, each preceded by `before_output`, and every `draw`.
    terminal: vt100::Parser,
    /// The same output without prediction.
    plain: vt100::Parser,
    start: Instant,
    now: Instant,
    /// Every byte the painter wrote.
    painted: Vec<u8>,
    /// The overlay after each step.
    frames: Vec<Overlay>,
}

impl Rig {
    /// A rig whose smoothed round trip is `rtt_ms` (steady, so the echo wait is `rtt_ms` +
    /// 50 ms), or unmeasured.
    fn new(mode: PredictMode, rtt_ms: Option<u64>) -> Rig {
        Rig::sized(COLS, ROWS, mode, rtt_ms)
    }

    fn sized(cols: u16, rows: u16, mode: PredictMode, rtt_ms: Option<u64>) -> Rig {
        let start = Instant::now();
        let mut predictor = Predictor::new(cols, rows, mode);
        if let Some(ms) = rtt_ms {
            for _ in 0..40 {
                predictor.rtt_sample(Duration::from_millis(ms));
            }
        }
        Rig {
            predictor,
            painter: Painter::new(),
            terminal: vt100::Parser::new(size(rows), size(cols), SCROLLBACK),
            plain: vt100::Parser::new(size(rows), size(cols), SCROLLBACK),
            start,
            now: start,
            painted: Vec::new(),
            frames: Vec::new(),
        }
    }

    /// Moves the clock to `ms` after the start and lets the engine tick.
    fn at(&mut self, ms: u64) {
        self.now = self.start + Duration::from_millis(ms);
        self.predictor.tick(self.now);
        self.draw();
    }

    /// A chunk of the pane's output arrives now, and is written as the CLI writes it.
    fn output(&mut self, bytes: &[u8]) {
        let restore = self.painter.before_output(self.predictor.screen());
        self.write(&restore);
        self.terminal.process(bytes);
        self.plain.process(bytes);
        self.predictor.output(bytes, self.now);
        self.draw();
    }

    /// The user types `bytes` now.
    fn input(&mut self, bytes: &[u8]) {
        self.predictor.input(bytes, self.now);
        self.draw();
    }

    fn draw(&mut self) {
        let overlay = self.predictor.overlay();
        let bytes = self.painter.draw(&overlay, self.predictor.screen());
        self.write(&bytes);
        self.frames.push(overlay);
    }

    fn write(&mut self, painted: &[u8]) {
        self.terminal.process(painted);
        self.painted.extend_from_slice(painted);
    }

    /// Milliseconds since the start.
    fn ms(&self) -> u64 {
        (self.now - self.start).as_millis() as u64
    }

    fn overlay(&self) -> Overlay {
        self.predictor.overlay()
    }

    /// The predicted characters now on screen, in order.
    fn shown(&self) -> String {
        self.overlay().cells.iter().map(|c| c.ch).collect()
    }

    /// Runs `script` (times in ms from the start) in time order, checking after every step.
    fn run(&mut self, script: &Script, mut check: impl FnMut(&mut Rig)) {
        for (ms, event) in script.in_order() {
            self.at(ms);
            match event {
                Event::Key(bytes) => self.input(&bytes),
                Event::Output(bytes) => self.output(&bytes),
            }
            check(self);
        }
    }

    /// With nothing predicted, the user's terminal shows exactly what it shows without
    /// prediction (screen, cursor, pen, and the model agrees).
    fn assert_same_as_without_prediction(&self) {
        assert!(self.overlay().is_empty(), "{:?}", self.overlay());
        assert!(self.painter.is_clear());
        let want = self.plain.screen().contents_formatted();
        assert_eq!(self.terminal.screen().contents_formatted(), want);
        assert_eq!(
            self.predictor.screen().contents_formatted(),
            want,
            "the model follows the output"
        );
    }

    /// The scrollbacks of the user's terminal and of the terminal without prediction hold
    /// the same lines, attributes included.
    fn assert_same_scrollback(&mut self) {
        let got = scrollback(&mut self.terminal);
        let want = scrollback(&mut self.plain);
        assert_eq!(got, want);
    }

    /// The row `row` of the user's terminal as text.
    fn terminal_row(&self, row: u16) -> String {
        let screen = self.terminal.screen();
        let cols = screen.size().1.get();
        screen
            .rows(0, cols)
            .nth(usize::from(row))
            .unwrap_or_default()
    }
}

/// Every line of a terminal's scrollback, formatted, oldest first.
fn scrollback(parser: &mut vt100::Parser) -> Vec<String> {
    let cols = parser.screen().size().1.get();
    parser.screen_mut().set_scrollback(usize::MAX);
    let len = parser.screen().scrollback();
    let mut lines = Vec::new();
    for back in (1..=len).rev() {
        parser.screen_mut().set_scrollback(back);
        lines.extend(parser.screen().rows_formatted(0, cols).next());
    }
    parser.screen_mut().set_scrollback(0);
    lines
}

fn size(n: u16) -> std::num::NonZeroU16 {
    std::num::NonZeroU16::new(n).unwrap()
}

/// What happens at one moment.
#[derive(Debug, Clone)]
enum Event {
    /// The user types these bytes.
    Key(Vec<u8>),
    /// This output arrives.
    Output(Vec<u8>),
}

/// Timed events.
#[derive(Debug, Default)]
struct Script(Vec<(u64, Event)>);

impl Script {
    fn output(&mut self, ms: u64, bytes: &[u8]) -> &mut Script {
        self.0.push((ms, Event::Output(bytes.to_vec())));
        self
    }

    fn key(&mut self, ms: u64, bytes: &[u8]) -> &mut Script {
        self.0.push((ms, Event::Key(bytes.to_vec())));
        self
    }

    /// Types `keys` one every `every` ms from `from`; `shell` answers each one `rtt` ms
    /// later. Returns the time of the last keystroke.
    fn typing(
        &mut self,
        shell: &mut Shell,
        from: u64,
        every: u64,
        rtt: u64,
        keys: &[&[u8]],
    ) -> u64 {
        let mut ms = from;
        for key in keys {
            self.key(ms, key);
            let echo = shell.key(key);
            if !echo.is_empty() {
                self.output(ms + rtt, &echo);
            }
            ms += every;
        }
        ms - every
    }

    /// Events by time; at equal times in the order they were added.
    fn in_order(&self) -> Vec<(u64, Event)> {
        let mut events = self.0.clone();
        events.sort_by_key(|(ms, _)| *ms);
        events
    }
}

/// `text` as one key per character.
fn chars(text: &str) -> Vec<&[u8]> {
    let mut keys = Vec::new();
    let mut rest = text;
    while let Some(c) = rest.chars().next() {
        let (key, tail) = rest.split_at(c.len_utf8());
        keys.push(key.as_bytes());
        rest = tail;
    }
    keys
}

/// A host-side line editor, bash-like: echoes typed characters, redraws the rest of the line
/// on insert and delete, runs `echo` on Enter and prints the prompt again.
#[derive(Debug)]
struct Shell {
    /// Printed after each command; it must be 10 columns wide, like [`PROMPT`].
    prompt: &'static str,
    line: Vec<char>,
    cursor: usize,
    /// A prompt that reads without echo (`read -s`): nothing is echoed until Enter.
    silent: bool,
    /// Echo characters after this many typed ones upper-cased (a misbehaving editor).
    upcase_after: Option<usize>,
    typed: usize,
}

impl Default for Shell {
    fn default() -> Shell {
        Shell {
            prompt: PROMPT,
            line: Vec::new(),
            cursor: 0,
            silent: false,
            upcase_after: None,
            typed: 0,
        }
    }
}

impl Shell {
    fn key(&mut self, key: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        match key {
            b"\r" => {
                let line: String = self.line.drain(..).collect();
                self.cursor = 0;
                out.extend_from_slice(b"\r\n");
                if self.silent {
                    self.silent = false;
                } else if let Some(words) = line.strip_prefix("echo ") {
                    out.extend_from_slice(words.as_bytes());
                    out.extend_from_slice(b"\r\n");
                }
                out.extend_from_slice(self.prompt.as_bytes());
            }
            _ if self.silent => {}
            b"\x7f" if self.cursor == 0 => out.push(0x07),
            b"\x7f" => {
                self.cursor -= 1;
                self.line.remove(self.cursor);
                let tail: String = self.line[self.cursor..].iter().collect();
                out.push(0x08);
                out.extend_from_slice(tail.as_bytes());
                out.push(b' ');
                out.extend(std::iter::repeat_n(0x08, tail.chars().count() + 1));
            }
            b"\x1b[D" | b"\x1bOD" if self.cursor > 0 => {
                self.cursor -= 1;
                out.push(0x08);
            }
            b"\x1b[C" | b"\x1bOC" if self.cursor < self.line.len() => {
                let mut buf = [0; 4];
                out.extend_from_slice(self.line[self.cursor].encode_utf8(&mut buf).as_bytes());
                self.cursor += 1;
            }
            b"\x1b[D" | b"\x1bOD" | b"\x1b[C" | b"\x1bOC" => out.push(0x07),
            _ => {
                let Ok(text) = std::str::from_utf8(key) else {
                    return out;
                };
                for c in text.chars() {
                    self.typed += 1;
                    let c = match self.upcase_after {
                        Some(n) if self.typed > n => c.to_ascii_uppercase(),
                        _ => c,
                    };
                    self.line.insert(self.cursor, c);
                    self.cursor += 1;
                    let tail: String = self.line[self.cursor..].iter().collect();
                    out.extend_from_slice(c.to_string().as_bytes());
                    out.extend_from_slice(tail.as_bytes());
                    out.extend(std::iter::repeat_n(0x08, tail.chars().count()));
                }
            }
        }
        out
    }
}
