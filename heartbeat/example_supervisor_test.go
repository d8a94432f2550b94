package heartbeat_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"log"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	_ "modernc.org/sqlite" // registers the "sqlite" driver

	"github.com/rowlease/rowlease/heartbeat"
	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
)

// ExampleSupervisor keeps two leases of one piece of work alive — an
// export and the account it reads — and cancels the work as soon as one
// of them is lost. Here the account's lease is given back behind the
// supervisor's back (as a takeover would end it): its next renewal finds
// the token gone, and the work context is cancelled with a *LostError
// naming that lease.
func ExampleSupervisor() {
	ctx := context.Background()
	dir, err := os.MkdirTemp("", "supervisor-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)
	db, err := sql.Open("sqlite", "file:"+filepath.Join(dir, "work.db")+
		"?_pragma=busy_timeout(5000)&_pragma=journal_mode(WAL)&_txlock=immediate")
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	if _, err := db.ExecContext(ctx, `CREATE TABLE resource (
		name TEXT PRIMARY KEY, owner TEXT, token TEXT, expires_at INTEGER, generation INTEGER NOT NULL DEFAULT 0)`); err != nil {
		log.Fatal(err)
	}
	resources, err := lease.New[string](lease.SQLite, engine.MustTable("resource", lease.Columns{
		Key: "name", Holder: "owner", Token: "token", ExpiresAt: "expires_at", Generation: "generation",
	}), lease.Options{})
	if err != nil {
		log.Fatal(err)
	}
	const ttl = 1500 * time.Millisecond
	var grants []lease.Grant[string]
	for _, name := range []string{"export:2026-11", "account:7"} { // the one lock order
		if err := resources.Ensure(ctx, db, name, lease.CreateOptions{}); err != nil {
			log.Fatal(err)
		}
		g, err := resources.Acquire(ctx, db, name, "worker-1", ttl)
		if err != nil {
			log.Fatal(err)
		}
		grants = append(grants, g)
	}

	renewed := make(chan string, 16)
	sup, err := heartbeat.New(heartbeat.Config{
		Interval: ttl / 3, TTL: ttl,
		Logger: slog.New(slog.DiscardHandler), // the loss below is on purpose
		OnEvent: func(ev heartbeat.Event) {
			if ev.Kind == heartbeat.EventRenewed {
				select {
				case renewed <- ev.Lease:
				default:
				}
			}
		},
	})
	if err != nil {
		log.Fatal(err)
	}
	export := heartbeat.ForLease("export", resources, db, grants[0])
	account := heartbeat.ForLease("account", resources, db, grants[1])
	sup.Add(export)
	sup.Add(account)
	work, err := sup.Start(ctx)
	if err != nil {
		log.Fatal(err)
	}
	defer sup.Stop()

	// Both are renewed together, in the order added.
	fmt.Println("renewed:", <-renewed, <-renewed)

	// The account's lease ends under the work (its token is still the
	// grant's: renewals keep it).
	if err := resources.Release(ctx, db, account.Grant()); err != nil {
		log.Fatal(err)
	}
	<-work.Done() // at the account's next renewal
	var lost *heartbeat.LostError
	if errors.As(context.Cause(work), &lost) {
		fmt.Println("work cancelled:", lost.Lease, "-", lost.Reason)
	}
	fmt.Println("matches lease.ErrLost:", errors.Is(context.Cause(work), lease.ErrLost))

	// The supervisor does not release; the caller gives back what it holds.
	sup.Stop()
	if err := resources.Release(ctx, db, export.Grant()); err != nil {
		log.Fatal(err)
	}
	fmt.Println("export generation", export.Grant().Generation, "released")
	// Output:
	// renewed: export account
	// work cancelled: account - renewal found the token gone
	// matches lease.ErrLost: true
	// export generation 1 released
}
