//! Tests of the lease journal: replay, torn and undecodable lines, failed appends, sealing.

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
        start_ticks: Some(7),
        policy: None,
        explicit_command: false,
    }
}

fn line(rec: &Record) -> Vec<u8> {
    let mut l = serde_json::to_vec(rec).unwrap();
    l.push(b'\n');
    l
}

/// What the daemon does on start, without the orphan check: load, replay, end earlier
/// incarnations, rewrite.
fn open(path: &Path, table: &mut LeaseTable, now_ms: u64) -> (Journal, LoadReport) {
    let mut report = load(path).unwrap().apply(table);
    report.restarted = table.end_previous_incarnations(now_ms);
    (Journal::start(path, table).unwrap(), report)
}

fn temp_dir(name: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!("relay-journal-{name}-{}", std::process::id()));
    let _ = fs::remove_dir_all(&dir);
    fs::create_dir_all(&dir).unwrap();
    dir
}

#[test]
fn restart_ends_unended_leases_and_keeps_ended_records() {
    let dir = temp_dir("restart");
    let path = dir.join("leases.journal");
    let live = binding("live", 1, 1);
    let done = binding("done", 1, 2);
    let exit = ExitStatus {
        code: 3,
        signal: None,
    };
    let mut text = Vec::new();
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
            detail: None,
        },
    ] {
        text.extend(line(&rec));
    }
    text.extend(b"{\"event\":\"crea"); // A torn last line.
    fs::write(&path, text).unwrap();

    let mut table = LeaseTable::new(Incarnation(2), 10);
    let (_j, report) = open(&path, &mut table, 100);
    assert_eq!(report.records, 4);
    assert_eq!(report.skipped, 1);
    assert_eq!(report.restarted, vec![live.pty]);
    let rows: Vec<_> = table
        .leases()
        .map(|l| (l.binding.clone(), l.info(), l.start_ticks))
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
    assert_eq!(rows[1].2, Some(7), "start time survives the journal");

    // The rewritten journal reproduces the same table in a third incarnation.
    let mut again = LeaseTable::new(Incarnation(3), 10);
    let (_j, report) = open(&path, &mut again, 200);
    assert_eq!(report.skipped, 0);
    assert!(report.restarted.is_empty());
    let infos = |t: &LeaseTable| t.leases().map(|l| l.info()).collect::<Vec<_>>();
    assert_eq!(infos(&again), infos(&table));
    fs::remove_dir_all(&dir).unwrap();
}

/// Regression: a line cut inside a multi-byte UTF-8 character (kill -9 mid-append) made every
/// later start fail with "stream did not contain valid UTF-8". It is skipped; the records
/// around it still apply, and the rewrite drops it.
#[test]
fn undecodable_line_is_skipped_and_later_lines_still_apply() {
    let dir = temp_dir("utf8");
    let path = dir.join("leases.journal");
    let first = binding("wörk", 1, 1);
    let second = binding("é", 1, 2);
    let mut bytes = line(&created(&first));
    let torn = line(&created(&second));
    let cut = torn.iter().position(|&b| b == 0xc3).unwrap() + 1; // Inside "é".
    bytes.extend(&torn[..cut]);
    bytes.push(b'\n');
    bytes.extend([0xff, 0xfe, b'\n']);
    bytes.extend(line(&created(&second)));
    fs::write(&path, bytes).unwrap();

    let loaded = load(&path).unwrap();
    assert_eq!(
        loaded.incarnations(),
        HashSet::from([Incarnation(1)]),
        "incarnations are read past the bad lines"
    );
    let mut table = LeaseTable::new(Incarnation(2), 10);
    let (_j, report) = open(&path, &mut table, 100);
    assert_eq!(report.records, 2);
    assert_eq!(report.skipped, 2);
    assert_eq!(report.restarted, vec![first.pty, second.pty]);
    let text = fs::read_to_string(&path).expect("rewritten journal is UTF-8");
    assert!(text
        .lines()
        .all(|l| serde_json::from_str::<Record>(l).is_ok()));
    fs::remove_dir_all(&dir).unwrap();
}

/// Records of older agents (no `start_ticks`) still load.
#[test]
fn created_record_without_start_time_loads() {
    let dir = temp_dir("old");
    let path = dir.join("leases.journal");
    let old = r#"{"event":"created","binding":{"pane":{"workspace":"w","tab":"t","leaf":"l"},"pty":{"incarnation":1,"counter":1}},"command":["sh"],"pid":9,"size":{"cols":80,"rows":24},"at_ms":1}"#;
    fs::write(&path, format!("{old}\n")).unwrap();
    let mut table = LeaseTable::new(Incarnation(2), 10);
    let (_j, report) = open(&path, &mut table, 5);
    assert_eq!((report.records, report.skipped), (1, 0));
    assert_eq!(table.leases().next().unwrap().start_ticks, None);
    fs::remove_dir_all(&dir).unwrap();
}

/// An append that failed half-way leaves a partial line; the next append cuts it back first,
/// so every line of the file stays a whole record. A leftover temp file is removed on start,
/// and the journal is private (0600).
#[test]
fn partial_line_of_a_failed_append_is_cut_before_the_next_record() {
    use std::os::unix::fs::PermissionsExt;
    let dir = temp_dir("torn");
    let path = dir.join("leases.journal");
    fs::write(tmp_path(&path), b"half a rewrite").unwrap();
    let mut table = LeaseTable::new(Incarnation(5), 10);
    let (mut j, _) = open(&path, &mut table, 0);
    assert!(!tmp_path(&path).exists(), "leftover temp file removed");
    let mode = fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    j.append(&created(&binding("a", 5, 1))).unwrap();
    // What a write cut short by a full disk leaves behind, and the state append() then has.
    let mut f = OpenOptions::new().append(true).open(&path).unwrap();
    f.write_all(b"{\"event\":\"created\",\"bind").unwrap();
    j.torn = true;
    j.append(&created(&binding("b", 5, 2))).unwrap();
    let text = fs::read_to_string(&path).unwrap();
    let leaves: Vec<String> = text
        .lines()
        .map(|l| match serde_json::from_str::<Record>(l) {
            Ok(Record::Created { binding, .. }) => binding.pane.leaf,
            other => panic!("line {l:?} is not a whole record: {other:?}"),
        })
        .collect();
    assert_eq!(leaves, ["a", "b"]);
    fs::remove_dir_all(&dir).unwrap();
}

#[test]
fn sealed_journal_records_nothing() {
    let dir = temp_dir("seal");
    let path = dir.join("leases.journal");
    let mut table = LeaseTable::new(Incarnation(5), 10);
    let (mut j, _) = open(&path, &mut table, 0);
    j.append(&created(&binding("a", 5, 1))).unwrap();
    j.seal().unwrap();
    j.append(&created(&binding("b", 5, 2))).unwrap();
    let text = fs::read_to_string(&path).unwrap();
    fs::remove_dir_all(&dir).unwrap();
    assert_eq!(text.lines().count(), 1, "{text}");
}

/// Journal errors name the path and the fix.
#[test]
fn errors_name_the_path_and_the_fix() {
    let path = Path::new("/some/state/leases.journal");
    let full = error(
        io::Error::from_raw_os_error(nix::libc::ENOSPC),
        "append to",
        path,
    );
    let text = full.to_string();
    assert!(
        text.contains("append to /some/state/leases.journal"),
        "{text}"
    );
    assert!(text.contains("free disk space in /some/state"), "{text}");
}
