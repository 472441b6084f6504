//! Golden rows for the lifecycle operations (protocol 1.4, capability `lifecycle`): requests and
//! their responses, with every variant of `Tag`, `EndWhen` and `EndOutcome`. Split from `mod.rs`
//! only to keep the table readable; same helpers, same rules.

use relay_protocol::message::{
    End, EndOutcome, EndReport, EndResult, EndWhen, Forget, Forgot, Inspect, Inspected, LeaseRow,
    PolicyInfo, Replace, SetPolicy, Tag,
};

use super::*;

/// A lease row around [`lease`] with no lifecycle facts.
fn row(pty_counter: u64, state: LeaseState, tag: Tag) -> LeaseRow {
    LeaseRow {
        info: lease(pty_counter, state),
        tag,
        detail: None,
        used: false,
        last_input_ms: None,
        policy: None,
    }
}

/// Lifecycle samples, in op-code order (requests, then responses).
pub fn lifecycle_cases() -> Vec<Golden> {
    vec![
        // ---- requests ----
        golden(
            "set_policy",
            req(
                24,
                Request::SetPolicy(SetPolicy {
                    spec: "unused=10m;idle=off".into(),
                }),
            ),
            "18 1f 14 13756e757365643d31306d3b69646c653d6f6666",
        ),
        golden(
            "set_policy_defaults",
            req(
                24,
                Request::SetPolicy(SetPolicy {
                    spec: String::new(),
                }),
            ),
            "18 1f 01 00",
        ),
        golden("inspect", req(25, Request::Inspect(Inspect {})), "19 20 00"),
        golden(
            "end_always",
            req(
                26,
                Request::End(End {
                    targets: vec![binding()],
                    when: EndWhen::Always,
                }),
            ),
            "1a 21 16 01 03617069027431026c32ef9bafcdf8acd1910107 00",
        ),
        golden(
            "end_unprotected",
            req(
                26,
                Request::End(End {
                    targets: vec![
                        binding(),
                        Binding {
                            pane: PaneKey::new("api", "t1", "l3"),
                            pty: pty(8),
                        },
                    ],
                    when: EndWhen::Unprotected,
                }),
            ),
            concat!(
                "1a 21 2a 02 03617069027431026c32ef9bafcdf8acd1910107 ",
                "03617069027431026c33ef9bafcdf8acd1910108 01",
            ),
        ),
        golden(
            "end_eligible_none",
            req(
                26,
                Request::End(End {
                    targets: vec![],
                    when: EndWhen::Eligible,
                }),
            ),
            "1a 21 02 00 02",
        ),
        golden(
            "replace",
            req(
                27,
                Request::Replace(Replace {
                    old: binding(),
                    spec: SpawnSpec::default(),
                }),
            ),
            "1b 22 1a 03617069027431026c32ef9bafcdf8acd1910107 00 00 00 5018 00",
        ),
        golden(
            "forget",
            req(
                28,
                Request::Forget(Forget {
                    ptys: vec![pty(6)],
                }),
            ),
            "1c 23 0b 01 ef9bafcdf8acd1910106",
        ),
        golden(
            "forget_all",
            req(28, Request::Forget(Forget { ptys: vec![] })),
            "1c 23 01 00",
        ),
        // ---- responses ----
        golden(
            "inspected",
            resp(
                25,
                Response::Inspected(Inspected {
                    policy: PolicyInfo {
                        unused_grace_ms: Some(600_000),
                        idle_expiry_ms: None,
                        suggest_after_ms: 86_400_000,
                    },
                    rss_bytes: 8 * 1024 * 1024,
                    leases: vec![
                        LeaseRow {
                            used: true,
                            last_input_ms: Some(1_700_000_000_500),
                            policy: Some("unused=10m;idle=off".into()),
                            ..row(
                                7,
                                LeaseState::Detached,
                                Tag::CleanupAt {
                                    at_ms: 1_700_000_600_000,
                                    why: "never used, detached 10m".into(),
                                },
                            )
                        },
                        LeaseRow {
                            info: LeaseInfo {
                                reason: Some(EndReason::Expired),
                                ..lease(6, LeaseState::Ended)
                            },
                            detail: Some("policy: never used, detached 10m".into()),
                            ..row(6, LeaseState::Ended, Tag::None)
                        },
                    ],
                    left_out: 3,
                }),
            ),
            concat!(
                "19 a08002 be01 01c0cf24 00 80b89929 80808004 02 ",
                "03617069027431026c32ef9bafcdf8acd1910107 01 00 80d095ffbc31 00 00 00 00 00 00 00 5018 ",
                "02 c09fbaffbc31 186e6576657220757365642c2064657461636865642031306d ",
                "00 01 01f4d395ffbc31 0113756e757365643d31306d3b69646c653d6f6666 ",
                "03617069027431026c32ef9bafcdf8acd1910106 02 00 80d095ffbc31 00 00 00 00 0103 00 00 5018 ",
                "00 0120706f6c6963793a206e6576657220757365642c2064657461636865642031306d 00 00 00 ",
                "03",
            ),
        ),
        golden(
            "inspected_tags",
            resp(
                25,
                Response::Inspected(Inspected {
                    policy: PolicyInfo {
                        unused_grace_ms: None,
                        idle_expiry_ms: Some(3_600_000),
                        suggest_after_ms: 86_400_000,
                    },
                    rss_bytes: 0,
                    leases: vec![
                        row(8, LeaseState::Attached, Tag::Protected),
                        row(
                            9,
                            LeaseState::Detached,
                            Tag::Suggested {
                                why: "used, idle 1d 2h".into(),
                            },
                        ),
                        row(
                            10,
                            LeaseState::Superseded,
                            Tag::Kept {
                                why: "has children".into(),
                            },
                        ),
                    ],
                    left_out: 0,
                }),
            ),
            concat!(
                "19 a08002 a901 00 0180dddb01 80b89929 00 03 ",
                "03617069027431026c32ef9bafcdf8acd1910108 00 00 80d095ffbc31 00000000000000 5018 ",
                "01 00 00 00 00 ",
                "03617069027431026c32ef9bafcdf8acd1910109 01 00 80d095ffbc31 00000000000000 5018 ",
                "03 10757365642c2069646c65203164203268 00 00 00 00 ",
                "03617069027431026c32ef9bafcdf8acd191010a 03 00 80d095ffbc31 00000000000000 5018 ",
                "04 0c686173206368696c6472656e 00 00 00 00 ",
                "00",
            ),
        ),
        golden(
            "end_report",
            resp(
                26,
                Response::EndReport(EndReport {
                    results: vec![
                        EndResult {
                            binding: binding(),
                            outcome: EndOutcome::Ended {
                                exit: Some(ExitStatus {
                                    code: 1,
                                    signal: Some("Hangup".into()),
                                }),
                                detail: "SIGHUP".into(),
                            },
                        },
                        EndResult {
                            binding: binding(),
                            outcome: EndOutcome::AlreadyGone {
                                reason: Some(EndReason::Forgotten),
                            },
                        },
                        EndResult {
                            binding: binding(),
                            outcome: EndOutcome::AlreadyGone { reason: None },
                        },
                    ],
                }),
            ),
            concat!(
                "1a a18002 54 03 ",
                "03617069027431026c32ef9bafcdf8acd1910107 00 01 01 010648616e677570 06534947485550 ",
                "03617069027431026c32ef9bafcdf8acd1910107 01 0104 ",
                "03617069027431026c32ef9bafcdf8acd1910107 01 00",
            ),
        ),
        golden(
            "end_report_not_ended",
            resp(
                26,
                Response::EndReport(EndReport {
                    results: vec![
                        EndResult {
                            binding: binding(),
                            outcome: EndOutcome::Refused {
                                why: "protected".into(),
                            },
                        },
                        EndResult {
                            binding: binding(),
                            outcome: EndOutcome::Kept {
                                why: "now has children".into(),
                            },
                        },
                        EndResult {
                            binding: binding(),
                            outcome: EndOutcome::Unverified {
                                why: "still running".into(),
                            },
                        },
                    ],
                }),
            ),
            concat!(
                "1a a18002 69 03 ",
                "03617069027431026c32ef9bafcdf8acd1910107 02 0970726f746563746564 ",
                "03617069027431026c32ef9bafcdf8acd1910107 03 106e6f7720686173206368696c6472656e ",
                "03617069027431026c32ef9bafcdf8acd1910107 04 0d7374696c6c2072756e6e696e67",
            ),
        ),
        golden(
            "forgot",
            resp(
                28,
                Response::Forgot(Forgot {
                    forgotten: 2,
                    not_ended: vec![pty(7)],
                    unknown: vec![],
                }),
            ),
            "1c a38002 0d 02 01ef9bafcdf8acd1910107 00",
        ),
    ]
}
