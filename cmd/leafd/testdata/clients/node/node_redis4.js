// node-redis 4 with its default settings (RESP2), in the compatibility suite
// (cmd/leafd/compat_test.go). The README's client notes show the README:begin blocks.
"use strict";
const { createClient } = require("redis4");
const { host, port, password, pass, restart, check, ids, decoded, retry, run } = require("./report");

run(async () => {
  const client = createClient({ socket: { host, port }, password });
  client.on("error", () => {}); // connection errors while leafd restarts; it reconnects
  await client.connect();
  check((await client.ping()) === "PONG", "connect", "PING");
  ids("order", [await client.incr("order")]);
  pass("incr");

  // Commands sent in the same tick go out as one pipeline.
  const res = await Promise.all(Array.from({ length: 1000 }, () => client.incr("order")));
  check(res.length === 1000, "pipeline", res.length);
  ids("order", res);

  ids("order", await client.sendCommand(["IDS.SEGMENT", "order", "10"]));
  pass("segment");

  // The hazard the README warns about: the plain reply is a number past 2^53.
  const rounded = await client.sendCommand(["IDS.SNOWFLAKE"]);
  check(typeof rounded === "number" && !Number.isSafeInteger(rounded), "default-rounds", rounded);

  // README:begin node-redis4
  // node-redis 4 turns every integer reply into a JavaScript number and has no option to
  // change that: ask leafd for strings.
  const id = await client.sendCommand(["IDS.SNOWFLAKE", "STRING"]); // "2127163742994038805"
  const batch = await client.sendCommand(["IDS.SNOWFLAKE", "1000", "STRING"]);
  // README:end
  check(typeof id === "string" && batch.length === 1000, "snowflake", typeof id);
  ids("snowflake", [id, ...batch]);

  // RESP2 only in node-redis 4.
  decoded(2, id, await client.sendCommand(["IDS.DECODE", id]));

  try {
    await client.sendCommand(["IDS.SEGMENT", "order", "0"]);
  } catch (e) {
    check(e.message.startsWith("LIMIT "), "error", e.message);
  }

  check((await client.sendCommand(["AUTH", password])) === "OK", "auth", "AUTH");

  const tx = await client.multi().incr("order").addCommand(["IDS.SEGMENT", "order", "3"]).exec();
  check(tx.length === 2, "transaction", JSON.stringify(tx));
  ids("order", [tx[0], ...tx[1]]);

  await restart();
  ids("order", [await retry(3, () => client.incr("order"))]);
  pass("reconnect");
  await client.disconnect();
});
