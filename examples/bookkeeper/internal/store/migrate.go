package store

import (
	"context"
	"embed"
	"fmt"
	"strings"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/llm"
	"github.com/rowlease/rowlease/lease"
	"github.com/rowlease/rowlease/schema"
)

//go:embed sql/*.sql
var ddlFiles embed.FS

// Migrate creates, if missing, rowlease's lock tables and the example's
// tables, and seeds the default categories. It is idempotent and safe to
// run from several processes at once.
func (s *Store) Migrate(ctx context.Context) error {
	if err := schema.Apply(ctx, s.DB, s.Dialect); err != nil {
		return err
	}
	script, err := ddlFiles.ReadFile("sql/" + s.Dialect.String() + ".sql")
	if err != nil {
		return fmt.Errorf("store: no DDL for dialect %s", s.Dialect)
	}
	if err := schema.ApplyScript(ctx, s.DB, string(script)); err != nil {
		return fmt.Errorf("store: DDL: %w", err)
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
