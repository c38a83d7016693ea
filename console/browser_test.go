package console_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/log"
	cdpage "github.com/chromedp/cdproto/page"
	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"
)

// browser is a headless Chromium tab that records every JavaScript error,
// console error and Content-Security-Policy violation it sees.
type browser struct {
	t        *testing.T
	ctx      context.Context
	mu       sync.Mutex
	problems []string
}

// newBrowser starts Chromium (Debian's package, installed by make test;
// PARLEY_CHROME names another binary).
func newBrowser(t *testing.T) *browser {
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.NoSandbox, // CI runs as root
		chromedp.WindowSize(1280, 900),
	)
	if p := os.Getenv("PARLEY_CHROME"); p != "" {
		opts = append(opts, chromedp.ExecPath(p))
	}
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancel := chromedp.NewContext(actx)
	ctx, cancelTimeout := context.WithTimeout(ctx, 3*time.Minute)
	t.Cleanup(func() { cancelTimeout(); cancel(); cancelAlloc() })
	b := &browser{t: t, ctx: ctx}
	err := chromedp.Listen(ctx, func(ev any) {
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			msg := ev.ExceptionDetails.Text
			if ev.ExceptionDetails.Exception != nil {
				msg += " " + ev.ExceptionDetails.Exception.Description
			}
			b.problem("exception: " + msg)
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledTypeError {
				var parts []string
				for _, a := range ev.Args {
					parts = append(parts, a.Description+string(a.Value))
				}
				b.problem("console.error: " + strings.Join(parts, " "))
			}
		case *log.EventEntryAdded:
			// CSP violations and failed loads are reported here.
			if ev.Entry.Level == log.EntryLevelError {
				b.problem(fmt.Sprintf("%s: %s (%s)", ev.Entry.Source, ev.Entry.Text, ev.Entry.URL))
			}
		}
	})
	require.NoError(t, err, "cannot start Chromium: run scripts/chromium-setup.sh (make test does)")
	// Violations also reach the page as events: count them there too.
	_, err = chromedp.Call(ctx, cdpage.AddScriptToEvaluateOnNewDocument, cdpage.AddScriptToEvaluateOnNewDocumentParams{Source: `window.__csp = [];
document.addEventListener("securitypolicyviolation", e => window.__csp.push(e.violatedDirective + " " + e.blockedURI));`})
	require.NoError(t, err)
	return b
}

func (b *browser) problem(p string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.problems = append(b.problems, p)
}

// do runs actions, failing the test on error.
func (b *browser) do(what string, actions ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	require.NoError(b.t, chromedp.Do(b.ctx, actions...), what)
}

// text is the text of the first element matching css.
func (b *browser) text(css string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Text(chromedp.CSS(css)))
	require.NoError(b.t, err, css)
	return strings.TrimSpace(s)
}

// clean fails the test on any problem recorded so far, and any violation
// the current page saw.
func (b *browser) clean() {
	b.t.Helper()
	csp, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`window.__csp || []`))
	require.NoError(b.t, err)
	b.mu.Lock()
	defer b.mu.Unlock()
	require.Empty(b.t, b.problems, "the browser reported errors")
	require.Empty(b.t, csp, "the page violated its Content-Security-Policy")
}

// screenshot saves the page to $PARLEY_SCREENSHOTS/NAME.png when that is set
// (the README's pictures: PARLEY_SCREENSHOTS=$PWD/docs/img); otherwise it
// does nothing.
func (b *browser) screenshot(name string) {
	b.t.Helper()
	dir := os.Getenv("PARLEY_SCREENSHOTS")
	if dir == "" {
		return
	}
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(80))
	require.NoError(b.t, err)
	require.NoError(b.t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
}

// testBrowserWalk walks what a new organization does, in Chromium.
func testBrowserWalk(t *testing.T, e *env) {
	b := newBrowser(t)
	ctx := context.Background()
	org := e.Bootstrap("Browser Co", "pro")
	owner := fmt.Sprintf("walker-%d@example.com", seq.Add(1))
	_, err := e.members.CreateOwner(ctx, org.ID, owner)
	require.NoError(t, err)
	token, err := e.members.SignInLink(ctx, org.ID, owner)
	require.NoError(t, err)

	// The printed sign-in link: it asks, then signs in.
	b.do("sign in with the link",
		chromedp.Navigate(e.URL+"/console/link?token="+token),
		chromedp.Click(chromedp.CSS(`[data-testid=continue]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=org-name]`)),
	)
	require.Equal(t, "Browser Co", b.text(`[data-testid=org-name]`))
	b.screenshot("console-overview")
	b.clean()

	// A chat-only key on a lower plan, used from here against the REST API.
	agent := e.api(t, "POST", "/api/agents", org.Key, map[string]any{"name": "Walker", "instructions": "Be brief."})
	require.Equal(t, http.StatusCreated, agent.Status, "%s", agent.Body)
	b.do("create a key",
		chromedp.Navigate(e.URL+"/console/keys"),
		chromedp.SendKeys(chromedp.CSS(`#key-name`), "browser widget"),
		chromedp.SetValue(chromedp.CSS(`#key-plan`), "starter"),
		chromedp.Click(chromedp.CSS(`[data-testid=create-key] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=secret]`)),
	)
	secret := b.text(`[data-testid=secret]`)
	require.True(t, strings.HasPrefix(secret, "prly_"), secret)
	b.screenshot("console-keys")
	r := e.api(t, "GET", "/api/agents", secret, nil)
	require.Equal(t, http.StatusForbidden, r.Status, "a chat-only key managed agents: %s", r.Body)
	id := strings.SplitN(strings.SplitN(string(agent.Body), `"id":"`, 2)[1], `"`, 2)[0]
	r = e.api(t, "POST", "/api/v2/agent/"+id+"/chat", secret, map[string]any{"query": "Hello", "conversationId": "walk-1"})
	require.Equal(t, http.StatusOK, r.Status, "%s", r.Body)
	require.Equal(t, "60", r.Header.Get("X-RateLimit-Limit"), "the key is not on the starter plan")
	b.clean()

	// Sign out: back to the sign-in page, and the console is closed.
	b.do("sign out",
		chromedp.Click(chromedp.CSS(`[data-testid=signout]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=signin]`)),
		chromedp.Navigate(e.URL+"/console/keys"),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=signin]`)),
	)
	url, err := chromedp.Run(b.ctx, chromedp.Location())
	require.NoError(t, err)
	require.Contains(t, url, "/console/signin")
	b.clean()
}
