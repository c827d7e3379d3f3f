package constraint

import "fmt"

// Regular-language operations the JSON Schema compiler needs beyond a grammar's union and
// concatenation: the intersection of a string's constraints (pattern, format, length) and the
// complement of a set of property names. They work on byte DFAs, which are exact here because a
// JSON string writes each character one way only (raw, or its one escape).

// byteDFA is a DFA over bytes; -1 is the dead state.
type byteDFA struct {
	next   [][256]int32
	accept []bool
	start  int32
}

// exprDFA determinizes e, which must not reference rules.
func exprDFA(e *expr) (*byteDFA, error) {
	a, err := lower(&grammar{rules: []rule{{name: "regular", body: e}}})
	if err != nil {
		return nil, err
	}
	d := &byteDFA{start: a.root, next: make([][256]int32, a.numStates()), accept: make([]bool, a.numStates())}
	for s := range a.numStates() {
		if len(a.calls[s]) > 0 {
			return nil, fmt.Errorf("constraint: internal error: regular expression with a rule call")
		}
		copy(d.next[s][:], a.next[s*256:s*256+256])
		d.accept[s] = a.flags[s]&flagAccept != 0
	}
	return d, nil
}

// intersect returns a DFA of the strings both d and o accept.
func (d *byteDFA) intersect(o *byteDFA) (*byteDFA, error) {
	type pair struct{ a, b int32 }
	ids := map[pair]int32{}
	out := &byteDFA{}
	var work []pair
	add := func(p pair) (int32, error) {
		if id, ok := ids[p]; ok {
			return id, nil
		}
		if len(out.accept) >= maxDFAStates {
			return 0, fmt.Errorf("%w: the intersection of string constraints needs more than %d states", ErrTooLarge, maxDFAStates)
		}
		id := int32(len(out.accept))
		ids[p] = id
		var row [256]int32
		for i := range row {
			row[i] = -1
		}
		out.next = append(out.next, row)
		out.accept = append(out.accept, d.accept[p.a] && o.accept[p.b])
		work = append(work, p)
		return id, nil
	}
	var err error
	if out.start, err = add(pair{d.start, o.start}); err != nil {
		return nil, err
	}
	for len(work) > 0 {
		p := work[0]
		work = work[1:]
		from := ids[p]
		for c := range 256 {
			ta, tb := d.next[p.a][c], o.next[p.b][c]
			if ta < 0 || tb < 0 {
				continue
			}
			to, err := add(pair{ta, tb})
			if err != nil {
				return nil, err
			}
			out.next[from][c] = to
		}
	}
	return out, nil
}

// complement returns a DFA of the byte strings d rejects.
func (d *byteDFA) complement() *byteDFA {
	n := len(d.accept)
	out := &byteDFA{start: d.start, next: make([][256]int32, n+1), accept: make([]bool, n+1)}
	sink := int32(n)
	for s := range n {
		out.accept[s] = !d.accept[s]
		for c := range 256 {
			if t := d.next[s][c]; t >= 0 {
				out.next[s][c] = t
			} else {
				out.next[s][c] = sink
			}
		}
	}
	out.accept[sink] = true
	for c := range 256 {
		out.next[sink][c] = sink
	}
	return out
}

// expr returns d as an expression (a graph whose edges are byte sets).
func (d *byteDFA) expr() *expr {
	g := &graph{n: len(d.accept), start: int(d.start)}
	for s, acc := range d.accept {
		if acc {
			g.accept = append(g.accept, s)
		}
		var sets map[int32]*byteSet
		var order []int32
		for c := range 256 {
			t := d.next[s][c]
			if t < 0 {
				continue
			}
			if sets == nil {
				sets = map[int32]*byteSet{}
			}
			if sets[t] == nil {
				sets[t] = &byteSet{}
				order = append(order, t)
			}
			sets[t].add(byte(c))
		}
		for _, t := range order {
			g.edges = append(g.edges, graphEdge{from: s, to: int(t), label: byteSetExpr(*sets[t])})
		}
	}
	if len(g.accept) == 0 {
		return nothingExpr
	}
	return graphExpr(g)
}

// intersectExprs returns an expression of the strings every one of es matches.
func intersectExprs(es ...*expr) (*expr, error) {
	if len(es) == 1 {
		return es[0], nil
	}
	d, err := exprDFA(es[0])
	if err != nil {
		return nil, err
	}
	for _, e := range es[1:] {
		o, err := exprDFA(e)
		if err != nil {
			return nil, err
		}
		if d, err = d.intersect(o); err != nil {
			return nil, err
		}
	}
	return d.expr(), nil
}
