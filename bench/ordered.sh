#!/usr/bin/env bash
# bench/ordered.sh DSN: INCR on an ORDERED tag against an ordinary tag, at the leader and
# through a follower, same binaries, same database, same run.
#
# Two leafd instances on DSN (default --ordered-lease): A, which leads the ordered tag, pinned
# to SERVER_CPU (0); B, a follower that forwards the tag's commands to A, pinned to CLIENT_CPU
# (1) with the client (so the follower's hop costs the client's core: on two cores there is
# no third one to give it). Each of RUNS (5) rounds measures, in this order, at -P 1 and
# -P 16 with 50 connections:
#   plain-leader    INCR plain   sent to A (an ordinary tag: the baseline)
#   ordered-leader  INCR ordered sent to A (the leader serves it from its own segments)
#   ordered-follower INCR ordered sent to B (B forwards each connection's pipeline to A in
#                   one call, many connections' calls in one write)
# and prints the medians, and the medians of the per-round ratios ordered-leader/plain-leader
# and ordered-follower/ordered-leader (the same client load sent to the leader directly), and
# the follower's CPU time per forwarded request (its utime + stime in /proc across each
# ordered-follower measurement: what bounds the ratio, and less sensitive to other load).
# CLIENT=redis-benchmark (default; N1 requests at -P 1, N16 at -P 16 per measurement; it
# stops at the first error reply, and the round is then marked failed) or CLIENT=leafd-bench
# (DUR per measurement; counts errors and goes on).
# Needs: go, redis-cli, redis-benchmark, taskset, python3; a database the DSN's user may write.
# Output: OUT (bench/out/ordered): the JSON of each run and the servers' logs.
set -uo pipefail
DSN=${1:?usage: bench/ordered.sh DSN}
RUNS=${RUNS:-5}
DUR=${DUR:-3s}
CLIENT=${CLIENT:-redis-benchmark}
N1=${N1:-100000}
N16=${N16:-1000000}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$root/bench/out/ordered}
mkdir -p "$OUT"
rm -f "$OUT"/*.json
work=$(mktemp -d "${TMPDIR:-/tmp}/leafd-ordered.XXXXXX")
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$work"
}
trap cleanup EXIT
(cd "$root" && go build -o "$work/leafd" ./cmd/leafd && go build -o "$work/leafd-bench" ./cmd/leafd-bench) || exit 2
echo "load average at the start: $(cut -d' ' -f1-3 /proc/loadavg)"
PA=27201 PB=27202
start() { # name port cpu
	mkdir -p "$work/$1"
	taskset -c "$3" "$work/leafd" --mysql-dsn "$DSN" --data-dir "$work/$1" --addr "127.0.0.1:$2" \
		--http-addr "" --log-level warn >"$OUT/$1.log" 2>&1 &
	pids+=($!)
	for _ in $(seq 100); do
		redis-cli -p "$2" PING 2>/dev/null | grep -q PONG && return 0
		sleep 0.1
	done
	echo "ordered.sh: $1 did not answer on $2" >&2
	exit 2
}
start a "$PA" "$SERVER_CPU"
redis-cli -p "$PA" IDS.CREATE plain STEP 1000 >/dev/null
redis-cli -p "$PA" IDS.CREATE ordered STEP 1000 ORDERED >/dev/null
# A serves the ordered tag first, alone: it takes the lease.
for _ in $(seq 100); do
	redis-cli -p "$PA" INCR ordered | grep -q '^[0-9]' && break
	sleep 0.1
done
start b "$PB" "$CLIENT_CPU"
BPID=${pids[1]}
for _ in $(seq 100); do
	redis-cli -p "$PB" INCR ordered | grep -q '^[0-9]' && break
	sleep 0.1
done
redis-cli -p "$PB" IDS.INFO ordered >"$OUT/info-follower.txt"
redis-cli -p "$PA" IDS.INFO ordered >"$OUT/info-leader.txt"
ticks() { awk '{print $14 + $15}' "/proc/$BPID/stat"; }
bench() { # name port tag P round
	local out="$OUT/$1-P$4-$5"
	local t0
	t0=$(ticks)
	_bench "$@"
	echo "$(( $(ticks) - t0 ))" >"$out.ticks"
}
_bench() { # name port tag P round
	local out="$OUT/$1-P$4-$5"
	if [ "$CLIENT" = leafd-bench ]; then
		taskset -c "$CLIENT_CPU" "$work/leafd-bench" -addr "127.0.0.1:$2" -cmd incr -tag "$3" -c 50 -P "$4" -d "$DUR" \
			-warmup 500ms -json >"$out.json" 2>"$out.err"
		return
	fi
	local n=$N1
	[ "$4" = 1 ] || n=$N16
	taskset -c "$CLIENT_CPU" redis-benchmark -p "$2" -c 50 -n "$n" -P "$4" --csv INCR "$3" >"$out.csv" 2>"$out.err"
	python3 - "$out" "$n" <<'PY'
import csv, json, sys
out = sys.argv[1]
rows = [r for r in csv.reader(open(out + ".csv")) if r and r[0] != "test"]
err = open(out + ".err").read().strip() + open(out + ".csv").read().split("\n")[-1]
res = {"ids_per_sec": 0.0, "latency": {"p99_ms": 0.0}, "errors": 1, "first_error": err}
if rows and "Error" not in err:
    res = {"ids_per_sec": float(rows[0][1]), "latency": {"p99_ms": float(rows[0][6])}, "errors": 0,
           "requests": int(sys.argv[2])}
json.dump(res, open(out + ".json", "w"))
PY
}
for r in $(seq "$RUNS"); do
	for P in 1 16; do
		bench plain-leader "$PA" plain "$P" "$r"
		bench ordered-leader "$PA" ordered "$P" "$r"
		bench ordered-follower "$PB" ordered "$P" "$r"
	done
done
echo "load average at the end: $(cut -d' ' -f1-3 /proc/loadavg)"
python3 - "$OUT" "$RUNS" <<'PY'
import json, statistics, sys
out, runs = sys.argv[1], int(sys.argv[2])
def load(name, p, r):
    return json.load(open(f"{out}/{name}-P{p}-{r}.json"))
names = ("plain-leader", "ordered-leader", "ordered-follower")
print("| load | -P | IDs/s per round | median IDs/s | p99 ms per round | median p99 ms | errors |")
print("|---|---|---|---|---|---|---|")
for p in (1, 16):
    for n in names:
        rs = [load(n, p, r) for r in range(1, runs + 1)]
        ids = [x["ids_per_sec"] for x in rs]
        p99 = [x["latency"]["p99_ms"] for x in rs]
        print(f"| {n} | {p} | {', '.join(str(round(x)) for x in ids)} | {round(statistics.median(ids))} | "
              f"{', '.join(f'{x:.2f}' for x in p99)} | {statistics.median(p99):.2f} | {sum(x['errors'] for x in rs)} |")
print()
def ok(*xs):
    return all(x["ids_per_sec"] > 0 and x["latency"]["p99_ms"] > 0 for x in xs)
for p in (1, 16):
    for a, b in (("ordered-leader", "plain-leader"), ("ordered-follower", "ordered-leader")):
        pairs = [(load(a, p, r), load(b, p, r)) for r in range(1, runs + 1)]
        good = [(x, y) for x, y in pairs if ok(x, y)]
        if not good:
            print(f"-P {p}: {a} / {b}: every round failed")
            continue
        rat = [x["ids_per_sec"] / y["ids_per_sec"] for x, y in good]
        p99 = [x["latency"]["p99_ms"] / y["latency"]["p99_ms"] for x, y in good]
        print(f"-P {p}: {a} / {b}: throughput {statistics.median(rat):.2f}x (rounds {', '.join(f'{x:.2f}' for x in rat)}), "
              f"p99 {statistics.median(p99):.2f}x; {len(pairs) - len(good)} of {len(pairs)} rounds failed (an error reply)")
import os
hz = os.sysconf("SC_CLK_TCK")
for p in (1, 16):
    cpu = []
    for r in range(1, runs + 1):
        x = load("ordered-follower", p, r)
        n = x["ids_per_sec"] and x.get("requests") or 0
        ticks = int(open(f"{out}/ordered-follower-P{p}-{r}.ticks").read())
        if n:
            cpu.append(ticks / hz * 1e6 / n)
    if cpu:
        print(f"-P {p}: follower CPU per forwarded request: {statistics.median(cpu):.2f} us (rounds {', '.join(f'{x:.2f}' for x in cpu)})")
PY
