package constraint

import (
	"math/bits"
	"runtime"
	"sync"
	"sync/atomic"
)

// The adaptive token mask cache (xgrammar's idea): for each scanning state of the automaton, the
// tokens are split once, walking the vocabulary's trie from that state alone, as if nothing lay
// under it on the stack:
//   - accepted: some path consumes the whole token inside the state's rule (calls into other
//     rules included, returning to the caller at the token's very end included);
//   - uncertain: no such path, but one ends the rule mid-token with a next byte that may follow
//     the rule somewhere (its FOLLOW set), so the answer depends on the stack below;
//   - rejected: the rest.
// A step's mask is then the union, over the stacks of the matcher's state, of their top state's
// accepted set and those uncertain tokens that the real stack takes, checked in trie order so
// that tokens sharing a prefix share the work.

// maskEntry is one state's split of the vocabulary.
type maskEntry struct {
	dense     []uint64 // accepted tokens as a bitset, or nil
	sparse    []int32  // accepted tokens when dense is nil
	uncertain []int32  // token ids in trie order
}

func (e *maskEntry) or(dst []uint64) {
	if e.dense != nil {
		for i, w := range e.dense {
			dst[i] |= w
		}
		return
	}
	for _, id := range e.sparse {
		dst[id>>6] |= 1 << (id & 63)
	}
}

// walker is scratch for computing entries.
type walker struct {
	st   *stepper
	cfgs []config
	acc  []int32
	unc  []int32
}

func (g *Grammar) newWalker() *walker {
	return &walker{st: newStepper(g.a), cfgs: make([]config, g.vocab.maxTokenLen()+1)}
}

// entry returns state's split, computing it on first use.
func (g *Grammar) entry(state int32) *maskEntry {
	if e := g.entries[state].Load(); e != nil {
		return e
	}
	w := g.walkers.Get().(*walker)
	e := g.computeEntry(state, w)
	g.walkers.Put(w)
	if g.entries[state].CompareAndSwap(nil, e) {
		return e
	}
	return g.entries[state].Load()
}

// computeEntry walks the vocabulary's trie from state alone.
func (g *Grammar) computeEntry(state int32, w *walker) *maskEntry {
	a, v := g.a, g.vocab
	follow := &a.follow[a.ruleOf[state]]
	w.acc, w.unc = w.acc[:0], w.unc[:0]
	w.cfgs[0].reset()
	w.cfgs[0].stacks = append(w.cfgs[0].stacks, stack{state, nil})
	w.st.in = interner{}
	nodes := v.nodes
	uncUntil := int32(0)
	for i := int32(0); i < int32(len(nodes)); {
		nd := &nodes[i]
		parent := &w.cfgs[nd.depth-1]
		if parent.complete && follow.has(nd.b) {
			uncUntil = max(uncUntil, nd.end)
		}
		cur := &w.cfgs[nd.depth]
		w.st.advance(cur, parent, nd.b)
		if cur.dead() {
			if i < uncUntil {
				for j := i; j < nd.end; j++ {
					w.unc = append(w.unc, v.order[nodes[j].tokLo:nodes[j].tokHi]...)
				}
			}
			i = nd.end
			continue
		}
		w.acc = append(w.acc, v.order[nd.tokLo:nd.tokHi]...)
		i++
	}
	e := &maskEntry{}
	if len(w.unc) > 0 {
		e.uncertain = append([]int32(nil), w.unc...)
	}
	if words := v.MaskWords(); len(w.acc) > words {
		e.dense = make([]uint64, words)
		for _, id := range w.acc {
			e.dense[id>>6] |= 1 << (id & 63)
		}
	} else if len(w.acc) > 0 {
		e.sparse = append([]int32(nil), w.acc...)
	}
	return e
}

// precompute fills every scanning state's entry, spread over the CPUs.
func (g *Grammar) precompute() {
	var states []int32
	for s, fl := range g.a.flags {
		if fl&flagScan != 0 && g.entries[s].Load() == nil {
			states = append(states, int32(s))
		}
	}
	workers := min(runtime.GOMAXPROCS(0), len(states))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			w := g.newWalker()
			for {
				k := int(next.Add(1)) - 1
				if k >= len(states) {
					return
				}
				s := states[k]
				g.entries[s].CompareAndSwap(nil, g.computeEntry(s, w))
			}
		})
	}
	wg.Wait()
}

// maskCounts reports how many bits of m are set.
func maskCount(m []uint64) int {
	n := 0
	for _, w := range m {
		n += bits.OnesCount64(w)
	}
	return n
}
