//go:build cuda

package cuda

import (
	"math"
	"math/rand/v2"
	"testing"
)

// chainPTX is one step of a dependent chain for compute capability 9.0 (from CUDA C, nvcc -ptx
// -arch=sm_90): wait for the previous kernel (griddepcontrol.wait), spin about 4000 clocks, out[i] =
// in[i] + 1, then let the next kernel launch.
const chainPTX = `
.version 7.8
.target sm_90
.address_size 64
	// .globl	ChainStep
.visible .entry ChainStep(
	.param .align 8 .b8 ChainStep_param_0[24]
)
{
	.reg .pred 	%p<3>;
	.reg .f32 	%f<3>;
	.reg .b32 	%r<6>;
	.reg .b64 	%rd<12>;
	ld.param.u32 	%r1, [ChainStep_param_0+16];
	ld.param.u64 	%rd5, [ChainStep_param_0+8];
	ld.param.u64 	%rd6, [ChainStep_param_0];
	cvta.to.global.u64 	%rd1, %rd6;
	cvta.to.global.u64 	%rd2, %rd5;
	griddepcontrol.wait;
	mov.u64 	%rd4, %clock64;
$L__BB0_1:
	mov.u64 	%rd7, %clock64;
	sub.s64 	%rd8, %rd7, %rd4;
	setp.lt.s64 	%p1, %rd8, 4000;
	@%p1 bra 	$L__BB0_1;
	mov.u32 	%r3, %ctaid.x;
	mov.u32 	%r4, %ntid.x;
	mov.u32 	%r5, %tid.x;
	mad.lo.s32 	%r2, %r3, %r4, %r5;
	setp.ge.s32 	%p2, %r2, %r1;
	@%p2 bra 	$L__BB0_4;
	mul.wide.s32 	%rd9, %r2, 4;
	add.s64 	%rd10, %rd2, %rd9;
	ld.global.f32 	%f1, [%rd10];
	add.f32 	%f2, %f1, 0f3F800000;
	add.s64 	%rd11, %rd1, %rd9;
	st.global.f32 	[%rd11], %f2;
$L__BB0_4:
	griddepcontrol.launch_dependents;
	ret;
}
`

type chainParams struct {
	Out, In DevicePtr
	N       int32
}

// TestLaunchPDL runs a chain of eight dependent kernels, each reading what the one before wrote, launched
// with programmatic dependent launch (each may start before the previous ends and waits for it itself):
// eagerly, and captured into a graph and replayed. Every intermediate buffer is poisoned first, so a
// kernel that read its input too early would leave a NaN or a wrong count.
func TestLaunchPDL(t *testing.T) {
	d := openDevice(t)
	if d.Info().Major < 9 {
		t.Skipf("programmatic dependent launch needs compute capability 9.0, have %d.%d", d.Info().Major, d.Info().Minor)
	}
	mod, err := d.LoadModule([]byte(chainPTX))
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Unload()
	f, err := mod.Function("ChainStep")
	if err != nil {
		t.Fatal(err)
	}
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	const n, steps = 1 << 18, 8
	x := randomFloats(rand.New(rand.NewPCG(7, 8)), n)
	bufs := []DevicePtr{upload(t, d, x)}
	for range steps {
		bufs = append(bufs, allocFloats(t, d, n))
	}
	queue := func() error {
		for i := range steps {
			p := chainParams{Out: bufs[i+1], In: bufs[i], N: n}
			if err := LaunchPDL(f, Dim3{X: n / 256}, Dim3{X: 256}, 0, s, &p); err != nil {
				return err
			}
		}
		return nil
	}
	check := func(what string) {
		t.Helper()
		if err := s.Synchronize(); err != nil {
			t.Fatal(err)
		}
		got := download(t, d, bufs[steps], n)
		for i := range x {
			if want := x[i] + steps; math.Abs(float64(got[i]-want)) > 1e-5 {
				t.Fatalf("%s: element %d: got %v, want %v", what, i, got[i], want)
			}
		}
	}
	poisonAll := func() {
		for _, b := range bufs[1:] {
			if err := d.Fill32(b, 0x7fc00000, n, s); err != nil {
				t.Fatal(err)
			}
		}
	}
	poisonAll()
	if err := queue(); err != nil {
		t.Fatal(err)
	}
	check("eager")
	if err := s.BeginCapture(); err != nil {
		t.Fatal(err)
	}
	qerr := queue()
	g, err := s.EndCapture()
	if qerr != nil || err != nil {
		t.Fatalf("capture: %v, %v", qerr, err)
	}
	defer g.Destroy()
	exec, err := g.Instantiate()
	if err != nil {
		t.Fatal(err)
	}
	defer exec.Destroy()
	for range 3 {
		poisonAll()
		if err := exec.Launch(s); err != nil {
			t.Fatal(err)
		}
		check("graph")
	}
}
