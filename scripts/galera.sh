#!/usr/bin/env bash
# Start a throwaway 3-node MariaDB Galera cluster on loopback and run the
# Galera tests against it (make test-galera).
#
# - Needs mariadb-server, galera-4 (Debian's mariadb-server pulls it in) and
#   rsync; as root with apt-get, installs what is missing.
# - Never touches system services: the nodes run from a fresh temp dir on
#   free loopback ports and are stopped (and the dir removed) on exit.
# - No state transfer tool is needed: node 1 is bootstrapped, given the test
#   user, and shut down cleanly; its data directory (with grastate.dat) is
#   copied to nodes 2 and 3, so all three start from the same position and
#   join without SST.
# - Exports ROWLEASE_GALERA_DSNS (three go-sql-driver DSNs, comma-separated)
#   and runs GALERA_TESTS (default: the Galera tests of ./internal/galera/),
#   failing if any case skips. GALERA_KEEP=1 keeps the temp dir (node logs).
# - ROWLEASE_SERVE=FILE runs no tests: it writes the export line to FILE and
#   keeps the cluster up until interrupted.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
log() { echo "galera.sh: $*" >&2; }
command -v go >/dev/null || PATH="$PATH:/usr/local/go/bin"

IS_ROOT=0; [[ $(id -u) -eq 0 ]] && IS_ROOT=1
find_mariadbd() {
    command -v mariadbd || command -v mysqld \
        || { [[ -x /usr/sbin/mariadbd ]] && echo /usr/sbin/mariadbd; } || true
}
find_galera() {
    local p
    for p in /usr/lib/galera/libgalera_smm.so /usr/lib/libgalera_smm.so /usr/lib64/galera-4/libgalera_smm.so; do
        [[ -e $p ]] && { echo "$p"; return; }
    done
}
pkgs=()
[[ -n $(find_mariadbd) ]] || pkgs+=(mariadb-server)
[[ -n $(find_galera) ]] || pkgs+=(galera-4)
command -v rsync >/dev/null || pkgs+=(rsync)   # the state transfer (a joiner's catch-up) runs it
command -v gcc >/dev/null || pkgs+=(gcc libc6-dev)
if ((${#pkgs[@]})); then
    if ((IS_ROOT)) && command -v apt-get >/dev/null; then
        log "installing ${pkgs[*]}"
        export DEBIAN_FRONTEND=noninteractive
        policy=""
        if [[ ! -e /usr/sbin/policy-rc.d ]]; then
            policy=/usr/sbin/policy-rc.d
            printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy"
        fi
        rc=0
        { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null; } || rc=$?
        [[ -z $policy ]] || rm -f "$policy"
        ((rc == 0)) || log "apt-get failed (exit $rc)"
    fi
fi
BIN=$(find_mariadbd)
LIB=$(find_galera)
if [[ -z $BIN || -z $LIB ]]; then
    log "mariadbd or libgalera_smm.so not found"
    exit 1
fi

TMP=$(mktemp -d /tmp/rowlease-galera.XXXXXX)
chmod 755 "$TMP"
PIDS=()
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    local i
    if ((rc != 0)); then
        for i in 1 2 3; do
            [[ -f $TMP/n$i.log ]] && { log "node $i log (tail):"; tail -n 25 "$TMP/n$i.log" >&2; }
        done
    fi
    for i in 3 2 1; do
        [[ -S $TMP/n$i.sock ]] && mariadb-admin --no-defaults -S "$TMP/n$i.sock" -uroot shutdown >/dev/null 2>&1 || true
    done
    for p in "${PIDS[@]}"; do
        for _ in $(seq 1 100); do kill -0 "$p" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$p" 2>/dev/null || true
        wait "$p" 2>/dev/null || true
    done
    [[ -n ${GALERA_KEEP:-} ]] || rm -rf "$TMP"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
free_port() {
    local p=$1
    while port_busy "$p"; do p=$((p + 1)); done
    echo "$p"
}
# The rsync state transfer runs its daemon as the server's user and must
# write into the joiner's data directory: as root, run the nodes as mysql.
user=()
if ((IS_ROOT)); then
    id -u mysql >/dev/null 2>&1 \
        || useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin mysql
    user=(--user=mysql)
    chown mysql: "$TMP"
fi

# Ports: SQL, group communication, IST for each node.
p=34306; g=45567
SQL=(); GC=(); IST=(); SST=()
for i in 1 2 3; do
    p=$(free_port "$p"); SQL+=("$p"); p=$((p + 1))
    g=$(free_port "$g"); GC+=("$g"); g=$((g + 1))
    g=$(free_port "$g"); IST+=("$g"); g=$((g + 1))
    g=$(free_port "$g"); SST+=("$g"); g=$((g + 1))
done
ADDRS="127.0.0.1:${GC[0]},127.0.0.1:${GC[1]},127.0.0.1:${GC[2]}"

# start_node I [EXTRA...]: start node I in the background.
start_node() {
    local i=$1; shift
    local k=$((i - 1))
    "$BIN" --no-defaults "${user[@]}" --datadir="$TMP/n$i" \
        --socket="$TMP/n$i.sock" --pid-file="$TMP/n$i.pid" \
        --port="${SQL[$k]}" --bind-address=127.0.0.1 --skip-name-resolve \
        --innodb-flush-log-at-trx-commit=2 --skip-log-bin --max-connections=500 \
        --innodb-lock-wait-timeout=10 --binlog-format=ROW \
        --default-storage-engine=InnoDB --innodb-autoinc-lock-mode=2 \
        --wsrep-on=ON --wsrep-provider="$LIB" \
        --wsrep-cluster-name=rowlease --wsrep-node-name="n$i" \
        --wsrep-node-address="127.0.0.1:${GC[$k]}" \
        --wsrep-cluster-address="gcomm://$ADDRS" \
        --wsrep-provider-options="gmcast.listen_addr=tcp://127.0.0.1:${GC[$k]};ist.recv_addr=127.0.0.1:${IST[$k]};gcache.size=64M;evs.suspect_timeout=PT5S;evs.inactive_timeout=PT10S" \
        --wsrep-sst-method=rsync --wsrep-sst-receive-address="127.0.0.1:${SST[$k]}" --wsrep-slave-threads=2 \
        "$@" </dev/null >>"$TMP/n$i.log" 2>&1 &
    PIDS+=($!)
}
# wait_synced I: wait (max 60s) until node I answers and is Synced.
wait_synced() {
    local i=$1 st
    for _ in $(seq 1 600); do
        st=$(mariadb --no-defaults -S "$TMP/n$i.sock" -uroot -N -B \
            -e "SHOW STATUS LIKE 'wsrep_local_state_comment'" 2>/dev/null | cut -f2 || true)
        [[ $st == Synced ]] && return 0
        sleep 0.1
    done
    log "node $i did not sync within 60s:"; tail -n 30 "$TMP/n$i.log" >&2
    return 1
}

t0=$SECONDS
mkdir -p "$TMP/n1"; ((IS_ROOT)) && chown mysql: "$TMP/n1"
mariadb-install-db --no-defaults "${user[@]}" --datadir="$TMP/n1" \
    --auth-root-authentication-method=normal --skip-test-db >"$TMP/install.log" 2>&1 \
    || { log "mariadb-install-db failed:"; tail -n 20 "$TMP/install.log" >&2; exit 1; }
# Bootstrap node 1 alone, add the test user, stop it cleanly: its
# grastate.dat then records the cluster's state, which nodes 2 and 3 copy.
start_node 1 --wsrep-new-cluster
wait_synced 1
mariadb --no-defaults -S "$TMP/n1.sock" -uroot <<'SQL'
CREATE USER 'rowlease'@'127.0.0.1' IDENTIFIED BY 'rowlease';
CREATE USER 'rowlease'@'localhost' IDENTIFIED BY 'rowlease';
GRANT ALL PRIVILEGES ON *.* TO 'rowlease'@'127.0.0.1', 'rowlease'@'localhost';
SQL
mariadb-admin --no-defaults -S "$TMP/n1.sock" -uroot shutdown
wait "${PIDS[0]}" 2>/dev/null || true
PIDS=()
for i in 2 3; do cp -a "$TMP/n1" "$TMP/n$i"; done
((IS_ROOT)) && chown -R mysql: "$TMP"
sed -i 's/^safe_to_bootstrap:.*/safe_to_bootstrap: 1/' "$TMP/n1/grastate.dat"
start_node 1 --wsrep-new-cluster
wait_synced 1
start_node 2
wait_synced 2
start_node 3
wait_synced 3
size=$(mariadb --no-defaults -S "$TMP/n1.sock" -uroot -N -B -e "SHOW STATUS LIKE 'wsrep_cluster_size'" | cut -f2)
log "3-node Galera cluster up in $((SECONDS - t0))s (size $size; SQL ports ${SQL[*]})"
[[ $size == 3 ]] || { log "cluster size $size, want 3"; exit 1; }

dsns=()
for k in 0 1 2; do dsns+=("rowlease:rowlease@tcp(127.0.0.1:${SQL[$k]})/"); done
ROWLEASE_GALERA_DSNS=$(IFS=,; echo "${dsns[*]}")
export ROWLEASE_GALERA_DSNS

if [[ -n ${ROWLEASE_SERVE:-} ]]; then
    echo "export ROWLEASE_GALERA_DSNS='$ROWLEASE_GALERA_DSNS'" >"$ROWLEASE_SERVE"
    log "cluster up; DSNs in $ROWLEASE_SERVE; interrupt to stop it"
    while true; do sleep 3600 & wait $!; done   # wait: a signal runs the trap at once
fi
set +e
# shellcheck disable=SC2086
go test -race -count=1 -timeout 20m -v -tags galera ${GOTEST_FLAGS:-} ${GALERA_TESTS:-./internal/galera/} >"$TMP/go-test.log" 2>&1
rc=$?
set -e
if ((rc != 0)); then
    cat "$TMP/go-test.log"
fi
# The figures each test logs, then the verdicts.
grep -E 'galera_test.go:[0-9]+: [0-9]' "$TMP/go-test.log" || true
grep -E '^(ok|FAIL|---|\?) ' "$TMP/go-test.log" | grep -v -- '^--- PASS' || true
pass=$(grep -cE -- '--- PASS' "$TMP/go-test.log" || true)
skip=$(grep -cE -- '--- SKIP' "$TMP/go-test.log" || true)
log "galera: $pass cases passed, $skip skipped (exit $rc)"
if ((skip > 0)); then
    log "a Galera case skipped while the cluster was running"
    rc=1
fi
exit "$rc"
