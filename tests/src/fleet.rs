//! A test app holding a fleet: `relay serve --stdio` (one connector process) with every host of
//! a list open and a raw `cat` pane on each, for the fleet fault scenario and the fleet benchmark.

use std::ops::{Deref, Range};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use crate::fixture::SshHost;
use crate::sidecar::{b64, unb64, Sidecar};
use crate::{agent_copy, bins, TestHome};

/// A raw, echo-less `cat`: a byte typed comes back as that byte alone. Prints `ready` first.
pub const RAW_CAT: &str = "stty raw -echo; echo ready; exec cat";

/// `relay serve --stdio` with every host of a fleet open and a raw `cat` pane (workspace `app`,
/// tab `echo`, leaf `0`) on each, as an app embedding relay holds them.
pub struct AppFleet {
    /// The sidecar process and its messages.
    pub sidecar: Sidecar,
    /// The sidecar's host id of each fleet host, in fleet order.
    pub hosts: Vec<String>,
    /// The binding (JSON) of each host's pane, in fleet order.
    pub panes: Vec<Value>,
    _home: TestHome,
}

impl AppFleet {
    /// Starts the sidecar (its own `RELAY_HOME`, no ssh-agent, this build's agent binary), opens
    /// every host of `fleet` (the fixture's key, its host key trusted, SSH `ConnectTimeout` set
    /// to `connect_timeout` in whole seconds) and a pane on each, all the pane opens in flight
    /// at once. Panics when any of it fails.
    pub fn start<H: Deref<Target = SshHost>>(fleet: &[H], connect_timeout: Duration) -> AppFleet {
        let home = TestHome::new();
        let mut cmd = home.command(&bins().relay);
        cmd.env_remove("SSH_AUTH_SOCK")
            .env("RELAY_AGENT_BIN", agent_copy());
        let mut sidecar = Sidecar::spawn(cmd);
        let mut hosts = Vec::new();
        for ssh in fleet {
            ssh.write_known_hosts().unwrap();
            let config = ssh.home().join(".ssh/fleet_config");
            let base = std::fs::read_to_string(ssh.base_config().unwrap()).unwrap();
            let timeout = format!("  ConnectTimeout {}\n", connect_timeout.as_secs());
            std::fs::write(&config, base + &timeout).unwrap();
            let r = sidecar
                .call(
                    "host.open",
                    json!({"destination": ssh.destination(), "ssh_config": config,
                           "identity": [ssh.key_path()]}),
                )
                .unwrap();
            hosts.push(r["host"].as_str().unwrap().to_string());
        }
        let opens: Vec<u64> = hosts
            .iter()
            .map(|h| {
                sidecar.request(
                    "pane.open",
                    json!({"host": h, "pane": {"workspace": "app", "tab": "echo", "leaf": "0"},
                           "command": ["sh", "-c", RAW_CAT]}),
                )
            })
            .collect();
        let mut panes = Vec::new();
        for id in opens {
            let r = sidecar.answer(&json!(id)).unwrap();
            panes.push(r["binding"].clone());
        }
        for binding in &panes {
            sidecar.read_until(binding, "ready");
        }
        AppFleet {
            sidecar,
            hosts,
            panes,
            _home: home,
        }
    }

    /// One round trip on host `i`'s pane: a byte in, the same byte out within 30 s.
    pub fn round_trip(&mut self, i: usize, byte: u8) -> Duration {
        let binding = self.panes[i].clone();
        let start = Instant::now();
        self.sidecar.notify(
            "pane.input",
            json!({"binding": binding, "data": b64(&[byte])}),
        );
        loop {
            let left = Duration::from_secs(30).saturating_sub(start.elapsed());
            let m = self
                .sidecar
                .take_within("an echo", left, |m| is_output(m, &binding));
            if self.ack(&binding, &m).contains(&byte) {
                return start.elapsed();
            }
        }
    }

    /// Acks output message `m` of `binding` as an app does; returns its bytes.
    fn ack(&mut self, binding: &Value, m: &Value) -> Vec<u8> {
        let data = unb64(m["params"]["data"].as_str().unwrap());
        let next = m["params"]["offset"].as_u64().unwrap() + data.len() as u64;
        self.sidecar
            .notify("pane.ack", json!({"binding": binding, "offset": next}));
        data
    }

    /// `n` round trips over the panes of `hosts` in turn, `pause` apart.
    pub fn samples(&mut self, hosts: Range<usize>, n: usize, pause: Duration) -> Vec<Duration> {
        (0..n)
            .map(|k| {
                let i = hosts.start + k % hosts.len();
                let sample = self.round_trip(i, b'a' + (k % 26) as u8);
                std::thread::sleep(pause);
                sample
            })
            .collect()
    }

    /// The median of [`AppFleet::samples`].
    pub fn median(&mut self, hosts: Range<usize>, n: usize, pause: Duration) -> Duration {
        let mut samples = self.samples(hosts, n, pause);
        samples.sort();
        samples[n / 2]
    }

    /// Drops the host states read so far, so that [`AppFleet::states_away`] counts only later ones.
    pub fn forget_states(&mut self) {
        while self
            .sidecar
            .try_take(|m| m["method"] == "host.state")
            .is_some()
        {}
    }

    /// How many `host.state` notifications other than `connected` the hosts in `hosts` had
    /// since [`AppFleet::forget_states`].
    pub fn states_away(&mut self, hosts: Range<usize>) -> usize {
        let ids: Vec<&str> = self.hosts[hosts].iter().map(String::as_str).collect();
        self.sidecar.count_read(|m| {
            m["method"] == "host.state"
                && ids.iter().any(|id| m["params"]["host"] == *id)
                && m["params"]["state"] != "connected"
        })
    }

    /// Waits until host `i`'s pane is resumed (`pane.resumed`), at the latest at `deadline`.
    pub fn resumed(&mut self, i: usize, deadline: Instant) {
        let pty = self.panes[i]["pty"].clone();
        let left = deadline.saturating_duration_since(Instant::now());
        self.sidecar
            .take_within("the app's pane resumed", left, |m| {
                m["method"] == "pane.resumed" && m["params"]["binding"]["pty"] == pty
            });
    }

    /// A byte typed into host `i`'s pane comes back within `within`, past the host's outage: the
    /// byte is typed again every 5 s until it does (input typed while a host is away may be
    /// refused, `pane.input_failed`).
    pub fn comes_back(&mut self, i: usize, byte: u8, within: Duration) {
        let binding = self.panes[i].clone();
        let start = Instant::now();
        loop {
            self.sidecar.notify(
                "pane.input",
                json!({"binding": binding, "data": b64(&[byte])}),
            );
            let typed = Instant::now();
            while typed.elapsed() < Duration::from_secs(5) {
                if start.elapsed() >= within {
                    let states = self.states_of(i);
                    panic!(
                        "host {i}: the app's pane did not echo within {within:?}; its host \
                         states since the last look: {states:?}"
                    );
                }
                let Some(m) = self.sidecar.try_take(|m| {
                    is_output(m, &binding)
                        || (m["method"] == "pane.input_failed"
                            && m["params"]["binding"]["pty"] == binding["pty"])
                }) else {
                    std::thread::sleep(Duration::from_millis(20));
                    continue;
                };
                if m["method"] == "pane.input_failed" {
                    break;
                }
                if self.ack(&binding, &m).contains(&byte) {
                    return;
                }
            }
        }
    }

    /// Host `i`'s `host.state` notifications read so far and not taken, oldest first (for a
    /// failure message: they are taken now).
    fn states_of(&mut self, i: usize) -> Vec<Value> {
        let id = self.hosts[i].clone();
        std::iter::from_fn(|| {
            self.sidecar
                .try_take(|m| m["method"] == "host.state" && m["params"]["host"] == id.as_str())
        })
        .map(|m| m["params"].clone())
        .collect()
    }

    /// Host `i`'s pane's end (`pane.exited`), within `within`; its params.
    pub fn end(&mut self, i: usize, within: Duration) -> Value {
        let pty = self.panes[i]["pty"].clone();
        self.sidecar
            .take_within("the app's pane ended", within, |m| {
                m["method"] == "pane.exited" && m["params"]["binding"]["pty"] == pty
            })["params"]
            .clone()
    }
}

/// Whether `m` is a `pane.output` of `binding`.
fn is_output(m: &Value, binding: &Value) -> bool {
    m["method"] == "pane.output" && m["params"]["binding"]["pty"] == binding["pty"]
}
