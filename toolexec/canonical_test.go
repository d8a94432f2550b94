package toolexec_test

import (
	"crypto/sha256"
	"encoding/hex"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/jcs"
	"github.com/rowlease/rowlease/toolexec"
)

// The canonical form itself (RFC 8785) is tested, and fuzzed, in
// internal/jcs. These tests are of what toolexec makes of it: the hash of
// a call's arguments, the object rule, and the errors users see.

func TestCanonicalArguments(t *testing.T) {
	canon, hash, err := toolexec.CanonicalArguments([]byte(` { "b" : 35.0, "a" : "x" } `))
	require.NoError(t, err)
	assert.Equal(t, `{"a":"x","b":35}`, string(canon))
	sum := sha256.Sum256(canon)
	assert.Equal(t, hex.EncodeToString(sum[:]), hash)
	assert.Len(t, hash, 64)
	assert.Equal(t, strings.ToLower(hash), hash)

	// Equivalent spellings hash the same.
	for _, in := range []string{
		`{"a":"x","b":35}`,
		`{"a":"x","b":3.5e1}`,
		`{"b":350e-1,"a":"\u0078"}`,
		"{\n\t\"a\": \"x\",\n\t\"b\": 35.000\n}",
	} {
		_, h, err := toolexec.CanonicalArguments([]byte(in))
		require.NoError(t, err, in)
		assert.Equal(t, hash, h, in)
	}

	// Different values hash differently.
	_, h, err := toolexec.CanonicalArguments([]byte(`{"a":"x","b":36}`))
	require.NoError(t, err)
	assert.NotEqual(t, hash, h, "different arguments gave the same hash")

	// Known digest of the empty object.
	_, h, err = toolexec.CanonicalArguments([]byte(`{}`))
	require.NoError(t, err)
	assert.Equal(t, "44136fa355b3678a1146ad16f7e8649e94fb4fc21fe77e8310c060f61caaff8a", h)
}

func TestCanonicalArgumentsNotObject(t *testing.T) {
	tests := []struct{ in, kind string }{
		{`[1,2]`, "array"},
		{`"str"`, "string"},
		{`42`, "number"},
		{`true`, "boolean"},
		{`null`, "null"},
	}
	for _, tt := range tests {
		t.Run(tt.kind, func(t *testing.T) {
			_, _, err := toolexec.CanonicalArguments([]byte(tt.in))
			require.Error(t, err)
			assert.ErrorAs(t, err, new(*toolexec.ArgumentsError))
			assert.Equal(t, "toolexec: invalid tool arguments: not a JSON object (got "+tt.kind+")", err.Error())
		})
	}
}

// TestCanonicalErrors: toolexec's two functions give jcs's canonical form
// and refusals, under toolexec's names. Canonicalize's errors say
// "toolexec: canonicalize JSON: " and are not *ArgumentsError;
// CanonicalArguments' say "toolexec: invalid tool arguments: " and are;
// a refusal returns no bytes and no hash. Whatever CanonicalArguments
// accepts is an object, canonicalized as Canonicalize does, with the
// SHA-256 of those bytes as its hash.
func TestCanonicalErrors(t *testing.T) {
	inputs := []string{
		``, " \n\t", `{"a":}`, `{"a":1`, `{"a":"x`, `{"a":1,}`, `{a:1}`, `{"a":01}`, `{"a":1e400}`,
		`{"a":1,"\u0061":2}`, `{"a":"\ud800"}`, "{\"a\":\"\xff\"}", "{\"a\":\"\x01\"}", `{"a":1}x`, "\ufeff{}",
		strings.Repeat("[", jcs.MaxDepth+1) + strings.Repeat("]", jcs.MaxDepth+1),
		// Refused by CanonicalArguments only: an integer a double rounds.
		`{"id":9007199254740993}`, `[9007199254740993]`, `9007199254740993`,
		// Accepted by both, or by Canonicalize only (not an object).
		`{}`, `{"b":[1,{"d":2,"c":3}],"a":3.5e1}`, `{"id":"9007199254740993"}`, `[1,2]`, `"s"`, `null`,
	}
	for _, in := range inputs {
		out, err := toolexec.Canonicalize([]byte(in))
		jout, _, jerr := jcs.Canonicalize([]byte(in))
		canon, hash, aerr := toolexec.CanonicalArguments([]byte(in))
		_, kind, exactErr := jcs.CanonicalizeExact([]byte(in))

		if jerr != nil {
			require.Error(t, err, in)
			assert.Equal(t, "toolexec: canonicalize JSON: "+jerr.Error(), err.Error(), in)
			assert.NotErrorAs(t, err, new(*toolexec.ArgumentsError), in)
			assert.Empty(t, out, in)
		} else {
			require.NoError(t, err, in)
			assert.Equal(t, string(jout), string(out), in)
		}

		switch {
		case exactErr != nil:
			require.Error(t, aerr, in)
			assert.Equal(t, "toolexec: invalid tool arguments: "+exactErr.Error(), aerr.Error(), in)
		case kind != jcs.KindObject:
			require.Error(t, aerr, in)
			assert.Equal(t, "toolexec: invalid tool arguments: not a JSON object (got "+kind.String()+")", aerr.Error(), in)
		default:
			require.NoError(t, aerr, in)
			assert.Equal(t, string(out), string(canon), in)
			sum := sha256.Sum256(canon)
			assert.Equal(t, hex.EncodeToString(sum[:]), hash, in)
			continue
		}
		assert.ErrorAs(t, aerr, new(*toolexec.ArgumentsError), in)
		assert.Empty(t, canon, in)
		assert.Empty(t, hash, in)
	}
}

// TestErrorMessagesTruncated checks that error messages never echo large
// amounts of input.
func TestErrorMessagesTruncated(t *testing.T) {
	big := strings.Repeat("x", 1<<20)
	inputs := []string{
		`{"a":1}` + big,
		`{"a":` + big + `}`,
		`{"` + big + `":1,"` + big + `":2}`,
		`{"a":1` + strings.Repeat("9", 1<<20) + `e999999}`,
		`{"a":[1 ` + big + `]}`,
		`{` + big + `}`,
	}
	for i, in := range inputs {
		_, _, err := toolexec.CanonicalArguments([]byte(in))
		require.Error(t, err, i)
		assert.Less(t, len(err.Error()), 200, i, err)
	}
}

// TestCanonicalArgumentsKeys: distinct ids above 2^53 never share one
// idempotency key (the second is refused, saying to send it as a
// string), and equal spellings of one value are still one key.
func TestCanonicalArgumentsKeys(t *testing.T) {
	_, h2, err := toolexec.CanonicalArguments([]byte(`{"id":9007199254740992}`))
	require.NoError(t, err)
	_, h3, err := toolexec.CanonicalArguments([]byte(`{"id":9007199254740993}`))
	if err == nil && h2 == h3 {
		t.Fatalf("{\"id\":9007199254740992} and {\"id\":9007199254740993} share the key %s", h2)
	}
	require.ErrorAs(t, err, new(*toolexec.ArgumentsError))
	assert.Contains(t, err.Error(), "9007199254740993")
	assert.Contains(t, err.Error(), "send it as a string")

	_, h35, err := toolexec.CanonicalArguments([]byte(`{"amount":35}`))
	require.NoError(t, err)
	for _, in := range []string{`{"amount":35.0}`, `{"amount":3.5e1}`, `{"amount":35.000}`} {
		_, h, err := toolexec.CanonicalArguments([]byte(in))
		require.NoError(t, err, in)
		assert.Equal(t, h35, h, in)
	}
}
