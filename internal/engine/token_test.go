//lint:file-ignore SA5009 TestTokenRedactionReflectionPaths formats grants with wrong verbs on purpose: a token must not leak through them either

package engine_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/internal/engine"
)

// TestTokenRedaction: a token, a grant holding it, or a value holding a
// grant in an exported field never shows the secret through fmt, slog,
// encoding/json or wrapped errors.
func TestTokenRedaction(t *testing.T) {
	tok, err := engine.NewToken()
	require.NoError(t, err)
	secret := engine.Secret(tok)
	require.Len(t, secret, 36)
	g := engine.Grant[string]{Key: "k", Holder: "alice", Token: tok, Generation: 3, TTL: time.Second}
	type Job struct {
		Name  string
		Grant engine.Grant[string]
		Toks  []engine.Token
		ByKey map[string]engine.Grant[string]
		Any   any
	}
	job := Job{Name: "j", Grant: g, Toks: []engine.Token{tok}, ByKey: map[string]engine.Grant[string]{"k": g}, Any: g}
	type JobPtr struct {
		Name  string
		Grant *engine.Grant[string]
	}
	jobPtr := JobPtr{Name: "j", Grant: &g}

	var outs []string
	for _, verb := range []string{"%v", "%s", "%+v", "%#v", "%q", "%x", "%X", "%d", "%10.3s", "%T"} {
		for _, v := range []any{tok, &tok, g, &g, job, &job, []any{tok, g}, []engine.Grant[string]{g}} {
			outs = append(outs, fmt.Sprintf(verb, v))
		}
	}
	// A pointer to a grant in a field prints as an address with %v.
	for _, verb := range []string{"%v", "%+v", "%#v"} {
		outs = append(outs, fmt.Sprintf(verb, jobPtr))
	}
	outs = append(outs, fmt.Sprint(tok, g, job), fmt.Sprintln(tok, g, job), tok.String(), fmt.Sprintf("%#v", tok))
	assert.Equal(t, "[redacted]", fmt.Sprintf("%v", tok))
	assert.Equal(t, "[redacted]", fmt.Sprintf("%s", tok))
	assert.Equal(t, "[redacted]", fmt.Sprintf("%q", tok))
	assert.Equal(t, "[redacted]", fmt.Sprintf("%#v", tok))
	assert.Equal(t, "[redacted]", tok.String())
	assert.Equal(t, "[redacted]", fmt.Sprintf("%#v", tok))
	assert.Contains(t, fmt.Sprintf("%+v", g), "Token:[redacted]")

	// slog: JSON and text handlers, the token as a value and inside structs.
	for _, h := range []func(*bytes.Buffer) slog.Handler{
		func(b *bytes.Buffer) slog.Handler { return slog.NewJSONHandler(b, nil) },
		func(b *bytes.Buffer) slog.Handler { return slog.NewTextHandler(b, nil) },
	} {
		var buf bytes.Buffer
		log := slog.New(h(&buf))
		log.Info("lease", "token", tok, "grant", g, "ptr", &g, "job", job, "jobptr", jobPtr, slog.Group("grp", "tok", tok))
		log.Info("lease", slog.Any("token", tok), slog.String("s", tok.String()))
		log.With("grant", g).Error("failed", "err", fmt.Errorf("renew %v: %w", g, engine.ErrLost))
		require.Contains(t, buf.String(), "[redacted]")
		outs = append(outs, buf.String())
	}
	var buf bytes.Buffer
	slog.New(slog.NewJSONHandler(&buf, nil)).Info("lease", "job", job)
	var decoded map[string]any
	require.NoError(t, json.Unmarshal(buf.Bytes(), &decoded), "the JSON handler still writes valid JSON")
	assert.Equal(t, "[redacted]", decoded["job"].(map[string]any)["Grant"].(map[string]any)["Token"])

	// encoding/json.
	for _, v := range []any{tok, &tok, g, &g, job, jobPtr, struct{ T engine.Token }{tok}, map[string]engine.Token{"t": tok}} {
		b, err := json.Marshal(v)
		require.NoError(t, err)
		outs = append(outs, string(b))
	}
	b, err := json.Marshal(tok)
	require.NoError(t, err)
	assert.Equal(t, `"[redacted]"`, string(b))
	b, err = json.Marshal(g)
	require.NoError(t, err)
	assert.Contains(t, string(b), `"Token":"[redacted]"`)
	text, err := tok.MarshalText()
	require.NoError(t, err)
	assert.Equal(t, "[redacted]", string(text))

	// Errors that wrap or print a grant.
	base := errors.New("boom")
	for _, e := range []error{
		fmt.Errorf("renew %v: %w", g, base),
		fmt.Errorf("renew %+v: %w", &g, base),
		fmt.Errorf("job %#v: %w", job, base),
		fmt.Errorf("job %+v: %w", jobPtr, base),
		errors.Join(base, fmt.Errorf("token %s", tok)),
		fmt.Errorf("outer: %w", fmt.Errorf("inner %v: %w", tok, &engine.LostError{Key: "k", Op: "renew"})),
	} {
		outs = append(outs, e.Error(), fmt.Sprintf("%+v", e))
	}

	for _, o := range outs {
		assert.NotContains(t, o, secret)
		assert.NotContains(t, o, secret[:8], "nor a piece of it")
	}
	// The raw value is only available on request.
	assert.Equal(t, secret, engine.Secret(tok))
}

// TestTokenRedactionReflectionPaths covers the ways fmt prints a value by
// reflection without calling its methods: a grant in an unexported field,
// and a pointer to a grant printed with a verb that does not suit a
// pointer (fmt's %!s(...) path turns method calls off). Both print the
// secret while Token keeps it in a plain string field.
func TestTokenRedactionReflectionPaths(t *testing.T) {
	tok, err := engine.NewToken()
	require.NoError(t, err)
	g := engine.Grant[string]{Key: "k", Holder: "alice", Token: tok, Generation: 3}
	type worker struct {
		name  string
		grant engine.Grant[string]
	}
	type JobPtr struct{ Grant *engine.Grant[string] }
	var buf bytes.Buffer
	slog.New(slog.NewTextHandler(&buf, nil)).Info("state", "worker", worker{"w", g})
	// Through variables, as a logger's format would be: go vet flags the
	// constant forms of the pointer cases, not these.
	s, d := "%s", "%d"
	outs := map[string]string{
		"%v unexported field":          fmt.Sprintf("%v", worker{"w", g}),
		"%+v unexported field":         fmt.Sprintf("%+v", worker{"w", g}),
		"%#v unexported field":         fmt.Sprintf("%#v", worker{"w", g}),
		"%s pointer field":             fmt.Sprintf(s, JobPtr{&g}),
		"%d pointer field":             fmt.Sprintf(d, JobPtr{&g}),
		"slog text unexported field":   buf.String(),
		"%v unexported token field":    fmt.Sprintf("%v", struct{ t engine.Token }{tok}),
		"%s map of pointers to grants": fmt.Sprintf(s, map[string]*engine.Grant[string]{"k": &g}),
	}
	var leaks []string
	for name, o := range outs {
		if strings.Contains(o, engine.Secret(tok)) {
			leaks = append(leaks, name)
		}
	}
	if len(leaks) > 0 {
		t.Errorf("the token leaks through: %s", strings.Join(leaks, "; "))
	}
}

func TestParseToken(t *testing.T) {
	tok, err := engine.NewToken()
	require.NoError(t, err)
	assert.False(t, engine.TokenIsZero(tok))
	assert.Equal(t, byte('4'), engine.Secret(tok)[14], "a version-4 UUID")
	back, err := engine.ParseToken(engine.Secret(tok))
	require.NoError(t, err)
	assert.True(t, engine.SameToken(back, tok))
	assert.Equal(t, engine.Secret(tok), engine.Secret(back))
	other, err := engine.NewToken()
	require.NoError(t, err)
	assert.False(t, engine.SameToken(other, tok), "tokens are random")
	assert.True(t, engine.TokenIsZero(engine.Token{}))
	assert.True(t, engine.SameToken(engine.Token{}, engine.Token{}))

	s := engine.Secret(tok)
	for _, bad := range []string{
		"",
		"not-a-uuid",
		strings.ToUpper(s),
		"{" + s + "}",
		"urn:uuid:" + s,
		strings.ReplaceAll(s, "-", ""),
		" " + s,
		s + " ",
		s[:35],
		s + "0",
	} {
		got, err := engine.ParseToken(bad)
		var ve *engine.ValidationError
		require.ErrorAs(t, err, &ve, "%q", bad)
		assert.Equal(t, "token", ve.Field)
		assert.ErrorIs(t, err, engine.ErrInvalid)
		assert.True(t, engine.TokenIsZero(got), "%q", bad)
		if bad != "" {
			assert.NotContains(t, err.Error(), bad, "the rejected input is not echoed")
		}
		assert.NotContains(t, err.Error(), s[:8])
	}
}
