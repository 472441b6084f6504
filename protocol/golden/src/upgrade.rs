//! Golden rows for live upgrade (protocol 1.5, capability `upgrade`): `UpgradeInfo` and its
//! report (with and without an installed agent), `Upgrade` and `UpgradeStarted`. Split from
//! `mod.rs` only to keep the table readable; same helpers, same rules.

use relay_protocol::message::{AgentBinary, Upgrade, UpgradeInfo, UpgradeReport, UpgradeStarted};

use super::*;

fn binary(path: &str, version: &str) -> AgentBinary {
    AgentBinary {
        path: path.into(),
        version: version.into(),
    }
}

/// Upgrade samples, in op-code order (requests, then responses).
pub fn upgrade_cases() -> Vec<Golden> {
    vec![
        golden(
            "upgrade_info",
            req(40, Request::UpgradeInfo(UpgradeInfo {})),
            "28 24 00",
        ),
        golden(
            "upgrade_newest",
            req(
                41,
                Request::Upgrade(Upgrade {
                    to: None,
                    force: false,
                }),
            ),
            "29 25 02 0000",
        ),
        golden(
            "upgrade_to_forced",
            req(
                42,
                Request::Upgrade(Upgrade {
                    to: Some("/a".into()),
                    force: true,
                }),
            ),
            "2a 25 05 01022f61 01",
        ),
        golden(
            "upgrade_report",
            resp(
                40,
                Response::UpgradeReport(UpgradeReport {
                    running: binary("/r", "0.1.0"),
                    state_version: 1,
                    newest_installed: Some(binary("/n", "0.2.0")),
                    newer_installed: true,
                    last_failure: Some("x".into()),
                    in_progress: false,
                    upgraded_from: Some("0.0.9".into()),
                }),
            ),
            "28 a48002 20 022f7205302e312e30 01 01022f6e05302e322e30 01 010178 00 0105302e302e39",
        ),
        golden(
            "upgrade_report_bare",
            resp(
                40,
                Response::UpgradeReport(UpgradeReport {
                    running: binary("/r", "0.1.0"),
                    state_version: 1,
                    newest_installed: None,
                    newer_installed: false,
                    last_failure: None,
                    in_progress: true,
                    upgraded_from: None,
                }),
            ),
            "28 a48002 0f 022f7205302e312e30 01 00 00 00 01 00",
        ),
        golden(
            "upgrade_started",
            resp(
                41,
                Response::UpgradeStarted(UpgradeStarted {
                    from: binary("/r", "0.1.0"),
                    to: binary("/n", "0.2.0"),
                    ptys: 3,
                }),
            ),
            "29 a58002 13 022f7205302e312e30 022f6e05302e322e30 03",
        ),
        golden(
            "error_upgrade_refused",
            err(
                41,
                ErrorReply::UpgradeRefused {
                    message: "no".into(),
                },
            ),
            "29 ffff03 04 09 026e6f",
        ),
    ]
}
