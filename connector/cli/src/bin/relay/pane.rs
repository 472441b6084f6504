//! Finding the pane `relay shell` and `relay attach` show: attach to the pane's live shell, or
//! (shell only) start one, saying why when the previous one ended, and the one-sentence errors
//! for a pane that cannot be attached.

use std::fmt::Display;
use std::time::SystemTime;

use anyhow::Context;
use relay_cli::destination::Destination;
use relay_connector::{Host, PaneHandle, Session};
use relay_protocol::{ErrorReply, PaneKey, Resume, SpawnSpec, TermSize};

use crate::cli::PaneArgs;

/// Where output of an existing pane starts: on a terminal, its screen (a snapshot: the screen
/// and a short scrollback, drawn at once, instead of megabytes of history); into a pipe, every
/// byte the agent still holds.
pub(crate) fn reattach(size: Option<TermSize>) -> Resume {
    match size {
        Some(_) => Resume::Snapshot,
        None => Resume::From(0),
    }
}

/// Attaches to `pane`'s live shell (never creates): on a terminal from its screen (see
/// [`reattach`]); into a file or pipe (`lossless`) losslessly from the oldest byte the agent
/// holds, so every byte from then on arrives.
pub(crate) async fn attach(
    host: &Host,
    pane: &PaneKey,
    size: Option<TermSize>,
    lossless: bool,
) -> Result<PaneHandle, relay_connector::Error> {
    if lossless {
        host.attach_pane_lossless(pane.clone(), None, 0).await
    } else {
        host.attach_pane(pane.clone(), None, reattach(size)).await
    }
}

/// `relay shell`: the pane's live shell, or a new one. Without a command the pane is attached
/// first, so that a shell that ended (host rebooted, agent restarted) is reported before a new
/// one starts; with a command a new pane runs it. `lossless`: relay's output goes to a file or
/// pipe (see [`attach`]).
pub(crate) async fn open_pane(
    host: &Host,
    session: &Session,
    args: &PaneArgs,
    pane: &PaneKey,
    destination: &Destination,
    size: Option<TermSize>,
    lossless: bool,
) -> anyhow::Result<PaneHandle> {
    if args.command.is_empty() {
        match attach(host, pane, size, lossless).await {
            Ok(h) => return Ok(h),
            Err(e) if e.is_not_found() => {}
            Err(e) if e.is_ended() => eprintln!("{}", previous_ended(session, &e, pane).await),
            Err(e) => return Err(e).with_context(|| format!("cannot attach to pane {pane}")),
        }
    }
    let spec = SpawnSpec {
        command: remote_command(&args.command),
        cwd: match destination {
            Destination::Local => local_cwd(),
            Destination::Host(_) => None,
        },
        term: std::env::var("TERM").ok().filter(|t| !t.is_empty()),
        size: size.unwrap_or_default(),
        env: Vec::new(),
    };
    let opened = if lossless {
        host.open_pane_lossless(pane.clone(), spec, 0).await
    } else {
        host.open_pane(pane.clone(), spec, Resume::From(0)).await
    };
    let (created, handle) =
        opened.with_context(|| format!("cannot open a shell for pane {pane}"))?;
    if created.existed && !args.command.is_empty() {
        eprintln!(
            "[pane {pane} already runs a shell; attached to it, the command was not started]"
        );
    }
    Ok(handle)
}

/// The argv for `relay shell -- CMD ARGS`: like ssh, the words are joined with spaces and run by
/// a shell on the host (`/bin/sh -c`), so `relay shell h -- 'echo $HOME'` expands on the host.
/// Empty for the login shell.
fn remote_command(words: &[String]) -> Vec<String> {
    if words.is_empty() {
        return Vec::new();
    }
    vec!["/bin/sh".into(), "-c".into(), words.join(" ")]
}

/// "the previous shell of pane w/main/0 ended: agent restarted 12 min ago; starting a new
/// shell".
async fn previous_ended(session: &Session, e: &relay_connector::Error, pane: &PaneKey) -> String {
    let Some(ErrorReply::Ended {
        pty, reason, exit, ..
    }) = e.agent_reply()
    else {
        return format!("[the previous shell of pane {pane} ended; starting a new shell]");
    };
    let when = session
        .list_leases()
        .await
        .ok()
        .and_then(|leases| leases.into_iter().find(|l| l.binding.pty == *pty))
        .map(|l| format!(" {}", ago(l.since_ms)))
        .unwrap_or_default();
    let how = exit.as_ref().map(|x| format!(", {x}")).unwrap_or_default();
    format!("[the previous shell of pane {pane} ended: {reason}{when}{how}; starting a new shell]")
}

/// `12 min ago` for a time in milliseconds since the Unix epoch.
fn ago(ms: u64) -> String {
    let now = SystemTime::now()
        .duration_since(SystemTime::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or(ms);
    let secs = now.saturating_sub(ms) / 1000;
    match secs {
        0..=89 => format!("{secs} s ago"),
        90..=5399 => format!("{} min ago", (secs + 30) / 60),
        _ => format!("{} h ago", (secs + 1800) / 3600),
    }
}

/// One sentence for `relay attach` to a pane that does not exist or has ended.
pub(crate) fn not_attachable(
    e: &relay_connector::Error,
    pane: &PaneKey,
    destination: &impl Display,
) -> String {
    match e.agent_reply() {
        Some(ErrorReply::Ended { exit, reason, .. }) => {
            let how = exit.as_ref().map(|x| format!(", {x}")).unwrap_or_default();
            format!("pane {pane} has ended ({reason}{how}); use `relay shell` to start a new shell")
        }
        _ => format!("no pane {pane} on {destination}; use `relay shell` to create it"),
    }
}

/// The directory a local shell starts in: this process's current directory. When it cannot be
/// read (it was deleted) or carried (not UTF-8: the protocol's paths are text), the shell
/// starts in the home directory, and stderr says why, as bash's "error retrieving current
/// directory" does, rather than moving the user silently.
fn local_cwd() -> Option<String> {
    let why = match std::env::current_dir() {
        Ok(dir) => match dir.into_os_string().into_string() {
            Ok(dir) => return Some(dir),
            Err(raw) => format!("the current directory {raw:?} is not valid UTF-8"),
        },
        Err(e) => format!("cannot read the current directory ({e})"),
    };
    eprintln!("[relay: {why}; the shell starts in your home directory]");
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ages_read_naturally() {
        let now = SystemTime::now()
            .duration_since(SystemTime::UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        assert_eq!(ago(now - 5_000), "5 s ago");
        assert_eq!(ago(now - 12 * 60_000), "12 min ago");
        assert_eq!(ago(now - 3 * 3_600_000), "3 h ago");
    }
}
