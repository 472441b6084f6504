//! What one process holds, read from Linux's `/proc/PID/status` and `/proc/PID/fd`: for the
//! tests and benchmarks that bound or record a connector's or an agent's threads, memory and
//! descriptors.

use anyhow::{anyhow, Context, Result};

/// Threads, resident memory and open descriptors of one process at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Usage {
    /// `Threads:`.
    pub threads: u64,
    /// Resident memory now, KiB (`VmRSS:`).
    pub rss_kib: u64,
    /// The most resident memory the process ever had, KiB (`VmHWM:`).
    pub peak_kib: u64,
    /// Entries of `/proc/PID/fd`.
    pub fds: usize,
}

impl Usage {
    /// The usage of process `pid` now.
    ///
    /// # Errors
    /// When the process does not exist (any more), or its status lacks one of the fields.
    pub fn of(pid: u32) -> Result<Usage> {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status"))
            .with_context(|| format!("reading /proc/{pid}/status"))?;
        let field = |name: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(name))
                .and_then(|v| v.split_whitespace().next()?.parse().ok())
                .ok_or_else(|| anyhow!("no {name} in /proc/{pid}/status"))
        };
        Ok(Usage {
            threads: field("Threads:")?,
            rss_kib: field("VmRSS:")?,
            peak_kib: field("VmHWM:")?,
            fds: std::fs::read_dir(format!("/proc/{pid}/fd"))
                .with_context(|| format!("listing /proc/{pid}/fd"))?
                .count(),
        })
    }

    /// `"N threads, X.Y MiB, M fds"` (resident memory now), for a benchmark cell or a log line.
    pub fn show(&self) -> String {
        format!(
            "{} threads, {:.1} MiB, {} fds",
            self.threads,
            self.rss_kib as f64 / 1024.0,
            self.fds
        )
    }
}
