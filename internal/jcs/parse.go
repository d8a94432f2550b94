package jcs

import (
	"fmt"
	"slices"
	"strconv"
	"unicode/utf16"
)

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
	return &SyntaxError{Reason: fmt.Sprintf(format, args...), Offset: p.pos}
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
func (p *parser) value(depth int) (Kind, error) {
	if p.pos >= len(p.data) {
		return 0, p.unexpected()
	}
	switch c := p.data[p.pos]; {
	case c == '{':
		return KindObject, p.object(depth + 1)
	case c == '[':
		return KindArray, p.array(depth + 1)
	case c == '"':
		s, err := p.str()
		if err != nil {
			return 0, err
		}
		p.out = appendString(p.out, s)
		return KindString, nil
	case c == '-' || ('0' <= c && c <= '9'):
		return KindNumber, p.number()
	case c == 't':
		return KindBool, p.literal("true")
	case c == 'f':
		return KindBool, p.literal("false")
	case c == 'n':
		return KindNull, p.literal("null")
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
	if depth > MaxDepth {
		return p.errorf("nesting deeper than %d levels", MaxDepth)
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
	if depth > MaxDepth {
		return p.errorf("nesting deeper than %d levels", MaxDepth)
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
			return &SyntaxError{
				Reason: "duplicate object key " + quoteTruncated(members[i].key),
				Offset: max(members[i].offset, members[i-1].offset),
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
