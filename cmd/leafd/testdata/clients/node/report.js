// The report protocol of the compatibility suite (cmd/leafd/compat_test.go), shared by the
// Node scripts: one line per ID, decode, passed check; RESTART waits for a line on stdin.
"use strict";
const readline = require("node:readline");

const host = process.env.LEAFD_HOST;
const port = Number(process.env.LEAFD_PORT);
const password = process.env.LEAFD_PASSWORD;

const out = (...a) => process.stdout.write(a.join(" ") + "\n");
const lines = readline.createInterface({ input: process.stdin })[Symbol.asyncIterator]();

async function restart() {
  out("RESTART");
  await lines.next();
}

const pass = (name) => out("PASS", name);

function check(ok, name, detail) {
  if (!ok) throw new Error(`${name}: ${detail}`);
  out("PASS", name);
}

function ids(kind, list) {
  for (const v of list) out("ID", kind, String(v));
}

// decoded reports IDS.DECODE's reply: a flat [k, v, ...] array, an object or a Map.
function decoded(proto, id, reply) {
  let m = reply;
  if (Array.isArray(reply)) {
    m = {};
    for (let i = 0; i + 1 < reply.length; i += 2) m[String(reply[i])] = reply[i + 1];
  } else if (reply instanceof Map) {
    m = Object.fromEntries([...reply].map(([k, v]) => [String(k), v]));
  }
  out("DECODE", proto, String(id), String(m.timestamp_ms), String(m.worker_id), String(m.sequence));
}

async function retry(n, f) {
  for (let i = 1; ; i++) {
    try {
      return await f();
    } catch (e) {
      if (i >= n) throw e;
    }
  }
}

function run(main) {
  main().then(
    () => process.exit(0),
    (e) => {
      console.error(e);
      process.exit(1);
    },
  );
}

module.exports = { host, port, password, out, pass, restart, check, ids, decoded, retry, run };
