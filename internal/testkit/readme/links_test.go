package readme_test

// TestReadmeLinks checks the links of README.md and of the pages under
// docs/, so that moving a page or renaming a heading cannot leave a link
// behind:
//
//   - A relative link or image ([text](path), ![alt](path), a reference
//     definition "[name]: path", or an HTML href or src) must point at a
//     file or directory of the repository, resolved from the page's own
//     directory (a path that starts with "/" from the repository root,
//     as GitHub does).
//   - A link with a #fragment into a Markdown file (the page itself when
//     the path is empty) must name one of that file's headings, as GitHub
//     makes its anchor: the heading's text, lowercased, spaces turned into
//     "-", every other character but letters, digits, "-" and "_" dropped;
//     a second heading with the same anchor gets "-1", a third "-2". An
//     HTML element's name or id is an anchor too. Only ATX headings
//     ("## Title") are read: the pages use no other kind.
//   - Links with a scheme (https:, mailto:) are not checked, nor anything
//     inside a code block or a `code span`.

import (
	"fmt"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"unicode"
)

func TestReadmeLinks(t *testing.T) {
	root := repoRoot(t)
	n := 0
	for _, name := range pages(t, root) {
		msgs, count := checkLinks(root, name)
		n += count
		for _, msg := range msgs {
			t.Error(msg)
		}
	}
	if n == 0 {
		t.Fatal("no relative link found: is the link parser broken?")
	}
	t.Logf("%d relative links checked", n)
}

// link is a link target found in a page.
type link struct {
	line   int    // 1-based line of the target
	target string // as written, without <> or a title
}

var (
	// [text](target "title") and ![alt](target); the text may hold one
	// level of brackets (an image inside a link), read again for links.
	inlineRE = regexp.MustCompile(`(!?)\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\(\s*(<[^>\n]*>|[^\s()]*(?:\([^\s()]*\)[^\s()]*)*)(?:\s+(?:"[^"]*"|'[^']*'|\([^)]*\)))?\s*\)`)
	// [name]: target
	refDefRE = regexp.MustCompile(`(?m)^ {0,3}\[[^\]\n]+\]:[ \t]*(<[^>\n]*>|\S+)`)
	// <a href="target">, <img src="target">
	htmlRefRE = regexp.MustCompile(`(?i)<(?:a|img)\b[^>]*?\b(?:href|src)\s*=\s*"([^"]*)"`)
	// <a name="anchor">, <... id="anchor">
	htmlAnchorRE = regexp.MustCompile(`(?i)<[a-z][a-z0-9]*\b[^>]*?\b(?:name|id)\s*=\s*"([^"]*)"`)
	// ## Heading ##
	headingRE = regexp.MustCompile(`^ {0,3}#{1,6}(?:[ \t]+(.*?))?(?:[ \t]+#+)?[ \t]*$`)
	// a URL scheme, or a protocol-relative URL
	schemeRE = regexp.MustCompile(`^(?:[a-zA-Z][a-zA-Z0-9+.-]*:|//)`)
	// an HTML comment (the readme markers)
	commentRE = regexp.MustCompile(`(?s)<!--.*?-->`)
)

// prose returns md with every code block, code span and HTML comment
// replaced by spaces (newlines kept, so that offsets keep their lines):
// what is left is where links and headings can be.
func prose(md string) string {
	b := []byte(md)
	blank := func(from, to int) {
		for i := from; i < to; i++ {
			if b[i] != '\n' {
				b[i] = ' '
			}
		}
	}
	// Fenced code blocks, ``` or ~~~, closed by a fence of the same kind.
	off, fence := 0, ""
	for _, l := range strings.SplitAfter(md, "\n") {
		s := strings.TrimSpace(l)
		switch {
		case fence == "" && (strings.HasPrefix(s, "```") || strings.HasPrefix(s, "~~~")):
			fence = s[:3]
			blank(off, off+len(l))
		case fence != "":
			if strings.HasPrefix(s, fence) && strings.Trim(s, fence[:1]) == "" {
				fence = ""
			}
			blank(off, off+len(l))
		}
		off += len(l)
	}
	// Code spans: a run of n backticks up to the next run of exactly n.
	s := string(b)
	for i := 0; i < len(s); {
		if s[i] != '`' {
			i++
			continue
		}
		n := 0
		for i+n < len(s) && s[i+n] == '`' {
			n++
		}
		closed := -1
		for j := i + n; j < len(s); {
			if s[j] != '`' {
				j++
				continue
			}
			m := 0
			for j+m < len(s) && s[j+m] == '`' {
				m++
			}
			if m == n {
				closed = j
				break
			}
			j += m
		}
		if closed < 0 {
			i += n
			continue
		}
		blank(i, closed+n)
		i = closed + n
	}
	for _, m := range commentRE.FindAllIndex(b, -1) {
		blank(m[0], m[1])
	}
	return string(b)
}

// links returns the link targets of the Markdown text md, outside code.
func links(md string) []link {
	text := prose(md)
	lineAt := func(off int) int { return 1 + strings.Count(text[:off], "\n") }
	var out []link
	add := func(target string, off int) {
		target = strings.TrimSuffix(strings.TrimPrefix(target, "<"), ">")
		out = append(out, link{line: lineAt(off), target: target})
	}
	var inline func(base int, s string)
	inline = func(base int, s string) {
		for _, m := range inlineRE.FindAllStringSubmatchIndex(s, -1) {
			inline(base+m[4], s[m[4]:m[5]]) // links inside the text
			add(s[m[6]:m[7]], base+m[6])
		}
	}
	inline(0, text)
	for _, m := range refDefRE.FindAllStringSubmatchIndex(text, -1) {
		add(text[m[2]:m[3]], m[2])
	}
	for _, m := range htmlRefRE.FindAllStringSubmatchIndex(text, -1) {
		add(text[m[2]:m[3]], m[2])
	}
	return out
}

// inlineText is a heading's text as GitHub renders it, for its anchor:
// links and images give their text, HTML tags and emphasis marks go.
var (
	linkTextRE = regexp.MustCompile(`!?\[((?:[^\[\]]|\[[^\[\]]*\])*)\]\([^)]*\)`)
	htmlTagRE  = regexp.MustCompile(`<[^>]*>`)
)

// anchor returns GitHub's anchor of a heading whose text is heading.
func anchor(heading string) string {
	s := linkTextRE.ReplaceAllString(heading, "$1")
	s = htmlTagRE.ReplaceAllString(s, "")
	var b strings.Builder
	for _, r := range strings.ToLower(strings.TrimSpace(s)) {
		switch {
		case r == ' ':
			b.WriteRune('-')
		case r == '-' || r == '_' || unicode.IsLetter(r) || unicode.IsDigit(r) || unicode.Is(unicode.Mn, r):
			b.WriteRune(r)
		}
	}
	return b.String()
}

// anchors returns the anchors of the Markdown text md: one per heading
// (numbered as GitHub numbers repeats), and every HTML name or id.
func anchors(md string) map[string]bool {
	text := prose(md)
	out := map[string]bool{}
	seen := map[string]int{}
	for _, l := range strings.Split(text, "\n") {
		m := headingRE.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		a := anchor(m[1])
		if n := seen[a]; n > 0 {
			seen[a]++
			a = fmt.Sprintf("%s-%d", a, n)
		} else {
			seen[a] = 1
		}
		out[a] = true
	}
	// An anchor of HTML is read from the page as written (a comment's
	// or a code block's is not one, but no page has those).
	for _, m := range htmlAnchorRE.FindAllStringSubmatch(md, -1) {
		out[m[1]] = true
	}
	return out
}

// checkLinks checks the relative links of the page name (a slash path
// relative to root) and returns one message per broken link,
// "name:LINE: ...", and how many relative links it checked.
func checkLinks(root, name string) (msgs []string, checked int) {
	data, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(name)))
	if err != nil {
		return []string{err.Error()}, 0
	}
	cache := map[string]map[string]bool{name: anchors(string(data))}
	for _, l := range links(string(data)) {
		if l.target == "" || schemeRE.MatchString(l.target) {
			continue
		}
		checked++
		fail := func(format string, args ...any) {
			msgs = append(msgs, fmt.Sprintf("%s:%d: link %q: %s", name, l.line, l.target, fmt.Sprintf(format, args...)))
		}
		p, frag, _ := strings.Cut(l.target, "#")
		p, _, _ = strings.Cut(p, "?")
		p, err := url.PathUnescape(p)
		if err != nil {
			fail("%v", err)
			continue
		}
		if frag, err = url.PathUnescape(frag); err != nil {
			fail("%v", err)
			continue
		}
		target := name // a bare #fragment: this page
		switch {
		case strings.HasPrefix(p, "/"):
			target = path.Clean(strings.TrimPrefix(p, "/"))
		case p != "":
			target = path.Join(path.Dir(name), p)
		}
		if target == ".." || strings.HasPrefix(target, "../") {
			fail("points outside the repository")
			continue
		}
		fi, err := os.Stat(filepath.Join(root, filepath.FromSlash(target)))
		if err != nil {
			fail("no such file or directory: %s", target)
			continue
		}
		if frag == "" || fi.IsDir() || !strings.HasSuffix(target, ".md") {
			continue
		}
		as, ok := cache[target]
		if !ok {
			md, err := os.ReadFile(filepath.Join(root, filepath.FromSlash(target)))
			if err != nil {
				fail("%v", err)
				continue
			}
			as = anchors(string(md))
			cache[target] = as
		}
		switch {
		case as[frag]:
		case as[strings.ToLower(frag)]:
			fail("%s has the anchor #%s, in lowercase", target, strings.ToLower(frag))
		default:
			fail("%s has no heading whose anchor is #%s", target, frag)
		}
	}
	return msgs, checked
}

// TestAnchor: GitHub's anchors of headings of the pages.
func TestAnchor(t *testing.T) {
	for heading, want := range map[string]string{
		"Databases": "databases",
		"When the session is busy: reject, queue or interrupt": "when-the-session-is-busy-reject-queue-or-interrupt",
		"Multi-primary clusters (MariaDB Galera)":              "multi-primary-clusters-mariadb-galera",
		"Other engines (from their documentation; not tested)": "other-engines-from-their-documentation-not-tested",
		"More than text: a message's metadata":                 "more-than-text-a-messages-metadata",
		"What is guaranteed, and what is not":                  "what-is-guaranteed-and-what-is-not",
		"`Run.Step` and snake_case":                            "runstep-and-snake_case",
		"[Sizing](docs/databases.md) the pool":                 "sizing-the-pool",
		"Modules, versions and tags ":                          "modules-versions-and-tags",
		"中文 標題":                                                "中文-標題",
	} {
		if got := anchor(heading); got != want {
			t.Errorf("anchor(%q) = %q, want %q", heading, got, want)
		}
	}
}

// TestLinkCheckFindsBrokenLinks: the check itself reports a link to a
// missing file and an anchor no heading makes, at the line of the link,
// and leaves good links, absolute URLs and code alone.
func TestLinkCheckFindsBrokenLinks(t *testing.T) {
	root := t.TempDir()
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(root, filepath.FromSlash(name))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("LICENSE", "x\n")
	write("docs/bench/chart.svg", "<svg/>\n")
	write("docs/other.md", strings.Join([]string{
		"# Other",
		"",
		"## Sizing the pool",
		"",
		"## Sizing the pool",
		"",
		`<a name="kept"></a>`,
	}, "\n"))
	write("docs/page.md", strings.Join([]string{
		"# Page",                              // 1
		"",                                    // 2
		"## When the session is busy: reject", // 3
		"",                                    // 4
		"[ok](other.md#sizing-the-pool) and [ok](other.md#sizing-the-pool-1)", // 5: fine
		"![chart](bench/chart.svg) [ok](../LICENSE) [ok](/LICENSE)",           // 6: fine
		"[ok](#when-the-session-is-busy-reject) [ok](other.md#kept)",          // 7: fine
		"[ok](https://example.com/x.md#nowhere) <http://example.com/>",        // 8: fine
		"[broken](missing.md)",                       // 9: no file
		"![broken](docs/bench/chart.svg)",            // 10: no file (relative to docs/)
		"[broken](other.md#sizing-the-pool-2)",       // 11: no such anchor
		"[broken](#When-the-session-is-busy-reject)", // 12: uppercase
		"[a link over",                               // 13
		"two lines](#nowhere)",                       // 14: no such anchor
		"`[code](missing.md)` is not a link",         // 15: fine
		"```",                                        // 16
		"[code](missing.md)",                         // 17: fine
		"```",                                        // 18
		"[![badge](missing.svg)](other.md)",          // 19: the image is broken
		"[ref]: ../../outside.md",                    // 20: outside
		`<img src="bench/gone.svg">`,                 // 21: no file
	}, "\n"))
	msgs, checked := checkLinks(root, "docs/page.md")
	joined := strings.Join(msgs, "\n")
	for _, want := range []string{":9:", ":10:", ":11:", ":12:", ":14:", ":19:", ":20:", ":21:"} {
		if !strings.Contains(joined, "docs/page.md"+want) {
			t.Errorf("no broken link reported at line %s; got:\n%s", want, joined)
		}
	}
	for _, not := range []string{":5:", ":6:", ":7:", ":8:", ":13:", ":15:", ":17:"} {
		if strings.Contains(joined, "docs/page.md"+not) {
			t.Errorf("a broken link reported at line %s, which is fine; got:\n%s", not, joined)
		}
	}
	if len(msgs) != 8 {
		t.Errorf("%d problems reported, want 8:\n%s", len(msgs), joined)
	}
	if checked != 16 {
		t.Errorf("%d relative links checked, want 16", checked)
	}
}
