package kvcache

import (
	"errors"
	"slices"
	"testing"
)

func TestSetTokenErrors(t *testing.T) {
	p := mustPool(t, Config{NumBlocks: 8, BlockSize: 4, PrefixCaching: true})
	if _, err := p.Allocate(1, seqTokens(6, 1)); err != nil {
		t.Fatal(err)
	}
	if err := p.Commit(1, 4); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		id   SeqID
		pos  int
		want error
	}{
		{"unknown sequence", 9, 5, ErrUnknownSeq},
		{"committed position", 1, 3, nil},
		{"negative position", 1, -1, nil},
		{"past the last token", 1, 6, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := p.SetToken(tc.id, tc.pos, 99)
			if err == nil {
				t.Fatal("no error")
			}
			if tc.want != nil && !errors.Is(err, tc.want) {
				t.Errorf("error %v, want %v", err, tc.want)
			}
		})
	}
	if got := p.seqs[1].tokens; !slices.Equal(got, seqTokens(6, 1)) {
		t.Errorf("failed SetToken calls changed the tokens to %v", got)
	}
	for _, pos := range []int{4, 5} {
		if err := p.SetToken(1, pos, int32(50+pos)); err != nil {
			t.Errorf("SetToken(1, %d): %v", pos, err)
		}
	}
	if got, want := p.seqs[1].tokens, []int32{1, 2, 3, 4, 54, 55}; !slices.Equal(got, want) {
		t.Errorf("tokens %v, want %v", got, want)
	}
	checkInvariants(t, p)
}

// TestSetTokenRegistersTheRealToken reserves a slot with a placeholder, as pipelined decoding does,
// and checks that the block completed by it enters the prefix cache under the token set later.
func TestSetTokenRegistersTheRealToken(t *testing.T) {
	const bs = 4
	const placeholder, real = 0, 77
	prompt := seqTokens(3, 1) // the 4th token, sampled later, completes the first block
	tests := []struct {
		name       string
		set        bool // replace the placeholder before committing it
		wantCached int  // of a later prompt made of the real tokens
	}{
		{"placeholder replaced", true, bs},
		{"placeholder kept", false, 0},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPool(t, Config{NumBlocks: 8, BlockSize: bs, PrefixCaching: true})
			if _, err := p.Allocate(1, prompt); err != nil {
				t.Fatal(err)
			}
			if err := p.Append(1, placeholder); err != nil { // slot for the token being sampled
				t.Fatal(err)
			}
			if err := p.Commit(1, 3); err != nil { // the prompt's step ran
				t.Fatal(err)
			}
			if tc.set {
				if err := p.SetToken(1, 3, real); err != nil {
					t.Fatal(err)
				}
			}
			if err := p.Append(1, 5); err != nil {
				t.Fatal(err)
			}
			if err := p.Commit(1, 4); err != nil { // the placeholder's step ran: block 0 is full
				t.Fatal(err)
			}
			checkInvariants(t, p)
			if err := p.Free(1); err != nil {
				t.Fatal(err)
			}
			later := append(slices.Clone(prompt), real, 9, 9)
			cached, err := p.Allocate(2, later)
			if err != nil {
				t.Fatal(err)
			}
			if cached != tc.wantCached {
				t.Errorf("later prompt cached %d tokens, want %d", cached, tc.wantCached)
			}
			checkInvariants(t, p)
		})
	}
}

func TestTruncate(t *testing.T) {
	const bs = 2
	tests := []struct {
		name       string
		n          int
		wantFail   bool
		wantBlocks int
	}{
		{"to the token count", 7, false, 4},
		{"within the last block", 6, false, 3},
		{"drops one block", 5, false, 3},
		{"drops two blocks", 4, false, 2},
		{"to the committed count", 3, false, 2},
		{"below the committed count", 2, true, 4},
		{"above the token count", 8, true, 4},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			p := mustPool(t, Config{NumBlocks: 6, BlockSize: bs, PrefixCaching: true})
			if _, err := p.Allocate(1, seqTokens(3, 1)); err != nil {
				t.Fatal(err)
			}
			if err := p.Commit(1, 3); err != nil {
				t.Fatal(err)
			}
			if err := p.Append(1, 10, 11, 12, 13); err != nil { // 7 tokens, 4 blocks
				t.Fatal(err)
			}
			view, _ := p.BlockTable(1)
			before := slices.Clone(view)
			freeBefore := p.NumAvailableBlocks()
			err := p.Truncate(1, tc.n)
			if tc.wantFail != (err != nil) {
				t.Fatalf("Truncate(1, %d) = %v, want failure %v", tc.n, err, tc.wantFail)
			}
			table, _ := p.BlockTable(1)
			if len(table) != tc.wantBlocks {
				t.Errorf("%d blocks, want %d", len(table), tc.wantBlocks)
			}
			if got := p.NumAvailableBlocks() - freeBefore; got != 4-tc.wantBlocks {
				t.Errorf("%d blocks returned, want %d", got, 4-tc.wantBlocks)
			}
			checkInvariants(t, p)
			// Grow again: views handed out before keep their entries.
			if n, _ := p.NumTokens(1); n < 7 {
				if err := p.Append(1, make([]int32, 7-n)...); err != nil {
					t.Fatal(err)
				}
			}
			if !slices.Equal(view, before) {
				t.Errorf("an earlier block table view changed from %v to %v", before, view)
			}
			checkInvariants(t, p)
			if err := p.Free(1); err != nil {
				t.Fatal(err)
			}
			if st := p.Stats(); st.UsedBlocks != 0 {
				t.Errorf("after Free: %+v", st)
			}
			checkInvariants(t, p)
		})
	}
	t.Run("unknown sequence", func(t *testing.T) {
		p := mustPool(t, Config{NumBlocks: 6, BlockSize: bs})
		if err := p.Truncate(9, 0); !errors.Is(err, ErrUnknownSeq) {
			t.Errorf("Truncate of an unknown sequence = %v, want ErrUnknownSeq", err)
		}
	})
}

func TestNumAvailableBlocks(t *testing.T) {
	p := mustPool(t, Config{NumBlocks: 8, BlockSize: 2, PrefixCaching: true})
	computeAll(t, p, 1, seqTokens(5, 1))  // 3 blocks, 2 of them registered
	computeAll(t, p, 2, seqTokens(3, 20)) // 2 blocks
	if err := p.Free(1); err != nil {
		t.Fatal(err)
	}
	st := p.Stats()
	if got, want := p.NumAvailableBlocks(), st.FreeBlocks+st.CachedBlocks; got != want || got != 6 || st.CachedBlocks != 2 {
		t.Errorf("NumAvailableBlocks = %d, stats %+v", got, st)
	}
	// Exactly that many blocks can be appended.
	if err := p.Append(2, make([]int32, 2*p.NumAvailableBlocks()+1)...); err != nil {
		t.Errorf("appending into every available block: %v", err)
	}
	if p.NumAvailableBlocks() != 0 || p.Append(2, 0) == nil {
		t.Errorf("after filling the pool: %d available, Append succeeded", p.NumAvailableBlocks())
	}
	checkInvariants(t, p)
}
