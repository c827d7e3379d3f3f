package constraint

import (
	"fmt"
	"strings"
)

// Number ranges (minimum, maximum and their exclusive forms) as a finite automaton over the digits
// of a JSON number written without an exponent: the automaton compares the number with each bound
// digit by digit, as the digits come, so the grammar admits exactly the numbers in the range
// whatever their length. A ranged number has no exponent form (1e2 is written 100).

// decimal is an exact decimal number: sign, integer digits without leading zeros ("0" for
// zero) and fraction digits without trailing zeros.
type decimal struct {
	neg       bool
	int, frac string
}

// parseDecimal reads a JSON number literal exactly (exponents shift the point).
func parseDecimal(s string) (decimal, error) {
	var d decimal
	orig := s
	if strings.HasPrefix(s, "-") {
		d.neg, s = true, s[1:]
	}
	mant, exp := s, 0
	if i := strings.IndexAny(s, "eE"); i >= 0 {
		mant = s[:i]
		var e int
		if _, err := fmt.Sscan(s[i+1:], &e); err != nil || e > 4000 || e < -4000 {
			return d, fmt.Errorf("%w: number %q out of range", ErrUnsupported, orig)
		}
		exp = e
	}
	ip, fp, _ := strings.Cut(mant, ".")
	digits := ip + fp
	if digits == "" || strings.Trim(digits, "0123456789") != "" {
		return d, fmt.Errorf("%w: bad number %q", ErrSyntax, orig)
	}
	point := len(ip) + exp // the decimal point sits after this many digits
	if point < 0 {
		digits = strings.Repeat("0", -point) + digits
		point = 0
	}
	if point > len(digits) {
		digits += strings.Repeat("0", point-len(digits))
	}
	d.int = strings.TrimLeft(digits[:point], "0")
	if d.int == "" {
		d.int = "0"
	}
	d.frac = strings.TrimRight(digits[point:], "0")
	if d.int == "0" && d.frac == "" {
		d.neg = false
	}
	return d, nil
}

// String writes d canonically (no exponent).
func (d decimal) String() string {
	s := d.int
	if d.frac != "" {
		s += "." + d.frac
	}
	if d.neg {
		s = "-" + s
	}
	return s
}

// bound is one end of a range.
type bound struct {
	set       bool
	val       decimal
	exclusive bool
}

// numState is the automaton's state: where in the number's syntax it is, and for each bound, how
// the magnitude read so far compares with the bound's.
type numState struct {
	phase   uint8 // see below
	neg     bool
	nonzero bool
	ndig    int16    // integer digits read (capped per bound below)
	cmp     [2]int8  // per bound: -1, 0, 1 comparing digits read with the bound's, position by position
	over    [2]bool  // per bound: more integer digits than the bound has
	fracPos [2]int16 // unused when phase < fraction
}

const (
	phStart uint8 = iota
	phSign
	phZero  // "0" or "-0"
	phInt   // integer digits
	phPoint // after '.'
	phFrac  // fraction digits
)

// rangeExpr returns the expression of JSON numbers (integers only if integer) within lo and hi.
func rangeExpr(lo, hi bound, integer bool) (*expr, error) {
	bounds := [2]bound{lo, hi}
	capDigits := 1 // integer digits beyond every bound's count compare alike
	for _, b := range bounds {
		if b.set {
			capDigits = max(capDigits, len(b.val.int)+1)
		}
	}
	step := func(s numState, c byte) (numState, bool) {
		isDigit := c >= '0' && c <= '9'
		switch s.phase {
		case phStart:
			if c == '-' {
				s.phase, s.neg = phSign, true
				return s, true
			}
			fallthrough
		case phSign:
			if !isDigit {
				return s, false
			}
			if c == '0' {
				s.phase = phZero
			} else {
				s.phase = phInt
			}
		case phZero:
			if c != '.' || integer {
				return s, false
			}
			s.phase = phPoint
			return s, true
		case phInt:
			if c == '.' && !integer {
				s.phase = phPoint
				return s, true
			}
			if !isDigit {
				return s, false
			}
		case phPoint, phFrac:
			if !isDigit {
				return s, false
			}
			s.phase = phFrac
			if c != '0' {
				s.nonzero = true
			}
			for k, b := range bounds {
				if !b.set || s.cmp[k] != 0 || s.over[k] {
					continue
				}
				bd := byte('0')
				if int(s.fracPos[k]) < len(b.val.frac) {
					bd = b.val.frac[s.fracPos[k]]
					s.fracPos[k]++
				}
				s.cmp[k] = int8(cmpByte(c, bd))
			}
			return s, true
		}
		// An integer digit (phZero and phInt entered above, or more of phInt).
		if c != '0' {
			s.nonzero = true
		}
		pos := int(s.ndig)
		s.ndig = int16(min(pos+1, capDigits))
		for k, b := range bounds {
			if !b.set || s.over[k] {
				continue
			}
			bi := b.val.int
			if pos >= len(bi) {
				s.over[k] = true
				continue
			}
			if s.cmp[k] == 0 {
				s.cmp[k] = int8(cmpByte(c, bi[pos]))
			}
		}
		return s, true
	}
	// rel compares the number read (at an accepting state) with bound k.
	rel := func(s numState, k int) int {
		b := bounds[k].val
		var mag int
		switch {
		case s.over[k]:
			mag = 1
		case int(s.ndig) < len(b.int):
			mag = -1
		default:
			mag = int(s.cmp[k])
			if mag == 0 && s.phase != phFrac {
				// Integer digits equal; the bound's fraction makes it larger unless it has none.
				if b.frac != "" {
					mag = -1
				}
			} else if mag == 0 && s.phase == phFrac && int(s.fracPos[k]) < len(b.frac) {
				mag = -1 // the bound has more (nonzero-ending) fraction digits
			}
		}
		zero := !s.nonzero
		bzero := b.int == "0" && b.frac == ""
		switch {
		case zero && bzero:
			return 0
		case zero:
			if b.neg {
				return 1
			}
			return -1
		case s.neg && !b.neg:
			return -1
		case !s.neg && b.neg:
			return 1
		case s.neg:
			return -mag
		}
		return mag
	}
	accepting := func(s numState) bool {
		if s.phase != phZero && s.phase != phInt && s.phase != phFrac {
			return false
		}
		if lo.set {
			r := rel(s, 0)
			if r < 0 || (r == 0 && lo.exclusive) {
				return false
			}
		}
		if hi.set {
			r := rel(s, 1)
			if r > 0 || (r == 0 && hi.exclusive) {
				return false
			}
		}
		return true
	}
	ids := map[numState]int{}
	var states []numState
	add := func(s numState) int {
		if id, ok := ids[s]; ok {
			return id
		}
		ids[s] = len(states)
		states = append(states, s)
		return len(states) - 1
	}
	g := &graph{start: add(numState{})}
	for i := 0; i < len(states); i++ {
		if len(states) > maxDFAStates/4 {
			return nil, fmt.Errorf("%w: number range too large", ErrTooLarge)
		}
		s := states[i]
		if accepting(s) {
			g.accept = append(g.accept, i)
		}
		for _, c := range []byte("-.0123456789") {
			t, ok := step(s, c)
			if !ok {
				continue
			}
			var set byteSet
			set.add(c)
			g.edges = append(g.edges, graphEdge{from: i, to: add(t), label: byteSetExpr(set)})
		}
	}
	g.n = len(states)
	if len(g.accept) == 0 {
		return nothingExpr, nil
	}
	return graphExpr(g), nil
}

func cmpByte(a, b byte) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// maxMultipleDigits bounds multipleOf's digits (its value with the point removed): the automaton
// tracks the remainder modulo that number.
const maxMultipleDigits = 10000

// multipleExpr returns the expression of JSON numbers without an exponent (integers only if
// integer) that are multiples of k: k = p/10^q, so v is a multiple when v·10^q is an integer
// multiple of p, a remainder the automaton keeps digit by digit.
func multipleExpr(k decimal, integer bool) (*expr, error) {
	digits := strings.TrimLeft(k.int+k.frac, "0")
	if k.neg || digits == "" {
		return nil, fmt.Errorf("%w: multipleOf must be greater than 0", ErrSyntax)
	}
	if len(digits) > 5 {
		return nil, fmt.Errorf("%w: multipleOf %s has too many digits", ErrUnsupported, k)
	}
	var p int
	fmt.Sscan(digits, &p)
	if p > maxMultipleDigits {
		return nil, fmt.Errorf("%w: multipleOf %s has too many digits", ErrUnsupported, k)
	}
	q := len(k.frac)
	type st struct {
		phase uint8
		r     int32 // v·10^(digits of fraction read) mod p
		f     int16 // fraction digits read, capped at q+1
	}
	step := func(s st, c byte) (st, bool) {
		d := int32(c - '0')
		isDigit := c >= '0' && c <= '9'
		switch s.phase {
		case phStart:
			if c == '-' {
				s.phase = phSign
				return s, true
			}
			fallthrough
		case phSign:
			if !isDigit {
				return s, false
			}
			s.phase = phInt
			if c == '0' {
				s.phase = phZero
			}
			s.r = d % int32(p)
		case phZero, phInt:
			if c == '.' && !integer {
				s.phase = phPoint
				return s, true
			}
			if !isDigit || s.phase == phZero {
				return s, false
			}
			s.r = (s.r*10 + d) % int32(p)
		case phPoint, phFrac:
			if !isDigit {
				return s, false
			}
			s.phase = phFrac
			if int(s.f) >= q {
				if c != '0' {
					return s, false // below k's last digit: not a multiple
				}
				s.f = int16(q + 1)
				return s, true
			}
			s.r = (s.r*10 + d) % int32(p)
			s.f++
		}
		return s, true
	}
	accepting := func(s st) bool {
		if s.phase != phZero && s.phase != phInt && s.phase != phFrac {
			return false
		}
		r := int64(s.r)
		for f := int(s.f); f < q; f++ {
			r = r * 10 % int64(p)
		}
		return r == 0
	}
	ids := map[st]int{}
	var states []st
	add := func(s st) int {
		if id, ok := ids[s]; ok {
			return id
		}
		ids[s] = len(states)
		states = append(states, s)
		return len(states) - 1
	}
	g := &graph{start: add(st{})}
	for i := 0; i < len(states); i++ {
		if len(states) > maxDFAStates {
			return nil, fmt.Errorf("%w: multipleOf %s needs too many states", ErrTooLarge, k)
		}
		s := states[i]
		if accepting(s) {
			g.accept = append(g.accept, i)
		}
		for _, c := range []byte("-.0123456789") {
			t, ok := step(s, c)
			if !ok {
				continue
			}
			var set byteSet
			set.add(c)
			g.edges = append(g.edges, graphEdge{from: i, to: add(t), label: byteSetExpr(set)})
		}
	}
	g.n = len(states)
	return graphExpr(g), nil
}
