#!/usr/bin/env bash
# When the database itself fails over (make test-failover):
#
# - PostgreSQL: harness/failover starts, from a fresh temp dir on free
#   loopback ports, a primary and two streaming standbys (Debian's
#   PostgreSQL binaries, /usr/lib/postgresql/<newest>/bin, or
#   ROWLEASE_PGBIN), kills the primary with SIGKILL at random instants of
#   the request flow, promotes a standby and re-clones the dead node, in
#   synchronous and in asynchronous mode.
# - Galera: the 3-node cluster of scripts/galera-cluster.sh (as make
#   test-galera starts it); harness/failover kills nodes with SIGKILL and
#   starts them again (IST), and cuts nodes off (gmcast.isolate).
#
# As root with apt-get, installs what is missing (postgresql, mariadb-server,
# galera-4, rsync, gcc). Never touches system services; everything is
# stopped and removed on exit.
#
# FAILOVER_KILLS sets the number of primary kills per PostgreSQL mode and of
# node faults on Galera (default 5, the short run; the long run is 30);
# FAILOVER_SEED replays a run's kill instants (each run prints its seed);
# FAILOVER_ONLY=postgres or galera runs one half, FAILOVER_MODE=sync or
# async one PostgreSQL mode; FAILOVER_TTL sets the
# workers' lease TTL in seconds (default 3 on PostgreSQL, 15 on Galera,
# where a node fault stalls the whole cluster for evs.suspect_timeout);
# FAILOVER_ASYNC_LAG_MS bounds how long the replication stream is cut
# before each asynchronous primary's kill (default 1000; each cut is drawn
# at random up to it), the tail that mode loses; FAILOVER_REPL_LATENCY_MS
# delays the replication stream (default 10); FAILOVER_RUN_MINUTES bounds
# each PostgreSQL mode's run (default 30): one that has not answered every
# message and made every kill by then fails, naming the messages still
# unanswered with the last error each got. The summary lines are printed;
# the whole log only on a failure.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
log() { echo "failover.sh: $*" >&2; }
command -v go >/dev/null || PATH="$PATH:/usr/local/go/bin"
# shellcheck source=scripts/galera-cluster.sh
source scripts/galera-cluster.sh

find_pgbin() {   # newest /usr/lib/postgresql/<ver>/bin, or nothing
    local p
    p=$(printf '%s\n' /usr/lib/postgresql/*/bin/postgres | sort -V | tail -n1)
    if [[ -x $p ]]; then dirname "$p"; fi
}
if [[ -z $(find_pgbin) && $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
    log "installing postgresql"
    export DEBIAN_FRONTEND=noninteractive
    policy=""
    if [[ ! -e /usr/sbin/policy-rc.d ]]; then
        policy=/usr/sbin/policy-rc.d
        printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy"
    fi
    { apt-get update -qq && apt-get install -y -qq --no-install-recommends postgresql >/dev/null; } || log "apt-get failed"
    [[ -z $policy ]] || rm -f "$policy"
fi
export ROWLEASE_PGBIN=${ROWLEASE_PGBIN:-$(find_pgbin)}
# postgres refuses to run as root: the harness runs it as the postgres user.
if [[ $(id -u) -eq 0 ]] && ! id -u postgres >/dev/null 2>&1; then
    useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin postgres
fi
galera_install

ONLY=${FAILOVER_ONLY:-}
export FAILOVER_KILLS=${FAILOVER_KILLS:-5}
TMP=$(mktemp -d /tmp/rowlease-failover.XXXXXX)
chmod 755 "$TMP"
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    galera_stop "$rc"
    [[ -n ${FAILOVER_KEEP:-} ]] || rm -rf "$TMP"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

t0=$SECONDS
run='^(TestPGClusterFailover|TestPostgresFailover)$'
if [[ $ONLY != postgres ]]; then
    mkdir -p "$TMP/galera"
    galera_start "$TMP/galera"
    run='^(TestPGClusterFailover|TestPostgresFailover|TestGaleraNodeFaults)$'
fi
[[ $ONLY == galera ]] && run='^TestGaleraNodeFaults$'

set +e
go test -count=1 -timeout 60m -v -tags failover -run "$run" ${GOTEST_FLAGS:-} ./harness/failover/ >"$TMP/go-test.log" 2>&1
rc=$?
set -e
if ((rc != 0)); then
    cat "$TMP/go-test.log"
fi
grep -hE 'failover (seed|summary|sync|async|galera)' "$TMP/go-test.log" | sed -E 's/^ *[a-z_]+\.go:[0-9]+: //' || true
grep -E '^(ok|FAIL|---|\?) ' "$TMP/go-test.log" | grep -v -- '^--- PASS' || true
skip=$(grep -cE -- '--- SKIP' "$TMP/go-test.log" || true)
if ((skip > 0)); then
    log "a failover case skipped while its servers were available"
    rc=1
fi
log "done in $((SECONDS - t0))s (exit $rc)"
exit "$rc"
