#!/usr/bin/env bash
# bench/loops.sh: leafd on our event loop, leafd on the gnet/v2 variant (--event-loop gnet) and
# redis-server, side by side under the same redis-benchmark load (issue 21 items 4 and 5).
# Each server is pinned to SERVER_CPU, redis-benchmark to CLIENT_CPU (see compare.sh for why).
# The three servers run one at a time, interleaved (redis, ours, gnet, redis, ours, gnet, ...),
# RUNS times, so that the machine's other load drifts over all of them alike. Each run, after
# an unmeasured warm-up:
#   INCR unpipelined, INCR -P 16 (redis-server and both leafd loops),
#   IDS.SEGMENT t 1000 unpipelined and -P 16 (both leafd loops; IDs/s = req/s x 1000).
# It prints medians of throughput and p99, the ratios to redis-server and ours/gnet (of the
# medians and, paired, the median of the per-run ratios), and the load average seen at each run.
#
# Usage: bash bench/loops.sh     (from the repository root; about 1 minute per run)
# Environment: RUNS (5), N (200000 unpipelined INCRs), NP (2000000 INCRs at -P 16),
#   NS (100000 IDS.SEGMENT requests), CLIENTS (50), SERVER_CPU (0), CLIENT_CPU (1),
#   LEAFD (our-loop binary; built from the tree when unset), LEAFD_GNET (a binary built with
#   -tags gnet; built when unset), KEEP (a directory to keep the raw results and logs in).
set -euo pipefail

RUNS=${RUNS:-5}
N=${N:-200000}
NP=${NP:-2000000}
NS=${NS:-100000}
CLIENTS=${CLIENTS:-50}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-120}

for tool in redis-server redis-benchmark redis-cli taskset timeout go; do
	command -v "$tool" >/dev/null || { echo "loops.sh: $tool not found" >&2; exit 2; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/leafd-loops.XXXXXX")
server_pid=""
client_pid=""

client() {
	"$@" &
	client_pid=$!
	local rc=0
	wait "$client_pid" || rc=$?
	client_pid=""
	return "$rc"
}

stop_server() {
	if [[ -n "$server_pid" ]]; then
		kill "$server_pid" 2>/dev/null || true
		for _ in $(seq 50); do
			kill -0 "$server_pid" 2>/dev/null || break
			sleep 0.1
		done
		kill -9 "$server_pid" 2>/dev/null || true
		wait "$server_pid" 2>/dev/null || true
		server_pid=""
	fi
}

cleanup() {
	local rc=$?
	if [[ -n "$client_pid" ]]; then
		kill "$client_pid" 2>/dev/null || true
		wait "$client_pid" 2>/dev/null || true
	fi
	stop_server
	if [[ -n "${KEEP:-}" ]]; then
		mkdir -p "$KEEP" && cp -r "$work"/. "$KEEP"/ && echo "raw results kept in $KEEP" >&2
	fi
	rm -rf "$work"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
if [[ -z "${LEAFD:-}" ]]; then
	LEAFD=$work/leafd
	(cd "$root" && go build -o "$LEAFD" ./cmd/leafd)
fi
if [[ -z "${LEAFD_GNET:-}" ]]; then
	LEAFD_GNET=$work/leafd-gnet
	(cd "$root" && go build -tags gnet -o "$LEAFD_GNET" ./cmd/leafd)
fi

free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 40000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
}

# wait_ready: redis-benchmark retries for ever against a port where nothing listens.
wait_ready() {
	local port=$1
	for _ in $(seq 100); do
		if [[ "$(redis-cli -p "$port" PING 2>/dev/null)" == PONG ]]; then
			return 0
		fi
		kill -0 "$server_pid" 2>/dev/null || { echo "loops.sh: server on port $port exited" >&2; return 1; }
		sleep 0.1
	done
	echo "loops.sh: server on port $port not ready" >&2
	return 1
}

start_server() { # name port run
	local name=$1 port=$2 run=$3
	case $name in
	redis)
		taskset -c "$SERVER_CPU" redis-server --port "$port" --bind 127.0.0.1 --save '' \
			--appendonly no --daemonize no >"$work/redis-$run.log" 2>&1 &
		;;
	ours)
		taskset -c "$SERVER_CPU" "$LEAFD" --data-dir "$work/ours-$run" --addr "127.0.0.1:$port" \
			--http-addr "" --log-level warn >"$work/ours-$run.log" 2>&1 &
		;;
	gnet)
		taskset -c "$SERVER_CPU" "$LEAFD_GNET" --data-dir "$work/gnet-$run" --addr "127.0.0.1:$port" \
			--http-addr "" --log-level warn --event-loop gnet >"$work/gnet-$run.log" 2>&1 &
		;;
	esac
	server_pid=$!
	wait_ready "$port"
}

# bench name test run port args...: appends "name test run rps p99" to results.
bench() {
	local name=$1 test=$2 run=$3 port=$4
	shift 4
	if ! client timeout "$BENCH_TIMEOUT" taskset -c "$CLIENT_CPU" redis-benchmark -h 127.0.0.1 -p "$port" \
		-c "$CLIENTS" --csv "$@" >"$work/$name-$test-$run.csv"; then
		# A loaded machine can make one test overrun: leave it out of the medians, go on.
		echo "loops.sh: $name $test run $run failed or took over ${BENCH_TIMEOUT}s; left out" >&2
		return 0
	fi
	# "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
	awk -F, -v n="$name" -v t="$test" -v r="$run" '
		NR == 2 { gsub(/"/, ""); printf "%s %s %s %s %s\n", n, t, r, $2, $7 }' "$work/$name-$test-$run.csv" >>"$work/results"
}

run_server() { # name run
	local name=$1 run=$2 port try
	# The machine is shared: another process may take the free port first (bind fails).
	for try in 1 2 3; do
		port=$(free_port)
		start_server "$name" "$port" "$run" && break
		stop_server
		[[ $try == 3 ]] && return 1
	done
	echo "$name $run $(cut -d' ' -f1 /proc/loadavg)" >>"$work/load"
	client timeout "$BENCH_TIMEOUT" taskset -c "$CLIENT_CPU" redis-benchmark -h 127.0.0.1 -p "$port" \
		-c "$CLIENTS" -n "$NP" -P 16 -t incr -q >/dev/null || true
	bench "$name" incr "$run" "$port" -n "$N" -t incr
	bench "$name" incr_p "$run" "$port" -n "$NP" -P 16 -t incr
	if [[ $name != redis ]]; then
		redis-cli -p "$port" IDS.SEGMENT t 1000 >/dev/null # creates the tag (auto-create)
		bench "$name" segment "$run" "$port" -n "$NS" IDS.SEGMENT t 1000
		bench "$name" segment_p "$run" "$port" -n "$NS" -P 16 IDS.SEGMENT t 1000
	fi
	stop_server
}

echo "loops.sh: $RUNS interleaved runs (redis, ours, gnet), -c $CLIENTS, -n $N INCR, -n $NP INCR -P 16," \
	"-n $NS IDS.SEGMENT t 1000; servers on cpu $SERVER_CPU, redis-benchmark on cpu $CLIENT_CPU;" \
	"$(nproc) cpus; $(redis-server --version | cut -d' ' -f1-3); load average $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$work/results"
: >"$work/load"
start=$SECONDS
for run in $(seq "$RUNS"); do
	for name in redis ours gnet; do
		run_server "$name" "$run"
	done
	echo "  run $run/$RUNS done ($((SECONDS - start))s, load $(cut -d' ' -f1 /proc/loadavg))" >&2
done

echo
echo "raw (server test run req/s p99_ms):"
sed 's/^/  /' "$work/results"
echo
awk -v runs="$RUNS" '
	function sort(v, n,    i, j, t) { for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j-1] > v[j]; j--) { t = v[j]; v[j] = v[j-1]; v[j-1] = t } }
	function med(v, n) { if (n == 0) return 0; sort(v, n); return n % 2 ? v[(n+1)/2] : (v[n/2] + v[n/2+1]) / 2 }
	function median(key, col,    n, i, v) { n = 0; for (i = 1; i <= runs; i++) if ((key, i, col) in val) v[++n] = val[key, i, col]; return med(v, n) }
	function paired(lk, rk, col,    n, i, v) {
		n = 0
		for (i = 1; i <= runs; i++) if ((lk, i, col) in val && (rk, i, col) in val && val[rk, i, col] > 0) v[++n] = val[lk, i, col] / val[rk, i, col]
		return med(v, n)
	}
	function ratio(a, b) { return b > 0 ? a / b : 0 }
	{ val[$1 " " $2, $3, "rps"] = $4; val[$1 " " $2, $3, "p99"] = $5 }
	function row(label, test, base,    r, o, g, r99, o99, g99) {
		r = median(base, "rps"); o = median("ours " test, "rps"); g = median("gnet " test, "rps")
		r99 = median(base, "p99"); o99 = median("ours " test, "p99"); g99 = median("gnet " test, "p99")
		printf "%-22s %10.0f %10.0f %10.0f | %6.3f %6.3f %6.3f %6.3f | %6.3f %6.3f | %6.3f %6.3f %6.3f | %6.2f %6.2f %6.2f\n", label,
			r, o, g, ratio(o, r), paired("ours " test, base, "rps"), ratio(g, r), paired("gnet " test, base, "rps"),
			ratio(o, g), paired("ours " test, "gnet " test, "rps"), r99, o99, g99, ratio(o99, r99), ratio(g99, r99), ratio(o99, g99)
	}
	END {
		printf "medians of %d runs. o/r, g/r: leafd req/s over redis-server INCR (of the medians, then paired: median of per-run ratios); o/g: ours over gnet; p99 in ms and its ratios\n", runs
		printf "%-22s %10s %10s %10s | %6s %6s %6s %6s | %6s %6s | %6s %6s %6s | %6s %6s %6s\n", "test", "redis", "ours", "gnet",
			"o/r", "paired", "g/r", "paired", "o/g", "paired", "r p99", "o p99", "g p99", "o/r", "g/r", "o/g"
		row("INCR -c 50", "incr", "redis incr")
		row("INCR -c 50 -P 16", "incr_p", "redis incr_p")
		row("IDS.SEGMENT t 1000", "segment", "redis incr")
		row("IDS.SEGMENT t 1000 -P 16", "segment_p", "redis incr_p")
		printf "IDS.SEGMENT t 1000 IDs/s (medians): unpipelined ours %.1fM, gnet %.1fM; -P 16 ours %.1fM, gnet %.1fM (their redis columns are its INCR, for scale only)\n",
			median("ours segment", "rps") * 1000 / 1e6, median("gnet segment", "rps") * 1000 / 1e6,
			median("ours segment_p", "rps") * 1000 / 1e6, median("gnet segment_p", "rps") * 1000 / 1e6
	}' "$work/results"
echo
printf "load average (1 min) at the start of each server run: "
awk '{ printf "%s%s:%s", (NR > 1 ? ", " : ""), $1 $2, $3 }' "$work/load"
echo
echo "elapsed $((SECONDS - start))s; load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
