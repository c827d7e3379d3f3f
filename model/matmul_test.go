package model

import (
	"fmt"
	"math"
	"syscall"
	"testing"
)

// TestMatMul compares matMul with a float64 naive product over shapes that exercise every tail (output
// features not a multiple of four, odd inner sizes) and several worker counts.
func TestMatMul(t *testing.T) {
	rng := newRand(1)
	for _, tc := range []struct{ rows, in, out, workers int }{
		{1, 2, 1, 1}, {1, 8, 5, 2}, {2, 10, 6, 1}, {3, 64, 96, 2}, {5, 170, 64, 3}, {2, 576, 1003, 2},
		{9, 34, 130, 8}, {4, 1536, 67, 2},
	} {
		t.Run(fmt.Sprintf("%dx%dx%d_w%d", tc.rows, tc.in, tc.out, tc.workers), func(t *testing.T) {
			x := make([]float32, tc.rows*tc.in)
			w := make([]float32, tc.out*tc.in)
			for i := range x {
				x[i] = float32(rng.NormFloat64())
			}
			for i := range w {
				w[i] = float32(rng.NormFloat64())
			}
			// The bfloat16 kernel gets w rounded to bfloat16; the reference uses the same rounded values.
			wBF16 := toBF16(w)
			for _, kernel := range []struct {
				name string
				w    []float32
				run  func(dst []float32)
			}{
				{"f32", w, func(dst []float32) { matMul(dst, x, w, tc.rows, tc.in, tc.out, tc.workers) }},
				{"bf16", widen(wBF16), func(dst []float32) { matMulBF16(dst, x, wBF16, tc.rows, tc.in, tc.out, tc.workers) }},
			} {
				dst := make([]float32, tc.rows*tc.out)
				for i := range dst {
					dst[i] = float32(math.NaN())
				}
				kernel.run(dst)
				for r := range tc.rows {
					for o := range tc.out {
						var want float64
						for i := range tc.in {
							want += float64(x[r*tc.in+i]) * float64(kernel.w[o*tc.in+i])
						}
						got := float64(dst[r*tc.out+o])
						if !(math.Abs(got-want) <= 1e-5*math.Sqrt(float64(tc.in))*(1+math.Abs(want))) {
							t.Fatalf("%s: dst[%d][%d] = %g, want %g", kernel.name, r, o, got, want)
						}
					}
				}
			}
		})
	}
}

// toBF16 truncates w to bfloat16 pairs (len(w) even).
func toBF16(w []float32) bf16Matrix {
	m := make(bf16Matrix, len(w)/2)
	for j := range m {
		m[j] = math.Float32bits(w[2*j])>>16 | math.Float32bits(w[2*j+1])&0xffff0000
	}
	return m
}

func widen(m bf16Matrix) []float32 {
	out := make([]float32, 2*len(m))
	decodeBF16Pairs(out, m)
	return out
}

// BenchmarkMatMul times the products of a SmolLM2-135M decode step (one token row) and of a 64-token
// prefill chunk, with float32 and bfloat16 weights; GFLOP/s counts a multiply-add as two. The small
// matrices stay in cache here, unlike in a real decode step, which reads every weight from memory.
func BenchmarkMatMul(b *testing.B) {
	for _, tc := range []struct {
		name          string
		rows, in, out int
	}{
		{"qkv", 1, 576, 960}, {"gateup", 1, 576, 3072}, {"down", 1, 1536, 576}, {"lmhead", 1, 576, 49152},
		{"gateup_T64", 64, 576, 3072},
	} {
		b.Run(tc.name, func(b *testing.B) {
			x := make([]float32, tc.rows*tc.in)
			w := make([]float32, tc.out*tc.in)
			for i := range w {
				w[i] = float32(i%7) * 0.1
			}
			wBF16 := toBF16(w)
			dst := make([]float32, tc.rows*tc.out)
			for _, dt := range []string{"f32", "bf16"} {
				b.Run(dt, func(b *testing.B) {
					calls, cpu0 := 0, cpuTime()
					for b.Loop() {
						if dt == "f32" {
							matMul(dst, x, w, tc.rows, tc.in, tc.out, defaultWorkers())
						} else {
							matMulBF16(dst, x, wBF16, tc.rows, tc.in, tc.out, defaultWorkers())
						}
						calls++
					}
					b.ReportMetric(float64(2*tc.rows*tc.in*tc.out)*float64(calls)/b.Elapsed().Seconds()/1e9, "GFLOP/s")
					b.ReportMetric(float64(cpuTime()-cpu0)/float64(calls), "cpu-ns/op")
				})
			}
		})
	}
}

// cpuTime returns the user and system CPU time the process has used, in nanoseconds. Benchmarks report
// it per op beside wall time because the machine they run on is shared: CPU time tells a kernel's cost
// when other processes take the cores.
func cpuTime() int64 {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return ru.Utime.Nano() + ru.Stime.Nano()
}
