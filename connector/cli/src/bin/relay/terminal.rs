//! The local terminal on every desktop: raw mode (restored on every exit path, including
//! panics), size, and a reader thread for stdin.

use std::io::{IsTerminal, Read};

use relay_cli::sys;
use relay_protocol::TermSize;
use tokio::sync::mpsc;

/// Whether stdin is a terminal.
pub fn stdin_is_tty() -> bool {
    std::io::stdin().is_terminal()
}

/// Puts stdin's terminal in raw mode (crossterm: `cfmakeraw` on Unix; no line input, echo or
/// Ctrl+C processing on a Windows console, plus [`sys::enter_vt_console`]) until dropped.
pub struct RawMode {
    _vt: sys::VtConsole,
}

impl RawMode {
    /// Enters raw mode; `Ok(None)` when stdin is not a terminal (nothing to do).
    ///
    /// # Errors
    /// The terminal refused its new settings.
    pub fn enter() -> std::io::Result<Option<RawMode>> {
        if !stdin_is_tty() {
            return Ok(None);
        }
        install_panic_hook();
        crossterm::terminal::enable_raw_mode()?;
        Ok(Some(RawMode {
            _vt: sys::enter_vt_console(),
        }))
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // The console modes (`_vt`) are put back after this, when the field drops.
        let _ = crossterm::terminal::disable_raw_mode();
    }
}

/// Leaves raw mode before a panic's message is printed (a no-op when raw mode is off).
fn install_panic_hook() {
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        let previous = std::panic::take_hook();
        std::panic::set_hook(Box::new(move |info| {
            let _ = crossterm::terminal::disable_raw_mode();
            previous(info);
        }));
    });
}

/// The terminal's size in columns×rows (crossterm: `TIOCGWINSZ` on Unix, the console window on
/// Windows); `None` when neither stdin nor stdout is a terminal.
pub fn size() -> Option<TermSize> {
    if !stdin_is_tty() && !std::io::stdout().is_terminal() {
        return None;
    }
    match crossterm::terminal::size() {
        Ok((cols, rows)) if cols > 0 && rows > 0 => Some(TermSize { cols, rows }),
        _ => None,
    }
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
