// ioredis with its default settings (RESP3 with RESP2-shaped replies), in the compatibility
// suite (cmd/leafd/compat_test.go). The README's client notes show the README:begin blocks.
"use strict";
const Redis = require("ioredis");
const { host, port, password, pass, restart, check, ids, decoded, run } = require("./report");

run(async () => {
  const redis = new Redis({ host, port, password });
  check((await redis.ping()) === "PONG", "connect", "PING");
  ids("order", [await redis.incr("order")]);
  pass("incr");

  const p = redis.pipeline();
  for (let i = 0; i < 1000; i++) p.incr("order");
  const res = await p.exec(); // [[err, value], ...]
  check(res.length === 1000 && res.every(([e]) => !e), "pipeline", JSON.stringify(res[0]));
  ids("order", res.map(([, v]) => v));

  ids("order", await redis.call("IDS.SEGMENT", "order", 10));
  pass("segment");

  // The hazard the README warns about: the default client gets a number past 2^53.
  const rounded = await redis.call("IDS.SNOWFLAKE");
  check(typeof rounded === "number" && !Number.isSafeInteger(rounded), "default-rounds", rounded);

  // README:begin ioredis
  // Integer replies are JavaScript numbers: a snowflake ID (above 2^53) would be rounded.
  // stringNumbers: true returns every integer reply as a string.
  const exact = new Redis({ host, port, password, stringNumbers: true });
  const id = await exact.call("IDS.SNOWFLAKE"); // "2127163742994038805"
  const batch = await exact.call("IDS.SNOWFLAKE", 1000); // ["...", ...]
  // README:end
  check(typeof id === "string" && batch.length === 1000, "snowflake", typeof id);
  ids("snowflake", [id, ...batch]);

  decoded(3, id, await exact.call("IDS.DECODE", id));
  const resp2 = new Redis({ host, port, password, stringNumbers: true, protocol: 2 });
  decoded(2, id, await resp2.call("IDS.DECODE", id));
  resp2.disconnect();

  let message;
  // README:begin ioredis-errors
  try {
    await redis.call("IDS.SEGMENT", "order", 0);
  } catch (e) {
    message = e.message; // a ReplyError; the reply: "LIMIT count must be between 1 and 1000 (--max-batch); ..."
  }
  // README:end
  check(message.startsWith("LIMIT "), "error", message);

  check((await redis.auth(password)) === "OK", "auth", "AUTH");

  const tx = await redis.multi().incr("order").call("IDS.SEGMENT", "order", 3).exec();
  check(tx.length === 2 && !tx[0][0] && !tx[1][0], "transaction", JSON.stringify(tx));
  ids("order", [tx[0][1], ...tx[1][1]]);

  await restart();
  // ioredis reconnects by itself and resends what was queued meanwhile.
  ids("order", [await redis.incr("order")]);
  pass("reconnect");
  redis.disconnect();
  exact.disconnect();
});
