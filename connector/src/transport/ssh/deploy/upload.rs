//! Uploading the agent binary (deploy step 3): compressed with gzip when the host has `gzip`,
//! written to a unique temp name next to its final name, hashed on the host after it was
//! unpacked, and only if that hash is the expected one made executable and renamed into place.
//!
//! Compression: the release agent is ~6.7 MB and gzip's fastest level makes it ~2.5 MB, so a
//! 10 Mbit/s link uploads it in ~2 s instead of ~5.4 s; compressing costs ~0.1 s of CPU here.
//! What is verified is always the unpacked file's sha256 against the local binary's, so a
//! broken `gzip` on the host can only fail the deploy, never install a wrong file. When
//! `gzip -dc` fails, the host checks whether its gzip works at all (one byte through it and
//! back): a broken one gets the plain binary once more; a working one means the write failed (a
//! full disk, a quota, permissions), reported as such without sending anything again.

use std::io::Write;

use flate2::write::GzEncoder;
use flate2::Compression;
use rand::Rng;
use russh::client::{Handle, Msg};
use russh::Channel;

use super::agent_source::LocalAgent;
use super::events::{DeployEvent, DeployReport, ProgressCallback};
use crate::transport::ssh::destination::sh_quote;
use crate::transport::ssh::exec::{self, after_sentinel, sentinel, sh_command};
use crate::transport::ssh::handler::ClientHandler;
use crate::Error;

/// Exit status of the upload command when the host could not hash the uploaded file.
const UPLOAD_HASH_FAILED: u32 = 7;

/// Exit status of the upload command when the host's gzip does not work (the plain binary is
/// sent instead).
const UPLOAD_UNPACK_FAILED: u32 = 8;

/// Exit status of the upload command when writing the temp file failed.
const UPLOAD_WRITE_FAILED: u32 = 5;

/// How the binary travels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Packing {
    /// As it is.
    Plain,
    /// gzip (RFC 1952), unpacked on the host by `gzip -dc`.
    Gzip,
}

/// Shell snippet printing the sha256 (hex) of the file named by shell variable `var`, or nothing
/// when hashing fails. The file is read from stdin: GNU sha256sum escapes a name containing a
/// backslash by prefixing the hash with `\`.
pub(crate) fn hash_of(var: &str) -> String {
    format!("$( (sha256sum < \"{var}\" 2>/dev/null || shasum -a 256 < \"{var}\") | cut -d' ' -f1)")
}

/// `bytes` compressed with gzip's fastest level (on a blocking thread: ~0.1 s for the agent).
///
/// # Errors
/// [`Error::Deploy`] when the compressing thread fails.
async fn gzip(bytes: &[u8]) -> Result<Vec<u8>, Error> {
    let input = bytes.to_vec();
    tokio::task::spawn_blocking(move || {
        let mut encoder = GzEncoder::new(Vec::with_capacity(input.len() / 2), Compression::fast());
        encoder.write_all(&input)?;
        encoder.finish()
    })
    .await
    .map_err(|e| Error::deploy("compressing the agent binary failed").caused_by(e))?
    .map_err(|e| Error::deploy("compressing the agent binary failed").caused_by(e))
}

/// Uploads `agent` (packed as `packing` says), verifies its sha256 on the host, then `chmod`
/// and atomic rename over the final name; records the upload in `report` (`bytes` counts what
/// the upload that installed it sent, compressed or not). After a broken gzip the
/// [`DeployEvent::Uploading`] events start again from 0 for the plain binary.
///
/// # Errors
/// [`Error::Deploy`] when the upload or its verification fails (nothing is left installed then);
/// [`Error::Ssh`] when the connection fails meanwhile.
pub(crate) async fn install(
    handle: &Handle<ClientHandler>,
    agent: &LocalAgent,
    packing: Packing,
    progress: Option<&ProgressCallback>,
    report: &mut DeployReport,
) -> Result<(), Error> {
    let mut sent = None;
    if packing == Packing::Gzip {
        // The channel opens while the binary is compressed.
        let (packed, channel) =
            tokio::join!(gzip(&agent.bytes), exec::open(handle, "an exec channel"));
        let (packed, channel) = (packed?, channel?);
        match upload(channel, agent, &packed, Packing::Gzip, progress).await? {
            Uploaded::Sent(bytes) => sent = Some(bytes),
            Uploaded::GzipBroken(stderr) => tracing::warn!(
                %stderr,
                "the host's gzip does not work; sending the agent uncompressed"
            ),
        }
    }
    let sent = match sent {
        Some(bytes) => bytes,
        None => match upload(
            exec::open(handle, "an exec channel").await?,
            agent,
            &agent.bytes,
            Packing::Plain,
            progress,
        )
        .await?
        {
            Uploaded::Sent(bytes) => bytes,
            Uploaded::GzipBroken(_) => unreachable!("a plain upload does not use gzip"),
        },
    };
    if let Some(cb) = progress {
        cb(&DeployEvent::Installed {
            path: format!("~/{}", report.remote_path),
        });
    }
    report.uploaded = true;
    report.bytes = sent;
    // The packed copy and the channel's buffers, megabytes per host, are freed by now.
    crate::sys::return_freed_memory();
    Ok(())
}

/// How one upload went, short of an error.
enum Uploaded {
    /// Installed; this many bytes were sent.
    Sent(u64),
    /// The host's gzip does not work (its stderr): worth sending the plain binary.
    GzipBroken(String),
}

/// One upload of `data` (`agent`'s bytes packed as `packing`) on `channel`.
///
/// # Errors
/// As [`install`].
async fn upload(
    channel: Channel<Msg>,
    agent: &LocalAgent,
    data: &[u8],
    packing: Packing,
    progress: Option<&ProgressCallback>,
) -> Result<Uploaded, Error> {
    let mark = sentinel();
    let tmp = format!(".{}.tmp.{:016x}", agent.name, rand::rng().random::<u64>());
    // A failed gzip is blamed on gzip only if it cannot take one byte through and back either.
    let write = match packing {
        Packing::Plain => {
            format!("cat > \"$t\" || {{ rm -f \"$t\"; exit {UPLOAD_WRITE_FAILED}; }}")
        }
        Packing::Gzip => format!(
            "gzip -dc > \"$t\" || {{ rm -f \"$t\"; \
             if [ \"$(printf r | gzip -c 2>/dev/null | gzip -dc 2>/dev/null)\" = r ]; then \
             exit {UPLOAD_WRITE_FAILED}; else exit {UPLOAD_UNPACK_FAILED}; fi; }}"
        ),
    };
    let script = format!(
        "umask 077; d=\"$HOME/.relay/bin\"; t=\"$d\"/{tmp}; mkdir -p \"$d\" || exit 4; \
         find \"$d\" -name '.relay-agent-*.tmp.*' -mmin +60 -exec rm -f {{}} + 2>/dev/null; \
         {write}; h={h}; echo {mark}; echo \"$h\"; \
         if [ -z \"$h\" ]; then rm -f \"$t\"; exit {UPLOAD_HASH_FAILED}; fi; \
         if [ \"$h\" = {expected} ]; then f=\"$d\"/{name}; \
         if [ -d \"$f\" ] || [ -L \"$f\" ]; then rm -rf \"$f\"; fi; \
         chmod 700 \"$t\" && mv -f \"$t\" \"$f\" || {{ rm -f \"$t\"; exit 6; }}; \
         else rm -f \"$t\"; exit 3; fi",
        tmp = sh_quote(&tmp),
        h = hash_of("$t"),
        expected = sh_quote(&agent.sha256),
        name = sh_quote(&agent.name),
    );
    let mut on_progress = |sent: u64, total: u64| {
        if let Some(cb) = progress {
            cb(&DeployEvent::Uploading { sent, total });
        }
    };
    let out = exec::run_on(channel, &sh_command(&script), Some(data), &mut on_progress).await?;
    let stdout = String::from_utf8_lossy(&out.stdout);
    let got = after_sentinel(&stdout, &mark)
        .and_then(|s| s.lines().next())
        .unwrap_or_default()
        .trim()
        .to_string();
    let stderr = || match out.stderr_text() {
        t if t.is_empty() => String::new(),
        t => format!(": {t}"),
    };
    match out.status {
        Some(0) => Ok(Uploaded::Sent(data.len() as u64)),
        Some(UPLOAD_UNPACK_FAILED) if packing == Packing::Gzip => Ok(Uploaded::GzipBroken(
            format!("gzip -dc exited with an error{}", stderr()),
        )),
        Some(UPLOAD_HASH_FAILED) => Err(Error::deploy(format!(
            "the host could not compute the sha256 of the uploaded agent (sha256sum and \
             shasum both failed{}); the file was removed and nothing was executed; check \
             that coreutils' sha256sum works on the host",
            stderr()
        ))),
        Some(3) => Err(Error::deploy(format!(
            "uploaded agent has sha256 {got:?} on the host, expected {}; the transfer was \
             corrupted and the file was removed (nothing was executed)",
            agent.sha256
        ))),
        status => Err(Error::deploy(format!(
            "installing the agent in ~/.relay/bin failed ({}): {}; check the disk space \
             and permissions of ~/.relay on the host (it must be a writable directory)",
            exec::status_text(status),
            out.stderr_text()
        ))),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read;

    use flate2::read::GzDecoder;

    use super::*;

    #[tokio::test]
    async fn gzip_output_unpacks_to_the_input_and_is_smaller() {
        // Binary-like input: repeated structure with some noise.
        let input: Vec<u8> = (0..200_000u32)
            .flat_map(|i| (i % 251).to_le_bytes())
            .collect();
        let packed = gzip(&input).await.unwrap();
        assert!(packed.len() < input.len() / 4, "{} bytes", packed.len());
        let mut unpacked = Vec::new();
        GzDecoder::new(&packed[..])
            .read_to_end(&mut unpacked)
            .unwrap();
        assert_eq!(unpacked, input);
    }
}
