package model

import (
	"errors"
	"math"
	"slices"
	"testing"
)

func TestMaskLogits(t *testing.T) {
	inf, nan := float32(math.Inf(1)), float32(math.NaN())
	ninf := float32(math.Inf(-1))
	row := func() []float32 {
		x := make([]float32, 130)
		for i := range x {
			x[i] = float32(i%9) - 4
		}
		x[3], x[70], x[129] = nan, inf, ninf
		return x
	}
	for _, tc := range []struct {
		name    string
		mask    []uint64
		allowed []int // every other finite logit becomes −Inf
	}{
		{"all", []uint64{^uint64(0), ^uint64(0), ^uint64(0)}, nil},
		{"none", []uint64{0, 0, 0}, []int{}},
		{"some", []uint64{1<<5 | 1<<63, 1 << 1, 1 << 1}, []int{5, 63, 65, 129}},
		{"short mask leaves the rest out", []uint64{^uint64(0)}, []int{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x := row()
			orig := row()
			MaskLogits(x, tc.mask)
			for i, v := range x {
				allowed := tc.allowed == nil && len(tc.mask)*64 > i || slices.Contains(tc.allowed, i) ||
					tc.name == "short mask leaves the rest out" && i < 64
				switch {
				case math.IsNaN(float64(orig[i])):
					if !math.IsNaN(float64(v)) {
						t.Errorf("token %d: NaN became %v", i, v)
					}
				case orig[i] == inf:
					if v != inf {
						t.Errorf("token %d: +Inf became %v", i, v)
					}
				case allowed:
					if v != orig[i] {
						t.Errorf("token %d (allowed): %v became %v", i, orig[i], v)
					}
				case v != ninf:
					t.Errorf("token %d (left out): %v, want -Inf", i, v)
				}
			}
			// A masked row keeps its non-finite check: NaN and +Inf still make it unpickable.
			if Pickable(x) {
				t.Error("masking hid the row's NaN and +Inf")
			}
		})
	}
}

func TestPlanPick(t *testing.T) {
	mask := []uint64{1}
	for _, tc := range []struct {
		name   string
		params []SampleParams
		want   pickKind
	}{
		{"greedy: the argmax, fusable into the LM head", nil, pickArgmax},
		{"sampled", []SampleParams{{Temperature: 1}, {}}, pickSample},
		{"no rows", []SampleParams{}, pickSample},
		{"a greedy masked row: never the fused argmax", []SampleParams{{}, {Mask: mask}}, pickMasked},
		{"a sampled masked row", []SampleParams{{Temperature: 0.7, Mask: mask}}, pickMasked},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := planPick(tc.params); got != tc.want {
				t.Errorf("planPick = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestMaskedPickMatchesTwin: a masked row's pick on the host (Start with a mask) is the draw of the
// unmasked algorithm over the row with MaskLogits applied, and lies in the mask.
func TestMaskedPickMatchesTwin(t *testing.T) {
	m, cfg := tinyCPUModel(t)
	vocab := cfg.VocabSize
	rng := newRand(21)
	p := newPager(64, 4, newRand(2))
	prompt := randomTokens(rng, 6, vocab)
	logits, err := m.Forward(p.step(chunk{0, prompt}))
	if err != nil {
		t.Fatal(err)
	}
	for i, sp := range []SampleParams{{}, {Temperature: 1, Seed: 3}, {Temperature: 0.5, TopK: 5, TopP: 0.9, Seed: 4, Step: 2}} {
		sp.Mask = testMask(i, int32(i), vocab)
		x := slices.Clone(logits[0])
		MaskLogits(x, sp.Mask)
		want := SampleLogits(x, SampleParams{Temperature: sp.Temperature, TopK: sp.TopK, TopP: sp.TopP, Seed: sp.Seed, Step: sp.Step})
		p := newPager(64, 4, newRand(2))
		pick, err := m.Start(p.step(chunk{0, prompt}), []SampleParams{sp})
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pick.Wait()
		if err != nil {
			t.Fatal(err)
		}
		if ids[0] != want || sp.Mask[want/64]&(1<<(want%64)) == 0 {
			t.Errorf("params %d: picked %d, twin %d (allowed: %v)", i, ids[0], want, sp.Mask[want/64]&(1<<(want%64)) != 0)
		}
	}
}

// TestBeginCommit checks Begin's contract on the host backend: no other step while a pick is pending,
// Commit once, Wait committing an uncommitted pick with the argmax, masks of the wrong length refused.
func TestBeginCommit(t *testing.T) {
	m, cfg := tinyCPUModel(t)
	vocab := cfg.VocabSize
	p := newPager(64, 4, newRand(3))
	prompt := randomTokens(newRand(4), 5, vocab)
	want, err := m.ForwardGreedy(p.step(chunk{0, prompt}))
	if err != nil {
		t.Fatal(err)
	}

	t.Run("pending refuses other steps", func(t *testing.T) {
		pick, err := m.Begin(p.step(chunk{1, prompt}))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.Forward(p.step(chunk{2, prompt})); !errors.Is(err, ErrInvalidStep) {
			t.Errorf("Forward while a pick is pending: %v, want ErrInvalidStep", err)
		}
		if err := pick.Commit(nil); err != nil {
			t.Fatal(err)
		}
		if err := pick.Commit(nil); err == nil {
			t.Error("a second Commit succeeded")
		}
		ids, err := pick.Wait()
		if err != nil || !slices.Equal(ids, want) {
			t.Errorf("Wait = %v, %v; want %v", ids, err, want)
		}
	})
	t.Run("wait without commit takes the argmax", func(t *testing.T) {
		pick, err := m.Begin(p.step(chunk{3, prompt}))
		if err != nil {
			t.Fatal(err)
		}
		ids, err := pick.Wait()
		if err != nil || !slices.Equal(ids, want) {
			t.Errorf("Wait = %v, %v; want %v", ids, err, want)
		}
		if _, err := m.ForwardGreedy(p.step(chunk{4, prompt})); err != nil {
			t.Errorf("a step after the pick ended: %v", err)
		}
	})
	t.Run("short mask", func(t *testing.T) {
		pick, err := m.Begin(p.step(chunk{5, prompt}))
		if err != nil {
			t.Fatal(err)
		}
		if err := pick.Commit([]SampleParams{{Mask: []uint64{1}}}); !errors.Is(err, ErrInvalidStep) {
			t.Errorf("Commit with a 1-word mask over %d tokens: %v, want ErrInvalidStep", vocab, err)
		}
		if _, err := pick.Wait(); err == nil {
			t.Error("Wait after a failed Commit succeeded")
		}
		if _, err := m.ForwardGreedy(p.step(chunk{6, prompt})); err != nil {
			t.Errorf("a step after the failed commit: %v", err)
		}
		if _, err := m.Start(p.step(chunk{7, prompt}), []SampleParams{{Mask: []uint64{1}}}); !errors.Is(err, ErrInvalidStep) {
			t.Errorf("Start with a short mask: %v, want ErrInvalidStep", err)
		}
	})
	t.Run("no logits rows", func(t *testing.T) {
		st := p.step(chunk{8, prompt})
		st.LogitRows = nil
		pick, err := m.Begin(st)
		if err != nil {
			t.Fatal(err)
		}
		if err := pick.Commit(nil); err != nil {
			t.Fatal(err)
		}
		if ids, err := pick.Wait(); err != nil || len(ids) != 0 {
			t.Errorf("Wait = %v, %v; want no ids", ids, err)
		}
	})
}

// TestWrapPick checks that a wrapped Pick keeps Begin's and Start's contract (Commit once, Wait
// committing an uncommitted pick, a failed Commit failing Wait) and passes each call through its hooks
// once.
func TestWrapPick(t *testing.T) {
	m, cfg := tinyCPUModel(t)
	p := newPager(64, 4, newRand(5))
	prompt := randomTokens(newRand(6), 5, cfg.VocabSize)
	want, err := m.ForwardGreedy(p.step(chunk{0, prompt}))
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range []struct {
		name    string
		begin   bool
		commit  []SampleParams // nil: Wait without Commit
		commits int            // Commit hook calls expected
		fails   bool           // Commit and Wait fail
	}{
		{name: "started"},
		{name: "begun, committed", begin: true, commit: []SampleParams{{}}, commits: 1},
		{name: "begun, waited", begin: true, commits: 1},
		{name: "begun, short mask", begin: true, commit: []SampleParams{{Mask: []uint64{1}}}, commits: 1, fails: true},
	} {
		t.Run(c.name, func(t *testing.T) {
			st := p.step(chunk{1 + i, prompt})
			var inner *Pick
			if c.begin {
				inner, err = m.Begin(st)
			} else {
				inner, err = m.Start(st, nil)
			}
			if err != nil {
				t.Fatal(err)
			}
			var commits, waits int
			pick := WrapPick(inner, PickHooks{
				Commit: func(commit func() error) error { commits++; return commit() },
				Wait:   func(wait func() ([]int32, error)) ([]int32, error) { waits++; return wait() },
			})
			if c.commit != nil {
				if err := pick.Commit(c.commit); (err != nil) != c.fails {
					t.Errorf("Commit: %v, want failure %v", err, c.fails)
				}
				if err := pick.Commit(c.commit); err == nil {
					t.Error("a second Commit succeeded")
				}
			}
			for range 2 {
				ids, err := pick.Wait()
				if c.fails {
					if err == nil {
						t.Error("Wait after a failed Commit succeeded")
					}
				} else if err != nil || !slices.Equal(ids, want) {
					t.Errorf("Wait = %v, %v; want %v", ids, err, want)
				}
			}
			if commits != c.commits || waits != 1 {
				t.Errorf("hooks: %d commits, %d waits; want %d and 1", commits, waits, c.commits)
			}
			if _, err := m.ForwardGreedy(p.step(chunk{10 + i, prompt})); err != nil {
				t.Errorf("a step after the pick ended: %v", err)
			}
		})
	}
}
