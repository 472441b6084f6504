//! The JSON shape, the table's columns and TAG cells, durations and status.

use super::*;
use relay_protocol::message::{LeaseCounts, LeaseRow, PolicyInfo, Status, Tag};
use relay_protocol::{Binding, Incarnation, LeaseInfo, LeaseState, PaneKey, PtyId};

use crate::targets::Lifecycle;

fn lease() -> LeaseInfo {
    let binding = Binding {
        pane: PaneKey::new("ws", "main", "0"),
        pty: PtyId {
            incarnation: Incarnation(0xab),
            counter: 3,
        },
    };
    LeaseInfo {
        pid: Some(4242),
        since_ms: 1_000_000,
        bytes_out: 2048,
        command: vec!["sh".into(), "-c".into(), "exit 3".into()],
        exit: Some(ExitStatus {
            code: 3,
            signal: None,
        }),
        reason: Some(EndReason::AgentRestarted),
        protected: true,
        ..relay_testkit::lease(binding, LeaseState::Ended)
    }
}

fn row(info: LeaseInfo, tag: Tag) -> LeaseRow {
    LeaseRow {
        info,
        tag,
        detail: None,
        used: false,
        last_input_ms: None,
        policy: None,
    }
}

#[test]
fn json_shape_is_the_documented_one() {
    let r = row(lease(), Tag::None);
    let v: Value = serde_json::from_str(&leases_json(&[&r])).unwrap();
    let row = &v[0];
    assert_eq!(row["pane"]["workspace"], "ws");
    assert_eq!(row["pane"]["tab"], "main");
    assert_eq!(row["pane"]["leaf"], "0");
    assert_eq!(row["pty"], "00000000000000ab.3");
    assert_eq!(row["pid"], 4242);
    assert_eq!(row["state"], "ended");
    assert_eq!(row["since_ms"], 1_000_000);
    assert!(row["last_output_ms"].is_null());
    assert_eq!(row["bytes_out"], 2048);
    assert_eq!(row["command"][2], "exit 3");
    assert_eq!(row["exit"]["code"], 3);
    assert!(row["exit"]["signal"].is_null());
    assert_eq!(row["reason"], "agent_restarted");
    assert_eq!(row["protected"], true);
    assert_eq!(row["attached"], 0);
    assert!(row["tag"].is_null());
    assert!(row["detail"].is_null());
    assert_eq!(row.as_object().unwrap().len(), 14, "no undocumented fields");
}

#[test]
fn json_tags_and_detail_have_the_documented_shapes() {
    let tags = [
        (Tag::Protected, json!({ "kind": "protected" })),
        (
            Tag::CleanupAt {
                at_ms: 5,
                why: "never used, detached 10m".into(),
            },
            json!({ "kind": "cleanup", "at_ms": 5, "why": "never used, detached 10m" }),
        ),
        (
            Tag::Suggested {
                why: "used, idle 1d".into(),
            },
            json!({ "kind": "suggested", "why": "used, idle 1d" }),
        ),
        (
            Tag::Kept {
                why: "has children".into(),
            },
            json!({ "kind": "kept", "why": "has children" }),
        ),
    ];
    for (tag, expected) in tags {
        let mut r = row(lease(), tag);
        r.detail = Some("killed by operator".into());
        let v: Value = serde_json::from_str(&leases_json(&[&r])).unwrap();
        assert_eq!(v[0]["tag"], expected);
        assert_eq!(v[0]["detail"], "killed by operator");
    }
}

#[test]
fn table_has_the_columns_and_relative_times() {
    let r = row(lease(), Tag::None);
    let t = leases_table(&[&r], false, 1_000_000 + 5 * 60_000);
    let mut lines = t.lines();
    let header = lines.next().unwrap();
    for col in [
        "PANE",
        "PTY",
        "PID",
        "STATE",
        "SINCE",
        "LAST OUTPUT",
        "BYTES",
        "COMMAND",
        "EXIT",
    ] {
        assert!(header.contains(col), "{header}");
    }
    assert!(
        !header.contains("TAG"),
        "no TAG column for an agent without the policy"
    );
    let row = lines.next().unwrap();
    assert!(
        row.contains("ws/main/0") && row.contains(" 5m ") && row.contains("2.0K"),
        "{row}"
    );
    assert!(row.contains("ended,protected"), "{row}");
}

/// The TAG column: what the policy will do, relative to now; how an ended lease ended.
#[test]
fn tag_cells_say_what_the_policy_will_do() {
    const NOW: u64 = 10_000_000;
    let live = || LeaseInfo {
        state: LeaseState::Detached,
        protected: false,
        ..lease()
    };
    let cleanup = |at_ms| Tag::CleanupAt {
        at_ms,
        why: "never used, detached 10m".into(),
    };
    let mut ended = row(lease(), Tag::None);
    ended.detail = Some("policy: never used, detached 10m".into());
    let table = [
        (row(live(), Tag::Protected), "protected"),
        (
            row(live(), cleanup(NOW + 4 * 60_000 + 30_000)),
            "cleanup in 4m",
        ),
        (row(live(), cleanup(NOW + 65 * 60_000)), "cleanup in 1h 5m"),
        (row(live(), cleanup(NOW)), "cleanup due"),
        (row(live(), cleanup(NOW - 1)), "cleanup due"),
        (
            row(
                live(),
                Tag::Suggested {
                    why: "used, idle 1d".into(),
                },
            ),
            "suggested",
        ),
        (
            row(
                live(),
                Tag::Kept {
                    why: "has children".into(),
                },
            ),
            "kept: has children",
        ),
        (row(live(), Tag::None), "-"),
        (ended, "policy: never used, detached 10m"),
    ];
    for (r, expected) in &table {
        assert_eq!(tag_text(r, NOW), *expected, "{:?}", r.tag);
    }
    let rows: Vec<&LeaseRow> = table.iter().map(|(r, _)| r).collect();
    let t = leases_table(&rows, true, NOW);
    assert!(t.lines().next().unwrap().ends_with("TAG"), "{t}");
    assert!(t.lines().nth(1).unwrap().ends_with("   protected"), "{t}");
    assert!(!t.contains(",protected"), "the TAG column says it: {t}");
}

/// Regression: a pane key part longer than 65535 characters made `relayctl leases` panic
/// ("Formatting argument out of range", exit 101).
#[test]
fn huge_and_hostile_names_are_cut_in_the_table_and_complete_in_json() {
    let mut l = lease();
    l.binding.pane = PaneKey::new("W".repeat(400_000), "t\u{1b}]0;x\u{7}", "0");
    let (huge, plain) = (row(l, Tag::None), row(lease(), Tag::None));
    let t = leases_table(&[&huge, &plain], false, 1_000_000);
    let line = t.lines().nth(1).unwrap();
    let pane = line.split("   ").next().unwrap();
    assert_eq!(pane.chars().count(), MAX_CELL, "{pane}");
    assert!(pane.ends_with('…'), "{pane}");
    assert!(t.lines().all(|line| line.chars().count() < 400), "{t}");
    assert!(!t.contains('\u{1b}'));
    let mut hostile = row(lease(), Tag::None);
    hostile.info.binding.pane = PaneKey::new("ws", "t\u{1b}]0;x\u{7}", "0");
    let t = leases_table(&[&hostile], false, 1_000_000);
    assert!(t.contains("ws/t\u{fffd}]0;x\u{fffd}/0"), "{t}");
    // A right-to-left override would print `main/exe.txt/0` as something else.
    hostile.info.binding.pane = PaneKey::new("ws", "main\u{202e}txt.exe", "0");
    let t = leases_table(&[&hostile], false, 1_000_000);
    assert!(t.contains("ws/main\u{fffd}txt.exe/0"), "{t}");
    let v: Value = serde_json::from_str(&leases_json(&[&huge])).unwrap();
    assert_eq!(v[0]["pane"]["workspace"].as_str().unwrap().len(), 400_000);
    assert_eq!(v[0]["pane"]["tab"], "t\u{1b}]0;x\u{7}");
}

#[test]
fn human_units() {
    assert_eq!(ago(10_000, 0), "10s");
    assert_eq!(ago(0, 10_000), "0s", "a clock behind is no negative age");
    assert_eq!(span(4 * 60_000 + 59_000), "4m");
    assert_eq!(span(3 * 3_600_000), "3h");
    assert_eq!(span(3_600_000 + 5 * 60_000), "1h 5m");
    assert_eq!(span(2 * 86_400_000 + 3 * 3_600_000 + 59 * 60_000), "2d 3h");
    assert_eq!(span(3 * 86_400_000), "3d");
    assert_eq!(bytes(512), "512");
    assert_eq!(bytes(3 * 1024 * 1024), "3.0M");
}

fn status() -> Status {
    Status {
        agent_version: "0.1.0".into(),
        incarnation: Incarnation(0xab),
        pid: 4000,
        started_ms: 0,
        uptime_ms: 3_600_000 + 60_000,
        leases: LeaseCounts {
            attached: 1,
            detached: 2,
            ended: 3,
            superseded: 0,
        },
        connections: 1,
    }
}

#[test]
fn status_adds_policy_tags_and_memory_only_with_the_lifecycle_policy() {
    let plain = status_text(&status(), None, None);
    assert!(plain.contains("uptime:        1h 1m"), "{plain}");
    assert!(
        !plain.contains("policy") && !plain.contains("memory"),
        "{plain}"
    );
    let v: Value = serde_json::from_str(&status_json(&status(), None, None)).unwrap();
    assert!(v["policy"].is_null() && v["tags"].is_null() && v["rss_bytes"].is_null());
    assert_eq!(v["pid"], 4000);

    let lifecycle = Lifecycle {
        policy: PolicyInfo {
            unused_grace_ms: Some(600_000),
            idle_expiry_ms: None,
            suggest_after_ms: 86_400_000,
        },
        rss_bytes: 12 * 1024 * 1024,
        left_out: 0,
    };
    let mut ended_protected = row(lease(), Tag::Protected);
    ended_protected.info.state = LeaseState::Ended;
    let detached = |tag| {
        let mut r = row(lease(), tag);
        r.info.state = LeaseState::Detached;
        r
    };
    let rows = [
        detached(Tag::Protected),
        detached(Tag::Suggested { why: "idle".into() }),
        detached(Tag::Kept {
            why: "has children".into(),
        }),
        detached(Tag::Kept {
            why: "has children".into(),
        }),
        ended_protected,
    ];
    let tags = TagCounts::of(&rows);
    let text = status_text(&status(), Some((&lifecycle, tags)), None);
    assert!(
        text.contains("policy:        unused 10m, idle off, suggest after 1d"),
        "{text}"
    );
    assert!(
        text.contains("tags:          1 protected, 0 cleanup scheduled, 1 suggested, 2 kept"),
        "{text}"
    );
    assert!(text.contains("memory:        12.0M (daemon RSS)"), "{text}");
    let v: Value =
        serde_json::from_str(&status_json(&status(), Some((&lifecycle, tags)), None)).unwrap();
    assert_eq!(v["policy"]["unused_grace_ms"], 600_000);
    assert!(v["policy"]["idle_expiry_ms"].is_null());
    assert_eq!(v["tags"]["kept"], 2);
    assert_eq!(v["rss_bytes"], 12 * 1024 * 1024);
}

#[test]
fn status_names_the_running_binary_and_a_newer_installed_agent() {
    use relay_protocol::message::{AgentBinary, UpgradeReport};
    let mut report = UpgradeReport {
        running: AgentBinary {
            path: "/h/.relay/bin/relay-agent-0.1.0-aa".into(),
            version: "0.1.0".into(),
        },
        state_version: 1,
        newest_installed: Some(AgentBinary {
            path: "/h/.relay/bin/relay-agent-0.2.0-bb".into(),
            version: "0.2.0".into(),
        }),
        newer_installed: true,
        last_failure: None,
        in_progress: false,
        upgraded_from: None,
    };
    let text = status_text(&status(), None, Some(&report));
    assert!(
        text.contains("agent binary:  /h/.relay/bin/relay-agent-0.1.0-aa"),
        "{text}"
    );
    assert!(
        text.contains("installed:     0.2.0 at /h/.relay/bin/relay-agent-0.2.0-bb is newer"),
        "{text}"
    );
    let v: Value = serde_json::from_str(&status_json(&status(), None, Some(&report))).unwrap();
    assert_eq!(v["newer_installed"], true);
    assert_eq!(v["newest_installed"]["version"], "0.2.0");

    report.newer_installed = false;
    report.last_failure = Some("execve failed".into());
    report.upgraded_from = Some("0.0.9".into());
    let text = status_text(&status(), None, Some(&report));
    assert!(text.contains("(nothing newer)"), "{text}");
    assert!(text.contains("upgraded from: 0.0.9 (live)"), "{text}");
    assert!(
        text.contains("last upgrade:  failed: execve failed"),
        "{text}"
    );
    let plain: Value = serde_json::from_str(&status_json(&status(), None, None)).unwrap();
    assert!(plain["agent_path"].is_null() && plain["newer_installed"].is_null());
}
