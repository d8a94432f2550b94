package toolexec

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"math/big"
	"slices"
	"strconv"
	"unicode/utf16"
	"unicode/utf8"
)

// ErrInvalidArguments is returned, wrapped, by [CanonicalArguments] when the
// tool-call arguments are not valid JSON, cannot be canonicalized under
// RFC 8785 (for example because of duplicate keys or an out-of-range
// number), hold an integer that a double does not hold exactly, or are not
// a JSON object. Use [errors.Is] to test for it.
var ErrInvalidArguments = errors.New("toolexec: invalid tool arguments")

// maxDepth is the maximum nesting depth of arrays and objects accepted by
// [Canonicalize]. A top-level object or array is at depth 1.
const maxDepth = 64

// maxSnippet bounds the number of input bytes echoed in error messages.
const maxSnippet = 32

// Canonicalize returns the RFC 8785 (JSON Canonicalization Scheme) form of
// the JSON text data.
//
// The output has no insignificant whitespace, object members are sorted by
// their names compared as sequences of UTF-16 code units, numbers are
// serialized as IEEE-754 doubles using the ECMAScript Number-to-String
// algorithm, and strings use the minimal escaping required by RFC 8785.
//
// Canonicalize is strict: it rejects empty input, syntactically invalid
// JSON, trailing data after the value, invalid UTF-8, escaped lone
// surrogates, duplicate object member names, numbers whose magnitude is too
// large for a double, and nesting deeper than 64 arrays/objects.
//
// Like RFC 8785, Canonicalize rounds every number to the nearest double,
// so 9007199254740993 becomes 9007199254740992; [CanonicalArguments], whose
// output is an idempotency key, refuses such an integer instead.
func Canonicalize(data []byte) ([]byte, error) {
	out, _, err := canonicalize(data, false)
	if err != nil {
		return nil, fmt.Errorf("toolexec: canonicalize JSON: %w", err)
	}
	return out, nil
}

// CanonicalArguments canonicalizes tool-call arguments, which must be a
// JSON object, with [Canonicalize]. It returns the canonical bytes and the
// lowercase hexadecimal SHA-256 digest of them, so that semantically equal
// arguments (for example differing only in whitespace, member order or
// number spelling such as 35 and 3.5e1) yield the same hash.
//
// Numbers are doubles (RFC 8785), and two arguments that differ only in a
// number the double rounds away would share one hash, so one would be
// taken for a retry of the other. CanonicalArguments therefore refuses a
// number written as an integer (digits only: no fraction, no exponent)
// whose value a double does not hold exactly: every integer of magnitude up
// to 2^53 is accepted, and a larger one only if it is exactly a double
// (such as 18014398509481984, 2^54). Send such a value (a 64-bit id, say)
// as a JSON string. A number written with a fraction or an exponent is a
// real number and is rounded to the nearest double as RFC 8785 specifies,
// as before: 0.1, 35.0, 3.5e1 and 1e30 are accepted, and 35, 35.0 and
// 3.5e1 are one value. No call accepted before changes its hash; the only
// calls refused now are those whose integer was being silently changed.
//
// Any failure is reported as an error wrapping [ErrInvalidArguments].
func CanonicalArguments(data []byte) (canonical []byte, hash string, err error) {
	out, kind, err := canonicalize(data, true)
	if err != nil {
		return nil, "", fmt.Errorf("%w: %w", ErrInvalidArguments, err)
	}
	if kind != kindObject {
		return nil, "", fmt.Errorf("%w: not a JSON object (got %s)", ErrInvalidArguments, kind)
	}
	sum := sha256.Sum256(out)
	return out, hex.EncodeToString(sum[:]), nil
}

// valueKind is the JSON type of a parsed value.
type valueKind int

const (
	kindNull valueKind = iota
	kindBool
	kindNumber
	kindString
	kindArray
	kindObject
)

// String names the value.
func (k valueKind) String() string {
	switch k {
	case kindNull:
		return "null"
	case kindBool:
		return "boolean"
	case kindNumber:
		return "number"
	case kindString:
		return "string"
	case kindArray:
		return "array"
	case kindObject:
		return "object"
	}
	return "unknown"
}

// syntaxError describes why and where the input was rejected.
type syntaxError struct {
	msg    string
	offset int
}

// Error describes the failure; it never contains a token.
func (e *syntaxError) Error() string {
	return fmt.Sprintf("%s at offset %d", e.msg, e.offset)
}

// canonicalize parses data as a single JSON value and returns its canonical
// form and the kind of the top-level value. With exactIntegers, a number
// written as an integer that a double does not hold exactly is an error.
func canonicalize(data []byte, exactIntegers bool) ([]byte, valueKind, error) {
	p := &parser{data: data, out: make([]byte, 0, len(data)), exactIntegers: exactIntegers}
	p.skipSpace()
	if p.pos >= len(p.data) {
		if len(p.data) == 0 {
			return nil, 0, errors.New("empty input")
		}
		return nil, 0, errors.New("input contains only whitespace")
	}
	kind, err := p.value(0)
	if err != nil {
		return nil, 0, err
	}
	p.skipSpace()
	if p.pos < len(p.data) {
		return nil, 0, p.errorf("trailing data after JSON value: %s", p.snippet(p.pos))
	}
	return p.out, kind, nil
}

// parser is a strict RFC 8259 recursive-descent parser that writes the
// RFC 8785 canonical form of what it parses to out.
type parser struct {
	data []byte
	pos  int
	out  []byte
	// exactIntegers refuses integer literals that a double rounds.
	exactIntegers bool
}

func (p *parser) errorf(format string, args ...any) error {
	return &syntaxError{msg: fmt.Sprintf(format, args...), offset: p.pos}
}

// snippet returns a quoted, length-limited excerpt of the input starting at
// offset i, for use in error messages.
func (p *parser) snippet(i int) string {
	rest := p.data[i:]
	if len(rest) > maxSnippet {
		return strconv.Quote(string(rest[:maxSnippet])) + "..."
	}
	return strconv.Quote(string(rest))
}

func quoteTruncated(s string) string {
	if len(s) > maxSnippet {
		return strconv.Quote(s[:maxSnippet]) + "..."
	}
	return strconv.Quote(s)
}

func (p *parser) skipSpace() {
	for p.pos < len(p.data) {
		switch p.data[p.pos] {
		case ' ', '\t', '\n', '\r':
			p.pos++
		default:
			return
		}
	}
}

func (p *parser) unexpected() error {
	if p.pos >= len(p.data) {
		return p.errorf("unexpected end of input")
	}
	return p.errorf("unexpected input %s", p.snippet(p.pos))
}

// value parses one JSON value starting at p.pos (no leading whitespace).
// depth is the number of enclosing arrays/objects.
func (p *parser) value(depth int) (valueKind, error) {
	if p.pos >= len(p.data) {
		return 0, p.unexpected()
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return kindObject, p.object(depth + 1)
	case c == '[':
		return kindArray, p.array(depth + 1)
	case c == '"':
		s, err := p.str()
		if err != nil {
			return 0, err
		}
		p.out = appendString(p.out, s)
		return kindString, nil
	case c == '-' || ('0' <= c && c <= '9'):
		return kindNumber, p.number()
	case c == 't':
		return kindBool, p.literal("true")
	case c == 'f':
		return kindBool, p.literal("false")
	case c == 'n':
		return kindNull, p.literal("null")
	}
	return 0, p.unexpected()
}

func (p *parser) literal(lit string) error {
	if len(p.data)-p.pos < len(lit) || string(p.data[p.pos:p.pos+len(lit)]) != lit {
		return p.errorf("invalid literal %s", p.snippet(p.pos))
	}
	p.pos += len(lit)
	p.out = append(p.out, lit...)
	return nil
}

func (p *parser) array(depth int) error {
	if depth > maxDepth {
		return p.errorf("nesting deeper than %d levels", maxDepth)
	}
	p.pos++ // '['
	p.out = append(p.out, '[')
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == ']' {
		p.pos++
		p.out = append(p.out, ']')
		return nil
	}
	for {
		if _, err := p.value(depth); err != nil {
			return err
		}
		p.skipSpace()
		if p.pos >= len(p.data) {
			return p.unexpected()
		}
		switch p.data[p.pos] {
		case ',':
			p.pos++
			p.out = append(p.out, ',')
			p.skipSpace()
		case ']':
			p.pos++
			p.out = append(p.out, ']')
			return nil
		default:
			return p.errorf("expected ',' or ']' in array, found %s", p.snippet(p.pos))
		}
	}
}

// member is one parsed object member awaiting sorting.
type member struct {
	key    string
	key16  []uint16 // key as UTF-16 code units, the RFC 8785 sort key
	value  []byte   // canonical form of the value
	offset int      // input offset of the key, for error messages
}

func (p *parser) object(depth int) error {
	if depth > maxDepth {
		return p.errorf("nesting deeper than %d levels", maxDepth)
	}
	p.pos++ // '{'
	p.skipSpace()
	if p.pos < len(p.data) && p.data[p.pos] == '}' {
		p.pos++
		p.out = append(p.out, '{', '}')
		return nil
	}
	var members []member
	for {
		if p.pos >= len(p.data) {
			return p.unexpected()
		}
		if p.data[p.pos] != '"' {
			return p.errorf("expected string object key, found %s", p.snippet(p.pos))
		}
		keyOffset := p.pos
		key, err := p.str()
		if err != nil {
			return err
		}
		p.skipSpace()
		if p.pos >= len(p.data) {
			return p.unexpected()
		}
		if p.data[p.pos] != ':' {
			return p.errorf("expected ':' after object key, found %s", p.snippet(p.pos))
		}
		p.pos++
		p.skipSpace()
		// Canonicalize the value into the tail of p.out, then move it aside
		// so the members can be emitted in sorted order.
		start := len(p.out)
		if _, err := p.value(depth); err != nil {
			return err
		}
		val := slices.Clone(p.out[start:])
		p.out = p.out[:start]
		members = append(members, member{
			key:    key,
			key16:  utf16.Encode([]rune(key)),
			value:  val,
			offset: keyOffset,
		})
		p.skipSpace()
		if p.pos >= len(p.data) {
			return p.unexpected()
		}
		c := p.data[p.pos]
		if c == ',' {
			p.pos++
			p.skipSpace()
			continue
		}
		if c != '}' {
			return p.errorf("expected ',' or '}' in object, found %s", p.snippet(p.pos))
		}
		p.pos++
		break
	}

	slices.SortStableFunc(members, func(a, b member) int {
		return slices.Compare(a.key16, b.key16)
	})
	for i := 1; i < len(members); i++ {
		if members[i].key == members[i-1].key {
			return &syntaxError{
				msg:    "duplicate object key " + quoteTruncated(members[i].key),
				offset: max(members[i].offset, members[i-1].offset),
			}
		}
	}

	p.out = append(p.out, '{')
	for i, m := range members {
		if i > 0 {
			p.out = append(p.out, ',')
		}
		p.out = appendString(p.out, m.key)
		p.out = append(p.out, ':')
		p.out = append(p.out, m.value...)
	}
	p.out = append(p.out, '}')
	return nil
}

// str parses a JSON string starting at the opening quote and returns its
// decoded value. It rejects raw control characters, invalid escapes,
// invalid UTF-8 and escaped lone surrogates.
func (p *parser) str() (string, error) {
	p.pos++ // opening '"'
	var buf []byte
	for {
		if p.pos >= len(p.data) {
			return "", p.errorf("unterminated string")
		}
		c := p.data[p.pos]
		switch {
		case c == '"':
			p.pos++
			return string(buf), nil
		case c == '\\':
			if err := p.escape(&buf); err != nil {
				return "", err
			}
		case c < 0x20:
			return "", p.errorf("unescaped control character %#02x in string", c)
		case c < utf8.RuneSelf:
			buf = append(buf, c)
			p.pos++
		default:
			r, size := utf8.DecodeRune(p.data[p.pos:])
			if r == utf8.RuneError && size <= 1 {
				return "", p.errorf("invalid UTF-8 in string")
			}
			buf = append(buf, p.data[p.pos:p.pos+size]...)
			p.pos += size
		}
	}
}

// escape decodes the escape sequence at p.pos (which is a backslash) and
// appends its UTF-8 encoding to buf.
func (p *parser) escape(buf *[]byte) error {
	if p.pos+1 >= len(p.data) {
		p.pos = len(p.data)
		return p.errorf("unterminated string")
	}
	var b byte
	switch p.data[p.pos+1] {
	case '"':
		b = '"'
	case '\\':
		b = '\\'
	case '/':
		b = '/'
	case 'b':
		b = '\b'
	case 'f':
		b = '\f'
	case 'n':
		b = '\n'
	case 'r':
		b = '\r'
	case 't':
		b = '\t'
	case 'u':
		start := p.pos
		r, err := p.hex4()
		if err != nil {
			return err
		}
		switch {
		case utf16.IsSurrogate(r) && r < 0xdc00:
			// High surrogate: must be followed by an escaped low surrogate.
			if p.pos+1 < len(p.data) && p.data[p.pos] == '\\' && p.data[p.pos+1] == 'u' {
				r2, err := p.hex4()
				if err != nil {
					return err
				}
				if dec := utf16.DecodeRune(r, r2); dec != utf8.RuneError {
					*buf = utf8.AppendRune(*buf, dec)
					return nil
				}
			}
			p.pos = start
			return p.errorf("lone surrogate escape \\u%04x in string", r)
		case utf16.IsSurrogate(r):
			p.pos = start
			return p.errorf("lone surrogate escape \\u%04x in string", r)
		}
		*buf = utf8.AppendRune(*buf, r)
		return nil
	default:
		p.pos++
		return p.errorf("invalid escape sequence in string")
	}
	*buf = append(*buf, b)
	p.pos += 2
	return nil
}

// hex4 parses a \uXXXX escape at p.pos and advances past it.
func (p *parser) hex4() (rune, error) {
	if len(p.data)-p.pos < 6 {
		return 0, p.errorf("truncated \\u escape in string")
	}
	var r rune
	for _, c := range p.data[p.pos+2 : p.pos+6] {
		var v byte
		switch {
		case '0' <= c && c <= '9':
			v = c - '0'
		case 'a' <= c && c <= 'f':
			v = c - 'a' + 10
		case 'A' <= c && c <= 'F':
			v = c - 'A' + 10
		default:
			return 0, p.errorf("invalid \\u escape in string")
		}
		r = r<<4 | rune(v)
	}
	p.pos += 6
	return r, nil
}

// number parses an RFC 8259 number at p.pos and appends its canonical form.
func (p *parser) number() error {
	start := p.pos
	d := p.data
	i := p.pos
	if i < len(d) && d[i] == '-' {
		i++
	}
	intStart := i
	switch {
	case i < len(d) && d[i] == '0':
		i++
	case i < len(d) && '1' <= d[i] && d[i] <= '9':
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
	default:
		p.pos = i
		return p.errorf("invalid number %s", p.snippet(start))
	}
	intEnd := i
	if i < len(d) && d[i] == '.' {
		i++
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			p.pos = i
			return p.errorf("invalid number %s: missing digits after decimal point", p.snippet(start))
		}
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
	}
	if i < len(d) && (d[i] == 'e' || d[i] == 'E') {
		i++
		if i < len(d) && (d[i] == '+' || d[i] == '-') {
			i++
		}
		if i >= len(d) || d[i] < '0' || d[i] > '9' {
			p.pos = i
			return p.errorf("invalid number %s: missing exponent digits", p.snippet(start))
		}
		for i < len(d) && '0' <= d[i] && d[i] <= '9' {
			i++
		}
	}
	f, err := strconv.ParseFloat(string(d[start:i]), 64)
	if err != nil || math.IsInf(f, 0) || math.IsNaN(f) {
		p.pos = start
		lit := string(d[start:i])
		return p.errorf("number %s out of range for IEEE-754 double", quoteTruncated(lit))
	}
	// Every integer of at most 15 digits is below 2^53 and so exact.
	if p.exactIntegers && intEnd == i && intEnd-intStart > 15 && !exactInteger(d[start:i], f) {
		p.pos = start
		return p.errorf("integer %s is not exact as an IEEE-754 double (read as %s); send it as a string",
			quoteTruncated(string(d[start:i])), appendNumber(nil, f))
	}
	p.pos = i
	p.out = appendNumber(p.out, f)
	return nil
}

// exactInteger reports whether the integer literal lit (an optional minus
// and digits, as validated by number) has exactly the value of f, the
// double it parses to.
func exactInteger(lit []byte, f float64) bool {
	want, ok := new(big.Int).SetString(string(lit), 10)
	if !ok {
		return false
	}
	got, acc := new(big.Float).SetFloat64(f).Int(nil)
	return acc == big.Exact && got.Cmp(want) == 0
}

// appendNumber appends the ECMAScript Number.prototype.toString form of the
// finite double f (RFC 8785 section 3.2.2.3).
func appendNumber(dst []byte, f float64) []byte {
	if f == 0 {
		return append(dst, '0') // also covers -0
	}
	if f < 0 {
		dst = append(dst, '-')
		f = -f
	}
	// Shortest round-tripping digits in the form d.ddde±x.
	var tmp [32]byte
	e := strconv.AppendFloat(tmp[:0], f, 'e', -1, 64)
	ePos := slices.Index(e, 'e')
	exp, _ := strconv.Atoi(string(e[ePos+1:]))
	digits := make([]byte, 0, ePos)
	for _, c := range e[:ePos] {
		if c != '.' {
			digits = append(digits, c)
		}
	}
	// ECMAScript terms: the value is 0.digits × 10^n, with k digits.
	k := len(digits)
	n := exp + 1
	switch {
	case k <= n && n <= 21:
		dst = append(dst, digits...)
		for range n - k {
			dst = append(dst, '0')
		}
	case 0 < n && n <= 21:
		dst = append(dst, digits[:n]...)
		dst = append(dst, '.')
		dst = append(dst, digits[n:]...)
	case -6 < n && n <= 0:
		dst = append(dst, '0', '.')
		for range -n {
			dst = append(dst, '0')
		}
		dst = append(dst, digits...)
	default:
		dst = append(dst, digits[0])
		if k > 1 {
			dst = append(dst, '.')
			dst = append(dst, digits[1:]...)
		}
		dst = append(dst, 'e')
		if n-1 >= 0 {
			dst = append(dst, '+')
		}
		dst = strconv.AppendInt(dst, int64(n-1), 10)
	}
	return dst
}

// appendString appends s as a JSON string using RFC 8785 escaping: only '"',
// '\\' and control characters are escaped, using the two-character forms
// where JSON has them and \u00xx (lowercase hex) otherwise.
func appendString(dst []byte, s string) []byte {
	const hexDigits = "0123456789abcdef"
	dst = append(dst, '"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch c {
		case '"':
			dst = append(dst, '\\', '"')
		case '\\':
			dst = append(dst, '\\', '\\')
		case '\b':
			dst = append(dst, '\\', 'b')
		case '\t':
			dst = append(dst, '\\', 't')
		case '\n':
			dst = append(dst, '\\', 'n')
		case '\f':
			dst = append(dst, '\\', 'f')
		case '\r':
			dst = append(dst, '\\', 'r')
		default:
			if c < 0x20 {
				dst = append(dst, '\\', 'u', '0', '0', hexDigits[c>>4], hexDigits[c&0xf])
			} else {
				dst = append(dst, c)
			}
		}
	}
	return append(dst, '"')
}
