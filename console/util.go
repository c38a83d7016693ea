package console

import (
	"fmt"
	"net/http"
	"strings"
	"time"
)

func isHere(path, item string) bool {
	if item == "/console/" {
		return path == item
	}
	return path == item || strings.HasPrefix(path, item+"/")
}

func statusText(status int) string { return fmt.Sprintf("%d %s", status, http.StatusText(status)) }

// when shows a time the way the console does (UTC), or "never".
func when(t *time.Time) string {
	if t == nil || t.IsZero() {
		return "never"
	}
	return t.UTC().Format("2006-01-02 15:04 UTC")
}

func day(t time.Time) string { return t.UTC().Format("2006-01-02") }
