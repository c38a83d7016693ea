package usel

import (
	"context"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
)

// EmbedParts embeds texts given as their parts (sentences, say): a text is
// its parts' tokens end to end, read in windows of MaxTokens as EmbedLong
// reads a text, and whole[i] is what EmbedLong gives it. Each part also
// gets a vector, parts[i][j], pooled from the outputs of its own tokens in
// the windows that read them, so in the context of its neighbours, at
// almost no cost beyond whole's (one row of the last matmul and the tanh
// layer per part). A part of no tokens gets the vector of no tokens.
func (m *Model) EmbedParts(ctx context.Context, texts [][]string) (whole [][]float32, parts [][][]float32, err error) {
	type window struct {
		text  int
		ids   []int32
		spans [][2]int // in the window
		part  []int    // the part of each span
	}
	var windows []window
	partTokens := make([][]int, len(texts))
	for i, t := range texts {
		var ids []int32
		var owner []int
		partTokens[i] = make([]int, len(t))
		for j, p := range t {
			e := m.tok.encode(p)
			ids = append(ids, e...)
			for range e {
				owner = append(owner, j)
			}
			partTokens[i][j] = len(e)
		}
		if len(ids) == 0 {
			windows = append(windows, window{text: i})
			continue
		}
		for start := 0; start < len(ids); start += MaxTokens {
			end := min(start+MaxTokens, len(ids))
			wd := window{text: i, ids: ids[start:end:end]}
			for a := start; a < end; {
				b := a
				for b < end && owner[b] == owner[a] {
					b++
				}
				wd.spans = append(wd.spans, [2]int{a - start, b - start})
				wd.part = append(wd.part, owner[a])
				a = b
			}
			windows = append(windows, wd)
		}
	}
	// Each window: its vector (as forward), and its spans' output sums.
	vecs := make([][]float32, len(windows))
	sums := make([][][]float32, len(windows))
	var next atomic.Int64
	workers := min(len(windows), runtime.GOMAXPROCS(0))
	par := 1
	if workers == 1 {
		par = runtime.GOMAXPROCS(0)
	}
	work := func() {
		w := m.work.Get().(*workspace)
		defer m.work.Put(w)
		w.par = par
		for ctx.Err() == nil {
			i := int(next.Add(1)) - 1
			if i >= len(windows) {
				return
			}
			wd := windows[i]
			sums[i] = make([][]float32, len(wd.spans))
			for j := range sums[i] {
				sums[i][j] = make([]float32, width)
			}
			p := w.pooled
			clear(p)
			if len(wd.ids) > 0 {
				m.encode(w, wd.ids, p, wd.spans, sums[i])
			}
			vecs[i] = make([]float32, Dim)
			m.head(w, p, vecs[i])
		}
	}
	var wg sync.WaitGroup
	for range max(workers, 1) {
		wg.Go(work)
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	whole = make([][]float32, len(texts))
	partSums := make([][][]float32, len(texts))
	for i, t := range texts {
		whole[i] = make([]float32, Dim)
		partSums[i] = make([][]float32, len(t))
		for j := range t {
			partSums[i][j] = make([]float32, width)
		}
	}
	for k, wd := range windows {
		weight := float32(max(len(wd.ids), 1))
		for j, x := range vecs[k] {
			whole[wd.text][j] += weight * x
		}
		for s, part := range wd.part {
			for j, x := range sums[k][s] {
				partSums[wd.text][part][j] += x
			}
		}
	}
	w := m.work.Get().(*workspace)
	defer m.work.Put(w)
	w.par = 1
	parts = make([][][]float32, len(texts))
	for i, t := range texts {
		normalize(whole[i])
		parts[i] = make([][]float32, len(t))
		for j := range t {
			p := partSums[i][j]
			if n := partTokens[i][j]; n > 0 {
				for x := range p {
					p[x] /= float32(n)
				}
			}
			parts[i][j] = make([]float32, Dim)
			m.head(w, p, parts[i][j])
		}
	}
	return whole, parts, nil
}

func normalize(v []float32) {
	var ss float32
	for _, x := range v {
		ss += x * x
	}
	inv := float32(1 / math.Sqrt(float64(max(ss, 1e-12))))
	for j := range v {
		v[j] *= inv
	}
}
