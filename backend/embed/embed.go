// Package embed turns texts into vectors for knowledge search: every
// embedder Parley offers, behind one interface, chosen by name from the
// configuration alone. An embedder is one file of this package that
// registers itself (register) with its name and what it needs.
//
// A datastore records the model its chunks were embedded with; a process
// keeps every embedder its configuration enables (New's all), so that
// datastores made with any of them can still be searched and re-ingested.
package embed

import (
	"context"
	"fmt"
	"strings"
)

// Embedder turns texts into vectors of one dimension.
type Embedder interface {
	// Model names the embedder; it is recorded per datastore.
	Model() string
	Dimension() int
	Embed(ctx context.Context, texts []string) ([][]float32, error)
}

// Config is what the embedders are made from; server.Config fills it from
// its flags and PARLEY_* variables. Nothing here reads the environment.
type Config struct {
	// Default names the embedder of new datastores: one of Names(); empty
	// means lexical (the tests' cheap default; `parley serve` defaults to
	// use-lite).
	Default string
	// OpenAIKey enables "openai" (text-embedding-3-small) against
	// OpenAIBaseURL (an OpenAI-compatible server; empty: OpenAI's).
	OpenAIKey, OpenAIBaseURL string
	// GeminiKey enables "gemini" (text-embedding-004) against GeminiBaseURL
	// (empty: Google's).
	GeminiKey, GeminiBaseURL string
}

// maker is one embedder's entry: its name, what enables it (for the error
// naming a missing requirement), and how it is made; ok is false when cfg
// does not enable it.
type maker struct {
	name, needs string
	make        func(cfg Config) (e Embedder, ok bool, err error)
}

// makers are the embedders, in the order errors list them.
var makers = []maker{useLite, lexical, openAI, gemini}

// Names lists the embedders, in registration order.
func Names() []string {
	out := make([]string, len(makers))
	for i, m := range makers {
		out[i] = m.name
	}
	return out
}

// Check reports, without making the model, whether New would refuse cfg's
// default: one that does not exist, or one whose key is missing
// (--embeddings openai without PARLEY_OPENAI_API_KEY). The server checks
// its settings before it touches the database, so a start that is bound
// to fail does not migrate first.
func Check(cfg Config) error {
	want := cfg.Default
	if want == "" {
		want = "lexical"
	}
	for _, m := range makers {
		if m.name != want {
			continue
		}
		if m.needs == "" {
			return nil // the offline embedders need nothing
		}
		// Those that need a key are API clients: making one is cheap and
		// touches no network.
		_, ok, err := m.make(cfg)
		if err != nil {
			return fmt.Errorf("embeddings %s: %w", m.name, err)
		}
		if !ok {
			return fmt.Errorf("embeddings %q needs %s", want, m.needs)
		}
		return nil
	}
	return fmt.Errorf("embeddings %q: use %s", want, strings.Join(Names(), ", "))
}

// New makes every embedder cfg enables, and returns the one cfg.Default
// names as def. Naming one that cfg does not enable (openai without a key)
// or that does not exist is an error that says what is needed.
func New(cfg Config) (def Embedder, all []Embedder, err error) {
	want := cfg.Default
	if want == "" {
		want = "lexical"
	}
	var choices []string
	for _, m := range makers {
		choice := m.name
		if m.needs != "" {
			choice += " (needs " + m.needs + ")"
		}
		choices = append(choices, choice)
		e, ok, err := m.make(cfg)
		if err != nil {
			return nil, nil, fmt.Errorf("embeddings %s: %w", m.name, err)
		}
		if !ok {
			if m.name == want {
				return nil, nil, fmt.Errorf("embeddings %q needs %s", want, m.needs)
			}
			continue
		}
		all = append(all, e)
		if m.name == want {
			def = e
		}
	}
	if def == nil {
		return nil, nil, fmt.Errorf("embeddings %q: use %s", want, strings.Join(choices, ", "))
	}
	return def, all, nil
}
