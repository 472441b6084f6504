//! `relay` running in a real pseudo-terminal, as a user would run it.
//!
//! The test side plays the terminal: everything relay writes is collected as bytes and fed to a
//! terminal model (vt100), and the model answers relay's cursor question (DSR 6, `ESC [ 6 n`)
//! on relay's input as a real terminal does.

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::fixture::SshHost;
use crate::{agent_copy, bins, eventually, TestHome};

/// Whether a row of `screen` reads exactly `text` (trailing blanks aside).
pub fn has_row(screen: &vt100::Screen, text: &str) -> bool {
    screen
        .contents()
        .lines()
        .any(|l| l.trim_end() == text.trim_end())
}

/// The pseudo-terminal's size.
const ROWS: u16 = 24;
const COLS: u16 = 100;

/// `relay` running in a real pseudo-terminal, with everything it prints collected.
pub struct PtyRun {
    child: Box<dyn portable_pty::Child + Send + Sync>,
    writer: Arc<Mutex<Box<dyn Write + Send>>>,
    screen: Arc<Mutex<Vec<u8>>>,
    terminal: Arc<Mutex<vt100::Parser>>,
    /// Cursor questions relay asked and the terminal answered.
    answered: Arc<std::sync::atomic::AtomicUsize>,
    reader: JoinHandle<()>,
    _master: Box<dyn portable_pty::MasterPty + Send>,
}

impl PtyRun {
    /// Starts `relay ARGS` on a fresh 100x24 pseudo-terminal, in `home`.
    pub fn spawn(home: &TestHome, args: &[&str]) -> PtyRun {
        Self::spawn_with(home, args, &[])
    }

    /// Starts `relay ARGS` like [`PtyRun::spawn`], with extra environment variables.
    pub fn spawn_with(home: &TestHome, args: &[&str], env: &[(&str, &str)]) -> PtyRun {
        Self::spawn_program(home, &bins().relay, args, env)
    }

    /// Starts `PROGRAM ARGS` like [`PtyRun::spawn_with`]: another build of relay, or relay
    /// through a runner (wine for `relay.exe`).
    pub fn spawn_program(
        home: &TestHome,
        program: &std::path::Path,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> PtyRun {
        use portable_pty::{native_pty_system, CommandBuilder, PtySize};
        let pair = native_pty_system()
            .openpty(PtySize {
                rows: ROWS,
                cols: COLS,
                pixel_width: 0,
                pixel_height: 0,
            })
            .unwrap();
        let mut cmd = CommandBuilder::new(program);
        cmd.args(args);
        cmd.cwd(home.path());
        cmd.env("TERM", "xterm");
        home.apply_env(|k, v| cmd.env(k, v));
        for (k, v) in env {
            cmd.env(k, v);
        }
        let child = pair.slave.spawn_command(cmd).unwrap();
        drop(pair.slave);
        let reader = pair.master.try_clone_reader().unwrap();
        let writer = Arc::new(Mutex::new(pair.master.take_writer().unwrap()));
        let terminal = Arc::new(Mutex::new(vt100::Parser::new(
            nonzero(ROWS),
            nonzero(COLS),
            10_000,
        )));
        let answered = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let (screen, reader) =
            play_terminal(reader, terminal.clone(), writer.clone(), answered.clone());
        PtyRun {
            child,
            writer,
            screen,
            terminal,
            answered,
            reader,
            _master: pair.master,
        }
    }

    /// `relay VERB` (`shell`, `attach`) on a fresh terminal to the fixture `host` through
    /// `port` (a shaper's, or the host's own), with the test's isolated ssh config and key, this
    /// build's agent, no ssh-agent, then `args` (the pane, flags) and `env`.
    ///
    /// # Panics
    /// The host's ssh config cannot be written.
    pub fn relay_via(
        host: &SshHost,
        port: u16,
        home: &TestHome,
        verb: &str,
        args: &[&str],
        env: &[(&str, &str)],
    ) -> PtyRun {
        let opts = host.options_via(agent_copy(), port).unwrap();
        let config = opts.resolve.config_file.clone().unwrap();
        let destination = format!("relay@127.0.0.1:{port}");
        let mut all = vec![
            verb,
            &destination,
            "-F",
            config.to_str().unwrap(),
            "-i",
            host.key_path().to_str().unwrap(),
        ];
        all.extend_from_slice(args);
        let mut vars = vec![
            ("SSH_AUTH_SOCK", ""),
            ("RELAY_AGENT_BIN", agent_copy().to_str().unwrap()),
        ];
        vars.extend_from_slice(env);
        Self::spawn_with(home, &all, &vars)
    }

    /// Waits (at most 60 s) until the terminal satisfies `check`; otherwise an error naming
    /// `what`, with the screen and the last bytes relay wrote.
    pub fn wait_screen(
        &self,
        what: &str,
        check: impl Fn(&vt100::Screen) -> bool,
    ) -> Result<(), String> {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let shows = {
                let vt = self.terminal();
                if check(vt.screen()) {
                    return Ok(());
                }
                vt.screen().contents()
            };
            if Instant::now() > deadline {
                let bytes = self.bytes();
                let tail = String::from_utf8_lossy(&bytes[bytes.len().saturating_sub(600)..]);
                return Err(format!(
                    "{what} never happened; the terminal shows:\n{shows}\nthe last bytes: {tail:?}"
                ));
            }
            std::thread::sleep(Duration::from_micros(500));
        }
    }

    /// Every line of the terminal, its scrollback then its screen, oldest first, each with its
    /// attributes (vt100's formatted rows).
    pub fn lines(&self) -> Vec<String> {
        let mut vt = self.terminal();
        let cols = vt.screen().size().1.get();
        vt.screen_mut().set_scrollback(usize::MAX);
        let depth = vt.screen().scrollback();
        let mut lines = Vec::new();
        for offset in (1..=depth).rev() {
            vt.screen_mut().set_scrollback(offset);
            lines.extend(vt.screen().rows_formatted(0, cols).next());
        }
        vt.screen_mut().set_scrollback(0);
        lines.extend(vt.screen().rows_formatted(0, cols));
        lines
    }

    /// Types `s` on the terminal.
    ///
    /// # Panics
    /// The terminal is gone (relay exited and the pseudo-terminal closed).
    pub fn type_text(&mut self, s: &str) {
        self.try_type(s)
            .unwrap_or_else(|e| panic!("cannot type {s:?}: {e}"));
    }

    /// Types `s` on the terminal; an error when relay has gone and its terminal with it.
    pub fn try_type(&mut self, s: &str) -> std::io::Result<()> {
        let mut writer = self.writer.lock().unwrap();
        writer.write_all(s.as_bytes())?;
        writer.flush()
    }

    /// The terminal as relay's output made it so far (100×24, 10,000 lines of scrollback).
    pub fn terminal(&self) -> std::sync::MutexGuard<'_, vt100::Parser> {
        self.terminal.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// How many times relay asked where the cursor is (and was answered).
    pub fn cursor_questions(&self) -> usize {
        self.answered.load(std::sync::atomic::Ordering::Acquire)
    }

    /// Everything relay wrote so far, as bytes.
    pub fn bytes(&self) -> Vec<u8> {
        self.screen.lock().unwrap().clone()
    }

    /// Everything relay printed so far (stdout and stderr share the terminal).
    pub fn screen(&self) -> String {
        String::from_utf8_lossy(&self.screen.lock().unwrap()).into_owned()
    }

    /// Waits until `needle` was printed; panics with the screen after the liveness bound.
    pub fn wait_for(&self, needle: &str) {
        let screen = self.screen.clone();
        let what = format!("{needle:?} on the terminal");
        let found = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            eventually(&what, || {
                String::from_utf8_lossy(&screen.lock().unwrap())
                    .contains(needle)
                    .then_some(())
            })
        }));
        if found.is_err() {
            panic!(
                "{needle:?} never appeared; terminal shows: {:?}",
                self.screen()
            );
        }
    }

    /// Waits until the program has turned the terminal's echo off (raw mode, or a password
    /// prompt): typed input then goes to it as typed, not through the line discipline. Wine's
    /// console does this only when it starts reading, after its prompt is already on the screen.
    pub fn wait_for_echo_off(&self) {
        eventually("the program to turn the terminal's echo off", || {
            let termios = nix::libc::termios::from(self._master.get_termios()?);
            (termios.c_lflag & nix::libc::ECHO == 0).then_some(())
        });
    }

    /// The relay process id.
    pub fn pid(&self) -> i32 {
        self.child.process_id().expect("relay has a pid") as i32
    }

    /// Waits at most `bound` for relay to exit; its exit code, or `None` if it still runs.
    pub fn exit_within(&mut self, bound: Duration) -> Option<u32> {
        let deadline = Instant::now() + bound;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                await_end_of_output(&self.reader);
                return Some(status.exit_code());
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for relay to exit (liveness bound); its exit code.
    pub fn wait_exit(&mut self) -> u32 {
        let status = eventually("relay to exit", || self.child.try_wait().unwrap());
        await_end_of_output(&self.reader);
        status.exit_code()
    }
}

/// Waits (at most 5 s) until `reader` saw end-of-file, so everything written before the process
/// exited has been collected. A helper process that inherited the terminal or pipe (the bridge)
/// can keep it open a little longer; the bound keeps such a straggler from hanging a test.
pub fn await_end_of_output(reader: &JoinHandle<()>) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !reader.is_finished() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(10));
    }
}

impl Drop for PtyRun {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
        }
    }
}

fn nonzero(n: u16) -> std::num::NonZeroU16 {
    std::num::NonZeroU16::new(n).expect("a terminal has rows and columns")
}

/// The terminal's side: collects what relay writes, feeds it to `terminal`, and answers each
/// cursor question (`ESC [ 6 n`) with the model's cursor at that point (`ESC [ row ; col R`,
/// 1-based) on `answer`, counting them in `answered`.
fn play_terminal(
    mut from: impl Read + Send + 'static,
    terminal: Arc<Mutex<vt100::Parser>>,
    answer: Arc<Mutex<Box<dyn Write + Send>>>,
    answered: Arc<std::sync::atomic::AtomicUsize>,
) -> (Arc<Mutex<Vec<u8>>>, JoinHandle<()>) {
    const ASK: &[u8] = b"\x1b[6n";
    let buf = Arc::new(Mutex::new(Vec::new()));
    let sink = buf.clone();
    let reader = std::thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        // How much of ASK the bytes so far end with.
        let mut matched = 0;
        while let Ok(n) = from.read(&mut chunk) {
            if n == 0 {
                break;
            }
            let data = &chunk[..n];
            sink.lock().unwrap().extend_from_slice(data);
            let mut start = 0;
            for (i, &b) in data.iter().enumerate() {
                matched = if b == ASK[matched] {
                    matched + 1
                } else if b == ASK[0] {
                    1
                } else {
                    0
                };
                if matched == ASK.len() {
                    matched = 0;
                    let mut vt = terminal.lock().unwrap_or_else(|e| e.into_inner());
                    vt.process(&data[start..=i]);
                    start = i + 1;
                    let (row, col) = vt.screen().cursor_position();
                    drop(vt);
                    let reply = format!("\x1b[{};{}R", row + 1, col + 1);
                    let mut w = answer.lock().unwrap();
                    if w.write_all(reply.as_bytes())
                        .and_then(|()| w.flush())
                        .is_ok()
                    {
                        answered.fetch_add(1, std::sync::atomic::Ordering::AcqRel);
                    }
                }
            }
            // A test that failed while looking at the terminal does not stop its collection.
            terminal
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .process(&data[start..]);
        }
    });
    (buf, reader)
}

/// Collects everything `from` yields, on a background thread, until end-of-file.
pub fn collect(mut from: impl Read + Send + 'static) -> (Arc<Mutex<Vec<u8>>>, JoinHandle<()>) {
    let buf = Arc::new(Mutex::new(Vec::new()));
    let sink = buf.clone();
    let reader = std::thread::spawn(move || {
        let mut chunk = [0u8; 8192];
        while let Ok(n) = from.read(&mut chunk) {
            if n == 0 {
                break;
            }
            sink.lock().unwrap().extend_from_slice(&chunk[..n]);
        }
    });
    (buf, reader)
}
