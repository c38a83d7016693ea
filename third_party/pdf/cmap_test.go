package pdf

import (
	"math/rand/v2"
	"testing"
)

// PATCHED (parley): the indexed lookup of codespace ranges and bfranges
// (codeIndex) finds what upstream's scan found: the first range, in the
// cmap's order, with lo <= code <= hi as strings, lo of the code's length
// and hi of any length. Ranges overlap, nest, are empty or reversed.
func TestCodeIndexIsTheScan(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	code := func(n int) string {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.IntN(6)) * 51 // few values, so ranges meet and overlap
		}
		return string(b)
	}
	for round := range 2000 {
		var m cmap
		for range rng.IntN(12) {
			n := 1 + rng.IntN(3)
			hiLen := n
			if rng.IntN(4) == 0 {
				hiLen = rng.IntN(4) // another length, or empty
			}
			m.bfrange = append(m.bfrange, bfrange{lo: code(n), hi: code(hiLen)})
		}
		for n := 1; n <= 3; n++ {
			for range 50 {
				c := code(n)
				want := -1
				for i, r := range m.bfrange {
					if len(r.lo) == n && r.lo <= c && c <= r.hi {
						want = i
						break
					}
				}
				if got := m.ranges(n).find(c); got != want {
					t.Fatalf("round %d: code %x in %+v: found range %d, want %d", round, c, m.bfrange, got, want)
				}
			}
		}
	}
}

// PATCHED (parley): appendUTF16 decodes as utf16Decode did, surrogate
// pairs and unpaired surrogates alike.
func TestAppendUTF16IsUTF16Decode(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	units := []uint16{0x0041, 0x00e9, 0xd83d, 0xde00, 0xdc00, 0xd800, 0xfffd, 0x4e2d}
	for range 5000 {
		var b []byte
		for range rng.IntN(6) {
			u := units[rng.IntN(len(units))]
			b = append(b, byte(u>>8), byte(u))
		}
		want := []rune(utf16Decode(string(b)))
		if got := appendUTF16(nil, string(b)); string(got) != string(want) {
			t.Fatalf("% x: got %q, want %q", b, string(got), string(want))
		}
	}
}
