package jcs

import (
	"unicode/utf16"
	"unicode/utf8"
)

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
