package jcs_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"math/big"
	"strings"
	"testing"

	"github.com/rowlease/rowlease/internal/jcs"
)

// TestCanonicalizeExactRefusesInexactIntegers: a number written as an
// integer (no fraction, no exponent) that an IEEE-754 double does not hold
// exactly would be rounded by RFC 8785, so two distinct ids above 2^53
// would get one canonical form. CanonicalizeExact refuses it and asks for
// a string.
func TestCanonicalizeExactRefusesInexactIntegers(t *testing.T) {
	refused := []struct{ in, lit string }{
		{`{"id":9007199254740993}`, "9007199254740993"},
		{`{"id":-9007199254740993}`, "-9007199254740993"},
		{`{"id":9007199254740995}`, "9007199254740995"},
		{`{"id":123456789012345678901}`, "123456789012345678901"},
		{`{"id":9223372036854775807}`, "9223372036854775807"},   // max int64
		{`{"id":18446744073709551615}`, "18446744073709551615"}, // max uint64
		// The shortest spelling of 2^60 is not 2^60: as an id it would
		// collide with 1152921504606846976.
		{`{"id":1152921504606847000}`, "1152921504606847000"},
		{`{"ids":[1,2,9007199254740993]}`, "9007199254740993"},
		{`{"a":{"b":[{"c":9007199254740993}]}}`, "9007199254740993"},
		{`{"a":1.5,"id":1234567890123456789}`, "1234567890123456789"},
	}
	for _, tt := range refused {
		t.Run("refused "+tt.in, func(t *testing.T) {
			canon, _, err := jcs.CanonicalizeExact([]byte(tt.in))
			canonIsErr(t, err)
			canonEqual(t, true, errors.Is(err, jcs.ErrInvalid), err)
			canonEqual(t, true, strings.Contains(err.Error(), tt.lit), err.Error())
			canonEqual(t, true, strings.Contains(err.Error(), "send it as a string"), err.Error())
			canonEqual(t, 0, len(canon))
		})
	}

	// Everything that was valid and meant what it said keeps its
	// canonical form.
	accepted := []struct{ in, want string }{
		{`{"id":9007199254740992}`, `{"id":9007199254740992}`},   // 2^53
		{`{"id":9007199254740991}`, `{"id":9007199254740991}`},   // 2^53-1
		{`{"id":-9007199254740992}`, `{"id":-9007199254740992}`}, // -2^53
		{`{"id":9007199254740994}`, `{"id":9007199254740994}`},   // even: exact
		{`{"id":18014398509481984}`, `{"id":18014398509481984}`}, // 2^54
		{`{"id":1152921504606846976}`, `{"id":1152921504606847000}`},
		{`{"id":100000000000000000000}`, `{"id":100000000000000000000}`}, // 1e20, exact
		{`{"id":999999999999999}`, `{"id":999999999999999}`},
		{`{"id":0}`, `{"id":0}`},
		{`{"id":-0}`, `{"id":0}`},
		{`{"amount":35}`, `{"amount":35}`},
		{`{"amount":35.0}`, `{"amount":35}`},
		{`{"amount":3.5e1}`, `{"amount":35}`},
		{`{"amount":350e-1}`, `{"amount":35}`},
		{`{"amount":0.1}`, `{"amount":0.1}`},
		{`{"amount":0.30000000000000004}`, `{"amount":0.30000000000000004}`},
		// Numbers with a fraction or an exponent are real numbers, rounded
		// to the nearest double as RFC 8785 specifies.
		{`{"n":1E30}`, `{"n":1e+30}`},
		{`{"n":333333333.33333329}`, `{"n":333333333.3333333}`},
		{`{"n":1.152921504606847e18}`, `{"n":1152921504606847000}`},
		{`{"n":9007199254740993.0}`, `{"n":9007199254740992}`},
		{`{"n":1.7976931348623157e308}`, `{"n":1.7976931348623157e+308}`},
		// A large id sent as a string is kept as written.
		{`{"id":"9007199254740993"}`, `{"id":"9007199254740993"}`},
	}
	for _, tt := range accepted {
		t.Run("accepted "+tt.in, func(t *testing.T) {
			canon, _, err := jcs.CanonicalizeExact([]byte(tt.in))
			canonNoErr(t, err)
			canonEqual(t, tt.want, string(canon))
		})
	}

	// Canonicalize is plain RFC 8785 and still rounds: only
	// CanonicalizeExact holds integers to exactness.
	got, _, err := jcs.Canonicalize([]byte(`9007199254740993`))
	canonNoErr(t, err)
	canonEqual(t, "9007199254740992", string(got))
}

// hasInexactInteger is an independent oracle for the rule: it reports
// whether the JSON text in holds a number written as an integer whose value
// a double does not hold exactly.
func hasInexactInteger(in []byte) bool {
	dec := json.NewDecoder(bytes.NewReader(in))
	dec.UseNumber()
	for {
		tok, err := dec.Token()
		if err != nil {
			return false
		}
		n, ok := tok.(json.Number)
		if !ok || strings.ContainsAny(string(n), ".eE") {
			continue
		}
		want, ok := new(big.Int).SetString(string(n), 10)
		if !ok {
			continue
		}
		f, err := n.Float64()
		if err != nil {
			continue // out of range: refused for that reason
		}
		got, _ := big.NewFloat(f).Int(nil)
		if got.Cmp(want) != 0 {
			return true
		}
	}
}
