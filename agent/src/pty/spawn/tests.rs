use std::io::Read;
use std::os::fd::AsRawFd;
use std::os::unix::fs::PermissionsExt;
use std::sync::mpsc;
use std::time::Duration;

use nix::sys::signal::{SigSet, Signal};

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;

use super::*;
use crate::sys::spawn::{dirent_numbers, mark_listed_cloexec, mark_numbers_cloexec, How};
use nix::libc;

/// Everything the PTY's master gives until end of file (EIO), bounded so a broken spawn fails
/// the test instead of hanging it.
fn output_of(child: Child) -> String {
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut master = std::fs::File::from(child.master);
        let mut out = Vec::new();
        let mut buf = [0u8; 4096];
        while let Ok(n @ 1..) = master.read(&mut buf) {
            out.extend_from_slice(&buf[..n]);
        }
        let _ = tx.send(out);
    });
    let out = rx
        .recv_timeout(Duration::from_secs(10))
        .expect("the child's output ends within 10 s");
    crate::pty::io::reap(child.pid).expect("our child");
    String::from_utf8_lossy(&out).replace('\r', "")
}

fn program(argv: &[&str], env: &[(&str, &str)]) -> Program {
    Program {
        program: argv[0].into(),
        argv: argv.iter().map(OsString::from).collect(),
        env: env.iter().map(|(k, v)| (k.into(), v.into())).collect(),
        cwd: "/".into(),
    }
}

/// Both ways of creating the child, whichever this C library gets by default.
const BOTH: [How; 2] = [How::Vfork, How::Fork];

fn sh(script: &str) -> Program {
    program(&["/bin/sh", "-c", script], &[("PATH", "/usr/bin:/bin")])
}

/// Field `n` (1-based) of `/proc/<pid>/stat` as the script prints it.
const STAT: &str = r#"read pid comm state ppid pgrp sid tty rest < /proc/$$/stat"#;

/// The child leads its own session and process group, its controlling terminal is the PTY
/// with the requested size, and it starts with no signal ignored or blocked: the daemon ignores
/// SIGHUP, which a shell must not inherit. Here a real-time signal nothing else uses is ignored
/// process-wide (one past the six portable-pty reset), and SIGUSR2 is blocked in this thread
/// only (the mask is per thread and a fork inherits the forking thread's).
#[test]
fn the_child_leads_a_session_on_its_pty_with_default_signals() {
    let script = format!(
        "{STAT}; echo \"pid=$pid pgrp=$pgrp sid=$sid tty=$tty\"; stty size; \
         (: </dev/tty) 2>/dev/null && echo ctty=yes || echo ctty=no; \
         while read -r k v; do case $k in SigIgn:|SigBlk:) echo \"$k=$v\";; esac; \
         done < /proc/$$/status"
    );
    let size = TermSize { cols: 91, rows: 17 };
    let unused = libc::SIGRTMIN() + 5;
    // Safety: ignoring a signal installs no handler.
    unsafe { libc::signal(unused, libc::SIG_IGN) };
    let mut usr2 = SigSet::empty();
    usr2.add(Signal::SIGUSR2);
    for how in BOTH {
        usr2.thread_block().unwrap();
        let child = spawn_with(&sh(&script), size, how);
        usr2.thread_unblock().unwrap();
        let child = child.unwrap();
        let pid = child.pid;
        let out = output_of(child);
        assert!(
            out.contains(&format!("pid={pid} pgrp={pid} sid={pid} tty=")),
            "{how:?}: {out}"
        );
        assert!(
            !out.contains("tty=0\n"),
            "{how:?}: a controlling terminal: {out}"
        );
        assert!(out.contains("ctty=yes"), "{how:?}: /dev/tty opens: {out}");
        assert!(out.contains("17 91\n"), "{how:?}: rows × columns: {out}");
        assert!(out.contains("SigIgn:=0000000000000000"), "{how:?}: {out}");
        assert!(out.contains("SigBlk:=0000000000000000"), "{how:?}: {out}");
    }
}

/// A descriptor the daemon holds without close-on-exec does not reach the child.
#[test]
fn descriptors_above_stderr_do_not_reach_the_child() {
    let file = std::fs::File::open("/dev/null").unwrap();
    let leaky = nix::unistd::dup(file.as_fd()).unwrap(); // dup: no close-on-exec
    let n = leaky.as_raw_fd();
    let script = format!("[ -e /proc/$$/fd/{n} ] && echo fd-open || echo fd-closed");
    for how in BOTH {
        let out = output_of(spawn_with(&sh(&script), TermSize::default(), how).unwrap());
        assert!(out.contains("fd-closed"), "{how:?}: {out}");
    }
}

/// The fallbacks for kernels without `CLOSE_RANGE_CLOEXEC` (Linux < 5.11), run after `fork`
/// (as in [`How::Fork`]; a vfork child runs the same code on its own stack): each marks the descriptor that the child would otherwise inherit;
/// without either, it is inherited (so the check can tell).
#[test]
fn the_fallbacks_mark_inherited_descriptors_close_on_exec() {
    let file = std::fs::File::open("/dev/null").unwrap();
    let leaky = nix::unistd::dup(file.as_fd()).unwrap();
    let n = leaky.as_raw_fd();
    let script = format!("[ -e /proc/$$/fd/{n} ] && echo fd-open || echo fd-closed");
    let run = |mark: Option<fn(u32)>| {
        let mut command = Command::new("/bin/sh");
        command.args(["-c", &script]);
        if let Some(mark) = mark {
            // Safety: both fallbacks are async-signal-safe (their docs).
            unsafe {
                command.pre_exec(move || {
                    mark(3);
                    Ok(())
                })
            };
        }
        let out = command.output().unwrap();
        String::from_utf8_lossy(&out.stdout).trim().to_string()
    };
    assert_eq!(run(None), "fd-open");
    assert_eq!(run(Some(mark_listed_cloexec)), "fd-closed");
    assert_eq!(run(Some(mark_numbers_cloexec)), "fd-closed");
}

#[test]
fn descriptor_numbers_are_read_from_dirent_records() {
    let mut records = Vec::new();
    for name in [".", "..", "0", "17", "x1", "123456"] {
        let len = (19 + name.len() + 1).next_multiple_of(8);
        let mut record = vec![0u8; len];
        record[16..18].copy_from_slice(&(len as u16).to_ne_bytes());
        record[19..19 + name.len()].copy_from_slice(name.as_bytes());
        records.extend(record);
    }
    assert_eq!(
        dirent_numbers(&records).collect::<Vec<_>>(),
        [0, 17, 123456]
    );
    // A cut-off record ends the walk instead of reading past the buffer.
    let cut = &records[..records.len() - 3];
    assert_eq!(dirent_numbers(cut).collect::<Vec<_>>(), [0, 17]);
}

/// A program that cannot start is named with what to check, and nothing is left running.
#[test]
fn programs_that_cannot_start_are_explained() {
    let dir = tempfile::tempdir().unwrap();
    let plain = dir.path().join("not-executable");
    std::fs::write(&plain, "echo hi\n").unwrap();
    let script = dir.path().join("no-interpreter");
    std::fs::write(&script, "#!/no/such/interpreter\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let path = [("PATH", "/usr/bin:/bin")];
    let at = |p: &Path| program(&[p.to_str().unwrap()], &path);
    let dangling = dir.path().join("dangling");
    std::os::unix::fs::symlink("/no/such/target", &dangling).unwrap();
    let mut in_missing_cwd = program(&["/bin/sh"], &path);
    in_missing_cwd.cwd = dir.path().join("gone");
    let cases = [
        (
            program(&["relay-no-such-program"], &path),
            "relay-no-such-program was not found in PATH (/usr/bin:/bin)".to_string(),
        ),
        (
            program(&["relay-no-such-program"], &[("PATH", "")]),
            "relay-no-such-program was not found: PATH is empty".into(),
        ),
        (
            program(
                &["dangling"],
                &[("PATH", &format!("/usr/bin:{}", dir.path().display()))],
            ),
            format!(
                "{} is a symbolic link to /no/such/target, which does not exist",
                dangling.display()
            ),
        ),
        (
            at(&dangling),
            format!(
                "{} is a symbolic link to /no/such/target, which does not exist",
                dangling.display()
            ),
        ),
        (
            at(Path::new("/no/such/program")),
            "/no/such/program does not exist".into(),
        ),
        (
            at(dir.path()),
            format!("{} is a directory", dir.path().display()),
        ),
        (at(&plain), format!("{} is not executable", plain.display())),
        (
            at(&script),
            format!("{} exists but its interpreter", script.display()),
        ),
        (
            in_missing_cwd,
            format!(
                "could not enter the working directory {}",
                dir.path().join("gone").display()
            ),
        ),
        (
            program(&["sh", "nul\0byte"], &path),
            "an argument contains a NUL byte".into(),
        ),
    ];
    for how in BOTH {
        for (command, want) in &cases {
            match spawn_with(command, TermSize::default(), how) {
                Err(SpawnError::Start(why)) => {
                    assert!(why.contains(want), "{how:?}: {why}\nwant: {want}")
                }
                other => panic!("{how:?}: {want}: got {other:?}"),
            }
        }
    }
    // Each failed child was reaped: none is left as a zombie of this process. A child that
    // never reached `execve` still has the name of the thread that started it, this test's.
    let me = std::process::id();
    let comm = |path: String| std::fs::read_to_string(path).unwrap_or_default();
    let ours = comm(format!("/proc/self/task/{}/comm", nix::unistd::gettid()));
    let zombies = std::fs::read_dir("/proc")
        .unwrap()
        .filter_map(|e| e.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| crate::sys::procfs::stat(pid).map(|st| (pid, st)))
        .filter(|(pid, st)| {
            st.ppid == me && st.is_gone() && comm(format!("/proc/{pid}/comm")) == ours
        })
        .count();
    assert_eq!(zombies, 0, "failed children are reaped");
}

/// A file the kernel cannot run (no `#!` line) is run by /bin/sh, as `execvp` does, whether it
/// is named by its path or found in `PATH`, with its arguments; the old agent (std's `execvp`)
/// did the same, so a command such as `pane.open` with `["./build.sh", "fast"]` still works.
#[test]
fn a_file_without_an_interpreter_line_is_run_by_sh() {
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("no-hash-bang");
    std::fs::write(&script, "echo \"ran by sh with $1 as $0\"\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let search = format!("{}:/usr/bin:/bin", dir.path().display());
    let by_path = program(
        &[script.to_str().unwrap(), "one"],
        &[("PATH", "/usr/bin:/bin")],
    );
    let by_name = program(&["no-hash-bang", "one"], &[("PATH", &search)]);
    for how in BOTH {
        for command in [&by_path, &by_name] {
            let out = output_of(spawn_with(command, TermSize::default(), how).unwrap());
            let want = format!("ran by sh with one as {}", script.display());
            assert!(out.contains(&want), "{how:?}: {out}");
        }
    }
    // Where /bin/sh could not run it either, the message says what the file needs.
    let why = explain(
        &by_path,
        Stage::Exec,
        &io::Error::from_raw_os_error(libc::ENOEXEC),
    );
    assert!(
        why.contains(&format!(
            "{} is not a program this host can run",
            script.display()
        )) && why.contains("#!/bin/sh"),
        "{why}"
    );
}
