//! The lease journal `$RELAY_HOME/state/leases.journal`: append-only JSON lines of lease events.
//!
//! Why it exists: after a daemon restart the agent must be able to say "this PTY existed and ended
//! because the agent restarted" (proven dead) instead of "never heard of it" (DESIGN §4). On start
//! the journal is replayed into the new incarnation's [`LeaseTable`]; every lease of an earlier
//! incarnation that has no end record is ended with [`EndReason::AgentRestarted`] (exit unknown),
//! and the file is rewritten with the surviving records (temp file + rename, so a crash leaves
//! either the old or the new journal). The table bounds the ended history, so the rewrite does too.
//!
//! A line that does not parse (e.g. a half-written last line after a crash) is skipped and
//! counted; it never stops the daemon.

use std::collections::HashSet;
use std::fs::{self, File, OpenOptions};
use std::io::{self, BufRead, BufReader, Write};
use std::path::{Path, PathBuf};

use relay_protocol::{Binding, EndReason, ExitStatus, Incarnation, PtyId, TermSize};
use serde::{Deserialize, Serialize};

use crate::lease::{Lease, LeaseTable, Phase};
use crate::paths::annotate;

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
    /// Leases of earlier incarnations now ended as `AgentRestarted`.
    pub restarted: Vec<PtyId>,
}

/// The open journal file.
#[derive(Debug)]
pub struct Journal {
    path: PathBuf,
    file: File,
    appended: usize,
    sealed: bool,
}

impl Journal {
    /// Replays the journal at `path` (missing file = empty) into `table`, ends leases of
    /// earlier incarnations, rewrites the file compactly and opens it for appending.
    ///
    /// # Errors
    /// IO errors reading, rewriting or opening the journal, naming the path.
    pub fn open(
        path: &Path,
        table: &mut LeaseTable,
        now_ms: u64,
    ) -> io::Result<(Self, LoadReport)> {
        let mut report = LoadReport::default();
        match File::open(path) {
            Ok(f) => {
                for line in BufReader::new(f).lines() {
                    let line = line.map_err(|e| annotate(e, "read", path))?;
                    if line.trim().is_empty() {
                        continue;
                    }
                    let applied = serde_json::from_str::<Record>(&line)
                        .ok()
                        .is_some_and(|rec| apply(table, rec));
                    if applied {
                        report.records += 1;
                    } else {
                        report.skipped += 1;
                    }
                }
            }
            Err(e) if e.kind() == io::ErrorKind::NotFound => {}
            Err(e) => return Err(annotate(e, "open", path)),
        }
        report.restarted = table.end_previous_incarnations(now_ms);
        rewrite(path, table)?;
        let journal = Journal {
            path: path.to_path_buf(),
            file: open_append(path)?,
            appended: 0,
            sealed: false,
        };
        Ok((journal, report))
    }

    /// Incarnations named by the journal at `path` (missing file = none), so a new daemon can
    /// pick an incarnation that never occurred before.
    ///
    /// # Errors
    /// IO errors reading the journal.
    pub fn incarnations(path: &Path) -> io::Result<HashSet<Incarnation>> {
        let text = match fs::read_to_string(path) {
            Ok(t) => t,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(HashSet::new()),
            Err(e) => return Err(annotate(e, "read", path)),
        };
        Ok(text
            .lines()
            .filter_map(|l| serde_json::from_str::<Record>(l).ok())
            .filter_map(|r| match r {
                Record::Created { binding, .. } => Some(binding.pty.incarnation),
                _ => None,
            })
            .collect())
    }

    /// Appends one record as a line. Does nothing once [`Journal::seal`]ed.
    ///
    /// # Errors
    /// IO errors writing the line.
    pub fn append(&mut self, rec: &Record) -> io::Result<()> {
        if self.sealed {
            return Ok(());
        }
        let mut line = serde_json::to_vec(rec).map_err(io::Error::other)?;
        line.push(b'\n');
        self.file.write_all(&line)?;
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
    /// IO errors; the old journal stays in place then.
    pub fn compact(&mut self, table: &LeaseTable) -> io::Result<()> {
        rewrite(&self.path, table)?;
        self.file = open_append(&self.path)?;
        self.appended = 0;
        Ok(())
    }

    /// Flushes to disk and stops recording: events after this (PTYs ended by the daemon's own
    /// shutdown) are left out on purpose, so the next incarnation reports those leases as
    /// ended with [`EndReason::AgentRestarted`].
    ///
    /// # Errors
    /// IO errors of the final fsync.
    pub fn seal(&mut self) -> io::Result<()> {
        self.sealed = true;
        self.file.sync_all()
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
        } => {
            // A pane cannot have two live PTYs: an older unended one died with its daemon.
            if let Some(old) = table.live(&binding.pane).map(|l| l.binding.pty) {
                table.end(&old, None, EndReason::AgentRestarted, at_ms);
            }
            let mut lease = Lease::live(binding, pid, command, at_ms);
            lease.size = size;
            table.insert(lease).is_ok()
        }
        Record::Ended {
            pty,
            exit,
            reason,
            bytes_out,
            last_output_ms,
            at_ms,
        } => {
            if table.get(&pty).is_none() {
                return false;
            }
            table.set_output(&pty, bytes_out, last_output_ms);
            table.end(&pty, exit, reason, at_ms);
            true
        }
        Record::Protect { pty, protected } => table.set_protected(&pty, protected),
    }
}

/// The records that reproduce `table`'s leases.
pub fn records_of(table: &LeaseTable) -> Vec<Record> {
    let mut out = Vec::new();
    for l in table.leases() {
        out.push(Record::Created {
            binding: l.binding.clone(),
            command: l.command.clone(),
            pid: l.pid,
            size: l.size,
            at_ms: l.created_ms,
        });
        if l.protected {
            out.push(Record::Protect {
                pty: l.binding.pty,
                protected: true,
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
            });
        }
    }
    out
}

fn open_append(path: &Path) -> io::Result<File> {
    OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(|e| annotate(e, "open", path))
}

/// Writes `table` to `path` via a temp file, fsync and rename.
fn rewrite(path: &Path, table: &LeaseTable) -> io::Result<()> {
    let tmp = path.with_extension("journal.tmp");
    let mut out = io::BufWriter::new(File::create(&tmp).map_err(|e| annotate(e, "create", &tmp))?);
    for rec in records_of(table) {
        serde_json::to_writer(&mut out, &rec).map_err(io::Error::other)?;
        out.write_all(b"\n")?;
    }
    let file = out.into_inner().map_err(|e| e.into_error())?;
    file.sync_all()?;
    fs::rename(&tmp, path).map_err(|e| annotate(e, "rename journal to", path))?;
    if let Some(dir) = path.parent() {
        File::open(dir)?.sync_all()?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_protocol::{LeaseState, PaneKey};

    fn binding(leaf: &str, inc: u64, counter: u64) -> Binding {
        Binding {
            pane: PaneKey::new("w", "t", leaf),
            pty: PtyId {
                incarnation: Incarnation(inc),
                counter,
            },
        }
    }

    fn created(b: &Binding) -> Record {
        Record::Created {
            binding: b.clone(),
            command: vec!["sh".into()],
            pid: Some(42),
            size: TermSize::default(),
            at_ms: 1,
        }
    }

    #[test]
    fn restart_ends_unended_leases_and_keeps_ended_records() {
        let dir = std::env::temp_dir().join(format!("relay-journal-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("leases.journal");
        let live = binding("live", 1, 1);
        let done = binding("done", 1, 2);
        let exit = ExitStatus {
            code: 3,
            signal: None,
        };
        let mut text = String::new();
        for rec in [
            created(&live),
            created(&done),
            Record::Protect {
                pty: live.pty,
                protected: true,
            },
            Record::Ended {
                pty: done.pty,
                exit: Some(exit.clone()),
                reason: EndReason::Exited,
                bytes_out: 9,
                last_output_ms: Some(5),
                at_ms: 6,
            },
        ] {
            text += &serde_json::to_string(&rec).unwrap();
            text += "\n";
        }
        text += "{\"event\":\"crea"; // A torn last line.
        fs::write(&path, text).unwrap();

        let mut table = LeaseTable::new(Incarnation(2), 10);
        let (_j, report) = Journal::open(&path, &mut table, 100).unwrap();
        assert_eq!(report.records, 4);
        assert_eq!(report.skipped, 1);
        assert_eq!(report.restarted, vec![live.pty]);
        let rows: Vec<_> = table
            .leases()
            .map(|l| (l.binding.clone(), l.info()))
            .collect();
        assert_eq!(rows[0].0, done);
        assert_eq!(rows[0].1.exit, Some(exit));
        assert_eq!(rows[0].1.reason, Some(EndReason::Exited));
        assert_eq!(rows[0].1.bytes_out, 9);
        assert_eq!(rows[1].0, live);
        assert_eq!(rows[1].1.state, LeaseState::Ended);
        assert_eq!(rows[1].1.reason, Some(EndReason::AgentRestarted));
        assert_eq!(rows[1].1.exit, None);
        assert!(rows[1].1.protected);

        // The rewritten journal reproduces the same table in a third incarnation.
        let mut again = LeaseTable::new(Incarnation(3), 10);
        let (_j, report) = Journal::open(&path, &mut again, 200).unwrap();
        assert_eq!(report.skipped, 0);
        assert!(report.restarted.is_empty());
        let infos = |t: &LeaseTable| t.leases().map(|l| l.info()).collect::<Vec<_>>();
        assert_eq!(infos(&again), infos(&table));
        fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn sealed_journal_records_nothing() {
        let dir = std::env::temp_dir().join(format!("relay-journal-seal-{}", std::process::id()));
        fs::create_dir_all(&dir).unwrap();
        let path = dir.join("leases.journal");
        let mut table = LeaseTable::new(Incarnation(5), 10);
        let (mut j, _) = Journal::open(&path, &mut table, 0).unwrap();
        j.append(&created(&binding("a", 5, 1))).unwrap();
        j.seal().unwrap();
        j.append(&created(&binding("b", 5, 2))).unwrap();
        let text = fs::read_to_string(&path).unwrap();
        fs::remove_dir_all(&dir).unwrap();
        assert_eq!(text.lines().count(), 1, "{text}");
    }
}
