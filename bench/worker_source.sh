#!/usr/bin/env bash
# bench/worker_source.sh DSN: IDS.SNOWFLAKE throughput and latency with the MySQL worker-id
# source (--worker-source mysql) against the file source, same binary, segment store on the
# same database in both, RUNS (3) alternating runs of DUR (3s) each at -P 1 and -P 16 with 50
# connections; leafd on SERVER_CPU (0), leafd-bench on CLIENT_CPU (1). Renewals of the worker
# lease run in the background, never on the request path, so the two should be within noise.
# Needs: go, redis-cli, taskset, python3; a database the DSN's user may write (leafd_worker is
# created in it). Output: OUT (bench/out/worker-source), a median table on stdout.
set -uo pipefail
DSN=${1:?usage: bench/worker_source.sh DSN}
RUNS=${RUNS:-3}
DUR=${DUR:-3s}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$root/bench/out/worker-source}
mkdir -p "$OUT"
work=$(mktemp -d "${TMPDIR:-/tmp}/leafd-ws.XXXXXX")
trap 'rm -rf "$work"' EXIT
(cd "$root" && go build -o "$work/leafd" ./cmd/leafd && go build -o "$work/leafd-bench" ./cmd/leafd-bench) || exit 2
run() { # name port leafd-args...
	local name=$1 port=$2; shift 2
	mkdir -p "$work/$name"
	LEAFD_MYSQL_DSN="$DSN" taskset -c "$SERVER_CPU" "$work/leafd" --data-dir "$work/$name" --addr "127.0.0.1:$port" \
		--http-addr "" --log-level warn "$@" >"$OUT/$name.log" 2>&1 &
	local pid=$!
	for _ in $(seq 100); do # the MySQL source serves after its taker's wait (lease + 1s)
		redis-cli -p "$port" IDS.SNOWFLAKE 2>/dev/null | grep -q '^[0-9]' && break
		sleep 0.2
	done
	for P in 1 16; do
		taskset -c "$CLIENT_CPU" "$work/leafd-bench" -addr "127.0.0.1:$port" -cmd snowflake -c 50 -P "$P" -d "$DUR" \
			-warmup 500ms -json >"$OUT/$name-P$P.json" 2>"$OUT/$name-P$P.err"
	done
	kill "$pid"
	wait "$pid"
}
for r in $(seq "$RUNS"); do
	run "file-$r" 27101 --worker-source file
	run "mysql-$r" 27102 --worker-source mysql
done
python3 - "$OUT" <<'PY'
import glob, json, statistics, sys
out = sys.argv[1]
print("| source | -P | IDs/s per run | median IDs/s | p99 ms per run | median p99 ms | errors |")
print("|---|---|---|---|---|---|---|")
for src in ("file", "mysql"):
    for p in (1, 16):
        rs = [json.load(open(f)) for f in sorted(glob.glob(f"{out}/{src}-*-P{p}.json"))]
        ids = [r["ids_per_sec"] for r in rs]
        p99 = [r["latency"]["p99_ms"] for r in rs]
        print(f"| {src} | {p} | {', '.join(str(round(x)) for x in ids)} | {round(statistics.median(ids))} | "
              f"{', '.join(f'{x:.2f}' for x in p99)} | {statistics.median(p99):.2f} | {sum(r['errors'] for r in rs)} |")
PY
