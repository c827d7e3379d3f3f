//go:build cuda

package cuda

import (
	"strings"
	"sync"
	"testing"

	"github.com/gollm/gollm/internal/gputest"
	"gorgonia.org/cu"
)

// openNCCL loads NCCL and opens every GPU of the machine, one rank each.
func openNCCL(t *testing.T) (*NCCL, []*Device) {
	t.Helper()
	openDevice(t) // skips, or fails under GOLLM_REQUIRE_GPU, without a GPU
	n, err := LoadNCCL()
	gputest.Require(t, err)
	path, version := n.Library()
	t.Logf("NCCL %s version %d", path, version)
	count, err := cu.NumDevices()
	if err != nil {
		t.Fatal(err)
	}
	var devs []*Device
	for o := range count {
		d, err := Open(o)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { d.Close() })
		devs = append(devs, d)
	}
	return n, devs
}

// TestNCCLCollectives sums and gathers over every GPU of the machine (one rank each, a goroutine a rank)
// and checks the results exactly (small integers): rank r contributes (r+1)·x. The second all-reduce
// runs from a CUDA graph captured on the rank's stream, as the decode step's does, replayed twice.
func TestNCCLCollectives(t *testing.T) {
	n, devs := openNCCL(t)
	comms, err := n.InitAll(devs)
	if err != nil {
		t.Fatal(err)
	}
	size := len(comms)
	t.Logf("%d ranks", size)
	const count = 4099
	x := make([]float32, count)
	for i := range x {
		x[i] = float32(i%97 - 48)
	}
	var wg sync.WaitGroup
	errs := make([]error, size)
	got := make([][]float32, size)
	gathered := make([][]float32, size)
	graphed := make([][]float32, size)
	for r, c := range comms {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = func() error {
				d := devs[r]
				s, err := d.NewStream()
				if err != nil {
					return err
				}
				defer s.Destroy()
				mine := make([]float32, count)
				for i := range mine {
					mine[i] = float32(r+1) * x[i]
				}
				buf, err := d.Alloc(4 * count)
				if err != nil {
					return err
				}
				defer d.Free(buf)
				all, err := d.Alloc(int64(4 * count * size))
				if err != nil {
					return err
				}
				defer d.Free(all)
				if err := d.CopyToDevice(buf, Bytes(mine)); err != nil {
					return err
				}
				if err := c.AllGather(all, buf, count, Float32, s); err != nil {
					return err
				}
				if err := c.AllReduceSum(buf, count, Float32, s); err != nil {
					return err
				}
				if err := s.Synchronize(); err != nil {
					return err
				}
				got[r], gathered[r] = make([]float32, count), make([]float32, count*size)
				if err := d.CopyFromDevice(Bytes(got[r]), buf); err != nil {
					return err
				}
				if err := d.CopyFromDevice(Bytes(gathered[r]), all); err != nil {
					return err
				}
				// The graph: the same all-reduce, captured, replayed twice.
				if err := d.CopyToDevice(buf, Bytes(mine)); err != nil {
					return err
				}
				if err := s.BeginCapture(); err != nil {
					return err
				}
				if err := c.AllReduceSum(buf, count, Float32, s); err != nil {
					s.EndCapture()
					return err
				}
				g, err := s.EndCapture()
				if err != nil {
					return err
				}
				defer g.Destroy()
				exec, err := g.Instantiate()
				if err != nil {
					return err
				}
				defer exec.Destroy()
				for range 2 {
					if err := exec.Launch(s); err != nil {
						return err
					}
				}
				if err := s.Synchronize(); err != nil {
					return err
				}
				graphed[r] = make([]float32, count)
				return d.CopyFromDevice(Bytes(graphed[r]), buf)
			}()
		}()
	}
	wg.Wait()
	for r, err := range errs {
		if err != nil {
			t.Fatalf("rank %d: %v", r, err)
		}
	}
	tri := float32(size * (size + 1) / 2) // Σ (r+1)
	for r := range size {
		for i := range count {
			if want := tri * x[i]; got[r][i] != want {
				t.Fatalf("rank %d: all-reduce [%d] = %v, want %v", r, i, got[r][i], want)
			}
			// Replayed twice: the sum of the sums, size·tri·x.
			if want := float32(size) * tri * x[i]; graphed[r][i] != want {
				t.Fatalf("rank %d: graph all-reduce [%d] = %v, want %v", r, i, graphed[r][i], want)
			}
			for src := range size {
				if want := float32(src+1) * x[i]; gathered[r][src*count+i] != want {
					t.Fatalf("rank %d: all-gather of rank %d [%d] = %v, want %v", r, src, i, gathered[r][src*count+i], want)
				}
			}
		}
	}
	for _, c := range comms {
		if err := c.Close(); err != nil {
			t.Error(err)
		}
		if err := c.AllReduceSum(0, 1, Float32, nil); err == nil {
			t.Error("an all-reduce on a closed communicator returned no error")
		}
	}
}

// TestNCCLRefuses checks InitAll's and the collectives' refusals: two ranks on one GPU, no devices, an
// element type NCCL's sum does not take here.
func TestNCCLRefuses(t *testing.T) {
	n, devs := openNCCL(t)
	again, err := Open(0)
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if _, err := n.InitAll([]*Device{devs[0], again}); err == nil || !strings.Contains(err.Error(), "both on GPU 0") {
		t.Errorf("two ranks on GPU 0: err = %v", err)
	}
	if _, err := n.InitAll(nil); err == nil {
		t.Error("no devices: no error")
	}
	comms, err := n.InitAll(devs[:1])
	if err != nil {
		t.Fatal(err)
	}
	if err := comms[0].AllReduceSum(0, 1, E4M3, nil); err == nil {
		t.Error("an e4m3 sum: no error")
	}
	if err := comms[0].Abort(); err != nil {
		t.Fatal(err)
	}
	if err := comms[0].AllReduceSum(0, 1, Float32, nil); err == nil || !strings.Contains(err.Error(), "aborted") {
		t.Errorf("after Abort: err = %v", err)
	}
	if err := comms[0].Close(); err != nil {
		t.Errorf("Close after Abort: %v", err)
	}
}
