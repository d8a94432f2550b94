package request

import (
	"context"
	"database/sql"
	"fmt"
	"testing"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/retry"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
)

// busyError is SQLite's SQLITE_BUSY as modernc.org/sqlite reports it.
type busyError struct{}

func (busyError) Error() string { return "database is locked (5) (SQLITE_BUSY)" }
func (busyError) Code() int     { return 5 }

// raiseVictim makes the database end tx as a deadlock, serialization or
// certification victim: a real driver error on MySQL (1213, what Galera
// reports for a certification failure) and PostgreSQL (40001); on SQLite,
// SQLITE_BUSY as the driver reports it.
func raiseVictim(ctx context.Context, tx *sql.Tx, d lease.Dialect) error {
	var err error
	switch d {
	case lease.MySQL:
		_, err = tx.ExecContext(ctx, "SIGNAL SQLSTATE '40001' SET MYSQL_ERRNO = 1213, MESSAGE_TEXT = 'Deadlock found when trying to get lock'")
	case lease.Postgres:
		_, err = tx.ExecContext(ctx, "DO $$ BEGIN RAISE EXCEPTION 'could not serialize access' USING ERRCODE = '40001'; END $$")
	default:
		err = busyError{}
	}
	if err == nil {
		return fmt.Errorf("the database raised nothing")
	}
	return err
}

// TestInTxVictimRunAgain: Run.InTx runs a transaction that ended as a
// victim (nothing committed) again, fences included, and its writes
// commit once; one that keeps failing returns the database's error after
// retry.MaxAttempts runs, with nothing written.
func TestInTxVictimRunAgain(t *testing.T) {
	testdb.Each(t, func(t *testing.T, db *sqlx.DB) {
		e := newEnvTB(t, db, 30*time.Second)
		ctx := bg(t)
		require.NoError(t, e.r.Sessions().Create(ctx, e.db, "s"))
		runs, always := 0, 0
		_, err := e.r.Handle(ctx, Message{SessionKey: "s", ClientRequestID: "c", Content: "x"}, func(ctx context.Context, run *Run) (Answer, error) {
			if err := run.InTx(ctx, func(tx *sql.Tx) error {
				runs++
				if _, err := tx.ExecContext(ctx, e.d.Rebind("INSERT INTO ledger_entry (request_id, amount) VALUES (?, ?)"), run.RequestID(), "1"); err != nil {
					return err
				}
				if runs < 3 {
					return raiseVictim(ctx, tx, e.d)
				}
				return nil
			}); err != nil {
				return Answer{}, err
			}
			err := run.InTx(ctx, func(tx *sql.Tx) error {
				always++
				if _, err := tx.ExecContext(ctx, e.d.Rebind("INSERT INTO ledger_entry (request_id, amount) VALUES (?, ?)"), run.RequestID(), "2"); err != nil {
					return err
				}
				return raiseVictim(ctx, tx, e.d)
			})
			assert.True(t, lease.IsTransient(err), "%v", err)
			return Answer{Reply: "ok"}, nil
		})
		require.NoError(t, err)
		assert.Equal(t, 3, runs)
		assert.Equal(t, retry.MaxAttempts, always)
		assert.Equal(t, 1, e.ledgerRows(t), "one commit of the first, none of the second")
	})
}
