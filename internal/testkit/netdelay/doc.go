// Package netdelay is a TCP proxy on loopback that puts a network between
// a client and its database server: every chunk of bytes it reads, in
// either direction, is written on half the round-trip time later, as a
// link with that latency and no bandwidth limit would deliver it. Chunks
// in flight overlap (a second one read while the first waits is not held
// up behind it), and the order of each direction is kept.
//
// It is for measurements (tools/benchreport's network points): it adds no
// faults (package faults does), and it runs in the measuring process, so
// the CPU it spends is the client's. One goroutine writes every chunk of
// every connection when it falls due, sleeping with nanosleep(2) (the Go
// runtime's timers can wake a sub-millisecond sleep a millisecond late):
// a chunk waits a little longer than asked on a loaded machine, never
// less, so measure the round trip a caller actually gets (benchreport's
// ping does); and a write that blocks (a peer that does not read) holds
// up every connection, which a database's client and server never do for
// long.
//
// What it guarantees: bytes arrive as sent, in order, in each direction,
// no sooner than half the round-trip time after they were read. What it
// does not: a bandwidth limit, loss, reordering, or jitter of its own (the
// machine's load adds some); faults are package faults'. How it fails: a
// target that cannot be dialled closes the client's connection at once;
// a write that fails closes that connection both ways; Close ends every
// connection and joins every goroutine.
package netdelay
