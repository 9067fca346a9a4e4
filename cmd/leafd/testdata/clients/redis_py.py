# redis-py (Debian's python3-redis, run with /usr/bin/python3) with its default settings, in
# the compatibility suite (cmd/leafd/compat_test.go). The README's client notes show the
# README:begin blocks. Report lines: see compat_test.go.
import os
import sys

import redis

host, port, password = os.environ["LEAFD_HOST"], int(os.environ["LEAFD_PORT"]), os.environ["LEAFD_PASSWORD"]


def out(*a):
    print(*a, flush=True)


def check(ok, name, detail=""):
    if not ok:
        sys.exit("%s failed: %r" % (name, detail))
    out("PASS", name)


def ids(kind, values):
    for v in values:
        out("ID", kind, int(v))


r = redis.Redis(host=host, port=port, password=password)
check(r.ping(), "connect")
ids("order", [r.incr("order")])
out("PASS incr")

# README:begin redis-py
# pipeline() is a transaction by default: MULTI, the commands, EXEC.
p = r.pipeline()
for _ in range(1000):
    p.incr("order")
order_ids = p.execute()  # [1001, 1002, ...]
# README:end
check(len(order_ids) == 1000, "pipeline", len(order_ids))
ids("order", order_ids)

ids("order", r.execute_command("IDS.SEGMENT", "order", 10))
out("PASS segment")

# Python integers are exact: no option needed.
sf = r.execute_command("IDS.SNOWFLAKE")
batch = r.execute_command("IDS.SNOWFLAKE", 1000)
check(isinstance(sf, int) and len(batch) == 1000, "snowflake", sf)
ids("snowflake", [sf] + batch)

# redis-py 4 speaks RESP2 only: IDS.DECODE is a flat list.
dec = r.execute_command("IDS.DECODE", sf)
m = {dec[i].decode(): dec[i + 1] for i in range(0, len(dec), 2)}
out("DECODE", 2, sf, m["timestamp_ms"], m["worker_id"], m["sequence"])

# README:begin redis-py-errors
try:
    r.execute_command("IDS.SEGMENT", "order", 0)
except redis.ResponseError as e:
    message = str(e)  # the reply: "LIMIT count must be between 1 and 1000 (--max-batch); ..."
# README:end
check(message.startswith("LIMIT "), "error", message)

check(r.execute_command("AUTH", password), "auth")

p = r.pipeline()
p.incr("order")
p.execute_command("IDS.SEGMENT", "order", 3)
first, seg = p.execute()
check(len(seg) == 3, "transaction", seg)
ids("order", [first] + seg)

out("RESTART")
sys.stdin.readline()
# The pool finds its connection dead and dials again.
for attempt in range(3):
    try:
        ids("order", [r.incr("order")])
        break
    except redis.ConnectionError:
        if attempt == 2:
            raise
out("PASS reconnect")
