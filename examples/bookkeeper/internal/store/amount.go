package store

import (
	"errors"
	"fmt"
	"math/big"
	"strings"
)

// MaxAmountCents bounds an amount: 999,999,999.99, well inside
// DECIMAL(15,2).
const MaxAmountCents = 99_999_999_999

// ErrBadAmount is wrapped by ParseAmount's errors.
var ErrBadAmount = errors.New("bad amount")

// ParseAmount reads a positive decimal amount with at most two decimal
// places ("35", "23.5", "3.5e1", "35.00") as integer cents, exactly (no
// floating point).
func ParseAmount(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return 0, fmt.Errorf("%w: missing", ErrBadAmount)
	}
	if len(s) > 40 {
		return 0, fmt.Errorf("%w: %.40q… is too long", ErrBadAmount, s)
	}
	r, ok := new(big.Rat).SetString(s)
	if !ok {
		return 0, fmt.Errorf("%w: %q is not a number", ErrBadAmount, s)
	}
	if r.Sign() <= 0 {
		return 0, fmt.Errorf("%w: %s is not positive", ErrBadAmount, s)
	}
	r.Mul(r, big.NewRat(100, 1))
	if !r.IsInt() {
		return 0, fmt.Errorf("%w: %s has more than two decimal places", ErrBadAmount, s)
	}
	n := r.Num()
	if !n.IsInt64() || n.Int64() > MaxAmountCents {
		return 0, fmt.Errorf("%w: %s is larger than %s", ErrBadAmount, s, FormatCents(MaxAmountCents))
	}
	return n.Int64(), nil
}

// FormatCents writes cents as a decimal with two places: 3550 → "35.50".
func FormatCents(c int64) string {
	sign := ""
	if c < 0 {
		sign, c = "-", -c
	}
	return fmt.Sprintf("%s%d.%02d", sign, c/100, c%100)
}
