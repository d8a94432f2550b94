package driver

import (
	"reflect"
	"strconv"
	"strings"
)

// CompilePositional is Compile for ? placeholders: one per parameter
// written, so a name written twice is an argument twice.
func CompilePositional(tmpl string) (string, []string) {
	return compile(tmpl, false)
}

// CompileNumbered is Compile for $n placeholders: each name is numbered
// on its first occurrence and reused after.
func CompileNumbered(tmpl string) (string, []string) {
	return compile(tmpl, true)
}

func compile(tmpl string, numbered bool) (string, []string) {
	var b strings.Builder
	var names []string
	index := map[string]int{}
	for i := 0; i < len(tmpl); {
		if tmpl[i] != '{' {
			b.WriteByte(tmpl[i])
			i++
			continue
		}
		j := strings.IndexByte(tmpl[i:], '}')
		name := tmpl[i+1 : i+j]
		i += j + 1
		if numbered {
			n, ok := index[name]
			if !ok {
				names = append(names, name)
				n = len(names)
				index[name] = n
			}
			b.WriteString("$" + strconv.Itoa(n))
			continue
		}
		names = append(names, name)
		b.WriteByte('?')
	}
	return b.String(), names
}

// PairsNumbered is Pairs for $n placeholders: each key is named once.
func PairsNumbered(keys []any, toks []string, gens []int64) (keyList, pairList string, args []any) {
	var kb, pb strings.Builder
	args = make([]any, 0, 3*len(keys))
	for i := range keys {
		k, t, g := "$"+strconv.Itoa(3*i+1), "$"+strconv.Itoa(3*i+2), "$"+strconv.Itoa(3*i+3)
		if i > 0 {
			kb.WriteString(", ")
			pb.WriteString(", ")
		}
		kb.WriteString(k)
		pb.WriteString("(" + k + ", " + t + ", " + g + ")")
		args = append(args, keys[i], toks[i], gens[i])
	}
	return kb.String(), pb.String(), args
}

// PairsPositional is Pairs for ? placeholders: the key list's arguments,
// then the row list's, each key given twice.
func PairsPositional(keys []any, toks []string, gens []int64) (keyList, pairList string, args []any) {
	var kb, pb strings.Builder
	args = make([]any, 0, 4*len(keys))
	for i := range keys {
		if i > 0 {
			kb.WriteString(", ")
			pb.WriteString(", ")
		}
		kb.WriteByte('?')
		pb.WriteString("(?, ?, ?)")
		args = append(args, keys[i])
	}
	for i := range keys {
		args = append(args, keys[i], toks[i], gens[i])
	}
	return kb.String(), pb.String(), args
}

// Is reports whether err itself (not what it wraps) is target.
func Is(err, target error) bool {
	if err == target {
		return true
	}
	x, ok := err.(interface{ Is(error) bool })
	return ok && x.Is(target)
}

// UpsertSet is the assignment list of an upsert: each column set to
// val(column), comma-separated.
func UpsertSet(cols []string, val func(col string) string) string {
	parts := make([]string, len(cols))
	for i, c := range cols {
		parts[i] = c + " = " + val(c)
	}
	return strings.Join(parts, ", ")
}

// IsNil reports whether db is nil or a typed nil inside the interface.
func IsNil(db DB) bool {
	if db == nil {
		return true
	}
	v := reflect.ValueOf(db)
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map, reflect.Slice, reflect.Func, reflect.Chan:
		return v.IsNil()
	}
	return false
}

// OnConflictUpdate is the upsert clause of PostgreSQL and SQLite: on a
// conflict on the key columns, each update column takes the value the
// insert proposed.
func OnConflictUpdate(key, update []string) string {
	return " ON CONFLICT (" + strings.Join(key, ", ") + ") DO UPDATE SET " + UpsertSet(update, func(c string) string {
		return "excluded." + c
	})
}
