package jcs_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"testing"
	"unicode/utf16"

	"github.com/rowlease/rowlease/internal/jcs"
)

// TestCanonicalizeRFC8785Sample is the example from RFC 8785 section 3.2.2.
func TestCanonicalizeRFC8785Sample(t *testing.T) {
	in := `{
  "numbers": [333333333.33333329, 1E30, 4.50,
              2e-3, 0.000000000000000000000000001],
  "string": "\u20ac$\u000F\u000aA'\u0042\u0022\u005c\\\"\/",
  "literals": [null, true, false]
}`
	want := `{"literals":[null,true,false],"numbers":[333333333.3333333,1e+30,4.5,0.002,1e-27],"string":"€$\u000f\nA'B\"\\\\\"/"}`
	got, _, err := jcs.Canonicalize([]byte(in))
	canonNoErr(t, err)
	canonEqual(t, want, string(got))
}

// TestCanonicalizeKeyOrder is the sorting example from RFC 8785 section
// 3.2.3: keys are ordered by UTF-16 code units, so U+1F600 (encoded as the
// surrogate pair D83D DE00) sorts before U+FB33.
func TestCanonicalizeKeyOrder(t *testing.T) {
	in := `{
  "\u20ac": "Euro Sign",
  "\r": "Carriage Return",
  "\ufb33": "Hebrew Letter Dalet With Dagesh",
  "1": "One",
  "\ud83d\ude00": "Emoji: Grinning Face",
  "\u0080": "Control",
  "\u00f6": "Latin Small Letter O With Diaeresis"
}`
	want := "{" +
		`"\r":"Carriage Return",` +
		`"1":"One",` +
		"\"\u0080\":\"Control\"," +
		"\"\u00f6\":\"Latin Small Letter O With Diaeresis\"," +
		"\"\u20ac\":\"Euro Sign\"," +
		"\"\U0001F600\":\"Emoji: Grinning Face\"," +
		"\"\uFB33\":\"Hebrew Letter Dalet With Dagesh\"" +
		"}"
	got, _, err := jcs.Canonicalize([]byte(in))
	canonNoErr(t, err)
	canonEqual(t, want, string(got))

	// The same keys given as raw UTF-8 must sort identically (a UTF-8 byte
	// sort would put U+FB33 before U+1F600).
	raw := "{\"\uFB33\":1,\"\U0001F600\":2,\"\uE000\":3,\"\uFFFF\":4}"
	got, _, err = jcs.Canonicalize([]byte(raw))
	canonNoErr(t, err)
	canonEqual(t, "{\"\U0001F600\":2,\"\uE000\":3,\"\uFB33\":1,\"\uFFFF\":4}", string(got))
}

func TestCanonicalize(t *testing.T) {
	tests := []struct {
		name, in, want string
	}{
		{"null", `null`, `null`},
		{"true", ` true `, `true`},
		{"false", "\t\r\nfalse\n", `false`},
		{"empty object", `{ }`, `{}`},
		{"empty array", `[ ]`, `[]`},
		{"empty string", `""`, `""`},
		{"whitespace removed", " { \"b\" : [ 1 , 2 ] , \"a\" : { } } ", `{"a":{},"b":[1,2]}`},
		{"nested sort", `{"b":{"z":1,"y":[{"d":0,"c":0}]},"a":[3,{"k":null,"j":true}]}`,
			`{"a":[3,{"j":true,"k":null}],"b":{"y":[{"c":0,"d":0}],"z":1}}`},
		{"array order kept", `[3,1,2]`, `[3,1,2]`},
		{"prefix key sorts first", `{"ab":1,"a":2,"":3}`, `{"":3,"a":2,"ab":1}`},
		{"uppercase before lowercase", `{"a":1,"B":2}`, `{"B":2,"a":1}`},
		{"35", `35`, `35`},
		{"35.0", `35.0`, `35`},
		{"3.5e1", `3.5e1`, `35`},
		{"350E-1", `350E-1`, `35`},
		{"minus zero", `-0`, `0`},
		{"minus zero float", `-0.0e5`, `0`},
		{"underflow to zero", `1e-400`, `0`},
		{"long mantissa", `0.100000000000000000000000000000000000000000001`, `0.1`},
		{"huge exponent zero mantissa", `0e99999999999`, `0`},
		{"escape short forms", `"\b\t\n\f\r"`, `"\b\t\n\f\r"`},
		{"control escapes lowercase", `"\u0000\u001F\u000B\u007f"`, "\"\\u0000\\u001f\\u000b\x7f\""},
		{"solidus unescaped", `"\/"`, `"/"`},
		{"html not escaped", `"<a&b>\u003c\u2028\u2029"`, "\"<a&b><\u2028\u2029\""},
		{"non-ASCII raw", `"\u00e9\u4e2d\ud83d\ude00"`, `"é中😀"`},
		{"raw UTF-8 passes", `"é中😀"`, `"é中😀"`},
		{"noncharacter passes", `"\uffff"`, "\"\uffff\""},
		{"quote and backslash", `"\"\\"`, `"\"\\"`},
		{"nested depth ok", strings.Repeat("[", canonMaxDepth) + strings.Repeat("]", canonMaxDepth),
			strings.Repeat("[", canonMaxDepth) + strings.Repeat("]", canonMaxDepth)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, _, err := jcs.Canonicalize([]byte(tt.in))
			canonNoErr(t, err)
			canonEqual(t, tt.want, string(got))
		})
	}
}

// TestNumberSerialization checks the IEEE-754 → string table of RFC 8785
// Appendix B plus further ECMAScript Number::toString cases.
func TestNumberSerialization(t *testing.T) {
	bitsTests := []struct {
		bits uint64
		want string
	}{
		{0x0000000000000000, "0"},
		{0x8000000000000000, "0"},
		{0x0000000000000001, "5e-324"},
		{0x8000000000000001, "-5e-324"},
		{0x7fefffffffffffff, "1.7976931348623157e+308"},
		{0xffefffffffffffff, "-1.7976931348623157e+308"},
		{0x4340000000000000, "9007199254740992"},
		{0xc340000000000000, "-9007199254740992"},
		{0x4430000000000000, "295147905179352830000"},
		{0x44b52d02c7e14af5, "9.999999999999997e+22"},
		{0x44b52d02c7e14af6, "1e+23"},
		{0x44b52d02c7e14af7, "1.0000000000000001e+23"},
		{0x444b1ae4d6e2ef4e, "999999999999999700000"},
		{0x444b1ae4d6e2ef4f, "999999999999999900000"},
		{0x444b1ae4d6e2ef50, "1e+21"},
		{0x3eb0c6f7a0b5ed8c, "9.999999999999997e-7"},
		{0x3eb0c6f7a0b5ed8d, "0.000001"},
		{0x41b3de4355555553, "333333333.3333332"},
		{0x41b3de4355555554, "333333333.33333325"},
		{0x41b3de4355555555, "333333333.3333333"},
		{0x41b3de4355555556, "333333333.3333334"},
		{0x41b3de4355555557, "333333333.33333343"},
		{0xbecbf647612f3696, "-0.0000033333333333333333"},
		{0x43143ff3c1cb0959, "1424953923781206.2"},
	}
	for _, tt := range bitsTests {
		f := math.Float64frombits(tt.bits)
		t.Run(strconv.FormatUint(tt.bits, 16), func(t *testing.T) {
			// Go's own shortest spelling of the value, and a 17-digit one.
			got, _, err := jcs.Canonicalize([]byte(strconv.FormatFloat(f, 'e', 16, 64)))
			canonNoErr(t, err)
			canonEqual(t, tt.want, string(got))
			got, _, err = jcs.Canonicalize([]byte(strconv.FormatFloat(f, 'g', -1, 64)))
			canonNoErr(t, err)
			canonEqual(t, tt.want, string(got))
		})
	}

	textTests := []struct{ in, want string }{
		{"1e21", "1e+21"},
		{"1e20", "100000000000000000000"},
		{"123456789012345678901", "123456789012345680000"},
		{"1e-7", "1e-7"},
		{"1.5e-7", "1.5e-7"},
		{"-1.5e-7", "-1.5e-7"},
		{"0.000001", "0.000001"},
		{"0.0000012345", "0.0000012345"},
		{"1e-6", "0.000001"},
		{"0.1", "0.1"},
		{"-0.5", "-0.5"},
		{"100", "100"},
		{"1E2", "100"},
		{"12.5", "12.5"},
		{"1e22", "1e+22"},
		{"1.2345e25", "1.2345e+25"},
		{"1e-27", "1e-27"},
		{"4.5", "4.5"},
		{"2e-3", "0.002"},
		{"9007199254740993", "9007199254740992"},
		{"1E30", "1e+30"},
		{"1.7976931348623157e308", "1.7976931348623157e+308"},
		{"4e-324", "5e-324"},
	}
	for _, tt := range textTests {
		t.Run(tt.in, func(t *testing.T) {
			got, _, err := jcs.Canonicalize([]byte(tt.in))
			canonNoErr(t, err)
			canonEqual(t, tt.want, string(got))
		})
	}
}

// TestRejections: every fault is refused by both functions, with no
// output, a *SyntaxError matching ErrInvalid, and a message saying what
// the fault is.
func TestRejections(t *testing.T) {
	deep := strings.Repeat(`{"a":`, canonMaxDepth+1) + "1" + strings.Repeat("}", canonMaxDepth+1)
	deepArr := strings.Repeat("[", canonMaxDepth+1) + strings.Repeat("]", canonMaxDepth+1)
	tests := []struct {
		name, in, msg string
	}{
		{"empty", ``, "empty input"},
		{"whitespace only", " \n\t", "only whitespace"},
		{"invalid JSON", `{"a":}`, "unexpected input"},
		{"unterminated object", `{"a":1`, "unexpected end of input"},
		{"unterminated string", `{"a":"x`, "unterminated string"},
		{"missing colon", `{"a" 1}`, "expected ':'"},
		{"trailing comma object", `{"a":1,}`, "expected string object key"},
		{"trailing comma array", `{"a":[1,]}`, "unexpected input"},
		{"unquoted key", `{a:1}`, "expected string object key"},
		{"single quotes", `{'a':1}`, "expected string object key"},
		{"bad literal", `{"a":tru}`, "invalid literal"},
		{"capital literal", `{"a":True}`, "unexpected input"},
		{"leading zero", `{"a":01}`, "expected ',' or '}'"},
		{"leading plus", `{"a":+1}`, "unexpected input"},
		{"bare minus", `{"a":-}`, "invalid number"},
		{"dot without digits", `{"a":1.}`, "missing digits after decimal point"},
		{"leading dot", `{"a":.5}`, "unexpected input"},
		{"exponent without digits", `{"a":1e}`, "missing exponent digits"},
		{"hex number", `{"a":0x10}`, "expected ',' or '}'"},
		{"NaN", `{"a":NaN}`, "unexpected input"},
		{"Infinity", `{"a":Infinity}`, "unexpected input"},
		{"overflow", `{"a":1e400}`, `number "1e400" out of range`},
		{"negative overflow", `{"a":-1.8e308}`, "out of range"},
		{"duplicate key", `{"a":1,"b":2,"a":3}`, `duplicate object key "a"`},
		{"duplicate key via escape", `{"a":1,"\u0061":2}`, `duplicate object key "a"`},
		{"nested duplicate key", `{"x":[{"k":1,"k":1}]}`, `duplicate object key "k"`},
		{"lone high surrogate", `{"a":"\ud800"}`, `lone surrogate escape \ud800`},
		{"lone low surrogate", `{"a":"\udc00x"}`, `lone surrogate escape \udc00`},
		{"high surrogate then non-low", `{"a":"\ud83d\u0041"}`, `lone surrogate escape \ud83d`},
		{"reversed pair", `{"a":"\ude00\ud83d"}`, `lone surrogate escape \ude00`},
		{"lone surrogate in key", `{"\ud800":1}`, "lone surrogate"},
		{"invalid UTF-8", "{\"a\":\"\xff\"}", "invalid UTF-8"},
		{"invalid UTF-8 in key", "{\"\xc3\x28\":1}", "invalid UTF-8"},
		{"UTF-8 encoded surrogate", "{\"a\":\"\xed\xa0\x80\"}", "invalid UTF-8"},
		{"overlong UTF-8", "{\"a\":\"\xc0\xaf\"}", "invalid UTF-8"},
		{"truncated UTF-8", "{\"a\":\"\xe2\x82\"}", "invalid UTF-8"},
		{"raw control char", "{\"a\":\"\x01\"}", "unescaped control character"},
		{"raw newline in string", "{\"a\":\"x\ny\"}", "unescaped control character"},
		{"invalid escape", `{"a":"\x41"}`, "invalid escape sequence"},
		{"bad unicode escape", `{"a":"\u12G4"}`, `invalid \u escape`},
		{"truncated unicode escape", `{"a":"\u12`, `truncated \u escape`},
		{"short unicode escape", `{"a":"\u12"}`, `invalid \u escape`},
		{"trailing garbage", `{"a":1}x`, `trailing data after JSON value: "x"`},
		{"two values", `{"a":1} {"b":2}`, "trailing data"},
		{"BOM", "\ufeff{}", "unexpected input"},
		{"too deep object", deep, "nesting deeper than 64 levels"},
		{"too deep array", `{"a":` + deepArr + `}`, "nesting deeper than 64 levels"},
		{"NUL after value", "{}\x00", "trailing data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for _, canonicalize := range []func([]byte) ([]byte, jcs.Kind, error){jcs.Canonicalize, jcs.CanonicalizeExact} {
				out, _, err := canonicalize([]byte(tt.in))
				canonIsErr(t, err)
				canonEqual(t, 0, len(out))
				canonEqual(t, true, strings.Contains(err.Error(), tt.msg), err.Error(), "want substring", tt.msg)
				canonEqual(t, true, errors.Is(err, jcs.ErrInvalid), err)
				var se *jcs.SyntaxError
				canonEqual(t, true, errors.As(err, &se), err)
			}
		})
	}
}

// TestErrorsQuoteLittleInput: however large the input, an error message
// quotes at most 32 bytes of it.
func TestErrorsQuoteLittleInput(t *testing.T) {
	xs := strings.Repeat("x", 1<<20)
	nines := strings.Repeat("9", 1<<20)
	for i, in := range []string{
		xs, `"` + xs, `[1]` + xs, `[` + xs + `]`, `{"k":` + xs + `}`,
		`{"` + xs + `":1,"` + xs + `":2}`, `[1` + nines + `e999999]`, `{"id":1` + nines + `}`,
	} {
		for _, canonicalize := range []func([]byte) ([]byte, jcs.Kind, error){jcs.Canonicalize, jcs.CanonicalizeExact} {
			_, _, err := canonicalize([]byte(in))
			canonIsErr(t, err, i)
			for _, run := range []string{xs[:33], nines[:33]} {
				canonEqual(t, false, strings.Contains(err.Error(), run), i, "quotes more than 32 bytes:", err)
			}
		}
	}
}

// TestCanonicalizeIdempotentCorpus runs a few documents through twice and
// checks key order with an independent UTF-16 comparison.
func TestCanonicalizeIdempotentCorpus(t *testing.T) {
	docs := []string{
		`{"z":[{"b":1,"a":2}],"y":"\u00e9","x":1e21,"w":-0.0}`,
		"{\"\uff61\":1,\"\U00010000\":2,\"\u00ff\":3,\"a\":4}",
	}
	for _, d := range docs {
		once, _, err := jcs.Canonicalize([]byte(d))
		canonNoErr(t, err)
		twice, _, err := jcs.Canonicalize(once)
		canonNoErr(t, err)
		canonEqual(t, string(once), string(twice))
		checkCanonicalOutput(t, []byte(d), once)
	}
}

// checkCanonicalOutput asserts properties every successful result must have.
func checkCanonicalOutput(t *testing.T, in, out []byte) {
	t.Helper()
	if !json.Valid(out) {
		t.Fatalf("output is not valid JSON: %q", out)
	}
	if !json.Valid(in) {
		t.Fatalf("accepted input that encoding/json rejects: %q", in)
	}
	// No insignificant whitespace.
	var compact bytes.Buffer
	if err := json.Compact(&compact, out); err != nil {
		t.Fatalf("compact: %v", err)
	}
	if !bytes.Equal(compact.Bytes(), out) {
		t.Fatalf("output not compact: %q", out)
	}
	// Idempotent.
	again, _, err := jcs.Canonicalize(out)
	if err != nil {
		t.Fatalf("canonicalizing output %q: %v", out, err)
	}
	if !bytes.Equal(again, out) {
		t.Fatalf("not idempotent:\n in: %q\nout: %q\nagain: %q", in, out, again)
	}
	// Same value.
	var vin, vout any
	if err := json.Unmarshal(in, &vin); err != nil {
		t.Fatalf("unmarshal input %q: %v", in, err)
	}
	if err := json.Unmarshal(out, &vout); err != nil {
		t.Fatalf("unmarshal output %q: %v", out, err)
	}
	if !reflect.DeepEqual(vin, vout) {
		t.Fatalf("value changed:\n in: %q -> %#v\nout: %q -> %#v", in, vin, out, vout)
	}
	checkKeyOrder(t, out)
}

// checkKeyOrder walks the tokens of out and asserts that object keys are
// strictly increasing by UTF-16 code units.
func checkKeyOrder(t *testing.T, out []byte) {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(out))
	type frame struct {
		object  bool
		wantKey bool
		last    []uint16
		hasLast bool
	}
	var stack []*frame
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			return
		}
		if err != nil {
			t.Fatalf("token: %v", err)
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.object && top.wantKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				continue
			}
			key := utf16.Encode([]rune(tok.(string)))
			if top.hasLast && slices.Compare(top.last, key) >= 0 {
				t.Fatalf("keys out of order in %q: %q then %q", out,
					string(utf16.Decode(top.last)), string(utf16.Decode(key)))
			}
			top.last, top.hasLast, top.wantKey = key, true, false
			continue
		}
		if top != nil && top.object {
			top.wantKey = true
		}
		if d, ok := tok.(json.Delim); ok {
			switch d {
			case '{':
				stack = append(stack, &frame{object: true, wantKey: true})
			case '[':
				stack = append(stack, &frame{})
			case ']':
				stack = stack[:len(stack)-1]
			}
		}
	}
}

// canonMaxDepth mirrors the package's nesting limit.
const canonMaxDepth = 64

// canonNoErr fails the test immediately if err is non-nil.
func canonNoErr(t *testing.T, err error, ctx ...any) {
	t.Helper()
	if err != nil {
		t.Fatalf("unexpected error: %v %v", err, fmt.Sprint(ctx...))
	}
}

// canonIsErr fails the test immediately if err is nil.
func canonIsErr(t *testing.T, err error, ctx ...any) {
	t.Helper()
	if err == nil {
		t.Fatalf("expected an error %v", fmt.Sprint(ctx...))
	}
}

// canonEqual reports a test error if got != want.
func canonEqual[T comparable](t *testing.T, want, got T, ctx ...any) {
	t.Helper()
	if want != got {
		t.Errorf("got %#v, want %#v %v", got, want, fmt.Sprintln(ctx...))
	}
}
