package model

import (
	"fmt"
	"math"
	"testing"

	"github.com/gollm/gollm/attention"
)

// TestCPUSharedPrefix runs decodes whose block tables begin with the same pages (a second sequence
// that took the first one's prompt pages, as from the prefix cache) with each Options.SharedPrefix:
// only "always" hands the CPU's attention the groups (FindSharedGroups: the two sequences, the pages
// they share), and its logits match the plain kernels' to float32 rounding (the shared path sums the
// same terms in another order). A backend that never formed groups, or formed them wrongly, fails here,
// which engine's TestSharedPrefixGreedyIdentical alone would not show.
func TestCPUSharedPrefix(t *testing.T) {
	cfg := tinyConfig()
	const blockSize, sharedPages, decodes = 8, 3, 4
	prompt := randomTokens(newRand(5), sharedPages*blockSize+3, cfg.VocabSize)
	run := func(shared string) (logits [][][]float32, groups [][]attention.SharedGroup) {
		m, err := LoadRandom(cfg, 9, Options{NumBlocks: 32, BlockSize: blockSize, SharedPrefix: shared}, nil)
		if err != nil {
			t.Fatal(err)
		}
		defer m.Close()
		b := m.backend.(*cpuBackend)
		p := newModelPager(m, newRand(6))
		if _, err := m.Forward(p.step(chunk{seq: 0, tokens: prompt})); err != nil {
			t.Fatal(err)
		}
		// Sequence 1 takes sequence 0's full prompt pages and computes the rest of the prompt on a page
		// of its own.
		p.tables[1] = [][]int32{append([]int32(nil), p.tables[0][0][:sharedPages]...)}
		p.lens[1] = sharedPages * blockSize
		if _, err := m.Forward(p.step(chunk{seq: 1, tokens: prompt[sharedPages*blockSize:]})); err != nil {
			t.Fatal(err)
		}
		if p.tables[0][0][sharedPages] == p.tables[1][0][sharedPages] {
			t.Fatal("the two sequences' own pages are the same page")
		}
		next := [2]int32{prompt[0], prompt[1]}
		for range decodes {
			out, err := m.Forward(p.step(chunk{seq: 0, tokens: next[:1]}, chunk{seq: 1, tokens: next[1:]}))
			if err != nil {
				t.Fatal(err)
			}
			logits = append(logits, out)
			groups = append(groups, b.batches[0].Shared)
			for s := range next { // the same greedy ids for every setting: the steps stay comparable
				next[s] = int32((int(next[s])*7 + 3*s + 1) % cfg.VocabSize)
			}
		}
		return logits, groups
	}
	plain, _ := run(SharedPrefixOff)
	for _, mode := range []string{SharedPrefixOff, SharedPrefixAuto, SharedPrefixAlways} {
		t.Run(fmt.Sprintf("mode=%q", mode), func(t *testing.T) {
			logits, groups := run(mode)
			for i, g := range groups {
				want := "[]"
				if mode == SharedPrefixAlways {
					want = fmt.Sprint([]attention.SharedGroup{{Seqs: []int32{0, 1}, Pages: sharedPages}})
				}
				if got := fmt.Sprint(g); got != want && !(want == "[]" && g == nil) {
					t.Errorf("decode %d: groups %s, want %s", i, got, want)
				}
			}
			worst := 0.0
			for i := range logits {
				for s := range logits[i] {
					for j, v := range logits[i][s] {
						worst = max(worst, math.Abs(float64(v-plain[i][s][j])))
					}
				}
			}
			if worst > 1e-4 {
				t.Errorf("logits differ from the plain kernels' by %g", worst)
			}
		})
	}
}
