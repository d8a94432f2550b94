package store

import (
	"context"
	"embed"
	"errors"
	"fmt"
	"strings"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/llm"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
)

//go:embed sql/*.sql
var ddlFiles embed.FS

// DDL returns the statements of the example's own tables for dialect d.
func DDL(d lease.Dialect) ([]string, error) {
	b, err := ddlFiles.ReadFile("sql/" + d.String() + ".sql")
	if err != nil {
		return nil, fmt.Errorf("store: no DDL for dialect %s", d)
	}
	return schema.SplitStatements(string(b)), nil
}

// Migrate creates, if missing, rowlease's lock tables and the example's
// tables, and seeds the default categories. It is idempotent and safe to
// run from several processes at once.
func (s *Store) Migrate(ctx context.Context) error {
	if err := schema.Apply(ctx, s.DB, s.Dialect.String()); err != nil {
		return err
	}
	stmts, err := DDL(s.Dialect)
	if err != nil {
		return err
	}
	for i, stmt := range stmts {
		var err error
		for attempt := 0; attempt < 3; attempt++ {
			if _, err = s.DB.ExecContext(ctx, stmt); err == nil || !isCreateRace(err) {
				break
			}
		}
		if err != nil {
			return fmt.Errorf("store: DDL statement %d of %d: %w", i+1, len(stmts), err)
		}
	}
	return s.seedCategories(ctx)
}

// CategoryID is the slug of a category's English name: "Side job" →
// "side_job".
func CategoryID(c llm.Category) string {
	return strings.ReplaceAll(strings.ToLower(strings.TrimSpace(c.English)), " ", "_")
}

// seedCategories inserts llm.Categories (whose names RuleModel sends),
// leaving existing rows alone.
func (s *Store) seedCategories(ctx context.Context) error {
	insert := "INSERT INTO category (id, name, name_en, kind, position) VALUES (?, ?, ?, ?, ?) ON CONFLICT DO NOTHING"
	if s.Dialect == lease.MySQL {
		insert = "INSERT INTO category (id, name, name_en, kind, position) VALUES (?, ?, ?, ?, ?) ON DUPLICATE KEY UPDATE id = id"
	}
	insert = s.q(insert)
	for i, c := range llm.Categories() {
		var kind any
		if c.Kind != "" {
			kind = c.Kind
		}
		if _, err := s.DB.ExecContext(ctx, insert, CategoryID(c), c.Chinese, c.English, kind, i+1); err != nil {
			return fmt.Errorf("store: seed category %s: %w", c.English, err)
		}
	}
	return nil
}

// isCreateRace reports PostgreSQL's failure of a CREATE … IF NOT EXISTS
// racing another session (see schema.Apply); running it again finds the
// object.
func isCreateRace(err error) bool {
	var coded interface{ SQLState() string }
	if !errors.As(err, &coded) {
		return false
	}
	switch coded.SQLState() {
	case "23505", "42P07", "42710":
		return true
	}
	return false
}
