package jcs

import (
	"errors"
	"fmt"
)

// MaxDepth is the deepest nesting of arrays and objects accepted: a
// top-level object or array is at depth 1.
const MaxDepth = 64

// maxSnippet bounds the number of input bytes echoed in error messages.
const maxSnippet = 32

// ErrInvalid is matched (errors.Is) by every error of this package: the
// text is not one JSON value that RFC 8785 can canonicalize, or (with
// CanonicalizeExact) it holds an integer a double does not hold exactly.
var ErrInvalid = errors.New("jcs: JSON text refused")

// SyntaxError says why and where a text was refused. It matches
// ErrInvalid. Its message names no package: the caller says what it was
// canonicalizing.
type SyntaxError struct {
	Reason string
	// Offset is the byte offset in the input where the fault was found,
	// or -1 when the input as a whole is refused (empty, or only white
	// space).
	Offset int
}

// Error describes the failure, quoting at most a few dozen bytes of the
// input.
func (e *SyntaxError) Error() string {
	if e.Offset < 0 {
		return e.Reason
	}
	return fmt.Sprintf("%s at offset %d", e.Reason, e.Offset)
}

// Is makes errors.Is(err, ErrInvalid) true.
func (e *SyntaxError) Is(target error) bool { return target == ErrInvalid }

// Kind is the JSON type of a value.
type Kind int

// The kinds of JSON value.
const (
	KindNull Kind = iota
	KindBool
	KindNumber
	KindString
	KindArray
	KindObject
)

// String names the kind as JSON does: "null", "boolean", "number",
// "string", "array" or "object".
func (k Kind) String() string {
	switch k {
	case KindNull:
		return "null"
	case KindBool:
		return "boolean"
	case KindNumber:
		return "number"
	case KindString:
		return "string"
	case KindArray:
		return "array"
	case KindObject:
		return "object"
	}
	return "unknown"
}

// Canonicalize returns the RFC 8785 (JSON Canonicalization Scheme) form of
// the JSON text data, and the kind of its top-level value.
//
// The output has no insignificant whitespace, object members are sorted by
// their names compared as sequences of UTF-16 code units, numbers are
// serialized as IEEE-754 doubles using the ECMAScript Number-to-String
// algorithm, and strings use the minimal escaping required by RFC 8785.
//
// Canonicalize is strict: it rejects empty input, syntactically invalid
// JSON, trailing data after the value, invalid UTF-8, escaped lone
// surrogates, duplicate object member names, numbers whose magnitude is too
// large for a double, and nesting deeper than MaxDepth arrays/objects,
// with a *SyntaxError.
//
// Like RFC 8785, Canonicalize rounds every number to the nearest double,
// so 9007199254740993 becomes 9007199254740992; CanonicalizeExact refuses
// such an integer instead.
func Canonicalize(data []byte) ([]byte, Kind, error) {
	return canonicalize(data, false)
}

// CanonicalizeExact is Canonicalize, except that a number written as an
// integer (digits only: no fraction, no exponent) whose value a double
// does not hold exactly is refused, with a *SyntaxError that quotes it,
// says what a double would make of it, and says to send it as a string.
// Every integer of magnitude up to 2^53 is accepted, and a larger one only
// if it is exactly a double (such as 18014398509481984, 2^54). A number
// written with a fraction or an exponent is a real number and is rounded
// as Canonicalize rounds it. Whatever CanonicalizeExact accepts, it
// canonicalizes to the bytes Canonicalize gives.
func CanonicalizeExact(data []byte) ([]byte, Kind, error) {
	return canonicalize(data, true)
}

// canonicalize parses data as a single JSON value and returns its canonical
// form and the kind of the top-level value. With exactIntegers, a number
// written as an integer that a double does not hold exactly is an error.
func canonicalize(data []byte, exactIntegers bool) ([]byte, Kind, error) {
	p := &parser{data: data, out: make([]byte, 0, len(data)), exactIntegers: exactIntegers}
	p.skipSpace()
	if p.pos >= len(p.data) {
		if len(p.data) == 0 {
			return nil, 0, &SyntaxError{Reason: "empty input", Offset: -1}
		}
		return nil, 0, &SyntaxError{Reason: "input contains only whitespace", Offset: -1}
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
