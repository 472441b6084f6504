//! Golden rows for the error reply: one per `ErrorReply` kind, and both shapes of the optional
//! fields. Split from `mod.rs` only to keep the table readable; same helpers, same rules.

use super::*;

/// Error reply samples, in `ErrorReply` variant order.
pub fn error_cases() -> Vec<Golden> {
    vec![
        golden(
            "error_not_found",
            err(4, ErrorReply::NotFound { pane: pane() }),
            "04 ffff03 0b 00 03617069027431026c32",
        ),
        golden(
            "error_ended_killed",
            err(
                4,
                ErrorReply::Ended {
                    pane: pane(),
                    pty: pty(7),
                    exit: Some(ExitStatus {
                        code: 1,
                        signal: Some("Hangup".into()),
                    }),
                    reason: EndReason::Killed,
                },
            ),
            concat!(
                "04 ffff03 20 01 03617069027431026c32 ef9bafcdf8acd1910107 ",
                "0101 010648616e677570 01",
            ),
        ),
        golden(
            "error_ended_agent_restarted",
            err(
                4,
                ErrorReply::Ended {
                    pane: pane(),
                    pty: pty(7),
                    exit: None,
                    reason: EndReason::AgentRestarted,
                },
            ),
            "04 ffff03 17 01 03617069027431026c32 ef9bafcdf8acd1910107 00 02",
        ),
        golden(
            "error_ended_expired",
            err(
                4,
                ErrorReply::Ended {
                    pane: pane(),
                    pty: pty(7),
                    exit: Some(ExitStatus {
                        code: 1,
                        signal: Some("Hangup".into()),
                    }),
                    reason: EndReason::Expired,
                },
            ),
            concat!(
                "04 ffff03 20 01 03617069027431026c32 ef9bafcdf8acd1910107 ",
                "0101 010648616e677570 03",
            ),
        ),
        golden(
            "error_ended_forgotten",
            err(
                4,
                ErrorReply::Ended {
                    pane: pane(),
                    pty: pty(7),
                    exit: None,
                    reason: EndReason::Forgotten,
                },
            ),
            "04 ffff03 17 01 03617069027431026c32 ef9bafcdf8acd1910107 00 04",
        ),
        golden(
            "error_mismatch",
            err(
                6,
                ErrorReply::Mismatch {
                    pane: pane(),
                    expected: pty(7),
                    current: Some(pty(8)),
                },
            ),
            concat!(
                "06 ffff03 20 02 03617069027431026c32 ef9bafcdf8acd1910107 ",
                "01ef9bafcdf8acd1910108",
            ),
        ),
        golden(
            "error_mismatch_no_live_pty",
            err(
                6,
                ErrorReply::Mismatch {
                    pane: pane(),
                    expected: pty(7),
                    current: None,
                },
            ),
            "06 ffff03 16 02 03617069027431026c32 ef9bafcdf8acd1910107 00",
        ),
        golden(
            "error_unsupported",
            err(14, ErrorReply::Unsupported { op: 0x0042 }),
            "0e ffff03 02 03 42",
        ),
        golden(
            "error_limit_exceeded",
            err(
                6,
                ErrorReply::LimitExceeded {
                    what: "input".into(),
                    limit: 1024 * 1024,
                },
            ),
            "06 ffff03 0a 04 05696e707574 808040",
        ),
        golden(
            "error_bad_request",
            err(
                15,
                ErrorReply::BadRequest {
                    message: "empty pane key".into(),
                },
            ),
            "0f ffff03 10 05 0e656d7074792070616e65206b6579",
        ),
        golden(
            "error_spawn_failed",
            err(
                3,
                ErrorReply::SpawnFailed {
                    message: "cwd /nope: not a directory".into(),
                },
            ),
            concat!(
                "03 ffff03 1c 06 ",
                "1a637764202f6e6f70653a206e6f742061206469726563746f7279",
            ),
        ),
        golden(
            "error_incompatible",
            err(
                1,
                ErrorReply::Incompatible {
                    message: "connector speaks 2.0, agent 1.0".into(),
                },
            ),
            concat!(
                "01 ffff03 21 07 ",
                "1f636f6e6e6563746f7220737065616b7320322e302c206167656e7420312e30",
            ),
        ),
        golden(
            "error_internal",
            err(
                9,
                ErrorReply::Internal {
                    message: "journal write failed".into(),
                },
            ),
            "09 ffff03 16 08 146a6f75726e616c207772697465206661696c6564",
        ),
    ]
}
