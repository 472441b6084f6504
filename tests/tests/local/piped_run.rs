//! `relay` with piped stdin, stdout and stderr, as a script would run it.

use std::io::Write;
use std::process::{Child, ChildStdin, ExitStatus, Stdio};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use relay_tests::{bins, eventually, TestHome};

use relay_tests::pty_run::{await_end_of_output, collect};

/// A running `relay` whose output is collected by background threads.
pub struct PipedRun {
    child: Child,
    stdin: Option<ChildStdin>,
    stdout: Arc<Mutex<Vec<u8>>>,
    stderr: Arc<Mutex<Vec<u8>>>,
    readers: Vec<JoinHandle<()>>,
}

impl PipedRun {
    /// Starts `relay ARGS` in `home`.
    pub fn spawn(home: &TestHome, args: &[&str]) -> PipedRun {
        let mut child = home
            .command(&bins().relay)
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("starting relay");
        let (stdout, out_reader) = collect(child.stdout.take().unwrap());
        let (stderr, err_reader) = collect(child.stderr.take().unwrap());
        PipedRun {
            stdin: child.stdin.take(),
            child,
            stdout,
            stderr,
            readers: vec![out_reader, err_reader],
        }
    }

    /// Writes `data` to relay's stdin from a background thread (relay may stop reading for a
    /// while), then closes it.
    pub fn feed_and_close(&mut self, data: Vec<u8>) {
        let mut stdin = self.stdin.take().expect("stdin still open");
        std::thread::spawn(move || {
            let _ = stdin.write_all(&data);
        });
    }

    /// Writes a little text to relay's stdin and keeps it open.
    pub fn send(&mut self, text: &str) {
        let stdin = self.stdin.as_mut().expect("stdin still open");
        stdin.write_all(text.as_bytes()).unwrap();
        stdin.flush().unwrap();
    }

    /// What relay printed on stdout so far.
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout.lock().unwrap()).into_owned()
    }

    /// What relay printed on stderr so far.
    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.stderr.lock().unwrap()).into_owned()
    }

    /// Waits until stdout contains `needle` (liveness bound).
    pub fn wait_for_stdout(&self, needle: &str) {
        eventually(&format!("{needle:?} on relay's stdout"), || {
            self.stdout().contains(needle).then_some(())
        });
    }

    /// Waits at most `bound` for relay to exit.
    pub fn exit_within(&mut self, bound: Duration) -> Option<ExitStatus> {
        let deadline = Instant::now() + bound;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // The last bytes relay wrote are read once its pipes reach end-of-file.
                for reader in &self.readers {
                    await_end_of_output(reader);
                }
                return Some(status);
            }
            if Instant::now() >= deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for PipedRun {
    fn drop(&mut self) {
        if let Ok(None) = self.child.try_wait() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}
