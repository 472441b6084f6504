//! The child side of [`crate::pty::spawn`]: everything is prepared in the daemon, then
//! `clone(CLONE_VM | CLONE_VFORK)` runs [`child_main`] on a stack of its own, sharing the
//! daemon's memory until `execve` (as glibc's `posix_spawn` does). No page tables are copied,
//! whatever the daemon's size, and the calling thread waits only until the program runs.
//!
//! Because memory is shared, the child may only read what was prepared for it and write its
//! failure into [`Plan::failure`]: no allocation, no locks, no unwinding, and only
//! async-signal-safe system calls. Every signal (libc's internal ones included) is blocked in
//! the calling thread around the clone so that no handler of the daemon runs in the child; the
//! child sets every signal to its default action before unblocking them.
//!
//! On glibc before 2.24 (CentOS 7, Ubuntu 16.04) the `clone` wrapper is not safe with
//! `CLONE_VM` ([`How::Fork`]): there the child is forked as before, runs the same
//! [`child_main`], and reports a failure through a close-on-exec pipe.

use std::ffi::{c_char, c_int, c_void, CString};
use std::io;
use std::os::fd::{AsRawFd, OwnedFd, RawFd};
use std::sync::atomic::{AtomicU64, Ordering};

use nix::libc;

/// Bytes of stack for [`child_main`]: its frames plus the `getdents64` buffer, with room.
const STACK_BYTES: usize = 64 * 1024;

/// Where the child stopped when it could not start the program.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    /// `setsid` or `TIOCSCTTY`: the terminal session could not be set up.
    Session,
    /// `dup2` of the slave onto 0–2.
    Stdio,
    /// `chdir` into the working directory.
    Cwd,
    /// `execve` of every candidate path failed; the error is the one `execvp` would report.
    Exec,
}

/// Everything the child needs, built before the clone.
pub struct Plan {
    /// The PTY's slave.
    pub slave: RawFd,
    /// The working directory.
    pub cwd: CString,
    /// Paths to try in order: the program itself when it names a path, else each `PATH` entry
    /// joined with it (as `execvp` does).
    pub candidates: Vec<CString>,
    /// `argv` as C strings (`argv[0]` included).
    pub argv: Vec<CString>,
    /// The whole environment as `NAME=value`.
    pub envp: Vec<CString>,
    /// The soft descriptor limit the program gets, when it differs from the daemon's.
    pub nofile_soft: Option<u64>,
    /// Set by the child: stage (high 32 bits, 1-based) and errno (low 32 bits); 0 = none.
    failure: AtomicU64,
}

impl Plan {
    /// A plan whose child has not failed (yet).
    pub fn new(
        slave: RawFd,
        cwd: CString,
        candidates: Vec<CString>,
        argv: Vec<CString>,
        envp: Vec<CString>,
        nofile_soft: Option<u64>,
    ) -> Plan {
        Plan {
            slave,
            cwd,
            candidates,
            argv,
            envp,
            nofile_soft,
            failure: AtomicU64::new(0),
        }
    }
}

/// The shell that runs a file the kernel cannot execute (`ENOEXEC`: no `#!` line), as
/// `execvp` does it (POSIX `exec`, glibc's `maybe_script_execute`).
const SCRIPT_SHELL: &std::ffi::CStr = c"/bin/sh";

/// The child's view: raw pointer arrays into a [`Plan`], built in the parent.
struct Raw<'a> {
    plan: &'a Plan,
    argv: Vec<*const c_char>,
    envp: Vec<*const c_char>,
    /// For each candidate, the argument vector that runs it with [`SCRIPT_SHELL`]:
    /// `/bin/sh <candidate> argv[1..]`, as `execvp` builds it.
    scripts: Vec<Vec<*const c_char>>,
    /// The write end of the report pipe ([`How::Fork`]), or -1.
    report: RawFd,
}

/// How the child is created.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum How {
    /// `clone(CLONE_VM | CLONE_VFORK)`: no copy of the daemon's memory.
    Vfork,
    /// `fork`, with the failure reported through a close-on-exec pipe: for glibc before 2.24,
    /// whose `clone` wrapper writes the child's pid and tid into the *calling* thread's cached
    /// ids when `CLONE_VM` is set (glibc bug 19957), which breaks that thread's recursive
    /// mutexes and `raise` for the rest of its life. Never chosen with musl (the static agent),
    /// whose tests still run both.
    #[cfg_attr(not(target_env = "gnu"), allow(dead_code))]
    Fork,
}

/// [`How::Vfork`] where the C library's `clone` is safe with `CLONE_VM` (musl; glibc 2.24 or
/// later), else [`How::Fork`]. Decided once.
pub fn how() -> How {
    static HOW: std::sync::OnceLock<How> = std::sync::OnceLock::new();
    *HOW.get_or_init(|| {
        #[cfg(target_env = "gnu")]
        {
            // Safety: returns a static NUL-terminated string such as "2.36".
            let version = unsafe { std::ffi::CStr::from_ptr(libc::gnu_get_libc_version()) };
            let minor = version
                .to_str()
                .ok()
                .and_then(|v| v.strip_prefix("2."))
                .and_then(|m| m.split('.').next()?.parse::<u32>().ok());
            if minor.is_none_or(|m| m < 24) {
                return How::Fork;
            }
        }
        How::Vfork
    })
}

/// Starts the child described by `plan`, created `how`, and returns its pid once it has called
/// `execve` successfully.
///
/// # Errors
/// The `clone`/`fork` error (`EAGAIN`: process limit, `ENOMEM`), or the stage and errno at
/// which the child gave up (it has exited with status 127 and been reaped).
pub fn start(plan: &Plan, how: How) -> Result<u32, (Option<Stage>, io::Error)> {
    let argv = null_terminated(&plan.argv);
    let envp = null_terminated(&plan.envp);
    let scripts = plan
        .candidates
        .iter()
        .map(|path| {
            [SCRIPT_SHELL.as_ptr(), path.as_ptr()]
                .into_iter()
                .chain(plan.argv.iter().skip(1).map(|a| a.as_ptr()))
                .chain(std::iter::once(std::ptr::null()))
                .collect()
        })
        .collect();
    let report = match how {
        How::Vfork => None,
        How::Fork => Some(super::process::pipe_cloexec().map_err(|e| (None, e))?),
    };
    let raw = Raw {
        plan,
        argv,
        envp,
        scripts,
        report: report.as_ref().map_or(-1, |(_, w)| w.as_raw_fd()),
    };
    let stack = match how {
        How::Vfork => Some(Stack::new().map_err(|e| (None, e))?),
        How::Fork => None,
    };
    let old = block_all_signals();
    // Safety: the child runs only `child_main`, which honours the rules in the module docs.
    // Vfork: on `stack`, which outlives it (this thread continues only after the child's
    // `execve` or exit). Fork: in its own copy of the memory.
    let pid = unsafe {
        match &stack {
            Some(stack) => libc::clone(
                child_main,
                stack.top(),
                libc::CLONE_VM | libc::CLONE_VFORK | libc::SIGCHLD,
                &raw as *const Raw as *mut c_void,
            ),
            None => match libc::fork() {
                0 => child_main(&raw as *const Raw as *mut c_void),
                pid => pid,
            },
        }
    };
    let start_error = io::Error::last_os_error();
    restore_signals(old);
    drop(stack);
    if pid < 0 {
        return Err((None, start_error));
    }
    let failure = match report {
        None => plan.failure.load(Ordering::Acquire),
        Some((read, write)) => {
            drop(write);
            read_failure(read)
        }
    };
    if failure == 0 {
        return Ok(pid as u32);
    }
    // The child exited (127) without running the program: reap it here.
    while let Err(nix::errno::Errno::EINTR) =
        nix::sys::wait::waitpid(nix::unistd::Pid::from_raw(pid as i32), None)
    {}
    let stage = match failure >> 32 {
        1 => Stage::Session,
        2 => Stage::Stdio,
        3 => Stage::Cwd,
        _ => Stage::Exec,
    };
    let errno = (failure & 0xffff_ffff) as i32;
    Err((Some(stage), io::Error::from_raw_os_error(errno)))
}

/// What a forked child wrote to its report pipe: 0 when it reached `execve` (end of file).
fn read_failure(read: OwnedFd) -> u64 {
    let mut file = std::fs::File::from(read);
    let mut bytes = [0u8; 8];
    match std::io::Read::read_exact(&mut file, &mut bytes) {
        Ok(()) => u64::from_ne_bytes(bytes),
        Err(_) => 0,
    }
}

/// Blocks every signal in this thread, libc's internal ones included (glibc's `sigfillset` and
/// `pthread_sigmask` leave out 32 and 33), with the raw system call as glibc's `posix_spawn`
/// does. Returns the previous mask.
fn block_all_signals() -> u64 {
    let all = !0u64;
    let mut old = 0u64;
    // Safety: 8-byte kernel signal sets in local memory.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK as libc::c_long,
            &all as *const u64,
            &mut old as *mut u64,
            8 as libc::size_t,
        )
    };
    old
}

/// Puts back the mask [`block_all_signals`] returned (or, in the child, clears it with 0).
fn restore_signals(mask: u64) {
    // Safety: as in `block_all_signals`.
    unsafe {
        libc::syscall(
            libc::SYS_rt_sigprocmask,
            libc::SIG_SETMASK as libc::c_long,
            &mask as *const u64,
            std::ptr::null_mut::<u64>(),
            8 as libc::size_t,
        )
    };
}

/// The child's stack: anonymous memory with an inaccessible lowest page, so an overflow ends
/// the child with SIGSEGV instead of writing into the daemon's heap.
struct Stack {
    base: *mut c_void,
    len: usize,
}

impl Stack {
    fn new() -> io::Result<Stack> {
        let page = nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
            .ok()
            .flatten()
            .map_or(4096, |p| p as usize);
        let len = STACK_BYTES + page;
        // Safety: a fresh private anonymous mapping; the guard page is inside it.
        unsafe {
            let base = libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_STACK,
                -1,
                0,
            );
            if base == libc::MAP_FAILED {
                return Err(io::Error::last_os_error());
            }
            let stack = Stack { base, len };
            if libc::mprotect(base, page, libc::PROT_NONE) != 0 {
                return Err(io::Error::last_os_error());
            }
            Ok(stack)
        }
    }

    /// The highest address, 16-byte aligned (the stack grows down on every Linux target this
    /// agent is built for).
    fn top(&self) -> *mut c_void {
        ((self.base as usize + self.len) & !15) as *mut c_void
    }
}

impl Drop for Stack {
    fn drop(&mut self) {
        // Safety: our own mapping, no longer used (the child has exec'd or exited).
        unsafe { libc::munmap(self.base, self.len) };
    }
}

fn null_terminated(strings: &[CString]) -> Vec<*const c_char> {
    strings
        .iter()
        .map(|s| s.as_ptr())
        .chain(std::iter::once(std::ptr::null()))
        .collect()
}

/// The child: runs on its own stack in the daemon's memory, or in a forked copy (see the
/// module docs).
extern "C" fn child_main(arg: *mut c_void) -> c_int {
    // Safety: `arg` is the `Raw` the parent keeps alive while it waits (CLONE_VFORK), or this
    // process's copy of it (fork).
    let raw = unsafe { &*(arg as *const Raw) };
    let plan = raw.plan;
    let fail = |stage: u64| -> c_int {
        // Safety: reading this thread's errno.
        let errno = unsafe { *libc::__errno_location() } as u64;
        let failure = stage << 32 | errno;
        plan.failure.store(failure, Ordering::Release);
        if raw.report >= 0 {
            let bytes = failure.to_ne_bytes();
            // Safety: writing 8 bytes from the stack to our pipe.
            unsafe { libc::write(raw.report, bytes.as_ptr() as *const c_void, 8) };
        }
        // Safety: `_exit` runs no destructors and no atexit handlers of the shared process.
        unsafe { libc::_exit(127) }
    };
    reset_signal_actions();
    // Safety: plain system calls on descriptors and C strings prepared by the parent.
    unsafe {
        if libc::setsid() < 0 {
            return fail(1);
        }
        for target in 0..3 {
            // dup2 onto itself keeps close-on-exec: clear it instead.
            let moved = if plan.slave == target {
                libc::fcntl(target, libc::F_SETFD, 0)
            } else {
                libc::dup2(plan.slave, target)
            };
            if moved < 0 {
                return fail(2);
            }
        }
        if libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
            return fail(1);
        }
        if libc::chdir(plan.cwd.as_ptr()) < 0 {
            return fail(3);
        }
    }
    mark_cloexec_from(3);
    // The program gets the descriptor limit the daemon was started with (see `pty::nofile`);
    // a failure leaves it the daemon's higher one, which harms nothing but `select` users.
    if let Some(soft) = plan.nofile_soft {
        if let Ok((_, hard)) = super::nofile::get() {
            let _ = super::nofile::set(soft, hard);
        }
    }
    restore_signals(0);
    // As execvp: try each candidate; remember EACCES, stop at an error other than "not here".
    // A file the kernel cannot run (no `#!`) is run by /bin/sh instead; when that fails too,
    // the error reported is the file's own (ENOEXEC), which names the fix.
    let mut denied = false;
    // Safety: setting this thread's errno (what no candidate at all reports).
    unsafe { *libc::__errno_location() = libc::ENOENT };
    for (path, script) in plan.candidates.iter().zip(&raw.scripts) {
        // Safety: NUL-terminated arrays of C strings that live in the plan.
        unsafe { libc::execve(path.as_ptr(), raw.argv.as_ptr(), raw.envp.as_ptr()) };
        // Safety: reading this thread's errno.
        let errno = unsafe { *libc::__errno_location() };
        match errno {
            libc::EACCES => denied = true,
            libc::ENOENT | libc::ENOTDIR | libc::ESTALE | libc::ENODEV | libc::ETIMEDOUT => {}
            libc::ENOEXEC => {
                // Safety: as above; the script's vector was built by the parent.
                unsafe {
                    libc::execve(SCRIPT_SHELL.as_ptr(), script.as_ptr(), raw.envp.as_ptr());
                    *libc::__errno_location() = libc::ENOEXEC;
                }
                return fail(4);
            }
            _ => return fail(4),
        }
    }
    if denied {
        // Safety: setting this thread's errno before reporting it.
        unsafe { *libc::__errno_location() = libc::EACCES };
    }
    fail(4)
}

/// Sets every signal 1–64 (the real-time ones included: glibc's own `sigaction` refuses 32 and
/// 33, which it reserves; an ignored one would stay ignored after `execve`) to its default
/// action. The kernel's `struct sigaction` all zero is SIG_DFL with no flags and an empty mask
/// on every architecture; the buffer is larger than any of them. Async-signal-safe.
fn reset_signal_actions() {
    let default = [0u64; 8];
    for signal in 1..=64i32 {
        if signal != libc::SIGKILL && signal != libc::SIGSTOP {
            // Safety: the kernel reads at most the size of its struct from `default`; setting
            // the default action installs no handler. An invalid number gives EINVAL.
            unsafe {
                libc::syscall(
                    libc::SYS_rt_sigaction,
                    signal as libc::c_long,
                    default.as_ptr(),
                    std::ptr::null_mut::<u64>(),
                    8 as libc::size_t, // the kernel's signal set: 64 bits
                )
            };
        }
    }
}

/// Marks every descriptor `first` and above close-on-exec: `close_range` where the kernel has
/// `CLOSE_RANGE_CLOEXEC`, else [`mark_listed_cloexec`]. Async-signal-safe.
fn mark_cloexec_from(first: u32) {
    // Safety: a raw system call with integer arguments.
    let marked = unsafe {
        libc::syscall(
            libc::SYS_close_range,
            first,
            u32::MAX,
            libc::CLOSE_RANGE_CLOEXEC,
        )
    };
    if marked != 0 {
        mark_listed_cloexec(first);
    }
}

/// Marks each descriptor `first` and above that `/proc/self/fd` lists close-on-exec, reading
/// the directory with `getdents64` into a stack buffer (no allocation, so it may run after
/// `fork`). Without `/proc`, marks every number from `first` up to the descriptor limit (at
/// most 65,536). Async-signal-safe.
pub(crate) fn mark_listed_cloexec(first: u32) {
    let dir = c"/proc/self/fd";
    // Safety: a C string literal and plain flags.
    let dirfd = unsafe {
        libc::syscall(
            libc::SYS_openat,
            libc::AT_FDCWD as libc::c_long,
            dir.as_ptr(),
            (libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC) as libc::c_long,
        )
    } as c_int;
    if dirfd < 0 {
        mark_numbers_cloexec(first);
        return;
    }
    let mut buf = [0u8; 2048];
    loop {
        // Safety: `buf` is writable for its length.
        let n = unsafe { libc::syscall(libc::SYS_getdents64, dirfd, buf.as_mut_ptr(), buf.len()) };
        if n <= 0 {
            break;
        }
        for fd in dirent_numbers(&buf[..n as usize]) {
            if fd >= first && fd as i32 != dirfd {
                // Safety: setting a flag on a descriptor number; a closed one gives EBADF.
                unsafe { libc::fcntl(fd as i32, libc::F_SETFD, libc::FD_CLOEXEC) };
            }
        }
    }
    // Safety: our own descriptor.
    unsafe { libc::syscall(libc::SYS_close, dirfd as libc::c_long) };
}

/// Marks every descriptor number from `first` below the soft `RLIMIT_NOFILE` (at most 65,536)
/// close-on-exec. Async-signal-safe.
pub(crate) fn mark_numbers_cloexec(first: u32) {
    let top = match super::nofile::get() {
        Ok((soft, _)) => soft.min(65_536) as u32,
        Err(_) => 1024,
    };
    for fd in first..top {
        // Safety: as in `mark_listed_cloexec`.
        unsafe { libc::fcntl(fd as i32, libc::F_SETFD, libc::FD_CLOEXEC) };
    }
}

/// The descriptor numbers named by the `linux_dirent64` records in `records` (`.` and `..`
/// and anything not a number are skipped). Record layout (getdents64(2)): inode u64, offset
/// i64, record length u16, type u8, then the NUL-terminated name.
pub(crate) fn dirent_numbers(records: &[u8]) -> impl Iterator<Item = u32> + '_ {
    const NAME: usize = 19;
    let mut at = 0;
    std::iter::from_fn(move || {
        while at + NAME <= records.len() {
            let len = u16::from_ne_bytes([records[at + 16], records[at + 17]]) as usize;
            if len < NAME || at + len > records.len() {
                return None;
            }
            let name = &records[at + NAME..at + len];
            at += len;
            if let Some(fd) = parse_number(name) {
                return Some(fd);
            }
        }
        None
    })
}

/// The decimal number at the start of `name` up to its NUL, or `None` if it is not one.
fn parse_number(name: &[u8]) -> Option<u32> {
    let end = name.iter().position(|&b| b == 0).unwrap_or(name.len());
    let digits = &name[..end];
    if digits.is_empty() || digits.len() > 9 {
        return None;
    }
    digits.iter().try_fold(0u32, |n, &b| {
        b.is_ascii_digit().then(|| n * 10 + u32::from(b - b'0'))
    })
}
