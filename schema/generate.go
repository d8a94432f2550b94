package schema

// The golang-migrate files, migrations/<dialect>/migrate/NNNNNN_name.up.sql
// and .down.sql, are the one source of every statement of this package,
// written by hand. Generated from them, and committed:
//
//   - migrations/<dialect>/goose/NNNNN_name.sql, the same up and down
//     statements under goose's annotations;
//   - sql/<dialect>.sql, the DDL Apply runs: the up migrations folded into
//     one CREATE … IF NOT EXISTS per table and index.
//
// Apply's upgrade runs the golang-migrate up files themselves (upgrade.go).
// To change the schema, add a migration NNNNNN_name.up.sql and .down.sql
// for each dialect and run go generate; TestGeneratedFilesAreCurrent fails
// while a generated file is not current.

//go:generate go run ./internal/gen
