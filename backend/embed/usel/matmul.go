package usel

import "sync"

// colBlock is how many columns of the weights (rows of wt) matmulGo runs
// all the rows of x through before moving on: 32 × 1536 float32 (192 KB)
// stay in L2.
const colBlock = 32

// matmul sets out ([n][m]) to x ([n][in]) times the matrix whose transpose
// is wt ([m][in]), plus bias (if not nil): each value is the dot product
// of a row of x and a row of wt. On amd64 with AVX2 and FMA it runs
// assembly kernels (matmul_amd64.go), otherwise matmulGo.
func matmul(out, x []float32, n, in int, wt []float32, m int, bias []float32) {
	matmulCols(out, x, n, in, wt, m, bias, 0, m)
}

// matmulCols computes columns [j0, j1) of matmul's out.
func matmulCols(out, x []float32, n, in int, wt []float32, m int, bias []float32, j0, j1 int) {
	if useFMA {
		matmulFMA(out, x, n, in, wt, m, bias, j0, j1)
		return
	}
	matmulGo(out, x, n, in, wt, m, bias, j0, j1)
}

// parMinMACs is the least work (multiply-adds) matmulPar splits: some
// 25 µs for the assembly kernels, against a few µs to start and wait for
// goroutines. (The attention's matmuls stay below it.)
const parMinMACs = 1 << 20

// matmulPar is matmul on up to par goroutines (the caller's and par-1
// more), each computing a range of columns: a multiple of 48 (whole
// blocks of the kernels) but for the last.
func matmulPar(par int, out, x []float32, n, in int, wt []float32, m int, bias []float32) {
	if par <= 1 || n*in*m < parMinMACs {
		matmul(out, x, n, in, wt, m, bias)
		return
	}
	step := ((m+par-1)/par + 47) / 48 * 48
	var wg sync.WaitGroup
	for j := step; j < m; j += step {
		wg.Go(func() { matmulCols(out, x, n, in, wt, m, bias, j, min(j+step, m)) })
	}
	matmulCols(out, x, n, in, wt, m, bias, 0, min(step, m))
	wg.Wait()
}

// matmulGo computes columns [j0, j1) of matmul in plain Go. Blocks of 4
// rows by 2 columns keep 8 sums in registers and read each loaded value 2
// or 4 times.
func matmulGo(out, x []float32, n, in int, wt []float32, m int, bias []float32, j0, j1 int) {
	if n < 8 {
		matmulBlock(out, x, n, in, wt, m, bias, j0, j1)
		return
	}
	for j := j0; j < j1; j += colBlock {
		matmulBlock(out, x, n, in, wt, m, bias, j, min(j+colBlock, j1))
	}
}

// matmulBlock computes columns [j0, j1) of out.
func matmulBlock(out, x []float32, n, in int, wt []float32, m int, bias []float32, j0, j1 int) {
	t := 0
	for ; t+4 <= n; t += 4 {
		x0 := x[t*in : (t+1)*in]
		x1 := x[(t+1)*in : (t+2)*in]
		x2 := x[(t+2)*in : (t+3)*in]
		x3 := x[(t+3)*in : (t+4)*in]
		x1, x2, x3 = x1[:len(x0)], x2[:len(x0)], x3[:len(x0)]
		o0 := out[t*m : (t+1)*m]
		o1 := out[(t+1)*m : (t+2)*m]
		o2 := out[(t+2)*m : (t+3)*m]
		o3 := out[(t+3)*m : (t+4)*m]
		j := j0
		for ; j+2 <= j1; j += 2 {
			w0 := wt[j*in : (j+1)*in]
			w1 := wt[(j+1)*in : (j+2)*in]
			w0, w1 = w0[:len(x0)], w1[:len(x0)]
			var s00, s01, s10, s11, s20, s21, s30, s31 float32
			for k := range x0 {
				a, b := w0[k], w1[k]
				v0, v1, v2, v3 := x0[k], x1[k], x2[k], x3[k]
				s00 += v0 * a
				s01 += v0 * b
				s10 += v1 * a
				s11 += v1 * b
				s20 += v2 * a
				s21 += v2 * b
				s30 += v3 * a
				s31 += v3 * b
			}
			if bias != nil {
				a, b := bias[j], bias[j+1]
				s00, s10, s20, s30 = s00+a, s10+a, s20+a, s30+a
				s01, s11, s21, s31 = s01+b, s11+b, s21+b, s31+b
			}
			o0[j], o0[j+1] = s00, s01
			o1[j], o1[j+1] = s10, s11
			o2[j], o2[j+1] = s20, s21
			o3[j], o3[j+1] = s30, s31
		}
		for ; j < j1; j++ {
			for r, xr := range [4][]float32{x0, x1, x2, x3} {
				out[(t+r)*m+j] = dot(xr, wt[j*in:(j+1)*in]) + biasAt(bias, j)
			}
		}
	}
	for ; t < n; t++ {
		xr := x[t*in : (t+1)*in]
		o := out[t*m : (t+1)*m]
		j := j0
		for ; j+4 <= j1; j += 4 {
			w0 := wt[j*in : (j+1)*in]
			w1 := wt[(j+1)*in : (j+2)*in]
			w2 := wt[(j+2)*in : (j+3)*in]
			w3 := wt[(j+3)*in : (j+4)*in]
			w0, w1, w2, w3 = w0[:len(xr)], w1[:len(xr)], w2[:len(xr)], w3[:len(xr)]
			var s0, s1, s2, s3 float32
			for k, v := range xr {
				s0 += v * w0[k]
				s1 += v * w1[k]
				s2 += v * w2[k]
				s3 += v * w3[k]
			}
			o[j] = s0 + biasAt(bias, j)
			o[j+1] = s1 + biasAt(bias, j+1)
			o[j+2] = s2 + biasAt(bias, j+2)
			o[j+3] = s3 + biasAt(bias, j+3)
		}
		for ; j < j1; j++ {
			o[j] = dot(xr, wt[j*in:(j+1)*in]) + biasAt(bias, j)
		}
	}
}

func dot(a, b []float32) float32 {
	b = b[:len(a)]
	var s float32
	for i, v := range a {
		s += v * b[i]
	}
	return s
}

func biasAt(bias []float32, j int) float32 {
	if bias == nil {
		return 0
	}
	return bias[j]
}
