// node-redis, current major, with its default settings, in the compatibility suite
// (cmd/leafd/compat_test.go). The README's client notes show the README:begin blocks.
"use strict";
const { createClient, RESP_TYPES } = require("redis");
const { host, port, password, pass, restart, check, ids, decoded, retry, run } = require("./report");

run(async () => {
  const client = createClient({ socket: { host, port }, password });
  client.on("error", () => {}); // connection errors while leafd restarts; it reconnects
  await client.connect();
  check((await client.ping()) === "PONG", "connect", "PING");
  ids("order", [await client.incr("order")]);
  pass("incr");

  // An explicit pipeline (no MULTI/EXEC): multi() ... execAsPipeline().
  const p = client.multi();
  for (let i = 0; i < 1000; i++) p.incr("order");
  const res = await p.execAsPipeline();
  check(res.length === 1000, "pipeline", res.length);
  ids("order", res);

  ids("order", await client.sendCommand(["IDS.SEGMENT", "order", "10"]));
  pass("segment");

  // The hazard the README warns about: the default mapping gives a number past 2^53.
  const rounded = await client.sendCommand(["IDS.SNOWFLAKE"]);
  check(typeof rounded === "number" && !Number.isSafeInteger(rounded), "default-rounds", rounded);

  // README:begin node-redis
  // Integer replies are JavaScript numbers unless the type mapping says otherwise.
  const exact = client.withTypeMapping({ [RESP_TYPES.NUMBER]: String });
  const id = await exact.sendCommand(["IDS.SNOWFLAKE"]); // "2127163742994038805"
  const batch = await exact.sendCommand(["IDS.SNOWFLAKE", "1000"]);
  // README:end
  check(typeof id === "string" && batch.length === 1000, "snowflake", typeof id);
  ids("snowflake", [id, ...batch]);

  // The default protocol is RESP3 (IDS.DECODE is a map); RESP: 2 gives the flat array.
  decoded(3, id, await exact.sendCommand(["IDS.DECODE", id]));
  const resp2 = createClient({ socket: { host, port }, password, RESP: 2 });
  await resp2.connect();
  decoded(2, id, await resp2.withTypeMapping({ [RESP_TYPES.NUMBER]: String }).sendCommand(["IDS.DECODE", id]));
  await resp2.close();

  // Client-side caching turns tracking on at connect (CLIENT TRACKING ON).
  const cached = createClient({ socket: { host, port }, password, clientSideCache: { maxEntries: 100 } });
  await cached.connect();
  check((await cached.ping()) === "PONG", "client-side-cache", "PING");
  await cached.close();

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
  await client.close();
});
