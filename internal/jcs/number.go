package jcs

import (
	"math"
	"math/big"
	"slices"
	"strconv"
)

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
