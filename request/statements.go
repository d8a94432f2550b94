package request

import (
	"encoding/json"
	"strings"

	"github.com/rowlease/rowlease/internal/engine"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
)

// statements are the Runner's own SQL on the request table, built once by
// New. Every column name in them is a schema constant, every status a
// schema.Stored… constant, and the table name was validated by
// lease.NewTable: no input reaches their text. The lease operations
// (acquire, renew, transition, release) are lease's statements, and the
// tool-execution table is toolexec's.
type statements struct {
	// find reads a request by (session, client request id) (find, in
	// existing.go): a message's first statement, but on PostgreSQL for
	// OnBusy Reject, whose claimer reads it in its claim (claimUnless).
	find string
	// status reads a request's state, outcome and queue position (Status).
	status string
	// steps reads a request's recorded steps in order (claim, on a
	// takeover); trimSteps deletes those from a position on (finish, when
	// a run fails); dropSteps those of a request (Cancel of a failed one).
	steps, trimSteps string
	// death counts a death: the run before this claim died holding the
	// request's lease (claim, on a takeover, in its transaction).
	death string
	// sweepSteps deletes the steps of the sweeper's tombstones.
	sweepSteps func(n int) string

	// The queue (queue.go, dispatch.go; the claim of its head in
	// claim.go).
	head, ahead, aheadInterrupt, stats, insert, flag, settle, settleOne string
	// candidates reads the dispatcher's sessions, and foreign the requests
	// ready to run whose agent the Runner does not have (agents.go): own is
	// the condition of the Runner's agents (ownAgents), whose names are
	// bound where it stands among the statement's arguments.
	candidates, foreign func(own string) string
	// Interrupts (interrupt.go): one run's flag, every flag.
	flagRead, flagsRead string
	// Resume (resume.go): the mark of a run that died too often.
	giveUp string
	// Cancel (cancel.go).
	cancelQueued, cancelFailed, cancelFlag string
	// The sweeper (sweep.go): the finished requests to sweep.
	sweepIDs string

	// Waits for a person (await.go): park marks a run's request waiting
	// (parkUntil with a deadline); unpark makes a waiting request
	// processing and free for its answer (unparkExpired, for its expiry);
	// waitRecord records the answer or the expiry as the wait's step;
	// waitRead reads a request for Answer, waitAnswer the answer recorded
	// under a wait's name, waitOf a waiting request's wait; stopWaits
	// marks the session's waiting requests interrupted (an interrupting
	// message); cancelWaiting cancels one.
	park, parkUntil, unpark, unparkExpired, waitRecord, waitRead, waitAnswer, waitOf, stopWaits, cancelWaiting string
}

// agentValue is what the agent column stores for name: NULL for the
// default agent, so that rows written before agents had names and rows of
// single-agent services read alike.
func agentValue(name string) any {
	if name == "" {
		return nil
	}
	return name
}

// metadataValue is what the metadata column stores: NULL when there is
// none.
func metadataValue(m json.RawMessage) any {
	if len(m) == 0 {
		return nil
	}
	return string(m)
}

// lit is the SQL literal of a schema constant (none holds a quote).
func lit(v string) string { return "'" + v + "'" }

// lane orders the queued messages of a session, interrupting ones first
// (p: "" or an alias and a dot).
func lane(p string) string {
	return "CASE WHEN " + p + schema.ColOnBusy + " = " + lit(Interrupt.String()) + " THEN 0 ELSE 1 END"
}

// finished are the statuses the sweeper sweeps: the final ones, and a
// request that waits for an answer (no lease held) as long as the
// retention.
var finished = "(" + lit(schema.StoredSucceeded) + ", " + lit(schema.StoredFailed) + ", " + lit(schema.StoredInterrupted) +
	", " + lit(schema.StoredCancelled) + ", " + lit(schema.StoredWaiting) + ")"

// openWait is the condition of a request that waits for an answer whose
// deadline has not passed (p: "" or an alias and a dot); dueWait, of one
// whose deadline has passed, to be run on with the expiry.
func openWait(p, now string) string {
	return "(" + p + schema.ColStatus + " = " + lit(schema.StoredWaiting) + " AND (" + p + schema.ColWaitUntil + " IS NULL OR " +
		p + schema.ColWaitUntil + " > " + now + "))"
}

func dueWait(p, now string) string {
	return "(" + p + schema.ColStatus + " = " + lit(schema.StoredWaiting) + " AND " + p + schema.ColWaitUntil + " IS NOT NULL AND " +
		p + schema.ColWaitUntil + " <= " + now + ")"
}

// newStatements builds the Runner's statements on table t.
func (r *Runner) newStatements(t, steps lease.Table) statements {
	d := r.cfg.Dialect
	tq := engine.QuotedTable(t, d)
	now := engine.Now(d)
	var s statements

	s.find = d.Rebind("SELECT " + schema.ColID + ", " + schema.ColFingerprint + ", " + schema.ColStatus + ", COALESCE(" +
		schema.ColReply + ", ''), COALESCE(" + schema.ColResult + ", ''), " + schema.ColGeneration + ", COALESCE(" +
		schema.ColInterruptedBy + ", ''), CASE WHEN " + schema.ColQueueSeq + " IS NULL THEN 0 ELSE 1 END FROM " + tq +
		" WHERE " + schema.ColSessionKey + " = ? AND " + schema.ColClientRequestID + " = ?")
	s.status = r.statusStatement(tq)
	sq := engine.QuotedTable(steps, d)
	s.steps = d.Rebind("SELECT " + schema.ColName + ", " + schema.ColOutput + " FROM " + sq + " WHERE " +
		schema.ColRequestID + " = ? ORDER BY " + schema.ColSeq)
	s.trimSteps = d.Rebind("DELETE FROM " + sq + " WHERE " + schema.ColRequestID + " = ? AND " + schema.ColSeq + " >= ?")
	s.death = d.Rebind("UPDATE " + tq + " SET " + schema.ColDeaths + " = " + schema.ColDeaths + " + 1 WHERE " +
		schema.ColID + " = ? AND " + schema.ColToken + " IS NOT NULL AND " + schema.ColExpiresAt + " <= " + now)
	// The steps of requests that are tombstones now (the sweeper's
	// transaction made them): a request resent meanwhile keeps its steps.
	s.sweepSteps = func(n int) string {
		in := "(" + strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + ")"
		return d.Rebind("DELETE FROM " + sq + " WHERE " + schema.ColRequestID + " IN " + in + " AND " + schema.ColRequestID +
			" IN (SELECT " + schema.ColID + " FROM " + tq + " WHERE " + schema.ColID + " IN " + in + " AND " +
			schema.ColStatus + " = " + lit(schema.StoredExpired) + ")")
	}

	// runnable: a queued request, or a dead run to resume (see
	// resumeConds): one that came from the queue, or one accepted at once
	// whose content is stored, after its grace and back-off.
	resumable, due := r.resumeConds("")
	pResumable, pDue := r.resumeConds("p.")
	queued := schema.ColStatus + " = " + lit(schema.StoredQueued) + " AND " + schema.ColQueueSeq + " IS NOT NULL AND " +
		schema.ColInterruptedBy + " IS NULL"
	// A wait whose deadline passed is run on (with the expiry) as a
	// dead run is resumed: ahead of the queue.
	runnable := "((" + queued + ") OR (" + resumable + " AND " + due + ") OR " + dueWait("", now) + ")"
	// The head: a run that died first (it was running), then the
	// interrupting messages, then the queued ones, each in arrival order.
	// Nothing starts while a run to resume is still processing under a
	// live request lease, or waits out its grace or back-off: its session
	// lease can lapse a moment before its request lease (they are renewed
	// apart), and the next message must not overtake it; it is resumed
	// first, once it is due. Nor while a run asked to stop still holds its
	// request lease: the claim marks it interrupted only once that lease
	// is free or expired, and no later claim would. Nor while a request
	// of the session waits for an answer: what follows runs after it.
	s.head = d.Rebind("SELECT " + schema.ColID + ", " + schema.ColClientRequestID + ", " + schema.ColFingerprint +
		", COALESCE(" + schema.ColContent + ", ''), " + schema.ColStatus + ", " + schema.ColGeneration + ", " + deaths("") +
		", COALESCE(" + schema.ColAgent + ", ''), COALESCE(" + schema.ColMetadata + ", '') FROM " + tq +
		" WHERE " + schema.ColSessionKey + " = ? AND " + runnable +
		" AND NOT EXISTS (SELECT 1 FROM " + tq + " p WHERE p." + schema.ColSessionKey + " = ? AND ((" + pResumable +
		" AND NOT " + pDue + ")" + " OR (p." + schema.ColStatus + " = " + lit(schema.StoredProcessing) + " AND p." +
		schema.ColInterruptedBy + " IS NOT NULL AND p." + schema.ColToken + " IS NOT NULL AND p." + schema.ColExpiresAt +
		" > " + now + ") OR " + openWait("p.", now) + "))" +
		" ORDER BY CASE WHEN " + schema.ColStatus + " IN (" + lit(schema.StoredProcessing) + ", " + lit(schema.StoredWaiting) +
		") THEN 0 ELSE 1 END, " +
		lane("") + ", " + schema.ColQueueSeq + " LIMIT 1")
	// What a new message must not overtake: the queued messages, the
	// runs to resume, due or not yet (a new message must not run while a
	// dead run of the session waits out its grace), and a request that
	// waits for an answer (an interrupting message stops it first).
	before := "((" + queued + ") OR (" + resumable + ") OR " + schema.ColStatus + " = " + lit(schema.StoredWaiting) + ")"
	s.ahead = d.Rebind("SELECT COUNT(*) FROM " + tq + " WHERE " + schema.ColSessionKey + " = ? AND " + before)
	s.aheadInterrupt = d.Rebind("SELECT COUNT(*) FROM " + tq + " WHERE " + schema.ColSessionKey + " = ? AND " + before +
		" AND (" + schema.ColStatus + " <> " + lit(schema.StoredQueued) + " OR " + schema.ColOnBusy + " = " +
		lit(Interrupt.String()) + ")")
	s.stats = d.Rebind("SELECT COUNT(CASE WHEN " + schema.ColStatus + " = " + lit(schema.StoredQueued) + " THEN 1 END), " +
		"COUNT(CASE WHEN " + schema.ColStatus + " = " + lit(schema.StoredQueued) + " AND " + schema.ColOnBusy + " = " +
		lit(Interrupt.String()) + " THEN 1 END), COALESCE(MAX(" + schema.ColQueueSeq + "), 0) FROM " + tq +
		" WHERE " + schema.ColSessionKey + " = ? AND " + schema.ColQueueSeq + " IS NOT NULL")
	s.insert = d.Rebind("INSERT INTO " + tq + " (" + strings.Join([]string{schema.ColID, schema.ColSessionKey,
		schema.ColClientRequestID, schema.ColFingerprint, schema.ColStatus, schema.ColGeneration, schema.ColContent,
		schema.ColQueueSeq, schema.ColOnBusy, schema.ColAgent, schema.ColMetadata, schema.ColUpdatedAt}, ", ") + ") VALUES (?, ?, ?, ?, " +
		lit(schema.StoredQueued) + ", 0, ?, ?, ?, ?, ?, " + now + ")")
	s.flag = d.Rebind("UPDATE " + tq + " SET " + schema.ColInterruptedBy + " = ? WHERE " + schema.ColSessionKey +
		" = ? AND " + schema.ColStatus + " = " + lit(schema.StoredProcessing) + " AND " + schema.ColInterruptedBy + " IS NULL")
	// A run asked to stop by its own client (Cancel: interrupted_by is
	// its own client request id) ends cancelled, any other interrupted.
	settle := "UPDATE " + tq + " SET " + schema.ColStatus + " = CASE WHEN " + schema.ColInterruptedBy + " = " +
		schema.ColClientRequestID + " THEN " + lit(schema.StoredCancelled) + " ELSE " + lit(schema.StoredInterrupted) +
		" END, " + schema.ColHolder + " = NULL, " + schema.ColToken + " = NULL, " + schema.ColExpiresAt + " = NULL, " +
		schema.ColUpdatedAt + " = " + now + " WHERE " + schema.ColSessionKey + " = ? AND " + schema.ColStatus + " = " +
		lit(schema.StoredProcessing) + " AND " + schema.ColInterruptedBy + " IS NOT NULL AND " + free(now)
	s.settle = d.Rebind(settle)
	s.settleOne = d.Rebind(settle + " AND " + schema.ColID + " = ?")
	// The dispatcher's sessions: those with a runnable request, or a
	// request asked to stop whose run is gone (stopped: it is settled, see
	// settle), and no run that keeps the session's head from starting —
	// one live (its request lease held: its process starts what follows),
	// or one to resume that waits out its grace or back-off (as in head).
	// A busy session is not read, so it cannot fill the batch. They come in
	// the order of their keys after a cursor (the last key of the previous
	// poll): every such session is visited in turn, however many the
	// dispatcher cannot start. The second column says whether the session
	// has a run to settle. (Unqualified columns are the outer c's.)
	stopped := schema.ColStatus + " = " + lit(schema.StoredProcessing) + " AND " + schema.ColInterruptedBy +
		" IS NOT NULL AND " + free(now)
	// A runnable request counts only if the Runner has its agent (own):
	// a session whose requests are all another agent's does not fill the
	// batch (its head is read, and left alone, only in a session that has
	// one of the Runner's requests too: see claimHead).
	s.candidates = func(own string) string {
		return d.Rebind("SELECT " + schema.ColSessionKey + ", MAX(CASE WHEN " + stopped + " THEN 1 ELSE 0 END) FROM " +
			tq + " c WHERE " + schema.ColSessionKey + " > ? AND ((" + runnable + " AND " + own + ") OR (" + stopped + ")) AND NOT EXISTS (SELECT 1 FROM " + tq + " p WHERE p." + schema.ColSessionKey + " = c." +
			schema.ColSessionKey + " AND ((p." + schema.ColStatus + " = " + lit(schema.StoredProcessing) + " AND ((p." +
			schema.ColToken + " IS NOT NULL AND p." + schema.ColExpiresAt + " > " + now + ") OR (" + pResumable + " AND NOT " +
			pDue + "))) OR " + openWait("p.", now) + ")) GROUP BY " + schema.ColSessionKey + " ORDER BY " + schema.ColSessionKey + " LIMIT ?")
	}
	// The runnable requests of the agents the Runner does not have (CASE:
	// a NULL agent not in own is another's too).
	s.foreign = func(own string) string {
		return d.Rebind("SELECT " + schema.ColID + ", COALESCE(" + schema.ColAgent + ", '') FROM " + tq + " WHERE " + runnable +
			" AND CASE WHEN " + own + " THEN 0 ELSE 1 END = 1 LIMIT ?")
	}

	s.flagRead = d.Rebind("SELECT COALESCE(" + schema.ColInterruptedBy + ", '') FROM " + tq + " WHERE " + schema.ColID + " = ?")
	// Every run asked to stop and not stopped yet, in one read (the status
	// index narrows it to the processing rows; a flag lives until its run
	// marks itself interrupted, within an interval).
	s.flagsRead = d.Rebind("SELECT " + schema.ColID + ", " + schema.ColInterruptedBy + " FROM " + tq + " WHERE " +
		schema.ColStatus + " = " + lit(schema.StoredProcessing) + " AND " + schema.ColInterruptedBy + " IS NOT NULL")

	// A dead run that the service resumed too often is marked error: the
	// statement changes nothing if a run took it meanwhile (its lease is
	// live or its generation moved on).
	s.giveUp = d.Rebind("UPDATE " + tq + " SET " + schema.ColStatus + " = " + lit(schema.StoredFailed) + ", " +
		schema.ColError + " = ?, " + schema.ColHolder + " = NULL, " + schema.ColToken + " = NULL, " + schema.ColExpiresAt +
		" = NULL, " + schema.ColUpdatedAt + " = " + now + " WHERE " + schema.ColID + " = ? AND " + schema.ColStatus + " = " +
		lit(schema.StoredProcessing) + " AND " + schema.ColGeneration + " = ? " + "AND " + schema.ColInterruptedBy +
		" IS NULL AND " + free(now))

	// A cancelled request's interrupted_by is its own client request id:
	// no other message can have that id in its session (the unique key),
	// so it tells a cancel from an interrupt, and the queue, the settling
	// of dead runs and the interrupt watch treat it as one.
	cancel := "UPDATE " + tq + " SET " + schema.ColStatus + " = " + lit(schema.StoredCancelled) + ", " +
		schema.ColInterruptedBy + " = " + schema.ColClientRequestID + ", " + schema.ColUpdatedAt + " = " + now +
		" WHERE " + schema.ColSessionKey + " = ? AND " + schema.ColClientRequestID + " = ? AND " + schema.ColStatus + " = "
	s.cancelQueued = d.Rebind(cancel + lit(schema.StoredQueued))
	s.cancelFailed = d.Rebind(cancel + lit(schema.StoredFailed) + " AND " + free(now))
	s.cancelWaiting = d.Rebind(cancel + lit(schema.StoredWaiting))
	s.cancelFlag = d.Rebind("UPDATE " + tq + " SET " + schema.ColInterruptedBy + " = " + schema.ColClientRequestID +
		" WHERE " + schema.ColSessionKey + " = ? AND " + schema.ColClientRequestID + " = ? AND " + schema.ColStatus + " = " +
		lit(schema.StoredProcessing) + " AND " + schema.ColInterruptedBy + " IS NULL")

	s.newWaitStatements(d, tq, sq, now)
	if r.cfg.Lease.MultiPrimary {
		// The reads whose answer decides what the Runner does are causal
		// on a multi-primary cluster: find sees the request a duplicate
		// just made through another node; waitRead and waitAnswer see an
		// answer just recorded through another node (both, since the
		// pool may send the second to a node that has not yet applied
		// the answer the first one saw).
		s.find = engine.SyncWait(s.find)
		s.waitRead = engine.SyncWait(s.waitRead)
		s.waitAnswer = engine.SyncWait(s.waitAnswer)
	}
	s.sweepIDs = d.Rebind("SELECT " + schema.ColID + " FROM " + tq + " WHERE " + schema.ColStatus + " IN " + finished +
		" AND " + schema.ColUpdatedAt + " <= " + cutoff(d) + " LIMIT ?")
	return s
}

// free is the condition that no run holds a row's lease: none was
// granted, or it expired by the database clock now.
func free(now string) string {
	return "(" + schema.ColToken + " IS NULL OR " + schema.ColExpiresAt + " <= " + now + ")"
}

// statusStatement is Status's read: the request, whether its lease is
// live, when it is queued the queued messages of its session that run
// before it, its agent and its metadata.
func (r *Runner) statusStatement(tq string) string {
	d := r.cfg.Dialect
	c := func(alias, col string) string { return alias + "." + col }
	return d.Rebind("SELECT " + c("r", schema.ColID) + ", " + c("r", schema.ColStatus) + ", COALESCE(" + c("r", schema.ColReply) +
		", ''), COALESCE(" + c("r", schema.ColResult) + ", ''), COALESCE(" + c("r", schema.ColError) + ", ''), " +
		c("r", schema.ColGeneration) + ", COALESCE(" + c("r", schema.ColInterruptedBy) + ", ''), " +
		"CASE WHEN " + c("r", schema.ColToken) + " IS NOT NULL AND " + c("r", schema.ColExpiresAt) + " > " + engine.Now(d) +
		" THEN 1 ELSE 0 END, " +
		"CASE WHEN " + c("r", schema.ColStatus) + " = " + lit(schema.StoredQueued) + " THEN (SELECT COUNT(*) FROM " + tq +
		" q WHERE " + c("q", schema.ColSessionKey) + " = " + c("r", schema.ColSessionKey) + " " +
		"AND " + c("q", schema.ColStatus) + " = " + lit(schema.StoredQueued) + " AND " + c("q", schema.ColQueueSeq) +
		" IS NOT NULL AND (" + lane("q.") + " < " + lane("r.") + " OR (" + lane("q.") + " = " + lane("r.") + " AND " +
		c("q", schema.ColQueueSeq) + " < " + c("r", schema.ColQueueSeq) + "))) ELSE 0 END, COALESCE(" + c("r", schema.ColAgent) + ", ''), COALESCE(" + c("r", schema.ColMetadata) + ", ''), " +
		"COALESCE(" + c("r", schema.ColWaitName) + ", ''), COALESCE(" + c("r", schema.ColWaitQuestion) + ", ''), CASE WHEN " +
		c("r", schema.ColWaitUntil) + " IS NULL THEN 0 ELSE 1 END, CASE WHEN " + c("r", schema.ColWaitUntil) + " IS NULL THEN 0 ELSE " +
		engine.MicrosUntil(d, c("r", schema.ColWaitUntil)) + " END " +
		"FROM " + tq + " r WHERE " + c("r", schema.ColSessionKey) + " = ? AND " + c("r", schema.ColClientRequestID) + " = ?")
}

// sweepStatement turns n finished requests into tombstones: their ids,
// then the age in microseconds (see cutoff), checked again.
func (r *Runner) sweepStatement(t lease.Table, n int) string {
	d := r.cfg.Dialect
	in := "(" + strings.TrimSuffix(strings.Repeat("?, ", n), ", ") + ")"
	emptied := []string{schema.ColReply, schema.ColResult, schema.ColError, schema.ColContent, schema.ColMetadata,
		schema.ColQueueSeq, schema.ColOnBusy, schema.ColInterruptedBy, schema.ColWaitName, schema.ColWaitQuestion,
		schema.ColWaitSeq, schema.ColWaitUntil}
	return d.Rebind("UPDATE " + engine.QuotedTable(t, d) + " SET " + schema.ColStatus + " = " + lit(schema.StoredExpired) + ", " +
		strings.Join(emptied, " = NULL, ") + " = NULL, " + schema.ColUpdatedAt + " = " + engine.Now(d) +
		" WHERE " + schema.ColID + " IN " + in + " AND " + schema.ColStatus + " IN " + finished + " AND " +
		schema.ColUpdatedAt + " <= " + cutoff(d) + " AND " + schema.ColToken + " IS NULL")
}

// cutoff is "now − ? microseconds" by the database clock, in the column
// representation.
func cutoff(d lease.Dialect) string {
	return minusMicros(d, engine.Now(d), "?")
}

// minusMicros is "t − expr microseconds" in the column representation.
func minusMicros(d lease.Dialect, t, expr string) string {
	switch d {
	case lease.MySQL:
		return "(" + t + " - INTERVAL (" + expr + ") MICROSECOND)"
	case lease.Postgres:
		return "(" + t + " - CAST((" + expr + ") AS bigint) * INTERVAL '1 microsecond')"
	}
	return "(" + t + " - (" + expr + "))"
}

// newWaitStatements builds the statements of waits for a person
// (await.go) on the request table tq and the step table sq.
func (s *statements) newWaitStatements(d lease.Dialect, tq, sq, now string) {
	park := "UPDATE " + tq + " SET " + schema.ColStatus + " = " + lit(schema.StoredWaiting) + ", " + schema.ColHolder + " = NULL, " +
		schema.ColToken + " = NULL, " + schema.ColExpiresAt + " = NULL, " + schema.ColWaitName + " = ?, " +
		schema.ColWaitQuestion + " = ?, " + schema.ColWaitSeq + " = ?, " + schema.ColWaitUntil + " = "
	// Token-checked, as every write of a run: and not once another
	// message or its client asked the run to stop (the caller marks it
	// as they asked instead).
	cond := ", " + schema.ColUpdatedAt + " = " + now + " WHERE " + schema.ColID + " = ? AND " + schema.ColToken + " = ? AND " +
		schema.ColGeneration + " = ? AND " + schema.ColStatus + " = " + lit(schema.StoredProcessing) + " AND " +
		schema.ColInterruptedBy + " IS NULL"
	s.park = d.Rebind(park + "NULL" + cond)
	s.parkUntil = d.Rebind(park + engine.NowPlus(d, "?") + cond)
	unpark := "UPDATE " + tq + " SET " + schema.ColStatus + " = " + lit(schema.StoredProcessing) + ", " + schema.ColWaitName +
		" = NULL, " + schema.ColWaitQuestion + " = NULL, " + schema.ColWaitSeq + " = NULL, " + schema.ColWaitUntil + " = NULL, " +
		schema.ColUpdatedAt + " = " + now + " WHERE " + schema.ColID + " = ? AND " + schema.ColWaitName + " = ? AND "
	s.unpark = d.Rebind(unpark + openWait("", now))
	s.unparkExpired = d.Rebind(unpark + dueWait("", now))
	s.waitRecord = d.Rebind("INSERT INTO " + sq + " (" + schema.ColRequestID + ", " + schema.ColSeq + ", " + schema.ColName + ", " +
		schema.ColOutput + ", " + schema.ColGeneration + ") VALUES (?, ?, ?, ?, ?)")
	s.waitRead = d.Rebind("SELECT " + schema.ColID + ", " + schema.ColStatus + ", COALESCE(" + schema.ColWaitName + ", ''), " +
		schema.ColWaitSeq + ", CASE WHEN " + dueWait("", now) + " THEN 1 ELSE 0 END, " + schema.ColGeneration + ", " +
		schema.ColFingerprint + ", COALESCE(" + schema.ColContent + ", ''), COALESCE(" + schema.ColAgent + ", ''), COALESCE(" +
		schema.ColMetadata + ", '') FROM " + tq + " WHERE " + schema.ColSessionKey + " = ? AND " + schema.ColClientRequestID + " = ?")
	s.waitAnswer = d.Rebind("SELECT " + schema.ColOutput + " FROM " + sq + " WHERE " + schema.ColRequestID + " = ? AND " +
		schema.ColName + " = ?")
	s.waitOf = d.Rebind("SELECT " + schema.ColWaitName + ", " + schema.ColWaitSeq + " FROM " + tq + " WHERE " + schema.ColID +
		" = ? AND " + schema.ColStatus + " = " + lit(schema.StoredWaiting))
	s.stopWaits = d.Rebind("UPDATE " + tq + " SET " + schema.ColStatus + " = " + lit(schema.StoredInterrupted) + ", " +
		schema.ColInterruptedBy + " = ?, " + schema.ColUpdatedAt + " = " + now + " WHERE " + schema.ColSessionKey + " = ? AND " +
		schema.ColStatus + " = " + lit(schema.StoredWaiting))
}
