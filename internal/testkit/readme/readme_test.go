package readme_test

// TestReadmeGoBlocks type-checks every ```go block of README.md and of
// every Markdown page under docs/ (pages: README's documentation, moved
// out of it) against the packages of this module, so that a block copied
// from them compiles.
//
// The conventions, for whoever edits README or a page under docs/:
//
//   - A ```go block is compiled unless the last non-blank line before it is
//     a marker comment (invisible on GitHub):
//     <!-- readme: skip REASON -->           not compiled (say why), or
//     <!-- readme: same as PATH -->          not compiled here: its lines,
//     each trimmed of indentation, must appear one after another in the
//     file PATH (relative to the repository root, from a page under
//     docs/ too), which compiles it —
//     for a block that uses a module of its own (contrib/otel).
//     <!-- readme: file PATH -->             not compiled here: the block
//     is the whole of the file PATH, byte for byte, which compiles and
//     runs it (README's quick start, examples/quickstart/main.go).
//   - A block that parses as Go declarations (a func, a type) is compiled
//     as top-level declarations; any other block is compiled as the body
//     of a function of its own, so := in one block never clashes with
//     another's.
//   - A block may use the free names declared in prelude below (db, ctx,
//     sid, cid, tools, agent, out, err, ...), and every package in its
//     imports, by its usual name. It must otherwise be real Go: no "..."
//     elisions; write a comment or call a prelude helper instead.
//   - Variables and imports a block leaves unused are not errors (a
//     snippet declares what the reader goes on to use); every other type
//     error is, reported at its line: "README.md:LINE: message",
//     "docs/flow.md:LINE: message".
//   - Each page is compiled on its own: a block may use the declarations
//     of another block of the same page (a type, a func), not of another
//     page.
//
// The blocks of one page go into one generated file, type-checked with
// go/types in the process; the packages it imports are read as export data that one
// `go list -export` builds (cached by the go command), so the test takes
// about a second once the build cache is warm.

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"go/ast"
	"go/importer"
	"go/parser"
	"go/scanner"
	"go/token"
	"go/types"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
)

// imports are the packages every block may use, by their usual names.
// pgxpool and stdlib are there for the page that shows a pgx pool handed
// to rowlease: the module requires pgx for its tests, the library links
// none of it.
var imports = []string{
	"context",
	"database/sql",
	"encoding/json",
	"errors",
	"fmt",
	"io",
	"net/http",
	"testing",
	"time",
	"github.com/jackc/pgx/v5/pgxpool",
	"github.com/jackc/pgx/v5/stdlib",
	"github.com/rowlease/rowlease/heartbeat",
	"github.com/rowlease/rowlease/httpapi",
	"github.com/rowlease/rowlease/lease",
	"github.com/rowlease/rowlease/request",
	"github.com/rowlease/rowlease/rowleasetest",
	"github.com/rowlease/rowlease/schema",
	"github.com/rowlease/rowlease/session",
	"github.com/rowlease/rowlease/toolexec",
}

// prelude declares the free names the blocks may use.
const prelude = `
// The application's own values, as the blocks' prose describes them.
var (
	ctx, shutdownCtx            context.Context
	db                          *sql.DB
	sid, cid, text              string // a message: session key, client request id, content
	cid2, text2                 string // another message of the same session
	reply, hookURL              string
	args                        json.RawMessage
	body                        io.Reader
	tools                       *toolexec.Registry
	agent                       request.Agent
	out                         request.Outcome // what Handle returned
	err                         error           // and its error
	deps                        any
	myagent                     struct { // an application's agent package
		Agent request.Agent
		Tools func(deps any) *toolexec.Registry
	}
)

// importStatement stands for an in-database tool's work in its transaction.
func importStatement(ctx context.Context, tx *sql.Tx) (json.RawMessage, error) { return nil, nil }

// saveNote stands for the application's own writes in a fenced transaction.
func saveNote(ctx context.Context, tx *sql.Tx) error { return nil }
`

var markerRE = regexp.MustCompile(`^<!--\s*readme:\s*(skip|same as|file)\s+(.*?)\s*-->$`)

// block is one ```go block of a Markdown text.
type block struct {
	line   int    // line number of its first line of code (1-based)
	code   string // its text, without the fences
	marker string // "", "skip", "same as" or "file"
	arg    string // the marker's reason or path
}

// blocks returns the ```go blocks of md.
func blocks(md string) ([]block, error) {
	lines := strings.Split(md, "\n")
	var out []block
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != "```go" {
			continue
		}
		b := block{line: i + 2}
		for j := i - 1; j >= 0; j-- {
			if s := strings.TrimSpace(lines[j]); s != "" {
				if m := markerRE.FindStringSubmatch(s); m != nil {
					b.marker, b.arg = m[1], m[2]
				}
				break
			}
		}
		end := i + 1
		for end < len(lines) && strings.TrimSpace(lines[end]) != "```" {
			end++
		}
		if end == len(lines) {
			return nil, fmt.Errorf("line %d: ```go block never closed", i+1)
		}
		b.code = strings.Join(lines[i+1:end], "\n")
		out = append(out, b)
		i = end
	}
	return out, nil
}

// wrap returns the Go text of one block, with a line directive that maps
// it back to name:b.line: as top-level declarations if it parses as such,
// else as the body of a function of its own.
func wrap(name string, i int, b block) string {
	fs := token.NewFileSet()
	if _, err := parser.ParseFile(fs, "", "package p\n"+b.code, parser.SkipObjectResolution); err == nil {
		return fmt.Sprintf("\n//line %s:%d\n%s\n", name, b.line, b.code)
	}
	return fmt.Sprintf("\nfunc block%d() {\n//line %s:%d\n%s\n}\n", i, name, b.line, b.code)
}

// header is the package clause, the imports and the prelude.
func header() string {
	var f strings.Builder
	f.WriteString("package readmeblocks\n\nimport (\n")
	for _, p := range imports {
		fmt.Fprintf(&f, "\t%q\n", p)
	}
	f.WriteString(")\n" + prelude)
	return f.String()
}

// syntaxErrors returns the syntax errors of src, as messages.
func syntaxErrors(src string) []string {
	_, err := parser.ParseFile(token.NewFileSet(), "readme_blocks.go", src, parser.ParseComments|parser.SkipObjectResolution)
	if err == nil {
		return nil
	}
	var list scanner.ErrorList
	if errors.As(err, &list) {
		var msgs []string
		for _, e := range list {
			msgs = append(msgs, e.Error())
		}
		return msgs
	}
	return []string{err.Error()}
}

var (
	exportsOnce sync.Once
	exports     map[string]string
	exportsErr  error
)

// exportData returns the export data file of every package the blocks
// may import, and of their dependencies, built by the go command.
func exportData(root string) (map[string]string, error) {
	exportsOnce.Do(func() {
		// go test puts its GOROOT/bin first on the test's PATH.
		goTool, err := exec.LookPath("go")
		if err != nil {
			exportsErr = err
			return
		}
		cmd := exec.Command(goTool, append([]string{"list", "-export", "-deps", "-json=ImportPath,Export"}, imports...)...)
		cmd.Dir = root
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		stdout, err := cmd.Output()
		if err != nil {
			exportsErr = fmt.Errorf("go list -export: %w: %s", err, stderr.String())
			return
		}
		exports = map[string]string{}
		dec := json.NewDecoder(bytes.NewReader(stdout))
		for {
			var p struct{ ImportPath, Export string }
			if err := dec.Decode(&p); err == io.EOF {
				break
			} else if err != nil {
				exportsErr = err
				return
			}
			exports[p.ImportPath] = p.Export
		}
	})
	return exports, exportsErr
}

// check type-checks the blocks of the Markdown text md (named name in
// messages) and returns one message per problem, "name:LINE: ...".
func check(t *testing.T, root, name, md string) []string {
	t.Helper()
	bs, err := blocks(md)
	if err != nil {
		return []string{name + ":" + err.Error()}
	}
	var msgs []string
	src := header()
	for i, b := range bs {
		switch b.marker {
		case "skip":
			continue
		case "same as":
			if msg := sameAs(root, b); msg != "" {
				msgs = append(msgs, fmt.Sprintf("%s:%d: %s", name, b.line, msg))
			}
			continue
		case "file":
			if msg := wholeFile(root, b); msg != "" {
				msgs = append(msgs, fmt.Sprintf("%s:%d: %s", name, b.line, msg))
			}
			continue
		}
		if !containsOnlyInComments(b.code) {
			msgs = append(msgs, fmt.Sprintf("%s:%d: \"...\" elides code: write real Go (see the conventions in readme_test.go)", name, b.line))
			continue
		}
		w := wrap(name, i, b)
		// A block that does not parse is reported alone, so that the
		// others are still type-checked.
		if errs := syntaxErrors(header() + w); errs != nil {
			msgs = append(msgs, errs...)
			continue
		}
		src += w
	}

	fset := token.NewFileSet()
	file, err := parser.ParseFile(fset, "readme_blocks.go", src, parser.ParseComments|parser.SkipObjectResolution)
	if err != nil {
		t.Fatalf("the blocks parse one by one but not together: %v", err)
	}
	exp, err := exportData(root)
	if err != nil {
		t.Fatal(err)
	}
	conf := types.Config{
		Importer: importer.ForCompiler(fset, "gc", func(path string) (io.ReadCloser, error) {
			f, ok := exp[path]
			if !ok || f == "" {
				return nil, fmt.Errorf("no export data for %q (add it to imports)", path)
			}
			return os.Open(f)
		}),
		Error: func(err error) {
			var te types.Error
			if errors.As(err, &te) {
				if te.Soft && (strings.Contains(te.Msg, "declared and not used") || strings.Contains(te.Msg, "imported and not used")) {
					return
				}
				p := te.Fset.Position(te.Pos)
				msgs = append(msgs, fmt.Sprintf("%s:%d:%d: %s", p.Filename, p.Line, p.Column, te.Msg))
				return
			}
			msgs = append(msgs, err.Error())
		},
	}
	_, _ = conf.Check("readmeblocks", fset, []*ast.File{file}, nil)
	return msgs
}

// containsOnlyInComments reports whether every "..." of code is inside a
// // comment (a variadic "...T" or "x..." is Go, and never written in a
// README block with spaces around it).
func containsOnlyInComments(code string) bool {
	for _, l := range strings.Split(code, "\n") {
		c := l
		if i := strings.Index(l, "//"); i >= 0 {
			c = l[:i]
		}
		if strings.Contains(c, "...") {
			return false
		}
	}
	return true
}

// sameAs checks that the lines of b appear, one after another and each
// trimmed of indentation, in the file b.arg.
func sameAs(root string, b block) string {
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(b.arg)))
	if err != nil {
		return fmt.Sprintf("marker \"same as %s\": %v", b.arg, err)
	}
	trim := func(s string) []string {
		var out []string
		for _, l := range strings.Split(s, "\n") {
			if l = strings.TrimSpace(l); l != "" {
				out = append(out, l)
			}
		}
		return out
	}
	want, have := trim(b.code), trim(string(data))
	for i := 0; i+len(want) <= len(have); i++ {
		if slices.Equal(have[i:i+len(want)], want) {
			return ""
		}
	}
	return fmt.Sprintf("the block's lines do not appear, in order, in %s (its marker says it is compiled there)", b.arg)
}

// wholeFile checks that b is the whole of the file b.arg, byte for byte
// (the block's text is what lies between its fences, so it ends in the
// file's final newline).
func wholeFile(root string, b block) string {
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(b.arg)))
	if err != nil {
		return fmt.Sprintf("marker \"file %s\": %v", b.arg, err)
	}
	if strings.TrimSuffix(string(data), "\n") == strings.TrimSuffix(b.code, "\n") {
		return ""
	}
	want, have := strings.Split(b.code, "\n"), strings.Split(string(data), "\n")
	for i := range min(len(want), len(have)) {
		if want[i] != have[i] {
			return fmt.Sprintf("the block differs from %s (its marker says it is that file) at the block's line %d: %q, the file has %q", b.arg, i+1, want[i], have[i])
		}
	}
	return fmt.Sprintf("the block differs from %s (its marker says it is that file): %d lines, the file %d", b.arg, len(want), len(have))
}

// TestReadmeQuickStart: README's first Go block is the quick start, a
// complete program: the whole of examples/quickstart/main.go, whose
// Example test runs it.
func TestReadmeQuickStart(t *testing.T) {
	root := repoRoot(t)
	md, err := os.ReadFile(filepath.Join(root, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	bs, err := blocks(string(md))
	if err != nil {
		t.Fatal(err)
	}
	if len(bs) == 0 {
		t.Fatal("README.md has no ```go block")
	}
	first := bs[0]
	if first.marker != "file" || first.arg != "examples/quickstart/main.go" {
		t.Fatalf("README.md:%d: the first Go block is not marked <!-- readme: file examples/quickstart/main.go --> (marker %q %q)", first.line, first.marker, first.arg)
	}
	if !strings.Contains(first.code, "\npackage main\n") && !strings.HasPrefix(first.code, "package main\n") {
		t.Errorf("README.md:%d: the quick start is not a package main", first.line)
	}
	if msg := wholeFile(root, first); msg != "" {
		t.Errorf("README.md:%d: %s", first.line, msg)
	}
}

// repoRoot is the directory of the module's go.mod.
func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = parent
	}
}

// pages returns README.md and every Markdown file under docs/, as paths
// relative to root with forward slashes, README.md first: the pages whose
// Go blocks, migration notes and links the tests check.
func pages(t *testing.T, root string) []string {
	t.Helper()
	var docs []string
	err := filepath.WalkDir(filepath.Join(root, "docs"), func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() && strings.HasSuffix(d.Name(), ".md") {
			rel, err := filepath.Rel(root, path)
			if err != nil {
				return err
			}
			docs = append(docs, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(docs) == 0 {
		t.Fatal("no Markdown page under docs/: is this the right directory?")
	}
	slices.Sort(docs)
	return append([]string{"README.md"}, docs...)
}

// readPage returns the text of the page name (relative to root).
func readPage(t *testing.T, root, name string) string {
	t.Helper()
	md, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
	if err != nil {
		t.Fatal(err)
	}
	return string(md)
}

func TestReadmeGoBlocks(t *testing.T) {
	root := repoRoot(t)
	total := 0
	for _, name := range pages(t, root) {
		md := readPage(t, root, name)
		bs, err := blocks(md)
		if err != nil {
			t.Fatalf("%s:%v", name, err)
		}
		if name == "README.md" && len(bs) == 0 {
			t.Fatal("README.md has no ```go block: is this the right file?")
		}
		total += len(bs)
		for _, msg := range check(t, root, name, md) {
			t.Error(msg)
		}
	}
	t.Logf("%d Go blocks checked", total)
}

// TestReadmeCheckFindsBrokenBlocks: the check itself reports a block that
// does not compile, at the README line of the error, and honours the
// markers.
func TestReadmeCheckFindsBrokenBlocks(t *testing.T) {
	root := repoRoot(t)
	md := strings.Join([]string{
		"# Title", // 1
		"",        // 2
		"```go",   // 3
		"l, err := lease.New[int64](lease.SQLite, lease.Table{}, lease.Options{})", // 4: fine
		"g, err := l.Acquire(ctx, db, 42, \"w\", time.Second)",                     // 5: fine
		"g.NoSuchField = 1",                  // 6: error
		"```",                                // 7
		"",                                   // 8
		"<!-- readme: skip pseudo-code -->",  // 9
		"```go",                              // 10
		"this is not Go at all",              // 11: skipped
		"```",                                // 12
		"```go",                              // 13
		"func Broken() int { return \"x\" }", // 14: error, top level
		"```",                                // 15
		"```go",                              // 16
		"runner, err := request.New(request.Config{DB: db, ...})", // 17: elision
		"```", // 18
		"<!-- readme: same as internal/testkit/readme/doc.go -->", // 19
		"```go",          // 20
		"package readme", // 21: appears there
		"```",            // 22
		"<!-- readme: same as internal/testkit/readme/doc.go -->", // 23
		"```go",             // 24
		"package elsewhere", // 25: does not
		"```",               // 26
		"<!-- readme: file internal/testkit/readme/doc.go -->", // 27
		"```go",          // 28
		"package readme", // 29: one line of it, not the whole file
		"```",            // 30
	}, "\n")
	msgs := check(t, root, "TEST.md", md)
	joined := strings.Join(msgs, "\n")
	for _, want := range []string{"TEST.md:6:", "TEST.md:14:", "TEST.md:17:", "TEST.md:25:", "TEST.md:29:"} {
		if !strings.Contains(joined, want) {
			t.Errorf("no problem reported at %s; got:\n%s", want, joined)
		}
	}
	for _, not := range []string{"TEST.md:4:", "TEST.md:5:", "TEST.md:11:", "TEST.md:21:"} {
		if strings.Contains(joined, not) {
			t.Errorf("a problem reported at %s, which is fine; got:\n%s", not, joined)
		}
	}
}
