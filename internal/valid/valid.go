package valid

import (
	"errors"

	"github.com/rowlease/rowlease/lease"
)

// Text is lease.CheckText(field, s, maxBytes), with the error's Package
// set to pkg (the package whose input it is, such as "request"). It
// returns nil for good text, and otherwise a *lease.ValidationError.
func Text(pkg, field, s string, maxBytes int) error {
	err := lease.CheckText(field, s, maxBytes)
	var ve *lease.ValidationError
	if errors.As(err, &ve) {
		ve.Package = pkg
	}
	return err
}
