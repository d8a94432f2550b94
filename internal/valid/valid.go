package valid

import (
	"errors"
	"reflect"

	"github.com/rowlease/rowlease/internal/engine"
)

// Text is engine.CheckText(field, s, maxBytes), with the error's Package
// set to pkg (the package whose input it is, such as "request"). It
// returns nil for good text, and otherwise a *engine.ValidationError.
func Text(pkg, field, s string, maxBytes int) error {
	err := engine.CheckText(field, s, maxBytes)
	var ve *engine.ValidationError
	if errors.As(err, &ve) {
		ve.Package = pkg
	}
	return err
}

// DB refuses a nil database, a typed nil pointer (a nil *sql.Tx in an
// interface) included, with a *engine.ValidationError of field "db" under
// pkg.
func DB(pkg string, db any) error {
	if db == nil {
		return &engine.ValidationError{Package: pkg, Field: "db", Reason: "nil"}
	}
	if v := reflect.ValueOf(db); v.Kind() == reflect.Pointer && v.IsNil() {
		return &engine.ValidationError{Package: pkg, Field: "db", Reason: "nil"}
	}
	return nil
}
