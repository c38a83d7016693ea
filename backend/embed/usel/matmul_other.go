//go:build !amd64 || purego

package usel

// useFMA is false: there are no assembly kernels for this architecture.
const useFMA = false

func matmulFMA(out, x []float32, n, in int, wt []float32, m int, bias []float32, j0, j1 int) {
	panic("usel: no assembly kernels")
}
