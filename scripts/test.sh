#!/usr/bin/env bash
# Run the rowlease test suite against throwaway MariaDB and PostgreSQL servers.
#
# - As root with apt-get: installs what is missing (mariadb-server, postgresql,
#   gcc for -race, ca-certificates for module downloads, chromium for the
#   bookkeeper's browser test, which fails under CI or ROWLEASE_REQUIRE_ALL
#   when there is no chromium).
# - Never touches system services: servers run from a fresh temp dir on free
#   loopback ports and are stopped (and the dir removed) on exit.
# - Exports ROWLEASE_MYSQL_DSN / ROWLEASE_POSTGRES_DSN for the Go tests. A
#   dialect whose server is unavailable is not exported: its tests skip, and
#   under CI (CI set) the run fails instead. With both servers up,
#   ROWLEASE_REQUIRE_ALL makes any dialect skip a failure.
# - ROWLEASE_BENCH=1 runs benchmarks instead of tests; GOTEST_FLAGS is passed
#   through to `go test`.
# - ROWLEASE_REPORT=DIR runs tools/benchreport instead (make bench-report):
#   the comparison benchmarks, written as SVG charts and report.md in DIR.
#   BENCHREPORT_FLAGS is passed to it (e.g. "-only heartbeat,mysqldsn",
#   "-quick").
# - ROWLEASE_SERVE=FILE runs no tests: it writes the DSNs to FILE (as export
#   lines to source) and keeps the servers up until interrupted (make servers).
# - ROWLEASE_MYSQL_RESTART / ROWLEASE_POSTGRES_RESTART are exported: each names
#   a script that kills the server with SIGKILL and starts it again on the same
#   data and port (for harness/chaos; only `make chaos` uses them, since a
#   restart would break the tests of every other package running meanwhile).
# - ROWLEASE_CHAOS=1 runs the long fault-injection run of harness/chaos
#   instead of the suite (make chaos) and prints one summary line per
#   dialect; ROWLEASE_CHAOS_OPS and ROWLEASE_CHAOS_KILLS size it. Then the
#   bookkeeper's kill tests with a varying model (TestKill9NondeterministicModel,
#   and TestKill9Wait: runs that wait for a person's answer), each sized by
#   ROWLEASE_CHAOS_STEP_KILLS (kills per dialect).
# - Every module of the workspace (go.work: the core at the root, the
#   example, the harnesses, contrib/*, tools/*) is vetted, linted and
#   tested: at the root, ./... matches only the core module's packages. The
#   core runs with GOWORK=off, at the versions its own go.mod selects (what
#   a user's build starts from): in the workspace, version selection is
#   shared, and a nested module's newer requirement (a driver, libc) would
#   be what the core's tests ran with. Then the other modules, together,
#   in the workspace.
# The exit code is that of `go vet` / `go test`.
set -euo pipefail

cd "$(dirname "${BASH_SOURCE[0]}")/.."
log() { echo "test.sh: $*" >&2; }

IS_ROOT=0; [[ $(id -u) -eq 0 ]] && IS_ROOT=1
# Go is usually installed from the tarball, which is not on PATH by default.
command -v go >/dev/null || PATH="$PATH:/usr/local/go/bin"

# The package patterns of the workspace's other modules: ./DIR/... for each
# module go.work uses besides the root.
NESTED=()
while IFS= read -r dir; do
    rel=${dir#"$PWD"}; rel=${rel#/}
    [[ -z $rel ]] || NESTED+=("./$rel/...")
done < <(go list -m -f '{{.Dir}}')
# each_module CMD ARGS...: CMD ARGS ./... on the core (GOWORK=off), then
# CMD ARGS on the other modules' patterns (workspace); fails if either does.
each_module() {
    local rc=0
    GOWORK=off "$@" ./... || rc=$?
    "$@" "${NESTED[@]}" || rc=$?
    return "$rc"
}

# /usr/sbin is not on a normal user's PATH on Debian.
find_mariadbd() {
    command -v mariadbd || command -v mysqld \
        || { [[ -x /usr/sbin/mariadbd ]] && echo /usr/sbin/mariadbd; } || true
}
find_pgbin() {   # newest /usr/lib/postgresql/<ver>/bin, or nothing
    local p
    p=$(printf '%s\n' /usr/lib/postgresql/*/bin/postgres | sort -V | tail -n1)
    if [[ -x $p ]]; then dirname "$p"; fi
}

# ---- install missing packages --------------------------------------------
pkgs=()
[[ -n $(find_mariadbd) ]] || pkgs+=(mariadb-server)
[[ -n $(find_pgbin) ]] || pkgs+=(postgresql)
command -v gcc >/dev/null || pkgs+=(gcc libc6-dev)   # go test -race needs cgo
[[ -e /etc/ssl/certs/ca-certificates.crt ]] || pkgs+=(ca-certificates)   # go module downloads
[[ -x /usr/bin/chromium ]] || command -v chromium >/dev/null || pkgs+=(chromium)   # the chat page's browser test
if ((${#pkgs[@]})); then
    if ((IS_ROOT)) && command -v apt-get >/dev/null; then
        log "installing ${pkgs[*]}"
        export DEBIAN_FRONTEND=noninteractive
        # Keep the packages from starting their system services (we never use them).
        policy=""
        if [[ ! -e /usr/sbin/policy-rc.d ]]; then
            policy=/usr/sbin/policy-rc.d
            printf '#!/bin/sh\nexit 101\n' >"$policy" && chmod 755 "$policy"
        fi
        rc=0
        { apt-get update -qq && apt-get install -y -qq --no-install-recommends "${pkgs[@]}" >/dev/null; } || rc=$?
        [[ -z $policy ]] || rm -f "$policy"
        ((rc == 0)) || log "apt-get failed (exit $rc); continuing with what is available"
    else
        log "not root or no apt-get: not installing ${pkgs[*]}; using what is available"
    fi
fi

# ---- temp dir and cleanup ------------------------------------------------
# Fixed under /tmp: short socket paths, and reachable by the postgres user.
TMP=$(mktemp -d /tmp/rowlease-test.XXXXXX)
chmod 755 "$TMP"
MY_PID=""
PG_STARTED=0
PG_USER=()   # command prefix to run postgres tools as a non-root user

cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    # A restart (ROWLEASE_MYSQL_RESTART) leaves a server with another pid.
    if [[ -s $TMP/mysql.pid ]]; then MY_PID=$(cat "$TMP/mysql.pid"); fi
    if [[ -n $MY_PID ]] && kill -0 "$MY_PID" 2>/dev/null; then
        mariadb-admin --no-defaults -S "$TMP/mysql.sock" -uroot shutdown >/dev/null 2>&1 \
            || kill -TERM "$MY_PID" 2>/dev/null || true
        for _ in $(seq 1 100); do kill -0 "$MY_PID" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$MY_PID" 2>/dev/null || true
        wait "$MY_PID" 2>/dev/null || true
    fi
    # Check the pid file, not PG_STARTED: a start interrupted mid-way may leave a postmaster.
    if [[ -f $TMP/pg/data/postmaster.pid ]]; then
        (cd "$TMP" && "${PG_USER[@]}" "$PGBIN/pg_ctl" -D "$TMP/pg/data" stop -m fast -w -t 30 >/dev/null 2>&1) \
            || (cd "$TMP" && "${PG_USER[@]}" "$PGBIN/pg_ctl" -D "$TMP/pg/data" stop -m immediate -w >/dev/null 2>&1) \
            || true
    fi
    rm -rf "$TMP"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

# ---- ports ---------------------------------------------------------------
port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
# free_port START: first port >= START that nothing listens on.
free_port() {
    local p=$1
    while port_busy "$p"; do p=$((p + 1)); done
    echo "$p"
}

# ---- MariaDB -------------------------------------------------------------
start_mariadb() {
    local bin port attempt
    bin=$(find_mariadbd)
    if [[ -z $bin ]] || ! command -v mariadb-install-db >/dev/null; then
        log "MariaDB server not found; MySQL tests will skip"
        return 0
    fi
    local user=(); ((IS_ROOT)) && user=(--user=root)
    mkdir -p "$TMP/mysql"
    mariadb-install-db --no-defaults "${user[@]}" --datadir="$TMP/mysql" \
        --auth-root-authentication-method=normal --skip-test-db \
        >"$TMP/mysql-install.log" 2>&1 \
        || { log "mariadb-install-db failed:"; tail -n 20 "$TMP/mysql-install.log" >&2; return 1; }

    port=$MY_PORT0
    for attempt in 1 2 3 4 5; do
        port=$(free_port "$port")
        "$bin" --no-defaults "${user[@]}" --datadir="$TMP/mysql" \
            --socket="$TMP/mysql.sock" --pid-file="$TMP/mysql.pid" \
            --port="$port" --bind-address=127.0.0.1 --skip-name-resolve \
            --innodb-flush-log-at-trx-commit=2 --skip-log-bin --max-connections=500 \
            --innodb-lock-wait-timeout=10 \
            </dev/null >>"$TMP/mysql.log" 2>&1 &
        MY_PID=$!
        # Wait (max ~60s) until it answers, or until it dies (e.g. port raced).
        for _ in $(seq 1 600); do
            kill -0 "$MY_PID" 2>/dev/null || break
            mariadb-admin --no-defaults -S "$TMP/mysql.sock" -uroot ping >/dev/null 2>&1 && break
            sleep 0.1
        done
        if mariadb-admin --no-defaults -S "$TMP/mysql.sock" -uroot ping >/dev/null 2>&1; then
            break
        fi
        if kill -0 "$MY_PID" 2>/dev/null; then
            log "MariaDB did not come up within 60s:"; tail -n 20 "$TMP/mysql.log" >&2; return 1
        fi
        wait "$MY_PID" 2>/dev/null || true
        MY_PID=""
        log "MariaDB failed to start on port $port (attempt $attempt), trying another port"
        port=$((port + 1))
    done
    [[ -n $MY_PID ]] || { tail -n 20 "$TMP/mysql.log" >&2; return 1; }
    # A restart (make chaos) kills it; bash need not report that.
    disown "$MY_PID" 2>/dev/null || true

    mariadb --no-defaults -S "$TMP/mysql.sock" -uroot <<'SQL'
CREATE USER 'rowlease'@'127.0.0.1' IDENTIFIED BY 'rowlease';
CREATE USER 'rowlease'@'localhost' IDENTIFIED BY 'rowlease';
CREATE USER 'rowlease'@'%' IDENTIFIED BY 'rowlease';
GRANT ALL PRIVILEGES ON *.* TO 'rowlease'@'127.0.0.1', 'rowlease'@'localhost', 'rowlease'@'%';
SQL
    export ROWLEASE_MYSQL_DSN="rowlease:rowlease@tcp(127.0.0.1:$port)/"
    # kill -9, then start again on the same data and port (harness/chaos).
    cat >"$TMP/restart-mysql.sh" <<EOF
#!/usr/bin/env bash
set -euo pipefail
pid=\$(cat "$TMP/mysql.pid")
kill -KILL "\$pid" 2>/dev/null || true
for _ in \$(seq 1 600); do kill -0 "\$pid" 2>/dev/null || break; sleep 0.05; done
rm -f "$TMP/mysql.sock" "$TMP/mysql.pid"
setsid "$bin" --no-defaults ${user[*]} --datadir="$TMP/mysql" \\
    --socket="$TMP/mysql.sock" --pid-file="$TMP/mysql.pid" \\
    --port="$port" --bind-address=127.0.0.1 --skip-name-resolve \\
    --innodb-flush-log-at-trx-commit=2 --skip-log-bin --max-connections=500 \\
    --innodb-lock-wait-timeout=10 </dev/null >>"$TMP/mysql.log" 2>&1 &
for _ in \$(seq 1 1200); do
    mariadb-admin --no-defaults -S "$TMP/mysql.sock" -uroot ping >/dev/null 2>&1 && exit 0
    sleep 0.05
done
echo "restart-mysql: MariaDB did not come back" >&2
tail -n 20 "$TMP/mysql.log" >&2
exit 1
EOF
    chmod 755 "$TMP/restart-mysql.sh"
    export ROWLEASE_MYSQL_RESTART="$TMP/restart-mysql.sh"
    log "MariaDB ready on 127.0.0.1:$port"
}

# ---- PostgreSQL ----------------------------------------------------------
start_postgres() {
    local port attempt
    PGBIN=$(find_pgbin)
    if [[ -z $PGBIN ]]; then
        log "PostgreSQL server not found; Postgres tests will skip"
        return 0
    fi
    mkdir -p "$TMP/pg"
    if ((IS_ROOT)); then
        # postgres refuses to run as root: use the postgres OS user.
        id -u postgres >/dev/null 2>&1 \
            || useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin postgres
        chown postgres: "$TMP/pg"
        PG_USER=(runuser -u postgres --)
    fi
    # Run from $TMP so the postgres user can stat its working directory.
    (cd "$TMP" && "${PG_USER[@]}" "$PGBIN/initdb" -D "$TMP/pg/data" -U postgres \
        --auth-local=trust --auth-host=scram-sha-256 --no-sync -E UTF8 --locale=C.UTF-8 \
        >"$TMP/pg-initdb.log" 2>&1) \
        || { log "initdb failed:"; tail -n 20 "$TMP/pg-initdb.log" >&2; return 1; }

    port=$PG_PORT0
    for attempt in 1 2 3 4 5; do
        port=$(free_port "$port")
        if (cd "$TMP" && "${PG_USER[@]}" "$PGBIN/pg_ctl" -D "$TMP/pg/data" -l "$TMP/pg/pg.log" -w -t 60 \
            -o "-p $port -k $TMP/pg -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=$PG_SYNC -c full_page_writes=off -c max_connections=300" \
            start >/dev/null 2>&1); then
            PG_STARTED=1
            break
        fi
        # A failed -w start can still leave a postmaster behind; make sure it is gone.
        (cd "$TMP" && "${PG_USER[@]}" "$PGBIN/pg_ctl" -D "$TMP/pg/data" stop -m immediate >/dev/null 2>&1) || true
        log "PostgreSQL failed to start on port $port (attempt $attempt), trying another port"
        port=$((port + 1))
    done
    ((PG_STARTED)) || { tail -n 20 "$TMP/pg/pg.log" >&2; return 1; }

    "$PGBIN/psql" -q -X -v ON_ERROR_STOP=1 -h "$TMP/pg" -p "$port" -U postgres -d postgres \
        -c "CREATE ROLE rowlease LOGIN PASSWORD 'rowlease'" \
        -c "CREATE DATABASE rowlease OWNER rowlease" >/dev/null
    export ROWLEASE_POSTGRES_DSN="postgres://rowlease:rowlease@127.0.0.1:$port/rowlease?sslmode=disable"
    # kill -9 of the postmaster and its backends, then start again on the
    # same data and port (harness/chaos).
    cat >"$TMP/restart-postgres.sh" <<EOF
#!/usr/bin/env bash
set -euo pipefail
pid=\$(head -n1 "$TMP/pg/data/postmaster.pid")
kids=\$(ps -o pid= --ppid "\$pid" || true)
kill -KILL "\$pid" \$kids 2>/dev/null || true
for p in "\$pid" \$kids; do
    for _ in \$(seq 1 600); do kill -0 "\$p" 2>/dev/null || break; sleep 0.05; done
done
cd "$TMP"
${PG_USER[*]} "$PGBIN/pg_ctl" -D "$TMP/pg/data" -l "$TMP/pg/pg.log" -w -t 60 \\
    -o "-p $port -k $TMP/pg -c listen_addresses=127.0.0.1 -c fsync=off -c synchronous_commit=$PG_SYNC -c full_page_writes=off -c max_connections=300" \\
    start >/dev/null
EOF
    chmod 755 "$TMP/restart-postgres.sh"
    export ROWLEASE_POSTGRES_RESTART="$TMP/restart-postgres.sh"
    log "PostgreSQL ready on 127.0.0.1:$port"
}

# ---- staticcheck ---------------------------------------------------------
# Installed from the Go module proxy at a pinned version, like the servers
# are installed from apt; any finding fails the run.
STATICCHECK_VERSION=v0.8.2
run_staticcheck() {
    local bin
    bin="$(go env GOPATH)/bin/staticcheck"
    if [[ ! -x $bin ]] || ! "$bin" -version 2>/dev/null | grep -q "${STATICCHECK_VERSION#v}"; then
        log "installing staticcheck $STATICCHECK_VERSION"
        GOWORK=off GOFLAGS=-mod=mod go install "honnef.co/go/tools/cmd/staticcheck@$STATICCHECK_VERSION"
    fi
    each_module "$bin"
    log "staticcheck: no findings"
}

# A server killed with SIGKILL keeps every commit it acknowledged only if
# the commit reached the OS: with synchronous_commit=off PostgreSQL may
# acknowledge one still in its own buffers. The chaos run restarts servers.
PG_SYNC=off
# First ports tried. The chaos run restarts its servers on the same ports:
# it starts from another range, so that a make test starting meanwhile on
# this machine does not take a port in the moment it is free.
MY_PORT0=33306 PG_PORT0=55432
if [[ -n ${ROWLEASE_CHAOS:-} ]]; then
    PG_SYNC=on MY_PORT0=43306 PG_PORT0=45432
fi

t0=$SECONDS
start_mariadb
start_postgres
log "servers started in $((SECONDS - t0))s (data in $TMP)"

# In CI a dialect that would skip is a failure: every dialect must run.
if [[ -n ${ROWLEASE_MYSQL_DSN:-} && -n ${ROWLEASE_POSTGRES_DSN:-} ]]; then
    export ROWLEASE_REQUIRE_ALL=1
elif [[ -n ${CI:-} ]]; then
    log "CI: MySQL/MariaDB or PostgreSQL is unavailable; refusing to pass with skipped dialects"
    exit 1
fi

# ---- run the Go suite ----------------------------------------------------
if [[ -n ${ROWLEASE_SERVE:-} ]]; then
    {
        echo "export ROWLEASE_MYSQL_DSN='${ROWLEASE_MYSQL_DSN:-}'"
        echo "export ROWLEASE_POSTGRES_DSN='${ROWLEASE_POSTGRES_DSN:-}'"
        echo "export ROWLEASE_REQUIRE_ALL=1"
        echo "export ROWLEASE_MYSQL_RESTART='${ROWLEASE_MYSQL_RESTART:-}'"
        echo "export ROWLEASE_POSTGRES_RESTART='${ROWLEASE_POSTGRES_RESTART:-}'"
    } >"$ROWLEASE_SERVE"
    log "servers up; DSNs in $ROWLEASE_SERVE; interrupt to stop them"
    while true; do sleep 3600; done
elif [[ -n ${ROWLEASE_CHAOS:-} ]]; then
    # The long fault-injection run: only harness/chaos, with restarts.
    # Without -race, for throughput: make test runs the short version with it.
    log_file="$TMP/chaos.log"
    set +e
    # shellcheck disable=SC2086
    ROWLEASE_CHAOS_LONG=1 go test -count=1 -timeout 4h -parallel 3 -v -run '^TestChaos$' ${GOTEST_FLAGS:-} ./harness/chaos 2>&1 \
        | tee "$log_file" | grep --line-buffered -E '^(--- |ok|FAIL|PASS)|chaos (summary|progress|kills)'
    rc=${PIPESTATUS[0]}
    # The bookkeeper killed at random points of its flow, with a model that
    # answers otherwise each time; then workers killed around runs that
    # wait for a person's answer and while answers are applied
    # (ROWLEASE_CHAOS_STEP_KILLS per dialect, each).
    # shellcheck disable=SC2086
    ROWLEASE_CHAOS_LONG=1 go test -count=1 -timeout 2h -parallel 3 -v -run '^(TestKill9NondeterministicModel|TestKill9Wait)$' ${GOTEST_FLAGS:-} ./examples/bookkeeper 2>&1 \
        | tee -a "$log_file" | grep --line-buffered -E '^(--- |ok|FAIL|PASS)|chaos (summary|progress|kills)'
    rc2=${PIPESTATUS[0]}
    ((rc == 0)) && rc=$rc2
    set -e
    if ((rc != 0)); then
        grep -vE 'round [0-9]+:' "$log_file" | tail -n 60
    fi
    echo
    grep -hE 'chaos (summary|kills)' "$log_file" | sed -E 's/^ *[a-z_]+\.go:[0-9]+: //' || true
    exit "$rc"
elif [[ -n ${ROWLEASE_REPORT:-} ]]; then
    mkdir -p "$ROWLEASE_REPORT"
    out=$(cd "$ROWLEASE_REPORT" && pwd)
    t0=$SECONDS
    # shellcheck disable=SC2086
    (cd tools/benchreport && go run . -out "$out" ${BENCHREPORT_FLAGS:-})
    log "bench report written to $out in $((SECONDS - t0))s"
elif [[ -n ${ROWLEASE_BENCH:-} ]]; then
    # shellcheck disable=SC2086
    each_module go test -run '^$' -bench . -benchmem -count=1 ${GOTEST_FLAGS:-}
else
    each_module go vet
    run_staticcheck
    # -v so the log shows which dialect each case ran on; the full log is
    # printed only for a failure, a summary per dialect always.
    log_file="$TMP/go-test.log"
    set +e
    # shellcheck disable=SC2086
    each_module go test -race -count=1 -timeout 40m -v ${GOTEST_FLAGS:-} >"$log_file" 2>&1
    rc=$?
    set -e
    if ((rc != 0)); then
        cat "$log_file"
    fi
    for d in sqlite mysql postgres; do
        pass=$(grep -cE -- "--- PASS: [^ ]*/$d( |/)" "$log_file" || true)
        skip=$(grep -cE -- "--- SKIP: [^ ]*/$d( |/)" "$log_file" || true)
        fail=$(grep -cE -- "--- FAIL: [^ ]*/$d( |/)" "$log_file" || true)
        log "dialect $d: $pass cases passed, $fail failed, $skip skipped"
        if [[ -n ${ROWLEASE_REQUIRE_ALL:-} ]] && ((skip > 0)); then
            grep -E -- "--- SKIP: [^ ]*/$d( |/)" "$log_file" | head -5
            log "a dialect skipped while every server was running"
            rc=1
        fi
    done
    grep -E '^(ok|FAIL|---|\?) ' "$log_file" | grep -v -- '^--- PASS' || true
    # The tests sized by time or with wide deadlines say how long they took:
    # print that, and the slowest cases, so a run on a slow machine shows
    # where its time went.
    # And the figures the tests measure: waiting requests' cost per
    # heartbeat interval, and where the kill test of waits landed its kills.
    grep -hE '(ops in [0-9]+ rounds|runs in flight:|waiting requests, [0-9]+ heartbeat intervals:|chaos summary wait )' "$log_file" \
        | sed -E 's/^ +//' | cut -c1-400 || true
    log "slowest cases:"
    grep -hE -- '^ *--- (PASS|FAIL): [^ ]+ \([0-9.]+s\)' "$log_file" \
        | sed -E 's/^ *--- (PASS|FAIL): ([^ ]+) \(([0-9.]+)s\)/\3 \2 \1/' \
        | sort -rn | head -n 12 | awk '{printf "  %7.1fs %s %s\n", $1, $2, $3}' || true
    exit "$rc"
fi
