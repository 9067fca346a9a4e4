#!/usr/bin/env bash
# bench/compare.sh: leafd against redis-server under the same redis-benchmark load, on a
# machine with at least two cores. Each server is pinned to one core (SERVER_CPU), the client
# to another (CLIENT_CPU): unpinned, client and Go server fight over the cores and the
# comparison says nothing about the server (see docs/HAZARDS.md).
#
# The servers run one at a time, alternating (redis, leafd, redis, leafd, ...), RUNS times
# each, so that background load drifts over both alike. Each run:
#   redis: INCR, INCR -P 16
#   leafd: INCR, INCR -P 16, IDS.SNOWFLAKE, IDS.SNOWFLAKE -P 16
# each preceded by an unmeasured warm-up. It prints the medians and the ratio leafd/redis:
# both the ratio of the medians and the median of the per-run ratios (paired, more robust
# when the machine's load changes during the script).
#
# Usage: bash bench/compare.sh            (from the repository root; a few minutes at most)
# Environment: RUNS (5), N (200000 unpipelined requests), NP (2000000 requests at -P 16),
#   CLIENTS (50), PIPELINE (16), SERVER_CPU (0), CLIENT_CPU (1), LEAFD (a leafd binary;
#   built when unset), KEEP (a directory to keep the raw CSVs and logs in), VARIANTS (more
#   leafd builds or settings run in the same alternation, INCR and INCR -P 16 only, or also
#   the IDS.SNOWFLAKE tests with VARIANT_SNOWFLAKE=1: space-separated
#   name:binary[:ENV=VALUE[:FLAGS]], FLAGS being extra leafd flags separated by commas, e.g.
#   "noyield:/tmp/leafd-noyield gmp2:/tmp/leafd:GOMAXPROCS=2
#    goroutine:/tmp/leafd::--server-model=goroutine"), LEAFD_FLAGS (extra flags of the main
#   leafd, separated by commas), PERF (1: also count, with perf stat on the server process,
#   its CPU time, context switches and system calls per request during each measured test;
#   these counts depend far less on the machine's other load than req/s and p99 do), CEILING
#   (1: also run bench/ceiling, a server that parses with leafd's parser, answers every command
#   with :1 and does nothing else, sleeping in epoll_wait [ceiling] and polling [ceiling-spin]: the most any server
#   can get from this client on this machine).
set -euo pipefail

RUNS=${RUNS:-5}
N=${N:-200000}
NP=${NP:-2000000}
CLIENTS=${CLIENTS:-50}
PIPELINE=${PIPELINE:-16}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
BENCH_TIMEOUT=${BENCH_TIMEOUT:-90}

for tool in redis-server redis-benchmark redis-cli taskset timeout; do
	command -v "$tool" >/dev/null || { echo "compare.sh: $tool not found" >&2; exit 2; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/leafd-compare.XXXXXX")
server_pid=""
client_pid=""

# client runs a command in the background and waits for it, so that a signal to this script
# runs the trap at once instead of after the command.
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
		# leafd shuts down gracefully on SIGTERM; do not wait forever.
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

if [[ -z "${LEAFD:-}" ]]; then
	root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
	LEAFD=$work/leafd
	(cd "$root" && go build -ldflags "-X main.version=$(git describe --tags --always --dirty 2>/dev/null || echo unknown)" -o "$LEAFD" ./cmd/leafd)
fi
if [[ -n "${CEILING:-}" ]]; then
	(cd "$(dirname "${BASH_SOURCE[0]}")/.." && go build -o "$work/ceiling" ./bench/ceiling)
fi

# free_port prints a loopback port nobody listens on, below the ephemeral range (32768 and
# up), where another process's outgoing connection can hold the port between this check and
# the server's bind.
free_port() {
	local p
	while :; do
		p=$((20000 + RANDOM % 12000))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null; then
			echo "$p"
			return
		fi
	done
}

wait_ready() {
	local port=$1
	for _ in $(seq 100); do
		if [[ "$(redis-cli -p "$port" PING 2>/dev/null)" == PONG ]]; then
			return 0
		fi
		kill -0 "$server_pid" 2>/dev/null || { echo "compare.sh: server on port $port exited" >&2; return 1; }
		sleep 0.1
	done
	echo "compare.sh: server on port $port not ready" >&2
	return 1
}

start_server() { # name port run
	local name=$1 port=$2 run=$3
	case $name in
	redis)
		taskset -c "$SERVER_CPU" redis-server --port "$port" --bind 127.0.0.1 --save '' \
			--appendonly no --daemonize no >"$work/redis-$run.log" 2>&1 &
		;;
	leafd)
		local flags=()
		[[ -n "${LEAFD_XFLAGS:-}" ]] && IFS=, read -r -a flags <<<"$LEAFD_XFLAGS"
		taskset -c "$SERVER_CPU" env ${LEAFD_ENV:-} "${LEAFD_BIN:-$LEAFD}" --data-dir "$work/leafd-data-$run" \
			--addr "127.0.0.1:$port" --http-addr "" --log-level warn "${flags[@]}" >"$work/leafd-$run.log" 2>&1 &
		;;
	c-ceiling | c-ceiling-spin)
		local spin=()
		[[ $name == c-ceiling-spin ]] && spin=(-spin)
		taskset -c "$SERVER_CPU" "$work/ceiling" -addr "127.0.0.1:$port" "${spin[@]}" >"$work/$name-$run.log" 2>&1 &
		;;
	esac
	server_pid=$!
	wait_ready "$port"
}

# bench name test run port args...: runs redis-benchmark pinned to CLIENT_CPU and appends
# "name test run rps p50 p99" to results.
bench() {
	local name=$1 test=$2 run=$3 port=$4
	shift 4
	local csv perf_pid="" pf="$work/perf-$name-$test-$run.txt" counts="- - -" nreq
	if [[ -n "${PERF:-}" ]]; then
		perf stat -x, -e task-clock,context-switches,raw_syscalls:sys_enter -p "$server_pid" -o "$pf" &
		perf_pid=$!
		sleep 0.2
	fi
	client timeout "$BENCH_TIMEOUT" taskset -c "$CLIENT_CPU" redis-benchmark -h 127.0.0.1 -p "$port" \
		-c "$CLIENTS" --csv "$@" >"$work/$name-$test-$run.csv"
	if [[ -n "$perf_pid" ]]; then
		kill -INT "$perf_pid" 2>/dev/null || true
		wait "$perf_pid" 2>/dev/null || true
		nreq=$(printf '%s\n' "$@" | awk 'p { print; exit } $0 == "-n" { p = 1 }')
		# task-clock in ms, counts; per request: CPU microseconds, switches, system calls.
		counts=$(awk -F, -v n="$nreq" '
			$3 == "task-clock" { cpu = $1 } $3 == "context-switches" { cs = $1 } $3 ~ /sys_enter/ { sc = $1 }
			END { printf "%.3f %.4f %.3f", cpu * 1000 / n, cs / n, sc / n }' "$pf")
	fi
	csv=$(cat "$work/$name-$test-$run.csv")
	# "test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms","p99_latency_ms","max_latency_ms"
	echo "$csv" | awk -F, -v n="$name" -v t="$test" -v r="$run" -v c="$counts" '
		NR == 2 { gsub(/"/, ""); printf "%s %s %s %s %s %s %s\n", n, t, r, $2, $5, $7, c }' >>"$work/results"
}

run_server() { # name run
	local name=$1 run=$2 port
	port=$(free_port)
	local kind=$name
	[[ $name == v-* ]] && kind=leafd
	start_server "$kind" "$port" "$run"
	# Warm-up, not measured: connections, leafd's first segment and its dynamic step.
	client timeout "$BENCH_TIMEOUT" taskset -c "$CLIENT_CPU" redis-benchmark -h 127.0.0.1 -p "$port" \
		-c "$CLIENTS" -n "$NP" -P "$PIPELINE" -t incr -q >/dev/null
	bench "$name" incr "$run" "$port" -n "$N" -t incr
	bench "$name" incr_p "$run" "$port" -n "$NP" -P "$PIPELINE" -t incr
	if [[ $name == leafd || ($name == v-* && -n "${VARIANT_SNOWFLAKE:-}") ]]; then
		bench "$name" snowflake "$run" "$port" -n "$N" IDS.SNOWFLAKE
		bench "$name" snowflake_p "$run" "$port" -n "$NP" -P "$PIPELINE" IDS.SNOWFLAKE
	fi
	stop_server
}

echo "compare.sh: $RUNS runs each, -c $CLIENTS, -n $N unpipelined, -n $NP at -P $PIPELINE;" \
	"servers on cpu $SERVER_CPU, redis-benchmark on cpu $CLIENT_CPU; $(nproc) cpus;" \
	"load average $(cut -d' ' -f1-3 /proc/loadavg)"
: >"$work/results"
start=$SECONDS
for run in $(seq "$RUNS"); do
	run_server redis "$run"
	LEAFD_XFLAGS=${LEAFD_FLAGS:-} run_server leafd "$run"
	for v in ${VARIANTS:-}; do
		IFS=: read -r vname vbin venv vflags <<<"$v"
		LEAFD_BIN=$vbin LEAFD_ENV=$venv LEAFD_XFLAGS=$vflags run_server "v-$vname" "$run"
	done
	if [[ -n "${CEILING:-}" ]]; then
		run_server c-ceiling "$run"
		run_server c-ceiling-spin "$run"
	fi
	echo "  run $run/$RUNS done ($((SECONDS - start))s, load $(cut -d' ' -f1 /proc/loadavg))" >&2
done

echo
echo "raw (server test run req/s p50_ms p99_ms [cpu_us/req cs/req syscalls/req with PERF=1]):"
sed 's/^/  /' "$work/results"
echo
# Rows: the leafd test and the redis test it is compared with.
awk -v runs="$RUNS" '
	function median(key, col,    n, i, j, v, t) {
		n = 0
		for (i = 1; i <= runs; i++) if ((key, i) in val) v[++n] = val[key, i, col]
		for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j-1] > v[j]; j--) { t = v[j]; v[j] = v[j-1]; v[j-1] = t }
		if (n == 0) return 0
		return n % 2 ? v[(n+1)/2] : (v[n/2] + v[n/2+1]) / 2
	}
	function pairmedian(lk, rk, col,    n, i, j, v, t) {
		n = 0
		for (i = 1; i <= runs; i++) if ((lk, i) in val && (rk, i) in val && val[rk, i, col] > 0) v[++n] = val[lk, i, col] / val[rk, i, col]
		for (i = 2; i <= n; i++) for (j = i; j > 1 && v[j-1] > v[j]; j--) { t = v[j]; v[j] = v[j-1]; v[j-1] = t }
		if (n == 0) return 0
		return n % 2 ? v[(n+1)/2] : (v[n/2] + v[n/2+1]) / 2
	}
	{ seen[$1] = 1; k = $1 " " $2; val[k, $3] = 1; val[k, $3, "rps"] = $4; val[k, $3, "p50"] = $5; val[k, $3, "p99"] = $6
	  if ($7 != "" && $7 != "-") { perf = 1; val[k, $3, "cpu"] = $7; val[k, $3, "cs"] = $8; val[k, $3, "sc"] = $9; tests[k] = 1 } }
	function row(label, lk, rk,    lr, rr, l50, r50, l99, r99) {
		lr = median(lk, "rps"); rr = median(rk, "rps")
		l50 = median(lk, "p50"); r50 = median(rk, "p50")
		l99 = median(lk, "p99"); r99 = median(rk, "p99")
		printf "%-34s %12.0f %12.0f %7.3f %7.3f   %6.3f %6.3f   %6.3f %6.3f %7.2f\n", label, rr, lr,
			(rr > 0 ? lr / rr : 0), pairmedian(lk, rk, "rps"), r50, l50, r99, l99, (r99 > 0 ? l99 / r99 : 0)
	}
	END {
		printf "medians of %d runs; ratio = leafd/redis req/s (of the medians, and median of per-run ratios)\n", runs
		printf "%-34s %12s %12s %7s %7s   %6s %6s   %6s %6s %7s\n", "leafd test vs redis-server INCR", "redis req/s", "leafd req/s", "ratio", "paired", "r p50", "l p50", "r p99", "l p99", "p99 x"
		row("INCR", "leafd incr", "redis incr")
		row("INCR -P '"$PIPELINE"'", "leafd incr_p", "redis incr_p")
		row("IDS.SNOWFLAKE vs INCR", "leafd snowflake", "redis incr")
		row("IDS.SNOWFLAKE -P '"$PIPELINE"' vs INCR -P '"$PIPELINE"'", "leafd snowflake_p", "redis incr_p")
		for (k in seen) if (k ~ /^[vc]-/) {
			row("INCR [" substr(k, 3) "]", k " incr", "redis incr")
			row("INCR -P '"$PIPELINE"' [" substr(k, 3) "]", k " incr_p", "redis incr_p")
			if ((k " snowflake_p", 1) in val) row("IDS.SNOWFLAKE -P '"$PIPELINE"' [" substr(k, 3) "]", k " snowflake_p", "redis incr_p")
		}
		if (perf) {
			printf "\nper request, medians (perf stat on the server process): CPU us, context switches, system calls\n"
			printf "%-34s %9s %9s %9s\n", "server test", "cpu_us", "cs", "syscalls"
			for (k in tests) printf "%-34s %9.3f %9.4f %9.3f\n", k, median(k, "cpu"), median(k, "cs"), median(k, "sc")
		}
	}' "$work/results"
echo
echo "elapsed $((SECONDS - start))s; load average at the end $(cut -d' ' -f1-3 /proc/loadavg)"
