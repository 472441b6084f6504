use super::*;

const MIN: u64 = 60_000;
const HOUR: u64 = 60 * MIN;
const DAY: u64 = 24 * HOUR;
const T0: u64 = 1_700_000_000_000;

fn governed() -> Option<LeasePolicy> {
    Some(LeasePolicy {
        unused_grace_ms: Some(10 * MIN),
        idle_expiry_ms: None,
    })
}

/// A detached, never used, unprotected shell at the prompt, detached at `T0`, under the default
/// policy, with its children read (none).
fn idle_shell() -> Facts {
    Facts {
        running: true,
        attached: 0,
        superseded: false,
        since_ms: T0,
        used: false,
        command: false,
        last_input_ms: None,
        last_output_ms: Some(T0 - 1000),
        protected: false,
        alternate_screen: Some(false),
        children: Children::Count(0),
        policy: governed(),
    }
}

fn decide_at(f: &Facts, after_ms: u64) -> Verdict {
    decide(f, DEFAULT_SUGGEST_AFTER, T0 + after_ms)
}

#[test]
fn the_policy_table() {
    let unused = Rule::Unused(10 * MIN);
    let end_unused = Verdict::End(unused);
    type Case = (&'static str, fn(&mut Facts), u64, Verdict);
    let cases: Vec<Case> = vec![
        (
            "unused, before the grace",
            |_| {},
            9 * MIN,
            Verdict::Wait {
                at_ms: T0 + 10 * MIN,
                rule: unused,
            },
        ),
        ("unused, at the grace", |_| {}, 10 * MIN, end_unused),
        ("unused, long past the grace", |_| {}, 3 * DAY, end_unused),
        (
            "attached",
            |f| f.attached = 1,
            DAY,
            Verdict::Keep(Keep::Attached),
        ),
        (
            "ended",
            |f| f.running = false,
            DAY,
            Verdict::Keep(Keep::Ended),
        ),
        (
            "protected",
            |f| f.protected = true,
            DAY,
            Verdict::Keep(Keep::Protected),
        ),
        (
            "has a child (sleep 3600)",
            |f| f.children = Children::Count(1),
            11 * MIN,
            Verdict::Busy(Keep::HasChildren, unused),
        ),
        (
            "children unreadable",
            |f| f.children = Children::Unreadable,
            11 * MIN,
            Verdict::Busy(Keep::ChildrenUnknown, unused),
        ),
        (
            "full-screen program",
            |f| f.alternate_screen = Some(true),
            11 * MIN,
            Verdict::Busy(Keep::FullScreen, unused),
        ),
        (
            "screen unknown (model off)",
            |f| f.alternate_screen = None,
            11 * MIN,
            Verdict::Busy(Keep::ScreenUnknown, unused),
        ),
        (
            "children not read: only a deadline",
            |f| f.children = Children::NotRead,
            11 * MIN,
            Verdict::Wait {
                at_ms: T0 + 10 * MIN,
                rule: unused,
            },
        ),
        (
            "no policy (older connector)",
            |f| f.policy = None,
            11 * MIN,
            Verdict::Keep(Keep::NoPolicy),
        ),
        (
            "no policy, detached a day: suggested only",
            |f| f.policy = None,
            DAY,
            Verdict::Suggest(SuggestWhy::Unused(DAY)),
        ),
        (
            "grace off",
            |f| f.policy = Some(LeasePolicy::default()),
            DAY - 1,
            Verdict::Keep(Keep::GraceOff),
        ),
        (
            "used (a read waits): kept",
            |f| {
                f.used = true;
                f.last_input_ms = Some(T0)
            },
            11 * MIN,
            Verdict::Keep(Keep::Used),
        ),
        (
            "used, idle a day: suggested",
            |f| {
                f.used = true;
                f.last_input_ms = Some(T0)
            },
            DAY,
            Verdict::Suggest(SuggestWhy::Idle(DAY)),
        ),
        (
            "used, idle a day, with a child: kept",
            |f| {
                f.used = true;
                f.children = Children::Count(2)
            },
            2 * DAY,
            Verdict::Keep(Keep::HasChildren),
        ),
        (
            "used, output an hour ago: not idle a day",
            |f| {
                f.used = true;
                f.last_output_ms = Some(T0 + DAY)
            },
            DAY + HOUR,
            Verdict::Keep(Keep::Used),
        ),
        (
            "idle expiry on, before it",
            |f| {
                f.used = true;
                f.policy = Some(LeasePolicy {
                    unused_grace_ms: None,
                    idle_expiry_ms: Some(DAY),
                })
            },
            DAY - 1,
            Verdict::Wait {
                at_ms: T0 + DAY,
                rule: Rule::Idle(DAY),
            },
        ),
        (
            "idle expiry on, past it",
            |f| {
                f.used = true;
                f.policy = Some(LeasePolicy {
                    unused_grace_ms: None,
                    idle_expiry_ms: Some(DAY),
                })
            },
            DAY,
            Verdict::End(Rule::Idle(DAY)),
        ),
        (
            "idle expiry counts from the last output",
            |f| {
                f.used = true;
                f.last_output_ms = Some(T0 + HOUR);
                f.policy = Some(LeasePolicy {
                    unused_grace_ms: None,
                    idle_expiry_ms: Some(DAY),
                })
            },
            DAY,
            Verdict::Wait {
                at_ms: T0 + HOUR + DAY,
                rule: Rule::Idle(DAY),
            },
        ),
        (
            "superseded, past the grace",
            |f| {
                f.superseded = true;
                f.used = true
            },
            10 * MIN,
            Verdict::End(Rule::Superseded(10 * MIN)),
        ),
        (
            "superseded, no policy: suggested",
            |f| {
                f.superseded = true;
                f.policy = None
            },
            MIN,
            Verdict::Suggest(SuggestWhy::Superseded),
        ),
        (
            "superseded with children: kept",
            |f| {
                f.superseded = true;
                f.children = Children::Count(1)
            },
            10 * MIN,
            Verdict::Busy(Keep::HasChildren, Rule::Superseded(10 * MIN)),
        ),
        (
            "superseded but protected",
            |f| {
                f.superseded = true;
                f.protected = true
            },
            DAY,
            Verdict::Keep(Keep::Protected),
        ),
    ];
    for (name, change, after, want) in cases {
        let mut f = idle_shell();
        change(&mut f);
        assert_eq!(decide_at(&f, after), want, "{name}");
    }
}

#[test]
fn a_clock_before_the_detach_never_ends() {
    // A wall clock stepped back must not make a shell look detached for longer.
    let f = idle_shell();
    assert!(matches!(
        decide(&f, DEFAULT_SUGGEST_AFTER, T0 - HOUR),
        Verdict::Wait { .. }
    ));
}

#[test]
fn stated_policies_resolve_against_the_host() {
    let host = HostPolicy::default();
    let ten = Some(10 * MIN);
    let cases: Vec<(&str, LeasePolicy)> = vec![
        (
            "",
            LeasePolicy {
                unused_grace_ms: ten,
                idle_expiry_ms: None,
            },
        ),
        (
            "unused=default;idle=default",
            LeasePolicy {
                unused_grace_ms: ten,
                idle_expiry_ms: None,
            },
        ),
        (
            "unused=off",
            LeasePolicy {
                unused_grace_ms: None,
                idle_expiry_ms: None,
            },
        ),
        (
            " unused = 90s ; idle = 7d ;",
            LeasePolicy {
                unused_grace_ms: Some(90_000),
                idle_expiry_ms: Some(7 * DAY),
            },
        ),
        (
            "idle=1h",
            LeasePolicy {
                unused_grace_ms: ten,
                idle_expiry_ms: Some(HOUR),
            },
        ),
    ];
    for (spec, want) in cases {
        assert_eq!(resolve_spec(spec, &host), Ok(want), "{spec:?}");
    }
}

#[test]
fn unknown_or_unbounded_conditions_are_refused() {
    let host = HostPolicy::default();
    for (spec, says) in [
        ("kill=always", "unknown policy condition"),
        ("unused", "has no value"),
        ("unused=10m;unused=off", "given twice"),
        ("unused=0s", "out of bounds"),
        ("unused=91d", "out of bounds"),
        ("idle=10", "not a duration"),
        ("idle=ten minutes", "not a duration"),
        ("idle=99999999999999999d", "not a duration"),
        ("idle=+5s", "not a duration"),
        ("idle=5é", "not a duration"),
    ] {
        let err = resolve_spec(spec, &host).unwrap_err();
        assert!(err.contains(says), "{spec:?}: {err}");
    }
}

#[test]
fn settings_and_durations_read_like_people_write_them() {
    assert_eq!(parse_setting("off"), Ok(None));
    assert_eq!(parse_setting("90s"), Ok(Some(Duration::from_secs(90))));
    assert_eq!(parse_setting(" 1h "), Ok(Some(Duration::from_secs(3600))));
    assert!(parse_setting("").is_err());
    for (ms, text) in [
        (45_000, "45s"),
        (10 * MIN, "10m"),
        (90_000, "1m 30s"),
        (HOUR + 5 * MIN, "1h 5m"),
        (2 * DAY + 3 * HOUR + 7 * MIN, "2d 3h"),
        (DAY, "1d"),
    ] {
        assert_eq!(human_ms(ms), text);
    }
    let p = LeasePolicy {
        unused_grace_ms: Some(10 * MIN),
        idle_expiry_ms: None,
    };
    assert_eq!(p.to_string(), "unused=10m;idle=off");
}
