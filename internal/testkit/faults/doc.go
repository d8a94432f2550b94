// Package faults injects faults between rowlease and its database server,
// for the tests that prove its guarantees under failure (harness/chaos):
//
//   - Proxy, a TCP proxy in front of MariaDB or PostgreSQL that cuts a
//     connection in the middle of a statement or of a COMMIT (so the client
//     sees an error while the server may have committed: the ambiguous
//     outcome), adds latency and jitter, blackholes all traffic for a while
//     (a partition) and heals, and resets every connection; on command or
//     at random (Inject);
//   - Server, the throwaway database server of the run, killed with SIGKILL
//     and started again on the same data (scripts/test.sh exports how).
//
// Every goroutine it starts is owned by a Proxy and joined by Close.
// It is test machinery: nothing outside tests imports it.
package faults
