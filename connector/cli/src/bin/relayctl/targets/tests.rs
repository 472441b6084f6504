//! IDs (PTY id, pane key, the old `PANE --pty ID` form, unknown ones) and the leases filters.

use super::*;
use relay_protocol::Incarnation;

pub(crate) fn pty(counter: u64) -> PtyId {
    PtyId {
        incarnation: Incarnation(0xab),
        counter,
    }
}

pub(crate) fn info(pane: &str, counter: u64, state: LeaseState) -> LeaseInfo {
    let binding = Binding {
        pane: parse_pane(pane).unwrap(),
        pty: pty(counter),
    };
    relay_testkit::lease(binding, state)
}

pub(crate) fn listing(leases: &[(&str, u64, LeaseState)]) -> Listing {
    Listing {
        rows: leases
            .iter()
            .map(|(pane, counter, state)| untagged(info(pane, *counter, *state)))
            .collect(),
        lifecycle: None,
    }
}

fn sample() -> Listing {
    listing(&[
        ("w/t/0", 1, LeaseState::Ended),
        ("w/t/0", 2, LeaseState::Superseded),
        ("w/t/0", 3, LeaseState::Detached),
        ("w/t/1", 4, LeaseState::Attached),
        ("w/gone/0", 5, LeaseState::Ended),
        ("other/t/0", 6, LeaseState::Detached),
    ])
}

fn resolved(listing: &Listing, typed: &str) -> anyhow::Result<u64> {
    Ok(resolve(listing, &Id::parse(typed)?)?
        .info
        .binding
        .pty
        .counter)
}

#[test]
fn a_pty_id_names_that_lease_whatever_its_state() {
    let l = sample();
    assert_eq!(resolved(&l, "00000000000000ab.4").unwrap(), 4);
    assert_eq!(
        resolved(&l, "ab.2").unwrap(),
        2,
        "as hex, leading zeros optional"
    );
    assert_eq!(resolved(&l, "ab.1").unwrap(), 1);
}

#[test]
fn a_pane_key_names_its_live_pty_only() {
    let l = sample();
    assert_eq!(
        resolved(&l, "w/t/0").unwrap(),
        3,
        "not the ended or superseded ones"
    );
    assert_eq!(resolved(&l, "w/t/1").unwrap(), 4);
    let err = resolved(&l, "w/gone/0").unwrap_err().to_string();
    assert!(
        err.contains("pane w/gone/0 has no live shell")
            && err.contains("00000000000000ab.5 is ended")
            && err.contains("relayctl leases --all"),
        "{err}"
    );
    let err = resolved(&l, "w/nope/0").unwrap_err().to_string();
    assert!(
        err.contains("no pane w/nope/0") && err.contains("relayctl leases"),
        "{err}"
    );
}

#[test]
fn the_old_form_names_that_exact_binding() {
    let l = sample();
    let ids = Id::parse_all(&["w/t/0".into()], Some("ab.2")).unwrap();
    assert_eq!(resolve(&l, &ids[0]).unwrap().info.binding.pty.counter, 2);
    let ids = Id::parse_all(&["w/t/1".into()], Some("ab.2")).unwrap();
    let err = resolve(&l, &ids[0]).unwrap_err().to_string();
    assert!(
        err.contains("no lease has PTY 00000000000000ab.2 of pane w/t/1"),
        "{err}"
    );
    let err = Id::parse_all(&["ab.2".into(), "ab.3".into()], Some("ab.2")).unwrap_err();
    assert!(
        err.to_string()
            .contains("--pty goes with exactly one pane key"),
        "{err}"
    );
}

#[test]
fn an_id_that_matches_nothing_is_named_with_how_to_list() {
    let l = sample();
    let err = resolved(&l, "ab.99").unwrap_err().to_string();
    assert!(
        err.contains("no lease has PTY id 00000000000000ab.99")
            && err.contains("relayctl leases --all"),
        "{err}"
    );
    for typo in ["xyz", "ab", "ab.x", "w/t", "1.2.3"] {
        let err = Id::parse(typo).unwrap_err().to_string();
        assert!(
            err.contains(&format!("{typo:?}")) && err.contains("relayctl leases"),
            "{typo}: {err}"
        );
    }
}

#[test]
fn several_ids_resolve_in_order_each_once() {
    let l = sample();
    let ids = Id::parse_all(&["w/t/1".into(), "ab.3".into(), "w/t/0".into()], None).unwrap();
    let rows = resolve_all(&l, &ids).unwrap();
    let counters: Vec<u64> = rows.iter().map(|r| r.info.binding.pty.counter).collect();
    assert_eq!(counters, [4, 3]);
}

#[test]
fn filters_show_live_leases_by_default_and_narrow_by_state_and_workspace() {
    use LeaseState::*;
    let l = sample();
    let shown = |f: &Filter| -> Vec<u64> {
        l.rows
            .iter()
            .filter(|r| f.keeps(&r.info))
            .map(|r| r.info.binding.pty.counter)
            .collect()
    };
    let table = [
        (Filter::default(), vec![2, 3, 4, 6]),
        (
            Filter {
                all: true,
                ..Filter::default()
            },
            vec![1, 2, 3, 4, 5, 6],
        ),
        (
            Filter {
                states: vec![Ended],
                ..Filter::default()
            },
            vec![1, 5],
        ),
        (
            Filter {
                states: vec![Detached, Superseded],
                ..Filter::default()
            },
            vec![2, 3, 6],
        ),
        (
            Filter {
                workspace: Some("w".into()),
                ..Filter::default()
            },
            vec![2, 3, 4],
        ),
        (
            Filter {
                all: true,
                states: vec![Attached],
                workspace: Some("other".into()),
            },
            vec![],
        ),
    ];
    for (filter, expected) in table {
        assert_eq!(shown(&filter), expected, "{filter:?}");
    }
}

#[test]
fn pane_and_pty_round_trip_through_their_printed_form() {
    let pane = PaneKey::new("org", "tab", "0");
    assert_eq!(parse_pane(&pane.to_string()).unwrap(), pane);
    let id = PtyId {
        incarnation: Incarnation(0xdead_beef),
        counter: 12,
    };
    assert_eq!(parse_pty(&id.to_string()).unwrap(), id);
}

/// Regression: `rsplitn` read `default/p/q/0` as workspace `default/p`, and `//0`-style keys
/// with empty parts slipped through; only exactly three non-empty parts are a pane.
#[test]
fn a_pane_is_exactly_three_non_empty_parts() {
    for bad in ["default/p/q/0", "//0", "w//0", "w/t/", "/t/0", "w/t", ""] {
        let err = parse_pane(bad).unwrap_err().to_string();
        assert!(
            err.contains("`workspace/tab/leaf`") && err.contains("exactly three non-empty"),
            "{bad:?}: {err}"
        );
    }
    assert_eq!(
        parse_pane("wörk/t/é").unwrap(),
        PaneKey::new("wörk", "t", "é")
    );
}
