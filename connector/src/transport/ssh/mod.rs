//! The SSH transport: reach a host's agent the way a user's own `ssh` would.
//!
//! # Layout
//!
//! - [`destination`]: what the user typed, split and checked (no shell metacharacters in host or
//!   user names, as in OpenSSH); values quoted for a `ProxyCommand`.
//! - [`config`]: destination → [`HostConfig`] via `ssh -G` (or the `ssh2-config` parser).
//! - [`known_hosts`]: strict host key checking, `accept-new`.
//! - [`auth`]: ssh-agent, identity files, passphrase callback.
//! - `connect`: TCP / `ProxyCommand` / `ProxyJump`, key exchange, authentication.
//! - [`deploy`]: platform probe, agent check, the bridge command; in its folder, `upload` (gzip
//!   when the host has it, hash verification), `agent_source` (which local agent binary a host's
//!   platform gets, [`AgentSource`]) and [`host_check`] (can the host run it: glibc version,
//!   musl, `noexec`, before any upload).
//! - `bridge`: the bridge's exec channel as a byte reader (skips shell noise, logs stderr).
//! - `exec`: one remote command with output and exit status (deploy steps).
//! - [`ssh_transport`]: [`SshTransport`], the [`Transport`](crate::transport::Transport) over all of it.
//!
//! One [`Transport::open`](crate::transport::Transport::open) = one SSH connection and one exec
//! channel; the session layer puts every workspace and pane of the host on it.
//!
//! Error kinds: [`Error::HostKey`](crate::Error::HostKey) (unknown key),
//! [`Error::HostKeyChanged`](crate::Error::HostKeyChanged), [`Error::Auth`](crate::Error::Auth) and
//! [`Error::Config`](crate::Error::Config) cannot be fixed by retrying;
//! [`Error::ConnectRefused`](crate::Error::ConnectRefused),
//! [`Error::ConnectTimeout`](crate::Error::ConnectTimeout) and [`Error::Ssh`](crate::Error::Ssh)
//! (network, keepalive) can. The russh or IO error behind one is its `source()`.

pub mod auth;
mod bridge;
pub mod config;
mod connect;
pub mod deploy;
pub mod destination;
mod exec;
mod handler;
pub mod known_hosts;
pub mod ssh_transport;

pub use auth::{AuthOptions, PassphraseCallback};
pub use config::{HostConfig, ResolveOptions, StrictHostKeyChecking};
pub use connect::{DEFAULT_CONNECT_TIMEOUT, DEFAULT_KEEPALIVE_INTERVAL, DEFAULT_KEEPALIVE_MAX};
pub use deploy::{host_check, AgentSource, DeployEvent, DeployReport, ProgressCallback};
pub use known_hosts::{HostKeyPolicy, HostKeyPrompt, UnknownHostKey};
pub use ssh_transport::{SshOptions, SshTransport};
