//! Prediction overlays for an app (`predict` in `pane.open` / `pane.attach` of `relay serve
//! --stdio`), against the fixture sshd through the link shaper: the test plays an app whose
//! renderer is a vt100 model fed with `pane.output` and `pane.snapshot`, with the overlays of
//! `pane.predict` drawn on top, in stream order. On a 200 ms link typed keys show before their
//! echo and the overlay is empty once the echo is in; a password is never in an overlay; a pane
//! without `predict` gets none; a snapshot seeds the engine after an attach.

use std::collections::BTreeMap;
use std::time::Duration;

use relay_tests::sidecar::{b64, unb64, Sidecar};
use relay_tests::TestHome;
use serde_json::{json, Value};

use super::predict::host_behind_a_200ms_link;
use super::serve::sidecar;

/// The prompt the script sets (`PR` then `2` from arithmetic, so typed text never contains it).
const PROMPT: &str = "PR2> ";

/// What the app shows of one pane: the real screen and the overlay drawn on it.
struct AppPane {
    binding: Value,
    screen: vt100::Parser,
    /// (row, column) → (character, underlined), as the last `pane.predict` said.
    overlay: BTreeMap<(u16, u16), (String, bool)>,
    cursor: Option<(u16, u16)>,
    /// Every `pane.predict` received.
    predicts: Vec<Value>,
}

impl AppPane {
    fn new(binding: Value) -> AppPane {
        AppPane {
            binding,
            screen: vt100::Parser::new(cells(24), cells(80), 0),
            overlay: BTreeMap::new(),
            cursor: None,
            predicts: Vec::new(),
        }
    }

    /// Takes the pane's next message (at most 60 s): output and snapshots reach the screen
    /// (acked), overlays replace the overlay.
    fn step(&mut self, app: &mut Sidecar, what: &str) {
        let pty = self.binding["pty"].clone();
        let m = app.take(what, |m| mine(m, &pty));
        self.apply(app, &m, what);
    }

    fn apply(&mut self, app: &mut Sidecar, m: &Value, what: &str) {
        let p = &m["params"];
        match m["method"].as_str().unwrap_or_default() {
            "pane.output" => {
                let data = unb64(p["data"].as_str().unwrap());
                self.screen.process(&data);
                let next = p["offset"].as_u64().unwrap() + data.len() as u64;
                app.notify("pane.ack", json!({"binding": self.binding, "offset": next}));
            }
            "pane.snapshot" => {
                let size = &p["size"];
                let (rows, cols) = (size["rows"].as_u64(), size["cols"].as_u64());
                self.screen
                    .screen_mut()
                    .set_size(cells(rows.unwrap()), cells(cols.unwrap()));
                self.screen.process(&unb64(p["data"].as_str().unwrap()));
            }
            "pane.predict" => self.draw(p),
            "pane.event" => {}
            other => panic!("{other} while {what}: {p}"),
        }
    }

    /// Applies one `pane.predict`: `restore` names exactly the cells of the last overlay that
    /// this one no longer covers.
    fn draw(&mut self, p: &Value) {
        let at = |c: &Value| {
            (
                c["row"].as_u64().unwrap() as u16,
                c["col"].as_u64().unwrap() as u16,
            )
        };
        let cells: BTreeMap<_, _> = p["cells"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| {
                (
                    at(c),
                    (
                        c["ch"].as_str().unwrap().to_string(),
                        c["underline"] == true,
                    ),
                )
            })
            .collect();
        let restore: Vec<_> = p["restore"].as_array().unwrap().iter().map(at).collect();
        let gone: Vec<_> = self
            .overlay
            .keys()
            .filter(|k| !cells.contains_key(k))
            .copied()
            .collect();
        assert_eq!(
            restore, gone,
            "restore is what the overlay no longer covers: {p}"
        );
        self.overlay = cells;
        self.cursor = p["cursor"].as_object().map(|_| at(&p["cursor"]));
        self.predicts.push(p.clone());
    }

    /// What the app shows at (row, column): the overlay's character, or the screen's.
    fn shown(&self, row: u16, col: u16) -> (String, bool) {
        match self.overlay.get(&(row, col)) {
            Some((ch, _)) => (ch.clone(), true),
            None => {
                let cell = self.screen.screen().cell(row, col);
                (
                    cell.map(|c| c.contents().to_string()).unwrap_or_default(),
                    false,
                )
            }
        }
    }

    /// The cursor the app shows: the overlay's, or the screen's.
    fn shown_cursor(&self) -> (u16, u16) {
        self.cursor
            .unwrap_or_else(|| self.screen.screen().cursor_position())
    }

    /// Steps until the real screen satisfies `check`.
    fn until(&mut self, app: &mut Sidecar, what: &str, check: impl Fn(&vt100::Screen) -> bool) {
        while !check(self.screen.screen()) {
            self.step(app, what);
        }
    }

    fn send(&self, app: &mut Sidecar, keys: &str) {
        app.notify(
            "pane.input",
            json!({"binding": self.binding, "data": b64(keys.as_bytes())}),
        );
    }

    /// Types `text` a key every 60 ms; returns how many keys the app showed before their
    /// echo (from an overlay, underlined as unconfirmed on this link). Each key must then be
    /// echoed where it was shown.
    fn type_watching(&mut self, app: &mut Sidecar, text: &str) -> usize {
        let mut early = 0;
        let mut keys = Vec::new();
        for ch in text.chars() {
            let (row, col) = self.shown_cursor();
            keys.push((row, col, ch.to_string()));
            self.send(app, &ch.to_string());
            let what = format!("{ch:?} shown at ({row}, {col})");
            while self.shown(row, col).0 != ch.to_string() {
                self.step(app, &what);
            }
            if self.shown(row, col).1 {
                assert!(self.overlay[&(row, col)].1, "underlined on a 200 ms link");
                early += 1;
            }
            std::thread::sleep(Duration::from_millis(60));
        }
        self.until(app, "each key echoed where it was shown", |s| {
            keys.iter()
                .all(|(row, col, ch)| s.cell(*row, *col).is_some_and(|c| c.contents() == ch))
        });
        early
    }

    /// Takes the pane's messages until none comes for `quiet`.
    fn settle(&mut self, app: &mut Sidecar, quiet: Duration) {
        let pty = self.binding["pty"].clone();
        while let Some(m) = app.poll_within(quiet, |m| mine(m, &pty)) {
            self.apply(app, &m, "settling");
        }
    }
}

/// Whether `m` is a notification of the pane of PTY `pty`.
fn mine(m: &Value, pty: &Value) -> bool {
    m.get("id").is_none() && m["params"]["binding"]["pty"] == *pty
}

/// Whether a row of the screen contains `text`.
fn row_has(s: &vt100::Screen, text: &str) -> bool {
    s.contents().lines().any(|r| r.contains(text))
}

/// `n` cells (rows or columns), at least 1.
fn cells(n: impl TryInto<u16>) -> std::num::NonZeroU16 {
    n.try_into()
        .ok()
        .and_then(std::num::NonZeroU16::new)
        .expect("a size of 1..65535 cells")
}

/// Through a 200 ms link, an app's pane opened with `predict: "adaptive"` is sent overlays
/// that show typed keys before their echo and are empty once the echo is in; a password at a
/// prompt that does not echo is never in one; a pane without `predict` gets no overlay; after
/// a detach, an attach with `predict` is seeded by the snapshot and predicts again; and
/// `predict` with `resume_from`, or an unknown mode, is refused.
#[test]
fn an_app_gets_overlays_that_show_keys_before_their_echo_on_a_slow_link() {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let _in_runtime = rt.enter();
    let (host, shaper) = host_behind_a_200ms_link(&rt);
    let opts = host
        .options_via(relay_tests::agent_copy(), shaper.port())
        .unwrap();
    let home = TestHome::new();
    let mut app = sidecar(&home);
    let r = app
        .call(
            "host.open",
            json!({"destination": opts.destination,
                   "ssh_config": opts.resolve.config_file.unwrap(),
                   "identity": [host.key_path()]}),
        )
        .unwrap();
    let id = r["host"].as_str().unwrap().to_string();
    let pane = |leaf: &str| json!({"workspace": "w", "tab": "t", "leaf": leaf});

    let refused = app.call(
        "pane.open",
        json!({"host": id, "pane": pane("0"), "predict": "sometimes"}),
    );
    let err = refused.unwrap_err();
    assert_eq!(err["data"]["code"], "invalid_params", "{err}");
    assert!(
        err["message"]
            .as_str()
            .unwrap()
            .contains("adaptive, always or never"),
        "{err}"
    );

    let r = app
        .call(
            "pane.open",
            json!({"host": id, "pane": pane("0"), "predict": "adaptive",
                   "size": {"cols": 80, "rows": 24}}),
        )
        .unwrap();
    let mut on = AppPane::new(r["binding"].clone());
    on.until(&mut app, "the shell's prompt", |s| row_has(s, "$"));
    on.send(&mut app, "PS1=PR$((1+1))'> '\r");
    on.until(&mut app, "the prompt", |s| row_has(s, PROMPT));
    // Time for the round-trip samples that turn predictions on.
    std::thread::sleep(Duration::from_secs(3));
    on.settle(&mut app, Duration::from_millis(300));
    let text = "echo the quick brown fox";
    let early = on.type_watching(&mut app, text);
    eprintln!("shown before their echo: {early} of {}", text.len());
    assert!(
        early * 2 >= text.len(),
        "most keys were shown before their echo: {early} of {}",
        text.len()
    );
    on.until(&mut app, "every echo", |s| {
        row_has(s, &format!("{PROMPT}{text}"))
    });
    on.settle(&mut app, Duration::from_secs(1));
    assert!(
        on.overlay.is_empty() && on.cursor.is_none(),
        "the echo took the overlay's place: {:?} {:?}",
        on.overlay,
        on.cursor
    );
    on.send(&mut app, "\r");
    on.until(&mut app, "the command's output", |s| {
        s.contents().lines().any(|l| l == "the quick brown fox")
    });

    on.send(&mut app, "read -s -p 'pw: ' PW; echo \"len=${#PW}\"\r");
    on.until(&mut app, "the password prompt", |s| row_has(s, "pw: "));
    let before = on.predicts.len();
    for key in ["z", "k", "v", "j"] {
        on.send(&mut app, key);
        std::thread::sleep(Duration::from_millis(60));
    }
    on.send(&mut app, "\r");
    on.until(&mut app, "the password's length", |s| {
        row_has(s, "pw: len=4")
    });
    for p in &on.predicts[before..] {
        assert!(
            p["cells"].as_array().unwrap().is_empty(),
            "a password key was drawn: {p}"
        );
    }

    // A pane without `predict`: no engine, no overlay.
    let r = app
        .call(
            "pane.open",
            json!({"host": id, "pane": pane("1"), "command": ["sh", "-i"]}),
        )
        .unwrap();
    let mut off = AppPane::new(r["binding"].clone());
    off.until(&mut app, "sh's prompt", |s| row_has(s, "$"));
    let shown = off.type_watching(&mut app, "echo plain");
    assert_eq!(shown, 0, "nothing is predicted without `predict`");
    assert!(off.predicts.is_empty(), "{:?}", off.predicts);

    // Detached and attached again: the snapshot seeds the engine.
    let binding = on.binding.clone();
    app.call("pane.detach", json!({ "binding": binding }))
        .unwrap();
    on.settle(&mut app, Duration::from_millis(500));
    let pty = binding["pty"].clone();
    let err = app
        .call(
            "pane.attach",
            json!({"host": id, "pane": pane("0"), "pty": pty, "resume_from": 0,
                   "predict": "adaptive"}),
        )
        .unwrap_err();
    assert_eq!(err["data"]["code"], "invalid_params", "{err}");
    app.call(
        "pane.attach",
        json!({"host": id, "pane": pane("0"), "pty": pty, "predict": "always"}),
    )
    .unwrap();
    let mut back = AppPane::new(binding);
    back.until(&mut app, "the screen again", |s| row_has(s, "pw: len=4"));
    std::thread::sleep(Duration::from_secs(3));
    back.settle(&mut app, Duration::from_millis(300));
    let text = "echo back again";
    let early = back.type_watching(&mut app, text);
    assert!(
        early >= 5,
        "after the snapshot, {early} of {} early",
        text.len()
    );

    // Attached again while keys are drawn: the new stream takes the old overlay back.
    back.send(&mut app, " xyz");
    while back.overlay.is_empty() {
        back.step(&mut app, "keys drawn");
    }
    app.call(
        "pane.attach",
        json!({"host": id, "pane": pane("0"), "pty": pty, "predict": "always"}),
    )
    .unwrap();
    back.until(&mut app, "the keys echoed", |s| row_has(s, "again xyz"));
    back.settle(&mut app, Duration::from_secs(1));
    assert!(
        back.overlay.is_empty() && back.cursor.is_none(),
        "nothing of the replaced stream's overlay is left: {:?} {:?}",
        back.overlay,
        back.cursor
    );

    // A size no host takes costs the engine nothing.
    let b = back.binding.clone();
    app.notify(
        "pane.resize",
        json!({"binding": b, "cols": 65535, "rows": 65535}),
    );
    let failed = app.notification("pane.resize_failed", pty.as_str());
    assert_eq!(failed["error"]["code"], "limit_exceeded", "{failed}");
    std::thread::sleep(Duration::from_secs(1));
    let status = std::fs::read_to_string(format!("/proc/{}/status", app.pid())).unwrap();
    let rss_kib: u64 = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap();
    assert!(rss_kib < 200 * 1024, "the sidecar holds {rss_kib} KiB");
}
