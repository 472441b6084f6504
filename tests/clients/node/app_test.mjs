// Plays a desktop app against `relay serve --stdio` (run by tests/tests/ssh/serve.rs, which
// starts the fixture SSH host and sets the environment):
//
//   RELAY_BIN           the relay binary
//   RELAY_SSH_DEST      the fixture host (user@127.0.0.1:port)
//   RELAY_SSH_CONFIG    its isolated ssh_config
//   RELAY_SSH_IDENTITY  its key
//   (RELAY_HOME, RELAY_AGENT_BIN: the local agent's home and binary, passed to the sidecar)
//   RELAY_RUNNER        optional: the program that runs RELAY_BIN (wine64 for relay.exe)
//   RELAY_NO_LOCAL      optional, "1": the desktop has no local agent (Windows): the app checks
//                       that `host.open` of "local" says so, and plays with the SSH host alone
//
// The app opens this machine and the SSH host, hydrates empty workspaces, opens panes in two
// workspaces, types and reads; then it crashes (its sidecar is killed mid-stream), starts a new
// sidecar, hydrates, finds its panes pending with the same PTY ids, attaches from its last
// offsets and checks that the output continues with no duplicate and no gap; then it ends one
// workspace with kill_all and checks the summary and that the other workspace is untouched.
// Exits 0 when every check passed; prints the failed check and exits 1 otherwise.

import assert from "node:assert/strict";
import { Sidecar, Terminal, RpcError } from "./sidecar.mjs";

const env = process.env;
for (const name of ["RELAY_BIN", "RELAY_SSH_DEST", "RELAY_SSH_CONFIG", "RELAY_SSH_IDENTITY"]) {
  if (!env[name]) throw new Error(`${name} is not set (run through tests/tests/ssh/serve.rs)`);
}
const step = (what) => console.error(`node app: ${what}`);

// The counter pane prints `n 1`, `n 2`, ... every 20 ms.
const COUNTER = "i=0; while [ $i -lt 1000000 ]; do i=$((i+1)); echo \"n $i\"; sleep 0.02; done";
const pane = (workspace) => ({ workspace, tab: "main", leaf: "0" });
const numbers = (text) => [...text.matchAll(/^n (\d+)\r?$/gm)].map((m) => Number(m[1]));

const NO_LOCAL = env.RELAY_NO_LOCAL === "1";
const startSidecar = () => new Sidecar(env.RELAY_BIN, env, env.RELAY_RUNNER);

async function openHosts(app) {
  const questions = [];
  app.questions["host_key.confirm"] = (q) => {
    questions.push(q);
    return { accept: true };
  };
  const local = NO_LOCAL ? await noLocalAgent(app) : (await app.call("host.open", { destination: "local" })).host;
  const ssh = (
    await app.call("host.open", {
      destination: env.RELAY_SSH_DEST,
      ssh_config: env.RELAY_SSH_CONFIG,
      identity: [env.RELAY_SSH_IDENTITY],
    })
  ).host;
  return { local, ssh, questions };
}

// On a desktop without a local agent, "local" fails with the reason and the fix; null.
async function noLocalAgent(app) {
  try {
    const id = (await app.call("host.open", { destination: "local" })).host;
    await app.call("workspace.hydrate", { host: id, workspace: "wl" });
    assert.fail("the local host answered on a desktop without a local agent");
  } catch (e) {
    assert.ok(e instanceof RpcError, String(e));
    assert.match(e.message, /no local agent on Windows; use an SSH host/);
    // Failed for good, not a host left reconnecting that the app would wait on forever.
    assert.notEqual(e.code, "timeout", e.message);
    assert.notEqual(e.error.data?.transient, true, e.message);
  }
  return null;
}

async function hydrate(app, host, workspace) {
  return (await app.call("workspace.hydrate", { host, workspace })).panes;
}

async function main() {
  // --- First run of the app.
  let app = startSidecar();
  let hosts = await openHosts(app);
  assert.deepEqual(await hydrate(app, hosts.ssh, "wa"), [], "a fresh host has no panes");
  assert.equal(hosts.questions.length, 1, "the unknown host key was put to the app once");
  assert.match(hosts.questions[0].fingerprint, /^SHA256:/);
  assert.deepEqual(await hydrate(app, hosts.ssh, "wb"), []);
  if (!NO_LOCAL) assert.deepEqual(await hydrate(app, hosts.local, "wl"), []);
  step(NO_LOCAL ? "hydrated two empty workspaces; no local agent here" : "hydrated three empty workspaces");

  const open = async (host, workspace, command) => {
    const r = await app.call("pane.open", { host, pane: pane(workspace), command, size: { cols: 100, rows: 30 } });
    assert.equal(r.created, true);
    return new Terminal(app, r.binding);
  };
  const a = await open(hosts.ssh, "wa", ["sh", "-c", COUNTER]);
  const b = await open(hosts.ssh, "wb", ["sh", "-i"]);
  const c = NO_LOCAL ? null : await open(hosts.local, "wl", ["sh", "-i"]);
  await b.type("echo b-$((2+2))\n");
  await b.readUntil((t) => t.includes("b-4"));
  if (c) {
    await c.type("echo c-$((3+3))\n");
    await c.readUntil((t) => t.includes("c-6"));
  }
  await a.readUntil((t) => numbers(t).length >= 30);
  step(`three panes answer; the counter is at ${numbers(a.text).at(-1)}`);

  // --- The app crashes mid-stream; what it had shown is all it knows.
  await app.kill();
  const before = { a: [a.binding, a.next, a.text], b: [b.binding, b.next], c: c && [c.binding, c.next] };
  step(`sidecar killed at counter offset ${a.next}`);

  // --- The app starts again and rebuilds its terminals from the host's answer.
  app = startSidecar();
  hosts = await openHosts(app);
  assert.equal(hosts.questions.length, 0, "the key is known now");
  const find = (rows, binding) => rows.find((r) => r.pane.workspace === binding.pane.workspace);
  const rebuilt = [
    [hosts.ssh, "wa", before.a],
    [hosts.ssh, "wb", before.b],
  ];
  if (!NO_LOCAL) rebuilt.push([hosts.local, "wl", before.c]);
  for (const [host, ws, [binding]] of rebuilt) {
    const rows = await hydrate(app, host, ws);
    assert.equal(rows.length, 1, `${ws}: one pane`);
    const row = find(rows, binding);
    assert.equal(row.pty, binding.pty, `${ws}: the same PTY`);
    assert.equal(row.pending, true, `${ws}: pending until attached`);
    assert.notEqual(row.state, "ended");
  }
  step("hydrate lists every pane pending with its PTY id");

  const attach = async (host, [binding, next, text = ""]) => {
    const r = await app.call("pane.attach", { host, pane: binding.pane, pty: binding.pty, resume_from: next });
    assert.deepEqual(r.binding.pane, binding.pane);
    assert.equal(r.binding.pty, binding.pty);
    const t = new Terminal(app, r.binding);
    t.next = next;
    t.text = text;
    return t;
  };
  const a2 = await attach(hosts.ssh, before.a);
  const b2 = await attach(hosts.ssh, before.b);
  const c2 = NO_LOCAL ? null : await attach(hosts.local, before.c);
  const last = numbers(a2.text).at(-1);
  await a2.readUntil((t) => numbers(t).at(-1) >= last + 50);
  const seen = numbers(a2.text);
  seen.forEach((n, i) => assert.equal(n, i + 1, `counter line ${i + 1} is n ${n}: a duplicate or a hole`));
  assert.equal(a2.snapshots, 0, "the agent held every byte: no snapshot needed");
  step(`the counter continued from ${last} to ${seen.at(-1)} with every line once`);
  await b2.type("echo b-again-$((4+4))\n");
  await b2.readUntil((t) => t.includes("b-again-8"));
  if (c2) {
    await c2.type("echo c-again-$((5+5))\n");
    await c2.readUntil((t) => t.includes("c-again-10"));
  }

  // --- Kill-all of one workspace: exactly its pane, an honest summary, the other untouched.
  const summary = await app.call("workspace.kill_all", { host: hosts.ssh, workspace: "wa" });
  assert.equal(summary.targets, 1, JSON.stringify(summary));
  assert.equal(summary.ended, 1, JSON.stringify(summary));
  assert.equal(summary.complete, true);
  assert.equal(summary.results[0].binding.pty, before.a[0].pty);
  const exited = await app.take("pane.exited of the killed pane", (m) => m.method === "pane.exited" && m.params.binding.pty === before.a[0].pty);
  assert.equal(exited.params.reason, "killed");
  const wa = await hydrate(app, hosts.ssh, "wa");
  assert.equal(wa[0].state, "ended");
  assert.equal(wa[0].pending, false);
  const wb = await hydrate(app, hosts.ssh, "wb");
  assert.equal(wb[0].pty, before.b[0].pty);
  assert.notEqual(wb[0].state, "ended", "the other workspace is untouched");
  await b2.type("echo b-after-$((6+1))\n");
  await b2.readUntil((t) => t.includes("b-after-7"));
  step("kill_all ended exactly workspace wa; wb still answers");

  // --- Errors come with stable codes.
  try {
    await app.call("pane.attach", { host: hosts.ssh, pane: pane("wb"), pty: before.a[0].pty });
    assert.fail("attaching another pane's PTY must fail");
  } catch (e) {
    assert.ok(e instanceof RpcError, String(e));
    assert.equal(e.code, "mismatch");
  }

  const { code } = await app.close();
  assert.equal(code, 0, "the sidecar exits 0 when the app closes its stdin");
  step("passed");
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(`node app: FAILED: ${e.stack ?? e}`);
    process.exit(1);
  },
);
