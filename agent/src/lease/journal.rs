//! The lease journal `$RELAY_HOME/state/leases.journal`: append-only JSON lines of lease events.
//!
//! Why it exists: after a daemon restart the agent must be able to say "this PTY existed and ended
//! because the agent restarted" (proven dead) instead of "never heard of it" (DESIGN §4). On start
//! the journal is [`load`]ed and replayed into the new incarnation's [`LeaseTable`]; the caller
//! ends what the previous daemon left behind, and [`Journal::start`] rewrites the file with the
//! surviving records (temp file + rename, so a crash leaves either the old or the new journal).
//! The table bounds the ended history, so the rewrite does too.
//!
//! Robustness:
//! - A line that does not parse (a half-written last line after a crash, a line cut inside a
//!   multi-byte character, garbage) is skipped and logged with its line number; it never stops
//!   the daemon. Lines are read as bytes, never as one UTF-8 string.
//! - An append that fails (disk full) is cut back to the last complete line, so the next record
//!   never lands glued onto a partial one; if even that fails, the next append repairs first.
//! - The file holds command lines, so it is created with mode 0600.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use relay_protocol::{Binding, EndReason, ExitStatus, Incarnation, PtyId, TermSize};
use serde::{Deserialize, Serialize};

use crate::lease::{Lease, LeaseTable, Phase};
use crate::lifecycle::LeasePolicy;

/// Appended lines after which the journal is rewritten from the table while running.
const COMPACT_AFTER_LINES: usize = 10_000;

/// One journal line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "event", rename_all = "snake_case")]
pub enum Record {
    /// A PTY was spawned for a pane.
    Created {
        /// Pane and PTY.
        binding: Binding,
        /// Command line started.
        command: Vec<String>,
        /// Child pid.
        pid: Option<u32>,
        /// Size at creation.
        size: TermSize,
        /// Creation time, ms since the Unix epoch.
        at_ms: u64,
        /// The child's start time, clock ticks since boot (field 22 of `/proc/<pid>/stat`).
        /// Absent in records of older agents.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        start_ticks: Option<u64>,
        /// The lifecycle policy it was created under; absent = never ended by a timer (and in
        /// records of older agents).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        policy: Option<LeasePolicy>,
        /// Started with an explicit command (counts as used).
        #[serde(default, skip_serializing_if = "std::ops::Not::not")]
        explicit_command: bool,
    },
    /// A PTY ended.
    Ended {
        /// The PTY.
        pty: PtyId,
        /// Exit status, when known.
        exit: Option<ExitStatus>,
        /// Why.
        reason: EndReason,
        /// Output bytes produced.
        bytes_out: u64,
        /// Last output time, ms since the Unix epoch.
        last_output_ms: Option<u64>,
        /// End time, ms since the Unix epoch.
        at_ms: u64,
        /// What ended it and what the end did (absent in records of older agents).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        detail: Option<String>,
    },
    /// An end was requested (kill, `End`, the policy), written before the first signal so the
    /// reason survives a restart; undone by [`Record::EndCancelled`].
    Ending {
        /// The PTY.
        pty: PtyId,
        /// The reason the lease will record.
        reason: EndReason,
        /// Its detail.
        detail: String,
    },
    /// The requested end was not carried out (the lease changed before the signal).
    EndCancelled {
        /// The PTY.
        pty: PtyId,
    },
    /// What an end did, known after it (SIGKILL escalation, processes left in the session).
    Detail {
        /// The PTY.
        pty: PtyId,
        /// The full detail.
        detail: String,
    },
    /// A newer PTY replaced this one for its pane (`Replace`).
    Superseded {
        /// The PTY.
        pty: PtyId,
        /// When, ms since the Unix epoch.
        at_ms: u64,
    },
    /// Ended leases an operator pruned (`relayctl forget`).
    Forget {
        /// The PTYs.
        ptys: Vec<PtyId>,
    },
    /// A live PTY's output counters, so they survive a daemon that is killed (see
    /// [`crate::lease::counters`] for when this is written).
    Output {
        /// The PTY.
        pty: PtyId,
        /// Output bytes produced so far.
        bytes_out: u64,
        /// Last output time, ms since the Unix epoch.
        last_output_ms: Option<u64>,
    },
    /// The protect flag changed.
    Protect {
        /// The PTY.
        pty: PtyId,
        /// New value.
        protected: bool,
    },
}

/// What loading found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LoadReport {
    /// Records applied.
    pub records: usize,
    /// Lines skipped because they did not parse or did not fit the table.
    pub skipped: usize,
    /// Leases of earlier incarnations now ended as `AgentRestarted` (filled in by the caller).
    pub restarted: Vec<PtyId>,
}

/// The readable records of a journal file, in order, with their 1-based line numbers.
#[derive(Debug, Clone, Default)]
pub struct Loaded {
    records: Vec<(usize, Record)>,
    unreadable: usize,
}

/// Reads the journal at `path` (a missing file is empty). Lines that are not a record are skipped
/// with a warning naming the line number; they are counted in [`LoadReport::skipped`].
///
/// # Errors
/// IO errors opening or reading the file (not its contents), naming the path.
pub fn load(path: &Path) -> io::Result<Loaded> {
    let file = match File::open(path) {
        Ok(f) => f,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Loaded::default()),
        Err(e) => return Err(error(e, "open", path)),
    };
    let mut loaded = Loaded::default();
    for (i, line) in BufReader::new(file).split(b'\n').enumerate() {
        let line = line.map_err(|e| error(e, "read", path))?;
        let number = i + 1;
        if line.trim_ascii().is_empty() {
            continue;
        }
        match serde_json::from_slice::<Record>(&line) {
            Ok(rec) => loaded.records.push((number, rec)),
            Err(e) => {
                tracing::warn!(
                    "lease journal {} line {number}: skipped, not a readable record ({e}); \
                     a line cut short by a crash or a full disk looks like this",
                    path.display()
                );
                loaded.unreadable += 1;
            }
        }
    }
    Ok(loaded)
}

impl Loaded {
    /// Incarnations the records name, so a new daemon can pick one that never occurred before.
    pub fn incarnations(&self) -> HashSet<Incarnation> {
        self.records
            .iter()
            .filter_map(|(_, r)| match r {
                Record::Created { binding, .. } => Some(binding.pty.incarnation),
                _ => None,
            })
            .collect()
    }

    /// Replays the records into `table`; records that do not fit it (an end of an unknown PTY, a
    /// duplicate) are skipped with a warning naming the line.
    pub fn apply(self, table: &mut LeaseTable) -> LoadReport {
        let mut report = LoadReport {
            skipped: self.unreadable,
            ..LoadReport::default()
        };
        for (number, rec) in self.records {
            if apply(table, rec) {
                report.records += 1;
            } else {
                tracing::warn!(
                    "lease journal line {number}: skipped, it does not fit the earlier records \
                     (unknown or duplicate PTY)"
                );
                report.skipped += 1;
            }
        }
        report
    }
}

/// The open journal file.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    /// File length up to the last complete line.
    len: u64,
    /// A failed append could not be cut back; the next append does that first.
    torn: bool,
    appended: usize,
    sealed: bool,
}

impl Journal {
    /// Removes a temp file a crashed rewrite may have left, rewrites the journal at `path` from
    /// `table` (compacting it) and opens it for appending.
    ///
    /// # Errors
    /// IO errors rewriting or opening the journal, naming the path and the fix.
    pub fn start(path: &Path, table: &LeaseTable) -> io::Result<Self> {
        let tmp = tmp_path(path);
        match fs::remove_file(&tmp) {
            Ok(()) => tracing::info!("removed {} left by an interrupted rewrite", tmp.display()),
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(error(e, "remove", &tmp)),
        }
        rewrite(path, &records_of(table))?;
        let (file, len) = open_append(path)?;
        Ok(Journal {
            path: path.to_path_buf(),
            file,
            len,
            torn: false,
            appended: 0,
            sealed: false,
        })
    }

    /// The journal's path.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Appends one record as a line. Does nothing once [`Journal::seal`]ed. On failure the file is
    /// cut back to its last complete line (or repaired by the next append), so no partial line
    /// stays in front of later records.
    ///
    /// # Errors
    /// IO errors writing the line (e.g. disk full), naming the path and the fix.
    pub fn append(&mut self, rec: &Record) -> io::Result<()> {
        if self.sealed {
            return Ok(());
        }
        let mut line = serde_json::to_vec(rec).map_err(io::Error::other)?;
        line.push(b'\n');
        if self.torn {
            self.file
                .set_len(self.len)
                .map_err(|e| error(e, "cut the partial last line of", &self.path))?;
            self.torn = false;
        }
        if let Err(e) = self.file.write_all(&line) {
            // O_APPEND: the next write goes to the (cut back) end, i.e. a line boundary.
            self.torn = self.file.set_len(self.len).is_err();
            return Err(error(e, "append to", &self.path));
        }
        self.len += line.len() as u64;
        self.appended += 1;
        Ok(())
    }

    /// Whether enough was appended that a rewrite from the table is worthwhile.
    pub fn needs_compaction(&self) -> bool {
        !self.sealed && self.appended >= COMPACT_AFTER_LINES
    }

    /// Rewrites the journal from `table` (atomically) and continues appending to the new file.
    ///
    /// # Errors
    /// IO errors, naming the path and the fix; the old journal stays in place then.
    pub fn compact(&mut self, records: &[Record]) -> io::Result<()> {
        rewrite(&self.path, records)?;
        (self.file, self.len) = open_append(&self.path)?;
        self.torn = false;
        self.appended = 0;
        Ok(())
    }

    /// Flushes to disk and stops recording: nothing after this (the daemon is stopping) is
    /// written.
    ///
    /// # Errors
    /// IO errors of the final fsync, naming the path.
    pub fn seal(&mut self) -> io::Result<()> {
        self.sealed = true;
        self.file
            .sync_all()
            .map_err(|e| error(e, "flush", &self.path))
    }
}

/// Applies one record to the table. Returns false when it does not fit (unknown PTY, duplicate).
pub fn apply(table: &mut LeaseTable, rec: Record) -> bool {
    match rec {
        Record::Created {
            binding,
            command,
            pid,
            size,
            at_ms,
            start_ticks,
            policy,
            explicit_command,
        } => {
            // A pane cannot have two live PTYs: an older unended one died with its daemon.
            if let Some(old) = table.live(&binding.pane).map(|l| l.binding.pty) {
                table.end(&old, None, EndReason::AgentRestarted, at_ms);
            }
            let mut lease = Lease::live(binding, pid, command, at_ms);
            lease.size = size;
            lease.start_ticks = start_ticks;
            lease.policy = policy;
            lease.explicit_command = explicit_command;
            table.insert(lease).is_ok()
        }
        Record::Ended {
            pty,
            exit,
            reason,
            bytes_out,
            last_output_ms,
            at_ms,
            detail,
        } => {
            if table.get(&pty).is_none() {
                return false;
            }
            table.set_output(&pty, bytes_out, last_output_ms);
            table.end(&pty, exit, reason, at_ms);
            if let Some(detail) = detail {
                table.set_detail(&pty, detail);
            }
            true
        }
        Record::Ending {
            pty,
            reason,
            detail,
        } => table.mark_ending(&pty, reason, detail),
        Record::EndCancelled { pty } => table.cancel_ending(&pty),
        Record::Detail { pty, detail } => {
            // Empty: the sweep was finished by a later daemon, which knew nothing to add.
            if !detail.is_empty() {
                table.set_detail(&pty, detail);
            }
            table.confirm_end(&pty)
        }
        Record::Superseded { pty, at_ms } => table.supersede(&pty, at_ms),
        Record::Forget { ptys } => {
            table.forget(&ptys);
            true
        }
        Record::Protect { pty, protected } => table.set_protected(&pty, protected),
        Record::Output {
            pty,
            bytes_out,
            last_output_ms,
        } => {
            if table.get(&pty).is_none() {
                return false;
            }
            table.set_output(&pty, bytes_out, last_output_ms);
            true
        }
    }
}

/// The `Created` record of a lease.
pub fn created_record(l: &Lease) -> Record {
    Record::Created {
        binding: l.binding.clone(),
        command: l.command.clone(),
        pid: l.pid,
        size: l.size,
        at_ms: l.created_ms,
        start_ticks: l.start_ticks,
        policy: l.policy,
        explicit_command: l.explicit_command,
    }
}

/// The records that reproduce `table`'s leases.
pub fn records_of(table: &LeaseTable) -> Vec<Record> {
    let mut out = Vec::new();
    for l in table.leases() {
        out.push(created_record(l));
        if l.protected {
            out.push(Record::Protect {
                pty: l.binding.pty,
                protected: true,
            });
        }
        if l.phase == Phase::Superseded {
            out.push(Record::Superseded {
                pty: l.binding.pty,
                at_ms: l.since_ms,
            });
        }
        if let Some((reason, detail)) = &l.ending {
            out.push(Record::Ending {
                pty: l.binding.pty,
                reason: reason.clone(),
                detail: detail.clone(),
            });
        }
        let ended = matches!(l.phase, Phase::Ended { .. });
        if !ended && (l.bytes_out > 0 || l.last_output_ms.is_some()) {
            out.push(Record::Output {
                pty: l.binding.pty,
                bytes_out: l.bytes_out,
                last_output_ms: l.last_output_ms,
            });
        }
        if let Phase::Ended { exit, reason } = &l.phase {
            out.push(Record::Ended {
                pty: l.binding.pty,
                exit: exit.clone(),
                reason: reason.clone(),
                bytes_out: l.bytes_out,
                last_output_ms: l.last_output_ms,
                at_ms: l.since_ms,
                detail: l.detail.clone(),
            });
            if l.end_confirmed {
                out.push(Record::Detail {
                    pty: l.binding.pty,
                    detail: l.detail.clone().unwrap_or_default(),
                });
            }
        }
    }
    out
}

/// Adds what was being done, to which path, and the fix to an IO error of the journal.
pub fn error(e: io::Error, what: &str, path: &Path) -> io::Error {
    let dir = path.parent().unwrap_or(Path::new("/")).display();
    let fix = match e.raw_os_error() {
        Some(code) if code == nix::libc::ENOSPC || code == nix::libc::EDQUOT => {
            format!("free disk space in {dir} (or raise the quota) and retry")
        }
        Some(code)
            if code == nix::libc::EACCES
                || code == nix::libc::EPERM
                || code == nix::libc::EROFS =>
        {
            format!("make {dir} writable by this user and retry")
        }
        _ => format!("check {dir} and its file system"),
    };
    io::Error::new(e.kind(), format!("{what} {}: {e}; {fix}", path.display()))
}

fn tmp_path(path: &Path) -> PathBuf {
    path.with_extension("journal.tmp")
}

/// Opens `path` for appending (mode 0600 when created); returns it and its length in bytes.
/// Used for the journal and the agent's log file.
///
/// # Errors
/// As [`error`]: the operation, the path and the fix.
pub(crate) fn open_append(path: &Path) -> io::Result<(File, u64)> {
    let file = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(path)
        .map_err(|e| error(e, "open", path))?;
    let len = file
        .metadata()
        .map_err(|e| error(e, "inspect", path))?
        .len();
    Ok((file, len))
}

/// Writes `table` to `path` via a temp file (mode 0600), fsync and rename. A failed rewrite
/// removes its temp file and leaves the old journal in place.
fn rewrite(path: &Path, records: &[Record]) -> io::Result<()> {
    let tmp = tmp_path(path);
    let result = write_records(&tmp, records).and_then(|()| {
        fs::rename(&tmp, path).map_err(|e| error(e, &format!("rename {} to", tmp.display()), path))
    });
    if result.is_err() {
        let _ = fs::remove_file(&tmp);
        return result;
    }
    if let Some(dir) = path.parent() {
        File::open(dir)
            .and_then(|d| d.sync_all())
            .map_err(|e| error(e, "sync directory", dir))?;
    }
    Ok(())
}

fn write_records(tmp: &Path, records: &[Record]) -> io::Result<()> {
    let file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(tmp)
        .map_err(|e| error(e, "create", tmp))?;
    let mut out = io::BufWriter::new(file);
    for rec in records {
        serde_json::to_writer(&mut out, rec).map_err(|e| error(e.into(), "write", tmp))?;
        out.write_all(b"\n").map_err(|e| error(e, "write", tmp))?;
    }
    let file = out
        .into_inner()
        .map_err(|e| error(e.into_error(), "write", tmp))?;
    file.sync_all().map_err(|e| error(e, "sync", tmp))
}

#[cfg(test)]
mod tests;
