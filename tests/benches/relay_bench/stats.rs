//! Summaries of benchmark samples and the table rows they are printed as: median, p90, p99 and
//! min–max of each side, and the relay/baseline ratio of the medians.

use std::sync::OnceLock;
use std::time::Duration;

/// Order statistics of a set of samples (any unit).
#[derive(Debug, Clone, Copy)]
pub struct Summary {
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    pub min: f64,
    pub max: f64,
    pub n: usize,
}

impl Summary {
    /// `None` for no samples. Percentiles are nearest-rank on the sorted samples.
    pub fn of(samples: &[f64]) -> Option<Summary> {
        if samples.is_empty() {
            return None;
        }
        let mut v = samples.to_vec();
        v.sort_by(f64::total_cmp);
        let at = |q: f64| v[((v.len() - 1) as f64 * q).round() as usize];
        Some(Summary {
            p50: at(0.5),
            p90: at(0.9),
            p99: at(0.99),
            min: v[0],
            max: v[v.len() - 1],
            n: v.len(),
        })
    }

    /// `"2.80 ms (p90 3.10, p99 4.00; 2.10–4.50; n=30)"`, or just the value for one sample.
    fn show(&self, unit: &str, digits: usize) -> String {
        let f = |x: f64| format!("{x:.digits$}");
        if self.n == 1 {
            return format!("{} {unit}", f(self.p50));
        }
        format!(
            "{} {unit} (p90 {}, p99 {}; {}–{}; n={})",
            f(self.p50),
            f(self.p90),
            f(self.p99),
            f(self.min),
            f(self.max),
            self.n
        )
    }
}

/// One line of the printed table.
pub struct Row {
    pub what: String,
    pub relay: String,
    pub base: String,
    /// relay / baseline of the medians, or "—".
    pub ratio: String,
    pub base_name: String,
}

impl Row {
    /// A row of already formatted cells, without a ratio.
    pub fn text(what: &str, relay: String, base: String, base_name: &str) -> Row {
        Row {
            what: what.into(),
            relay,
            base,
            ratio: "—".into(),
            base_name: base_name.into(),
        }
    }

    /// A row of samples in `unit`, with the ratio of the medians when both sides have samples.
    pub fn samples(
        what: &str,
        relay: &[f64],
        base: &[f64],
        unit: &str,
        digits: usize,
        base_name: &str,
    ) -> Row {
        let (r, b) = (Summary::of(relay), Summary::of(base));
        let cell = |s: Option<Summary>| s.map_or("—".into(), |s| s.show(unit, digits));
        let ratio = match (r, b) {
            (Some(r), Some(b)) if b.p50 > 0.0 => format!("{:.2}×", r.p50 / b.p50),
            _ => "—".into(),
        };
        Row {
            what: what.into(),
            relay: cell(r),
            base: cell(b),
            ratio,
            base_name: base_name.into(),
        }
    }
}

/// Prints `rows` as the Markdown table `docs/performance.md` takes.
pub fn print(rows: &[Row]) {
    println!("\n| measurement | relay | baseline | relay / baseline | baseline is |");
    println!("|---|---|---|---|---|");
    for r in rows {
        println!(
            "| {} | {} | {} | {} | {} |",
            r.what, r.relay, r.base, r.ratio, r.base_name
        );
    }
}

/// A row of durations, in ms.
pub fn row(what: &str, relay: &[Duration], base: &[Duration], base_name: &str) -> Row {
    let ms = |d: &[Duration]| d.iter().map(|d| d.as_secs_f64() * 1e3).collect::<Vec<_>>();
    let digits = if relay.iter().chain(base).all(|d| d.as_millis() < 10) {
        2
    } else {
        1
    };
    Row::samples(what, &ms(relay), &ms(base), "ms", digits, base_name)
}

/// A row of rates in bytes per second, shown in MB/s.
pub fn rate_row(what: &str, relay: &[f64], base: &[f64], base_name: &str) -> Row {
    let mb = |v: &[f64]| v.iter().map(|x| x / 1e6).collect::<Vec<_>>();
    Row::samples(what, &mb(relay), &mb(base), "MB/s", 1, base_name)
}

static SMOKE: OnceLock<bool> = OnceLock::new();

/// Sets smoke mode (`--smoke`): one short iteration of every scenario, so CI runs them all.
pub fn set_smoke(on: bool) {
    let _ = SMOKE.set(on);
}

/// Whether this is a smoke run.
pub fn smoke() -> bool {
    SMOKE.get().copied().unwrap_or(false)
}

/// `n` repetitions, or 1 in smoke mode.
pub fn runs(n: usize) -> usize {
    if smoke() {
        1
    } else {
        n
    }
}

/// How far the smoke run lets a relay median be above its baseline's: 3× the baseline plus
/// 20 ms. Generous on purpose (seven samples of a debug build on a loaded CI machine): it
/// catches a gross regression — a fixed wait, a blocking probe, work that grows with every
/// lease — not a few percent; the figures in docs/performance.md are the finer record.
const GATE_RATIO: f64 = 3.0;
const GATE_SLACK_MS: f64 = 20.0;

/// Rule I in the smoke run: fails when the median of `relay` is more than [`GATE_RATIO`] times
/// the median of `base` plus [`GATE_SLACK_MS`]. Outside smoke runs it only reports.
///
/// # Errors
/// The medians and the limit, naming `what`.
pub fn gate(what: &str, relay: &[Duration], base: &[Duration]) -> anyhow::Result<()> {
    let ms = |d: &[Duration]| d.iter().map(|d| d.as_secs_f64() * 1e3).collect::<Vec<_>>();
    let (Some(r), Some(b)) = (Summary::of(&ms(relay)), Summary::of(&ms(base))) else {
        anyhow::bail!("{what}: no samples to compare");
    };
    let limit = b.p50 * GATE_RATIO + GATE_SLACK_MS;
    eprintln!(
        "gate {what}: relay p50 {:.2} ms, baseline p50 {:.2} ms, limit {limit:.2} ms",
        r.p50, b.p50
    );
    if smoke() && r.p50 > limit {
        anyhow::bail!(
            "{what}: relay's median {:.2} ms is over {limit:.2} ms ({GATE_RATIO}× the same-run \
             baseline's {:.2} ms + {GATE_SLACK_MS} ms); something costs what it should not \
             (Rule I)",
            r.p50,
            b.p50
        );
    }
    Ok(())
}
