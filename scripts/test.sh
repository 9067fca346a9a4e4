#!/usr/bin/env bash
# The README's test command: runs every test of leafd with -race.
#
# On a fresh Debian machine with Go it installs what the integration tests need (MariaDB,
# ZooKeeper, redis-tools, redis-server; for deploy/ and the status page: podman, runc, prometheus's
# promtool, chromium, systemd-analyze (kubectl is checked); for the client compatibility suite: python3-redis, ruby-redis, libhiredis-dev,
# nodejs and npm, then npm ci) with apt-get, starts a MariaDB and a ZooKeeper of its own on free loopback ports
# with temporary data directories, runs the tests against them, and stops them on the way out.
# Tests that must crash or pause a service start private instances of the same binaries
# through internal/testenv. LEAFD_TEST_REQUIRE=1 makes every integration test fail,
# never skip, when a service is missing. Before the tests: go vet, gofmt and staticcheck
# (v0.8.2, fetched by go run) over the whole repository, which must be clean.
#
#   scripts/test.sh                 # everything
#   scripts/test.sh ./segment/...   # some packages (extra arguments go to go test)
set -euo pipefail
cd "$(dirname "$0")/.."

log() { printf '==> %s\n' "$*" >&2; }

# --- install -----------------------------------------------------------------------------
have_mariadb() { command -v mariadbd >/dev/null 2>&1 || [ -x /usr/sbin/mariadbd ]; }
have_zk() { [ -f /usr/share/java/zookeeper.jar ] && command -v java >/dev/null 2>&1; }
have_redis_tools() { command -v redis-cli >/dev/null 2>&1 && command -v redis-benchmark >/dev/null 2>&1; }
# deploy/: the image test (podman with runc, the host's CA bundle), the rules (promtool) and the
# status page screenshot (headless chromium).
have_podman() { command -v podman >/dev/null 2>&1 && { command -v runc >/dev/null 2>&1 || [ -x /usr/sbin/runc ]; }; }
have_ca() { [ -s /etc/ssl/certs/ca-certificates.crt ]; }
have_promtool() { command -v promtool >/dev/null 2>&1; }
have_chromium() { command -v chromium >/dev/null 2>&1; }
# HELLO's field order against redis-server's (handlers), the systemd unit (systemd-analyze
# verify), the kustomize overlays (kubectl kustomize: kubectl is part of this machine kind's
# base image; Debian has no package of it, so it is checked, not installed).
have_redis_server() { command -v redis-server >/dev/null 2>&1 || [ -x /usr/bin/redis-server ]; }
have_systemd_analyze() { command -v systemd-analyze >/dev/null 2>&1; }
have_kubectl() { command -v kubectl >/dev/null 2>&1; }
# The client compatibility suite (cmd/leafd/compat_test.go): Debian's redis-py for
# /usr/bin/python3 (not a pyenv python on PATH), ruby-redis, Node.js and npm, gcc and hiredis.
have_py_redis() { [ -x /usr/bin/python3 ] && /usr/bin/python3 -c 'import redis' >/dev/null 2>&1; }
have_ruby_redis() { command -v ruby >/dev/null 2>&1 && ruby -e 'require "redis"' >/dev/null 2>&1; }
have_node() { command -v node >/dev/null 2>&1 && command -v npm >/dev/null 2>&1; }
have_hiredis() { [ -f /usr/include/hiredis/hiredis.h ] && command -v gcc >/dev/null 2>&1; }

pkgs=()
have_mariadb || pkgs+=(mariadb-server mariadb-client)
have_zk || pkgs+=(zookeeper default-jre-headless)
have_redis_tools || pkgs+=(redis-tools)
have_podman || pkgs+=(podman runc uidmap slirp4netns fuse-overlayfs) # recommends of podman that --no-install-recommends would skip
have_ca || pkgs+=(ca-certificates)
have_promtool || pkgs+=(prometheus)
have_chromium || pkgs+=(chromium)
have_redis_server || pkgs+=(redis-server)
have_systemd_analyze || pkgs+=(systemd)
have_py_redis || pkgs+=(python3 python3-redis)
have_ruby_redis || pkgs+=(ruby ruby-redis)
have_node || pkgs+=(nodejs npm)
have_hiredis || pkgs+=(gcc libc6-dev libhiredis-dev)
command -v prlimit >/dev/null 2>&1 || pkgs+=(util-linux) # the descriptor tests run leafd under prlimit
# The multi-writer tests run a private Galera cluster (rsync SST); the database-clock tests run
# mariadbd under libfaketime.
have_galera() { [ -f /usr/lib/galera/libgalera_smm.so ] && command -v rsync >/dev/null 2>&1; }
have_faketime() { ls /usr/lib/*/faketime/libfaketime.so.1 >/dev/null 2>&1; }
have_galera || pkgs+=(galera-4 rsync)
have_faketime || pkgs+=(libfaketime)
if [ ${#pkgs[@]} -gt 0 ]; then
	sudo=""
	if [ "$(id -u)" != 0 ]; then sudo="sudo"; fi
	log "installing ${pkgs[*]}"
	$sudo apt-get update -qq
	# Services of the packages must not start on the machine's default ports; ours are private.
	DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null
fi
have_mariadb || { echo "mariadbd still missing after apt-get install mariadb-server" >&2; exit 1; }
have_zk || { echo "ZooKeeper still missing after apt-get install zookeeper" >&2; exit 1; }
have_redis_tools || { echo "redis-cli/redis-benchmark still missing after apt-get install redis-tools" >&2; exit 1; }
have_podman || { echo "podman/runc still missing after apt-get install podman runc" >&2; exit 1; }
have_promtool || { echo "promtool still missing after apt-get install prometheus" >&2; exit 1; }
have_chromium || { echo "chromium still missing after apt-get install chromium" >&2; exit 1; }
have_redis_server || { echo "redis-server still missing after apt-get install redis-server" >&2; exit 1; }
have_systemd_analyze || { echo "systemd-analyze still missing after apt-get install systemd" >&2; exit 1; }
have_kubectl || { echo "kubectl missing (deploy/ renders the kustomize overlays with kubectl kustomize); install kubectl" >&2; exit 1; }
have_py_redis || { echo "redis-py still missing for /usr/bin/python3 after apt-get install python3-redis" >&2; exit 1; }
have_ruby_redis || { echo "redis-rb still missing after apt-get install ruby-redis" >&2; exit 1; }
have_node || { echo "node/npm still missing after apt-get install nodejs npm" >&2; exit 1; }
have_galera || { echo "galera-4/rsync still missing after apt-get install galera-4 rsync" >&2; exit 1; }
have_faketime || { echo "libfaketime still missing after apt-get install libfaketime" >&2; exit 1; }
have_hiredis || { echo "gcc/hiredis still missing after apt-get install gcc libhiredis-dev" >&2; exit 1; }

work=$(mktemp -d /tmp/leafd-test.XXXXXX)
pids=()      # the services: killed on the way out
gate_pids=() # the gates: stopped on the way out when the script fails before their end
cleanup() {
	for p in "${gate_pids[@]}"; do kill "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do kill -9 "$p" 2>/dev/null || true; done
	for p in "${gate_pids[@]}" "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$work"
}
trap cleanup EXIT

# --- gates ---------------------------------------------------------------------------------
# go vet and staticcheck need only Go: they run in the background while npm ci and the
# services start; the tests begin only once both (and gofmt) are clean. One after the other:
# staticcheck reads the export data that vet's compiles leave in the build cache (beside each
# other both would compile every package).
log "go vet and staticcheck (in the background)"
# staticcheck at a pinned version over the whole repository, 0 findings: go run fetches and
# builds it from the Go module proxy on a fresh machine (cached after the first run).
{
	go vet ./... >"$work/vet.out" 2>&1 || echo vet >>"$work/gates.failed"
	go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./... >"$work/staticcheck.out" 2>&1 ||
		echo staticcheck >>"$work/gates.failed"
} &
gate_pids=($!)

# The Node clients, pinned by the committed package-lock.json (node_modules is git-ignored).
node_dir=cmd/leafd/testdata/clients/node
if [ ! -f "$node_dir/node_modules/.package-lock.json" ] || [ "$node_dir/package-lock.json" -nt "$node_dir/node_modules/.package-lock.json" ]; then
	log "npm ci in $node_dir"
	(cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error) || { echo "npm ci failed in $node_dir" >&2; exit 1; }
fi

# --- services ----------------------------------------------------------------------------

# A port for a service, free a moment ago, below the kernel's ephemeral range (32768 and up),
# so that no outgoing connection can take it as its source port before the service binds it.
free_port() {
	python3 -c 'import random, socket
for _ in range(200):
    p = random.randrange(20000, 32768)
    s = socket.socket()
    try:
        s.bind(("127.0.0.1", p)); print(p); break
    except OSError:
        pass
    finally:
        s.close()' 2>/dev/null || echo $((20000 + RANDOM % 12000))
}

wait_for() { # wait_for <what> <seconds> <command...>
	local what=$1 secs=$2
	shift 2
	for _ in $(seq 1 $((secs * 5))); do
		if "$@" >/dev/null 2>&1; then return 0; fi
		sleep 0.2
	done
	echo "$what did not come up in ${secs}s" >&2
	return 1
}

mariadbd_bin=$(command -v mariadbd || echo /usr/sbin/mariadbd)
install_db=$(command -v mariadb-install-db || command -v mysql_install_db)
user_opt=()
if [ "$(id -u)" = 0 ]; then user_opt=(--user=root); fi
mysql_port=$(free_port)
log "starting MariaDB on 127.0.0.1:$mysql_port"
"$install_db" --no-defaults --auth-root-authentication-method=normal --datadir="$work/mysql" \
	--skip-test-db "${user_opt[@]}" >"$work/install-db.log" 2>&1 ||
	{ cat "$work/install-db.log" >&2; exit 1; }
"$mariadbd_bin" --no-defaults --datadir="$work/mysql" --socket="$work/mysqld.sock" \
	--pid-file="$work/mysqld.pid" --port="$mysql_port" --bind-address=127.0.0.1 \
	--innodb-flush-log-at-trx-commit=1 --innodb-buffer-pool-size=64M "${user_opt[@]}" \
	>"$work/mariadbd.log" 2>&1 &
pids+=($!)
wait_for MariaDB 60 mariadb-admin --no-defaults --protocol=tcp -h127.0.0.1 -P"$mysql_port" -uroot ping ||
	{ tail -30 "$work/mariadbd.log" >&2; exit 1; }
mariadb --no-defaults --protocol=tcp -h127.0.0.1 -P"$mysql_port" -uroot -e 'CREATE DATABASE IF NOT EXISTS leafd_test'

zk_port=$(free_port)
log "starting ZooKeeper on 127.0.0.1:$zk_port"
mkdir -p "$work/zk"
cat >"$work/zoo.cfg" <<EOF
tickTime=500
minSessionTimeout=1000
maxSessionTimeout=60000
dataDir=$work/zk
clientPort=$zk_port
clientPortAddress=127.0.0.1
admin.enableServer=false
4lw.commands.whitelist=*
EOF
zk_cp=/usr/share/java/zookeeper.jar
[ -f /usr/share/java/slf4j-simple.jar ] && zk_cp="$zk_cp:/usr/share/java/slf4j-simple.jar"
java -Xmx256m -XX:+UseSerialGC -Djava.net.preferIPv4Stack=true -cp "$zk_cp" \
	org.apache.zookeeper.server.quorum.QuorumPeerMain "$work/zoo.cfg" >"$work/zookeeper.log" 2>&1 &
pids+=($!)
# A connection accepted before the server is ready may never answer: bound every probe.
zk_ok() { timeout 2 bash -c "exec 3<>/dev/tcp/127.0.0.1/$zk_port && printf ruok >&3 && grep -q imok <&3"; }
wait_for ZooKeeper 60 zk_ok || { tail -30 "$work/zookeeper.log" >&2; exit 1; }

export LEAFD_TEST_MYSQL_DSN="root@tcp(127.0.0.1:$mysql_port)/leafd_test"
export LEAFD_TEST_ZK="127.0.0.1:$zk_port"
export LEAFD_TEST_REQUIRE=1

# --- tests -------------------------------------------------------------------------------
log "waiting for go vet and staticcheck"
wait "${gate_pids[@]}"
gate_pids=()
cat "$work/vet.out" "$work/staticcheck.out" >&2
gates_failed=0
if [ -s "$work/gates.failed" ]; then
	echo "failed: $(tr '\n' ' ' <"$work/gates.failed")" >&2
	gates_failed=1
fi
unformatted=$(gofmt -l $(git ls-files '*.go' 2>/dev/null || find . -name '*.go'))
if [ -n "$unformatted" ]; then
	echo "gofmt would change: $unformatted" >&2
	gates_failed=1
fi
[ "$gates_failed" = 0 ] || exit 1
log "go test -race"
args=("$@")
# Every package, the longest first: go test runs 2 packages at once (one per core) in the
# order they are named, so cmd/leafd (the longest by far) runs beside all the others, and the
# short ones come last to end both slots together (./... names the rest, and again those
# named; go test runs each once). admin and client, light ones, run beside cmd/leafd's
# sequential tests, which measure latency and CPU.
order=(./cmd/leafd/ ./admin/ ./client/ ./cmd/leafd/volume/ ./deploy/ ./snowflake/zk/ ./internal/testenv/
	./segment/mysqlstore/ ./shape/ ./handlers/ ./resp/ ./segment/ ./...)
[ ${#args[@]} -gt 0 ] || args=("${order[@]}")
# -parallel 4: cmd/leafd's end-to-end tests that run in parallel (t.Parallel) spend most of
# their time waiting on leases, restarts and private servers, not on the two cores; the
# tests that measure latency or CPU stay sequential (they run before the parallel ones
# start).
go test -race -count=1 -parallel 4 -timeout 40m "${args[@]}"
