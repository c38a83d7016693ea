package console

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"net/http"
	"path"
	"strings"
)

// The console's own assets and htmx (2.0.11, vendored from the npm package
// htmx.org with its licence, htmx.LICENSE: Zero-Clause BSD).
//
//go:embed static
var staticFS embed.FS

// assets maps each file's plain name to its content-hashed one, and back:
// a hashed name never changes meaning, so it is cached for a year.
var assets, hashed = func() (map[string]string, map[string]string) {
	byName, byHash := map[string]string{}, map[string]string{}
	entries, _ := fs.ReadDir(staticFS, "static")
	for _, e := range entries {
		b, _ := staticFS.ReadFile("static/" + e.Name())
		sum := sha256.Sum256(b)
		ext := path.Ext(e.Name())
		h := strings.TrimSuffix(e.Name(), ext) + "." + hex.EncodeToString(sum[:6]) + ext
		byName[e.Name()] = h
		byHash[h] = e.Name()
	}
	return byName, byHash
}()

// asset is the URL of a static file.
func asset(name string) string { return "/console/static/" + assets[name] }

func serveStatic(w http.ResponseWriter, r *http.Request) {
	name, ok := hashed[r.PathValue("file")]
	if !ok {
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Cache-Control", "public, max-age=31536000, immutable")
	http.ServeFileFS(w, r, staticFS, "static/"+name)
}
