//go:build cuda

package cuda

import (
	"errors"
	"math"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"unsafe"

	"github.com/gollm/gollm/internal/dtype"
	"github.com/gollm/gollm/internal/gputest"
	"gorgonia.org/cu"
)

// openDevice opens GPU 0, or skips the test when there is none (fails when GOLLM_REQUIRE_GPU=1).
func openDevice(t testing.TB) *Device {
	t.Helper()
	d, err := Open(0)
	gputest.Require(t, err)
	t.Cleanup(func() {
		if err := d.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return d
}

// scaleAddPTX is out[i] = in[i]*a + 1 for i < n, written in PTX by hand so that these tests need no
// compiled kernels; its one parameter is the struct scaleAddParams.
const scaleAddPTX = `
.version 7.0
.target sm_80
.address_size 64

.visible .entry scale_add(.param .align 8 .b8 p[24])
{
	.reg .b64 %rd<6>;
	.reg .b32 %r<6>;
	.reg .f32 %f<4>;
	.reg .pred %pp;
	ld.param.u64 %rd1, [p];
	ld.param.u64 %rd2, [p+8];
	ld.param.u32 %r1, [p+16];
	ld.param.f32 %f1, [p+20];
	mov.u32 %r2, %ctaid.x;
	mov.u32 %r3, %ntid.x;
	mov.u32 %r4, %tid.x;
	mad.lo.u32 %r5, %r2, %r3, %r4;
	setp.ge.u32 %pp, %r5, %r1;
	@%pp bra DONE;
	cvta.to.global.u64 %rd1, %rd1;
	cvta.to.global.u64 %rd2, %rd2;
	mul.wide.u32 %rd3, %r5, 4;
	add.u64 %rd4, %rd2, %rd3;
	ld.global.f32 %f2, [%rd4];
	fma.rn.f32 %f3, %f2, %f1, 0f3F800000;
	add.u64 %rd5, %rd1, %rd3;
	st.global.f32 [%rd5], %f3;
DONE:
	ret;
}
`

type scaleAddParams struct {
	Out, In DevicePtr
	N       uint32
	A       float32
}

func loadScaleAdd(t *testing.T, d *Device) *Function {
	t.Helper()
	mod, err := d.LoadModule([]byte(scaleAddPTX))
	if err != nil {
		t.Fatal(err)
	}
	f, err := mod.Function("scale_add")
	if err != nil {
		t.Fatal(err)
	}
	return f
}

func allocFloats(t testing.TB, d *Device, n int) DevicePtr {
	t.Helper()
	p, err := d.Alloc(int64(4 * n))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = d.Free(p) })
	return p
}

func upload(t *testing.T, d *Device, x []float32) DevicePtr {
	t.Helper()
	p := allocFloats(t, d, len(x))
	if err := d.CopyToDevice(p, Bytes(x)); err != nil {
		t.Fatal(err)
	}
	return p
}

func download(t *testing.T, d *Device, p DevicePtr, n int) []float32 {
	t.Helper()
	x := make([]float32, n)
	if err := d.CopyFromDevice(Bytes(x), p); err != nil {
		t.Fatal(err)
	}
	return x
}

func randomFloats(rng *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = rng.Float32()*2 - 1
	}
	return x
}

func TestInfo(t *testing.T) {
	d := openDevice(t)
	info := d.Info()
	t.Logf("%+v", info)
	if info.NumSMs <= 0 || info.Major < 7 || info.L2Bytes <= 0 || info.SharedPerBlockOptin < 48<<10 || info.TotalMem <= 0 ||
		info.PeakMemBandwidth <= 0 { // 0: the driver no longer gives the memory's clock or bus width
		t.Fatalf("implausible device info %+v", info)
	}
	free, total, err := d.MemInfo()
	if err != nil || free <= 0 || free > total {
		t.Fatalf("MemInfo = %d, %d, %v", free, total, err)
	}
}

func TestMemoryRoundTrip(t *testing.T) {
	d := openDevice(t)
	rng := rand.New(rand.NewPCG(1, 2))
	const n = 1<<20 + 3
	x := randomFloats(rng, n)
	a := upload(t, d, x)
	b := allocFloats(t, d, n)
	if err := d.Fill32(b, math.Float32bits(float32(math.NaN())), n, nil); err != nil {
		t.Fatal(err)
	}
	if got := download(t, d, b, n); !math.IsNaN(float64(got[n-1])) {
		t.Fatalf("Fill32 did not reach the last word: %v", got[n-1])
	}
	if err := d.CopyDevice(b, a, 4*n, nil); err != nil {
		t.Fatal(err)
	}
	got := download(t, d, b, n)
	for i := range x {
		if got[i] != x[i] {
			t.Fatalf("element %d: got %v want %v", i, got[i], x[i])
		}
	}
}

// TestBuffers: buffers allocated through a Buffers hold what is written to them until Free, which
// releases every one (the device's free memory comes back) and leaves the set empty.
func TestBuffers(t *testing.T) {
	d := openDevice(t)
	free := func() int64 {
		var f int64
		if err := d.Do(func() (err error) { f, _, err = cu.MemInfo(); return err }); err != nil {
			t.Fatal(err)
		}
		return f
	}
	before := free()
	bufs := d.NewBuffers()
	const n = 64 << 20
	var ptrs []DevicePtr
	for i := range 3 {
		p, err := bufs.Alloc(n)
		if err != nil {
			t.Fatal(err)
		}
		if err := d.Fill32(p, uint32(i+1), n/4, nil); err != nil {
			t.Fatal(err)
		}
		ptrs = append(ptrs, p)
	}
	for i, p := range ptrs {
		var w [1]uint32
		if err := d.CopyFromDevice(Bytes(w[:]), p.Add(n-4)); err != nil || w[0] != uint32(i+1) {
			t.Fatalf("buffer %d: last word %d (%v), want %d", i, w[0], err, i+1)
		}
	}
	if during := free(); before-during < 3*n {
		t.Fatalf("three buffers of %d bytes took %d bytes of device memory", n, before-during)
	}
	if err := bufs.Free(); err != nil {
		t.Fatal(err)
	}
	if after := free(); before-after >= n {
		t.Fatalf("after Free, %d bytes of device memory are still taken", before-after)
	}
	if err := bufs.Free(); err != nil {
		t.Fatalf("second Free: %v", err)
	}
}

func TestLaunchPTX(t *testing.T) {
	d := openDevice(t)
	f := loadScaleAdd(t, d)
	rng := rand.New(rand.NewPCG(3, 4))
	const n = 10007
	x := randomFloats(rng, n)
	in, out := upload(t, d, x), allocFloats(t, d, n)
	p := scaleAddParams{Out: out, In: in, N: n, A: 3}
	if err := Launch(f, Dim3{X: (n + 255) / 256}, Dim3{X: 256}, 0, nil, &p); err != nil {
		t.Fatal(err)
	}
	got := download(t, d, out, n)
	for i := range x {
		if want := x[i]*3 + 1; math.Abs(float64(got[i]-want)) > 1e-6 {
			t.Fatalf("element %d: got %v want %v", i, got[i], want)
		}
	}
	a, err := f.Attributes()
	if err != nil || a.Registers <= 0 || a.MaxThreads < 256 {
		t.Fatalf("Attributes = %+v, %v", a, err)
	}
	if occ, err := f.Occupancy(256, 0); err != nil || occ <= 0 {
		t.Fatalf("Occupancy = %d, %v", occ, err)
	}
}

func TestGraphCaptureReplay(t *testing.T) {
	d := openDevice(t)
	f := loadScaleAdd(t, d)
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	rng := rand.New(rand.NewPCG(5, 6))
	const n = 4096
	x := randomFloats(rng, n)
	buf := upload(t, d, x)
	step := scaleAddParams{Out: buf, In: buf, N: n, A: 0.5} // x = x/2 + 1, in place
	if err := s.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if err := Launch(f, Dim3{X: n / 256}, Dim3{X: 256}, 0, s, &step); err != nil {
			t.Fatal(err)
		}
	}
	g, err := s.EndCapture()
	if err != nil {
		t.Fatal(err)
	}
	defer g.Destroy()
	if nodes, err := g.Nodes(); err != nil || nodes != 3 {
		t.Fatalf("graph has %d nodes (%v), want 3", nodes, err)
	}
	// Nothing may have run during capture.
	if got := download(t, d, buf, n); got[0] != x[0] {
		t.Fatalf("captured work ran: %v -> %v", x[0], got[0])
	}
	exec, err := g.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Destroy()
	start, _ := d.NewEvent()
	end, _ := d.NewEvent()
	if err := start.Record(s); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := exec.Launch(s); err != nil {
			t.Fatal(err)
		}
	}
	if err := end.Record(s); err != nil {
		t.Fatal(err)
	}
	if err := end.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if ms, err := start.Elapsed(end); err != nil || ms <= 0 {
		t.Fatalf("Elapsed = %v, %v", ms, err)
	}
	got := download(t, d, buf, n)
	for i := range x {
		want := x[i]
		for range 6 {
			want = want*0.5 + 1
		}
		if math.Abs(float64(got[i]-want)) > 1e-6 {
			t.Fatalf("element %d after 2 replays of 3 steps: got %v want %v", i, got[i], want)
		}
	}
}

func TestConcurrentCallers(t *testing.T) {
	d := openDevice(t)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range 50 {
				p, err := d.Alloc(1 << 16)
				if err != nil {
					errs <- err
					return
				}
				if err := d.Free(p); err != nil {
					errs <- err
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	// Calls inside Do run inline on the owner goroutine.
	if err := d.Do(func() error {
		p, err := d.Alloc(64)
		if err != nil {
			return err
		}
		return d.Free(p)
	}); err != nil {
		t.Fatal(err)
	}
}

func TestClosed(t *testing.T) {
	d, err := Open(0)
	gputest.Require(t, err)
	if err := d.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := d.Alloc(16); !errors.Is(err, ErrClosed) {
		t.Fatalf("Alloc after Close: %v, want ErrClosed", err)
	}
	if err := d.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// TestGemmEx checks cuBLAS's GemmEx through the row-major mapping in its doc comment, Y = X·Wᵀ, against a
// float64 product of the same (rounded) inputs.
func TestGemmEx(t *testing.T) {
	d := openDevice(t)
	b, err := d.LoadBLAS()
	gputest.Require(t, err)
	defer b.Destroy()
	path, version := b.Library()
	t.Logf("cuBLAS %s version %d", path, version)
	const m, n, k = 67, 96, 200 // Y[m][n] = X[m][k] · W[n][k]ᵀ
	for _, tc := range []struct {
		name   string
		typ    DataType
		encode func([]byte, []float32)
		decode func([]float32, []byte)
	}{
		{"bf16", BFloat16, dtype.EncodeBF16, dtype.DecodeBF16},
		{"fp16", Float16, dtype.EncodeF16, dtype.DecodeF16},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rng := rand.New(rand.NewPCG(7, uint64(tc.typ)))
			// Round the inputs to the type first so that the reference multiplies the same numbers.
			x16, w16 := make([]byte, 2*m*k), make([]byte, 2*n*k)
			tc.encode(x16, randomFloats(rng, m*k))
			tc.encode(w16, randomFloats(rng, n*k))
			x, w := make([]float32, m*k), make([]float32, n*k)
			tc.decode(x, x16)
			tc.decode(w, w16)
			xd, err := d.Alloc(int64(len(x16)))
			if err != nil {
				t.Fatal(err)
			}
			defer d.Free(xd)
			wd, err := d.Alloc(int64(len(w16)))
			if err != nil {
				t.Fatal(err)
			}
			defer d.Free(wd)
			if err := d.CopyToDevice(xd, x16); err != nil {
				t.Fatal(err)
			}
			if err := d.CopyToDevice(wd, w16); err != nil {
				t.Fatal(err)
			}
			yd := allocFloats(t, d, m*n)
			if err := d.Fill32(yd, 0x7fc00000, m*n, nil); err != nil {
				t.Fatal(err)
			}
			if err := b.GemmEx(Trans, NoTrans, n, m, k, 1, wd, tc.typ, k, xd, tc.typ, k, 0, yd, Float32, n); err != nil {
				t.Fatal(err)
			}
			got := download(t, d, yd, m*n)
			var num, den float64
			for i := range m {
				for j := range n {
					var ref float64
					for l := range k {
						ref += float64(x[i*k+l]) * float64(w[j*k+l])
					}
					diff := float64(got[i*n+j]) - ref
					if math.IsNaN(diff) {
						t.Fatalf("Y[%d][%d] is NaN", i, j)
					}
					num += diff * diff
					den += ref * ref
				}
			}
			// Exact products of 8- or 11-bit mantissas summed in fp32: errors near fp32 rounding.
			if rel := math.Sqrt(num / den); rel > 1e-5 {
				t.Fatalf("relative error %.3g > 1e-5", rel)
			}
		})
	}
}

// TestTimer: the timer measures a GPU spin of a known length within its bounds (the spin waits on the
// GPU's global timer, so the measured time can only be longer), with the spacer spin and with the flush
// (which must leave its whole buffer zero), and reports host time per run.
func TestTimer(t *testing.T) {
	d := openDevice(t)
	tm, err := d.NewTimer(5, 1, 20_000)
	if err != nil {
		t.Fatal(err)
	}
	defer tm.Close()
	spin := struct{ NS uint64 }{200_000}
	launch := func(int) error { return Launch(tm.spin, Dim3{X: 1}, Dim3{X: 1}, 0, nil, &spin) }
	for _, flush := range []bool{false, true, true} {
		tm.Flush = flush
		if flush && tm.flushBuf != 0 { // the second flushed round: the zeros must be written again
			if err := d.Fill32(tm.flushBuf, 0xdeadbeef, timerFlushBytes/4, nil); err != nil {
				t.Fatal(err)
			}
		}
		us, err := tm.Median(1, launch)
		if err != nil {
			t.Fatal(err)
		}
		if us < 200 || us > 10_000 || tm.HostUS <= 0 {
			t.Errorf("flush %v: a 200 µs spin measured %.1f µs, host %.1f µs a run", flush, us, tm.HostUS)
		}
		if flush {
			buf := make([]uint32, timerFlushBytes/4)
			if err := d.CopyFromDevice(Bytes(buf), tm.flushBuf); err != nil {
				t.Fatal(err)
			}
			if i := slices.IndexFunc(buf, func(v uint32) bool { return v != 0 }); i >= 0 {
				t.Fatalf("the flush left word %d of %d at %#x", i, len(buf), buf[i])
			}
		}
	}
}

// TestCopyBandwidth: the device-to-device copy bandwidth is a plausible GPU figure (above PCIe's, below
// any HBM's) and the same within 10% on a second measurement.
func TestCopyBandwidth(t *testing.T) {
	d := openDevice(t)
	a, err := d.CopyBandwidth(256 << 20)
	if err != nil {
		t.Fatal(err)
	}
	b, err := d.CopyBandwidth(256 << 20)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("copy bandwidth %.3f and %.3f TB/s", a/1e12, b/1e12)
	if !(a > 1e11 && a < 2e13) || math.Abs(a-b) > 0.1*a {
		t.Errorf("copy bandwidth %.3g and %.3g B/s: want the same plausible figure twice", a, b)
	}
}

// TestStreamWait orders a copy on one stream after a kernel on another: stream a spins 20 ms and then
// doubles-plus-one a buffer; stream b, told to wait for an event recorded after the kernel, copies the
// buffer to page-locked memory. The copy must see the kernel's result (without the wait it would run at
// once and see the old values), and so must the host after waiting for b's event.
func TestStreamWait(t *testing.T) {
	d := openDevice(t)
	f := loadScaleAdd(t, d)
	mod, err := d.LoadModule([]byte(timerPTX))
	if err != nil {
		t.Fatal(err)
	}
	spin, err := mod.Function("gollm_timer_spin")
	if err != nil {
		t.Fatal(err)
	}
	var streams [2]*Stream
	for i := range streams {
		if streams[i], err = d.NewStream(); err != nil {
			t.Fatal(err)
		}
		defer streams[i].Destroy()
	}
	a, b := streams[0], streams[1]
	var events [2]*Event
	for i := range events {
		if events[i], err = d.NewSyncEvent(); err != nil {
			t.Fatal(err)
		}
		defer events[i].Destroy()
	}
	ran, copied := events[0], events[1]
	const n = 1024
	x := randomFloats(rand.New(rand.NewPCG(7, 8)), n)
	buf := upload(t, d, x)
	host, err := d.AllocHost(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer d.FreeHost(host)
	p := struct{ NS uint64 }{20e6}
	if err := Launch(spin, Dim3{X: 1}, Dim3{X: 1}, 0, a, &p); err != nil {
		t.Fatal(err)
	}
	step := scaleAddParams{Out: buf, In: buf, N: n, A: 2}
	if err := Launch(f, Dim3{X: n / 256}, Dim3{X: 256}, 0, a, &step); err != nil {
		t.Fatal(err)
	}
	if err := ran.Record(a); err != nil {
		t.Fatal(err)
	}
	if err := b.Wait(ran); err != nil {
		t.Fatal(err)
	}
	if err := d.CopyFromDeviceAsync(host, buf, b); err != nil {
		t.Fatal(err)
	}
	if err := copied.Record(b); err != nil {
		t.Fatal(err)
	}
	if err := copied.Synchronize(); err != nil {
		t.Fatal(err)
	}
	if _, err := ran.Elapsed(copied); err == nil {
		t.Errorf("Elapsed between events without timing: no error")
	}
	got := unsafe.Slice((*float32)(unsafe.Pointer(&host[0])), n)
	for i := range x {
		if want := x[i]*2 + 1; got[i] != want {
			t.Fatalf("element %d copied on the waiting stream: got %v want %v (the kernel's result)", i, got[i], want)
		}
	}
}
