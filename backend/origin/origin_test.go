package origin

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestCheck(t *testing.T) {
	for _, ok := range []string{"*", "https://app.example", "http://localhost:5173", "https://*.example.com", "https://*.example.com:8443"} {
		require.NoError(t, Check(ok), ok)
	}
	for _, bad := range []string{"", "app.example", "https://app.example/", "https://app.example/path", "ftp://x.example",
		"https://*.*.example", "https://a.*.example", "https://u@x.example", "https://x.example?q", "javascript:alert(1)", "*.example.com"} {
		require.Error(t, Check(bad), bad)
	}
}

// TestCheckAsBrowsersSend refuses origins a browser never sends, which
// would be stored and never match (Match compares strings): a trailing
// "?", "#" or ":", a default or impossible port, a host not in ASCII.
func TestCheckAsBrowsersSend(t *testing.T) {
	for _, ok := range []string{"https://xn--bcher-kva.example", "http://[::1]:3000", "https://app.example:8443", "HTTPS://App.Example", "http://x.example:443"} {
		require.NoError(t, Check(ok), ok)
	}
	for _, bad := range []string{"https://app.example?", "https://app.example#", "https://app.example:", "https://*.example.com:",
		"https://app.example:443", "http://app.example:80", "https://*.example.com:443", "https://app.example:99999",
		"https://app.example:0", "https://app.example:08443", "https://bücher.example", "https://*.bücher.example"} {
		require.Error(t, Check(bad), bad)
	}
	require.ErrorContains(t, Check("https://bücher.example"), "punycode")
	require.ErrorContains(t, Check("https://app.example:443"), "default port")
}

func TestMatch(t *testing.T) {
	list := []string{"https://App.example", "https://*.shop.example", "http://localhost:5173"}
	for _, tc := range []struct {
		origin string
		want   bool
	}{
		{"https://app.example", true},
		{"https://APP.example", true},
		{"http://app.example", false},
		{"https://app.example:444", false},
		{"https://eu.shop.example", true},
		{"https://a.b.shop.example", true},
		{"https://shop.example", false},
		{"https://evilshop.example", false},
		{"http://eu.shop.example", false},
		{"http://localhost:5173", true},
		{"http://localhost:5174", false},
		{"null", false},
	} {
		require.Equal(t, tc.want, Match(list, tc.origin), tc.origin)
	}
	require.True(t, Match([]string{"*"}, "null"))
	require.False(t, Match(nil, "https://app.example"))
}

func TestAdmit(t *testing.T) {
	require.NoError(t, Admit(context.Background(), "a", nil), "an unmarked request passes")
	granted := 0
	ctx := With(context.Background(), &Request{Origin: "https://w.example", Grant: func() { granted++ }})
	require.ErrorContains(t, Admit(ctx, "a1", nil), "https://w.example")
	require.ErrorContains(t, Admit(ctx, "a1", []string{"https://x.example"}), "allowedOrigins")
	require.Zero(t, granted)
	require.NoError(t, Admit(ctx, "a1", []string{"https://w.example"}))
	require.Equal(t, 1, granted)

	// A form is named as one.
	err := AdmitForm(ctx, "f1", []string{"https://x.example"})
	require.ErrorContains(t, err, "form f1 does not accept browser calls from https://w.example")
	require.ErrorContains(t, err, "the form's allowedOrigins")
	require.Equal(t, 1, granted)
	require.NoError(t, AdmitForm(ctx, "f1", []string{"*"}))
	require.Equal(t, 2, granted)
}
