package usel

import (
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

func randFloats(r *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = r.Float32()*2 - 1
	}
	return v
}

// matmul (the assembly kernels where the CPU has them) against a float64
// reference, over shapes that exercise every edge of the blocking.
func TestMatmul(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 3, 4, 5, 7, 8, 13, 85} {
		for _, in := range []int{0, 1, 7, 8, 9, 24, 64, 100, 256} {
			for _, m := range []int{1, 2, 3, 4, 5, 47, 48, 49, 100, 130} {
				x, wt := randFloats(r, n*in), randFloats(r, m*in)
				var bias []float32
				if (n+in+m)%2 == 0 {
					bias = randFloats(r, m)
				}
				for name, f := range map[string]func(out, x []float32, n, in int, wt []float32, m int, bias []float32){
					"matmul": matmul, "matmulGo": matmulGoAll,
				} {
					out := randFloats(r, n*m)
					f(out, x, n, in, wt, m, bias)
					for i := range n {
						for j := range m {
							var want float64
							for k := range in {
								want += float64(x[i*in+k]) * float64(wt[j*in+k])
							}
							if bias != nil {
								want += float64(bias[j])
							}
							if got := out[i*m+j]; math.Abs(float64(got)-want) > 1e-5*float64(in+1) {
								t.Fatalf("%s n=%d in=%d m=%d: out[%d][%d] = %v, want %v", name, n, in, m, i, j, got, want)
							}
						}
					}
				}
			}
		}
	}
}

// BenchmarkMatmul: the model's shapes (85 tokens).
func BenchmarkMatmul(b *testing.B) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, s := range []struct{ n, in, m int }{
		{85, 256, 768}, {85, 256, 512}, {85, 512, 1536}, {85, 1536, 512}, {1, 1536, 512}, {85, 64, 85},
	} {
		x, wt, bias := randFloats(r, s.n*s.in), randFloats(r, s.m*s.in), randFloats(r, s.m)
		out := make([]float32, s.n*s.m)
		for name, f := range map[string]func(out, x []float32, n, in int, wt []float32, m int, bias []float32){
			"matmul": matmul, "matmulGo": matmulGoAll,
		} {
			b.Run(fmt.Sprintf("%dx%dx%d/%s", s.n, s.in, s.m, name), func(b *testing.B) {
				for b.Loop() {
					f(out, x, s.n, s.in, wt, s.m, bias)
				}
				b.ReportMetric(float64(s.n*s.in*s.m)*float64(b.N)/b.Elapsed().Seconds()/1e9, "GMAC/s")
			})
		}
	}
}

func matmulGoAll(out, x []float32, n, in int, wt []float32, m int, bias []float32) {
	matmulGo(out, x, n, in, wt, m, bias, 0, m)
}

// matmulPar's column ranges give what matmul gives, bit for bit.
func TestMatmulPar(t *testing.T) {
	t.Parallel()
	r := rand.New(rand.NewPCG(3, 4))
	for _, s := range []struct{ n, in, m int }{{1, 1536, 512}, {6, 256, 768}, {85, 512, 1536}, {13, 1536, 512}, {128, 256, 100}} {
		x, wt, bias := randFloats(r, s.n*s.in), randFloats(r, s.m*s.in), randFloats(r, s.m)
		want := make([]float32, s.n*s.m)
		matmul(want, x, s.n, s.in, wt, s.m, bias)
		for _, par := range []int{2, 3, 8} {
			got := make([]float32, s.n*s.m)
			matmulPar(par, got, x, s.n, s.in, wt, s.m, bias)
			if !slices.Equal(got, want) {
				t.Errorf("%+v par %d: differs from matmul", s, par)
			}
		}
	}
}
