package toolexec

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"

	"github.com/rowlease/rowlease/internal/jcs"
	"github.com/rowlease/rowlease/lease"
)

// ArgumentsError is what [CanonicalArguments] returns when the tool-call
// arguments are not valid JSON, cannot be canonicalized under RFC 8785
// (for example because of duplicate keys or an out-of-range number), hold
// an integer that a double does not hold exactly, or are not a JSON
// object. It matches lease.ErrInvalid; Err says what is wrong.
type ArgumentsError struct {
	Err error
}

// Error describes the arguments' fault.
func (e *ArgumentsError) Error() string { return "toolexec: invalid tool arguments: " + e.Err.Error() }

// Is makes errors.Is(err, lease.ErrInvalid) true.
func (e *ArgumentsError) Is(target error) bool { return target == lease.ErrInvalid }

// Unwrap returns Err.
func (e *ArgumentsError) Unwrap() error { return e.Err }

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
	out, _, err := jcs.Canonicalize(data)
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
// Any failure is reported as an [*ArgumentsError] (lease.ErrInvalid).
func CanonicalArguments(data []byte) (canonical []byte, hash string, err error) {
	out, kind, err := jcs.CanonicalizeExact(data)
	if err != nil {
		return nil, "", &ArgumentsError{Err: err}
	}
	if kind != jcs.KindObject {
		return nil, "", &ArgumentsError{Err: fmt.Errorf("not a JSON object (got %s)", kind)}
	}
	sum := sha256.Sum256(out)
	return out, hex.EncodeToString(sum[:]), nil
}
