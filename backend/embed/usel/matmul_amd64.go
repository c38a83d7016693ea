//go:build amd64 && !purego

package usel

import "golang.org/x/sys/cpu"

// useFMA selects the AVX2/FMA kernels of matmul_amd64.s (Haswell, Zen and
// later); other amd64 processors run matmulGo.
var useFMA = cpu.X86.HasAVX2 && cpu.X86.HasFMA

// fmaColBlock is how many rows of wt matmulFMA runs all the rows of x
// through before moving on (a multiple of 3): 48 × 1536 float32 (288 KB)
// stay in L2.
const fmaColBlock = 48

// matmulFMA is matmulCols with the assembly kernels: kern4x3 computes 4
// rows by 3 columns of out at a time, 12 sums of 8 lanes in registers. They
// read 8 values at a time: an in that is not a multiple of 8 goes to
// matmulGo.
func matmulFMA(out, x []float32, n, in int, wt []float32, m int, bias []float32, j0, j1 int) {
	if j0 < 0 || j1 > m {
		panic("usel: matmul columns out of range")
	}
	if n == 0 || j0 >= j1 {
		return
	}
	if in%8 != 0 || in == 0 {
		matmulGo(out, x, n, in, wt, m, bias, j0, j1)
		return
	}
	// The kernels read and write within these (panics if one is short).
	out, x, wt = out[:n*m], x[:n*in], wt[:m*in]
	if bias != nil {
		bias = bias[:m]
	}
	for b0 := j0; b0 < j1; b0 += fmaColBlock {
		b1 := min(b0+fmaColBlock, j1)
		c := (b1 - b0) / 3 * 3 // columns for kern4x3, the rest by dot8
		for t := 0; t < n; t += 4 {
			if n-t == 1 {
				// One row: kern1x4.
				j := b0
				if c4 := (b1 - b0) &^ 3; c4 > 0 {
					kern1x4(&x[t*in], &wt[j*in], &out[t*m+j], biasPtr(bias, j), in, c4)
					j += c4
				}
				for ; j < b1; j++ {
					out[t*m+j] = dot8(&x[t*in], &wt[j*in], in) + biasAt(bias, j)
				}
				break
			}
			// Rows t to t+3; past n, repeats of the last row, whose
			// values are stored twice.
			var r [4]int
			for i := range r {
				r[i] = min(t+i, n-1)
			}
			if c > 0 {
				kern4x3(&x[r[0]*in], &x[r[1]*in], &x[r[2]*in], &x[r[3]*in], &wt[b0*in],
					&out[r[0]*m+b0], &out[r[1]*m+b0], &out[r[2]*m+b0], &out[r[3]*m+b0],
					biasPtr(bias, b0), in, c)
			}
			for j := b0 + c; j < b1; j++ {
				for i := t; i < min(t+4, n); i++ {
					out[i*m+j] = dot8(&x[i*in], &wt[j*in], in) + biasAt(bias, j)
				}
			}
		}
	}
}

func biasPtr(bias []float32, j int) *float32 {
	if bias == nil {
		return nil
	}
	return &bias[j]
}

//go:noescape
func kern4x3(x0, x1, x2, x3, w, o0, o1, o2, o3, bias *float32, in, cols int)

//go:noescape
func kern1x4(x, w, out, bias *float32, in, cols int)

//go:noescape
func dot8(x, w *float32, in int) float32
