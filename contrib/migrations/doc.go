// Package migrations shows, in runnable Examples, how to apply rowlease's
// lock tables with the two migration tools users run: goose
// (github.com/pressly/goose/v3) and golang-migrate
// (github.com/golang-migrate/migrate/v4), from the files that
// schema.Migrations hands out as an fs.FS. It exports nothing.
//
// It is a module of its own so that neither tool, nor their drivers,
// enters the dependencies of github.com/rowlease/rowlease: the core ships
// the migration files and runs none of the tools.
//
// Its tests apply both tools' migrations up and down on every dialect
// (SQLite, MySQL/MariaDB, PostgreSQL) and run a message, with a tool call
// outside the database, on the tables they built. What they show a user:
//
//   - goose: goose.NewProvider(dialect, db, fsys) with fsys from
//     schema.Migrations(dialect, "goose"); goose splits each file itself,
//     so no multi-statement option is needed on any driver.
//   - golang-migrate: iofs.New(fsys, ".") with fsys from
//     schema.Migrations(dialect, "golang-migrate"), and the database driver
//     of the dialect: database/sqlite (pure Go, modernc.org/sqlite; not
//     database/sqlite3, which needs cgo), database/mysql (the DSN needs
//     multiStatements=true: golang-migrate sends a whole file in one Exec),
//     or database/pgx/v5. The MySQL and PostgreSQL drivers keep a
//     connection of their own until Migrate.Close, which also closes the
//     *sql.DB they were given.
//
// Migrations and schema.Apply build the same tables (package schema tests
// that); a database set up by Apply can adopt the migrations.
package migrations
