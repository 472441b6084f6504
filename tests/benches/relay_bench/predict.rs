//! Predictive echo: a scripted corpus typed into `relay shell` on a real pseudo-terminal through
//! 50 ms and 200 ms links (the test crate's shaping proxy), once with `--predict adaptive` and
//! once with `--predict never` (the baseline: every key waits for the host's echo), and once
//! more over the fast link without delay.
//!
//! Each printable key of the corpus is typed at human speed ([`KEY_GAP`]) and timed from the
//! write until the terminal (the test side's vt100 model) shows it at the cursor. The corpus:
//! bash with a typo fixed by backspaces, tab completion and history recall with Up; a `read -s`
//! password; `cat` echoing a line; a program that turned echo off; vim (the fixture's
//! vim-tiny) in insert mode, timed apart: it runs in the alternate screen, where the engine
//! predicts nothing.
//! Besides the times it reports the engine's counters (`RELAY_LOG=relay::predict=info` at
//! exit), whether any password character was ever written to the terminal, and whether the
//! screen and scrollback ended the same as without prediction. Last, what the engine's own
//! screen model costs: relay's CPU time and the wall time for a flood of output
//! ([`FLOOD`]), which the engine parses whether or not it is predicting.

use std::time::{Duration, Instant};

use relay_tests::fixture::SshHost;
use relay_tests::pty_run::{has_row, PtyRun};
use relay_tests::shaper::{Link, Shaper};

use super::screen::cpu_ticks;
use super::stats::{row, smoke, Row};

/// Time between two typed keys: a quick typist (about 120 words a minute).
const KEY_GAP: Duration = Duration::from_millis(100);
/// The flood of output after the corpus: 6.9 MB of short lines, then a line to wait for.
const FLOOD: &str = "seq 1 1000000; echo FLOOD-$((1+1))\r";

/// The password the corpus types (letters that no escape sequence relay writes ends with).
const PASSWORD: &str = "zkvjzkvj";

/// One step of the corpus.
enum Step {
    /// Printable keys, one every [`KEY_GAP`], each timed until it shows at the cursor.
    Type(&'static str),
    /// Bytes sent at once, not timed (Enter, Tab, arrows, commands that set the scene).
    Keys(&'static str),
    /// Keys one every [`KEY_GAP`] that never show (a password, a program without echo).
    Blind(&'static str),
    /// Waits until a row reads exactly this (trailing blanks aside).
    Line(&'static str),
    /// Waits until the cursor's row reads exactly this, the cursor at its end (a line being
    /// edited).
    Edit(&'static str),
    /// Waits this many ms (for a program to start reading).
    Pause(u64),
    /// As [`Step::Type`], in a full-screen editor's insert mode: timed apart.
    Insert(&'static str),
}

use Step::*;

fn corpus() -> Vec<Step> {
    let mut steps = vec![
        // bash: a typo fixed with backspaces.
        Type("echo hello wrold"),
        Keys("\x7f\x7f\x7f\x7f"),
        Edit("PR2> echo hello w"),
        Type("orld"),
        Keys("\r"),
        Line("hello world"),
        Edit("PR2> "),
        // Tab completion, then history recall.
        Type("ech"),
        Keys("\t"),
        Edit("PR2> echo "),
        Type("tab"),
        Keys("\r"),
        Line("tab"),
        Keys("\x1b[A"),
        Edit("PR2> echo tab"),
        Type(" again"),
        Keys("\r"),
        Line("tab again"),
        // A password at a prompt that does not echo.
        Keys("read -s -p 'pw: ' PW; echo \"len=${#PW}\"\r"),
        Line("pw: "),
        Blind(PASSWORD),
        Keys("\r"),
        Line("pw: len=8"),
    ];
    if !smoke() {
        steps.extend([
            // cat echoing (the terminal's line discipline echoes, cat prints the line again).
            Keys("cat\r"),
            Pause(1000),
            Type("typed into cat"),
            Keys("\r\x04"),
            Edit("PR2> "),
            // A program that turned echo off.
            Keys("stty -echo; read x; stty echo; echo silent-done\r"),
            Blind("quiet"),
            Keys("\r"),
            Line("silent-done"),
            // vim (the fixture's vim-tiny) in insert mode, in the alternate screen.
            Keys("vim.tiny -u NONE -i NONE -N\r"),
            Pause(1000),
            Keys("i"),
            Pause(300),
            Insert("typed into vim"),
            Keys("\x1b"),
            Keys(":q!\r"),
        ]);
    }
    // The last prompt, so both passes end on the same screen.
    steps.push(Edit("PR2> "));
    steps
}

/// What one pass of the corpus gave.
struct Pass {
    /// Key → shown at the cursor, per timed key.
    drawn: Vec<Duration>,
    /// The same, for the keys typed into vim.
    drawn_vim: Vec<Duration>,
    /// Every line of the terminal from the shell's first prompt on, with attributes.
    lines: Vec<String>,
    /// Whether a password character was written to the terminal.
    password_drawn: bool,
    /// The engine's counters line, as relay logged it at exit.
    stats: String,
    /// The flood: relay's CPU time and the time until its last line showed.
    flood_cpu: Duration,
    flood_wall: Duration,
}

pub async fn run(rows: &mut Vec<Row>) -> anyhow::Result<()> {
    let ssh = SshHost::start().await?;
    let target = format!("127.0.0.1:{}", ssh.port()).parse()?;
    let rtts: &[u64] = if smoke() { &[200] } else { &[50, 200] };
    for &rtt in rtts {
        let shaper = Shaper::start(target, Link::rtt_ms(rtt)).await?;
        let port = shaper.port();
        let never = tokio::task::block_in_place(|| pass(&ssh, port, "never", rtt))?;
        let adaptive = tokio::task::block_in_place(|| pass(&ssh, port, "adaptive", rtt))?;
        report(rows, &format!("{rtt} ms RTT"), &adaptive, &never);
    }
    let port = ssh.port();
    let never = tokio::task::block_in_place(|| pass(&ssh, port, "never", 0))?;
    let adaptive = tokio::task::block_in_place(|| pass(&ssh, port, "adaptive", 0))?;
    report(rows, "no added delay", &adaptive, &never);
    Ok(())
}

fn report(rows: &mut Vec<Row>, link: &str, adaptive: &Pass, never: &Pass) {
    let baseline = "the same keys with `--predict never`";
    rows.push(row(
        &format!("typed key → shown, {link}"),
        &adaptive.drawn,
        &never.drawn,
        baseline,
    ));
    let within = |drawn: &[Duration]| {
        let quick = drawn
            .iter()
            .filter(|d| **d <= Duration::from_millis(5))
            .count();
        format!(
            "{quick} of {} ({:.0} %)",
            drawn.len(),
            100.0 * quick as f64 / drawn.len().max(1) as f64
        )
    };
    rows.push(Row::text(
        &format!("keys shown within 5 ms, {link}"),
        within(&adaptive.drawn),
        within(&never.drawn),
        baseline,
    ));
    if !adaptive.drawn_vim.is_empty() {
        rows.push(row(
            &format!("typed key → shown in vim's insert mode, {link}"),
            &adaptive.drawn_vim,
            &never.drawn_vim,
            baseline,
        ));
        rows.push(Row::text(
            &format!("keys shown within 5 ms in vim's insert mode, {link}"),
            within(&adaptive.drawn_vim),
            within(&never.drawn_vim),
            baseline,
        ));
    }
    rows.push(Row::text(
        &format!("engine counters at exit, {link}"),
        adaptive.stats.clone(),
        never.stats.clone(),
        baseline,
    ));
    if let Some((a, b)) = adaptive
        .lines
        .iter()
        .zip(&never.lines)
        .find(|(a, b)| a != b)
    {
        eprintln!("predict, {link}: first differing line:\n  adaptive {a:?}\n  never    {b:?}");
    } else if adaptive.lines.len() != never.lines.len() {
        eprintln!(
            "predict, {link}: {} lines against {}",
            adaptive.lines.len(),
            never.lines.len()
        );
    }
    let yes_no = |b: bool| if b { "yes" } else { "no" }.to_string();
    rows.push(Row::text(
        &format!("screen and scrollback identical to `never`, {link}"),
        yes_no(adaptive.lines == never.lines),
        format!("{} lines", never.lines.len()),
        baseline,
    ));
    let ms = |d: Duration| format!("{} ms", d.as_millis());
    rows.push(Row::text(
        &format!("relay CPU for `seq 1 1000000` (6.9 MB), {link}"),
        ms(adaptive.flood_cpu),
        ms(never.flood_cpu),
        baseline,
    ));
    rows.push(Row::text(
        &format!("`seq 1 1000000` until its last line shows, {link}"),
        ms(adaptive.flood_wall),
        ms(never.flood_wall),
        baseline,
    ));
    rows.push(Row::text(
        &format!("a password character ever written, {link}"),
        yes_no(adaptive.password_drawn),
        yes_no(never.password_drawn),
        baseline,
    ));
}

/// Runs the corpus once in a fresh pane through `port`, with `--predict mode`.
fn pass(ssh: &SshHost, port: u16, mode: &str, rtt: u64) -> anyhow::Result<Pass> {
    let home = relay_tests::TestHome::new();
    let pane = format!("predict-{mode}-{rtt}");
    let mut run = PtyRun::relay_via(
        ssh,
        port,
        &home,
        "shell",
        &["--pane", &pane, "--predict", mode],
        &[("RELAY_LOG", "warn,relay::predict=info")],
    );
    wait(&run, "the shell's prompt", |s| {
        s.contents().lines().any(|l| l.trim_end().ends_with(":~$"))
    })?;
    run.type_text("PS1=PR$((1+1))'> '\r");
    wait(&run, "the prompt", |s| has_row(s, "PR2> "))?;
    // The round-trip samples that turn predictions on: three, about 2 s at 200 ms.
    std::thread::sleep(Duration::from_secs(3));
    let (mut drawn, mut drawn_vim) = (Vec::new(), Vec::new());
    for step in corpus() {
        match step {
            Type(text) | Insert(text) => {
                let times = match step {
                    Insert(_) => &mut drawn_vim,
                    _ => &mut drawn,
                };
                for ch in text.chars() {
                    let (row, col) = run.terminal().screen().cursor_position();
                    let key = ch.to_string();
                    let t = Instant::now();
                    run.type_text(&key);
                    wait(&run, &format!("{key:?} at ({row}, {col})"), |s| {
                        s.cell(row, col).is_some_and(|c| c.contents() == key)
                    })?;
                    times.push(t.elapsed());
                    std::thread::sleep(KEY_GAP.saturating_sub(t.elapsed()));
                }
            }
            Keys(bytes) => {
                run.type_text(bytes);
                std::thread::sleep(KEY_GAP);
            }
            Blind(text) => {
                for ch in text.chars() {
                    run.type_text(&ch.to_string());
                    std::thread::sleep(KEY_GAP);
                }
            }
            Line(text) => wait(&run, &format!("a row {text:?}"), |s| has_row(s, text))?,
            Edit(text) => wait(&run, &format!("the line {text:?} being edited"), |s| {
                let (row, col) = s.cursor_position();
                let line = s.contents_between(row, 0, row, s.size().1.get());
                line.trim_end() == text.trim_end() && usize::from(col) == text.chars().count()
            })?,
            Pause(ms) => std::thread::sleep(Duration::from_millis(ms)),
        }
    }
    let lines = lines_from_prompt(&run);
    let bytes = run.bytes();
    let text = String::from_utf8_lossy(&bytes);
    let asked = text.find("pw: ").unwrap_or(0);
    let answered = text[asked..].find("len=").map_or(text.len(), |i| asked + i);
    let password_drawn = PASSWORD.chars().any(|c| text[asked..answered].contains(c));
    let (cpu0, t0) = (cpu_ticks(run.pid())?, Instant::now());
    run.type_text(FLOOD);
    wait(&run, "the flood's last line", |s| has_row(s, "FLOOD-2"))?;
    let flood_wall = t0.elapsed();
    // Clock ticks are 1/100 s on Linux.
    let flood_cpu = Duration::from_millis(10 * (cpu_ticks(run.pid())? - cpu0));
    run.type_text("\r~.");
    run.wait_exit();
    let stats = run
        .terminal()
        .screen()
        .contents()
        .lines()
        .find(|l| l.contains("prediction statistics"))
        .map_or("—".to_string(), |l| {
            l[l.find("predicted=").unwrap_or(0)..].trim().to_string()
        });
    Ok(Pass {
        drawn,
        drawn_vim,
        lines,
        password_drawn,
        stats,
        flood_cpu,
        flood_wall,
    })
}

/// Waits until the terminal satisfies `check` (at most 60 s).
fn wait(run: &PtyRun, what: &str, check: impl Fn(&vt100::Screen) -> bool) -> anyhow::Result<()> {
    run.wait_screen(what, check).map_err(anyhow::Error::msg)
}

/// The terminal's lines (scrollback, then screen) from the shell's first prompt on, without the
/// blank rows below the last one.
fn lines_from_prompt(run: &PtyRun) -> Vec<String> {
    let mut lines = run.lines();
    let first = lines.iter().position(|l| l.contains(":~$")).unwrap_or(0);
    // The rows below the last prompt are blank, more or fewer of them as the screen began.
    while lines.last().is_some_and(String::is_empty) {
        lines.pop();
    }
    lines.split_off(first.min(lines.len()))
}
