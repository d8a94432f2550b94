// Package failover proves rowlease's guarantees when the database itself
// fails over (make test-failover, scripts/failover.sh): a PostgreSQL
// primary killed with SIGKILL and a standby promoted, a Galera node killed
// or cut off from the others and rejoining.
//
// # PostgreSQL
//
// PGCluster runs a throwaway primary and two streaming standbys on
// loopback (initdb, pg_basebackup), synchronous (synchronous_commit=on,
// synchronous_standby_names='ANY 1 (n0, n1, n2)': any one of the two
// other nodes, so a promoted standby still has one) or asynchronous.
// Clients reach the primary through one multi-host DSN with
// target_session_attrs=read-write (pgx), as they would behind Patroni or
// a managed service's endpoint: connections to a standby are refused by
// the driver, which tries the next host.
//
// A failover (KillPrimary, then Promote) kills the primary's postmaster
// and backends with SIGKILL, promotes the standby that received the most
// WAL (pg_ctl promote; in sync mode that one has every acknowledged
// commit, and the other can follow its timeline), re-points the other
// standby at it (primary_conninfo and a reload: PostgreSQL 13+ restarts
// the WAL receiver, which follows the new timeline; a restart if that
// does not stream within 5s, a fresh clone if it cannot follow), waits
// until a commit is answered on the new primary (in sync mode: a standby
// confirms it), and re-clones the killed node as a standby with
// pg_basebackup, waiting until both standbys have caught up, so that
// every failover starts from three nodes in step. Failover records how
// long each step took from the kill. The replication stream reaches each
// standby through a proxy that delays it (package faults), as a standby
// in another zone; KillPrimary with a lag cuts that stream for a while
// before the kill, so that in asynchronous mode the primary dies with a
// tail of acknowledged commits no standby has (TestPGClusterFailover
// checks that this loses commits in async mode and none in sync mode).
//
// The tests (build tag failover) run the crash matrix of package chaos —
// worker processes sending requests through the whole request flow, an
// in-database tool and an external one, every request resent until it is
// answered — and fail the primary over at random instants (seeded, the
// seed printed) while they run. Afterwards every answered request is sent
// once more, and the database and the external receiver are checked; in
// asynchronous mode what the workers were told had committed (the grants
// their agents ran under, the effect keys their external tool acted
// under, the effects their tool posted, the replies they got) is looked
// for on the promoted server, and the losses are counted per kind.
//
// # Galera
//
// scripts/galera.sh's cluster (scripts/galera-cluster.sh) is reused:
// GaleraNodes kills a node with SIGKILL and starts it again (it rejoins
// with IST), or cuts it off from the others with
// gmcast.isolate and lets it back, while clients spread over the nodes
// run the crash matrix.
//
// Nothing here runs under make test: the tests need servers the script
// starts, and skip without them.
package failover
