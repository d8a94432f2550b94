package web_test

import (
	"encoding/json"
	"io"
	"net/http"
	"regexp"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rowlease/rowlease/examples/bookkeeper/internal/api"
	"github.com/rowlease/rowlease/examples/bookkeeper/internal/web"
	"github.com/rowlease/rowlease/internal/testkit/testdb"
	"github.com/rowlease/rowlease/lease"
)

func get(t *testing.T, method, url string, header http.Header) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, url, nil)
	require.NoError(t, err)
	for k, v := range header {
		req.Header[k] = v
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp, body
}

// TestPageRoutes checks, over HTTP, that the bookkeeper serves the page
// and every asset it names, with their types, ETag revalidation and the
// page's Content-Security-Policy, and that everything else is still the
// API's problem+json.
func TestPageRoutes(t *testing.T) {
	ts, _ := bookkeeper(t, testdb.Open(t, lease.SQLite))

	resp, page := get(t, http.MethodGet, ts.URL+"/", nil)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Equal(t, "text/html; charset=utf-8", resp.Header.Get("Content-Type"))
	assert.Equal(t, web.ContentSecurityPolicy, resp.Header.Get("Content-Security-Policy"))
	assert.Equal(t, "no-cache", resp.Header.Get("Cache-Control"))
	assert.Equal(t, "nosniff", resp.Header.Get("X-Content-Type-Options"))
	etag := resp.Header.Get("ETag")
	require.NotEmpty(t, etag)

	resp, body := get(t, http.MethodGet, ts.URL+"/", http.Header{"If-None-Match": {etag}})
	assert.Equal(t, http.StatusNotModified, resp.StatusCode)
	assert.Empty(t, body)
	resp, body = get(t, http.MethodHead, ts.URL+"/", nil)
	assert.Equal(t, http.StatusOK, resp.StatusCode)
	assert.Empty(t, body)

	// Every asset the page names is served with its type; nothing is
	// loaded from elsewhere.
	refs := regexp.MustCompile(`(?:src|href)="([^"]+)"`).FindAllStringSubmatch(string(page), -1)
	require.Len(t, refs, 3, "the page loads app.js, app.css and icon.svg")
	types := map[string]string{
		"/assets/app.js":   "text/javascript; charset=utf-8",
		"/assets/app.css":  "text/css; charset=utf-8",
		"/assets/icon.svg": "image/svg+xml",
	}
	for _, ref := range refs {
		want, ok := types[ref[1]]
		require.True(t, ok, "unexpected reference %q", ref[1])
		resp, body := get(t, http.MethodGet, ts.URL+ref[1], nil)
		assert.Equal(t, http.StatusOK, resp.StatusCode, ref[1])
		assert.Equal(t, want, resp.Header.Get("Content-Type"), ref[1])
		assert.NotEmpty(t, resp.Header.Get("ETag"), ref[1])
		assert.NotEmpty(t, body, ref[1])
	}

	// Anything else is the API's, unchanged: problem+json 404 and 405.
	for _, c := range []struct {
		method, path string
		status       int
		typ          string
	}{
		{http.MethodGet, "/assets/nothing.js", 404, api.ProblemNotFound},
		{http.MethodGet, "/assets/index.html", 404, api.ProblemNotFound},
		{http.MethodGet, "/assets/", 404, api.ProblemNotFound},
		{http.MethodGet, "/index.html", 404, api.ProblemNotFound},
		{http.MethodGet, "/api/nothing", 404, api.ProblemNotFound},
		{http.MethodPost, "/", 405, api.ProblemMethodNotAllowed},
		{http.MethodDelete, "/assets/app.js", 405, api.ProblemMethodNotAllowed},
	} {
		resp, body := get(t, c.method, ts.URL+c.path, nil)
		assert.Equal(t, c.status, resp.StatusCode, "%s %s", c.method, c.path)
		assert.Equal(t, api.ProblemContentType, resp.Header.Get("Content-Type"), "%s %s", c.method, c.path)
		var p api.Problem
		require.NoError(t, json.Unmarshal(body, &p), "%s %s: %s", c.method, c.path, body)
		assert.Equal(t, api.ProblemBase+c.typ, p.Type, "%s %s", c.method, c.path)
		if c.status == 405 {
			assert.Equal(t, "GET, HEAD", resp.Header.Get("Allow"), "%s %s", c.method, c.path)
		}
	}
}
