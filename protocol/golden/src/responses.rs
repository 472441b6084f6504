//! Golden rows for the responses (other than errors). Split from `mod.rs` only to keep the table
//! readable; same helpers, same rules.

use super::*;

/// Response samples.
pub fn response_cases() -> Vec<Golden> {
    vec![
        // ---- responses ----
        golden("done", resp(6, Response::Done(Done {})), "06 808002 00"),
        golden(
            "welcome",
            resp(
                1,
                Response::Welcome(Welcome {
                    magic: MAGIC,
                    major: 1,
                    minor: 0,
                    agent_version: "0.1.0".into(),
                    incarnation: INCARNATION,
                    capabilities: caps(&[Capability::PTY, Capability::CREDIT]),
                    limits: Limits {
                        max_frame: 1024 * 1024,
                        window: 1024 * 1024,
                        max_chunk: 64 * 1024,
                        replay_bytes: 4 * 1024 * 1024,
                    },
                }),
            ),
            concat!(
                "01 818002 2f d982b19205 01 00 05302e312e30 ",
                "ef9bafcdf8acd19101 02 03707479 06637265646974 808040 808040 ",
                "808004 80808002",
            ),
        ),
        golden(
            "pong",
            resp(2, Response::Pong(Pong { nonce: 0xfeed })),
            "02 828002 03 edfd03",
        ),
        golden(
            "created",
            resp(
                3,
                Response::Created(Created {
                    binding: binding(),
                    existed: false,
                }),
            ),
            "03 908002 15 03617069027431026c32ef9bafcdf8acd1910107 00",
        ),
        golden(
            "attached",
            resp(
                4,
                Response::Attached(Attached {
                    binding: binding(),
                    replay_from: 300,
                    end_offset: 4096,
                    lost: 0,
                    size: size(),
                }),
            ),
            concat!(
                "04 918002 1c 03617069027431026c32ef9bafcdf8acd1910107 ac02 ",
                "8020 00 c80132",
            ),
        ),
        golden(
            "leases_attached_ended",
            resp(
                11,
                Response::Leases(Leases {
                    leases: vec![
                        LeaseInfo {
                            pid: Some(4100),
                            bytes_out: 10,
                            exit: Some(ExitStatus {
                                code: 0,
                                signal: None,
                            }),
                            reason: Some(EndReason::Exited),
                            ..lease(6, LeaseState::Ended)
                        },
                        LeaseInfo {
                            pid: Some(4242),
                            last_output_ms: Some(1_700_000_000_500),
                            bytes_out: 4096,
                            command: strings(&["bash", "-l"]),
                            protected: true,
                            attached: 2,
                            size: size(),
                            ..lease(7, LeaseState::Attached)
                        },
                    ],
                }),
            ),
            concat!(
                "0b 978002 62 02 03617069027431026c32ef9bafcdf8acd1910106 02 ",
                "018420 80d095ffbc31 00 0a 00 0100 00 0100 00 00 5018 ",
                "03617069027431026c32ef9bafcdf8acd1910107 00 019221 ",
                "80d095ffbc31 01f4d395ffbc31 8020 02 0462617368 022d6c 00 00 ",
                "01 02 c80132",
            ),
        ),
        golden(
            "leases_detached_superseded",
            resp(
                11,
                Response::Leases(Leases {
                    leases: vec![
                        lease(8, LeaseState::Detached),
                        lease(9, LeaseState::Superseded),
                    ],
                }),
            ),
            concat!(
                "0b 978002 4b 02 03617069027431026c32ef9bafcdf8acd1910108 01 ",
                "00 80d095ffbc31 00 00 00 00 00 00 00 5018 ",
                "03617069027431026c32ef9bafcdf8acd1910109 03 00 80d095ffbc31 ",
                "00 00 00 00 00 00 00 5018",
            ),
        ),
        golden(
            "leases_empty",
            resp(11, Response::Leases(Leases { leases: vec![] })),
            "0b 978002 01 00",
        ),
        golden(
            "status_reply",
            resp(
                13,
                Response::StatusReply(Status {
                    agent_version: "0.1.0".into(),
                    incarnation: INCARNATION,
                    pid: 4000,
                    started_ms: 1_700_000_000_000,
                    uptime_ms: 61_000,
                    leases: LeaseCounts {
                        attached: 1,
                        detached: 2,
                        ended: 3,
                        superseded: 0,
                    },
                    connections: 1,
                }),
            ),
            concat!(
                "0d 998002 1f 05302e312e30 ef9bafcdf8acd19101 a01f ",
                "80d095ffbc31 c8dc03 01 02 03 00 01",
            ),
        ),
        golden(
            "opened",
            resp(
                16,
                Response::Opened(Opened {
                    created: Created {
                        binding: binding(),
                        existed: false,
                    },
                    attached: Attached {
                        binding: binding(),
                        replay_from: 0,
                        end_offset: 12,
                        lost: 0,
                        size: size(),
                    },
                }),
            ),
            concat!(
                "10 9b8002 2f 03617069027431026c32ef9bafcdf8acd1910107 00 ",
                "03617069027431026c32ef9bafcdf8acd1910107 00 0c 00 c80132",
            ),
        ),
        golden(
            "screen_attached",
            resp(
                20,
                Response::ScreenAttached(ScreenAttached {
                    attached: Attached {
                        binding: binding(),
                        replay_from: 5000,
                        end_offset: 5000,
                        lost: 4700,
                        size: size(),
                    },
                    snapshot: true,
                }),
            ),
            "14 9d8002 1e 03617069027431026c32ef9bafcdf8acd1910107 8827 8827 dc24 c80132 01",
        ),
        golden(
            "screen_opened",
            resp(
                23,
                Response::ScreenOpened(ScreenOpened {
                    created: Created {
                        binding: binding(),
                        existed: true,
                    },
                    attached: Attached {
                        binding: binding(),
                        replay_from: 0,
                        end_offset: 12,
                        lost: 0,
                        size: size(),
                    },
                    snapshot: false,
                }),
            ),
            "17 9e8002 30 03617069027431026c32ef9bafcdf8acd1910107 01 03617069027431026c32ef9bafcdf8acd1910107 00 0c 00 c80132 00",
        ),
    ]
}
