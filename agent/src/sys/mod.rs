//! Everything the agent asks of Linux that another Unix answers differently: the port surface
//! of a host agent for another OS. The rest of the agent uses POSIX through `nix` and tokio
//! (`fork`, `waitpid`, `flock`, `SCM_RIGHTS`, `TIOCSWINSZ`, signals) and builds wherever those exist;
//! this module imports nothing else of the agent and is the bottom layer
//! (`agent/tests/layers.rs`).
//!
//! | module | what the agent needs | Linux (here) | what a macOS port would use |
//! |---|---|---|---|
//! | [`spawn`] | start a program on a PTY slave without copying the daemon: new session, controlling terminal, cwd, default signals, descriptors above 2 closed on exec, `execvp` search; report the failing [`spawn::Stage`] and errno | `clone(CLONE_VM \| CLONE_VFORK)` (`fork` on glibc < 2.24), raw `rt_sigprocmask`/`rt_sigaction`, `close_range(CLOSE_RANGE_CLOEXEC)` or a `getdents64` walk of `/proc/self/fd` | `fork` (or `posix_spawn` with `POSIX_SPAWN_SETSID` and `POSIX_SPAWN_CLOEXEC_DEFAULT`; `TIOCSCTTY` then needs the slave opened after `setsid`), `pthread_sigmask` |
//! | [`procfs`] | a process's state, parent, group, session and start time; all processes; the file it runs; the daemon's resident memory | `/proc/PID/stat`, `/proc`, `/proc/PID/exe`, `/proc/self/status` (proc(5)) | `proc_listallpids`, `proc_pidinfo(PROC_PIDTBSDINFO)` (start time `pbi_start_tvsec`), `proc_pidpath`, `task_info` |
//! | [`pty`] | a PTY pair, close-on-exec from the start | `posix_openpt(O_CLOEXEC)`, `ptsname_r` | `posix_openpt` then `FD_CLOEXEC` under the spawn lock, `ptsname` |
//! | [`nofile`] | read and set `RLIMIT_NOFILE` async-signal-safely; the kernel's ceiling | `getrlimit`/`setrlimit`, `/proc/sys/fs/nr_open` | the same calls; ceiling `kern.maxfilesperproc` (sysctl) |
//! | [`memory_file`] | an unnamed file that survives `execve` (the live upgrade's state) | `memfd_create` (Linux 3.17), else an unlinked file | an unlinked file in the run directory |
//! | [`process`] | close inherited descriptors; is the peer of a Unix socket running our executable; a close-on-exec pipe; has a child exited, without reaping it; run an open executable; receive descriptors close-on-exec | `/proc/self/fd`, `SO_PEERCRED` + `/proc/PID/exe`, `pipe2(O_CLOEXEC)`, `waitid(WNOWAIT)`, `fexecve`, `MSG_CMSG_CLOEXEC` | `/dev/fd`, `LOCAL_PEERPID` + `proc_pidpath`, `pipe` + `FD_CLOEXEC`, `kqueue` `EVFILT_PROC`, `execv` of the file's path, `FD_CLOEXEC` after `recvmsg` |
//!
//! The agent is built and tested only for Linux hosts (x86_64 and aarch64, glibc ≥ 2.17 or
//! static musl; README "Platforms"). `cargo check --target aarch64-apple-darwin -p relay-agent`
//! stops at names that exist only here (`deploy/check-desktops.sh` checks that every error it
//! reports is under `agent/src/sys/`), so a macOS agent means new versions of these files, not
//! changes across the agent.

pub mod memory_file;
pub mod nofile;
pub mod process;
pub mod procfs;
pub mod pty;
pub mod spawn;
