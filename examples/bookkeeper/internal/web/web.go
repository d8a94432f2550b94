package web

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
	"time"
)

//go:embed static
var static embed.FS

// ContentSecurityPolicy is the policy sent with the page: everything from
// its own origin only, no inline script or style, no framing.
const ContentSecurityPolicy = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self'; " +
	"connect-src 'self'; object-src 'none'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Page is the name of the page among the embedded files.
const Page = "index.html"

var contentTypes = map[string]string{
	".html": "text/html; charset=utf-8",
	".js":   "text/javascript; charset=utf-8",
	".css":  "text/css; charset=utf-8",
	".svg":  "image/svg+xml",
}

type file struct {
	body  []byte
	etag  string
	ctype string
}

// files reads the embedded files once.
func files() map[string]file {
	out := map[string]file{}
	entries, err := fs.ReadDir(static, "static")
	if err != nil {
		panic("web: " + err.Error()) // embedded at build time: cannot fail
	}
	for _, e := range entries {
		if e.IsDir() {
			continue
		}
		body, err := fs.ReadFile(static, "static/"+e.Name())
		if err != nil {
			panic("web: " + err.Error())
		}
		ctype, ok := contentTypes[path.Ext(e.Name())]
		if !ok {
			ctype = "application/octet-stream"
		}
		sum := sha256.Sum256(body)
		out[e.Name()] = file{body: body, etag: `"` + hex.EncodeToString(sum[:12]) + `"`, ctype: ctype}
	}
	return out
}

// Handler serves the page at / and its assets at /assets/{name}; any other
// path, and an asset it does not have, go to notFound. It answers GET and
// HEAD, with ETag and If-None-Match (http.ServeContent); the caller routes
// only those methods here.
func Handler(notFound http.Handler) http.Handler {
	all := files()
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var name string
		switch p := r.URL.Path; {
		case p == "/":
			name = Page
		case strings.HasPrefix(p, "/assets/") && p != "/assets/"+Page:
			name = strings.TrimPrefix(p, "/assets/")
		}
		f, ok := all[name]
		if !ok {
			notFound.ServeHTTP(w, r)
			return
		}
		h := w.Header()
		h.Set("Content-Type", f.ctype)
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", f.etag)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		if name == Page {
			h.Set("Content-Security-Policy", ContentSecurityPolicy)
		}
		http.ServeContent(w, r, name, time.Time{}, bytes.NewReader(f.body))
	})
}
