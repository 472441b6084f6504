// A dependency-free client of `relay serve --stdio` (docs/embedding.md), as a desktop app
// written in JavaScript would embed it: spawn the sidecar, send JSON-RPC requests one per line,
// route notifications, answer the sidecar's questions. Node 18 or newer; no packages.

import { spawn } from "node:child_process";
import { createInterface } from "node:readline";

export class RpcError extends Error {
  constructor(method, error) {
    super(`${method}: ${error.data?.code ?? error.code}: ${error.message}`);
    this.code = error.data?.code;
    this.error = error;
  }
}

export class Sidecar {
  // `relay` is the path of the relay binary; `env` its environment. `runner`, when given, is a
  // program that runs it (wine64 for a Windows build).
  constructor(relay, env, runner) {
    const [program, args] = runner ? [runner, [relay, "serve", "--stdio"]] : [relay, ["serve", "--stdio"]];
    this.child = spawn(program, args, {
      env,
      stdio: ["pipe", "pipe", "inherit"],
    });
    this.nextId = 1;
    this.calls = new Map(); // id -> {resolve, reject, method}
    this.messages = []; // notifications and questions not taken yet
    this.waiters = [];
    this.questions = {}; // method -> (params) => result
    this.exited = new Promise((resolve) => this.child.on("exit", (code, signal) => resolve({ code, signal })));
    const lines = createInterface({ input: this.child.stdout });
    lines.on("line", (line) => this.#onLine(line));
  }

  #onLine(line) {
    const msg = JSON.parse(line); // the sidecar writes only JSON-RPC lines to stdout
    if (msg.method === undefined) {
      const call = this.calls.get(msg.id);
      if (!call) throw new Error(`an answer to no call: ${line}`);
      this.calls.delete(msg.id);
      if (msg.error) call.reject(new RpcError(call.method, msg.error));
      else call.resolve(msg.result);
      return;
    }
    if (msg.id !== undefined) {
      // A question from the sidecar (host_key.confirm, auth.passphrase).
      const answer = this.questions[msg.method];
      const result = answer ? answer(msg.params) : null;
      this.#write({ jsonrpc: "2.0", id: msg.id, result });
      this.messages.push(msg);
    } else {
      this.messages.push(msg);
    }
    this.#wake();
  }

  #write(msg) {
    this.child.stdin.write(JSON.stringify(msg) + "\n");
  }

  #wake() {
    for (const w of [...this.waiters]) w();
  }

  call(method, params = {}) {
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.calls.set(id, { resolve, reject, method });
      this.#write({ jsonrpc: "2.0", id, method, params });
    });
  }

  notify(method, params = {}) {
    this.#write({ jsonrpc: "2.0", method, params });
  }

  // Removes and returns the first message `pick` accepts, waiting up to `ms`.
  take(what, pick, ms = 30000) {
    return new Promise((resolve, reject) => {
      const look = () => {
        const i = this.messages.findIndex(pick);
        if (i < 0) return false;
        const [msg] = this.messages.splice(i, 1);
        cleanup();
        resolve(msg);
        return true;
      };
      const timer = setTimeout(() => {
        cleanup();
        reject(new Error(`no ${what} within ${ms} ms`));
      }, ms);
      const cleanup = () => {
        clearTimeout(timer);
        this.waiters = this.waiters.filter((w) => w !== look);
      };
      if (!look()) this.waiters.push(look);
    });
  }

  // The next event of the pane of `binding` (any pane.* notification naming its PTY).
  paneEvent(binding, ms) {
    return this.take(`event of pane ${binding.pty}`, (m) => m.method.startsWith("pane.") && m.params?.binding?.pty === binding.pty, ms);
  }

  kill() {
    this.child.kill("SIGKILL");
    return this.exited;
  }

  close() {
    this.child.stdin.end();
    return this.exited;
  }
}

// One terminal of the app: its binding, the output it has shown, the next offset it expects.
export class Terminal {
  constructor(app, binding) {
    this.app = app;
    this.binding = binding;
    this.text = "";
    this.next = 0;
    this.snapshots = 0;
  }

  async type(text) {
    await this.app.call("pane.input", { binding: this.binding, data: Buffer.from(text).toString("base64") });
  }

  // Reads the stream until `done(text)` holds, acking what it shows. Throws on a gap, a
  // duplicate or an offset hole, and on the end of the stream.
  async readUntil(done, ms = 30000) {
    const deadline = Date.now() + ms;
    while (!done(this.text)) {
      const m = await this.app.paneEvent(this.binding, Math.max(1, deadline - Date.now()));
      const p = m.params;
      switch (m.method) {
        case "pane.output": {
          if (p.offset !== this.next) throw new Error(`pane ${this.binding.pty}: output at ${p.offset}, expected ${this.next}`);
          const data = Buffer.from(p.data, "base64");
          this.text += data.toString("latin1");
          this.next = p.offset + data.length;
          this.app.notify("pane.ack", { binding: this.binding, offset: this.next });
          break;
        }
        case "pane.snapshot":
          this.snapshots += 1;
          this.text = Buffer.from(p.data, "base64").toString("latin1");
          this.next = p.offset;
          break;
        case "pane.gap":
          throw new Error(`pane ${this.binding.pty}: gap ${p.from}..${p.to}`);
        case "pane.event":
        case "pane.interrupted":
        case "pane.resumed":
          break;
        default:
          throw new Error(`pane ${this.binding.pty}: ${m.method} ${JSON.stringify(p)}`);
      }
    }
    return this.text;
  }
}
