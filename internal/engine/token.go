package engine

import (
	"fmt"
	"log/slog"

	"github.com/google/uuid"
)

// Token is the random secret that proves a grant. It is a UUIDv4 drawn from
// crypto/rand. Every write a holder makes is conditioned on it.
//
// A Token never prints itself: String, Format, MarshalText and
// LogValue all give "[redacted]", so a grant can be logged or wrapped in an
// error without leaking the secret. Secret returns the raw value for callers
// that must store it (for example to resume a flow in another process).
type Token struct{ p *string } // behind a pointer: fmt prints nested pointers as addresses

const redacted = "[redacted]"

// NewToken draws a fresh random token.
func NewToken() (Token, error) {
	u, err := uuid.NewRandom()
	if err != nil {
		return Token{}, fmt.Errorf("lease: drawing a token: %w", err)
	}
	s := u.String()
	return Token{p: &s}, nil
}

// ParseToken turns a value returned by Secret back into a Token. It accepts
// only the canonical UUID text form.
func ParseToken(s string) (Token, error) {
	u, err := uuid.Parse(s)
	if err != nil || u.String() != s {
		return Token{}, &ValidationError{Field: "token", Reason: "not a canonical UUID"}
	}
	return Token{p: &s}, nil
}

// isZero reports whether t is the zero Token (no grant).
func (t Token) isZero() bool { return t.p == nil }

// TokenIsZero reports whether t is the zero Token (no grant).
func TokenIsZero(t Token) bool { return t.isZero() }

// Secret returns the raw token text, for rowlease's own packages and
// tests. Treat it as a password.
func Secret(t Token) string { return t.secret() }

// SameToken reports whether two tokens are the same secret (== compares
// where each is kept, not the secret).
func SameToken(a, b Token) bool { return a.secret() == b.secret() }

func (t Token) secret() string {
	if t.p == nil {
		return ""
	}
	return *t.p
}

// String returns "[redacted]".
func (t Token) String() string { return redacted }

// Format prints "[redacted]" for every verb, %#v included.
func (t Token) Format(f fmt.State, _ rune) { _, _ = f.Write([]byte(redacted)) }

// MarshalText returns "[redacted]", so JSON and text encoders never leak it.
func (t Token) MarshalText() ([]byte, error) { return []byte(redacted), nil }

// LogValue makes slog print "[redacted]".
func (t Token) LogValue() slog.Value { return slog.StringValue(redacted) }
