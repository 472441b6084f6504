//! Where a command-line tool connects: this machine or an SSH host, resolved in one place for
//! `relay` and `relayctl`.

use std::fmt;

use relay_connector::ssh::SshTransport;
use relay_connector::{Error, LocalTransport, Transport};

use super::ssh_args::SshArgs;

/// A destination chosen on the command line.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// The agent on this machine, through [`LocalTransport`].
    Local,
    /// An SSH destination (`user@host`, `host:port` or an ssh_config alias).
    Host(String),
}

impl Destination {
    /// Resolves the command-line choice: `--local` or no host means [`Destination::Local`].
    ///
    /// # Errors
    /// [`Error::Config`] when both `--local` and a host were given.
    pub fn from_args(local: bool, host: Option<&str>) -> Result<Destination, Error> {
        match (local, host) {
            (true, Some(h)) => Err(Error::config(format!(
                "both --local and host {h:?} were given; pick one"
            ))),
            (_, None) => Ok(Destination::Local),
            (false, Some(h)) => Ok(Destination::Host(h.to_string())),
        }
    }

    /// The transport that reaches this destination; `ssh` holds the SSH flags (`--accept-new`,
    /// `-F`, `-i`, `--port`) and is ignored for [`Destination::Local`].
    ///
    /// # Errors
    /// None today; kept fallible for transports that check their settings up front.
    pub fn transport_with(&self, ssh: &SshArgs) -> Result<Box<dyn Transport>, Error> {
        match self {
            Destination::Local => Ok(Box::new(LocalTransport::new())),
            Destination::Host(host) => Ok(Box::new(SshTransport::new(ssh.options(host)))),
        }
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Destination::Local => f.write_str("local"),
            Destination::Host(h) => f.write_str(h),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn local_is_the_default_and_conflicts_with_a_host() {
        assert_eq!(
            Destination::from_args(false, None).unwrap(),
            Destination::Local
        );
        assert_eq!(
            Destination::from_args(true, None).unwrap(),
            Destination::Local
        );
        assert_eq!(
            Destination::from_args(false, Some("u@h")).unwrap(),
            Destination::Host("u@h".into())
        );
        assert!(Destination::from_args(true, Some("u@h")).is_err());
    }

    #[test]
    fn a_host_is_reached_over_ssh() {
        let t = Destination::Host("u@h:2222".into())
            .transport_with(&SshArgs::default())
            .unwrap();
        assert_eq!(t.describe(), "u@h:2222");
    }
}
