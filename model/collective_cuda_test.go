//go:build cuda

package model

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/gollm/gollm/internal/cuda"
	"github.com/gollm/gollm/weights"
	"gorgonia.org/cu"
)

// peerRanks opens size ranks on GPU 0, each its own Device and backend of a small model's shape (what
// the one-shot kernel needs of a backend: its module and stream), and a peer group of capFloats values.
func peerRanks(t testing.TB, size, capFloats int) ([]*cudaBackend, *peerGroup) {
	return peerRanksOn(t, size, capFloats, true)
}

// peerRanksOn is peerRanks with rank r on GPU r unless share.
func peerRanksOn(t testing.TB, size, capFloats int, share bool) ([]*cudaBackend, *peerGroup) {
	t.Helper()
	gpuDevice(t)
	shape, err := shapeOf(cudaReferenceConfig(64), Options{NumBlocks: 4, BlockSize: 16})
	if err != nil {
		t.Fatal(err)
	}
	devs := make([]*cuda.Device, size)
	bs := make([]*cudaBackend, size)
	for r := range size {
		ordinal := r
		if share {
			ordinal = 0
		}
		if devs[r], err = cuda.Open(ordinal); err != nil {
			t.Fatal(err)
		}
		if bs[r], err = newCUDABackend(shape, cudaConfig{dtype: weights.DTypeF32, dev: devs[r]}); err != nil {
			t.Fatal(err)
		}
	}
	g, err := newPeerGroup(devs, capFloats)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := g.close(); err != nil {
			t.Error(err)
		}
		for r := range size {
			if err := bs[r].Close(); err != nil {
				t.Error(err)
			}
			if err := devs[r].Close(); err != nil {
				t.Error(err)
			}
		}
	})
	return bs, g
}

// peerValues fills every rank's buffer (off bytes into it) with n random values and returns them.
func peerValues(t *testing.T, bs []*cudaBackend, bufs []cuda.DevicePtr, off int64, n int, rng *rand.Rand) [][]float32 {
	t.Helper()
	vals := make([][]float32, len(bs))
	for r, b := range bs {
		vals[r] = make([]float32, n)
		for i := range vals[r] {
			vals[r][i] = float32(rng.NormFloat64())
		}
		if err := b.dev.CopyToDevice(bufs[r].Add(off), cuda.Bytes(vals[r])); err != nil {
			t.Fatal(err)
		}
	}
	return vals
}

// checkPeerSums reads every rank's n values and compares them with times × the float64 sum of vals
// over the ranks (times all-reduces in a row multiply the first sum by the ranks each time after it):
// within float32 rounding, and the same bits on every rank.
func checkPeerSums(t *testing.T, bs []*cudaBackend, bufs []cuda.DevicePtr, off int64, vals [][]float32, scale float64) {
	t.Helper()
	n := len(vals[0])
	got := make([][]float32, len(bs))
	for r, b := range bs {
		if err := b.stream.Synchronize(); err != nil {
			t.Fatal(err)
		}
		got[r] = make([]float32, n)
		if err := b.dev.CopyFromDevice(cuda.Bytes(got[r]), bufs[r].Add(off)); err != nil {
			t.Fatal(err)
		}
	}
	bad := 0
	for i := range n {
		var want, mag float64
		for r := range vals {
			want += float64(vals[r][i])
			mag += math.Abs(float64(vals[r][i]))
		}
		want *= scale
		if d := math.Abs(float64(got[0][i]) - want); d > 1e-5*scale*(mag+1) && bad < 5 {
			t.Errorf("value %d: rank 0 has %g, want %g", i, got[0][i], want)
			bad++
		}
		for r := 1; r < len(bs); r++ {
			if math.Float32bits(got[r][i]) != math.Float32bits(got[0][i]) && bad < 5 {
				t.Errorf("value %d: rank %d has %g, rank 0 %g: the ranks' sums must be the same bits", i, r, got[r][i], got[0][i])
				bad++
			}
		}
	}
}

// TestCUDAPeerAllReduce runs the one-shot all-reduce (kernels/allreduce.cu) with 1-8 ranks sharing GPU
// 0 (their kernels run side by side on their own streams, as on GPUs of their own): sums of 1 to cap
// values, aligned (16-byte loads) and not, several calls in a row (both halves of the staging buffers
// and back), against the float64 sum, every rank the same bits; then two calls captured in each rank's
// CUDA graph and replayed over new values.
func TestCUDAPeerAllReduce(t *testing.T) {
	const capFloats = 8192
	rng := rand.New(rand.NewPCG(7, 1))
	for _, size := range []int{1, 2, 3, 4, 8} {
		t.Run(fmt.Sprintf("ranks=%d", size), func(t *testing.T) {
			bs, g := peerRanks(t, size, capFloats)
			bufs := make([]cuda.DevicePtr, size)
			colls := make([]*peerCollective, size)
			for r, b := range bs {
				var err error
				if bufs[r], err = b.dev.Alloc((capFloats + 4) * 4); err != nil {
					t.Fatal(err)
				}
				defer b.dev.Free(bufs[r])
				colls[r] = &peerCollective{g: g, rank: r, limit: capFloats}
			}
			for _, n := range []int{1, 3, 4, 6, 64, 1000, 4097, capFloats} {
				for _, off := range []int64{0, 4} {
					if off > 0 && n == capFloats {
						continue
					}
					for call := range 3 {
						vals := peerValues(t, bs, bufs, off, n, rng)
						for r, b := range bs {
							if err := colls[r].allReduceSum(b, bufs[r].Add(off), n); err != nil {
								t.Fatal(err)
							}
						}
						t.Run(fmt.Sprintf("n=%d/off=%d/call=%d", n, off, call), func(t *testing.T) {
							checkPeerSums(t, bs, bufs, off, vals, 1)
						})
					}
				}
			}
			if err := g.err(); err != nil {
				t.Fatal(err)
			}

			// Two sums in a row captured into each rank's graph, replayed.
			const n = 2048
			execs := make([]*cuda.GraphExec, size)
			for r, b := range bs {
				if err := b.stream.BeginCapture(); err != nil {
					t.Fatal(err)
				}
				err1 := colls[r].allReduceSum(b, bufs[r], n)
				err2 := colls[r].allReduceSum(b, bufs[r], n)
				graph, err := b.stream.EndCapture()
				if err := errors.Join(err1, err2, err); err != nil {
					t.Fatal(err)
				}
				if execs[r], err = graph.Instantiate(); err != nil {
					t.Fatal(err)
				}
				graph.Destroy()
				defer execs[r].Destroy()
			}
			for replay := range 4 {
				vals := peerValues(t, bs, bufs, 0, n, rng)
				for r, b := range bs {
					if err := execs[r].Launch(b.stream); err != nil {
						t.Fatal(err)
					}
				}
				t.Run(fmt.Sprintf("graph/replay=%d", replay), func(t *testing.T) {
					checkPeerSums(t, bs, bufs, 0, vals, float64(size))
				})
			}
		})
	}
}

// TestCUDAPeerAllReduceNoHang has one rank of two call the one-shot all-reduce alone: its kernel must
// return once the group is aborted (a peer failed), and, with no abort, once its wait passes the
// group's timeout; either way the group then reports the failure and refuses further calls, and a kernel
// launched without asking (a captured graph's replay) returns at once.
func TestCUDAPeerAllReduceNoHang(t *testing.T) {
	for _, tc := range []struct {
		name, want string
		abort      bool
	}{{"abort", "aborted", true}, {"timeout", "waited", false}} {
		t.Run(tc.name, func(t *testing.T) {
			bs, g := peerRanks(t, 2, 1024)
			g.timeout = 200 * time.Millisecond
			if tc.abort {
				g.timeout = time.Hour
			}
			buf, err := bs[0].dev.Alloc(1024 * 4)
			if err != nil {
				t.Fatal(err)
			}
			defer bs[0].dev.Free(buf)
			c := &peerCollective{g: g, rank: 0, limit: 1024}
			if err := c.allReduceSum(bs[0], buf, 1024); err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if tc.abort {
				time.Sleep(100 * time.Millisecond)
				c.abort(nil)
			}
			syncWithin(t, bs[0], "the kernel")
			t.Logf("returned after %v", time.Since(start))
			err = g.err()
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("group error %v, want one saying %q", err, tc.want)
			}
			if err := c.allReduceSum(bs[0], buf, 1024); err == nil {
				t.Error("a failed group took another call")
			}
			// A graph's replay launches the kernel without asking the host: its wait must end at once
			// however long the timeout, the peer never arriving.
			g.timeout = time.Hour
			if err := c.launch(bs[0], buf, 1024); err != nil {
				t.Fatal(err)
			}
			syncWithin(t, bs[0], "a kernel launched after the group failed")
		})
	}
}

// syncWithin waits for b's stream, failing the test when what still runs 20 s on.
func syncWithin(t *testing.T, b *cudaBackend, what string) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- b.stream.Synchronize() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatalf("%s still waits 20 s on", what)
	}
}

// BenchmarkCUDAAllReduce times one all-reduce of n float32 values, Llama-3-70B's 8192 hidden values a
// row at 1, 8 and 64 rows (a decode step's sums), as each rank's CUDA graph of 64 calls replays: the
// one-shot kernel (peer) beside NCCL's all-reduce (nccl) over the GPUs present (2, 4 and 8 ranks as
// many as there are, one a GPU), and on one GPU the one-shot kernel with 2, 4 and 8 ranks sharing it
// (its cost without the links' latency) beside NCCL at one rank. The one-shot kernel takes the sums of
// up to peerOneShotMax values in a group (auto); the rows past it are measured all the same.
//
//	GOLLM_NCCL=/path/libnccl.so.2 go test -tags cuda -run XXX -bench CUDAAllReduce ./model
func BenchmarkCUDAAllReduce(b *testing.B) {
	gpuDevice(b)
	count, err := cu.NumDevices()
	if err != nil {
		b.Fatal(err)
	}
	const hidden, calls = 8192, 64
	type group struct {
		size  int
		share bool
	}
	groups := []group{{1, false}, {2, true}, {4, true}, {8, true}}
	if count > 1 {
		groups = nil
		for _, size := range []int{2, 4, 8} {
			if size <= count {
				groups = append(groups, group{size, false})
			}
		}
	}
	for _, gr := range groups {
		bs, g := peerRanksOn(b, gr.size, 64*hidden, gr.share)
		var comms []*cuda.Comm
		if !gr.share {
			lib, err := cuda.LoadNCCL()
			if err != nil {
				b.Fatal(err)
			}
			devs := make([]*cuda.Device, gr.size)
			for r := range bs {
				devs[r] = bs[r].dev
			}
			if comms, err = lib.InitAll(devs); err != nil {
				b.Fatal(err)
			}
			defer func() {
				for _, c := range comms {
					c.Close()
				}
			}()
		}
		bufs := make([]cuda.DevicePtr, gr.size)
		for r, rb := range bs {
			if bufs[r], err = rb.dev.Alloc(64 * hidden * 4); err != nil {
				b.Fatal(err)
			}
			defer rb.dev.Free(bufs[r])
			if err := rb.dev.CopyToDevice(bufs[r], make([]byte, 64*hidden*4)); err != nil {
				b.Fatal(err)
			}
		}
		for _, rows := range []int{1, 8, 64} {
			n := rows * hidden
			for _, how := range []string{"peer", "nccl"} {
				if how == "nccl" && comms == nil {
					continue
				}
				name := fmt.Sprintf("ranks=%d/gpus=%d/rows=%d/%s", gr.size, map[bool]int{true: 1, false: gr.size}[gr.share], rows, how)
				b.Run(name, func(b *testing.B) {
					execs := make([]*cuda.GraphExec, gr.size)
					for r, rb := range bs {
						var coll deviceCollective = &peerCollective{g: g, rank: r, limit: 64 * hidden}
						if how == "nccl" {
							coll = ncclCollective{comms[r]}
						}
						if err := rb.stream.BeginCapture(); err != nil {
							b.Fatal(err)
						}
						var errs []error
						for range calls {
							errs = append(errs, coll.allReduceSum(rb, bufs[r], n))
						}
						graph, err := rb.stream.EndCapture()
						if err := errors.Join(append(errs, err)...); err != nil {
							b.Fatal(err)
						}
						if execs[r], err = graph.Instantiate(); err != nil {
							b.Fatal(err)
						}
						graph.Destroy()
						defer execs[r].Destroy()
					}
					replay := func() {
						for r, rb := range bs {
							if err := execs[r].Launch(rb.stream); err != nil {
								b.Fatal(err)
							}
						}
						for _, rb := range bs {
							if err := rb.stream.Synchronize(); err != nil {
								b.Fatal(err)
							}
						}
					}
					replay()
					for b.Loop() {
						replay()
					}
					if err := g.err(); err != nil {
						b.Fatal(err)
					}
					b.ReportMetric(b.Elapsed().Seconds()*1e6/float64(b.N*calls), "us/allreduce")
				})
			}
		}
	}
}
