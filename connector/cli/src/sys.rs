//! What `relay` and `relayctl` do differently per desktop OS, and the only place in this crate
//! with `cfg(unix)` / `cfg(windows)`:
//!
//! - [`Stops`]: the requests to leave that are not keystrokes — SIGTERM and SIGHUP on Unix; the
//!   console being closed, the user logging off or the system shutting down on Windows;
//! - [`Resizes`]: the terminal's window size changed — SIGWINCH on Unix; on Windows, where a
//!   console sends no signal, the size polled every [`RESIZE_POLL`];
//! - [`enter_vt_console`]: on Windows, the console modes that make it a VT terminal (escape
//!   sequences in stdout, keys as escape sequences in stdin); nothing to do on Unix;
//! - [`terminate`]: stop a local process by pid (the local agent, Unix only);
//! - [`open_console`]: the terminal itself, for questions asked while stdin and stdout may be
//!   redirected — `/dev/tty` on Unix, `CONIN$`/`CONOUT$` on Windows;
//! - [`return_freed_memory`]: give memory freed by a large call back to the OS — glibc keeps
//!   it in its arenas otherwise; other allocators need nothing.
//!
//! Raw mode and the window size itself come from crossterm on every OS (`src/bin/relay/terminal.rs`).

use std::time::Duration;

/// How often [`Resizes`] looks at the console's size on Windows (no signal tells).
pub const RESIZE_POLL: Duration = Duration::from_millis(250);

/// A request to leave that did not come as a keystroke.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stop {
    /// What asked: `"SIGTERM"`, `"SIGHUP"`, `"console closed"`, ...
    pub name: &'static str,
    /// The exit code a program ended this way reports: 128 + the Unix signal number (143 for
    /// SIGTERM, 129 for SIGHUP), as shells do; Windows events use SIGHUP's (the terminal went away).
    pub code: u8,
}

/// Watches for [`Stop`]s from when it is made.
pub struct Stops {
    #[cfg(unix)]
    term: tokio::signal::unix::Signal,
    #[cfg(unix)]
    hup: tokio::signal::unix::Signal,
    #[cfg(windows)]
    close: tokio::signal::windows::CtrlClose,
    #[cfg(windows)]
    logoff: tokio::signal::windows::CtrlLogoff,
    #[cfg(windows)]
    shutdown: tokio::signal::windows::CtrlShutdown,
}

impl Stops {
    /// Starts watching. Needs a tokio runtime.
    ///
    /// # Errors
    /// The OS refused the handler (rare: out of resources).
    pub fn new() -> std::io::Result<Stops> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Stops {
                term: signal(SignalKind::terminate())?,
                hup: signal(SignalKind::hangup())?,
            })
        }
        #[cfg(windows)]
        {
            use tokio::signal::windows::{ctrl_close, ctrl_logoff, ctrl_shutdown};
            Ok(Stops {
                close: ctrl_close()?,
                logoff: ctrl_logoff()?,
                shutdown: ctrl_shutdown()?,
            })
        }
    }

    /// Resolves at the next stop request.
    pub async fn recv(&mut self) -> Stop {
        #[cfg(unix)]
        {
            tokio::select! {
                _ = self.term.recv() => Stop { name: "SIGTERM", code: 128 + 15 },
                _ = self.hup.recv() => Stop { name: "SIGHUP", code: 128 + 1 },
            }
        }
        #[cfg(windows)]
        {
            tokio::select! {
                _ = self.close.recv() => Stop { name: "console closed", code: 128 + 1 },
                _ = self.logoff.recv() => Stop { name: "user logged off", code: 128 + 1 },
                _ = self.shutdown.recv() => Stop { name: "system shutdown", code: 128 + 1 },
            }
        }
    }
}

/// Tells when the terminal's window may have changed size; read the size then.
pub struct Resizes {
    #[cfg(unix)]
    winch: tokio::signal::unix::Signal,
    #[cfg(windows)]
    poll: tokio::time::Interval,
}

impl Resizes {
    /// Starts watching. Needs a tokio runtime.
    ///
    /// # Errors
    /// The OS refused the SIGWINCH handler (Unix; rare).
    pub fn new() -> std::io::Result<Resizes> {
        #[cfg(unix)]
        {
            use tokio::signal::unix::{signal, SignalKind};
            Ok(Resizes {
                winch: signal(SignalKind::window_change())?,
            })
        }
        #[cfg(windows)]
        {
            let mut poll = tokio::time::interval(RESIZE_POLL);
            poll.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            Ok(Resizes { poll })
        }
    }

    /// Resolves when the size may have changed (on Windows at every poll: compare the size with
    /// the last one sent).
    pub async fn changed(&mut self) {
        #[cfg(unix)]
        self.winch.recv().await;
        #[cfg(windows)]
        self.poll.tick().await;
    }
}

/// Console modes changed by [`enter_vt_console`], put back by dropping it.
pub struct VtConsole {
    #[cfg(windows)]
    input: Option<(crossterm_winapi::ConsoleMode, u32)>,
}

/// Makes the console a VT terminal for the pane's bytes, on Windows: escape sequences in stdout
/// are drawn (`ENABLE_VIRTUAL_TERMINAL_PROCESSING`, through crossterm) and keys arrive in stdin
/// as the escape sequences a Unix terminal sends (`ENABLE_VIRTUAL_TERMINAL_INPUT`; Windows 10
/// 1809 and later, as Windows' OpenSSH client needs). Nothing to do on Unix. Call after raw mode
/// is on; drop the result before leaving raw mode.
pub fn enter_vt_console() -> VtConsole {
    #[cfg(windows)]
    {
        use crossterm_winapi::{ConsoleMode, Handle};
        /// `ENABLE_VIRTUAL_TERMINAL_INPUT` (Windows SDK `consoleapi.h`).
        const VT_INPUT: u32 = 0x0200;
        let _ = crossterm::ansi_support::supports_ansi();
        let input = Handle::current_in_handle().ok().and_then(|h| {
            let mode = ConsoleMode::from(h);
            let old = mode.mode().ok()?;
            mode.set_mode(old | VT_INPUT).ok()?;
            Some((mode, old))
        });
        VtConsole { input }
    }
    #[cfg(unix)]
    VtConsole {}
}

impl Drop for VtConsole {
    fn drop(&mut self) {
        #[cfg(windows)]
        if let Some((mode, old)) = self.input.take() {
            let _ = mode.set_mode(old);
        }
    }
}

/// Sends SIGTERM to local process `pid`; `Ok(false)` when it does not exist (any more).
///
/// # Errors
/// The signal could not be sent (not ours: `EPERM`); on Windows always, as there is no local agent
/// there to stop.
pub fn terminate(pid: u32) -> std::io::Result<bool> {
    #[cfg(unix)]
    {
        use nix::sys::signal::{kill, Signal};
        let pid = nix::unistd::Pid::from_raw(
            i32::try_from(pid).map_err(|_| std::io::Error::other("pid out of range"))?,
        );
        match kill(pid, Signal::SIGTERM) {
            Ok(()) => Ok(true),
            Err(nix::errno::Errno::ESRCH) => Ok(false),
            Err(e) => Err(e.into()),
        }
    }
    #[cfg(windows)]
    {
        let _ = pid;
        Err(std::io::Error::new(
            std::io::ErrorKind::Unsupported,
            relay_connector::sys::NO_LOCAL_AGENT,
        ))
    }
}

/// Whether local process `pid` exists.
pub fn is_running(pid: u32) -> bool {
    #[cfg(unix)]
    {
        i32::try_from(pid)
            .is_ok_and(|p| nix::sys::signal::kill(nix::unistd::Pid::from_raw(p), None).is_ok())
    }
    #[cfg(windows)]
    {
        let _ = pid;
        false
    }
}

/// The controlling terminal as a (reader, writer) pair, whatever stdin and stdout are: `/dev/tty`
/// on Unix; the console's input and screen buffers `CONIN$` and `CONOUT$` on Windows (the names
/// `CreateFile` gives them, Windows SDK "Console Handles").
///
/// # Errors
/// There is no terminal (a daemon, a service, a CI job).
pub fn open_console() -> std::io::Result<(std::fs::File, std::fs::File)> {
    #[cfg(unix)]
    {
        let tty = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("/dev/tty")?;
        Ok((tty.try_clone()?, tty))
    }
    #[cfg(windows)]
    {
        // Reading CONIN$ needs write access too (to its modes), as Windows documents.
        let input = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("CONIN$")?;
        let output = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .open("CONOUT$")?;
        Ok((input, output))
    }
}

/// Gives memory the process has freed back to the OS (the library's, which also calls it after
/// an agent upload).
pub use relay_connector::sys::return_freed_memory;
