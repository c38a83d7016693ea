package console_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"slices"
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

// textNow is the text of the first element matching css as the page has
// it now, "" when there is none: read in one evaluation, so that an element
// swapped out between finding it and reading it (htmx polling a status
// every second) is no error. For eventually's conditions.
func (b *browser) textNow(css string) string {
	b.t.Helper()
	s, err := chromedp.Run(b.ctx, chromedp.Evaluate[string](fmt.Sprintf(`(document.querySelector(%q)?.textContent ?? "").trim()`, css)))
	require.NoError(b.t, err, css)
	return s
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
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100))
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

	// Knowledge: a datastore, a file uploaded, synced without a reload.
	doc := filepath.Join(t.TempDir(), "hours.md")
	require.NoError(t, os.WriteFile(doc, []byte("# Opening hours\n\nThe shop opens at nine in the morning and closes at six in the evening, Monday to Saturday.\n"), 0o644))
	b.do("create a datastore",
		chromedp.Navigate(e.URL+"/console/datastores"),
		chromedp.SendKeys(chromedp.CSS(`#ds-name`), "Shop FAQ"),
		chromedp.Click(chromedp.CSS(`[data-testid=create-datastore] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=add-file]`)),
		chromedp.SetUploadFiles(chromedp.CSS(`#src-file`), []string{doc}),
		chromedp.Click(chromedp.CSS(`[data-testid=add-file] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=source-row]`)),
	)
	b.eventually("the upload becomes synced", func() bool { return b.textNow(`[data-testid=source-status]`) == "synced" })
	b.screenshot("console-knowledge")
	b.clean()

	// An agent answering from it, and the playground streaming its answer.
	b.do("create an agent",
		chromedp.Navigate(e.URL+"/console/agents"),
		chromedp.SendKeys(chromedp.CSS(`#new-name`), "Shop assistant"),
		chromedp.SendKeys(chromedp.CSS(`#new-instructions`), "Answer from the shop's FAQ."),
		chromedp.Evaluate[chromedp.Void](`document.querySelectorAll("#new-datastores option").forEach(o => o.selected = true)`),
		chromedp.Click(chromedp.CSS(`[data-testid=create-agent] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=playground]`)),
		chromedp.SendKeys(chromedp.CSS(`#playground-query`), "When does the shop open?"),
		chromedp.Click(chromedp.CSS(`[data-testid=playground] button[type=submit]`)),
	)
	b.eventually("streamed tokens appear", func() bool { return strings.Contains(b.textNow(`#playground-log`), "nine") })
	require.Contains(t, b.text(`#playground-sources`), "Opening hours", "the answer cites no source")
	b.screenshot("console-playground")
	b.clean()
	// The playground's turn is counted once its answer is stored, a moment
	// after its last token reached the page.
	b.eventually("the overview counts the API turn and the playground turn", func() bool {
		b.do("open the overview", chromedp.Navigate(e.URL+"/console/"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=chart]`)))
		return b.textNow(`[data-testid=turns-today]`) == "2"
	})
	b.screenshot("console-overview")
	b.clean()

	// A viewer, invited by link, cannot see keys.
	b.do("invite a viewer",
		chromedp.Navigate(e.URL+"/console/members"),
		chromedp.SendKeys(chromedp.CSS(`#invite-email`), "viewer-"+owner),
		chromedp.SetValue(chromedp.CSS(`#invite-role`), "viewer"),
		chromedp.Click(chromedp.CSS(`[data-testid=invite] button[type=submit]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=invite-link]`)),
	)
	invite := b.text(`[data-testid=invite-link]`)
	require.Contains(t, invite, "/console/link?")
	require.Contains(t, invite, "token=")
	b.clean()
	b.do("sign out, follow the invitation",
		chromedp.Click(chromedp.CSS(`[data-testid=signout]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=signin]`)),
		chromedp.Navigate(e.URL+invite[strings.Index(invite, "/console/link"):]),
		chromedp.SendKeys(chromedp.CSS(`#password`), "a viewer's long passphrase"),
		chromedp.Click(chromedp.CSS(`[data-testid=continue]`)),
		chromedp.WaitVisible(chromedp.CSS(`[data-testid=org-name]`)),
	)
	require.Equal(t, "Browser Co", b.text(`[data-testid=org-name]`))
	links, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.querySelectorAll('a[href="/console/keys"]').length`))
	require.NoError(t, err)
	require.Zero(t, links, "a viewer is shown the keys page")
	b.do("open keys as a viewer", chromedp.Navigate(e.URL+"/console/keys"), chromedp.WaitVisible(chromedp.CSS(`[data-testid=error]`)))
	require.Contains(t, b.text(`[data-testid=error]`), "viewer")
	// The 403 page itself is not a browser error; what came before was clean.
	b.mu.Lock()
	b.problems = slices.DeleteFunc(b.problems, func(p string) bool { return strings.Contains(p, "403") })
	b.mu.Unlock()
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

// eventually polls cond for up to 30 s.
func (b *browser) eventually(what string, cond func() bool) {
	b.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			b.t.Fatalf("timed out: %s", what)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
