//! Fixture images and agents built on demand: the sshd host images of
//! `deploy/fixtures/build-images.sh` (one per Debian [`Suite`] and CPU [`Arch`]) and the
//! portable agents of
//! `deploy/build-agents.sh`. Each is built at most once per test process (behind a lock; the
//! scripts also hold their own locks, so parallel test binaries do not race).

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Mutex, OnceLock};

use anyhow::{anyhow, bail, Context, Result};
use relay_connector::LockExt;

/// Files produced by `build-images.sh`.
#[derive(Debug, Clone)]
pub struct FixtureFiles {
    /// Image reference, `relay-test/sshd:<tag>`.
    pub image: String,
    /// Client private key authorized for [`USER`](crate::fixture::USER).
    pub client_key: PathBuf,
    /// The image's ed25519 host key, `ssh-ed25519 AAAA...`.
    pub host_key: String,
}

/// The repository root (parent of the `tests` crate).
pub fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("tests crate has a parent dir")
        .to_path_buf()
}

/// `$RELAY_FIXTURE_DIR`, default `<repo>/target/fixtures`.
pub fn fixture_dir() -> PathBuf {
    std::env::var_os("RELAY_FIXTURE_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| repo_root().join("target/fixtures"))
}

/// The Debian release of a fixture host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Suite {
    /// Debian 12 (glibc 2.36, OpenSSH 9.2): the default host.
    #[default]
    Bookworm,
    /// Debian 11 (glibc 2.31, OpenSSH 8.4): the C library of Ubuntu 20.04 and RHEL 8 class
    /// hosts, older than the one this machine builds against.
    Bullseye,
}

impl Suite {
    fn name(self) -> &'static str {
        match self {
            Suite::Bookworm => "bookworm",
            Suite::Bullseye => "bullseye",
        }
    }

    /// Suffix of the build script's output files for this suite (none for the default).
    fn file_suffix(self) -> &'static str {
        match self {
            Suite::Bookworm => "",
            Suite::Bullseye => "-bullseye",
        }
    }
}

/// The CPU of a fixture host.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Arch {
    /// This machine's: the container runs natively.
    #[default]
    Native,
    /// aarch64 (Debian `arm64`). Unless this machine is aarch64 itself, the container runs
    /// under qemu-user-static through binfmt_misc, several times slower than natively.
    Arm64,
}

impl Arch {
    /// Whether hosts of this architecture run under emulation here.
    pub fn emulated(self) -> bool {
        match self {
            Arch::Native => false,
            Arch::Arm64 => std::env::consts::ARCH != "aarch64",
        }
    }

    /// What `uname -m` says on such a host.
    pub fn uname_m(self) -> &'static str {
        match self {
            Arch::Native => std::env::consts::ARCH,
            Arch::Arm64 => "aarch64",
        }
    }

    /// The `--arch` argument of the build script (none: this machine's).
    fn script_arg(self) -> Option<&'static str> {
        self.emulated().then_some("arm64")
    }

    /// Suffix of the build script's output files, after the suite's (none for this machine's).
    fn file_suffix(self) -> &'static str {
        if self.emulated() {
            "-arm64"
        } else {
            ""
        }
    }

    /// How many times longer than a native host's a start-up limit is on this one (sshd,
    /// `ssh-keygen` and the agent run under qemu: about 4× slower).
    pub fn time_scale(self) -> u32 {
        if self.emulated() {
            4
        } else {
            1
        }
    }
}

/// What kind of host [`SshHost::start_with`](crate::fixture::SshHost::start_with) starts.
#[derive(Debug, Clone, Copy, Default)]
pub struct HostSpec {
    /// The Debian release.
    pub suite: Suite,
    /// The CPU.
    pub arch: Arch,
    /// Mount a `noexec` tmpfs on `~relay/.relay`, where relay installs its agent (as on hosts
    /// whose home directories are mounted `noexec`).
    pub noexec_install_dir: bool,
    /// A host without glibc (`deploy/fixtures/build-noglibc-image.sh`): busybox for every user
    /// program, sshd with a private glibc; only a static agent runs there. Bookworm's sshd on
    /// this machine's CPU: `suite` and `arch` must be the defaults.
    pub no_glibc: bool,
}

/// Builds the image of the host `spec` describes if needed (once per process and kind) and
/// returns its files.
///
/// # Errors
/// As [`ensure_image_of`]; a `no_glibc` spec with another suite or CPU than the defaults.
pub fn ensure_host_image(spec: &HostSpec) -> Result<FixtureFiles> {
    if !spec.no_glibc {
        return ensure_image_of(spec.suite, spec.arch);
    }
    if spec.suite != Suite::Bookworm || spec.arch != Arch::Native {
        bail!("the host without glibc is built for bookworm on this machine's CPU only");
    }
    static ONCE: OnceLock<Mutex<Option<FixtureFiles>>> = OnceLock::new();
    let mut done = ONCE.get_or_init(|| Mutex::new(None)).lock_unpoisoned();
    if let Some(files) = done.as_ref() {
        return Ok(files.clone());
    }
    run_script("deploy/fixtures/build-noglibc-image.sh", |_| {})?;
    let files = read_files("-noglibc")?;
    *done = Some(files.clone());
    Ok(files)
}

/// The files `build-images.sh` (or `build-noglibc-image.sh`) wrote for the image whose files end
/// in `sfx`.
fn read_files(sfx: &str) -> Result<FixtureFiles> {
    let dir = fixture_dir();
    let read = |name: &str| -> Result<String> {
        let p = dir.join(name);
        Ok(std::fs::read_to_string(&p)
            .with_context(|| format!("reading {}", p.display()))?
            .trim()
            .to_string())
    };
    let files = FixtureFiles {
        image: read(&format!("image{sfx}"))?,
        client_key: dir.join("id_ed25519"),
        host_key: read(&format!("host_ed25519{sfx}.pub"))?,
    };
    if !files.client_key.is_file() {
        bail!(
            "{} is missing after the image build",
            files.client_key.display()
        );
    }
    Ok(files)
}

/// Builds the default (bookworm) fixture image if needed (once per process) and returns its
/// files.
///
/// # Errors
/// As [`ensure_image_for`].
pub fn ensure_image() -> Result<FixtureFiles> {
    ensure_image_for(Suite::Bookworm)
}

/// Builds the fixture image of `suite` for this machine's CPU if needed (once per process and
/// suite) and returns its files.
///
/// # Errors
/// As [`ensure_image_of`].
pub fn ensure_image_for(suite: Suite) -> Result<FixtureFiles> {
    ensure_image_of(suite, Arch::Native)
}

/// Builds the fixture image of `suite` and `arch` if needed (once per process, suite and
/// architecture) and returns its files.
///
/// # Errors
/// When the build script fails (its stderr is included: for an emulated architecture, e.g. that
/// qemu-user-static is missing, with the fix) or its output files are missing.
pub fn ensure_image_of(suite: Suite, arch: Arch) -> Result<FixtureFiles> {
    /// The images built by this process, by suite and architecture.
    type Built = Vec<((Suite, Arch), FixtureFiles)>;
    static ONCE: OnceLock<Mutex<Built>> = OnceLock::new();
    let lock = ONCE.get_or_init(|| Mutex::new(Vec::new()));
    let mut done = lock.lock_unpoisoned();
    if let Some((_, files)) = done.iter().find(|(k, _)| *k == (suite, arch)) {
        return Ok(files.clone());
    }
    run_script("deploy/fixtures/build-images.sh", |cmd| {
        cmd.args(["--suite", suite.name()]);
        if let Some(a) = arch.script_arg() {
            cmd.args(["--arch", a]);
        }
    })?;
    let files = read_files(&format!("{}{}", suite.file_suffix(), arch.file_suffix()))?;
    done.push(((suite, arch), files.clone()));
    Ok(files)
}

/// Builds the portable agents with `deploy/build-agents.sh` (once per process; incremental) into
/// `agents/` beside the directory of this build's `relay` binary, where `relay` looks for them by
/// default, and returns that directory.
///
/// # Errors
/// When the script fails (its stderr is included: e.g. cargo-zigbuild missing, with the fix).
pub fn portable_agents() -> Result<PathBuf> {
    static ONCE: OnceLock<Mutex<Option<PathBuf>>> = OnceLock::new();
    let lock = ONCE.get_or_init(|| Mutex::new(None));
    let mut done = lock.lock_unpoisoned();
    if let Some(dir) = done.as_ref() {
        return Ok(dir.clone());
    }
    let relay = &crate::bins().relay;
    let dir = relay
        .parent()
        .and_then(Path::parent)
        .ok_or_else(|| anyhow!("{} has no grandparent directory", relay.display()))?
        .join("agents");
    run_script("deploy/build-agents.sh", |cmd| {
        cmd.env("RELAY_AGENTS_OUT", &dir);
    })?;
    *done = Some(dir.clone());
    Ok(dir)
}

/// Runs the repository's bash script `relative` (set up by `setup`) to completion.
///
/// # Errors
/// When it cannot start or fails; the error quotes its exit status and stderr.
fn run_script(relative: &str, setup: impl FnOnce(&mut std::process::Command)) -> Result<()> {
    let script = repo_root().join(relative);
    let mut cmd = std::process::Command::new("bash");
    cmd.arg(&script).stdin(Stdio::null());
    setup(&mut cmd);
    let out = cmd
        .output()
        .with_context(|| format!("running {}", script.display()))?;
    if !out.status.success() {
        bail!(
            "{} failed ({}): {}",
            script.display(),
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(())
}
