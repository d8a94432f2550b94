package httpapi_test

import (
	"bytes"
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/httpapi"
	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/request"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
	"github.com/rowlease/rowlease/toolexec"
)

// dyingServer stands between a client and a real database server and
// plays a server process that dies, as a primary killed with SIGKILL:
// the kernel closes its sockets with a FIN, so a client waiting for an
// answer reads an end of file (not a reset, which internal/testkit/outage
// gives). New connections still reach the server, as they would reach the
// standby promoted in its place.
type dyingServer struct {
	target string
	ln     net.Listener

	mu    sync.Mutex
	links map[*link]struct{}
	// atCommit, when set, makes the next COMMIT a client sends the
	// instant the server dies: forwarded first (the server commits, the
	// answer never comes) or not.
	atCommit, forwardCommit bool
	wg                      sync.WaitGroup
}

type link struct {
	client, server net.Conn
	once           sync.Once
}

// close closes both sides without a reset.
func (l *link) close() {
	l.once.Do(func() {
		l.client.Close()
		l.server.Close()
	})
}

func startDying(t *testing.T, target string) *dyingServer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	s := &dyingServer{target: target, ln: ln, links: map[*link]struct{}{}}
	s.wg.Go(func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.wg.Go(func() { s.serve(c) })
		}
	})
	t.Cleanup(func() {
		ln.Close()
		s.die()
		s.wg.Wait()
	})
	return s
}

func (s *dyingServer) serve(client net.Conn) {
	server, err := net.DialTimeout("tcp", s.target, 10*time.Second)
	if err != nil {
		client.Close()
		return
	}
	l := &link{client: client, server: server}
	s.mu.Lock()
	s.links[l] = struct{}{}
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		delete(s.links, l)
		s.mu.Unlock()
		l.close()
	}()
	var wg sync.WaitGroup
	wg.Go(func() {
		defer l.close()
		_, _ = io.Copy(client, server)
	})
	buf := make([]byte, 32<<10)
	for {
		n, err := client.Read(buf)
		if n > 0 {
			chunk := buf[:n]
			s.mu.Lock()
			die := s.atCommit && bytes.Contains(bytes.ToLower(chunk), []byte("commit"))
			forward := s.forwardCommit
			if die {
				s.atCommit = false
			}
			s.mu.Unlock()
			if die {
				if forward {
					// The client's side first, so that the server's
					// answer to the COMMIT cannot reach it: a server
					// that dies after committing answers nobody.
					client.Close()
					_, _ = server.Write(chunk)
				}
				break
			}
			if _, err := server.Write(chunk); err != nil {
				break
			}
		}
		if err != nil {
			break
		}
	}
	l.close()
	wg.Wait()
}

// die closes every open connection, both sides, with a FIN.
func (s *dyingServer) die() {
	s.mu.Lock()
	ls := make([]*link, 0, len(s.links))
	for l := range s.links {
		ls = append(ls, l)
	}
	s.mu.Unlock()
	for _, l := range ls {
		l.close()
	}
}

// dieAtCommit arms the death of the server at the next COMMIT.
func (s *dyingServer) dieAtCommit(forward bool) {
	s.mu.Lock()
	s.atCommit, s.forwardCommit = true, forward
	s.mu.Unlock()
}

// openDying opens a fresh test database of dialect d (MySQL or
// PostgreSQL) through a dyingServer.
func openDying(t *testing.T, d lease.Dialect) (*sqlx.DB, *dyingServer) {
	t.Helper()
	var s *dyingServer
	db := testdb.OpenWith(t, d, func(driver, dsn string) (*sql.DB, error) {
		if d == lease.MySQL {
			cfg, err := mysql.ParseDSN(dsn)
			if err != nil {
				return nil, err
			}
			s = startDying(t, cfg.Addr)
			cfg.Addr = s.ln.Addr().String()
			return sql.Open(driver, cfg.FormatDSN())
		}
		u, err := url.Parse(dsn)
		if err != nil {
			return nil, err
		}
		s = startDying(t, u.Host)
		u.Host = s.ln.Addr().String()
		cfg, err := pgx.ParseConfig(u.String())
		if err != nil {
			return nil, err
		}
		// pgx pings a pooled connection before reusing it once it has
		// been idle for a second (its default), so that a connection the
		// server dropped meanwhile is discarded, not handed to a
		// statement. Here the server dies a moment before the flow's next
		// statement: ping every time, as the default does for any
		// connection idle that long. (The heartbeat renews on a connection
		// of its own, so no renewal finds the dead ones first.)
		return stdlib.OpenDB(*cfg, stdlib.OptionShouldPing(func(context.Context, stdlib.ShouldPingParams) bool { return true })), nil
	})
	return db, s
}

// chain describes err and everything it wraps, with their types, for the
// test's log: what a driver really returns.
func chain(err error) string {
	var parts []string
	var walk func(error)
	walk = func(e error) {
		for e != nil {
			parts = append(parts, fmt.Sprintf("%T(%q)", e, e.Error()))
			switch u := e.(type) {
			case interface{ Unwrap() []error }:
				for _, x := range u.Unwrap() {
					walk(x)
				}
				return
			case interface{ Unwrap() error }:
				e = u.Unwrap()
			default:
				return
			}
		}
	}
	walk(err)
	return strings.Join(parts, " → ")
}

func sleepSQL(d lease.Dialect) (sleep, pid string) {
	if d == lease.Postgres {
		return "SELECT pg_sleep(20)", "SELECT pg_backend_pid()"
	}
	return "SELECT SLEEP(20)", "SELECT CONNECTION_ID()"
}

// endWhileRunning runs a 20-second sleep on a connection of db, calls
// end with the connection's server process id once admin sees the sleep
// running, and returns the error the sleep ends with (what names how it
// was ended, for a sleep that does not end).
func endWhileRunning(t *testing.T, db *sqlx.DB, admin *sqlx.DB, d lease.Dialect, what string, end func(id int64)) error {
	t.Helper()
	ctx := context.Background()
	sleep, pidQ := sleepSQL(d)
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	var id int64
	require.NoError(t, conn.QueryRowContext(ctx, pidQ).Scan(&id))
	done := make(chan error, 1)
	go func() {
		_, err := conn.ExecContext(ctx, sleep)
		done <- err
	}()
	waitRunning(t, admin, d, id)
	end(id)
	select {
	case err = <-done:
	case <-time.After(20 * time.Second):
		t.Fatalf("the statement did not fail when %s", what)
	}
	return err
}

// assertUnavailable checks that err is answered 503 with Retry-After.
func assertUnavailable(t *testing.T, what string, err error) {
	t.Helper()
	require.Error(t, err, what)
	t.Logf("%s: %s", what, chain(err))
	assert.True(t, httpapi.IsUnavailable(err), "%s: %v", what, err)
	p := httpapi.ProblemFor(err)
	assert.Equal(t, http.StatusServiceUnavailable, p.Status, "%s: %v", what, err)
	assert.Equal(t, httpapi.ProblemBase+httpapi.TypeUnavailable, p.Type, "%s: %v", what, err)
	assert.Equal(t, httpapi.DefaultRetryAfter, p.RetryAfter, what)
}

// A server process that dies (a primary killed in a failover) while a
// client waits for it: a statement running, a COMMIT sent (forwarded:
// the server commits and the answer never comes; or not), a statement of
// a transaction begun before. Every error the client gets is answered
// 503: the outcome of the cut COMMIT is unknown to the client, and a
// resend with the same client request id is what finds it out.
func TestIsUnavailableServerDied(t *testing.T) {
	for _, d := range []lease.Dialect{lease.MySQL, lease.Postgres} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db, s := openDying(t, d)
			admin := testdb.Open(t, d) // another database on the same server: only for the process list
			_, err := db.ExecContext(ctx, "CREATE TABLE died (n INTEGER NOT NULL)")
			require.NoError(t, err)

			t.Run("a statement running", func(t *testing.T) {
				err := endWhileRunning(t, db, admin, d, "the server died", func(int64) { s.die() })
				assertUnavailable(t, "a statement running", err)
			})

			for _, forward := range []bool{true, false} {
				name := "a COMMIT the server received"
				if !forward {
					name = "a COMMIT the server never received"
				}
				t.Run(name, func(t *testing.T) {
					marker := 1
					if !forward {
						marker = 2
					}
					tx, err := db.BeginTx(ctx, nil)
					require.NoError(t, err)
					_, err = tx.ExecContext(ctx, d.Rebind("INSERT INTO died (n) VALUES (?)"), marker)
					require.NoError(t, err)
					s.dieAtCommit(forward)
					assertUnavailable(t, name, tx.Commit())
					// What the client cannot tell: did it commit?
					var n int
					q := d.Rebind("SELECT COUNT(*) FROM died WHERE n = ?")
					if forward {
						require.Eventually(t, func() bool {
							return db.QueryRowContext(ctx, q, marker).Scan(&n) == nil && n == 1
						}, 20*time.Second, 20*time.Millisecond, "the server committed what it received")
					} else {
						require.NoError(t, db.QueryRowContext(ctx, q, marker).Scan(&n))
						assert.Equal(t, 0, n)
					}
				})
			}

			t.Run("a statement of a transaction begun before", func(t *testing.T) {
				tx, err := db.BeginTx(ctx, nil)
				require.NoError(t, err)
				defer func() { _ = tx.Rollback() }()
				_, err = tx.ExecContext(ctx, "SELECT 1")
				require.NoError(t, err)
				s.die()
				_, err = tx.ExecContext(ctx, d.Rebind("INSERT INTO died (n) VALUES (?)"), 3)
				assertUnavailable(t, "a statement of a transaction begun before", err)
				assertUnavailable(t, "its COMMIT", tx.Commit())
			})
		})
	}
}

// A backend ended by the server — pg_terminate_backend on PostgreSQL (what
// a server shutting down does to every backend, 57P01), KILL CONNECTION on
// MySQL/MariaDB — while it runs a statement, and while it sits idle in a
// transaction.
func TestIsUnavailableBackendTerminated(t *testing.T) {
	for _, d := range []lease.Dialect{lease.MySQL, lease.Postgres} {
		t.Run(d.String(), func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			db := testdb.Open(t, d)
			admin := testdb.Open(t, d)
			_, pidQ := sleepSQL(d)
			kill := func(id int64) {
				t.Helper()
				if d == lease.Postgres {
					var ok bool
					require.NoError(t, admin.QueryRowContext(ctx, "SELECT pg_terminate_backend($1)", id).Scan(&ok))
					require.True(t, ok)
					return
				}
				_, err := admin.ExecContext(ctx, fmt.Sprintf("KILL CONNECTION %d", id))
				require.NoError(t, err)
			}

			t.Run("while a statement runs", func(t *testing.T) {
				err := endWhileRunning(t, db, admin, d, "its backend ended", kill)
				assertUnavailable(t, "a statement whose backend ended", err)
			})

			t.Run("idle in a transaction", func(t *testing.T) {
				tx, err := db.BeginTx(ctx, nil)
				require.NoError(t, err)
				defer func() { _ = tx.Rollback() }()
				var id int64
				require.NoError(t, tx.QueryRowContext(ctx, pidQ).Scan(&id))
				kill(id)
				// Wait until the backend is gone, then use the transaction.
				q := "SELECT COUNT(*) FROM information_schema.processlist WHERE id = ?"
				if d == lease.Postgres {
					q = "SELECT COUNT(*) FROM pg_stat_activity WHERE pid = $1"
				}
				require.Eventually(t, func() bool {
					var n int
					return admin.QueryRowContext(ctx, q, id).Scan(&n) == nil && n == 0
				}, 20*time.Second, 10*time.Millisecond)
				_, err = tx.ExecContext(ctx, "SELECT 1")
				assertUnavailable(t, "a statement of a transaction whose backend ended", err)
			})
		})
	}
}

// A message in flight when the server dies, as in a failover: while its
// tool's statement runs, or while its tool's transaction is open between
// two statements. The client is answered 503, not 500, and the same
// message resent is answered once the server is back (new connections
// reach it, as they would reach a promoted standby); the tool's write
// commits once. A server that dies between the flow's transactions is not
// seen at all: the drivers discard the dead pooled connections before
// using them, and the message is answered.
func TestIsUnavailableMessageWhenServerDied(t *testing.T) {
	for _, d := range []lease.Dialect{lease.MySQL, lease.Postgres} {
		for _, when := range []dieWhen{inStatement, inToolTx, betweenTxs} {
			t.Run(d.String()+"/"+string(when), func(t *testing.T) {
				t.Parallel()
				messageWhenServerDied(t, d, when)
			})
		}
	}
}

type dieWhen string

const (
	inStatement dieWhen = "while the tool's statement runs"
	inToolTx    dieWhen = "in the tool's transaction between statements"
	betweenTxs  dieWhen = "between the flow's transactions"
)

func messageWhenServerDied(t *testing.T, d lease.Dialect, when dieWhen) {
	ctx := context.Background()
	db, s := openDying(t, d)
	admin := testdb.Open(t, d)
	require.NoError(t, schema.Apply(ctx, db, d))
	_, err := db.ExecContext(ctx, "CREATE TABLE posted (n INTEGER NOT NULL)")
	require.NoError(t, err)
	sleep, pidQ := sleepSQL(d)
	// The first run signals where the server is to die (with its
	// connection id when a statement is to be running), and waits.
	pid := make(chan int64, 1)
	died := make(chan struct{})
	var first sync.Once
	here := func(w dieWhen, id int64, stmt func() error) (err error) {
		if when != w {
			return nil
		}
		first.Do(func() {
			pid <- id
			if stmt != nil {
				err = stmt()
				return
			}
			<-died
		})
		return err
	}
	tools := toolexec.NewRegistry()
	require.NoError(t, tools.Register("post", func(ctx context.Context, x toolexec.Exec) (json.RawMessage, error) {
		if _, err := x.Tx.ExecContext(ctx, "INSERT INTO posted (n) VALUES (1)"); err != nil {
			return nil, err
		}
		var id int64
		if err := x.Tx.QueryRowContext(ctx, pidQ).Scan(&id); err != nil {
			return nil, err
		}
		if err := here(inStatement, id, func() error {
			_, err := x.Tx.ExecContext(ctx, sleep)
			return err
		}); err != nil {
			return nil, err
		}
		if err := here(inToolTx, id, nil); err != nil {
			return nil, err
		}
		if _, err := x.Tx.ExecContext(ctx, d.Rebind("INSERT INTO posted (n) VALUES (?)"), 2); err != nil {
			return nil, err
		}
		return json.RawMessage(`{"ok":true}`), nil
	}))
	r, err := request.New(request.Config{DB: db, Dialect: d, TTL: 20 * time.Second, ReleaseTimeout: 3 * time.Second,
		Tools: tools, Session: session.Config{AutoCreate: true}})
	require.NoError(t, err)
	t.Cleanup(func() { _ = r.Close(context.Background()) })
	agent := func(ctx context.Context, run *request.Run) (request.Answer, error) {
		if err := here(betweenTxs, 0, nil); err != nil {
			return request.Answer{}, err
		}
		if _, err := run.CallTool(ctx, "post", json.RawMessage(`{}`)); err != nil {
			return request.Answer{}, err
		}
		return request.Answer{Reply: "posted"}, nil
	}
	msg := request.Message{SessionKey: "s", ClientRequestID: "m-1", Content: "post"}
	done := make(chan error, 1)
	go func() {
		_, err := r.Handle(ctx, msg, agent)
		done <- err
	}()
	select {
	case id := <-pid:
		if when == inStatement {
			// The statement signals before it is sent: wait until it runs.
			waitRunning(t, admin, d, id)
		}
	case err := <-done:
		t.Fatalf("the message ended before the server was to die: %v", err)
	}
	s.die()
	close(died)
	select {
	case err = <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the message did not end when the server died")
	}
	if when == betweenTxs {
		require.NoError(t, err, "a server gone between the flow's transactions")
	} else {
		assertUnavailable(t, "a message in flight when the server died", err)
	}

	// The resend, once its run's lease is given back or expired.
	var out request.Outcome
	require.Eventually(t, func() bool {
		out, err = r.Handle(ctx, msg, agent)
		return !errors.Is(err, request.ErrInFlight) && !errors.As(err, new(*toolexec.BusyError))
	}, 60*time.Second, 100*time.Millisecond)
	require.NoError(t, err)
	assert.Equal(t, "posted", out.Reply)
	var n int
	require.NoError(t, db.QueryRowContext(ctx, "SELECT COUNT(*) FROM posted").Scan(&n))
	assert.Equal(t, 2, n, "the tool's writes committed once")
}

// A PostgreSQL server that takes no writes, as a standby does (here a
// session with default_transaction_read_only, which gives the same
// answers): a write on it (25006), and a multi-host DSN with
// target_session_attrs=read-write that finds no host taking writes — what
// a client sees between a primary's death and a standby's promotion.
func TestIsUnavailableReadOnlyServer(t *testing.T) {
	ctx := context.Background()
	db := testdb.Open(t, lease.Postgres)
	_, err := db.ExecContext(ctx, "CREATE TABLE ro (n INTEGER NOT NULL)")
	require.NoError(t, err)
	conn, err := db.Conn(ctx)
	require.NoError(t, err)
	defer conn.Close()
	_, err = conn.ExecContext(ctx, "SET default_transaction_read_only = on")
	require.NoError(t, err)
	_, err = conn.ExecContext(ctx, "INSERT INTO ro (n) VALUES (1)")
	assertUnavailable(t, "a write on a read-only server", err)

	u, err := url.Parse(os.Getenv(testdb.PostgresEnv))
	require.NoError(t, err)
	q := u.Query()
	q.Set("target_session_attrs", "read-write")
	q.Set("default_transaction_read_only", "on") // a run-time parameter, sent at connect
	u.RawQuery = q.Encode()
	ro, err := sql.Open("pgx", u.String())
	require.NoError(t, err)
	defer ro.Close()
	assertUnavailable(t, "no host takes writes", ro.PingContext(ctx))
}

// The errors drivers give when a connection breaks or a failover is under
// way, as they build them, and errors that say the database answered.
func TestIsUnavailableDriverErrors(t *testing.T) {
	gone := &lease.LostError{Key: "k", Op: "renew"}
	for _, tc := range []struct {
		name string
		err  error
		want bool
	}{
		{"pgx: a connection that ended mid-answer", io.ErrUnexpectedEOF, true},
		{"pgx: the same, wrapped", fmt.Errorf("toolexec: effect: %w", io.ErrUnexpectedEOF), true},
		{"pgx: a connection it closed", fmt.Errorf("commit: %w", pgconn.ErrConnClosed), true},
		{"pgx: every host a standby (target_session_attrs=read-write)", fmt.Errorf("connect: %w",
			errors.Join(fmt.Errorf("127.0.0.1:5433: %w", pgconn.ErrReadOnlyConnection), fmt.Errorf("127.0.0.1:5434: %w", pgconn.ErrReadOnlyConnection))), true},
		{"postgres: a write on a standby (25006)", sqlState("25006"), true},
		{"postgres: crash shutdown (57P02)", sqlState("57P02"), true},
		{"postgres: connection does not exist (08003)", sqlState("08003"), true},
		{"an HTTP body cut short by the model's API", &url.Error{Op: "Post", URL: "https://api.example", Err: io.ErrUnexpectedEOF}, false},
		{"io.EOF: the end of a stream", io.EOF, false},
		{"a lease lost", gone, false},
		{"a lease taken over", fmt.Errorf("%w: %w", request.ErrTakenOver, gone), false},
		{"a duplicate key", &engine.DuplicateKeyError{Key: "k", Err: sqlState("23505")}, false},
		{"a text that only mentions a closed connection", errors.New("the conn closed by the user"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.Equal(t, tc.want, httpapi.IsUnavailable(tc.err), chain(tc.err))
		})
	}
}
