package model

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"testing"

	"github.com/gollm/gollm/weights"
)

// pickMode is how pipelineRun picks.
type pickMode struct {
	sample bool // draw under a temperature and top-k (else greedy)
	// masked gives every sequence but sequence 1 a mask that depends on its last token (testMask), as a
	// constraint's does; pipelined, each step is then begun (Begin) before the previous one's picks are
	// read, and committed with its masks after.
	masked bool
}

// testMask is the mask of sequence s's next pick after token last: about two tokens in five, a set
// that changes with last.
func testMask(s int, last int32, vocab int) []uint64 {
	mask := make([]uint64, maskWords(vocab))
	for id := range vocab {
		if (id*7+int(last)*3+s)%5 < 2 {
			mask[id/64] |= 1 << (id % 64)
		}
	}
	return mask
}

// pipelineRun decodes prompts for steps steps on m, step i's rows in the order of orders[i] (the last
// order from there on; each a permutation of a subset of the sequences: those left out of a step stay
// out for good), picking as mode says. With pipelined set, every decode step is started (or begun)
// before the previous one's picks are read, its tokens fed from those picks by InputFrom (the rows'
// Tokens are poisoned); otherwise each step waits and passes the picked tokens explicitly. It returns
// each sequence's picked tokens.
func pipelineRun(t *testing.T, m *Model, numBlocks, blockSize int, prompts [][]int32, orders [][]int, steps int, mode pickMode, pipelined bool) [][]int32 {
	t.Helper()
	p := newPager(numBlocks, blockSize, newRand(5))
	out := make([][]int32, len(prompts))
	vocab := m.Config().VocabSize
	params := func(seqs []int) []SampleParams {
		if !mode.sample && !mode.masked {
			return nil
		}
		ps := make([]SampleParams, len(seqs))
		for i, s := range seqs {
			if mode.sample {
				ps[i] = SampleParams{Temperature: 0.9, TopK: 20, Seed: uint64(100 + s), Step: uint64(len(out[s]))}
			}
			if mode.masked && s != 1 {
				last := prompts[s][len(prompts[s])-1]
				if n := len(out[s]); n > 0 {
					last = out[s][n-1]
				}
				ps[i].Mask = testMask(s, last, vocab)
			}
		}
		return ps
	}
	var chunks []chunk
	prev := make([]int, 0, len(prompts)) // sequences of the previous step, in row order
	for s, pr := range prompts {
		chunks = append(chunks, chunk{s, pr})
		prev = append(prev, s)
	}
	pick, err := m.Start(p.step(chunks...), params(prev))
	if err != nil {
		t.Fatal(err)
	}
	var last []int32 // the previous step's picks, once read
	if !pipelined {
		if last, err = pick.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	for i := range steps {
		order := orders[min(i, len(orders)-1)]
		chunks, from := chunks[:0], make([]int32, 0, len(order))
		for _, s := range order {
			k := int32(slices.Index(prev, s))
			if k < 0 {
				t.Fatalf("order %v names sequence %d, which was not in the previous step", order, s)
			}
			tok := int32(0) // not read: InputFrom names the pick
			if !pipelined {
				tok = last[k]
			}
			chunks = append(chunks, chunk{s, []int32{tok}})
			from = append(from, k)
		}
		st := p.step(chunks...)
		if pipelined {
			st.InputFrom = from
		}
		// A mask depends on the sequence's last token: its step is begun (Begin) before that token is
		// read and committed after; waiting, the token is known before the step starts.
		var next *Pick
		switch {
		case pipelined && mode.masked:
			next, err = m.Begin(st)
		case mode.masked:
			for k, s := range prev {
				out[s] = append(out[s], last[k])
			}
			next, err = m.Start(st, params(order))
		default:
			next, err = m.Start(st, params(order))
		}
		if err != nil {
			t.Fatalf("step %d: %v", i, err)
		}
		if pipelined {
			if last, err = pick.Wait(); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
		}
		if pipelined || !mode.masked {
			for k, s := range prev {
				out[s] = append(out[s], last[k])
			}
		}
		if pipelined && mode.masked {
			if err := next.Commit(params(order)); err != nil {
				t.Fatalf("step %d: %v", i, err)
			}
		}
		pick, prev = next, slices.Clone(order)
		if !pipelined {
			if last, err = pick.Wait(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if pipelined {
		if last, err = pick.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	for k, s := range prev {
		out[s] = append(out[s], last[k])
	}
	return out
}

// checkPipelined runs pipelineRun both ways on m and wants the same tokens: a step fed by InputFrom
// before the previous step's picks reach the host decodes exactly what waiting would have.
func checkPipelined(t *testing.T, m *Model, numBlocks, blockSize, vocab int) {
	t.Helper()
	rng := newRand(9)
	prompts := [][]int32{randomTokens(rng, 5, vocab), randomTokens(rng, 1, vocab), randomTokens(rng, 23, vocab), randomTokens(rng, 3, vocab)}
	orders := [][]int{{0, 1, 2, 3}, {3, 2, 1, 0}, {1, 3, 0, 2}, {2, 0, 1, 3}, {0, 1, 2, 3}, {3, 2, 1, 0}}
	dropping := [][]int{{0, 1, 2, 3}, {3, 1, 2}, {2, 3}, {3, 2}, {2}}
	for _, tc := range []struct {
		name   string
		orders [][]int
		mode   pickMode
	}{
		{"greedy", orders, pickMode{}},
		{"greedy_dropping", dropping, pickMode{}},
		{"sample", orders, pickMode{sample: true}},
		{"sample_dropping", dropping, pickMode{sample: true}},
		{"masked_greedy", orders, pickMode{masked: true}},
		{"masked_greedy_dropping", dropping, pickMode{masked: true}},
		{"masked_sample", orders, pickMode{sample: true, masked: true}},
		{"masked_sample_dropping", dropping, pickMode{sample: true, masked: true}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			const steps = 9
			want := pipelineRun(t, m, numBlocks, blockSize, prompts, tc.orders, steps, tc.mode, false)
			got := pipelineRun(t, m, numBlocks, blockSize, prompts, tc.orders, steps, tc.mode, true)
			for s := range want {
				if !slices.Equal(got[s], want[s]) {
					t.Errorf("sequence %d: pipelined %v, waited %v", s, got[s], want[s])
				}
				if !tc.mode.masked || s == 1 {
					continue
				}
				for i, tok := range want[s] {
					last := prompts[s][len(prompts[s])-1]
					if i > 0 {
						last = want[s][i-1]
					}
					if mask := testMask(s, last, vocab); mask[tok/64]&(1<<(tok%64)) == 0 {
						t.Errorf("sequence %d token %d: %d is outside its mask", s, i, tok)
					}
				}
			}
			if len(want[2]) != steps+1 {
				t.Fatalf("sequence 2 got %d tokens, want %d", len(want[2]), steps+1)
			}
		})
	}
}

// tinyCPUModel loads a random float32 tinyConfig model on the CPU backend with 64 pages of 4 tokens.
func tinyCPUModel(t *testing.T) (*Model, *weights.Config) {
	t.Helper()
	cfg := tinyConfig()
	r := newRandomModel(cfg, weights.DTypeF32, 4)
	m, err := load(cfg, r.get, Options{NumBlocks: 64, BlockSize: 4}, NewCPUBackend)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { m.Close() })
	return m, cfg
}

func TestPipelinedPicks(t *testing.T) {
	m, cfg := tinyCPUModel(t)
	checkPipelined(t, m, 64, 4, cfg.VocabSize)
	checkPipelinedGrowth(t, m, 64, 4, cfg.VocabSize)
}

func TestInputFromRejected(t *testing.T) {
	m, _ := tinyCPUModel(t)
	p := newPager(64, 4, newRand(1))
	if _, err := m.ForwardGreedy(p.step(chunk{0, []int32{1, 2, 3}}, chunk{1, []int32{4}})); err != nil {
		t.Fatal(err)
	}
	for i, tc := range []struct {
		from   []int32
		logits bool // a Forward (logits, no pick) ran before
	}{
		{from: []int32{2}},    // only two picks
		{from: []int32{-2}},   // below −1
		{from: []int32{0, 1}}, // two sources for one row
		{from: []int32{0}, logits: true},
	} {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			if tc.logits {
				if _, err := m.Forward(p.step(chunk{3, []int32{7}})); err != nil {
					t.Fatal(err)
				}
			}
			st := p.step(chunk{2, []int32{0}})
			st.InputFrom = tc.from
			if _, err := m.ForwardGreedy(st); !errors.Is(err, ErrInvalidStep) {
				t.Fatalf("InputFrom %v: err %v, want ErrInvalidStep", tc.from, err)
			}
		})
	}
}

// checkPipelinedGrowth queues, before the picks of a 2-sequence step are read, a step that feeds its two
// decode rows from them beside a 100-token prompt chunk: on the GPU the step's rows outgrow the pick
// buffer while the step before is in flight (the buffer grows and must keep those picks). It wants the
// tokens a waited-for run gives.
func checkPipelinedGrowth(t *testing.T, m *Model, numBlocks, blockSize, vocab int) {
	t.Helper()
	rng := newRand(13)
	a, b, long := randomTokens(rng, 5, vocab), randomTokens(rng, 3, vocab), randomTokens(rng, 100, vocab)
	run := func(pipelined bool) [][]int32 {
		p := newPager(numBlocks, blockSize, newRand(6))
		first, err := m.Start(p.step(chunk{0, a}, chunk{1, b}), nil)
		if err != nil {
			t.Fatal(err)
		}
		var firstIDs []int32
		tok := [2]int32{}
		if !pipelined {
			if firstIDs, err = first.Wait(); err != nil {
				t.Fatal(err)
			}
			tok = [2]int32{firstIDs[0], firstIDs[1]}
		}
		st := p.step(chunk{0, []int32{tok[0]}}, chunk{1, []int32{tok[1]}}, chunk{2, long})
		if pipelined {
			st.InputFrom = make([]int32, len(st.Tokens))
			for i := range st.InputFrom {
				st.InputFrom[i] = -1
			}
			st.InputFrom[0], st.InputFrom[1] = 0, 1
		}
		second, err := m.Start(st, nil)
		if err != nil {
			t.Fatal(err)
		}
		if pipelined {
			if firstIDs, err = first.Wait(); err != nil {
				t.Fatal(err)
			}
		}
		secondIDs, err := second.Wait()
		if err != nil {
			t.Fatal(err)
		}
		return [][]int32{firstIDs, secondIDs}
	}
	got := run(true) // first: on a backend whose steps so far had fewer rows, its second step grows the buffer
	want := run(false)
	for i := range want {
		if !slices.Equal(got[i], want[i]) {
			t.Errorf("step %d: pipelined picks %v, waited %v", i, got[i], want[i])
		}
	}
}

// checkWaitAfterClose starts a decode step on m, closes m before waiting, and checks that Wait then
// returns the step's picks (want), not an error or a crash: Close lets the steps in flight end first.
func checkWaitAfterClose(t *testing.T, m *Model, s *Step, want []int32) {
	t.Helper()
	pick, err := m.Start(s, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := pick.Wait()
	if err != nil {
		t.Fatalf("Wait after Close: %v", err)
	}
	if !slices.Equal(got, want) {
		t.Fatalf("Wait after Close: %v, want %v", got, want)
	}
}

// waitAfterCloseSteps runs a prompt step and a decode step of three sequences on m and returns the
// decode step with its greedy picks, which a second model of the same weights checks Wait after Close on.
func waitAfterCloseSteps(t *testing.T, m *Model, numBlocks, blockSize, vocab int) (prompt, decode *Step, want []int32) {
	t.Helper()
	rng := newRand(21)
	p := newPager(numBlocks, blockSize, newRand(22))
	prompt = p.step(chunk{0, randomTokens(rng, 7, vocab)}, chunk{1, randomTokens(rng, 2, vocab)}, chunk{2, randomTokens(rng, 12, vocab)})
	decode = p.step(chunk{0, randomTokens(rng, 1, vocab)}, chunk{1, randomTokens(rng, 1, vocab)}, chunk{2, randomTokens(rng, 1, vocab)})
	for _, s := range []*Step{prompt, decode} {
		pick, err := m.Start(s, nil)
		if err != nil {
			t.Fatal(err)
		}
		if want, err = pick.Wait(); err != nil {
			t.Fatal(err)
		}
	}
	return prompt, decode, slices.Clone(want)
}

func TestWaitAfterClose(t *testing.T) {
	ref, cfg := tinyCPUModel(t)
	prompt, decode, want := waitAfterCloseSteps(t, ref, 64, 4, cfg.VocabSize)
	m, _ := tinyCPUModel(t)
	if _, err := m.Forward(prompt); err != nil {
		t.Fatal(err)
	}
	checkWaitAfterClose(t, m, decode, want)
}

// poisonedModel returns r's tensors with row row of the embeddings NaN (cfg must not tie the LM head to
// them): a sequence that reads that token gets NaN logits from there on, and no other sequence does.
func poisonedModel(t *testing.T, r *randomModel, row int) tensorGetter {
	t.Helper()
	if r.cfg.TieWordEmbeddings {
		t.Fatal("poisonedModel needs an untied LM head")
	}
	embed := *r.tensors["model.embed_tokens.weight"]
	embed.Data = slices.Clone(embed.Data)
	size, h := embed.DType.Size(), embed.Shape[1]
	nan := encodeElements(embed.DType, []float32{float32(math.NaN())})
	for i := range h {
		copy(embed.Data[(row*h+i)*size:], nan)
	}
	return func(name string) (*weights.Tensor, error) {
		if name == embed.Name {
			return &embed, nil
		}
		return r.get(name)
	}
}

// checkNonFinitePicks runs, on m (whose embedding row 7 is NaN, see poisonedModel), a step of sequence 0
// (prompt 1 2 3) beside sequence 1 (4 7 5, whose logits are NaN): greedy and sampled, sequence 1 picks
// NonFinitePick and sequence 0 a token. Then a pipelined step whose rows are fed from those picks (1's
// as token 0, not a read before the embeddings' start): it must run, and sequence 0's next pick must be
// what a waited step picks.
func checkNonFinitePicks(t *testing.T, m *Model, numBlocks, blockSize int) {
	t.Helper()
	for _, sample := range []bool{false, true} {
		t.Run(fmt.Sprintf("sample=%v", sample), func(t *testing.T) {
			params := func(step uint64) []SampleParams {
				if !sample {
					return nil
				}
				return []SampleParams{{Temperature: 0.8, TopK: 10, Seed: 1, Step: step}, {Temperature: 0.8, Seed: 2, Step: step}}
			}
			run := func(pipelined bool) []int32 {
				p := newPager(numBlocks, blockSize, newRand(3))
				pick, err := m.Start(p.step(chunk{0, []int32{1, 2, 3}}, chunk{1, []int32{4, 7, 5}}), params(0))
				if err != nil {
					t.Fatal(err)
				}
				var first []int32
				if !pipelined {
					if first, err = pick.Wait(); err != nil {
						t.Fatal(err)
					}
				}
				st := p.step(chunk{0, []int32{0}}, chunk{1, []int32{0}})
				if pipelined {
					st.InputFrom = []int32{0, 1}
				} else {
					st.Tokens = []int32{first[0], max(first[1], 0)}
				}
				next, err := m.Start(st, params(1))
				if err != nil {
					t.Fatalf("step fed from a non-finite pick: %v", err)
				}
				if pipelined {
					if first, err = pick.Wait(); err != nil {
						t.Fatal(err)
					}
				}
				second, err := next.Wait()
				if err != nil {
					t.Fatal(err)
				}
				if first[0] < 0 || first[1] != NonFinitePick {
					t.Fatalf("first picks %v, want a token and %d", first, NonFinitePick)
				}
				return []int32{first[0], second[0]}
			}
			waited, pipelined := run(false), run(true)
			if !slices.Equal(waited, pipelined) {
				t.Errorf("sequence 0: pipelined %v, waited %v", pipelined, waited)
			}
		})
	}
}

func TestNonFinitePicks(t *testing.T) {
	cfg := tinyConfig()
	m, err := load(cfg, poisonedModel(t, newRandomModel(cfg, weights.DTypeF32, 4), 7), Options{NumBlocks: 64, BlockSize: 4, SkipWeightCheck: true}, NewCPUBackend)
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	checkNonFinitePicks(t, m, 64, 4)
}
