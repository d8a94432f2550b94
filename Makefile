# `make test` needs no setup beyond Go: scripts/test.sh installs (as root, via
# apt) and starts throwaway MariaDB/PostgreSQL servers for the run.

# The Go tarball install is often not on PATH.
export PATH := $(PATH):/usr/local/go/bin

# The workspace (go.work): at the root, ./... matches only the core module's
# packages; the example, the harnesses (harness/chaos, harness/galera),
# contrib/* and tools/* are modules of their own: NESTED are their patterns.
# The core runs with GOWORK=off, at the versions its own go.mod selects (in
# the workspace a nested module's newer requirement would win).
NESTED = $(shell go list -m -f '{{if ne .Dir "$(CURDIR)"}}{{.Dir}}/...{{end}}')

.PHONY: test test-galera test-failover test-sqlite test-newest-go bench bench-report servers screenshot chaos fmt vet lint generate

test:
	bash scripts/test.sh

# The Galera suite: a throwaway 3-node MariaDB Galera cluster on loopback
# (about 20s to start), the lease conformance suite and the three-level flow
# with clients spread over the nodes per connection and per statement,
# fenced writes against takeovers on other nodes. About a minute.
test-galera:
	bash scripts/galera.sh

# When the database itself fails over (scripts/failover.sh,
# harness/failover): a PostgreSQL primary killed with SIGKILL at random
# instants of the request flow and a standby promoted, in synchronous and
# asynchronous replication; Galera nodes killed and cut off while clients
# use them. Starts and stops its own servers. FAILOVER_KILLS kills per
# PostgreSQL mode and Galera faults (5 here, a few minutes; the long run is
# FAILOVER_KILLS=30); FAILOVER_SEED replays a run.
FAILOVER_KILLS ?= 5
test-failover:
	FAILOVER_KILLS=$(FAILOVER_KILLS) bash scripts/failover.sh

# Unit + SQLite tests only: MySQL/Postgres tests skip without their DSNs.
test-sqlite:
	GOWORK=off go vet ./... && go vet $(NESTED) \
		&& env -u ROWLEASE_MYSQL_DSN -u ROWLEASE_POSTGRES_DSN GOWORK=off go test -race ./... \
		&& env -u ROWLEASE_MYSQL_DSN -u ROWLEASE_POSTGRES_DSN go test -race $(NESTED)

# The core module on the newest Go release as well: go.mod's go directive
# names the oldest supported one, the Go that make test runs on. The go command
# fetches the NEWEST_GO toolchain like a module on first use (GOTOOLCHAIN):
# vet, then the tests that need no server (unit and SQLite), which build
# every package and cover the three levels end to end; without -race,
# which make test already ran, so that it takes a few minutes.
NEWEST_GO ?= go1.27.3
test-newest-go:
	GOTOOLCHAIN=$(NEWEST_GO) go version
	GOTOOLCHAIN=$(NEWEST_GO) GOWORK=off go vet ./... \
		&& env -u ROWLEASE_MYSQL_DSN -u ROWLEASE_POSTGRES_DSN GOTOOLCHAIN=$(NEWEST_GO) GOWORK=off go test ./...

bench:
	ROWLEASE_BENCH=1 bash scripts/test.sh

# The comparison benchmarks on throwaway servers, drawn as SVG charts in
# docs/bench (tools/benchreport, a module of its own: the plotting library
# stays out of rowlease's dependencies), the end-to-end designs also with
# a network (a delaying proxy: RTT 0.2, 0.5 and 1 ms). A few minutes;
# BENCHREPORT_FLAGS="-only network" measures the network points alone.
bench-report:
	ROWLEASE_REPORT=$(CURDIR)/docs/bench bash scripts/test.sh

# Throwaway servers for working by hand: `source .servers.env` in another
# shell, then go test as usual. Interrupt to stop them.
servers:
	ROWLEASE_SERVE=$(CURDIR)/.servers.env bash scripts/test.sh

# Rewrite examples/bookkeeper/docs/chat.png: the bookkeeper's chat page at the
# end of its browser test (needs chromium and a Chinese font, e.g.
# fonts-wqy-microhei).
screenshot:
	go test -count=1 -v -run 'TestChatPage/sqlite' ./examples/bookkeeper/internal/web -update-screenshot

fmt:
	gofmt -l -w .

# Write again the files of package schema generated from its golang-migrate
# files (schema/migrations/*/migrate): the goose migrations and
# schema/sql/*.sql. TestGeneratedFilesAreCurrent fails while they are stale.
generate:
	GOWORK=off go generate ./schema/...

vet:
	GOWORK=off go vet ./... && go vet $(NESTED)

# The linter make test runs (installed at the version scripts/test.sh pins).
lint:
	GOWORK=off go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 ./... \
		&& go run honnef.co/go/tools/cmd/staticcheck@v0.8.2 $(NESTED)

# The long fault-injection run (harness/chaos): lease histories checked for
# linearizability under cut connections, latency, partitions and server
# restarts; killed and paused holders of the whole request flow. Starts its
# own servers like make test. Size it with CHAOS_OPS and CHAOS_KILLS. Then
# the bookkeeper killed at random points of its flow with a model that
# answers otherwise each time, and worker processes killed around runs that
# wait for a person's answer (TestKill9Wait): CHAOS_STEP_KILLS kills per
# dialect, for each.
CHAOS_OPS ?= 1000000
CHAOS_KILLS ?= 1000
CHAOS_STEP_KILLS ?= 100
chaos:
	ROWLEASE_CHAOS=1 ROWLEASE_CHAOS_OPS=$(CHAOS_OPS) ROWLEASE_CHAOS_KILLS=$(CHAOS_KILLS) ROWLEASE_CHAOS_STEP_KILLS=$(CHAOS_STEP_KILLS) bash scripts/test.sh
