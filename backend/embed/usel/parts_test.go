package usel

import (
	"context"
	"strings"
	"testing"
)

func cosine(a, b []float32) float64 {
	var s float64
	for i := range a {
		s += float64(a[i]) * float64(b[i])
	}
	return s
}

// A text of one part: the part's vector and the whole's are Embed's. Parts
// of a longer text (over several windows) keep their meaning: each is
// closest to its own text embedded alone.
func TestEmbedParts(t *testing.T) {
	m, err := New()
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	one := "The shop opens at nine in the morning."
	whole, parts, err := m.EmbedParts(ctx, [][]string{{one}, {}})
	if err != nil {
		t.Fatal(err)
	}
	alone, _ := m.Embed(ctx, []string{one, ""})
	if d := cosine(whole[0], alone[0]); d < 0.9999 {
		t.Errorf("whole of one part: cosine %.5f to Embed's", d)
	}
	if d := cosine(parts[0][0], alone[0]); d < 0.9999 {
		t.Errorf("the one part: cosine %.5f to Embed's", d)
	}
	if d := cosine(whole[1], alone[1]); d < 0.9999 || len(parts[1]) != 0 {
		t.Errorf("no parts: cosine %.5f, %d parts", d, len(parts[1]))
	}
	sentences := []string{
		"Dogs are welcome in the shop if they are kept on a leash.",
		"Every appliance comes with a two year warranty covering parts and labour.",
		"We accept payment by credit card, debit card and bank transfer.",
		"Parcels leave our warehouse every weekday and arrive within three working days.",
	}
	var text []string
	for range 4 { // over 128 tokens: a part is cut by a window
		text = append(text, sentences...)
	}
	whole, parts, err = m.EmbedParts(ctx, [][]string{text})
	if err != nil {
		t.Fatal(err)
	}
	long, _ := m.EmbedLong(ctx, []string{strings.Join(text, " ")})
	if d := cosine(whole[0], long[0]); d < 0.99 {
		t.Errorf("whole: cosine %.5f to EmbedLong's", d)
	}
	own, _ := m.Embed(ctx, sentences)
	for j, p := range parts[0] {
		best, bestD := -1, -2.0
		for i, o := range own {
			if d := cosine(p, o); d > bestD {
				best, bestD = i, d
			}
		}
		if best != j%len(sentences) {
			t.Errorf("part %d (%q) is closest to %q", j, text[j], sentences[best])
		}
	}
}
