// Copyright 2014 The Go Authors.  All rights reserved.
// Use of this source code is governed by a BSD-style
// license that can be found in the LICENSE file.

package pdf

import (
	"fmt"
	"io"
	"runtime"
)

// PATCHED (parley): bounds on the interpreter. Upstream pushed every operand
// onto an unbounded stack: 60 MiB of "0 " (a 61 KB deflated file) held GiBs.
const (
	// maxStack bounds the values held by the operand stack, counting the
	// elements of arrays and dictionaries on it, the elements of one array
	// or dictionary operand, the dictionary stack and what "def" stores.
	// Content-stream operators take a handful of operands and a CMap
	// block at most a few hundred (ISO 32000-1, Annex C: 100 mappings).
	maxStack = 10000
	// maxInterpretInput bounds the decompressed bytes Interpret reads,
	// so the strings it holds: above any real content stream or CMap.
	maxInterpretInput = 128 << 20
)

// A Stack represents a stack of values.
type Stack struct {
	stack []Value
	sizes []int // PATCHED (parley): weight of each value, see weight
	size  int   // PATCHED (parley): sum of sizes, at most maxStack
}

func (stk *Stack) Len() int {
	return len(stk.stack)
}

// Push pushes v. PATCHED (parley): it panics when the stack would hold more
// than maxStack values, counting the elements of arrays and dictionaries.
func (stk *Stack) Push(v Value) {
	w := weight(v.data, maxStack-stk.size+1)
	if stk.size+w > maxStack {
		panic(&limitError{fmt.Sprintf("operand stack of more than %d values", maxStack)})
	}
	stk.stack = append(stk.stack, v)
	stk.sizes = append(stk.sizes, w)
	stk.size += w
}

func (stk *Stack) Pop() Value {
	n := len(stk.stack)
	if n == 0 {
		return Value{}
	}
	v := stk.stack[n-1]
	stk.stack[n-1] = Value{}
	stk.stack = stk.stack[:n-1]
	stk.size -= stk.sizes[n-1]
	stk.sizes = stk.sizes[:n-1]
	return v
}

// weight (PATCHED, parley) is 1 for a value plus the weight of each element
// of an array or dictionary, counted up to limit only: "def" can make a
// dictionary that holds itself.
func weight(x object, limit int) int {
	n := 1
	switch x := x.(type) {
	case array:
		for _, e := range x {
			if n > limit {
				break
			}
			n += weight(e, limit-n)
		}
	case dict:
		for _, e := range x {
			if n > limit {
				break
			}
			n += weight(e, limit-n)
		}
	}
	return n
}

// limitReader (PATCHED, parley) panics once more than n bytes are read.
type limitReader struct {
	r io.Reader
	n int64
}

func (l *limitReader) Read(p []byte) (int, error) {
	k, err := l.r.Read(p)
	if l.n -= int64(k); l.n < 0 {
		panic(&limitError{fmt.Sprintf("stream of more than %d bytes", maxInterpretInput)})
	}
	return k, err
}

func newDict() Value {
	return Value{nil, objptr{}, make(dict)}
}

// Interpret interprets the content in a stream as a basic PostScript program,
// pushing values onto a stack and then calling the do function to execute
// operators. The do function may push or pop values from the stack as needed
// to implement op.
//
// Interpret handles the operators "dict", "currentdict", "begin", "end", "def", and "pop" itself.
//
// Interpret is not a full-blown PostScript interpreter. Its job is to handle the
// very limited PostScript found in certain supporting file formats embedded
// in PDF files, such as cmap files that describe the mapping from font code
// points to Unicode code points.
//
// A stream can also be represented by an array of streams that has to be handled as a single stream
// In the case of a simple stream read only once, otherwise get the length of the stream to handle it properly
//
// There is no support for executable blocks, among other limitations.
func Interpret(strm Value, do func(stk *Stack, op string)) {
	var stk Stack
	var dicts []dict
	var rd io.Reader
	if strm.Kind() == Array {
		readers := make([]io.Reader, 0, strm.Len())
		for i := 0; i < strm.Len(); i++ {
			readers = append(readers, strm.Index(i).Reader())
		}
		rd = io.MultiReader(readers...)
	} else {
		rd = strm.Reader()
	}

	b := newBuffer(&limitReader{rd, maxInterpretInput}, 0) // PATCHED (parley)
	b.maxElems = maxStack                                  // PATCHED (parley)
	defined := 0                                           // PATCHED (parley): weight stored by "def"
	b.allowEOF = true
	b.allowObjptr = false
	b.allowStream = false

Reading:
	for {
		tok := b.readToken()
		if tok == io.EOF {
			break
		}
		if kw, ok := tok.(keyword); ok {
			switch kw {
			case "null", "[", "]", "<<", ">>":
				break
			default:
				for i := len(dicts) - 1; i >= 0; i-- {
					if v, ok := dicts[i][name(kw)]; ok {
						stk.Push(Value{nil, objptr{}, v})
						continue Reading
					}
				}
				do(&stk, string(kw))
				continue
			case "dict":
				stk.Pop()
				stk.Push(Value{nil, objptr{}, make(dict)})
				continue
			case "currentdict":
				if len(dicts) == 0 {
					panic("no current dictionary")
				}
				stk.Push(Value{nil, objptr{}, dicts[len(dicts)-1]})
				continue
			case "begin":
				d := stk.Pop()
				if d.Kind() != Dict {
					panic("cannot begin non-dict")
				}
				if len(dicts) >= maxStack { // PATCHED (parley)
					panic(&limitError{fmt.Sprintf("dictionary stack of more than %d dictionaries", maxStack)})
				}
				dicts = append(dicts, d.data.(dict))
				continue
			case "end":
				if len(dicts) <= 0 {
					panic("mismatched begin/end")
				}
				dicts = dicts[:len(dicts)-1]
				continue
			case "def":
				val := stk.Pop()
				if len(dicts) <= 0 {
					// A "def" with no dict opened by "begin" is invalid
					// PostScript, but producers emit it in practice inside a
					// malformed CMap dictionary LITERAL (e.g.
					// "<</Registry (x) def/Ordering (y) def>>", where "def"
					// should not appear between "<<" and ">>" at all). This
					// package is a limited PostScript subset for embedded
					// CMap/function data, not a strict validator (see the
					// doc comment above), so discard the operand and keep
					// going rather than take the whole Interpret call down
					// over one producer's malformed dict.
					continue
				}
				key, ok := stk.Pop().data.(name)
				if !ok {
					// panic(fmt.Sprintf("def of non-name: %+v", stk.Pop().data))
					// Skip the value if it has key without value
					continue
				}
				// PATCHED (parley): what "def" stores outlives the stack.
				if defined += weight(val.data, maxStack); defined > maxStack {
					panic(&limitError{fmt.Sprintf("more than %d values defined", maxStack)})
				}
				dicts[len(dicts)-1][key] = val.data
				continue
			case "pop":
				stk.Pop()
				continue
			}
		}
		b.unreadToken(tok)
		obj, ok := readObjectRecover(b)
		if !ok {
			continue
		}
		stk.Push(Value{nil, objptr{}, obj})
	}
}

// readObjectRecover reads one object, recovering a panic from malformed
// input rather than letting it escape Interpret.
//
// Interpret parses an embedded PostScript-SUBSET stream (a CMap, a function)
// that is not always a well-formed PDF object graph — for example, a
// producer's CMap embedding "def" tokens inside what should be a plain
// dictionary literal, which readObject (correctly, for a real PDF object)
// treats as a hard parse error. Letting that escape takes the WHOLE calling
// operation down — e.g. reading a font's /ToUnicode CMap — over one
// unparseable operand, even when the caller (readCmap) only needs the
// recognized cmap operators and the rest of the stream is fine. ok=false
// means the operand is discarded; the Reading loop continues from wherever
// the underlying buffer's position landed.
func readObjectRecover(b *buffer) (obj object, ok bool) {
	defer func() {
		if r := recover(); r != nil {
			// Parse errors are raised with panic(fmt.Errorf(...)) and mean
			// "discard this operand and keep going". Anything else (nil
			// deref, index out of range, ...) is a genuine bug and must not
			// be silently swallowed as malformed input.
			if _, isRuntime := r.(runtime.Error); isRuntime {
				panic(r)
			}
			// PATCHED (parley): nor is a bound exceeded (lex.go).
			if _, isLimit := r.(*limitError); isLimit {
				panic(r)
			}
			obj, ok = nil, false
		}
	}()
	return b.readObject(), true
}
