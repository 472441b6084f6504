//! Live upgrade: the daemon hands its running PTYs to a new agent binary in the same process.
//!
//! The daemon stops its PTY readers, writes its state (this module's [`Handover`]) to a memory
//! file, clears `FD_CLOEXEC` on the PTY masters, the listening socket and the daemon lock, and
//! `execve`s the new binary with `daemon --resume-fd N`. The pid stays the same, so the shells
//! stay its children (exit statuses are still reaped by pid) and their PTY ids, offsets and
//! leases continue; clients lose their connection and re-attach (the connector's supervisor
//! does it by itself). What the lease book knows comes from the journal, as on any start, with
//! the incarnation kept; what lives only in memory (rings, models, input seqs, detach times, the
//! highest PTY id minted) comes from the state file.
//!
//! Fail safe: before anything is handed over, the new binary is run twice as a child —
//! `handover-info` (its version and the state versions it reads: [`version::decide`] applies the
//! rules) and `handover-check --fd N` on the written state — and only when both succeed does the
//! daemon `execve`. If `execve` fails, the old code resumes its readers and keeps serving; if the
//! new code still fails before it has adopted every PTY (it cannot read the state, it panics, it
//! crashes on a signal), it `fexecve`s the old binary (kept open) with it ([`rescue`]).
//!
//! Layout: here the format; `version.rs` the version rules and installed binaries (sans-IO but
//! for the directory scan); `probe.rs` running the new binary, writing the state, `execve`;
//! `state.rs` the state side (the order, the cut, resuming); `pty.rs` what a PTY hands over;
//! `rescue.rs` the new code's way back to the old binary when it fails while resuming.
//! A terminal model's part of the format, [`HandedScreen`], is the screen's own
//! ([`crate::output::screen`]).

pub mod probe;
pub mod pty;
pub mod rescue;
pub mod state;
pub mod version;

pub use crate::output::screen::pty_screen::HandedScreen;
pub use state::DaemonFds;

use std::io;
use std::os::fd::RawFd;

use relay_protocol::{Binding, Incarnation, PtyId, TermSize};
use serde::{Deserialize, Serialize};

use crate::pty::input_seq::WriterTable;

/// Version of the state format this build writes. Raised whenever [`Handover`] changes shape.
///
/// - 1: the [`Handover`] body.
/// - 2: then [`AddedIn2`] (the highest PTY counter minted), as a second postcard value.
/// - 3: then [`AddedIn3`] (lossless consumers' holds), as a third.
pub const STATE_VERSION: u32 = 3;
/// Oldest state format this build reads (a newer binary keeps reading older formats it knows).
pub const OLDEST_READABLE: u32 = 1;

/// The first bytes of a state file.
const MAGIC: &[u8; 8] = b"RLYHNDVR";

/// Everything a new daemon needs that the journal does not hold.
#[derive(Debug, Serialize, Deserialize)]
pub struct Handover {
    /// Version of the agent that wrote it.
    pub from_version: String,
    /// The daemon's incarnation: it continues (PTY ids stay valid).
    pub incarnation: Incarnation,
    /// When the daemon started (ms since the Unix epoch); `Status` keeps reporting it.
    pub started_ms: u64,
    /// The listening socket (`run/agent.sock`), bound and listening.
    pub listener_fd: RawFd,
    /// The daemon lock (`run/daemon.lock`), flocked.
    pub lock_fd: RawFd,
    /// Every running PTY (live or superseded).
    pub ptys: Vec<HandedPty>,
    /// When each of those leases entered its current state (detach times are not journaled).
    pub since_ms: Vec<(PtyId, u64)>,
    /// What state version 2 added; `None` in a version-1 state (written by an older agent).
    /// Encoded after the body (see [`STATE_VERSION`]), so a version-1 body reads unchanged.
    #[serde(skip)]
    pub added_in_2: Option<AddedIn2>,
    /// What state version 3 added; `None` in an older state.
    #[serde(skip)]
    pub added_in_3: Option<AddedIn3>,
}

/// The fields state version 2 appended to a [`Handover`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddedIn2 {
    /// The highest PTY counter this incarnation has minted. The journal cannot say it once the
    /// leases with the highest ids were forgotten and the journal rewritten without them, and a
    /// PTY id is never given out twice (DESIGN §2), so the new code mints above this.
    pub last_counter: u64,
}

/// The fields state version 3 appended to a [`Handover`].
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct AddedIn3 {
    /// Lossless consumers' holds per PTY, `(client id, floor offset)` (see
    /// [`crate::output::hold`]): the new code holds those bytes until the clients re-attach or the
    /// holds lapse, so a piped command loses nothing to an upgrade.
    pub holds: Vec<(PtyId, Vec<(String, u64)>)>,
}

/// One running PTY.
#[derive(Debug, Serialize, Deserialize)]
pub struct HandedPty {
    /// Its binding.
    pub binding: Binding,
    /// The child's pid.
    pub pid: u32,
    /// The master descriptor, open across `execve`.
    pub master_fd: RawFd,
    /// Size (columns × rows).
    pub size: TermSize,
    /// Absolute offset of the first ring byte.
    pub ring_start: u64,
    /// Ring capacity in bytes.
    pub ring_capacity: u64,
    /// The ring's bytes; the output end offset is `ring_start + ring.len()`.
    pub ring: Vec<u8>,
    /// The terminal model, when on.
    pub screen: Option<HandedScreen>,
    /// The child's start time (clock ticks since boot).
    pub start_ticks: Option<u64>,
    /// Last output, ms since the Unix epoch (0: never).
    pub last_output_ms: u64,
    /// Last input, ms since the Unix epoch (0: never).
    pub last_input_ms: u64,
    /// Replaced by a newer PTY for its pane.
    pub superseded: bool,
    /// Last applied `InputSeq` per writer (a resent input stays written once).
    pub input_seq: WriterTable,
}

/// Why a state file cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum StateError {
    /// Not a state file at all.
    #[error("not a relay handover state (bad magic)")]
    NotState,
    /// Written in a format this build does not read.
    #[error(
        "handover state version {found} cannot be read by this agent (it reads \
         {OLDEST_READABLE}..={STATE_VERSION})"
    )]
    Version {
        /// The file's version.
        found: u32,
    },
    /// The body does not decode.
    #[error("handover state is damaged: {0}")]
    Body(#[from] postcard::Error),
    /// Reading the file failed.
    #[error("reading the handover state failed: {0}")]
    Io(#[from] io::Error),
}

/// Encodes `h`: magic, the format version (u32 LE), the postcard body, then each later
/// version's additions as postcard values of their own (see [`STATE_VERSION`]).
pub fn encode(h: &Handover) -> Vec<u8> {
    let mut out = MAGIC.to_vec();
    out.extend_from_slice(&STATE_VERSION.to_le_bytes());
    // Infallible for these types (no maps with non-string keys, no unsized sequences).
    out.extend_from_slice(&postcard::to_allocvec(h).unwrap_or_default());
    let added = h.added_in_2.unwrap_or(AddedIn2 { last_counter: 0 });
    out.extend_from_slice(&postcard::to_allocvec(&added).unwrap_or_default());
    let added = h.added_in_3.clone().unwrap_or_default();
    out.extend_from_slice(&postcard::to_allocvec(&added).unwrap_or_default());
    out
}

/// Decodes a state file.
///
/// # Errors
/// [`StateError`]: not a state file, a version outside [`OLDEST_READABLE`]..=[`STATE_VERSION`],
/// or a damaged body.
pub fn decode(bytes: &[u8]) -> Result<Handover, StateError> {
    let rest = bytes.strip_prefix(MAGIC).ok_or(StateError::NotState)?;
    let (version, body) = rest.split_at_checked(4).ok_or(StateError::NotState)?;
    let found = u32::from_le_bytes(version.try_into().map_err(|_| StateError::NotState)?);
    if !(OLDEST_READABLE..=STATE_VERSION).contains(&found) {
        return Err(StateError::Version { found });
    }
    let (mut handover, rest): (Handover, _) = postcard::take_from_bytes(body)?;
    if found >= 2 {
        let (added, rest) = postcard::take_from_bytes(rest)?;
        handover.added_in_2 = Some(added);
        if found >= 3 {
            handover.added_in_3 = Some(postcard::take_from_bytes(rest)?.0);
        }
    }
    Ok(handover)
}

/// `handover-check --fd N`: reads and decodes the state at descriptor `fd` (inherited from the
/// daemon probing this binary). Returns the number of PTYs in it.
///
/// # Errors
/// The [`StateError`].
pub fn check_fd(fd: RawFd) -> Result<usize, StateError> {
    // Safety: the probing daemon left this descriptor open for this process; it is only read.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(fd) };
    let bytes = probe::read_state(fd)?;
    Ok(decode(&bytes)?.ptys.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Handover {
        Handover {
            from_version: "0.1.0".into(),
            incarnation: Incarnation(7),
            started_ms: 1,
            listener_fd: 3,
            lock_fd: 4,
            ptys: vec![],
            since_ms: vec![],
            added_in_2: Some(AddedIn2 { last_counter: 42 }),
            added_in_3: Some(AddedIn3 {
                holds: vec![(
                    PtyId {
                        incarnation: Incarnation(7),
                        counter: 3,
                    },
                    vec![("relay-cli/9".into(), 4096)],
                )],
            }),
        }
    }

    #[test]
    fn a_state_round_trips() {
        let back = decode(&encode(&sample())).unwrap();
        assert_eq!(back.incarnation, Incarnation(7));
        assert_eq!((back.listener_fd, back.lock_fd), (3, 4));
        assert_eq!(back.added_in_2, Some(AddedIn2 { last_counter: 42 }));
        assert_eq!(back.added_in_3, sample().added_in_3);
    }

    /// A version-1 state (an older agent handing over to this one) is its body alone: it reads,
    /// with nothing of version 2.
    #[test]
    fn a_version_1_state_reads_without_the_counter() {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&1u32.to_le_bytes());
        bytes.extend_from_slice(&postcard::to_allocvec(&sample()).unwrap());
        let back = decode(&bytes).unwrap();
        assert_eq!(back.incarnation, Incarnation(7));
        assert_eq!(back.added_in_2, None);
        // A version-2 state without its addition is damaged, not silently counter-less.
        bytes[8..12].copy_from_slice(&2u32.to_le_bytes());
        assert!(matches!(decode(&bytes), Err(StateError::Body(_))));
        // A version-2 state (this agent's previous format) reads without holds.
        bytes.extend_from_slice(&postcard::to_allocvec(&AddedIn2 { last_counter: 5 }).unwrap());
        let back = decode(&bytes).unwrap();
        assert_eq!(back.added_in_2, Some(AddedIn2 { last_counter: 5 }));
        assert_eq!(back.added_in_3, None);
    }

    #[test]
    fn unknown_versions_and_other_files_are_refused_by_name() {
        let mut bytes = encode(&sample());
        bytes[8..12].copy_from_slice(&(STATE_VERSION + 1).to_le_bytes());
        let e = decode(&bytes).unwrap_err();
        assert!(
            matches!(e, StateError::Version { found } if found == STATE_VERSION + 1),
            "{e}"
        );
        assert!(matches!(decode(b"#!/bin/sh\n"), Err(StateError::NotState)));
        let mut cut = encode(&sample());
        cut.truncate(14);
        assert!(matches!(decode(&cut), Err(StateError::Body(_))));
    }
}
