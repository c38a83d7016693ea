package apikey

import (
	"strings"
	"testing"
)

func TestGenerateParse(t *testing.T) {
	t.Parallel()
	seen := map[string]bool{}
	for range 100 {
		k, err := Generate()
		if err != nil {
			t.Fatal(err)
		}
		if got, want := len(k.String()), Len; got != want {
			t.Fatalf("len = %d, want %d", got, want)
		}
		if seen[k.String()] {
			t.Fatal("duplicate key")
		}
		seen[k.String()] = true
		p, err := Parse(k.String())
		if err != nil {
			t.Fatalf("Parse(%q): %v", k, err)
		}
		if p.Hash() != k.Hash() {
			t.Fatal("hash differs after parse")
		}
		if !strings.HasPrefix(k.String(), k.DisplayPrefix()) || len(k.DisplayPrefix()) >= Len/2 {
			t.Fatalf("display prefix %q reveals too much or is not a prefix", k.DisplayPrefix())
		}
	}
}

func TestParseRefusesMistypedKeys(t *testing.T) {
	t.Parallel()
	k, err := Generate()
	if err != nil {
		t.Fatal(err)
	}
	s := k.String()
	// Every single-character change in the body must be caught by the checksum
	// or the alphabet check.
	for i := len(Prefix); i < len(s); i++ {
		for _, c := range "ab27z" {
			if byte(c) == s[i] {
				continue
			}
			typo := s[:i] + string(c) + s[i+1:]
			if _, err := Parse(typo); err == nil {
				t.Fatalf("Parse accepted a typo at %d: %q", i, typo)
			}
		}
	}
	for _, bad := range []string{"", "prly_", s[:Len-1], s + "a", "sk_" + s[3:], strings.ToUpper(s), "Bearer " + s} {
		if _, err := Parse(bad); err != ErrMalformed {
			t.Errorf("Parse(%q) = %v, want ErrMalformed", bad, err)
		}
	}
}

func FuzzParse(f *testing.F) {
	k, _ := Generate()
	f.Add(k.String())
	f.Add("prly_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	f.Fuzz(func(t *testing.T, s string) {
		key, err := Parse(s)
		if err == nil && key.String() != s {
			t.Fatalf("parsed %q as %q", s, key)
		}
	})
}
