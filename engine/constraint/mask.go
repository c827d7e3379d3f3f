package constraint

import (
	"crypto/sha256"
	"encoding/binary"
	"math/bits"
	"runtime"
	"strconv"

	"github.com/gollm/gollm/internal/fanout"
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
	// next holds, for a shared entry (computed without a FOLLOW set), each uncertain token's bytes
	// right after the rule may end: a grammar keeps the tokens whose bytes its FOLLOW set has.
	next []byteSet
}

// forFollow returns e with the uncertain tokens whose byte after the rule's end follow allows.
func (e *maskEntry) forFollow(follow *byteSet) *maskEntry {
	out := &maskEntry{dense: e.dense, sparse: e.sparse}
	for k, id := range e.uncertain {
		n := e.next[k]
		for i := range n {
			if n[i]&follow[i] != 0 {
				out.uncertain = append(out.uncertain, id)
				break
			}
		}
	}
	return out
}

func (e *maskEntry) or(dst []uint64) {
	if e.dense != nil {
		for i, w := range e.dense[:min(len(e.dense), len(dst))] {
			dst[i] |= w
		}
		return
	}
	for _, id := range e.sparse {
		if int(id>>6) < len(dst) {
			dst[id>>6] |= 1 << (id & 63)
		}
	}
}

// walker is scratch for computing entries.
type walker struct {
	st    *stepper
	lv    []level // per trie depth
	dense []uint64
	acc   []int32
	unc   []int32
	next  []byteSet
	open  []openRange
}

// openRange is a subtree of the trie whose tokens leave the rule before the subtree's first byte
// b, at the subtree's root: they are uncertain unless accepted otherwise.
type openRange struct {
	end int32
	b   byte
}

// level is the matcher's state at one depth of a trie walk: one stack (simple), or a config.
type level struct {
	simple bool
	state  int32
	parent *frame
	c      config
}

// general returns l as a config.
func (l *level) general() *config {
	if l.simple {
		l.c.reset()
		l.c.stacks = append(l.c.stacks, stack{l.state, l.parent})
		l.simple = false
	}
	return &l.c
}

func (g *Grammar) newWalker() *walker {
	return &walker{st: newStepper(g.a), lv: make([]level, g.vocab.maxTokenLen()+1), dense: make([]uint64, g.vocab.MaskWords())}
}

// entry returns state's split, computing it on first use.
func (g *Grammar) entry(state int32) *maskEntry {
	if e := g.entries[state].Load(); e != nil {
		return e
	}
	w := g.walkers.Get().(*walker)
	e := g.sharedOrCompute(state, w)
	g.walkers.Put(w)
	if g.entries[state].CompareAndSwap(nil, e) {
		return e
	}
	return g.entries[state].Load()
}

// computeEntry walks the vocabulary's trie from state alone. With follow nil it keeps every token
// that leaves the rule mid-way as uncertain, with the bytes that follow the rule's end in it
// (maskEntry.next), for sharing across grammars. Most steps of a walk stay in one
// stack moving between plain states (a byte transition and nothing to close over), which the walk
// does inline; the rest goes through the stepper.
func (g *Grammar) computeEntry(state int32, w *walker, follow *byteSet) *maskEntry {
	a, v := g.a, g.vocab
	next, flags := a.next, a.flags
	// Accepted tokens gather in a list until they outnumber the mask's words, then in the dense
	// scratch bitset (cleared after use).
	useDense := false
	w.acc = w.acc[:0]
	w.unc, w.next, w.open = w.unc[:0], w.next[:0], w.open[:0]
	w.lv[0] = level{simple: true, state: state, c: w.lv[0].c}
	w.st.in = interner{}
	nodes, order := v.nodes, v.order
	for i := int32(0); i < int32(len(nodes)); {
		nd := &nodes[i]
		parent := &w.lv[nd.depth-1]
		cur := &w.lv[nd.depth]
		alive := false
		if parent.simple {
			if t := next[int(parent.state)<<8|int(nd.b)]; t < 0 {
				alive = false
			} else if flags[t]&flagPlain != 0 {
				cur.simple, cur.state, cur.parent = true, t, parent.parent
				alive = true
			} else {
				cur.simple = false
				w.st.advance(&cur.c, parent.general(), nd.b)
				alive = !cur.c.dead()
			}
		} else {
			for len(w.open) > 0 && w.open[len(w.open)-1].end <= i {
				w.open = w.open[:len(w.open)-1]
			}
			if parent.c.complete && (follow == nil || follow.has(nd.b)) {
				w.open = append(w.open, openRange{nd.end, nd.b})
			}
			cur.simple = false
			w.st.advance(&cur.c, &parent.c, nd.b)
			alive = !cur.c.dead()
		}
		if !alive {
			for len(w.open) > 0 && w.open[len(w.open)-1].end <= i {
				w.open = w.open[:len(w.open)-1]
			}
			if len(w.open) > 0 {
				var bs byteSet
				for _, r := range w.open {
					bs.add(r.b)
				}
				for j := i; j < nd.end; j++ {
					for _, id := range order[nodes[j].tokLo:nodes[j].tokHi] {
						w.unc = append(w.unc, id)
						w.next = append(w.next, bs)
					}
				}
			}
			i = nd.end
			continue
		}
		if useDense {
			for _, id := range order[nd.tokLo:nd.tokHi] {
				w.dense[id>>6] |= 1 << (id & 63)
			}
		} else if w.acc = append(w.acc, order[nd.tokLo:nd.tokHi]...); len(w.acc) > len(w.dense) {
			useDense = true
			for _, id := range w.acc {
				w.dense[id>>6] |= 1 << (id & 63)
			}
		}
		i++
	}
	e := &maskEntry{}
	if len(w.unc) > 0 {
		e.uncertain = append([]int32(nil), w.unc...)
		if follow == nil {
			e.next = append([]byteSet(nil), w.next...)
		}
	}
	switch {
	case useDense:
		e.dense = append([]uint64(nil), w.dense...)
		clear(w.dense)
	case len(w.acc) > 0:
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
	fanout.For(runtime.GOMAXPROCS(0), len(states), g.newWalker, func(w *walker, k int) {
		s := states[k]
		g.entries[s].CompareAndSwap(nil, g.sharedOrCompute(s, w))
	})
}

// maskCount reports how many bits of m are set.
func maskCount(m []uint64) int {
	n := 0
	for _, w := range m {
		n += bits.OnesCount64(w)
	}
	return n
}

// sharedOrCompute returns state's entry from the vocabulary's shared cache when its rule is a leaf
// (calls no rule: a JSON string, a number, a format), computing and sharing it when missing. Before
// its FOLLOW set narrows the uncertain tokens, the entry of a leaf rule's state depends only on the
// states it reaches, which its signature spells, so grammars that share a sub-language (every
// schema's free strings) compute it once per vocabulary.
func (g *Grammar) sharedOrCompute(state int32, w *walker) *maskEntry {
	follow := &g.a.follow[g.a.ruleOf[state]]
	key, ok := g.a.leafSignature(state)
	if !ok {
		return g.computeEntry(state, w, follow)
	}
	e := g.vocab.sharedEntry(key)
	if e == nil {
		e = g.computeEntry(state, w, nil)
		g.vocab.storeShared(key, e)
	}
	return e.forFollow(follow)
}

// leafSignature names what a state of a leaf rule does to tokens: a digest of the rule's canonical
// form (its states numbered breadth-first from its start, with their transitions and whether they
// accept) and the state's class (see signLeaves). Equal names mean equal entries.
func (a *automaton) leafSignature(state int32) (string, bool) {
	rule := a.ruleOf[state]
	if a.leafSigs == nil || a.leafSigs[rule] == "" {
		return "", false
	}
	return a.leafSigs[rule] + "#" + strconv.Itoa(int(a.canon[state])), true
}

// maxSignatureStates bounds the rules whose entries are shared.
const maxSignatureStates = maxDFAStates

// signLeaves computes the canonical forms of the leaf rules (rules that call none), and each leaf
// state's class: states that agree on every byte string up to maxTok long (alive or dead, accepting
// or not after each byte: all a token's walk can see) get the same entry. A string of maxLength n
// has n states counting down, but those with more characters left than the longest token has bytes
// behave alike: one walk serves them all. The class is named by its first state in canonical
// order, so that names agree across grammars.
func (a *automaton) signLeaves(maxTok int) {
	a.leafSigs = make([]string, len(a.ruleStart))
	a.canon = make([]int32, a.numStates())
	leaf := make([]bool, len(a.ruleStart))
	for r := range leaf {
		leaf[r] = true
	}
	for s := range a.calls {
		if len(a.calls[s]) > 0 {
			leaf[a.ruleOf[s]] = false
		}
	}
	for r, start := range a.ruleStart {
		if !leaf[r] {
			continue
		}
		ids := map[int32]int32{start: 0}
		queue := []int32{start}
		h := sha256.New()
		buf := make([]byte, 0, 64)
		for k := 0; k < len(queue) && len(queue) <= maxSignatureStates; k++ {
			s := queue[k]
			buf = append(buf[:0], a.flags[s]&flagAccept)
			prev := int32(-2)
			for c := range 256 {
				t := a.next[int(s)<<8|c]
				id := int32(-1)
				if t >= 0 {
					var ok bool
					if id, ok = ids[t]; !ok {
						id = int32(len(queue))
						ids[t] = id
						queue = append(queue, t)
					}
				}
				if id != prev { // runs of equal targets: the byte where each starts, and the target
					buf = append(buf, byte(c))
					buf = binary.LittleEndian.AppendUint32(buf, uint32(id))
					prev = id
				}
			}
			buf = append(buf, 0xFF)
			h.Write(buf)
		}
		if len(queue) > maxSignatureStates {
			continue
		}
		a.leafSigs[r] = string(h.Sum(nil))
		classes := boundedClasses(a, queue, ids, maxTok)
		first := map[int32]int32{}
		for k, s := range queue {
			if _, ok := first[classes[k]]; !ok {
				first[classes[k]] = int32(k)
			}
			a.canon[s] = first[classes[k]]
		}
	}
}

// boundedClasses partitions a leaf rule's states (queue, in canonical order; ids maps a state to
// its index) by their behaviour on byte strings up to depth long: Moore's refinement, rounds, each
// over the bytes whose transitions differ (one byte per class of bytes with equal columns), stopping
// early once stable.
func boundedClasses(a *automaton, queue []int32, ids map[int32]int32, depth int) []int32 {
	n := len(queue)
	target := func(k int, c int) int32 {
		if t := a.next[int(queue[k])<<8|c]; t >= 0 {
			return ids[t]
		}
		return -1
	}
	// Bytes with equal columns act alike: keep one of each.
	var reps []int
	seen := map[string]bool{}
	col := make([]byte, 0, 4*n)
	for c := range 256 {
		col = col[:0]
		for k := range n {
			col = binary.LittleEndian.AppendUint32(col, uint32(target(k, c)))
		}
		if !seen[string(col)] {
			seen[string(col)] = true
			reps = append(reps, c)
		}
	}
	succ := make([]int32, n*len(reps))
	for k := range n {
		for j, c := range reps {
			succ[k*len(reps)+j] = target(k, c)
		}
	}
	class := make([]int32, n)
	kinds := map[int32]bool{}
	for k, s := range queue {
		class[k] = int32(a.flags[s] & flagAccept)
		kinds[class[k]] = true
	}
	count := len(kinds)
	key := make([]byte, 0, 4*(len(reps)+1))
	for range depth {
		next := make([]int32, n)
		names := map[string]int32{}
		for k := range n {
			key = binary.LittleEndian.AppendUint32(key[:0], uint32(class[k]))
			for _, t := range succ[k*len(reps) : (k+1)*len(reps)] {
				c := int32(-1)
				if t >= 0 {
					c = class[t]
				}
				key = binary.LittleEndian.AppendUint32(key, uint32(c))
			}
			id, ok := names[string(key)]
			if !ok {
				id = int32(len(names))
				names[string(key)] = id
			}
			next[k] = id
		}
		class = next
		if len(names) == count {
			break // stable: no string of any length tells the classes apart further
		}
		count = len(names)
	}
	return class
}
