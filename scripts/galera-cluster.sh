# shellcheck shell=bash
# A throwaway 3-node MariaDB Galera cluster on loopback, for scripts that
# source this file (scripts/galera.sh, scripts/failover.sh). Define log()
# first. Never touches system services: the nodes run from the directory
# given to galera_start, on free loopback ports.
#
#   galera_install     as root with apt-get, installs what is missing
#                      (mariadb-server, galera-4, rsync, gcc)
#   galera_start DIR   starts the cluster in DIR (which must exist) and
#                      exports ROWLEASE_GALERA_DSNS (three go-sql-driver
#                      DSNs, comma-separated) and ROWLEASE_GALERA_DIR;
#                      writes DIR/start-node.sh I, which starts node I
#                      (1-3) again on its data and waits until it is
#                      Synced (a node killed with SIGKILL rejoins by IST)
#   galera_stop RC     stops the nodes (their logs' tails first if RC≠0)
#
# No state transfer tool is needed to start: node 1 is bootstrapped,
# given the test user, and shut down cleanly; its data directory (with
# grastate.dat) is copied to nodes 2 and 3, so all three start from the
# same position and join without SST.

galera_find_mariadbd() {
    command -v mariadbd || command -v mysqld \
        || { [[ -x /usr/sbin/mariadbd ]] && echo /usr/sbin/mariadbd; } || true
}
galera_find_lib() {
    local p
    for p in /usr/lib/galera/libgalera_smm.so /usr/lib/libgalera_smm.so /usr/lib64/galera-4/libgalera_smm.so; do
        [[ -e $p ]] && { echo "$p"; return; }
    done
}

galera_install() {
    local pkgs=() policy rc
    [[ -n $(galera_find_mariadbd) ]] || pkgs+=(mariadb-server)
    [[ -n $(galera_find_lib) ]] || pkgs+=(galera-4)
    command -v rsync >/dev/null || pkgs+=(rsync)   # the state transfer (a joiner's catch-up) runs it
    command -v gcc >/dev/null || pkgs+=(gcc libc6-dev)
    ((${#pkgs[@]})) || return 0
    if [[ $(id -u) -eq 0 ]] && command -v apt-get >/dev/null; then
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
}

galera_port_busy() { (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }
galera_free_port() {
    local p=$1
    while galera_port_busy "$p"; do p=$((p + 1)); done
    echo "$p"
}

# galera_node_cmd I: the command line of node I (without the extra options).
galera_node_cmd() {
    local i=$1 k=$(($1 - 1))
    local d=$GALERA_DIR
    printf '%q ' "$GALERA_BIN" --no-defaults "${GALERA_USER[@]}" --datadir="$d/n$i" \
        --socket="$d/n$i.sock" --pid-file="$d/n$i.pid" \
        --port="${GALERA_SQL[$k]}" --bind-address=127.0.0.1 --skip-name-resolve \
        --innodb-flush-log-at-trx-commit=2 --skip-log-bin --max-connections=500 \
        --innodb-lock-wait-timeout=10 --binlog-format=ROW \
        --default-storage-engine=InnoDB --innodb-autoinc-lock-mode=2 \
        --wsrep-on=ON --wsrep-provider="$GALERA_LIB" \
        --wsrep-cluster-name=rowlease --wsrep-node-name="n$i" \
        --wsrep-node-address="127.0.0.1:${GALERA_GC[$k]}" \
        --wsrep-cluster-address="gcomm://$GALERA_ADDRS" \
        --wsrep-provider-options="gmcast.listen_addr=tcp://127.0.0.1:${GALERA_GC[$k]};ist.recv_addr=127.0.0.1:${GALERA_IST[$k]};gcache.size=64M;evs.suspect_timeout=PT5S;evs.inactive_timeout=PT10S" \
        --wsrep-sst-method=rsync --wsrep-sst-receive-address="127.0.0.1:${GALERA_SST[$k]}" --wsrep-slave-threads=2
}

# galera_start_node I [EXTRA...]: start node I in the background; its pid
# in GALERA_LAST_PID. Disowned: a node killed on purpose is not reported.
galera_start_node() {
    local i=$1; shift
    eval "$(galera_node_cmd "$i")" '"$@"' '</dev/null >>"$GALERA_DIR/n$i.log" 2>&1 &'
    GALERA_LAST_PID=$!
    disown "$GALERA_LAST_PID" 2>/dev/null || true
}

# galera_wait_synced I: wait (max 60s) until node I answers and is Synced.
galera_wait_synced() {
    local i=$1 st
    for _ in $(seq 1 600); do
        st=$(mariadb --no-defaults -S "$GALERA_DIR/n$i.sock" -uroot -N -B \
            -e "SHOW STATUS LIKE 'wsrep_local_state_comment'" 2>/dev/null | cut -f2 || true)
        [[ $st == Synced ]] && return 0
        sleep 0.1
    done
    log "node $i did not sync within 60s:"; tail -n 30 "$GALERA_DIR/n$i.log" >&2
    return 1
}

galera_start() {
    GALERA_DIR=$1
    GALERA_BIN=$(galera_find_mariadbd)
    GALERA_LIB=$(galera_find_lib)
    if [[ -z $GALERA_BIN || -z $GALERA_LIB ]]; then
        log "mariadbd or libgalera_smm.so not found"
        return 1
    fi
    chmod 755 "$GALERA_DIR"
    # The rsync state transfer runs its daemon as the server's user and must
    # write into the joiner's data directory: as root, run the nodes as mysql.
    GALERA_USER=()
    if [[ $(id -u) -eq 0 ]]; then
        id -u mysql >/dev/null 2>&1 \
            || useradd --system --no-create-home --home-dir /nonexistent --shell /usr/sbin/nologin mysql
        GALERA_USER=(--user=mysql)
        chown mysql: "$GALERA_DIR"
    fi
    # Ports: SQL, group communication, IST, SST for each node.
    # Below the kernel's ephemeral range (32768-60999): a port an outgoing
    # connection holds there is "free" to connect to but cannot be bound.
    local p=24306 g=25567 i k
    GALERA_SQL=(); GALERA_GC=(); GALERA_IST=(); GALERA_SST=()
    for i in 1 2 3; do
        p=$(galera_free_port "$p"); GALERA_SQL+=("$p"); p=$((p + 1))
        g=$(galera_free_port "$g"); GALERA_GC+=("$g"); g=$((g + 1))
        g=$(galera_free_port "$g"); GALERA_IST+=("$g"); g=$((g + 1))
        g=$(galera_free_port "$g"); GALERA_SST+=("$g"); g=$((g + 1))
    done
    GALERA_ADDRS="127.0.0.1:${GALERA_GC[0]},127.0.0.1:${GALERA_GC[1]},127.0.0.1:${GALERA_GC[2]}"

    local t0=$SECONDS
    mkdir -p "$GALERA_DIR/n1"; [[ $(id -u) -eq 0 ]] && chown mysql: "$GALERA_DIR/n1"
    mariadb-install-db --no-defaults "${GALERA_USER[@]}" --datadir="$GALERA_DIR/n1" \
        --auth-root-authentication-method=normal --skip-test-db >"$GALERA_DIR/install.log" 2>&1 \
        || { log "mariadb-install-db failed:"; tail -n 20 "$GALERA_DIR/install.log" >&2; return 1; }
    # Bootstrap node 1 alone, add the test user, stop it cleanly: its
    # grastate.dat then records the cluster's state, which nodes 2 and 3 copy.
    galera_start_node 1 --wsrep-new-cluster
    local pid1=$GALERA_LAST_PID
    galera_wait_synced 1
    mariadb --no-defaults -S "$GALERA_DIR/n1.sock" -uroot <<'SQL'
CREATE USER 'rowlease'@'127.0.0.1' IDENTIFIED BY 'rowlease';
CREATE USER 'rowlease'@'localhost' IDENTIFIED BY 'rowlease';
GRANT ALL PRIVILEGES ON *.* TO 'rowlease'@'127.0.0.1', 'rowlease'@'localhost';
SQL
    mariadb-admin --no-defaults -S "$GALERA_DIR/n1.sock" -uroot shutdown
    for _ in $(seq 1 600); do kill -0 "$pid1" 2>/dev/null || break; sleep 0.1; done
    for i in 2 3; do cp -a "$GALERA_DIR/n1" "$GALERA_DIR/n$i"; done
    [[ $(id -u) -eq 0 ]] && chown -R mysql: "$GALERA_DIR"
    sed -i 's/^safe_to_bootstrap:.*/safe_to_bootstrap: 1/' "$GALERA_DIR/n1/grastate.dat"
    galera_start_node 1 --wsrep-new-cluster
    galera_wait_synced 1
    galera_start_node 2
    galera_wait_synced 2
    galera_start_node 3
    galera_wait_synced 3
    local size
    size=$(mariadb --no-defaults -S "$GALERA_DIR/n1.sock" -uroot -N -B -e "SHOW STATUS LIKE 'wsrep_cluster_size'" | cut -f2)
    log "3-node Galera cluster up in $((SECONDS - t0))s (size $size; SQL ports ${GALERA_SQL[*]})"
    [[ $size == 3 ]] || { log "cluster size $size, want 3"; return 1; }

    # start-node.sh I: start node I again on its data (it rejoins the
    # others, catching up by IST) and wait until it is Synced.
    {
        echo '#!/usr/bin/env bash'
        echo 'set -euo pipefail'
        echo 'i=$1'
        for i in 1 2 3; do
            echo "cmd$i=($(galera_node_cmd "$i"))"
        done
        echo 'eval "cmd=(\"\${cmd$i[@]}\")"'
        echo "dir=$(printf '%q' "$GALERA_DIR")"
        # shellcheck disable=SC2016
        echo 'rm -f "$dir/n$i.sock" "$dir/n$i.pid"
setsid "${cmd[@]}" </dev/null >>"$dir/n$i.log" 2>&1 &
for _ in $(seq 1 1200); do
    st=$(mariadb --no-defaults -S "$dir/n$i.sock" -uroot -N -B -e "SHOW STATUS LIKE '"'"'wsrep_local_state_comment'"'"'" 2>/dev/null | cut -f2 || true)
    [[ $st == Synced ]] && exit 0
    sleep 0.05
done
echo "start-node: node $i did not sync" >&2
tail -n 30 "$dir/n$i.log" >&2
exit 1'
    } >"$GALERA_DIR/start-node.sh"
    chmod 755 "$GALERA_DIR/start-node.sh"

    local dsns=()
    for k in 0 1 2; do dsns+=("rowlease:rowlease@tcp(127.0.0.1:${GALERA_SQL[$k]})/"); done
    ROWLEASE_GALERA_DSNS=$(IFS=,; echo "${dsns[*]}")
    export ROWLEASE_GALERA_DSNS
    export ROWLEASE_GALERA_DIR=$GALERA_DIR
}

galera_stop() {
    local rc=${1:-0} i pid
    [[ -n ${GALERA_DIR:-} && -d $GALERA_DIR ]] || return 0
    if ((rc != 0)); then
        for i in 1 2 3; do
            [[ -f $GALERA_DIR/n$i.log ]] && { log "node $i log (tail):"; tail -n 25 "$GALERA_DIR/n$i.log" >&2; }
        done
    fi
    local pids=()
    for i in 3 2 1; do
        [[ -s $GALERA_DIR/n$i.pid ]] && pids+=("$(cat "$GALERA_DIR/n$i.pid")")
        [[ -S $GALERA_DIR/n$i.sock ]] && mariadb-admin --no-defaults -S "$GALERA_DIR/n$i.sock" -uroot shutdown >/dev/null 2>&1 || true
    done
    for pid in "${pids[@]}"; do
        for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
        kill -KILL "$pid" 2>/dev/null || true
    done
}
