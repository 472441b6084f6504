//! What the user typed as a destination: split into user, host and port, and checked before
//! anything runs with it.
//!
//! # Names that reach a shell
//!
//! The host and user names end up in commands: `ssh -G` gets them as arguments, and a
//! `ProxyCommand`'s `%h`, `%r` and `%n` run through `sh -c`. OpenSSH's reference behaviour
//! (`valid_hostname` and `valid_ruser`, applied to what is given on the command line since
//! OpenSSH 9.6) is to refuse such names outright, and relay does the same before running
//! anything:
//!
//! - a host name may not start with `-` and may not contain whitespace, control characters or
//!   any of `` ' ` " $ \ ; & < > | ( ) { } , ``;
//! - a user name may not start with `-`, contain control characters or any of
//!   `` ' ` " ; & < > | ( ) { } ``, have whitespace followed by `-`, or end with `\`.
//!
//! Values that come from the ssh config (`HostName`, `User`) are the user's own and are not
//! refused, but every value substituted into a `ProxyCommand` is quoted for the shell
//! ([`shell_word`]), so neither source can add a command.

use std::borrow::Cow;

use crate::Error;

/// A destination split into its parts: `[user@]host[:port]`, `[user@][v6addr]:port` or
/// `ssh://[user@]host[:port]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Destination {
    /// User, if given.
    pub user: Option<String>,
    /// Host name, address or alias.
    pub host: String,
    /// Port, if given.
    pub port: Option<u16>,
}

impl Destination {
    /// Splits a destination string and checks its host and user names (see the module docs).
    ///
    /// # Errors
    /// [`Error::Config`] for an empty host, a port that is not a number, or a host or user
    /// name that OpenSSH would refuse too (naming the offending character).
    pub fn parse(s: &str) -> Result<Self, Error> {
        let rest = s.strip_prefix("ssh://").unwrap_or(s);
        let rest = rest.trim_end_matches('/');
        let (user, hostport) = match rest.rsplit_once('@') {
            Some((u, h)) => (Some(u.to_string()), h),
            None => (None, rest),
        };
        let bad_port = |p: &str| {
            Error::config(format!(
                "destination {s:?}: port {p:?} is not a number between 1 and 65535"
            ))
        };
        let (host, port) = if let Some(inner) = hostport.strip_prefix('[') {
            let (addr, after) = inner.split_once(']').ok_or_else(|| {
                Error::config(format!("destination {s:?}: missing ']' after the address"))
            })?;
            let port = match after.strip_prefix(':') {
                Some(p) => Some(p.parse::<u16>().map_err(|_| bad_port(p))?),
                None if after.is_empty() => None,
                None => return Err(Error::config(format!("destination {s:?}: junk after ']'"))),
            };
            (addr.to_string(), port)
        } else {
            match hostport.split_once(':') {
                // More than one ':' without brackets: a bare IPv6 address.
                Some((_, p)) if p.contains(':') => (hostport.to_string(), None),
                Some((h, p)) => (
                    h.to_string(),
                    Some(p.parse::<u16>().map_err(|_| bad_port(p))?),
                ),
                None => (hostport.to_string(), None),
            }
        };
        if host.is_empty() {
            return Err(Error::config(format!("destination {s:?} has no host name")));
        }
        if port == Some(0) {
            return Err(bad_port("0"));
        }
        check_hostname(&host)?;
        if let Some(user) = &user {
            check_user(user)?;
        }
        Ok(Destination { user, host, port })
    }
}

/// Characters OpenSSH refuses in a host name given on the command line (besides whitespace and
/// control characters).
const HOST_FORBIDDEN: &str = "'`\"$\\;&<>|(){},";

/// Characters OpenSSH refuses in a user name given on the command line (besides control
/// characters).
const USER_FORBIDDEN: &str = "'`\";&<>|(){}";

/// Checks a host name (or ssh_config alias) as given by the user, as OpenSSH's
/// `valid_hostname` does.
///
/// # Errors
/// [`Error::Config`] naming the name, the offending character and the fix.
pub fn check_hostname(host: &str) -> Result<(), Error> {
    let bad = |what: String| {
        Err(Error::config(format!(
            "destination host {host:?} {what}, which no host name or ssh_config alias has \
             (OpenSSH refuses it too); check the destination"
        )))
    };
    if host.starts_with('-') {
        return bad("starts with '-'".into());
    }
    match host
        .chars()
        .find(|c| HOST_FORBIDDEN.contains(*c) || c.is_whitespace() || c.is_control())
    {
        Some(c) => bad(format!("contains {c:?}")),
        None => Ok(()),
    }
}

/// Checks a remote user name as given by the user (`user@` or `-l`), as OpenSSH's
/// `valid_ruser` does.
///
/// # Errors
/// [`Error::Config`] naming the name, the offending character and the fix.
pub fn check_user(user: &str) -> Result<(), Error> {
    let bad = |what: String| {
        Err(Error::config(format!(
            "remote user name {user:?} {what}, which OpenSSH refuses too; check the user@ part \
             of the destination or -l"
        )))
    };
    if user.starts_with('-') {
        return bad("starts with '-'".into());
    }
    if user.ends_with('\\') {
        return bad("ends with '\\'".into());
    }
    let chars: Vec<char> = user.chars().collect();
    for (i, c) in chars.iter().enumerate() {
        if USER_FORBIDDEN.contains(*c) || c.is_control() {
            return bad(format!("contains {c:?}"));
        }
        if c.is_whitespace() && chars.get(i + 1) == Some(&'-') {
            return bad("has a '-' after whitespace".into());
        }
    }
    Ok(())
}

/// Quotes `s` for a POSIX shell (single quotes). The one quoting rule of the SSH transport: the
/// deploy and upload scripts use it too.
pub(crate) fn sh_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', r"'\''"))
}

/// `value` as one shell word: unchanged when it holds only ASCII letters, digits and `._-:@/+%`
/// (every ordinary host, user and alias), else single-quoted. An allow-list, not a list of
/// dangerous characters, so a character some shell treats specially (bash's `{a,b}` or `!`) is
/// quoted too.
pub fn shell_word(value: &str) -> Cow<'_, str> {
    let plain = |c: char| c.is_ascii_alphanumeric() || "._-:@/+%".contains(c);
    if !value.is_empty() && value.chars().all(plain) {
        Cow::Borrowed(value)
    } else {
        Cow::Owned(sh_quote(value))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn destinations_split_like_ssh() {
        let d = |s| Destination::parse(s).unwrap();
        assert_eq!(
            d("relay@db1:2222"),
            Destination {
                user: Some("relay".into()),
                host: "db1".into(),
                port: Some(2222)
            }
        );
        assert_eq!(d("db1").port, None);
        assert_eq!(d("ssh://a@b:7/").port, Some(7));
        assert_eq!(d("[::1]:2200").host, "::1");
        assert_eq!(d("fe80::1").host, "fe80::1");
        assert!(Destination::parse("relay@").is_err());
        assert!(Destination::parse("db1:http").is_err());
    }

    /// A destination with shell metacharacters is refused before anything runs;
    /// the error names the character.
    #[test]
    fn host_and_user_names_with_shell_metacharacters_are_refused_like_openssh() {
        for bad in [
            "a;touch /tmp/x",
            "a$(touch x)",
            "a`id`",
            "a|b",
            "a&b",
            "a b",
            "a\tb",
            "-oProxyCommand=x",
            "a{b,c}",
            "a'b",
            "a\"b",
            "a\\b",
            "a<b",
            "a\nb",
        ] {
            let err = Destination::parse(bad).unwrap_err();
            assert!(matches!(err, Error::Config { .. }), "{bad:?}: {err:?}");
            assert!(err.to_string().contains("check the destination"), "{err}");
        }
        let err = Destination::parse("a;b@host").unwrap_err().to_string();
        assert!(err.contains("';'") && err.contains("user"), "{err}");
        for bad_user in ["-l", "a b -x", "a\\", "a|b", "a$(x)b;"] {
            assert!(check_user(bad_user).is_err(), "{bad_user:?}");
        }
        // What real names look like passes: names, addresses, zones, aliases, odd users.
        for good in [
            "db1",
            "db-1.example.com",
            "10.0.0.1",
            "fe80::1%eth0",
            "[::1]:22",
            "my_alias",
            "user.name@host",
            "DOMAIN+user@h",
            "ssh://a@b:7",
        ] {
            Destination::parse(good).unwrap_or_else(|e| panic!("{good:?}: {e}"));
        }
        assert!(check_user("Dom User").is_ok(), "OpenSSH allows spaces");
    }

    #[test]
    fn shell_words_quote_anything_but_plain_names() {
        assert_eq!(shell_word("db-1.example.com"), "db-1.example.com");
        assert_eq!(shell_word("fe80::1%eth0"), "fe80::1%eth0");
        assert_eq!(shell_word("a;touch /tmp/x"), "'a;touch /tmp/x'");
        assert_eq!(shell_word("it's"), "'it'\\''s'");
        assert_eq!(shell_word("x{a,b}"), "'x{a,b}'");
        assert_eq!(shell_word(""), "''");
    }
}
