package jcs_test

import (
	"bytes"
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"

	"github.com/rowlease/rowlease/internal/jcs"
)

// FuzzCanonicalize: whatever the input, Canonicalize either refuses it
// with a short *SyntaxError, or gives a canonical form of the same value
// (see checkCanonicalOutput) and its kind; CanonicalizeExact refuses what
// Canonicalize refuses and, of the rest, exactly the texts holding an
// integer a double rounds (an independent oracle: hasInexactInteger),
// saying to send it as a string; what it accepts it gives the same bytes.
func FuzzCanonicalize(f *testing.F) {
	seeds := []string{
		`{}`, `[]`, `null`, `true`, `0`, `-0`, `35`, `35.0`, `3.5e1`, `1e21`, `1e-7`,
		`0.000001`, `5e-324`, `1.7976931348623157e308`, `1e400`, `9007199254740993`,
		`333333333.33333329`, `"\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/"`,
		`{"\u20ac":1,"\r":2,"\ufb33":3,"1":4,"\ud83d\ude00":5,"\u0080":6,"\u00f6":7}`,
		`{"a":{"b":[1,{"d":2,"c":3}]},"a2":null}`,
		`{"a":1,"a":2}`, `"\ud800"`, `"\udc00\ud800"`, "\"\xff\"", `{"a":1}x`,
		`[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]`,
		" {\n\"k\" : [ 1 , 2.50 , \"x\" ] } ",
		`"\u0000\u001f\b\f\n\r\t<>&\u2028"`,
		`0.100000000000000000000000000000001`, `1e-400`, `-1e-400`, `123456789012345678901234567890`,
		`{"id":9007199254740993}`, `{"id":9007199254740992}`, `{"id":-9007199254740993}`,
		`{"id":1152921504606847000}`, `{"id":1152921504606846976}`, `{"id":9007199254740993.0}`,
		`{"id":[18446744073709551615,1e30,0.1]}`,
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, in []byte) {
		out, kind, err := jcs.Canonicalize(in)
		exact, exactKind, eerr := jcs.CanonicalizeExact(in)
		if eerr != nil && !errors.Is(eerr, jcs.ErrInvalid) {
			t.Fatalf("CanonicalizeExact error does not match jcs.ErrInvalid: %v", eerr)
		}
		if err != nil {
			if !errors.Is(err, jcs.ErrInvalid) {
				t.Fatalf("Canonicalize error does not match jcs.ErrInvalid: %v", err)
			}
			if eerr == nil {
				t.Fatalf("CanonicalizeExact accepted what Canonicalize rejected: %q: %v", in, err)
			}
			if len(err.Error()) > 300 {
				t.Fatalf("error message too long (%d bytes): %.300s", len(err.Error()), err)
			}
			return
		}
		if want := kindOf(out); kind != want {
			t.Fatalf("kind of %q: %v, want %v", out, kind, want)
		}
		switch inexact := hasInexactInteger(in); {
		case eerr == nil && inexact:
			t.Fatalf("CanonicalizeExact accepted an integer a double rounds: %q -> %q", in, exact)
		case eerr != nil && !inexact:
			t.Fatalf("CanonicalizeExact rejected %q, which holds no integer a double rounds: %v", in, eerr)
		case eerr != nil:
			if !strings.Contains(eerr.Error(), "send it as a string") {
				t.Fatalf("refusal of an inexact integer does not say to send a string: %v", eerr)
			}
		case !bytes.Equal(exact, out) || exactKind != kind:
			t.Fatalf("CanonicalizeExact gave %q (%v), Canonicalize %q (%v)", exact, exactKind, out, kind)
		}
		checkCanonicalOutput(t, in, out)
	})
}

// kindOf is the kind of the canonical JSON text out, from its first byte.
func kindOf(out []byte) jcs.Kind {
	switch out[0] {
	case '{':
		return jcs.KindObject
	case '[':
		return jcs.KindArray
	case '"':
		return jcs.KindString
	case 't', 'f':
		return jcs.KindBool
	case 'n':
		return jcs.KindNull
	}
	return jcs.KindNumber
}

// FuzzNumberFormat checks that every finite double serializes to a string
// that parses back to the same value, is canonical, and matches the
// ECMAScript layout rules.
func FuzzNumberFormat(f *testing.F) {
	for _, b := range []uint64{0, 1, 0x7fefffffffffffff, 0x444b1ae4d6e2ef50, 0x3eb0c6f7a0b5ed8d, 0x3eb0c6f7a0b5ed8c, 0x41b3de4355555555} {
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, bits uint64) {
		v := math.Float64frombits(bits)
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return
		}
		out, _, err := jcs.Canonicalize([]byte(strconv.FormatFloat(v, 'e', 16, 64)))
		if err != nil {
			t.Fatalf("%v (%#x): %v", v, bits, err)
		}
		s := string(out)
		back, err := strconv.ParseFloat(s, 64)
		if err != nil || back != v {
			t.Fatalf("%v (%#x) -> %q -> %v, %v", v, bits, s, back, err)
		}
		a := math.Abs(v)
		hasExp := strings.ContainsRune(s, 'e')
		if wantExp := a != 0 && (a >= 1e21 || a < 1e-6); hasExp != wantExp {
			t.Fatalf("%v -> %q: exponent form = %v, want %v", v, s, hasExp, wantExp)
		}
		if strings.ContainsAny(s, "E") || strings.HasSuffix(s, ".") || strings.Contains(s, ".e") {
			t.Fatalf("%v -> %q: malformed", v, s)
		}
		if strings.Contains(s, ".") && !hasExp && strings.HasSuffix(s, "0") {
			t.Fatalf("%v -> %q: trailing zero in fraction", v, s)
		}
		again, _, err := jcs.Canonicalize([]byte(s))
		if err != nil || string(again) != s {
			t.Fatalf("%q not idempotent: %q, %v", s, again, err)
		}
	})
}
