package constraint

// The matcher's runtime state is a set of stacks of the pushdown automaton (several when the
// grammar is ambiguous so far). A stack is its top state and a persistent list of return frames:
// stacks share their frames, so advancing, copying and rolling back cost what changes, not the
// stack's depth. Frames are interned, so two stacks are equal exactly when their tops are equal
// and their parents are the same pointer.

// frame is a return state under a stack's top.
type frame struct {
	state  int32
	parent *frame
}

// stack is a scanning state (one with a byte transition) over its return frames.
type stack struct {
	state  int32
	parent *frame
}

// config is the matcher's state between bytes: the stacks that can take a next byte, and whether
// the root rule can end here (complete). A config with neither is dead.
type config struct {
	stacks   []stack
	complete bool
}

func (c *config) dead() bool { return len(c.stacks) == 0 && !c.complete }

func (c *config) reset() {
	c.stacks = c.stacks[:0]
	c.complete = false
}

func (c *config) clone() config {
	return config{stacks: append([]stack(nil), c.stacks...), complete: c.complete}
}

// maxInterned bounds an interner's table; past it the table restarts (frames already made stay
// valid, only later duplicates go undetected for a while).
const maxInterned = 1 << 16

// interner makes one frame per (state, parent).
type interner struct{ m map[frame]*frame }

func (in *interner) frame(state int32, parent *frame) *frame {
	k := frame{state, parent}
	if f, ok := in.m[k]; ok {
		return f
	}
	if in.m == nil || len(in.m) >= maxInterned {
		in.m = make(map[frame]*frame)
	}
	f := &frame{state, parent}
	in.m[k] = f
	return f
}

// stepper advances configs over an automaton. It holds scratch space, so each goroutine needs its
// own.
type stepper struct {
	a    *automaton
	in   interner
	seen []stack
}

func newStepper(a *automaton) *stepper { return &stepper{a: a} }

// start sets dst to the closure of state over parent.
func (st *stepper) start(dst *config, state int32, parent *frame) {
	dst.reset()
	st.seen = st.seen[:0]
	st.closure(dst, state, parent)
}

// advance sets dst to src after byte b. dst must not alias src.
func (st *stepper) advance(dst, src *config, b byte) {
	dst.reset()
	st.seen = st.seen[:0]
	a := st.a
	if len(src.stacks) == 1 {
		// One stack stepping to a state with nothing to close over: the common case.
		s := src.stacks[0]
		t := a.next[int(s.state)<<8|int(b)]
		if t >= 0 && a.flags[t]&flagPlain != 0 {
			dst.stacks = append(dst.stacks, stack{t, s.parent})
			return
		}
	}
	for _, s := range src.stacks {
		if t := a.next[int(s.state)<<8|int(b)]; t >= 0 {
			st.closure(dst, t, s.parent)
		}
	}
}

// closure adds the stacks reachable from state over parent without consuming a byte: the state
// itself if it scans, the rules it calls (pushing its return state, unless the call is a tail
// call), and its parent's continuation if its rule can end here.
func (st *stepper) closure(dst *config, state int32, parent *frame) {
	for _, s := range st.seen {
		if s.state == state && s.parent == parent {
			return
		}
	}
	st.seen = append(st.seen, stack{state, parent})
	a := st.a
	fl := a.flags[state]
	if fl&flagScan != 0 {
		dst.stacks = append(dst.stacks, stack{state, parent})
	}
	for _, c := range a.calls[state] {
		p := parent
		if a.flags[c.ret]&flagTail == 0 {
			p = st.in.frame(c.ret, parent)
		}
		st.closure(dst, c.start, p)
	}
	if fl&flagAccept != 0 {
		if parent == nil {
			dst.complete = true
		} else {
			st.closure(dst, parent.state, parent.parent)
		}
	}
}

// advanceBytes runs src over bs, using two scratch configs, and returns the result (which aliases
// one of them) or nil when the bytes die.
func (st *stepper) advanceBytes(src *config, bs []byte, x, y *config) *config {
	cur := src
	for _, b := range bs {
		dst := x
		if cur == x {
			dst = y
		}
		st.advance(dst, cur, b)
		if dst.dead() {
			return nil
		}
		cur = dst
	}
	return cur
}
