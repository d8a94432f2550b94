// Package rowleasetest helps you test code built on rowlease — above all
// an agent function — in a unit test of a few lines, on a real database:
// a throwaway SQLite file with the lock tables, a clock the test can move
// forward, and a way to run an agent under a real *request.Run.
//
//	func TestLunchIsBookedOnce(t *testing.T) {
//		db := rowleasetest.NewDB(t) // SQLite in t.TempDir(), schema applied, closed at cleanup
//		_, err := db.Exec("CREATE TABLE ledger (request_id TEXT, amount INTEGER)")
//		...
//		res := rowleasetest.Handle(t, myagent.Agent, // a request.Agent
//			rowleasetest.WithDB(db),
//			rowleasetest.WithTools(myagent.Tools(deps)), // or WithTool("book", fn)
//			rowleasetest.WithMessage(request.Message{Content: "lunch 35"}))
//		if res.Err != nil { t.Fatal(res.Err) }
//		// res.Outcome.Reply; count the ledger rows in db (or res.DB);
//		// res.Runner.Handle(ctx, res.Message, agent) replays.
//	}
//
// It is for tests: import it only from _test.go files. It links the
// pure-Go SQLite driver modernc.org/sqlite, which the library's other
// packages do not, and its functions take a TB, which *testing.T
// satisfies.
//
// # What it gives
//
//   - NewDB: a new SQLite database file in t.TempDir() (WAL, a 10 s busy
//     timeout, _txlock=immediate: see schema.SQLiteDSN) with schema.Apply done,
//     closed at cleanup. Every call is a database of its own, so parallel
//     tests share nothing.
//   - Clock: a lease.Clock that a test moves forward with Advance. It moves
//     the local trust deadlines and the heartbeat's view of them — advanced
//     past a deadline, the run loses its leases and Handle returns
//     request.ErrTakenOver — but not the database clock, which alone decides
//     when a lease expires, nor the timers, which wait real time (details
//     at Clock).
//   - Run: the whole flow of request.Runner.Handle — session and request
//     locks, the heartbeat, tool executions through toolexec, the final
//     marks — around your agent, with the tools given by WithTools,
//     WithTool and WithExternalTool. It returns the Outcome, Handle's error,
//     the database and the runner. NewRunner is the same set-up without
//     the message, for a test that sends its own.
//
// Nothing is mocked: the statements, transactions, fences and heartbeat
// are the ones your service runs, on SQLite.
//
// # What it does not do
//
//   - It does not test your code on MySQL or PostgreSQL: NewDB is SQLite
//     only. WithDB takes a database of any dialect with the lock tables, if
//     you bring one.
//   - It does not fake time in the database, nor speed up the heartbeat:
//     a test of expiry or takeover waits for a real (short) TTL. Keep such
//     tests to waiting on signals — a done context, a returned Handle —
//     not to fixed sleeps.
//   - It does not check results: rowleasetest.Handle returns what Runner.Handle returned, and the
//     test asserts.
//
// # Failure handling
//
// A set-up that fails — the database cannot be opened or the schema
// applied, a bad option (nil, a tool registered twice), a Config that
// request.New refuses — fails the test with t.Fatalf and the cause. The
// agent's errors and Handle's (request.ErrAgentFailed, ErrTakenOver,
// lease.ErrInvalid for a bad message, ...) are returned in
// Result.Err and fail nothing by themselves. The runner logs through
// t.Logf, so use it only while the test runs (as testing requires).
package rowleasetest
