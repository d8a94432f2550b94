#!/usr/bin/env bash
# Start a throwaway 3-node MariaDB Galera cluster on loopback and run the
# Galera tests against it (make test-galera).
#
# - The cluster is scripts/galera-cluster.sh's (shared with
#   scripts/failover.sh): as root with apt-get it installs what is missing
#   (mariadb-server, galera-4, rsync); the nodes run from a fresh temp dir
#   on free loopback ports and are stopped (and the dir removed) on exit;
#   system services are never touched.
# - Exports ROWLEASE_GALERA_DSNS (three go-sql-driver DSNs, comma-separated)
#   and runs GALERA_TESTS (default: the Galera tests of ./harness/galera/),
#   failing if any case skips. GALERA_KEEP=1 keeps the temp dir (node logs).
# - ROWLEASE_SERVE=FILE runs no tests: it writes the export line to FILE and
#   keeps the cluster up until interrupted.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
log() { echo "galera.sh: $*" >&2; }
command -v go >/dev/null || PATH="$PATH:/usr/local/go/bin"
# shellcheck source=scripts/galera-cluster.sh
source scripts/galera-cluster.sh

galera_install
TMP=$(mktemp -d /tmp/rowlease-galera.XXXXXX)
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    galera_stop "$rc"
    [[ -n ${GALERA_KEEP:-} ]] || rm -rf "$TMP"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

galera_start "$TMP"

if [[ -n ${ROWLEASE_SERVE:-} ]]; then
    echo "export ROWLEASE_GALERA_DSNS='$ROWLEASE_GALERA_DSNS'" >"$ROWLEASE_SERVE"
    log "cluster up; DSNs in $ROWLEASE_SERVE; interrupt to stop it"
    while true; do sleep 3600 & wait $!; done   # wait: a signal runs the trap at once
fi
set +e
# shellcheck disable=SC2086
go test -race -count=1 -timeout 20m -v -tags galera ${GOTEST_FLAGS:-} ${GALERA_TESTS:-./harness/galera/} >"$TMP/go-test.log" 2>&1
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
