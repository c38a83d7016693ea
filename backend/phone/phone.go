// Package phone decides what a phone number is, wherever Parley takes one:
// a contact's (the API, chat, lead_capture) and a form's phone fields.
package phone

import (
	"regexp"
	"strings"
	"unicode"
)

// e164 is a phone number as Parley keeps it: a plus, then 7 to 15 digits,
// the first not 0 (no country's numbers are shorter).
var e164 = regexp.MustCompile(`^\+[1-9][0-9]{6,14}$`)

// Normalize drops what people write in a phone number besides its digits
// and its plus: spaces (a no-break space too, as a number copied from a
// web page has), dots, dashes (the typographic ones too), slashes,
// brackets, and a "(0)" trunk prefix written after the country code
// ("+44 (0)20 7946 0958" is +442079460958, which is dialled from abroad).
func Normalize(s string) string {
	s = strings.ReplaceAll(strings.TrimSpace(s), "(0)", "")
	return strings.Map(func(r rune) rune {
		if unicode.IsSpace(r) || strings.ContainsRune(".-()/\u2010\u2011\u2012\u2013\u2014\u2212", r) {
			return -1
		}
		return r
	}, s)
}

// Valid reports whether s, normalized, is a phone number in international
// (E.164) format.
func Valid(s string) bool { return e164.MatchString(s) }
