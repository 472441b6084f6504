//! Containerized SSH hosts for integration tests.
//!
//! The image is built locally by `deploy/fixtures/build-images.sh` (no registry): [`ensure_image`]
//! runs it once per test process (behind a lock; the script also holds its own `flock`, so
//! parallel test binaries do not race) and reads the key material it leaves in the fixture dir
//! (`$RELAY_FIXTURE_DIR`, default `target/fixtures`).
//!
//! [`SshHost::start`] runs one container from that image (never pulling) with sshd's port 22
//! mapped to a fixed host port picked up front, so the port survives `restart()` and
//! `network_connect()`. Each host also gets a private temp HOME with `.ssh/` for known_hosts and
//! ssh_config files, so tests never touch the real user's files.
//!
//! Faults: [`SshHost::pause`] (host frozen, TCP still up), [`SshHost::network_disconnect`]
//! (a partition the client sees as EOF), [`SshHost::restart`] (agent and PTYs really gone), and in
//! [`crate::faults`] a silent partition, link flapping, killed TCP connections and host-side
//! inspection of the agent's shells. The docker CLI is used for `exec` (as any user) and for
//! network faults.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::{anyhow, bail, Context, Result};
use relay_connector::ssh::{AgentSource, SshOptions, SshTransport};
use testcontainers::core::{IntoContainerPort, WaitFor};
use testcontainers::runners::AsyncRunner;
use testcontainers::{ContainerAsync, GenericImage, ImageExt};
use tokio::io::AsyncReadExt;

use crate::faults::NetFaults;
pub use crate::images::{
    ensure_host_image, ensure_image, ensure_image_for, ensure_image_of, fixture_dir,
    portable_agents, repo_root, Arch, FixtureFiles, HostSpec, Suite,
};

/// The user the image authorizes the client key for.
pub const USER: &str = "relay";

/// Output of a command run in a container.
#[derive(Debug, Clone)]
pub struct ExecOut {
    /// Exit code.
    pub code: i32,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl ExecOut {
    /// Standard output, trimmed.
    pub fn out(&self) -> &str {
        self.stdout.trim()
    }
}

/// One running sshd container. Dropping it heals a partition ([`SshHost::partition`]) and
/// removes the container.
pub struct SshHost {
    container: ContainerAsync<GenericImage>,
    files: FixtureFiles,
    spec: HostSpec,
    port: u16,
    home: tempfile::TempDir,
    pub(crate) net: NetFaults,
}

impl Drop for SshHost {
    fn drop(&mut self) {
        self.net.heal_on_drop();
    }
}

fn free_port() -> Result<u16> {
    let l = std::net::TcpListener::bind("127.0.0.1:0")?;
    Ok(l.local_addr()?.port())
}

pub(crate) async fn docker(args: &[&str]) -> Result<ExecOut> {
    let out = tokio::process::Command::new("docker")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .await
        .with_context(|| format!("running docker {}", args.join(" ")))?;
    Ok(ExecOut {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
    })
}

async fn docker_ok(args: &[&str]) -> Result<ExecOut> {
    let out = docker(args).await?;
    if out.code != 0 {
        bail!("docker {} failed: {}", args.join(" "), out.stderr.trim());
    }
    Ok(out)
}

impl SshHost {
    /// Starts a host from the fixture image (building it first if needed) and waits until sshd
    /// answers with its SSH banner.
    ///
    /// # Errors
    /// When the image cannot be built or the container does not come up.
    pub async fn start() -> Result<SshHost> {
        Self::start_with(HostSpec::default()).await
    }

    /// Starts a host of the kind `spec` describes, like [`SshHost::start`].
    ///
    /// # Errors
    /// When the image cannot be built or the container does not come up.
    pub async fn start_with(spec: HostSpec) -> Result<SshHost> {
        let files = tokio::task::spawn_blocking(move || ensure_host_image(&spec)).await??;
        let scale = spec.arch.time_scale();
        let (name, tag) = files
            .image
            .rsplit_once(':')
            .ok_or_else(|| anyhow!("image ref {:?} has no tag", files.image))?;
        let mut last_err = None;
        for _ in 0..3 {
            let port = free_port()?;
            let mut request = GenericImage::new(name, tag)
                .with_wait_for(WaitFor::message_on_stderr("Server listening on"))
                .with_mapped_port(port, 22.tcp())
                .with_startup_timeout(Duration::from_secs(60) * scale);
            if spec.noexec_install_dir {
                request = request.with_host_config_modifier(|config| {
                    // Docker's own tmpfs options, as `docker run --tmpfs PATH:OPTIONS`.
                    config.tmpfs = Some(
                        [(
                            format!("/home/{USER}/.relay"),
                            "rw,noexec,nosuid,mode=1777".to_string(),
                        )]
                        .into(),
                    );
                });
            }
            match request.start().await {
                Ok(container) => {
                    let home = tempfile::tempdir()?;
                    std::fs::create_dir_all(home.path().join(".ssh"))?;
                    let host = SshHost {
                        net: NetFaults::new(container.id()),
                        container,
                        files: files.clone(),
                        spec,
                        port,
                        home,
                    };
                    host.wait_ssh(host.start_limit(30)).await?;
                    return Ok(host);
                }
                // The port may have been taken between picking and binding: try another.
                Err(e) => last_err = Some(e),
            }
        }
        Err(anyhow!(
            "starting an sshd container from {} failed: {:?}",
            files.image,
            last_err
        ))
    }

    /// Waits until the mapped port answers with an SSH banner.
    async fn wait_ssh(&self, limit: Duration) -> Result<()> {
        let deadline = Instant::now() + limit;
        loop {
            if let Ok(Ok(mut s)) = tokio::time::timeout(
                Duration::from_secs(2),
                tokio::net::TcpStream::connect(("127.0.0.1", self.port)),
            )
            .await
            {
                let mut buf = [0u8; 8];
                if let Ok(Ok(n)) =
                    tokio::time::timeout(Duration::from_secs(2), s.read(&mut buf)).await
                {
                    if buf[..n].starts_with(b"SSH-") {
                        return Ok(());
                    }
                }
            }
            if Instant::now() > deadline {
                bail!(
                    "sshd on 127.0.0.1:{} did not answer within {limit:?}",
                    self.port
                );
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }

    /// `secs` seconds scaled for this host's CPU: longer under emulation
    /// ([`Arch::time_scale`]). For limits on start-ups (sshd, the agent daemon, a shell).
    pub fn start_limit(&self, secs: u64) -> Duration {
        Duration::from_secs(secs) * self.spec.arch.time_scale()
    }

    /// What kind of host this is.
    pub fn spec(&self) -> HostSpec {
        self.spec
    }

    /// Container id.
    pub fn id(&self) -> &str {
        self.container.id()
    }

    /// Remote user name.
    pub fn user(&self) -> &str {
        USER
    }

    /// Host address to connect to.
    pub fn host(&self) -> &str {
        "127.0.0.1"
    }

    /// Host port mapped to the container's sshd (stable across restarts).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `relay@127.0.0.1:PORT`.
    pub fn destination(&self) -> String {
        format!("{USER}@127.0.0.1:{}", self.port)
    }

    /// The client private key authorized on the host.
    pub fn key_path(&self) -> &Path {
        &self.files.client_key
    }

    /// The fixture files.
    pub fn files(&self) -> &FixtureFiles {
        &self.files
    }

    /// The known_hosts line for this host: `[127.0.0.1]:PORT ssh-ed25519 AAAA...`.
    pub fn known_hosts_line(&self) -> String {
        format!("[127.0.0.1]:{} {}", self.port, self.files.host_key)
    }

    /// Private temp HOME for this host's client files (has a `.ssh/` dir).
    pub fn home(&self) -> &Path {
        self.home.path()
    }

    /// `HOME/.ssh/known_hosts`.
    pub fn known_hosts_path(&self) -> PathBuf {
        self.home().join(".ssh/known_hosts")
    }

    /// Writes `HOME/.ssh/known_hosts` with exactly this host's line and returns its path.
    ///
    /// # Errors
    /// On IO failure.
    pub fn write_known_hosts(&self) -> Result<PathBuf> {
        let p = self.known_hosts_path();
        std::fs::write(&p, format!("{}\n", self.known_hosts_line()))?;
        Ok(p)
    }

    /// Writes `HOME/.ssh/config` with a `Host alias` block for this host (HostName, User, Port,
    /// IdentityFile, UserKnownHostsFile) plus `extra` lines, and returns its path (pass it as
    /// `-F`: OpenSSH reads the passwd home, not `$HOME`).
    ///
    /// # Errors
    /// On IO failure.
    pub fn write_ssh_config(&self, alias: &str, extra: &str) -> Result<PathBuf> {
        let p = self.home().join(".ssh/config");
        let text = format!(
            "Host {alias}\n  HostName 127.0.0.1\n  User {USER}\n  Port {}\n  IdentityFile {}\n  \
             UserKnownHostsFile {}\n{extra}",
            self.port,
            self.key_path().display(),
            self.known_hosts_path().display(),
        );
        std::fs::write(&p, text)?;
        Ok(p)
    }

    /// Writes `HOME/.ssh/base_config`, an ssh_config isolating tests from the real user's files:
    /// `UserKnownHostsFile` is [`SshHost::known_hosts_path`], OpenSSH's default keys are replaced
    /// by a nonexistent file, ssh-agent keys are not offered (`IdentitiesOnly`). Returns its path.
    ///
    /// # Errors
    /// On IO failure.
    pub fn base_config(&self) -> Result<PathBuf> {
        let p = self.home().join(".ssh/base_config");
        std::fs::write(
            &p,
            format!(
                "Host *\n  UserKnownHostsFile {}\n  IdentitiesOnly yes\n  IdentityFile {}\n",
                self.known_hosts_path().display(),
                self.home().join(".ssh/no-default-key").display()
            ),
        )?;
        Ok(p)
    }

    /// SSH transport options for this host: [`SshHost::base_config`] as `-F`, the fixture key as
    /// `-i`, no ssh-agent, `agent` as the agent binary. The host key is not trusted yet (see
    /// [`SshHost::write_known_hosts`]).
    ///
    /// # Errors
    /// On IO failure.
    pub fn options(&self, agent: &Path) -> Result<SshOptions> {
        let mut opts = SshOptions {
            destination: self.destination(),
            agent: AgentSource::File(agent.to_path_buf()),
            ..SshOptions::default()
        };
        opts.resolve.config_file = Some(self.base_config()?);
        opts.auth.identities = vec![self.key_path().to_path_buf()];
        opts.auth.no_agent = true;
        Ok(opts)
    }

    /// A transport to this host that trusts its host key, deploying `agent`.
    ///
    /// # Errors
    /// On IO failure.
    pub fn transport(&self, agent: &Path) -> Result<SshTransport> {
        self.write_known_hosts()?;
        Ok(SshTransport::new(self.options(agent)?))
    }

    /// OpenSSH's `ssh` to this host with the same isolated settings (`-F` base config, fixture key,
    /// known host key, no ssh-agent), followed by `args` (remote command, `-tt`, ...). Panics
    /// when the temp HOME's files cannot be written.
    pub fn plain_ssh(&self, args: &[&str]) -> std::process::Command {
        self.plain_ssh_via(self.port, args)
    }

    /// [`SshHost::plain_ssh`] connecting to local `port` instead (a [`crate::shaper::Shaper`]
    /// in front of this host); the host key is trusted there too.
    pub fn plain_ssh_via(&self, port: u16, args: &[&str]) -> std::process::Command {
        self.trust_via(port)
            .expect("writing the test's known_hosts");
        let config = self.base_config().expect("writing the test's ssh config");
        let mut cmd = std::process::Command::new("ssh");
        cmd.arg("-F")
            .arg(config)
            .arg("-i")
            .arg(self.key_path())
            .args(["-o", "BatchMode=yes", "-p"])
            .arg(port.to_string())
            .arg(format!("{USER}@127.0.0.1"))
            .args(args)
            .env_remove("SSH_AUTH_SOCK")
            .stdin(Stdio::null());
        cmd
    }

    /// [`SshHost::options`] connecting to local `port` instead (a [`crate::shaper::Shaper`] in
    /// front of this host), with the host key trusted there too.
    ///
    /// # Errors
    /// On IO failure.
    pub fn options_via(&self, agent: &Path, port: u16) -> Result<SshOptions> {
        self.trust_via(port)?;
        let mut opts = self.options(agent)?;
        opts.destination = format!("{USER}@127.0.0.1:{port}");
        Ok(opts)
    }

    /// Writes known_hosts with this host's line and the same key for `127.0.0.1:port`.
    fn trust_via(&self, port: u16) -> Result<()> {
        let p = self.write_known_hosts()?;
        if port != self.port {
            let line = format!("[127.0.0.1]:{port} {}\n", self.files.host_key);
            std::fs::OpenOptions::new()
                .append(true)
                .open(p)?
                .write_all(line.as_bytes())?;
        }
        Ok(())
    }

    /// Runs `sh -c cmd` in the container as the `relay` user.
    ///
    /// # Errors
    /// When docker cannot run it (a non-zero exit is reported in [`ExecOut::code`]).
    pub async fn exec(&self, cmd: &str) -> Result<ExecOut> {
        self.exec_as(USER, cmd).await
    }

    /// Runs `sh -c cmd` in the container as `user` (e.g. `"root"`).
    ///
    /// # Errors
    /// When docker cannot run it.
    pub async fn exec_as(&self, user: &str, cmd: &str) -> Result<ExecOut> {
        docker(&["exec", "-u", user, self.id(), "sh", "-c", cmd]).await
    }

    /// Like [`SshHost::exec`] but fails on a non-zero exit.
    ///
    /// # Errors
    /// When docker fails or the command exits non-zero.
    pub async fn exec_ok(&self, cmd: &str) -> Result<ExecOut> {
        let out = self.exec(cmd).await?;
        if out.code != 0 {
            bail!("`{cmd}` exited {}: {}{}", out.code, out.stdout, out.stderr);
        }
        Ok(out)
    }

    /// Freezes the container (`docker pause`): TCP stays up, nothing answers.
    ///
    /// # Errors
    /// When docker fails.
    pub async fn pause(&self) -> Result<()> {
        self.container.pause().await?;
        Ok(())
    }

    /// Resumes a paused container.
    ///
    /// # Errors
    /// When docker fails.
    pub async fn unpause(&self) -> Result<()> {
        self.container.unpause().await?;
        Ok(())
    }

    /// Detaches the container from docker's bridge network (a partition; note that docker-proxy
    /// makes the client see EOF at once rather than silence).
    ///
    /// # Errors
    /// When docker fails.
    pub async fn network_disconnect(&self) -> Result<()> {
        docker_ok(&["network", "disconnect", "bridge", self.id()]).await?;
        Ok(())
    }

    /// Re-attaches the container to the bridge network and waits for sshd.
    ///
    /// # Errors
    /// When docker fails or sshd does not answer again.
    pub async fn network_connect(&self) -> Result<()> {
        docker_ok(&["network", "connect", "bridge", self.id()]).await?;
        self.wait_ssh(self.start_limit(30)).await
    }

    /// Restarts the container (every process, the agent and its PTYs included, is gone) and waits
    /// for sshd on the same port. A partition ends with it (the netfilter rules are gone).
    ///
    /// # Errors
    /// When docker fails or sshd does not come back.
    pub async fn restart(&self) -> Result<()> {
        docker_ok(&["restart", "-t", "1", self.id()]).await?;
        self.wait_ssh(self.start_limit(60)).await
    }

    /// The container's address on docker's bridge network (for jump host tests).
    ///
    /// # Errors
    /// When docker fails.
    pub async fn bridge_ip(&self) -> Result<String> {
        let out =
            docker_ok(&["inspect", "-f", "{{.NetworkSettings.IPAddress}}", self.id()]).await?;
        Ok(out.out().to_string())
    }
}

/// Makes a new ed25519 key pair at `path` (and `path.pub`) with `passphrase` (empty: none),
/// as `ssh-keygen` does; returns the public key line (`ssh-ed25519 AAAA... comment`).
///
/// # Errors
/// When `ssh-keygen` cannot run or fails.
pub fn keygen(path: &Path, passphrase: &str) -> Result<String> {
    let st = std::process::Command::new("ssh-keygen")
        .args(["-q", "-t", "ed25519", "-N", passphrase, "-f"])
        .arg(path)
        .status()?;
    anyhow::ensure!(st.success(), "ssh-keygen failed for {}", path.display());
    Ok(std::fs::read_to_string(path.with_extension("pub"))?
        .trim()
        .to_string())
}

/// Two independent hosts (for isolation tests).
///
/// # Errors
/// As [`SshHost::start`].
pub async fn two_hosts() -> Result<(SshHost, SshHost)> {
    let (a, b) = tokio::join!(SshHost::start(), SshHost::start());
    Ok((a?, b?))
}
