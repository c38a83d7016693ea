package llm

import (
	"encoding/json"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// The tools the local engine calls by name when a request offers them
// (backend/tool's lead_capture and request_human; llm cannot import it).
const (
	localLeadCapture  = "lead_capture"
	localRequestHuman = "request_human"
)

var (
	emailPattern = regexp.MustCompile(`(?i)[a-z0-9._%+\-]+@[a-z0-9\-]+(?:\.[a-z0-9\-]+)*\.[a-z]{2,}`)
	// A phone number as people write one: international (+33 6 12 34 56 78)
	// or national (06 12 34 56 78); lead_capture accepts only the former
	// and says so.
	phonePattern = regexp.MustCompile(`(?:\+|\b0)\d[\d .()\-]{4,}\d`)
	namePattern  = regexp.MustCompile(`(?i)\bmy name is ([\p{L}'\-]+)(?:[ \t]+([\p{L}'\-]+))?`)
	// A visitor asking for a person: "talk to a human", "can I speak with
	// someone", "a real person please".
	// The verb must address the visitor's own wish ("talk to", "connect
	// me to", "get me a"): "how do I connect my agent to WhatsApp?" and
	// "can I get someone's email?" handed the conversation to people.
	humanPattern = regexp.MustCompile(`(?i)(?:\b(?:talk|speak|chat)\s+(?:to|with)|\b(?:connect|transfer|put)\s+me\s+(?:to|with|through))\b[^.?!\n]{0,30}?\b(?:human|person|agent|someone|somebody|representative|operator)s?\b` +
		`|\bget\s+(?:me\s+)?an?\s+(?:human|person|agent|representative|operator)\b` +
		`|\b(?:real|live|actual)\s+(?:person|human|agent|people)\b`)
	// What labels a number as something other than a phone number, just
	// before it: "my order 0123456789", "invoice no. 01234567", "ticket
	// #+123456789". Such a number was recorded as the visitor's phone (or
	// refused as one, and the visitor asked for the international format).
	notPhoneLabel = regexp.MustCompile(`(?i)(?:\b(?:order|invoice|ticket|ref|reference|tracking|account|case|booking|reservation|confirmation|id|parcel|package|shipment|transaction|receipt|serial|sku|customer)` +
		`(?:\s*(?:number|num|nr|no\.?|n°|id|code))?(?:\s*(?:is|was|:|=))?\s*#?\s*|#\s*)$`)
	// What labels a number as a phone number, which no notPhoneLabel
	// overrules: "phone # 0612345678", "cell #0612345678", "Tel.# +33 …"
	// (the '#' alone took them for order numbers).
	phoneLabel = regexp.MustCompile(`(?i)\b(?:phone|telephone|tel|mobile|cell|cellphone|fax|whatsapp)\.?` +
		`(?:\s*(?:number|num|nr|no\.?|n°|id))?(?:\s*(?:is|was|:|=))?\s*#?\s*$`)
)

// phoneIn is the first phone number msg gives: a number no label before it
// says is something else (an order, an invoice), of at least 7 and at most
// 15 digits (E.164's most).
func phoneIn(msg string) string {
	for _, loc := range phonePattern.FindAllStringIndex(msg, -1) {
		p := msg[loc[0]:loc[1]]
		before := msg[max(0, loc[0]-40):loc[0]]
		if n := countDigits(p); n >= 7 && n <= 15 && (!notPhoneLabel.MatchString(before) || phoneLabel.MatchString(before)) {
			return p
		}
	}
	return ""
}

// localCalls are the tool calls the local engine makes for the visitor's
// message, first thing in a turn: request_human when it asks for a person,
// lead_capture when it carries an email address or a phone number; each
// only when the request offers it (the agent lists it).
func localCalls(req Request) []ToolCall {
	if len(req.Messages) == 0 || req.Messages[len(req.Messages)-1].Role != RoleUser {
		return nil // after tool results: the engine answers
	}
	msg := req.Messages[len(req.Messages)-1].Content
	offered := func(name string) bool {
		return slices.ContainsFunc(req.Tools, func(t Tool) bool { return t.Name == name })
	}
	var calls []ToolCall
	add := func(name string, args map[string]string) {
		b, _ := json.Marshal(args)
		calls = append(calls, ToolCall{ID: "local_" + strconv.Itoa(len(calls)+1), Name: name, Arguments: string(b)})
	}
	if offered(localLeadCapture) {
		args := map[string]string{}
		if e := emailPattern.FindString(msg); e != "" {
			args["email"] = e
		}
		// A national number beside an email address is left out:
		// lead_capture refuses a call with one whole, and the address the
		// visitor gave was lost.
		if p := phoneIn(msg); p != "" && (args["email"] == "" || strings.HasPrefix(p, "+")) {
			args["phoneNumber"] = p
		}
		if len(args) > 0 {
			if m := namePattern.FindStringSubmatch(msg); m != nil {
				args["firstName"] = m[1]
				// The next word is a last name only when capitalised (or of
				// a script without case): "my name is Ada and …" is Ada.
				if r, _ := utf8.DecodeRuneInString(m[2]); m[2] != "" && !unicode.IsLower(r) {
					args["lastName"] = m[2]
				}
			}
			args["note"] = "The visitor wrote: " + clipText(strings.TrimSpace(msg), 300)
			add(localLeadCapture, args)
		}
	}
	if offered(localRequestHuman) && humanPattern.MatchString(msg) {
		add(localRequestHuman, map[string]string{"reason": "The visitor asked for a person: " + clipText(strings.TrimSpace(msg), 200)})
	}
	return calls
}

// afterTools is what the local engine says about the tool results the
// request ends with, "" when it ends with none.
func afterTools(req Request) string {
	if len(req.Messages) == 0 || req.Messages[len(req.Messages)-1].Role != RoleTool {
		return ""
	}
	var out []string
	for _, r := range req.Messages[len(req.Messages)-1].ToolResults {
		switch {
		case r.Name == localLeadCapture && r.IsError:
			out = append(out, "I could not note your contact details. Please give an email address, "+
				"or a phone number in international format with a plus and the country code (e.g. +33612345678).")
		case r.Name == localLeadCapture:
			out = append(out, "Thank you, I have noted your contact details; the team will get back to you.")
		}
	}
	return strings.Join(out, " ")
}

func countDigits(s string) int {
	n := 0
	for _, r := range s {
		if r >= '0' && r <= '9' {
			n++
		}
	}
	return n
}

// clipText is s cut to at most n characters, with an ellipsis when cut.
func clipText(s string, n int) string {
	if utf8.RuneCountInString(s) <= n {
		return s
	}
	return string([]rune(s)[:n]) + "…"
}
