//go:build cuda

package cuda

import (
	"math"
	"testing"
)

// clusterPTX is a kernel for compute capability 9.0 (from CUDA C, nvcc -ptx -arch=sm_90): every block
// stores 1000·(its linear block index) + (its rank in the cluster) in its shared memory, the cluster
// synchronizes, and thread 0 reads the value of the next rank's block through distributed shared memory
// (mapa, ld.shared::cluster) and writes it and the cluster's size to out[2·block], out[2·block+1].
const clusterPTX = `
.version 7.8
.target sm_90
.address_size 64
.visible .entry ClusterRing(
	.param .align 8 .b8 ClusterRing_param_0[8]
)
{
	.reg .pred 	%p<3>;
	.reg .b32 	%r<18>;
	.reg .b64 	%rd<5>;
	.shared .align 4 .u32 _ZZ11ClusterRingE1v;
	ld.param.u64 	%rd1, [ClusterRing_param_0];
	mov.u32 %r5, %cluster_ctarank;
	mov.u32 %r6, %cluster_nctarank;
	mov.u32 	%r7, %ctaid.y;
	mov.u32 	%r8, %nctaid.x;
	mov.u32 	%r9, %ctaid.x;
	mad.lo.s32 	%r3, %r8, %r7, %r9;
	mov.u32 	%r4, %tid.x;
	setp.ne.s32 	%p1, %r4, 0;
	@%p1 bra 	$L__BB0_2;
	mad.lo.s32 	%r10, %r3, 1000, %r5;
	st.shared.u32 	[_ZZ11ClusterRingE1v], %r10;
$L__BB0_2:
	barrier.cluster.arrive.aligned;
	barrier.cluster.wait.aligned;
	@%p1 bra 	$L__BB0_4;
	add.s32 	%r16, %r5, 1;
	rem.u32 	%r13, %r16, %r6;
	mov.u32 	%r12, _ZZ11ClusterRingE1v;
	mapa.shared::cluster.u32 %r11, %r12, %r13;
	ld.shared::cluster.u32 %r14, [%r11];
	shl.b32 	%r17, %r3, 1;
	cvta.to.global.u64 	%rd2, %rd1;
	mul.wide.u32 	%rd3, %r17, 4;
	add.s64 	%rd4, %rd2, %rd3;
	st.global.u32 	[%rd4], %r14;
	st.global.u32 	[%rd4+4], %r6;
$L__BB0_4:
	barrier.cluster.arrive.aligned;
	barrier.cluster.wait.aligned;
	ret;
}
`

// TestLaunchCluster launches a 3 × 8 grid in clusters of 1 × c blocks (c = 1, 2, 4, 8; with and without
// the dependent-launch attribute) and checks that each block read its cluster neighbour's shared memory:
// in clusters along y, rank r is block row y with y mod c = r, and its neighbour is row y − r + (r+1) mod c.
func TestLaunchCluster(t *testing.T) {
	d := openDevice(t)
	if d.Info().Major < 9 {
		t.Skipf("thread-block clusters need compute capability 9.0, have %d.%d", d.Info().Major, d.Info().Minor)
	}
	mod, err := d.LoadModule([]byte(clusterPTX))
	if err != nil {
		t.Fatal(err)
	}
	defer mod.Unload()
	f, err := mod.Function("ClusterRing")
	if err != nil {
		t.Fatal(err)
	}
	const gx, gy = 3, 8
	out := allocFloats(t, d, 2*gx*gy)
	for _, c := range []int{1, 2, 4, 8} {
		for _, pdl := range []bool{false, true} {
			if err := d.Fill32(out, 0x7fc00000, 2*gx*gy, nil); err != nil {
				t.Fatal(err)
			}
			p := struct{ Out DevicePtr }{out}
			if err := LaunchCluster(f, Dim3{X: gx, Y: gy}, Dim3{X: 32}, Dim3{X: 1, Y: c}, 0, nil, pdl, &p); err != nil {
				t.Fatal(err)
			}
			if err := d.Synchronize(); err != nil {
				t.Fatal(err)
			}
			got := download(t, d, out, 2*gx*gy)
			for y := range gy {
				for x := range gx {
					r := y % c
					ny := y - r + (r+1)%c
					want := uint32((ny*gx+x)*1000 + (r+1)%c)
					b := y*gx + x
					if v, n := math.Float32bits(got[2*b]), math.Float32bits(got[2*b+1]); v != want || n != uint32(c) {
						t.Errorf("cluster 1×%d (dependent %v), block (%d, %d): read %d of a cluster of %d, want %d of %d",
							c, pdl, x, y, v, n, want, c)
					}
				}
			}
		}
	}
}
