#!/usr/bin/env bash
# bench/all.sh (make bench): every figure of docs/BENCHMARKS.md's "Issue 10" section, each a
# median of RUNS (>= 3) alternating runs reported as a ratio against a baseline measured in
# the same script:
#
#   compare  bench/compare.sh (redis-benchmark): leafd INCR / IDS.SNOWFLAKE, unpipelined and
#            -P 16, against redis-server INCR, and the server-path variants (VARIANTS: built
#            without the yield before reads; GOMAXPROCS 2 on one core)  (baseline: redis-server)
#   latency  leafd-bench INCR, 50 connections, -P 1 and -P 16, leafd and redis-server
#            alternating; latency percentiles, plotted to docs/bench-latency.png
#                                                                    (baseline: redis-server)
#   batch    IDS.SEGMENT tag 1000 -P 16 from go-redis and from leafd-bench's own client,
#            IDS.SNOWFLAKE 1000 -P 16, INCRBY tag 1000 -P 16     (baselines: the targets,
#            20M IDs/s and 4 096 000 IDs/s per snowflake worker)
#   tags     INCR -P 16 round-robin over TAGS (100 000) tags against one tag, same server,
#            alternating; heap per tag                                (baseline: one tag)
#   cores    leafd with GOMAXPROCS 1 (pinned, the client on the other core) and GOMAXPROCS 2
#            (unpinned, sharing with the client), INCR -P 1 and -P 16, each against
#            redis-server placed the same way, and GOMAXPROCS 2 against 1
#                                                   (baselines: redis-server; GOMAXPROCS 1)
#   refill   INCR through segment refills on a private MariaDB behind a proxy adding 0, 50
#            and 200 ms per round trip (REFILL_DELAYS): a new tag under load, the ramp of a
#            tag created with step 1000, steady state, the first requests after a restart
#            (bench/refill_test.go; needs mariadb-server)   (baseline: 0 ms added)
#
# Servers are pinned to SERVER_CPU and the load generator to CLIENT_CPU (docs/HAZARDS.md,
# "Benchmarking a RESP server on two cores": unpinned, a Go client and server fight over two cores), except in "cores". leafd runs with
# its embedded store in a fresh data dir, on /dev/shm when it exists (the tags section creates
# 100 000 tags, each a durable bbolt commit: on a disk that alone takes minutes).
#
# Usage: bash bench/all.sh                  (from the repository root)
# Time: about 15 minutes on an idle 2-core machine. Bounded: a section does not start once the
# script has run LIMIT seconds (default 2400), and each section is bounded by its timeouts
# (600 s per leafd-bench run, 1800 s for refill), so it ends within LIMIT + 30 minutes even on
# a loaded machine; skipped sections are listed in env.txt and summary.md.
# Environment: RUNS (3), DUR (3s measured per run), WARM (500ms), TAGS (100000), LIMIT, SECTIONS
#   ("compare latency batch tags cores refill"), OUT (bench/out: raw JSON, quantile CSVs,
#   summary.md), PNG (docs/bench-latency.png), SERVER_CPU (0), CLIENT_CPU (1), and for the
#   compare section the variables of bench/compare.sh.
# Needs: go, redis-server, redis-benchmark, redis-cli, taskset, curl, python3 (summary).
set -euo pipefail

RUNS=${RUNS:-3}
DUR=${DUR:-3s}
WARM=${WARM:-500ms}
TAGS=${TAGS:-100000}
LIMIT=${LIMIT:-2400}
SECTIONS=${SECTIONS:-"compare latency batch tags cores refill"}
SERVER_CPU=${SERVER_CPU:-0}
CLIENT_CPU=${CLIENT_CPU:-1}
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
OUT=${OUT:-$root/bench/out}
PNG=${PNG:-$root/docs/bench-latency.png}

if ((RUNS < 3)); then
	echo "all.sh: RUNS must be at least 3 (medians of alternating runs)" >&2
	exit 2
fi
for tool in go redis-server redis-benchmark redis-cli taskset curl python3; do
	command -v "$tool" >/dev/null || { echo "all.sh: $tool not found" >&2; exit 2; }
done

work=$(mktemp -d "${TMPDIR:-/tmp}/leafd-bench-all.XXXXXX")
shm=$work
if [[ -d /dev/shm && -w /dev/shm ]]; then
	shm=$(mktemp -d /dev/shm/leafd-bench-all.XXXXXX)
fi
server_pid=""
cleanup() {
	local rc=$?
	stop_server
	rm -rf "$work"
	[[ $shm != "$work" ]] && rm -rf "$shm"
	exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

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

wait_ready() {
	local port=$1
	for _ in $(seq 300); do
		[[ "$(redis-cli -p "$port" PING 2>/dev/null)" == PONG ]] && return 0
		kill -0 "$server_pid" 2>/dev/null || { echo "all.sh: server on port $port exited" >&2; return 1; }
		sleep 0.1
	done
	echo "all.sh: server on port $port not ready" >&2
	return 1
}

# start NAME PORT [PIN] [leafd flags...]: PIN is "pin" (SERVER_CPU) or "free"; sets server_pid.
run_id=0
start() {
	local name=$1 port=$2 pin=${3:-pin}
	shift 3 || shift $#
	local pre=()
	[[ $pin == pin ]] && pre=(taskset -c "$SERVER_CPU")
	run_id=$((run_id + 1))
	case $name in
	redis)
		"${pre[@]}" redis-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
			--daemonize no >"$work/redis-$run_id.log" 2>&1 &
		;;
	leafd)
		"${pre[@]}" "$work/leafd" --data-dir "$shm/data-$run_id" --addr "127.0.0.1:$port" \
			--http-addr "" --log-level warn "$@" >"$work/leafd-$run_id.log" 2>&1 &
		;;
	esac
	server_pid=$!
	wait_ready "$port"
}

# lb LABEL PORT [leafd-bench flags...]: one measured run of leafd-bench pinned to CLIENT_CPU;
# the JSON goes to $OUT/raw/LABEL.RUN.json (RUN from the caller's $run).
lb() {
	local label=$1 port=$2
	shift 2
	local pre=(taskset -c "$CLIENT_CPU")
	[[ ${CLIENT_FREE:-} == 1 ]] && pre=()
	local c0 w0 c1 w1
	c0=$(cpu_ticks) w0=$(date +%s%N)
	GOMAXPROCS=${CLIENT_PROCS:-1} timeout 600 "${pre[@]}" "$work/leafd-bench" -addr "127.0.0.1:$port" \
		-d "$DUR" -warmup "$WARM" -json "$@" >"$OUT/raw/$label.$run.json" || {
		echo "all.sh: leafd-bench $label run $run failed:" >&2
		cat "$OUT/raw/$label.$run.json" >&2
		return 1
	}
	c1=$(cpu_ticks) w1=$(date +%s%N)
	# The server's CPU use during the run (warm-up included), in cores: below 1 on a pinned
	# server means the client, not the server, was the bound.
	echo "$c0 $c1 $w0 $w1 $(getconf CLK_TCK)" | awk '{ printf "%.3f\n", ($2 - $1) / $5 / (($4 - $3) / 1e9) }' >"$OUT/raw/$label.$run.cpu"
	python3 -c 'import json,sys; r=json.load(open(sys.argv[1])); print("    %-22s %12.0f req/s %14.0f IDs/s  p50 %7.3f  p99 %7.3f  p99.9 %7.3f ms  errors %d" % (sys.argv[2], r["requests_per_sec"], r["ids_per_sec"], r["latency"]["p50_ms"], r["latency"]["p99_ms"], r["latency"]["p999_ms"], r["errors"]))' \
		"$OUT/raw/$label.$run.json" "$label"
}

load() { cut -d' ' -f1-3 /proc/loadavg; }

# cpu_ticks: user + system clock ticks of the running server.
cpu_ticks() { awk '{ print $14 + $15 }' "/proc/$server_pid/stat"; }

mkdir -p "$OUT/raw" "$OUT/quantiles"
rm -f "$OUT"/raw/*.json "$OUT"/raw/*.cpu "$OUT"/raw/*.loads "$OUT"/quantiles/*.csv "$OUT"/*.txt "$OUT"/summary.md
echo "all.sh: building (commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?'))" >&2
version=$(git -C "$root" describe --tags --always --dirty 2>/dev/null || echo unknown)
(cd "$root" && go build -ldflags "-X main.version=$version" -o "$work/leafd" ./cmd/leafd && go build -o "$work/leafd-bench" ./cmd/leafd-bench)
(cd "$root/bench/plot" && go build -o "$work/plot" .)
{
	echo "commit $(git -C "$root" rev-parse --short HEAD 2>/dev/null || echo '?')$(git -C "$root" diff --quiet 2>/dev/null || echo ' (modified)')"
	echo "$(nproc) cpus, $(go version | cut -d' ' -f3), $(redis-server --version | cut -d' ' -f3)"
	echo "RUNS=$RUNS DUR=$DUR WARM=$WARM TAGS=$TAGS"
	echo "load average at the start: $(load)"
} >"$OUT/env.txt"
cat "$OUT/env.txt" >&2
start_s=$SECONDS

for section in $SECTIONS; do
	if ((SECONDS - start_s > LIMIT)); then
		echo "all.sh: $section skipped: the run passed LIMIT=${LIMIT}s" | tee -a "$OUT/env.txt" >&2
		continue
	fi
	echo "== $section (load $(load))" >&2
	case $section in
	compare)
		# The server-path variants of issue 10 in the same alternation: no runtime.Gosched
		# before each read, and GOMAXPROCS 2 on the one pinned core.
		(cd "$root" && go build -ldflags "-X main.version=$version -X github.com/leafd/leafd/resp.readYield=off" -o "$work/leafd-noyield" ./cmd/leafd)
		LEAFD=$work/leafd RUNS=$RUNS VARIANTS=${VARIANTS-"noyield:$work/leafd-noyield gmp2:$work/leafd:GOMAXPROCS=2"} \
			bash "$root/bench/compare.sh" | tee "$OUT/compare.txt"
		;;
	latency)
		for run in $(seq "$RUNS"); do
			for srv in redis leafd; do
				port=$(free_port)
				start "$srv" "$port" pin
				lb "$srv-incr" "$port" -c 50 -P 1 -quantiles "$OUT/quantiles/$srv-incr.$run.csv"
				lb "$srv-incr-p16" "$port" -c 50 -P 16 -quantiles "$OUT/quantiles/$srv-incr-p16.$run.csv"
				stop_server
			done
		done
		;;
	batch)
		for run in $(seq "$RUNS"); do
			port=$(free_port)
			start leafd "$port" pin
			lb segment1000-goredis "$port" -c "${BATCH_CLIENTS:-16}" -P 16 -cmd segment -batch 1000 -client goredis
			lb segment1000-raw "$port" -c "${BATCH_CLIENTS:-16}" -P 16 -cmd segment -batch 1000
			lb snowflake1000 "$port" -c "${BATCH_CLIENTS:-16}" -P 16 -cmd snowflake -batch 1000
			lb incrby1000 "$port" -c "${BATCH_CLIENTS:-16}" -P 16 -cmd incrby -batch 1000
			stop_server
		done
		;;
	tags)
		# The one-tag baseline uses bench:0, one of the TAGS tags: leafd holds at most
		# 100 000 tags (segment.Config.MaxTags).
		port=$(free_port)
		http=$(free_port)
		start leafd "$port" pin --http-addr "127.0.0.1:$http"
		metric() { curl -fsS "http://127.0.0.1:$http/metrics" | awk -v m="$1" '$1 == m { printf "%.0f", $2 }'; }
		run=0
		lb tags-one-warm "$port" -c 50 -P 16 -tag bench:0
		h1=$(metric go_memstats_heap_inuse_bytes)
		echo "    priming $TAGS tags ..." >&2
		t0=$SECONDS
		lb tags-prime "$port" -c 50 -P 16 -tags "$TAGS" -d 1s -warmup 0s
		h2=$(metric go_memstats_heap_inuse_bytes)
		prime=$((SECONDS - t0))
		for run in $(seq "$RUNS"); do
			lb tags-one "$port" -c 50 -P 16 -tag bench:0
			lb tags-many "$port" -c 50 -P 16 -tags "$TAGS"
		done
		h3=$(metric go_memstats_heap_inuse_bytes)
		echo "tags=$TAGS heap_inuse_one_tag=$h1 heap_inuse_all_tags=$h2 heap_inuse_after_runs=$h3" \
			"rss_after_runs=$(metric process_resident_memory_bytes) prime_seconds=$prime" >"$OUT/tags-memory.txt"
		cat "$OUT/tags-memory.txt" >&2
		stop_server
		;;
	cores)
		# Issue 10 item 6: GOMAXPROCS 1 = leafd pinned to SERVER_CPU, the load generator pinned
		# to CLIENT_CPU (it gets the rest); GOMAXPROCS 2 = leafd and the load generator
		# unpinned (on a 2-core machine there is no rest: they share). redis-server runs in the
		# same placement in the same alternation: it cannot use a second core for commands.
		for run in $(seq "$RUNS"); do
			for procs in 1 2; do
				pin=pin free=""
				((procs == 2)) && pin=free free=1
				for srv in redis leafd; do
					port=$(free_port)
					GOMAXPROCS=$procs start "$srv" "$port" "$pin"
					CLIENT_FREE=$free CLIENT_PROCS=$procs lb "cores$procs-$srv-incr" "$port" -c 50 -P 1
					CLIENT_FREE=$free CLIENT_PROCS=$procs lb "cores$procs-$srv-incr-p16" "$port" -c 50 -P 16
					stop_server
				done
			done
		done
		;;
	refill)
		# Its own MariaDB, proxy and leafd processes (unpinned: MariaDB needs a core too);
		# RUNS alternating runs of every delay. About 25 s per run and delay.
		(cd "$root" && RUNS=$RUNS LEAFD_REFILL_BENCH=1 REFILL_OUT=$OUT REFILL_LEAFD=$work/leafd \
			timeout 1800 go test ./bench/ -run '^TestRefillTail$' -count 1 -v -timeout 30m) >"$OUT/refill.txt" 2>&1 || {
			echo "all.sh: refill section failed:" >&2
			tail -30 "$OUT/refill.txt" >&2
			exit 1
		}
		grep 'refill_test' "$OUT/refill.txt" >&2 || true
		;;
	*)
		echo "all.sh: unknown section $section" >&2
		exit 2
		;;
	esac
done

echo "load average at the end: $(load); elapsed $((SECONDS - start_s))s" >>"$OUT/env.txt"
python3 "$root/bench/summarize.py" "$OUT" | tee "$OUT/summary.md"

# The plot: for each server and depth, the run with the median p99.
if compgen -G "$OUT/quantiles/*.csv" >/dev/null; then
	args=()
	for series in redis-incr leafd-incr redis-incr-p16 leafd-incr-p16; do
		f=$(python3 "$root/bench/summarize.py" --median-run "$OUT" "$series") || continue
		[[ -n $f ]] && args+=("$(echo "$series" | sed 's/-incr-p16/ INCR -P 16/; s/-incr$/ INCR/; s/^redis/redis-server/')=$OUT/quantiles/$series.$f.csv")
	done
	"$work/plot" -o "$PNG" -title "INCR latency, 50 connections, server on 1 core (run with the median p99 of $RUNS)" "${args[@]}"
	echo "plot written to $PNG" >&2
fi
