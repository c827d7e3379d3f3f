package constraint

// The grammar IR: every front end (JSON Schema, regex, choice, GBNF) compiles to a grammar, a
// context-free grammar over bytes. A grammar is a list of rules; a rule's body is an expression
// over bytes, characters (encoded as UTF-8, or as a JSON string writes them), sequences,
// alternatives, bounded and unbounded repetition, references to rules, and graphs (finite automata
// whose edges are expressions, for what is easier to say as states than as a regular expression:
// a character-level DFA, properties in order with optional ones).

// exprKind says what an expr matches.
type exprKind uint8

const (
	kEmpty   exprKind = iota // the empty string
	kNothing                 // no string at all
	kBytes                   // the bytes lit
	kByteSet                 // one byte of set
	kRunes                   // one character of runes (UTF-8; json: as a JSON string writes it)
	kSeq                     // subs in order
	kAlt                     // any of subs
	kRepeat                  // subs[0] between min and max times (max < 0: unbounded)
	kRef                     // rule
	kGraph                   // g's paths from start to an accepting state
)

// expr is one node of a rule's body. Exprs are immutable once built and may be shared.
type expr struct {
	kind     exprKind
	lit      []byte
	set      byteSet
	runes    runeSet
	json     bool
	subs     []*expr
	min, max int
	rule     int
	g        *graph
}

// graph is an automaton whose edges are labelled by expressions (nil: an ε edge).
type graph struct {
	n, start int
	accept   []int
	edges    []graphEdge
}

type graphEdge struct {
	from, to int
	label    *expr
}

// grammar is a list of rules and the root rule's index.
type grammar struct {
	rules []rule
	root  int
}

// rule is a named rule; body is nil while a rule is declared but not yet defined.
type rule struct {
	name string
	body *expr
}

// declare adds a rule whose body comes later (define), for recursion, and returns its index.
func (g *grammar) declare(name string) int {
	g.rules = append(g.rules, rule{name: name})
	return len(g.rules) - 1
}

// define sets the body of a declared rule.
func (g *grammar) define(i int, body *expr) { g.rules[i].body = body }

// add adds a rule and returns its index.
func (g *grammar) add(name string, body *expr) int {
	i := g.declare(name)
	g.define(i, body)
	return i
}

// include adds h's rules to g, named under prefix, their references moved along, and returns the
// index of h's root among them.
func (g *grammar) include(h *grammar, prefix string) int {
	off := len(g.rules)
	memo := map[*expr]*expr{}
	for _, r := range h.rules {
		g.rules = append(g.rules, rule{name: prefix + ": " + r.name, body: shiftRefs(r.body, off, memo)})
	}
	return off + h.root
}

// shiftRefs returns e with its references to rule i made references to rule i+off (e itself when
// it has none); memo maps the exprs done, so that shared ones stay shared.
func shiftRefs(e *expr, off int, memo map[*expr]*expr) *expr {
	if e == nil || off == 0 {
		return e
	}
	if c, ok := memo[e]; ok {
		return c
	}
	out := e
	switch e.kind {
	case kRef:
		c := *e
		c.rule += off
		out = &c
	case kSeq, kAlt, kRepeat:
		c := *e
		c.subs = make([]*expr, len(e.subs))
		for i, s := range e.subs {
			c.subs[i] = shiftRefs(s, off, memo)
		}
		out = &c
	case kGraph:
		gr := *e.g
		gr.edges = make([]graphEdge, len(e.g.edges))
		for i, ed := range e.g.edges {
			ed.label = shiftRefs(ed.label, off, memo)
			gr.edges[i] = ed
		}
		c := *e
		c.g = &gr
		out = &c
	}
	memo[e] = out
	return out
}

var (
	emptyExpr   = &expr{kind: kEmpty}
	nothingExpr = &expr{kind: kNothing}
)

func litExpr(s string) *expr {
	if s == "" {
		return emptyExpr
	}
	return &expr{kind: kBytes, lit: []byte(s)}
}

func byteSetExpr(s byteSet) *expr { return &expr{kind: kByteSet, set: s} }

// runesExpr matches one character of rs, UTF-8 encoded, or written as in a JSON string when json
// is set (raw but for a quote, a backslash and control characters, which take their usual escape).
func runesExpr(rs runeSet, json bool) *expr {
	if len(rs) == 0 {
		return nothingExpr
	}
	return &expr{kind: kRunes, runes: rs, json: json}
}

func seqExpr(subs ...*expr) *expr {
	var out []*expr
	for _, s := range subs {
		switch s.kind {
		case kEmpty:
			continue
		case kNothing:
			return nothingExpr
		case kSeq:
			out = append(out, s.subs...)
			continue
		}
		out = append(out, s)
	}
	switch len(out) {
	case 0:
		return emptyExpr
	case 1:
		return out[0]
	}
	return &expr{kind: kSeq, subs: out}
}

func altExpr(subs ...*expr) *expr {
	var out []*expr
	for _, s := range subs {
		switch s.kind {
		case kNothing:
			continue
		case kAlt:
			out = append(out, s.subs...)
			continue
		}
		out = append(out, s)
	}
	switch len(out) {
	case 0:
		return nothingExpr
	case 1:
		return out[0]
	}
	return &expr{kind: kAlt, subs: out}
}

// repeatExpr matches sub between min and max times; max < 0 means no upper bound.
func repeatExpr(sub *expr, min, max int) *expr {
	switch {
	case max >= 0 && max < min:
		return nothingExpr
	case max == 0 || sub.kind == kEmpty:
		return emptyExpr
	case min == 1 && max == 1:
		return sub
	case sub.kind == kNothing:
		if min == 0 {
			return emptyExpr
		}
		return nothingExpr
	}
	return &expr{kind: kRepeat, subs: []*expr{sub}, min: min, max: max}
}

func optExpr(sub *expr) *expr  { return repeatExpr(sub, 0, 1) }
func starExpr(sub *expr) *expr { return repeatExpr(sub, 0, -1) }
func refExpr(rule int) *expr   { return &expr{kind: kRef, rule: rule} }
func graphExpr(g *graph) *expr { return &expr{kind: kGraph, g: g} }

// byteSet is a set of byte values.
type byteSet [4]uint64

func (s *byteSet) add(b byte)      { s[b>>6] |= 1 << (b & 63) }
func (s *byteSet) has(b byte) bool { return s[b>>6]&(1<<(b&63)) != 0 }
func (s *byteSet) addRange(lo, hi byte) {
	for c := int(lo); c <= int(hi); c++ {
		s.add(byte(c))
	}
}

// or adds t to s and reports whether s grew.
func (s *byteSet) or(t *byteSet) bool {
	grew := false
	for i := range s {
		if n := s[i] | t[i]; n != s[i] {
			s[i], grew = n, true
		}
	}
	return grew
}

// ranges returns s as sorted inclusive ranges.
func (s *byteSet) ranges() []byteRange {
	var out []byteRange
	for c := 0; c < 256; c++ {
		if !s.has(byte(c)) {
			continue
		}
		lo := c
		for c+1 < 256 && s.has(byte(c+1)) {
			c++
		}
		out = append(out, byteRange{byte(lo), byte(c)})
	}
	return out
}
