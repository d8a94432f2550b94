package store

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/google/uuid"

	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
	"github.com/rowlease/rowlease/session"
)

// Values of the type column of ledger_transaction and the kind column of
// category.
const (
	// TypeIncome is money received.
	TypeIncome = "income"
	// TypeExpense is money spent.
	TypeExpense = "expense"
)

// Roles of chat messages.
const (
	// RoleUser is a message the user sent.
	RoleUser = "user"
	// RoleAssistant is the agent's reply.
	RoleAssistant = "assistant"
)

// OtherCategoryID is the catch-all category, used when a transaction names
// none.
const OtherCategoryID = "other"

// ErrNotFound means the session does not exist.
var ErrNotFound = errors.New("store: not found")

// Querier runs statements: *sql.DB, *sql.Tx and *sql.Conn satisfy it.
type Querier = lease.DB

// Store runs the bookkeeper's queries on one database. It is safe for
// concurrent use.
type Store struct {
	// DB is the connection pool.
	DB *sql.DB
	// Dialect is the database's SQL dialect.
	Dialect lease.Dialect
}

// New wraps an open database of dialect d.
func New(db *sql.DB, d lease.Dialect) *Store { return &Store{DB: db, Dialect: d} }

// Close closes the database.
func (s *Store) Close() error { return s.DB.Close() }

func (s *Store) q(query string) string { return s.Dialect.Rebind(query) }

// Session is a chat session and its ledger.
type Session struct {
	ID        string    // the session key (UUID)
	LedgerID  string    // the ledger its transactions go to
	CreatedAt time.Time // when it was created (UTC)
}

// CreateSession creates a ledger, a session writing to it, and the
// session's lock row (locker.Create), in one transaction.
func (s *Store) CreateSession(ctx context.Context, locker *session.Locker) (Session, error) {
	sess := Session{ID: uuid.NewString(), LedgerID: uuid.NewString()}
	tx, err := s.DB.BeginTx(ctx, nil)
	if err != nil {
		return Session{}, err
	}
	defer func() { _ = tx.Rollback() }()
	if _, err := tx.ExecContext(ctx, s.q("INSERT INTO ledger (id, name) VALUES (?, ?)"),
		sess.LedgerID, "Ledger of session "+sess.ID[:8]); err != nil {
		return Session{}, fmt.Errorf("store: create ledger: %w", err)
	}
	if _, err := tx.ExecContext(ctx, s.q("INSERT INTO chat_session (id, ledger_id) VALUES (?, ?)"),
		sess.ID, sess.LedgerID); err != nil {
		return Session{}, fmt.Errorf("store: create session: %w", err)
	}
	if err := locker.Create(ctx, tx, sess.ID); err != nil {
		return Session{}, fmt.Errorf("store: create session lock: %w", err)
	}
	if err := tx.Commit(); err != nil {
		return Session{}, err
	}
	return s.GetSession(ctx, s.DB, sess.ID)
}

// GetSession reads a session, or returns ErrNotFound.
func (s *Store) GetSession(ctx context.Context, q Querier, id string) (Session, error) {
	var sess Session
	var created dbTime
	err := q.QueryRowContext(ctx, s.q("SELECT id, ledger_id, created_at FROM chat_session WHERE id = ?"), id).
		Scan(&sess.ID, &sess.LedgerID, &created)
	if errors.Is(err, sql.ErrNoRows) {
		return Session{}, fmt.Errorf("%w: session %q", ErrNotFound, id)
	}
	if err != nil {
		return Session{}, err
	}
	sess.CreatedAt = created.t
	return sess, nil
}

// Category is a category transactions are filed under.
type Category struct {
	ID     string // stable slug, e.g. "food"
	Name   string // Chinese name, e.g. "餐饮"
	NameEN string // English name, e.g. "Food"
	Kind   string // TypeIncome, TypeExpense, or "" for both
}

// Categories lists every category in display order.
func (s *Store) Categories(ctx context.Context, q Querier) ([]Category, error) {
	rows, err := q.QueryContext(ctx, "SELECT id, name, name_en, COALESCE(kind, '') FROM category ORDER BY position, id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []Category
	for rows.Next() {
		var c Category
		if err := rows.Scan(&c.ID, &c.Name, &c.NameEN, &c.Kind); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// Transaction is one ledger entry.
type Transaction struct {
	ID         string // UUID
	LedgerID   string // the ledger it belongs to
	SessionKey string // the session whose message wrote it
	// RequestID is the rowlease request (one user message) that wrote it.
	RequestID string
	// ClientRequestID is the client's id of that message (read only).
	ClientRequestID string
	Type            string    // TypeIncome or TypeExpense
	AmountCents     int64     // positive, at most MaxAmountCents
	CategoryID      string    // category.id
	Category        string    // Chinese name (read only)
	CategoryEN      string    // English name (read only)
	Note            string    // free text, at most 500 characters
	OccurDate       string    // YYYY-MM-DD
	CreatedAt       time.Time // when it was written (read only)
}

// Amount is the amount as a decimal with two places.
func (t Transaction) Amount() string { return FormatCents(t.AmountCents) }

// InsertTransaction inserts t (ID, LedgerID, SessionKey, RequestID, Type,
// AmountCents, CategoryID, Note, OccurDate). A second transaction for the
// same request fails on UNIQUE (request_id): lease.IsDuplicateKey(err).
func (s *Store) InsertTransaction(ctx context.Context, q Querier, t Transaction) error {
	_, err := q.ExecContext(ctx, s.q("INSERT INTO ledger_transaction "+
		"(id, ledger_id, session_key, request_id, type, amount, category_id, note, occur_date) "+
		"VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)"),
		t.ID, t.LedgerID, t.SessionKey, t.RequestID, t.Type, t.Amount(), t.CategoryID, t.Note, s.dateArg(t.OccurDate))
	return err
}

// dateArg is a YYYY-MM-DD value as a parameter: text for SQLite and
// MySQL, a time.Time for PostgreSQL's DATE.
func (s *Store) dateArg(d string) any {
	if s.Dialect == lease.Postgres {
		if t, err := time.Parse(DateLayout, d); err == nil {
			return t
		}
	}
	return d
}

const transactionColumns = "t.id, t.ledger_id, t.session_key, t.request_id, COALESCE(r.client_request_id, ''), t.type, t.amount, " +
	"t.category_id, c.name, c.name_en, t.note, t.occur_date, t.created_at " +
	"FROM ledger_transaction t JOIN category c ON c.id = t.category_id " +
	"LEFT JOIN " + schema.RequestTable + " r ON r.id = t.request_id "

func scanTransactions(rows *sql.Rows) ([]Transaction, error) {
	defer rows.Close()
	var out []Transaction
	for rows.Next() {
		var t Transaction
		var amount dbAmount
		var date dbDate
		var created dbTime
		if err := rows.Scan(&t.ID, &t.LedgerID, &t.SessionKey, &t.RequestID, &t.ClientRequestID, &t.Type, &amount,
			&t.CategoryID, &t.Category, &t.CategoryEN, &t.Note, &date, &created); err != nil {
			return nil, err
		}
		t.AmountCents, _ = ParseAmount(amount.s)
		t.OccurDate, t.CreatedAt = date.s, created.t
		out = append(out, t)
	}
	return out, rows.Err()
}

// TransactionByRequest returns the transaction written by a request, if
// any.
func (s *Store) TransactionByRequest(ctx context.Context, q Querier, requestID string) (Transaction, bool, error) {
	rows, err := q.QueryContext(ctx, s.q("SELECT "+transactionColumns+"WHERE t.request_id = ?"), requestID)
	if err != nil {
		return Transaction{}, false, err
	}
	ts, err := scanTransactions(rows)
	if err != nil || len(ts) == 0 {
		return Transaction{}, false, err
	}
	return ts[0], true, nil
}

// TransactionFilter selects transactions. Empty fields do not filter.
type TransactionFilter struct {
	LedgerID string // only this ledger
	DateFrom string // inclusive, YYYY-MM-DD
	DateTo   string // inclusive, YYYY-MM-DD
	Type     string // TypeIncome or TypeExpense
	// Limit bounds the rows returned (newest first); 0 means 100.
	Limit int
}

// Transactions lists transactions, newest first (by occur_date, then
// created_at).
func (s *Store) Transactions(ctx context.Context, q Querier, f TransactionFilter) ([]Transaction, error) {
	var where []string
	var args []any
	if f.LedgerID != "" {
		where, args = append(where, "t.ledger_id = ?"), append(args, f.LedgerID)
	}
	if f.DateFrom != "" {
		where, args = append(where, "t.occur_date >= ?"), append(args, s.dateArg(f.DateFrom))
	}
	if f.DateTo != "" {
		where, args = append(where, "t.occur_date <= ?"), append(args, s.dateArg(f.DateTo))
	}
	if f.Type != "" {
		where, args = append(where, "t.type = ?"), append(args, f.Type)
	}
	if f.Limit <= 0 {
		f.Limit = 100
	}
	query := "SELECT " + transactionColumns
	if len(where) > 0 {
		query += "WHERE " + strings.Join(where, " AND ") + " "
	}
	query += fmt.Sprintf("ORDER BY t.occur_date DESC, t.created_at DESC, t.id LIMIT %d", f.Limit)
	rows, err := q.QueryContext(ctx, s.q(query), args...)
	if err != nil {
		return nil, err
	}
	return scanTransactions(rows)
}

// Message is one chat message.
type Message struct {
	Seq             int64     // position in the session, from 1 (assigned by AppendMessage)
	SessionKey      string    // the session
	ClientRequestID string    // the client's id of the message it belongs to
	RequestID       string    // the rowlease request that stored it
	Role            string    // RoleUser or RoleAssistant
	Content         string    // the text
	CreatedAt       time.Time // when it was stored (read only)
}

// AppendMessage appends m to its session unless a message with the same
// (session, client request id, role) exists; it reports whether it
// inserted. Call it in a transaction that holds the session (a fenced
// transaction): the next seq is read and used without a race.
func (s *Store) AppendMessage(ctx context.Context, tx Querier, m Message) (bool, error) {
	if _, ok, err := s.FindMessage(ctx, tx, m.SessionKey, m.ClientRequestID, m.Role); err != nil || ok {
		return false, err
	}
	var seq int64
	if err := tx.QueryRowContext(ctx, s.q("SELECT COALESCE(MAX(seq), 0) + 1 FROM chat_message WHERE session_key = ?"),
		m.SessionKey).Scan(&seq); err != nil {
		return false, err
	}
	_, err := tx.ExecContext(ctx, s.q("INSERT INTO chat_message (id, session_key, seq, client_request_id, request_id, role, content) "+
		"VALUES (?, ?, ?, ?, ?, ?, ?)"),
		uuid.NewString(), m.SessionKey, seq, m.ClientRequestID, m.RequestID, m.Role, m.Content)
	if err != nil {
		return false, fmt.Errorf("store: append %s message: %w", m.Role, err)
	}
	return true, nil
}

// AppendModelRound journals that a run of a request went through model
// round n (from 1), in tx: the agent's -intx-beside-step writes it in a
// fenced transaction beside the round's step. A transaction that rolls
// back leaves no row.
func (s *Store) AppendModelRound(ctx context.Context, tx Querier, sessionKey, requestID string, n int) error {
	_, err := tx.ExecContext(ctx, s.q("INSERT INTO model_round (id, session_key, request_id, round_no) VALUES (?, ?, ?, ?)"),
		uuid.NewString(), sessionKey, requestID, n)
	if err != nil {
		return fmt.Errorf("store: journal model round %d: %w", n, err)
	}
	return nil
}

const messageColumns = "seq, session_key, client_request_id, request_id, role, content, created_at FROM chat_message "

func scanMessages(rows *sql.Rows) ([]Message, error) {
	defer rows.Close()
	var out []Message
	for rows.Next() {
		var m Message
		var created dbTime
		if err := rows.Scan(&m.Seq, &m.SessionKey, &m.ClientRequestID, &m.RequestID, &m.Role, &m.Content, &created); err != nil {
			return nil, err
		}
		m.CreatedAt = created.t
		out = append(out, m)
	}
	return out, rows.Err()
}

// FindMessage reads the message of a client request with the given role.
func (s *Store) FindMessage(ctx context.Context, q Querier, sessionKey, clientRequestID, role string) (Message, bool, error) {
	rows, err := q.QueryContext(ctx, s.q("SELECT "+messageColumns+
		"WHERE session_key = ? AND client_request_id = ? AND role = ?"), sessionKey, clientRequestID, role)
	if err != nil {
		return Message{}, false, err
	}
	ms, err := scanMessages(rows)
	if err != nil || len(ms) == 0 {
		return Message{}, false, err
	}
	return ms[0], true, nil
}

// Messages lists a session's messages in order, at most limit (0 means
// 1000) of the oldest.
func (s *Store) Messages(ctx context.Context, q Querier, sessionKey string, limit int) ([]Message, error) {
	if limit <= 0 {
		limit = 1000
	}
	rows, err := q.QueryContext(ctx, s.q("SELECT "+messageColumns+
		fmt.Sprintf("WHERE session_key = ? ORDER BY seq LIMIT %d", limit)), sessionKey)
	if err != nil {
		return nil, err
	}
	return scanMessages(rows)
}

// History returns the last limit messages of a session, oldest first,
// leaving out those of the client request exclude.
func (s *Store) History(ctx context.Context, q Querier, sessionKey, exclude string, limit int) ([]Message, error) {
	rows, err := q.QueryContext(ctx, s.q("SELECT "+messageColumns+
		fmt.Sprintf("WHERE session_key = ? AND client_request_id <> ? ORDER BY seq DESC LIMIT %d", limit)), sessionKey, exclude)
	if err != nil {
		return nil, err
	}
	ms, err := scanMessages(rows)
	for i, j := 0, len(ms)-1; i < j; i, j = i+1, j-1 {
		ms[i], ms[j] = ms[j], ms[i]
	}
	return ms, err
}

// ClientRequestCount is how many transactions one client request id of
// one session produced.
type ClientRequestCount struct {
	SessionKey      string // the session
	ClientRequestID string // the client's id of the message
	Transactions    int    // ledger rows it wrote
}

// TransactionsPerClientRequest counts, for every request that wrote at
// least one transaction, how many it wrote (joined through rowlease's
// request table), most first. More than one would break the example's
// promise; UNIQUE (request_id) makes it impossible.
func (s *Store) TransactionsPerClientRequest(ctx context.Context, q Querier) ([]ClientRequestCount, error) {
	rows, err := q.QueryContext(ctx, "SELECT r.session_key, r.client_request_id, COUNT(*) FROM ledger_transaction t "+
		"JOIN "+schema.RequestTable+" r ON r.id = t.request_id "+
		"GROUP BY r.session_key, r.client_request_id ORDER BY COUNT(*) DESC, r.session_key, r.client_request_id")
	if err != nil {
		return nil, err
	}
	defer rows.Close()
	var out []ClientRequestCount
	for rows.Next() {
		var c ClientRequestCount
		if err := rows.Scan(&c.SessionKey, &c.ClientRequestID, &c.Transactions); err != nil {
			return nil, err
		}
		out = append(out, c)
	}
	return out, rows.Err()
}

// CountTransactions counts every ledger transaction.
func (s *Store) CountTransactions(ctx context.Context, q Querier) (int, error) {
	var n int
	err := q.QueryRowContext(ctx, "SELECT COUNT(*) FROM ledger_transaction").Scan(&n)
	return n, err
}
