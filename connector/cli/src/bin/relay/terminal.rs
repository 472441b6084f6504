//! The local terminal: raw mode (restored on every exit path, including panics), size, and a
//! reader thread for stdin.

use std::io::Read;
use std::os::fd::AsFd;
use std::sync::Mutex;

use nix::sys::termios::{self, SetArg, Termios};
use relay_connector::LockExt;
use relay_protocol::TermSize;
use tokio::sync::mpsc;

/// Settings to restore, for the panic hook.
static SAVED: Mutex<Option<Termios>> = Mutex::new(None);

/// Whether stdin is a terminal.
pub fn stdin_is_tty() -> bool {
    nix::unistd::isatty(std::io::stdin()).unwrap_or(false)
}

/// Puts stdin's terminal in raw mode until dropped.
pub struct RawMode {
    original: Termios,
}

impl RawMode {
    /// Enters raw mode; `Ok(None)` when stdin is not a terminal (nothing to do).
    pub fn enter() -> std::io::Result<Option<RawMode>> {
        if !stdin_is_tty() {
            return Ok(None);
        }
        let stdin = std::io::stdin();
        let original = termios::tcgetattr(stdin.as_fd())?;
        let mut raw = original.clone();
        termios::cfmakeraw(&mut raw);
        *SAVED.lock_unpoisoned() = Some(original.clone());
        install_panic_hook();
        termios::tcsetattr(stdin.as_fd(), SetArg::TCSANOW, &raw)?;
        Ok(Some(RawMode { original }))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        let _ = termios::tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, &self.original);
        SAVED.lock_unpoisoned().take();
    }
}

fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            if let Some(t) = SAVED.lock_unpoisoned().take() {
                let _ = termios::tcsetattr(std::io::stdin().as_fd(), SetArg::TCSANOW, &t);
            }
            previous(info);
        }));
    });
}

nix::ioctl_read_bad!(tiocgwinsz, nix::libc::TIOCGWINSZ, nix::libc::winsize);

/// The terminal's size, from stdin, else stdout; `None` when neither is a terminal.
pub fn size() -> Option<TermSize> {
    for fd in [0, 1] {
        let mut ws = nix::libc::winsize {
            ws_row: 0,
            ws_col: 0,
            ws_xpixel: 0,
            ws_ypixel: 0,
        };
        // SAFETY: TIOCGWINSZ writes one `winsize` into the valid, exclusively borrowed `ws`.
        if unsafe { tiocgwinsz(fd, &mut ws) }.is_ok() && ws.ws_col > 0 && ws.ws_row > 0 {
            return Some(TermSize {
                cols: ws.ws_col,
                rows: ws.ws_row,
            });
        }
    }
    None
}

/// Reads stdin on a plain thread (a blocking read must not hold up runtime shutdown) and sends
/// the chunks; the channel closes at EOF or on a read error.
pub fn spawn_stdin_reader() -> mpsc::Receiver<Vec<u8>> {
    let (tx, rx) = mpsc::channel(16);
    std::thread::Builder::new()
        .name("relay-stdin".into())
        .spawn(move || {
            let mut stdin = std::io::stdin().lock();
            let mut buf = [0u8; 8192];
            loop {
                match stdin.read(&mut buf) {
                    Ok(0) => break,
                    Ok(n) => {
                        if tx.blocking_send(buf[..n].to_vec()).is_err() {
                            break;
                        }
                    }
                    Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                    Err(_) => break,
                }
            }
        })
        .expect("spawning the stdin thread");
    rx
}
