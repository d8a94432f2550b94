package countdb

import "database/sql/driver"

// Commit is the text FailAfter's function receives for a transaction's
// commit.
const Commit = "COMMIT"

// FailAfter makes the round trips that fn picks fail after they took
// effect, as when a connection drops, or a context is cancelled, while the
// reply is on its way: the statement runs (a query's rows are read to the
// end) or the transaction commits, and then the caller gets fn's error
// instead of the result. fn receives the statement's text, or [Commit]; it
// returns nil to let the result through. It is called from whichever
// goroutine sends the statement, and even while counting is paused.
// FailAfter(nil) turns it off.
//
// It applies to databases opened with [OpenDB] (and connectors wrapped by
// [WrapConnector]), not to [Counter.Wrap]. Return an error other than
// driver.ErrBadConn: database/sql would retry a statement that failed with
// that one.
func (c *Counter) FailAfter(fn func(query string) error) {
	if fn == nil {
		c.fail.Store(nil)
		return
	}
	c.fail.Store(&fn)
}

// failAfter returns the error FailAfter's function picks for q, or nil.
func (c *Counter) failAfter(q string) error {
	fn := c.fail.Load()
	if fn == nil {
		return nil
	}
	return (*fn)(q)
}

// drain reads rows to the end and closes them, so the statement has run in
// full whatever the driver does lazily.
func drain(rows driver.Rows) {
	dest := make([]driver.Value, len(rows.Columns()))
	for rows.Next(dest) == nil {
	}
	_ = rows.Close()
}

// execResult applies FailAfter to an Exec's result.
func (c *Counter) execResult(q string, res driver.Result, err error) (driver.Result, error) {
	if err != nil {
		return res, err
	}
	if ferr := c.failAfter(q); ferr != nil {
		return nil, ferr
	}
	return res, nil
}

// queryResult applies FailAfter to a Query's rows.
func (c *Counter) queryResult(q string, rows driver.Rows, err error) (driver.Rows, error) {
	if err != nil {
		return rows, err
	}
	if ferr := c.failAfter(q); ferr != nil {
		drain(rows)
		return nil, ferr
	}
	return rows, nil
}

// BeforeSend calls fn with the text of every statement just before it is
// sent (on any goroutine, even while counting is paused): a test can wait
// for a statement to be on its way without waiting for its result, which
// may be blocked. BeforeSend(nil) turns it off. Like FailAfter, it applies
// to databases opened with [OpenDB].
func (c *Counter) BeforeSend(fn func(query string)) {
	if fn == nil {
		c.before.Store(nil)
		return
	}
	c.before.Store(&fn)
}

// sending calls BeforeSend's function, if any.
func (c *Counter) sending(q string) {
	if fn := c.before.Load(); fn != nil {
		(*fn)(q)
	}
}
