//! Size limits on what a request may store, and fitting the `ListLeases` reply into a frame.
//!
//! Sans-IO. Everything a `Create`/`Open` carries is kept on the lease, journaled and listed by
//! `ListLeases` for every client, so one client's huge pane key or command could otherwise make
//! that reply exceed the frame maximum for everyone (rule F) and bloat the journal. Limits:
//!
//! | what | limit |
//! |---|---|
//! | each pane key part (workspace, tab, leaf) | 1..=[`MAX_KEY_PART`] bytes, no NUL |
//! | command: sum of (argument bytes + 1) | [`MAX_COMMAND_BYTES`] |
//! | env: sum of (name + value bytes + 2) | [`MAX_ENV_BYTES`] |
//! | cwd | [`MAX_CWD_BYTES`] |
//! | term | [`MAX_TERM_BYTES`] |
//!
//! Worst case of one `LeaseInfo` row with these limits: pane 3 × (256 + 2), ids, times and
//! counters < 100 bytes, command ≤ 64 KiB plus under 1 KiB of length prefixes, exit status < 40:
//! about 66 KiB. 1000 ended leases plus the live ones can therefore still exceed the 1 MiB frame, so
//! [`fit_leases`] caps the reply: it keeps live leases before ended ones and newer before older,
//! and the caller logs how many were left out.
//!
//! Incomplete request frames of all connections share one memory budget ([`FrameBudget`]) and
//! each has a time limit ([`DEFAULT_FRAME_TIMEOUT`]); the daemon's frame reader applies them.

use std::sync::Arc;
use std::time::Duration;

use relay_protocol::message::{Inspected, LeaseRow, Leases, PolicyInfo};
use relay_protocol::{
    ErrorReply, LeaseInfo, LeaseState, Message, PaneKey, Response, SpawnSpec, TermSize,
};
use tokio::sync::Semaphore;

/// Longest pane key part (workspace, tab or leaf), in bytes.
pub const MAX_KEY_PART: usize = 256;
/// Largest command line: the sum over arguments of (bytes + 1).
pub const MAX_COMMAND_BYTES: usize = 64 * 1024;
/// Largest extra environment: the sum over variables of (name + value bytes + 2).
pub const MAX_ENV_BYTES: usize = 64 * 1024;
/// Longest working directory, in bytes (Linux `PATH_MAX`).
pub const MAX_CWD_BYTES: usize = 4096;
/// Longest `TERM` value, in bytes.
pub const MAX_TERM_BYTES: usize = 256;
/// Most columns a PTY may have. Every PTY's terminal model holds its grid (32 bytes per cell), so
/// an unbounded size would let one request exhaust the daemon's memory and end every shell.
/// 1,000 columns is more than an 8K display shows with a 6-pixel font.
pub const MAX_COLS: u16 = 1000;
/// Most rows a PTY may have (see [`MAX_COLS`]); at the limits a grid is 32 MB.
pub const MAX_ROWS: u16 = 1000;

/// Checks a pane key's parts.
///
/// # Errors
/// [`ErrorReply::BadRequest`] for an empty part or one containing NUL,
/// [`ErrorReply::LimitExceeded`] for a part longer than [`MAX_KEY_PART`] bytes; both name the part.
pub fn check_pane(pane: &PaneKey) -> Result<(), ErrorReply> {
    for (name, part) in [
        ("workspace", &pane.workspace.0),
        ("tab", &pane.tab),
        ("leaf", &pane.leaf),
    ] {
        if part.is_empty() {
            return Err(ErrorReply::BadRequest {
                message: format!(
                    "pane key {name} is empty; give 1 to {MAX_KEY_PART} bytes without NUL"
                ),
            });
        }
        if part.contains('\0') {
            return Err(ErrorReply::BadRequest {
                message: format!(
                    "pane key {name} contains a NUL byte; give 1 to {MAX_KEY_PART} bytes without NUL"
                ),
            });
        }
        too_long(&format!("pane key {name}"), part.len(), MAX_KEY_PART)?;
    }
    Ok(())
}

/// Checks the sizes in a spawn spec.
///
/// # Errors
/// [`ErrorReply::LimitExceeded`] naming the field (command, env, cwd, term) and its limit.
pub fn check_spec(spec: &SpawnSpec) -> Result<(), ErrorReply> {
    let command: usize = spec.command.iter().map(|a| a.len() + 1).sum();
    too_long(
        "command (sum of argument bytes + 1 each)",
        command,
        MAX_COMMAND_BYTES,
    )?;
    let env: usize = spec.env.iter().map(|(k, v)| k.len() + v.len() + 2).sum();
    too_long(
        "env (sum of name + value bytes + 2 each)",
        env,
        MAX_ENV_BYTES,
    )?;
    if let Some(cwd) = &spec.cwd {
        too_long("cwd", cwd.len(), MAX_CWD_BYTES)?;
    }
    if let Some(term) = &spec.term {
        too_long("term", term.len(), MAX_TERM_BYTES)?;
    }
    check_size(spec.size)
}

/// Checks a terminal size against [`MAX_COLS`] × [`MAX_ROWS`] (0 is refused elsewhere or taken
/// as the default).
///
/// # Errors
/// [`ErrorReply::LimitExceeded`] naming the dimension and its limit.
pub fn check_size(size: TermSize) -> Result<(), ErrorReply> {
    for (what, value, limit) in [
        ("columns", size.cols, MAX_COLS),
        ("rows", size.rows, MAX_ROWS),
    ] {
        if value > limit {
            return Err(ErrorReply::LimitExceeded {
                what: format!("terminal size of {value} {what}"),
                limit: u64::from(limit),
            });
        }
    }
    Ok(())
}

fn too_long(what: &str, len: usize, limit: usize) -> Result<(), ErrorReply> {
    if len <= limit {
        return Ok(());
    }
    Err(ErrorReply::LimitExceeded {
        what: format!("{what} of {len} bytes"),
        limit: limit as u64,
    })
}

/// Encoded size (the frame body: envelope and reply) of a `Leases` reply holding `leases`.
fn reply_size(reply: Response) -> usize {
    // The largest possible id, so the real reply is never larger.
    Message::Response(u64::MAX, reply).to_bytes().len()
}

/// Trims `leases` (sorted for the reply) so that the `Leases` reply fits in `max_frame` bytes.
/// Keeps live leases before ended ones, then newer (by `since_ms`) before older, and returns the
/// kept ones in their original order with the number left out.
pub fn fit_leases(leases: Vec<LeaseInfo>, max_frame: u32) -> (Vec<LeaseInfo>, usize) {
    fit(
        leases,
        max_frame,
        |l| l,
        |leases| reply_size(Response::Leases(Leases { leases })),
    )
}

/// As [`fit_leases`] for the rows of an `Inspected` reply.
pub fn fit_rows(rows: Vec<LeaseRow>, max_frame: u32) -> (Vec<LeaseRow>, usize) {
    fit(
        rows,
        max_frame,
        |r| &r.info,
        |leases| {
            // The largest values of the fixed fields, so the real reply is never larger.
            reply_size(Response::Inspected(Inspected {
                policy: PolicyInfo {
                    unused_grace_ms: Some(u64::MAX),
                    idle_expiry_ms: Some(u64::MAX),
                    suggest_after_ms: u64::MAX,
                },
                rss_bytes: u64::MAX,
                leases,
                left_out: u32::MAX,
            }))
        },
    )
}

fn fit<T: Clone>(
    rows: Vec<T>,
    max_frame: u32,
    info: impl Fn(&T) -> &LeaseInfo,
    size: impl Fn(Vec<T>) -> usize,
) -> (Vec<T>, usize) {
    let max = max_frame as usize;
    if size(rows.clone()) <= max {
        return (rows, 0);
    }
    let mut order: Vec<usize> = (0..rows.len()).collect();
    order.sort_by_key(|&i| {
        let l = info(&rows[i]);
        (l.state == LeaseState::Ended, std::cmp::Reverse(l.since_ms))
    });
    let empty = size(Vec::new());
    let mut used = empty + 4; // + room for a longer list length prefix.
    let mut keep = vec![false; rows.len()];
    for i in order {
        let row = size(vec![rows[i].clone()]) - empty;
        if used + row <= max {
            used += row;
            keep[i] = true;
        }
    }
    let count = rows.len();
    let kept: Vec<T> = rows
        .into_iter()
        .zip(keep)
        .filter_map(|(l, k)| k.then_some(l))
        .collect();
    let left_out = count - kept.len();
    (kept, left_out)
}

/// Default budget for the bodies of incomplete frames across all connections (64 MiB).
pub const DEFAULT_INCOMPLETE_FRAMES_BYTES: usize = 64 * 1024 * 1024;

/// Default time a frame may take to arrive once its first byte did (60 s: 1 MiB at 17 KB/s).
pub const DEFAULT_FRAME_TIMEOUT: Duration = Duration::from_secs(60);

/// The memory all connections' incomplete frame bodies may hold together. Cheap to clone.
#[derive(Debug, Clone)]
pub struct FrameBudget {
    pub(crate) room: Arc<Semaphore>,
    total: usize,
}

impl FrameBudget {
    /// A budget of `bytes`.
    pub fn new(bytes: usize) -> Self {
        FrameBudget {
            room: Arc::new(Semaphore::new(bytes.min(Semaphore::MAX_PERMITS))),
            total: bytes,
        }
    }

    /// Bytes currently held by incomplete frames.
    pub fn held(&self) -> usize {
        self.total.saturating_sub(self.room.available_permits())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use relay_protocol::{Binding, Incarnation, PtyId, TermSize};

    fn leases_size(leases: Vec<LeaseInfo>) -> usize {
        reply_size(Response::Leases(Leases { leases }))
    }

    #[test]
    fn pane_key_parts_are_checked() {
        let long = "x".repeat(MAX_KEY_PART + 1);
        let max = "x".repeat(MAX_KEY_PART);
        let cases: &[(PaneKey, Option<&str>)] = &[
            (PaneKey::new("w", "t", "l"), None),
            (PaneKey::new(max.as_str(), max.as_str(), max.as_str()), None),
            (
                PaneKey::new(long.as_str(), "t", "l"),
                Some("LimitExceeded workspace"),
            ),
            (
                PaneKey::new("w", long.as_str(), "l"),
                Some("LimitExceeded tab"),
            ),
            (
                PaneKey::new("w", "t", long.as_str()),
                Some("LimitExceeded leaf"),
            ),
            (PaneKey::new("", "t", "l"), Some("BadRequest workspace")),
            (PaneKey::new("w", "", "l"), Some("BadRequest tab")),
            (PaneKey::new("w", "t", "a\0b"), Some("BadRequest leaf")),
        ];
        for (pane, want) in cases {
            let got = check_pane(pane).err().map(|e| match e {
                ErrorReply::LimitExceeded { what, limit } => {
                    assert_eq!(limit, MAX_KEY_PART as u64);
                    format!("LimitExceeded {}", what.split_whitespace().nth(2).unwrap())
                }
                ErrorReply::BadRequest { message } => {
                    format!("BadRequest {}", message.split_whitespace().nth(2).unwrap())
                }
                other => panic!("unexpected {other:?}"),
            });
            assert_eq!(got.as_deref(), *want, "pane {:?}", pane.leaf.len());
        }
    }

    #[test]
    fn terminal_sizes_are_bounded() {
        let size = |cols, rows| TermSize { cols, rows };
        assert_eq!(check_size(size(1000, 1000)), Ok(()));
        assert_eq!(check_size(size(80, 24)), Ok(()));
        for (bad, what) in [(size(1001, 24), "columns"), (size(80, 65535), "rows")] {
            match check_size(bad) {
                Err(ErrorReply::LimitExceeded {
                    what: w,
                    limit: 1000,
                }) => {
                    assert!(w.contains(what), "{w}")
                }
                other => panic!("{bad:?}: {other:?}"),
            }
        }
        let spec = SpawnSpec {
            size: size(65535, 65535),
            ..SpawnSpec::default()
        };
        assert!(matches!(
            check_spec(&spec),
            Err(ErrorReply::LimitExceeded { .. })
        ));
    }

    #[test]
    fn spec_sizes_are_checked() {
        let ok = SpawnSpec {
            command: vec!["x".repeat(MAX_COMMAND_BYTES - 1)],
            env: vec![("K".into(), "v".repeat(MAX_ENV_BYTES - 3))],
            cwd: Some("/".repeat(MAX_CWD_BYTES)),
            term: Some("t".repeat(MAX_TERM_BYTES)),
            ..SpawnSpec::default()
        };
        assert_eq!(check_spec(&ok), Ok(()));
        let field = |spec: SpawnSpec| match check_spec(&spec) {
            Err(ErrorReply::LimitExceeded { what, limit }) => {
                (what.split_whitespace().next().unwrap().to_string(), limit)
            }
            other => panic!("expected LimitExceeded, got {other:?}"),
        };
        let many_args = SpawnSpec {
            command: vec![String::new(); MAX_COMMAND_BYTES + 1],
            ..SpawnSpec::default()
        };
        assert_eq!(
            field(many_args),
            ("command".into(), MAX_COMMAND_BYTES as u64)
        );
        let env = SpawnSpec {
            env: vec![("K".into(), "v".repeat(MAX_ENV_BYTES))],
            ..SpawnSpec::default()
        };
        assert_eq!(field(env), ("env".into(), MAX_ENV_BYTES as u64));
        let cwd = SpawnSpec {
            cwd: Some("/".repeat(MAX_CWD_BYTES + 1)),
            ..SpawnSpec::default()
        };
        assert_eq!(field(cwd), ("cwd".into(), MAX_CWD_BYTES as u64));
        let term = SpawnSpec {
            term: Some("t".repeat(MAX_TERM_BYTES + 1)),
            ..SpawnSpec::default()
        };
        assert_eq!(field(term), ("term".into(), MAX_TERM_BYTES as u64));
    }

    fn lease(leaf: &str, counter: u64, state: LeaseState, since_ms: u64) -> LeaseInfo {
        let binding = Binding {
            pane: PaneKey::new("w".repeat(MAX_KEY_PART), "t", leaf),
            pty: PtyId {
                incarnation: Incarnation(1),
                counter,
            },
        };
        LeaseInfo {
            since_ms,
            command: vec!["c".repeat(MAX_COMMAND_BYTES - 1)],
            ..relay_testkit::lease(binding, state)
        }
    }

    /// The worst case of the limits (1000 ended leases with maximal commands, plus live ones)
    /// exceeds 1 MiB; the reply is cut to fit, keeping live leases, then the newest ended ones.
    #[test]
    fn lease_list_is_cut_to_the_frame_keeping_live_and_newest() {
        let max = relay_protocol::DEFAULT_MAX_FRAME;
        let mut all: Vec<LeaseInfo> = (0..1000)
            .map(|i| lease(&format!("e{i:04}"), i, LeaseState::Ended, i))
            .collect();
        all.push(lease("live-a", 2000, LeaseState::Detached, 1));
        all.push(lease("live-b", 2001, LeaseState::Attached, 2));
        assert!(
            leases_size(all.clone()) > max as usize,
            "the worst case exceeds the frame"
        );
        let (kept, left_out) = fit_leases(all.clone(), max);
        assert_eq!(kept.len() + left_out, all.len());
        assert!(left_out > 0);
        assert!(leases_size(kept.clone()) <= max as usize);
        let leaves: Vec<&str> = kept.iter().map(|l| l.binding.pane.leaf.as_str()).collect();
        assert!(leaves.contains(&"live-a") && leaves.contains(&"live-b"));
        // The ended ones kept are the newest, in the original order.
        let ended: Vec<u64> = kept
            .iter()
            .filter(|l| l.state == LeaseState::Ended)
            .map(|l| l.since_ms)
            .collect();
        let newest: Vec<u64> = ((1000 - ended.len() as u64)..1000).collect();
        assert_eq!(ended, newest);
        // A list that fits is untouched.
        let small = all[..3].to_vec();
        assert_eq!(fit_leases(small.clone(), max), (small, 0));
    }
}
