//go:build cuda && gollmdiag

package attention

// The decode benchmarks' diagnostic parts: they need the gollmdiag build's kernels, whose programs can be
// cut short (diag_on.go). Build them with
//
//	go generate -tags gollmdiag -run attention_diag ./attention
//	go test -c -tags cuda,gollmdiag -o gpu/attention-diag.test ./attention

import (
	"fmt"
	"testing"

	"github.com/gollm/gollm/internal/cuda"
)

func init() {
	decodeDiagCuts = []diagCut{
		{"entry", CUDATuning{}.WithDiagnose(DiagnoseEntry)},
		{"loop", CUDATuning{}.WithDiagnose(DiagnoseLoop)},
		{"nomerge", CUDATuning{}.WithDiagnose(DiagnoseNoMerge)},
	}
}

// emptyPTX is a kernel that returns at once, for BenchmarkCUDALaunchFloor.
const emptyPTX = `
.version 7.0
.target sm_80
.address_size 64
.visible .entry gollm_empty(.param .align 8 .b8 p[8])
{
	ret;
}
`

// BenchmarkCUDALaunchFloor splits what a decode call costs before its programs do any work: an empty
// kernel of one program (the floor of this timing, which every peer's call pays too), an empty kernel of
// the plan's grid, block and dynamic shared memory, the plan's kernel returning right after its PDL wait
// (DiagnoseEntry), and the whole call; with the spin and after the flush. Run it with -test.benchtime=1x.
func BenchmarkCUDALaunchFloor(b *testing.B) {
	k, t := benchTimer(b)
	mod, err := k.Device().LoadModule([]byte(emptyPTX))
	if err != nil {
		b.Fatal(err)
	}
	empty, err := mod.Function("gollm_empty")
	if err != nil {
		b.Fatal(err)
	}
	for _, s := range []variantShape{
		{"gqa", 64, 1024, 12, 2, 128, false}, {"gqa", 16, 4096, 12, 2, 128, false},
		{"gqa", 1, 65536, 12, 2, 128, false}, {"llama3", 8, 2048, 32, 8, 128, false},
		{"llama3", 1, 8192, 32, 8, 128, false}, {"llama70b", 4, 2048, 64, 8, 128, false},
		{"mqa", 16, 4096, 32, 1, 128, false},
	} {
		in, err := newVariantInputs(k, s, pagesRandom)
		if err != nil {
			b.Fatal(err)
		}
		a := &in.args[0]
		d, err := k.decide(a, PathAuto, nil, k.Tuning)
		if err == nil && d.Kernel.Persistent {
			err = fmt.Errorf("%s: the persistent grouped kernel would run (time classic grouped shapes only)", s.name)
		}
		plan, kern := d.Plan, k.kernels[d.Kernel.Name]
		if err == nil {
			err = empty.SetMaxDynamicShared(kern.shared)
		}
		if err != nil {
			in.free()
			b.Fatal(err)
		}
		grid := cuda.Dim3{X: d.Grid[0], Y: d.Grid[1], Z: d.Grid[2]}
		var arg struct{ P uint64 }
		call := func(d int) func(c int) error {
			return func(c int) error {
				if plan.Kernel == SplitK {
					return k.decodeSplitK(nil, &in.args[c], plan.PartitionTokens, in.ws, in.wsBytes, PathAuto,
						CUDATuning{}.WithDiagnose(d))
				}
				return k.decodeGrouped(nil, &in.args[c], PathAuto, CUDATuning{}.WithDiagnose(d))
			}
		}
		name := fmt.Sprintf("%s_b%d_ctx%d_%v_%d", s.name, s.batch, s.ctx, plan.Kernel, grid.X*grid.Y*grid.Z)
		for _, flush := range []bool{false, true} {
			t.Flush = flush
			for _, v := range []struct {
				what   string
				launch func(c int) error
			}{
				{"empty1", func(int) error { return cuda.Launch(empty, cuda.Dim3{X: 1}, cuda.Dim3{X: 32}, 0, nil, &arg) }},
				{"emptygrid", func(int) error {
					return cuda.Launch(empty, grid, cuda.Dim3{X: kern.threads}, kern.shared, nil, &arg)
				}},
				{"entry", call(DiagnoseEntry)},
				{"full", call(0)},
			} {
				reportUS(b, t, fmt.Sprintf("%s/%s/flush=%v", name, v.what, flush), in.copies, v.launch)
			}
		}
		t.Flush = false
		in.free()
	}
}
