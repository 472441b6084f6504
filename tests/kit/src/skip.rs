//! Tests that need what not every machine gives (root, a mountable tmpfs, a high descriptor
//! limit) say so in one way, so a run can tell how many checked nothing.

use std::io::Write;

/// The variable that turns a skip into a failure: `1` means every test must run
/// (`deploy/test.sh`, the README's test command that CI runs, sets it unless it is `0`).
pub const REQUIRE_PRIVILEGED: &str = "RELAY_TESTS_REQUIRE_PRIVILEGED";

/// The variable naming a file each skip appends its line to (`deploy/test.sh` counts them).
pub const SKIP_LOG: &str = "RELAY_TESTS_SKIP_LOG";

/// Records that `test` checks nothing on this machine because it lacks `need` (e.g. "root and
/// a mountable tmpfs"): prints `SKIPPED test: need` on stderr and appends that line to the file
/// named by [`SKIP_LOG`], if set. The caller then returns.
///
/// # Panics
/// When [`REQUIRE_PRIVILEGED`] is `1`: a run that asked for every test must not pass one that
/// checked nothing. Also when the skip log cannot be written.
pub fn skip(test: &str, need: &str) {
    let required = std::env::var(REQUIRE_PRIVILEGED).as_deref() == Ok("1");
    let log = std::env::var_os(SKIP_LOG).map(std::path::PathBuf::from);
    record(
        &format!("SKIPPED {test}: needs {need}"),
        required,
        log.as_deref(),
    );
}

/// [`skip`] with its environment read: panics when `required`, else prints `line` and appends
/// it to `log`.
fn record(line: &str, required: bool, log: Option<&std::path::Path>) {
    if required {
        panic!("{line}; {REQUIRE_PRIVILEGED}=1 asks every test to run (set it to 0 to skip)");
    }
    eprintln!("{line}");
    if let Some(path) = log {
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)
            .unwrap_or_else(|e| panic!("{SKIP_LOG}={}: {e}", path.display()));
        writeln!(file, "{line}").unwrap_or_else(|e| panic!("{SKIP_LOG}: {e}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    #[should_panic(expected = "SKIPPED t: needs root; RELAY_TESTS_REQUIRE_PRIVILEGED=1")]
    fn a_required_run_fails_where_a_test_would_skip() {
        record("SKIPPED t: needs root", true, None);
    }

    #[test]
    fn each_skip_is_one_line_in_the_log() {
        let dir = tempfile::tempdir().unwrap();
        let log = dir.path().join("skipped.log");
        record("SKIPPED a: needs root", false, Some(&log));
        record("SKIPPED b: needs tmpfs", false, Some(&log));
        let text = std::fs::read_to_string(&log).unwrap();
        assert_eq!(text, "SKIPPED a: needs root\nSKIPPED b: needs tmpfs\n");
    }
}
