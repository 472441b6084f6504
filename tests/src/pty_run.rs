//! `relay` running in a real pseudo-terminal, as a user would run it.

use std::io::{Read, Write};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use crate::{bins, eventually, TestHome};

/// `relay` running in a real pseudo-terminal, with everything it prints collected.
pub struct PtyRun {
    child: Box<dyn portable_pty::Child + Send + Sync>,
    writer: Box<dyn Write + Send>,
    screen: Arc<Mutex<Vec<u8>>>,
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
                rows: 24,
                cols: 100,
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
        let writer = pair.master.take_writer().unwrap();
        let (screen, reader) = collect(reader);
        PtyRun {
            child,
            writer,
            screen,
            reader,
            _master: pair.master,
        }
    }

    /// Types `s` on the terminal.
    pub fn type_text(&mut self, s: &str) {
        self.writer.write_all(s.as_bytes()).unwrap();
        self.writer.flush().unwrap();
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
