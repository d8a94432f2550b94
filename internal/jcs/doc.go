// Package jcs is RFC 8785, the JSON Canonicalization Scheme: it turns one
// JSON text into the one byte sequence that every spelling of the same
// value has. rowlease hashes the canonical form of a tool call's arguments
// into the call's idempotency key (package toolexec), so that
// {"amount":35} and { "amount" : 3.5e1 } are one call.
//
// It knows nothing of tools, keys or hashes. It is internal: users reach
// it through toolexec.Canonicalize and toolexec.CanonicalArguments, whose
// behaviour and messages are the stable promise; this package makes none,
// and may change with what toolexec needs.
//
// Canonicalize is plain RFC 8785. CanonicalizeExact is the same, but
// refuses an integer that a double would round (9007199254740993), since
// two ids that round to one double would otherwise share one key.
//
// # Guarantees
//
//   - Equal values give equal bytes: white space, the order of object
//     members, the spelling of a number (35, 35.0, 3.5e1, 350E-1) and of a
//     string (escapes or raw UTF-8) make no difference. Members are sorted
//     by their names as UTF-16 code units; numbers are written as
//     ECMAScript writes a double; strings escape only what RFC 8785 says.
//   - The output is compact JSON that encoding/json accepts, with the value
//     of the input, and canonicalizing it again returns it unchanged.
//   - Only what RFC 8785 can canonicalize (I-JSON) is accepted: one value,
//     valid UTF-8, no duplicate member names (after unescaping), no lone
//     surrogate escapes, no number beyond a double's range, nesting at
//     most MaxDepth.
//   - CanonicalizeExact accepts exactly what Canonicalize accepts, less the
//     texts holding an integer a double does not hold exactly, and gives
//     the same bytes.
//   - No state is kept between calls: the functions are safe for
//     concurrent use. Recursion is bounded by MaxDepth, and so is the
//     copying: each enclosing object copies its members' canonical bytes
//     once, so work and memory stay within MaxDepth times the input's
//     size, plus the sorting of each object's members.
//
// # What it does not do
//
//   - It does not keep more precision than a double: Canonicalize rounds
//     every number (RFC 8785 does), and CanonicalizeExact refuses only
//     integers written as integers; 0.1 and 1e30 are rounded by both.
//     Send such values as strings.
//   - It does not normalize Unicode (RFC 8785 does not): "é" written as one
//     code point and as "e" with a combining accent are different strings.
//     Noncharacters such as U+FFFF pass through.
//   - It does not decode into Go values, read streams, or hash.
//   - It does not accept a byte order mark, comments, NaN, Infinity, or
//     anything else outside RFC 8259.
//
// # How it fails
//
// A refused text gives nil and a *SyntaxError (matching ErrInvalid) that
// says why and at which byte offset, quoting at most 32 bytes of the input
// however large it is. Its message names no package: the caller wraps it
// with what it was canonicalizing (toolexec: "toolexec: canonicalize
// JSON: …", "toolexec: invalid tool arguments: …").
package jcs
