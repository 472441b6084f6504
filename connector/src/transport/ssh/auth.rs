//! User authentication: keys from ssh-agent first, then the identity files (`-i` files, then
//! `IdentityFile`s from the config), asking a caller-supplied callback for the passphrase of an
//! encrypted key.
//!
//! Only public key authentication is implemented (no password or keyboard-interactive prompts):
//! a failure names the user, the host and every key that was tried.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use russh::client::{AuthResult, Handle};
use russh::keys::agent::AgentIdentity;
use russh::keys::{HashAlg, PrivateKey, PrivateKeyWithHashAlg, PublicKey};

use super::config::HostConfig;
use super::handler::{russh_error, ClientHandler};
use super::known_hosts::fingerprint;
use crate::Error;

/// Asks for the passphrase of an encrypted key file. Called with the key's path and the attempt
/// number (1, 2, 3); returns `None` to skip that key. It may block (e.g. read from `/dev/tty`):
/// it is run on a blocking thread.
pub type PassphraseCallback = Arc<dyn Fn(&Path, u32) -> Option<String> + Send + Sync>;

/// How to authenticate, beyond what the ssh config says.
#[derive(Clone, Default)]
pub struct AuthOptions {
    /// Key files tried before the config's `IdentityFile`s (`ssh -i`).
    pub identities: Vec<PathBuf>,
    /// Do not use ssh-agent even when `SSH_AUTH_SOCK` is set.
    pub no_agent: bool,
    /// Passphrase prompt for encrypted keys; without it encrypted keys are skipped.
    pub passphrase: Option<PassphraseCallback>,
}

impl std::fmt::Debug for AuthOptions {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("AuthOptions")
            .field("identities", &self.identities)
            .field("no_agent", &self.no_agent)
            .field("passphrase", &self.passphrase.is_some())
            .finish()
    }
}

/// Authenticates `handle` as `cfg.user`.
///
/// # Errors
/// [`Error::Auth`] naming the user, host, the keys tried and the methods the server accepts;
/// [`Error::Ssh`] when the connection fails meanwhile.
pub(crate) async fn authenticate(
    handle: &mut Handle<ClientHandler>,
    cfg: &HostConfig,
    opts: &AuthOptions,
) -> Result<(), Error> {
    let mut tried: Vec<String> = Vec::new();
    let mut server_methods = String::new();
    let mut rsa_hash: Option<Option<HashAlg>> = None;
    let mut agent_keys: Vec<PublicKey> = Vec::new();

    let file_pubkeys: Vec<PublicKey> = identity_paths(cfg, opts)
        .iter()
        .filter_map(|p| russh::keys::load_public_key(pub_path(p)).ok())
        .collect();

    // The user's ssh-agent, if there is one to ask (`sys::connect_agent` says where it looks on
    // each platform; an empty SSH_AUTH_SOCK counts as unset, as in OpenSSH).
    let agent = match opts.no_agent {
        true => None,
        false => crate::sys::connect_agent().await,
    };
    if let Some(connected) = agent {
        match connected {
            Ok(mut agent) => match agent.request_identities().await {
                Ok(ids) => {
                    for id in ids {
                        let AgentIdentity::PublicKey { key, comment } = id else {
                            continue;
                        };
                        if cfg.identities_only && !file_pubkeys.contains(&key) {
                            continue;
                        }
                        let hash = hash_for(handle, &key, &mut rsa_hash).await?;
                        let label = format!("ssh-agent key {} ({comment})", fingerprint(&key));
                        agent_keys.push(key.clone());
                        match handle
                            .authenticate_publickey_with(&cfg.user, key, hash, &mut agent)
                            .await
                        {
                            Ok(AuthResult::Success) => return Ok(()),
                            Ok(AuthResult::Failure {
                                remaining_methods, ..
                            }) => {
                                server_methods = methods(&remaining_methods);
                                tried.push(format!("{label}: refused"));
                            }
                            Err(e) => tried.push(format!("{label}: agent error {e}")),
                        }
                        if handle.is_closed() {
                            return Err(Error::ssh(format!(
                                "{} closed the connection during authentication",
                                cfg.display()
                            )));
                        }
                    }
                }
                Err(e) => tried.push(format!("ssh-agent: cannot list keys ({e})")),
            },
            Err(e) => tried.push(format!("ssh-agent: cannot connect ({e})")),
        }
    }

    for path in identity_paths(cfg, opts) {
        let explicit = opts.identities.contains(&path);
        if !path.exists() {
            if explicit {
                tried.push(format!("{}: file not found", path.display()));
            }
            continue;
        }
        if let Ok(public) = russh::keys::load_public_key(pub_path(&path)) {
            if agent_keys.contains(&public) {
                continue; // Already offered through the agent.
            }
        }
        let key = match load_key(&path, opts).await {
            Ok(key) => key,
            Err(why) => {
                tried.push(format!("{}: {why}", path.display()));
                continue;
            }
        };
        let hash = hash_for(handle, key.public_key(), &mut rsa_hash).await?;
        let label = format!("{} ({})", path.display(), fingerprint(key.public_key()));
        let result = handle
            .authenticate_publickey(&cfg.user, PrivateKeyWithHashAlg::new(Arc::new(key), hash))
            .await
            .map_err(|e| russh_error(&format!("authenticating to {}", cfg.display()), e))?;
        match result {
            AuthResult::Success => return Ok(()),
            AuthResult::Failure {
                remaining_methods, ..
            } => {
                server_methods = methods(&remaining_methods);
                tried.push(format!("{label}: refused"));
            }
        }
    }

    let tried = if tried.is_empty() {
        "no key was available (ssh-agent not running or empty, no identity file found)".to_string()
    } else {
        format!("tried {}", tried.join("; "))
    };
    let methods = if server_methods.is_empty() {
        String::new()
    } else {
        format!("; the server accepts: {server_methods}")
    };
    Err(Error::Auth(format!(
        "{} refused user {:?}: {tried}{methods}. Add the right key to ssh-agent, pass it with \
         -i FILE, or set IdentityFile for this host in ~/.ssh/config",
        cfg.display(),
        cfg.user
    )))
}

/// `-i` files first, then the config's, without duplicates.
fn identity_paths(cfg: &HostConfig, opts: &AuthOptions) -> Vec<PathBuf> {
    let mut out: Vec<PathBuf> = Vec::new();
    for p in opts.identities.iter().chain(cfg.identity_files.iter()) {
        if !out.contains(p) {
            out.push(p.clone());
        }
    }
    out
}

fn pub_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".pub");
    PathBuf::from(s)
}

fn methods(set: &russh::MethodSet) -> String {
    set.iter().map(<&str>::from).collect::<Vec<_>>().join(",")
}

/// The signature hash for `key`: for RSA the best one the server supports, else none.
async fn hash_for(
    handle: &Handle<ClientHandler>,
    key: &PublicKey,
    cache: &mut Option<Option<HashAlg>>,
) -> Result<Option<HashAlg>, Error> {
    if !key.algorithm().is_rsa() {
        return Ok(None);
    }
    if let Some(h) = cache {
        return Ok(*h);
    }
    let best = handle
        .best_supported_rsa_hash()
        .await
        .map_err(|e| russh_error("asking the server for RSA signature algorithms", e))?
        .flatten();
    *cache = Some(best);
    Ok(best)
}

/// Loads a key file, asking for its passphrase (up to three times) when it is encrypted.
/// `Err` carries a short reason for the "tried" list.
async fn load_key(path: &Path, opts: &AuthOptions) -> Result<PrivateKey, String> {
    let p = path.to_path_buf();
    let first = tokio::task::spawn_blocking(move || russh::keys::load_secret_key(&p, None))
        .await
        .map_err(|e| e.to_string())?;
    match first {
        Ok(key) => return Ok(key),
        Err(russh::keys::Error::KeyIsEncrypted) => {}
        Err(e) => return Err(format!("cannot load key ({e})")),
    }
    let Some(ask) = opts.passphrase.clone() else {
        return Err("encrypted and no passphrase prompt is available".into());
    };
    for attempt in 1..=3u32 {
        let (ask, p) = (ask.clone(), path.to_path_buf());
        let result = tokio::task::spawn_blocking(move || {
            let pass = ask(&p, attempt)?;
            Some(russh::keys::load_secret_key(&p, Some(&pass)))
        })
        .await
        .map_err(|e| e.to_string())?;
        match result {
            None => return Err("encrypted; passphrase not given".into()),
            Some(Ok(key)) => return Ok(key),
            Some(Err(e)) => tracing::warn!(key = %path.display(), "passphrase rejected: {e}"),
        }
    }
    Err("encrypted; passphrase rejected three times".into())
}
