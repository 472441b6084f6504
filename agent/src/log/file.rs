//! `agent.log` on the host's disk: bounded in size, never in the way of the lease journal, and
//! made of whole lines.
//!
//! - **Rotation:** when a line would take `agent.log` past [`MAX_LOG_BYTES`] (2 MiB), it is
//!   renamed to `agent.log.1` (replacing the older one) and a new `agent.log` is started: the log
//!   never holds more than 2 × [`MAX_LOG_BYTES`] = 4 MiB on disk.
//! - **Disk reserve:** the log writes only while the file system keeps [`reserve`] bytes free
//!   (a quarter of it, between 256 KiB and 64 MiB), so a flood of log lines can never take the
//!   space the journal needs to record leases. Error lines may use the reserve (space
//!   permitting): they say why something failed.
//! - **Whole lines:** a line the disk cannot take completely (disk full) is cut back off the
//!   file, so no truncated line is left in front of later ones; the lines dropped this way or by
//!   the reserve are counted and the next line that can be written is preceded by a note saying
//!   how many and why.
//!
//! Writing never fails for the caller: a log that cannot be written must not stop the daemon.

use std::fs::{self, File, OpenOptions};
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::lease::journal::open_append;

/// Largest size of `agent.log` before it is rotated to `agent.log.1`, in bytes (2 MiB).
pub const MAX_LOG_BYTES: u64 = 2 * 1024 * 1024;

/// How often free space is checked at most, by time and by bytes written.
const CHECK_EVERY: Duration = Duration::from_secs(1);
const CHECK_EVERY_BYTES: u64 = 64 * 1024;

/// Free bytes the log leaves on a file system of `total` bytes: a quarter of it, at least
/// 256 KiB and at most 64 MiB.
pub fn reserve(total: u64) -> u64 {
    (total / 4).clamp(256 * 1024, 64 * 1024 * 1024)
}

/// The log file (see the module docs).
#[derive(Debug)]
pub struct LogFile {
    path: PathBuf,
    file: Option<File>,
    len: u64,
    max_bytes: u64,
    /// Free space known to be below the reserve at the last check.
    low: bool,
    checked: Option<Instant>,
    since_check: u64,
    dropped: u64,
    why_dropped: String,
}

impl LogFile {
    /// Opens (creating, mode 0600) `path` for appending, rotating at `max_bytes`.
    ///
    /// # Errors
    /// The file cannot be opened; the error names the path.
    pub fn open(path: &Path, max_bytes: u64) -> io::Result<Self> {
        let (file, len) = open_append(path)?;
        Ok(LogFile {
            path: path.to_path_buf(),
            file: Some(file),
            len,
            max_bytes,
            low: false,
            checked: None,
            since_check: 0,
            dropped: 0,
            why_dropped: String::new(),
        })
    }

    /// Appends one formatted line (or drops and counts it, see the module docs). `urgent`
    /// lines (errors) may use the disk reserve.
    pub fn write_line(&mut self, line: &[u8], urgent: bool) {
        if self.low_on_space() && !urgent {
            self.drop_line("the disk was nearly full (the space is kept for the lease journal)");
            return;
        }
        if self.len + line.len() as u64 > self.max_bytes && self.len > 0 {
            self.rotate();
        }
        if self.dropped > 0 {
            let note = format!(
                "… {} log line(s) were dropped: {}\n",
                self.dropped, self.why_dropped
            );
            if self.append(note.as_bytes()).is_err() {
                self.drop_line("the disk is full");
                return;
            }
            self.dropped = 0;
        }
        if let Err(e) = self.append(line) {
            self.drop_line(&format!("writing {} failed: {e}", self.path.display()));
        }
    }

    fn drop_line(&mut self, why: &str) {
        self.dropped += 1;
        why.clone_into(&mut self.why_dropped);
    }

    /// Writes `bytes` whole or not at all (a partial write is cut back off the file).
    fn append(&mut self, bytes: &[u8]) -> io::Result<()> {
        let file = match &mut self.file {
            Some(f) => f,
            None => {
                let (f, len) = open_append(&self.path)?;
                self.len = len;
                self.file.insert(f)
            }
        };
        if let Err(e) = file.write_all(bytes) {
            if file.set_len(self.len).is_err() {
                // Could not cut it back: reopen next time and go on from the real end.
                self.file = None;
            }
            return Err(e);
        }
        self.len += bytes.len() as u64;
        self.since_check += bytes.len() as u64;
        Ok(())
    }

    /// `agent.log` → `agent.log.1` (replacing it), then a new `agent.log`.
    fn rotate(&mut self) {
        let old = rotated(&self.path);
        self.file = None;
        if fs::rename(&self.path, &old).is_err() {
            // Cannot rotate (e.g. the directory became read-only): start over in place.
            if let Ok(f) = OpenOptions::new().write(true).open(&self.path) {
                let _ = f.set_len(0);
            }
        }
        self.len = 0;
    }

    /// Whether free space is below the reserve; checked at most every second or 64 KiB.
    fn low_on_space(&mut self) -> bool {
        let due = self
            .checked
            .is_none_or(|at| at.elapsed() >= CHECK_EVERY || self.since_check >= CHECK_EVERY_BYTES);
        if due {
            self.checked = Some(Instant::now());
            self.since_check = 0;
            let dir = self.path.parent().unwrap_or(Path::new("/"));
            // The field types differ between targets (u32 on some 32-bit ones).
            #[allow(clippy::unnecessary_cast)]
            if let Ok(st) = nix::sys::statvfs::statvfs(dir) {
                let unit = st.fragment_size() as u64;
                let free = st.blocks_available() as u64 * unit;
                let total = st.blocks() as u64 * unit;
                self.low = free < reserve(total);
            }
        }
        self.low
    }
}

/// `agent.log.1` next to `path`.
pub fn rotated(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".1");
    path.with_file_name(name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rotates_at_the_limit_and_keeps_one_older_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("agent.log");
        let mut log = LogFile::open(&path, 1000).unwrap();
        for i in 0..100 {
            log.write_line(
                format!("line {i:03} {}\n", "x".repeat(40)).as_bytes(),
                false,
            );
        }
        let now = fs::read_to_string(&path).unwrap();
        let older = fs::read_to_string(rotated(&path)).unwrap();
        assert!(now.len() <= 1000 && older.len() <= 1000);
        assert!(now.ends_with(&format!("line 099 {}\n", "x".repeat(40))));
        assert!(older.lines().all(|l| l.starts_with("line ")));
        let total: usize = fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().metadata().unwrap().len() as usize)
            .sum();
        assert!(total <= 2000, "{total} bytes on disk");
    }

    #[test]
    fn the_reserve_is_a_quarter_within_bounds() {
        assert_eq!(reserve(1024 * 1024), 256 * 1024);
        assert_eq!(reserve(8 * 1024 * 1024), 2 * 1024 * 1024);
        assert_eq!(reserve(1 << 40), 64 * 1024 * 1024);
    }
}
