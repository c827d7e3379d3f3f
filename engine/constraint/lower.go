package constraint

import (
	"encoding/binary"
	"fmt"
	"slices"
	"strings"
)

// Lowering: each rule's body becomes a byte NFA (Thompson's construction, with call edges for
// rule references), then a DFA by subset construction, treating a call of each rule as one more
// symbol. The rules' DFAs share one numbering of states, the automaton the matcher runs: a
// pushdown automaton whose stack frames are return states.

// maxNFAStates bounds a grammar's NFA, so that a schema or grammar text cannot ask for unbounded
// memory (maxLength: 10000000, say).
const maxNFAStates = 1 << 20

// maxDFAStates bounds the automaton's states for the same reason.
const maxDFAStates = 1 << 15

type nfaByteEdge struct {
	lo, hi byte
	to     int32
}

type nfaCall struct {
	rule, to int32
}

type nfa struct {
	eps   [][]int32
	bytes [][]nfaByteEdge
	calls [][]nfaCall
	err   error
}

func (n *nfa) newState() int32 {
	if len(n.eps) >= maxNFAStates {
		if n.err == nil {
			n.err = fmt.Errorf("%w: the grammar needs more than %d automaton states", ErrTooLarge, maxNFAStates)
		}
		return 0
	}
	n.eps = append(n.eps, nil)
	n.bytes = append(n.bytes, nil)
	n.calls = append(n.calls, nil)
	return int32(len(n.eps) - 1)
}

func (n *nfa) epsilon(from, to int32) { n.eps[from] = append(n.eps[from], to) }

func (n *nfa) byteEdge(from, to int32, lo, hi byte) {
	n.bytes[from] = append(n.bytes[from], nfaByteEdge{lo, hi, to})
}

// chain adds a path of byte ranges from → to.
func (n *nfa) chain(from, to int32, seq []byteRange) {
	for i, r := range seq {
		next := to
		if i < len(seq)-1 {
			next = n.newState()
		}
		n.byteEdge(from, next, r.lo, r.hi)
		from = next
	}
}

// build adds states and edges so that the paths from → to spell e. It adds no edge into from
// nor out of to: those states are shared with whatever else starts or ends there.
func (n *nfa) build(e *expr, from, to int32) {
	if n.err != nil {
		return
	}
	switch e.kind {
	case kEmpty:
		n.epsilon(from, to)
	case kNothing:
	case kBytes:
		seq := make([]byteRange, len(e.lit))
		for i, b := range e.lit {
			seq[i] = byteRange{b, b}
		}
		n.chain(from, to, seq)
	case kByteSet:
		for _, r := range e.set.ranges() {
			n.byteEdge(from, to, r.lo, r.hi)
		}
	case kRunes:
		raw := e.runes
		if e.json {
			raw = raw.minus(jsonSpecial)
			for _, r := range e.runes.intersect(jsonSpecial) {
				for c := r.lo; c <= r.hi; c++ {
					n.build(litExpr(jsonEscape(c)), from, to)
				}
			}
		}
		for _, r := range raw {
			utf8Sequences(r.lo, r.hi, func(seq []byteRange) { n.chain(from, to, seq) })
		}
	case kSeq:
		for i, s := range e.subs {
			next := to
			if i < len(e.subs)-1 {
				next = n.newState()
			}
			n.build(s, from, next)
			from = next
		}
	case kAlt:
		for _, s := range e.subs {
			n.build(s, from, to)
		}
	case kRepeat:
		sub := e.subs[0]
		x := from
		for range e.min {
			y := n.newState()
			n.build(sub, x, y)
			x = y
			if n.err != nil {
				return
			}
		}
		if e.max < 0 {
			// The loop returns to a state of its own: x may be from, where sibling alternatives,
			// an enclosing repetition's exit or its loop also start, and a loop back into it
			// would let those follow any iteration.
			h, y := n.newState(), n.newState()
			n.epsilon(x, h)
			n.build(sub, h, y)
			n.epsilon(y, h)
			x = h
		} else {
			for range e.max - e.min {
				n.epsilon(x, to)
				y := n.newState()
				n.build(sub, x, y)
				x = y
				if n.err != nil {
					return
				}
			}
		}
		n.epsilon(x, to)
	case kRef:
		n.calls[from] = append(n.calls[from], nfaCall{int32(e.rule), to})
	case kGraph:
		states := make([]int32, e.g.n)
		for i := range states {
			states[i] = n.newState()
		}
		n.epsilon(from, states[e.g.start])
		for _, a := range e.g.accept {
			n.epsilon(states[a], to)
		}
		for _, ed := range e.g.edges {
			if ed.label == nil {
				n.epsilon(states[ed.from], states[ed.to])
			} else {
				n.build(ed.label, states[ed.from], states[ed.to])
			}
		}
	}
}

// Automaton state flags.
const (
	flagScan   uint8 = 1 << iota // has a byte transition
	flagAccept                   // its rule may end here
	flagTail                     // accepting, with no transition or call: a call returning here needs no frame
	flagPlain                    // scanning, not accepting, no calls: a step needs no closure
)

type call struct{ start, ret int32 }

// automaton is the compiled grammar: every rule's DFA in one numbering of states.
type automaton struct {
	next      []int32 // [state*256+byte] → state, or -1
	calls     [][]call
	flags     []uint8
	ruleOf    []int32
	ruleStart []int32
	ruleNames []string
	root      int32     // the root rule's start state
	follow    []byteSet // per rule: the bytes that may follow its end in some context
	leafSigs  []string  // per rule: a digest of its canonical form if it calls no rule (see signLeaves)
	canon     []int32   // per state of a leaf rule: the canonical number of its class's first state
}

func (a *automaton) numStates() int { return len(a.flags) }

// lower compiles g into an automaton.
func lower(g *grammar) (*automaton, error) {
	for _, r := range g.rules {
		if r.body == nil {
			return nil, fmt.Errorf("%w: rule %q is used but not defined", ErrSyntax, r.name)
		}
	}
	n := &nfa{}
	type ruleNFA struct{ start, final int32 }
	rn := make([]ruleNFA, len(g.rules))
	for i, r := range g.rules {
		s, f := n.newState(), n.newState()
		n.build(r.body, s, f)
		rn[i] = ruleNFA{s, f}
		if n.err != nil {
			return nil, n.err
		}
	}
	a := &automaton{ruleStart: make([]int32, len(g.rules)), ruleNames: make([]string, len(g.rules))}
	for i := range g.rules {
		a.ruleNames[i] = g.rules[i].name
		d := &subsetBuilder{n: n, final: rn[i].final, a: a, rule: int32(i), ids: map[string]int32{}}
		start, err := d.state(d.closure([]int32{rn[i].start}))
		if err != nil {
			return nil, err
		}
		a.ruleStart[i] = start
		for len(d.work) > 0 {
			s := d.work[0]
			d.work = d.work[1:]
			if err := d.expand(s); err != nil {
				return nil, err
			}
		}
	}
	a.root = a.ruleStart[g.root]
	if err := a.check(g); err != nil {
		return nil, err
	}
	a.prune()
	a.setFlags()
	a.computeFollow()
	return a, nil
}

// subsetBuilder determinizes one rule's NFA.
type subsetBuilder struct {
	n     *nfa
	final int32
	a     *automaton
	rule  int32
	ids   map[string]int32
	sets  map[int32][]int32
	work  []int32
}

func (d *subsetBuilder) closure(seed []int32) []int32 {
	seen := map[int32]bool{}
	var out []int32
	stack := slices.Clone(seed)
	for len(stack) > 0 {
		s := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if seen[s] {
			continue
		}
		seen[s] = true
		out = append(out, s)
		stack = append(stack, d.n.eps[s]...)
	}
	slices.Sort(out)
	return out
}

// state returns the automaton state of an ε-closed NFA set, adding it when new.
func (d *subsetBuilder) state(set []int32) (int32, error) {
	key := setKey(set)
	if id, ok := d.ids[key]; ok {
		return id, nil
	}
	a := d.a
	if len(a.flags) >= maxDFAStates {
		return 0, fmt.Errorf("%w: the grammar needs more than %d automaton states", ErrTooLarge, maxDFAStates)
	}
	id := int32(len(a.flags))
	d.ids[key] = id
	if d.sets == nil {
		d.sets = map[int32][]int32{}
	}
	d.sets[id] = set
	var fl uint8
	if slices.Contains(set, d.final) {
		fl |= flagAccept
	}
	a.flags = append(a.flags, fl)
	a.calls = append(a.calls, nil)
	a.ruleOf = append(a.ruleOf, d.rule)
	for range 256 {
		a.next = append(a.next, -1)
	}
	d.work = append(d.work, id)
	return id, nil
}

// expand computes the transitions and calls of state id.
func (d *subsetBuilder) expand(id int32) error {
	set := d.sets[id]
	var targets [256][]int32
	byRule := map[int32][]int32{}
	var ruleOrder []int32
	for _, s := range set {
		for _, e := range d.n.bytes[s] {
			for c := int(e.lo); c <= int(e.hi); c++ {
				targets[c] = append(targets[c], e.to)
			}
		}
		for _, c := range d.n.calls[s] {
			if _, ok := byRule[c.rule]; !ok {
				ruleOrder = append(ruleOrder, c.rule)
			}
			byRule[c.rule] = append(byRule[c.rule], c.to)
		}
	}
	memo := map[string]int32{}
	for c := range 256 {
		if len(targets[c]) == 0 {
			continue
		}
		slices.Sort(targets[c])
		t := slices.Compact(targets[c])
		key := setKey(t)
		to, ok := memo[key]
		if !ok {
			var err error
			if to, err = d.state(d.closure(t)); err != nil {
				return err
			}
			memo[key] = to
		}
		d.a.next[int(id)*256+c] = to
	}
	for _, r := range ruleOrder {
		to, err := d.state(d.closure(byRule[r]))
		if err != nil {
			return err
		}
		d.a.calls[id] = append(d.a.calls[id], call{start: r, ret: to}) // start holds the rule until check
	}
	return nil
}

// check resolves call edges to rule start states and refuses left recursion: a rule that can call
// itself again before consuming a byte would make the matcher's stack grow without input.
func (a *automaton) check(g *grammar) error {
	for s := range a.calls {
		for i := range a.calls[s] {
			a.calls[s][i].start = a.ruleStart[a.calls[s][i].start]
		}
	}
	nullable := a.nullable()
	// Edges rule → rule called before any byte is consumed.
	leftCalls := make([][]int32, len(a.ruleStart))
	for r, start := range a.ruleStart {
		seen := map[int32]bool{}
		stack := []int32{start}
		for len(stack) > 0 {
			s := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			if seen[s] {
				continue
			}
			seen[s] = true
			for _, c := range a.calls[s] {
				callee := a.ruleOf[c.start]
				if !slices.Contains(leftCalls[r], callee) {
					leftCalls[r] = append(leftCalls[r], callee)
				}
				if nullable[c.start] {
					stack = append(stack, c.ret)
				}
			}
		}
	}
	// Find a cycle.
	const (
		unvisited = iota
		onPath
		done
	)
	mark := make([]int, len(leftCalls))
	var path []int32
	var cycle []int32
	var visit func(r int32) bool
	visit = func(r int32) bool {
		mark[r] = onPath
		path = append(path, r)
		for _, c := range leftCalls[r] {
			if mark[c] == onPath {
				i := slices.Index(path, c)
				cycle = append(slices.Clone(path[i:]), c)
				return true
			}
			if mark[c] == unvisited && visit(c) {
				return true
			}
		}
		path = path[:len(path)-1]
		mark[r] = done
		return false
	}
	for r := range leftCalls {
		if mark[r] == unvisited && visit(int32(r)) {
			names := make([]string, len(cycle))
			for i, c := range cycle {
				names[i] = g.rules[c].name
			}
			return fmt.Errorf("%w: left recursion (%s)", ErrUnsupported, strings.Join(names, " → "))
		}
	}
	return nil
}

// nullable reports, per state, whether its rule can end from it without consuming a byte.
func (a *automaton) nullable() []bool {
	nl := make([]bool, a.numStates())
	for s := range nl {
		nl[s] = a.flags[s]&flagAccept != 0
	}
	for changed := true; changed; {
		changed = false
		for s := range nl {
			if nl[s] {
				continue
			}
			for _, c := range a.calls[s] {
				if nl[c.start] && nl[c.ret] {
					nl[s], changed = true, true
					break
				}
			}
		}
	}
	return nl
}

// prune removes transitions and calls into states from which the rule can never end (a dead
// end would let the matcher accept a prefix that no continuation completes). Liveness spreads
// backwards from accepting states: over byte edges, and over a call once both its callee's start
// and its return state are live.
func (a *automaton) prune() {
	ns := a.numStates()
	preds := make([][]int32, ns)    // byte-edge predecessors
	callDeps := make([][]int32, ns) // states with a call whose start or return is this state
	for s := range ns {
		for c := range 256 {
			if t := a.next[s*256+c]; t >= 0 && (len(preds[t]) == 0 || preds[t][len(preds[t])-1] != int32(s)) {
				preds[t] = append(preds[t], int32(s))
			}
		}
		for _, c := range a.calls[s] {
			callDeps[c.start] = append(callDeps[c.start], int32(s))
			callDeps[c.ret] = append(callDeps[c.ret], int32(s))
		}
	}
	live := make([]bool, ns)
	var work []int32
	mark := func(s int32) {
		if !live[s] {
			live[s] = true
			work = append(work, s)
		}
	}
	for s := range ns {
		if a.flags[s]&flagAccept != 0 {
			mark(int32(s))
		}
	}
	for len(work) > 0 {
		x := work[len(work)-1]
		work = work[:len(work)-1]
		for _, p := range preds[x] {
			mark(p)
		}
		for _, s := range callDeps[x] {
			if live[s] {
				continue
			}
			for _, c := range a.calls[s] {
				if live[c.start] && live[c.ret] {
					mark(s)
					break
				}
			}
		}
	}
	for s := range ns {
		for c := range 256 {
			if t := a.next[s*256+c]; t >= 0 && !live[t] {
				a.next[s*256+c] = -1
			}
		}
		a.calls[s] = slices.DeleteFunc(a.calls[s], func(c call) bool { return !live[c.start] || !live[c.ret] })
	}
}

func (a *automaton) setFlags() {
	for s := range a.flags {
		fl := a.flags[s] &^ (flagScan | flagTail | flagPlain)
		for c := range 256 {
			if a.next[s*256+c] >= 0 {
				fl |= flagScan
				break
			}
		}
		if fl&flagAccept != 0 && fl&flagScan == 0 && len(a.calls[s]) == 0 {
			fl |= flagTail
		}
		if fl&flagScan != 0 && fl&flagAccept == 0 && len(a.calls[s]) == 0 {
			fl |= flagPlain
		}
		a.flags[s] = fl
	}
}

// computeFollow computes, per rule, the bytes that may come right after the rule ends (its FOLLOW
// set): the mask cache rejects a token that leaves a rule with a byte no caller could take.
func (a *automaton) computeFollow() {
	ns := a.numStates()
	nullable := a.nullable()
	first := make([]byteSet, ns)
	for s := range ns {
		for c := range 256 {
			if a.next[s*256+c] >= 0 {
				first[s].add(byte(c))
			}
		}
	}
	for changed := true; changed; {
		changed = false
		for s := range ns {
			for _, c := range a.calls[s] {
				changed = first[s].or(&first[c.start]) || changed
				if nullable[c.start] {
					changed = first[s].or(&first[c.ret]) || changed
				}
			}
		}
	}
	a.follow = make([]byteSet, len(a.ruleStart))
	for changed := true; changed; {
		changed = false
		for s := range ns {
			for _, c := range a.calls[s] {
				callee := a.ruleOf[c.start]
				changed = a.follow[callee].or(&first[c.ret]) || changed
				if nullable[c.ret] {
					changed = a.follow[callee].or(&a.follow[a.ruleOf[c.ret]]) || changed
				}
			}
		}
	}
}

// setKey names a sorted set of NFA states.
func setKey(set []int32) string {
	buf := make([]byte, 0, 4*len(set))
	for _, s := range set {
		buf = binary.LittleEndian.AppendUint32(buf, uint32(s))
	}
	return string(buf)
}
