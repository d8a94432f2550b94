package httpapi

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// PreferWait reads the wait preference of the Prefer request headers (RFC
// 7240 §4.3: "Prefer: wait=N", N in seconds) and returns how long the
// server should wait: N seconds, but at most limit (a negative limit counts
// as 0). ok is false when there is no wait preference or when it is not a
// plain decimal number of seconds; the request is then served as if it
// had none, without an error.
//
// Several Prefer headers, and several preferences in one (comma-separated,
// with ";"-parameters and quoted strings) are read; names are matched
// without regard to case; as RFC 7240 says, only the first wait counts.
// A number of seconds too large for a time.Duration is capped at limit.
func PreferWait(h http.Header, limit time.Duration) (wait time.Duration, ok bool) {
	limit = max(limit, 0)
	for _, line := range h.Values("Prefer") {
		for _, pref := range splitOutsideQuotes(line, ',') {
			pref, _, _ = cutOutsideQuotes(pref, ';') // drop the parameters
			name, value, _ := strings.Cut(pref, "=")
			if !strings.EqualFold(strings.TrimSpace(name), "wait") {
				continue
			}
			secs, valid := deltaSeconds(strings.TrimSpace(value))
			if !valid {
				return 0, false
			}
			if secs > int64(limit/time.Second) {
				return limit, true
			}
			return time.Duration(secs) * time.Second, true
		}
	}
	return 0, false
}

// SetPreferenceApplied adds "Preference-Applied: wait=N" to h, N being
// wait in whole seconds rounded up, so that N never exceeds the N of a
// request that PreferWait capped to wait. Call it when the handler honoured
// the preference (waited, or was ready to wait, up to wait).
func SetPreferenceApplied(h http.Header, wait time.Duration) {
	wait = max(wait, 0)
	s := int64(wait / time.Second)
	if wait%time.Second > 0 {
		s++
	}
	h.Add("Preference-Applied", "wait="+strconv.FormatInt(s, 10))
}

// deltaSeconds parses 1*DIGIT (RFC 9110 delta-seconds), saturating at
// the largest int64.
func deltaSeconds(s string) (int64, bool) {
	if s == "" {
		return 0, false
	}
	var n int64
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < '0' || c > '9' {
			return 0, false
		}
		d := int64(c - '0')
		if n > (1<<63-1-d)/10 {
			n = 1<<63 - 1
			continue
		}
		n = n*10 + d
	}
	return n, true
}

// splitOutsideQuotes splits s at every sep that is not inside a quoted
// string (RFC 9110 quoted-string, with backslash escapes).
func splitOutsideQuotes(s string, sep byte) []string {
	var out []string
	for {
		before, after, found := cutOutsideQuotes(s, sep)
		out = append(out, before)
		if !found {
			return out
		}
		s = after
	}
}

// cutOutsideQuotes is strings.Cut that skips separators inside quoted
// strings.
func cutOutsideQuotes(s string, sep byte) (before, after string, found bool) {
	quoted := false
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case quoted && c == '\\':
			i++ // the escaped character
		case c == '"':
			quoted = !quoted
		case !quoted && c == sep:
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}
