package constraint

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Regular expressions: the subset of ECMAScript (JavaScript) syntax shared by JSON Schema's
// pattern and vLLM's guided_regex, over characters:
//   - literals and escapes: \n \r \t \f \v \0, \xHH, \uHHHH, \u{H…}, \/ and any other escaped
//     punctuation;
//   - classes: . (any character but a line terminator), [abc], [^a-z], and \d \D \w \W \s \S,
//     in and out of brackets;
//   - groups: (…), (?:…), (?<name>…); alternation |;
//   - quantifiers: * + ? {n} {n,} {n,m}, each optionally lazy (a trailing ?, which changes which
//     match a search finds but not which strings match);
//   - anchors: ^ at the start and $ at the end of the expression or of a top-level alternative.
// Refused by name: lookahead and lookbehind, backreferences, word boundaries, anchors elsewhere,
// inline flags, control escapes (\cX) and Unicode property escapes (\p{…}).
//
// A regex constraint matches the whole output (as if anchored at both ends). A JSON Schema pattern
// is a search: an unanchored end may have any characters beyond the match.

// regexNode is a parsed regular expression.
type regexNode struct {
	op       regexOp
	set      runeSet // opChar
	subs     []*regexNode
	min, max int // opRepeat
}

type regexOp uint8

const (
	opChar regexOp = iota
	opConcat
	opAlt
	opRepeat
	opBegin // ^
	opEnd   // $
)

// maxRepeat bounds a {n,m} count in a regex or grammar, as RE2 does.
const maxRepeat = 1000

type regexParser struct {
	src string
	pos int
}

func (p *regexParser) errorf(format string, args ...any) error {
	return fmt.Errorf("%w: regex %q at offset %d: %s", ErrSyntax, p.src, p.pos, fmt.Sprintf(format, args...))
}

func (p *regexParser) unsupported(what string) error {
	return fmt.Errorf("%w: regex %q: %s", ErrUnsupported, p.src, what)
}

func (p *regexParser) eof() bool { return p.pos >= len(p.src) }

func (p *regexParser) peek() rune {
	r, _ := utf8.DecodeRuneInString(p.src[p.pos:])
	return r
}

func (p *regexParser) next() rune {
	r, n := utf8.DecodeRuneInString(p.src[p.pos:])
	p.pos += n
	return r
}

// parseRegex parses src.
func parseRegex(src string) (*regexNode, error) {
	if !utf8.ValidString(src) {
		return nil, fmt.Errorf("%w: regex is not valid UTF-8", ErrSyntax)
	}
	p := &regexParser{src: src}
	n, err := p.alt(0)
	if err != nil {
		return nil, err
	}
	if !p.eof() {
		return nil, p.errorf("unmatched )")
	}
	return n, nil
}

const maxRegexDepth = 200

func (p *regexParser) alt(depth int) (*regexNode, error) {
	if depth > maxRegexDepth {
		return nil, p.errorf("groups nested too deeply")
	}
	var alts []*regexNode
	for {
		c, err := p.concat(depth)
		if err != nil {
			return nil, err
		}
		alts = append(alts, c)
		if p.eof() || p.peek() != '|' {
			break
		}
		p.next()
	}
	if len(alts) == 1 {
		return alts[0], nil
	}
	return &regexNode{op: opAlt, subs: alts}, nil
}

func (p *regexParser) concat(depth int) (*regexNode, error) {
	n := &regexNode{op: opConcat}
	for !p.eof() && p.peek() != '|' && p.peek() != ')' {
		atom, err := p.atom(depth)
		if err != nil {
			return nil, err
		}
		if atom, err = p.quantifier(atom); err != nil {
			return nil, err
		}
		n.subs = append(n.subs, atom)
	}
	return n, nil
}

func (p *regexParser) quantifier(atom *regexNode) (*regexNode, error) {
	if p.eof() {
		return atom, nil
	}
	min, max := -1, -1
	switch p.peek() {
	case '*':
		min, max = 0, -1
		p.next()
	case '+':
		min, max = 1, -1
		p.next()
	case '?':
		min, max = 0, 1
		p.next()
	case '{':
		lo, hi, n, ok := parseBraces(p.src[p.pos:])
		if !ok {
			return atom, nil // a literal {, as ECMAScript reads it outside unicode mode
		}
		if lo > maxRepeat || hi > maxRepeat {
			return nil, p.errorf("repetition count above %d", maxRepeat)
		}
		if hi >= 0 && hi < lo {
			return nil, p.errorf("repetition {%d,%d} out of order", lo, hi)
		}
		p.pos += n
		min, max = lo, hi
	default:
		return atom, nil
	}
	if atom.op == opBegin || atom.op == opEnd {
		return nil, p.errorf("quantifier after an anchor")
	}
	if !p.eof() && p.peek() == '?' {
		p.next() // lazy: the same strings match
	}
	if !p.eof() && strings.ContainsRune("*+?", p.peek()) {
		return nil, p.errorf("quantifier after a quantifier")
	}
	return &regexNode{op: opRepeat, subs: []*regexNode{atom}, min: min, max: max}, nil
}

// parseBraces reads {n}, {n,} or {n,m} at the start of s; hi is -1 for {n,}.
func parseBraces(s string) (lo, hi, n int, ok bool) {
	end := strings.IndexByte(s, '}')
	if end < 0 {
		return 0, 0, 0, false
	}
	body := s[1:end]
	a, b, comma := strings.Cut(body, ",")
	digits := func(x string) (int, bool) {
		if x == "" || len(x) > 9 || strings.Trim(x, "0123456789") != "" {
			return 0, false
		}
		v, _ := strconv.Atoi(x)
		return v, true
	}
	lo, ok = digits(a)
	if !ok {
		return 0, 0, 0, false
	}
	hi = lo
	if comma {
		if b == "" {
			hi = -1
		} else if hi, ok = digits(b); !ok {
			return 0, 0, 0, false
		}
	}
	return lo, hi, end + 1, true
}

func (p *regexParser) atom(depth int) (*regexNode, error) {
	switch r := p.next(); r {
	case '(':
		if strings.HasPrefix(p.src[p.pos:], "?") {
			rest := p.src[p.pos:]
			switch {
			case strings.HasPrefix(rest, "?:"):
				p.pos += 2
			case strings.HasPrefix(rest, "?="), strings.HasPrefix(rest, "?!"):
				return nil, p.unsupported("lookahead (?= and (?!")
			case strings.HasPrefix(rest, "?<="), strings.HasPrefix(rest, "?<!"):
				return nil, p.unsupported("lookbehind (?<= and (?<!")
			case strings.HasPrefix(rest, "?<"):
				end := strings.IndexByte(rest, '>')
				if end < 0 {
					return nil, p.errorf("unterminated group name")
				}
				p.pos += end + 1
			default:
				return nil, p.unsupported("inline flags and other (? groups")
			}
		}
		n, err := p.alt(depth + 1)
		if err != nil {
			return nil, err
		}
		if p.eof() || p.next() != ')' {
			return nil, p.errorf("missing )")
		}
		return n, nil
	case ')':
		return nil, p.errorf("unmatched )")
	case '[':
		return p.class()
	case '.':
		return &regexNode{op: opChar, set: anyRune.minus(lineTerminators)}, nil
	case '^':
		return &regexNode{op: opBegin}, nil
	case '$':
		return &regexNode{op: opEnd}, nil
	case '*', '+', '?':
		return nil, p.errorf("nothing to repeat")
	case '\\':
		set, err := p.escape(false)
		if err != nil {
			return nil, err
		}
		return &regexNode{op: opChar, set: set}, nil
	default:
		return &regexNode{op: opChar, set: single(r)}, nil
	}
}

var (
	lineTerminators = newRuneSet(runeRange{'\n', '\n'}, runeRange{'\r', '\r'}, runeRange{0x2028, 0x2029})
	digitSet        = newRuneSet(runeRange{'0', '9'})
	wordSet         = newRuneSet(runeRange{'0', '9'}, runeRange{'A', 'Z'}, runeRange{'_', '_'}, runeRange{'a', 'z'})
	// spaceSet is ECMAScript's \s: WhiteSpace and LineTerminator.
	spaceSet = newRuneSet(runeRange{'\t', '\r'}, runeRange{' ', ' '}, runeRange{0xA0, 0xA0}, runeRange{0x1680, 0x1680},
		runeRange{0x2000, 0x200A}, runeRange{0x2028, 0x2029}, runeRange{0x202F, 0x202F}, runeRange{0x205F, 0x205F},
		runeRange{0x3000, 0x3000}, runeRange{0xFEFF, 0xFEFF})
)

// escape reads the escape after a backslash; inClass allows \b (a backspace in a class).
func (p *regexParser) escape(inClass bool) (runeSet, error) {
	if p.eof() {
		return nil, p.errorf("trailing backslash")
	}
	r := p.next()
	switch r {
	case 'd':
		return digitSet, nil
	case 'D':
		return digitSet.negate(), nil
	case 'w':
		return wordSet, nil
	case 'W':
		return wordSet.negate(), nil
	case 's':
		return spaceSet, nil
	case 'S':
		return spaceSet.negate(), nil
	case 'n':
		return single('\n'), nil
	case 'r':
		return single('\r'), nil
	case 't':
		return single('\t'), nil
	case 'f':
		return single('\f'), nil
	case 'v':
		return single('\v'), nil
	case '0':
		if !p.eof() && p.peek() >= '0' && p.peek() <= '9' {
			return nil, p.unsupported("octal escapes")
		}
		return single(0), nil
	case 'b':
		if inClass {
			return single('\b'), nil
		}
		return nil, p.unsupported(`word boundaries \b and \B`)
	case 'B':
		return nil, p.unsupported(`word boundaries \b and \B`)
	case 'x':
		v, ok := p.hex(2)
		if !ok {
			return nil, p.errorf(`\x needs two hex digits`)
		}
		return single(v), nil
	case 'u':
		if !p.eof() && p.peek() == '{' {
			end := strings.IndexByte(p.src[p.pos:], '}')
			if end < 2 || end > 7 {
				return nil, p.errorf(`bad \u{…} escape`)
			}
			v, err := strconv.ParseUint(p.src[p.pos+1:p.pos+end], 16, 32)
			if err != nil || v > utf8.MaxRune {
				return nil, p.errorf(`bad \u{…} escape`)
			}
			p.pos += end + 1
			return single(rune(v)), nil
		}
		v, ok := p.hex(4)
		if !ok {
			return nil, p.errorf(`\u needs four hex digits`)
		}
		if v >= 0xD800 && v <= 0xDFFF {
			return nil, p.unsupported(`surrogate escapes \uD800-\uDFFF`)
		}
		return single(v), nil
	case 'c':
		return nil, p.unsupported(`control escapes \cX`)
	case 'p', 'P':
		return nil, p.unsupported(`Unicode property escapes \p{…}`)
	case 'k':
		return nil, p.unsupported(`backreferences \k<name>`)
	}
	if r >= '1' && r <= '9' {
		return nil, p.unsupported(`backreferences \1-\9`)
	}
	if r < utf8.RuneSelf && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z') {
		return nil, p.errorf(`unknown escape \%c`, r)
	}
	return single(r), nil
}

func (p *regexParser) hex(n int) (rune, bool) {
	if p.pos+n > len(p.src) {
		return 0, false
	}
	v, err := strconv.ParseUint(p.src[p.pos:p.pos+n], 16, 32)
	if err != nil {
		return 0, false
	}
	p.pos += n
	return rune(v), true
}

// class reads a bracket class after its [.
func (p *regexParser) class() (*regexNode, error) {
	negate := false
	if !p.eof() && p.peek() == '^' {
		negate = true
		p.next()
	}
	var set runeSet
	for {
		if p.eof() {
			return nil, p.errorf("missing ]")
		}
		if p.peek() == ']' {
			p.next()
			break
		}
		lo, loSet, err := p.classAtom()
		if err != nil {
			return nil, err
		}
		if !p.eof() && p.peek() == '-' && !strings.HasPrefix(p.src[p.pos:], "-]") && loSet == nil {
			p.next()
			hi, hiSet, err := p.classAtom()
			if err != nil {
				return nil, err
			}
			if hiSet != nil {
				return nil, p.errorf("class range ends in a class escape")
			}
			if hi < lo {
				return nil, p.errorf("class range %q-%q out of order", lo, hi)
			}
			set = set.union(newRuneSet(runeRange{lo, hi}))
			continue
		}
		if loSet != nil {
			set = set.union(loSet)
		} else {
			set = set.union(single(lo))
		}
	}
	if negate {
		set = set.negate()
	}
	return &regexNode{op: opChar, set: set}, nil
}

// classAtom reads one character of a class, or a class escape (returned as a set).
func (p *regexParser) classAtom() (rune, runeSet, error) {
	r := p.next()
	if r != '\\' {
		return r, nil, nil
	}
	set, err := p.escape(true)
	if err != nil {
		return 0, nil, err
	}
	if len(set) == 1 && set[0].lo == set[0].hi {
		return set[0].lo, nil, nil
	}
	return 0, set, nil
}

// regexExpr turns a parsed regex into an expression over characters (json: written as in a JSON
// string). search says the regex is a search (JSON Schema's pattern): an unanchored start or end
// may have any characters around the match. Anchors are allowed only at the edges of the
// expression or of its top-level alternatives.
func regexExpr(n *regexNode, json, search bool) (*expr, error) {
	branches := []*regexNode{n}
	if n.op == opAlt {
		branches = n.subs
	}
	anyText := starExpr(runesExpr(anyRune, json))
	var alts []*expr
	for _, b := range branches {
		subs := []*regexNode{b}
		if b.op == opConcat {
			subs = b.subs
		}
		begin, end := false, false
		for len(subs) > 0 && subs[0].op == opBegin {
			begin, subs = true, subs[1:]
		}
		for len(subs) > 0 && subs[len(subs)-1].op == opEnd {
			end, subs = true, subs[:len(subs)-1]
		}
		body, err := regexBody(&regexNode{op: opConcat, subs: subs}, json)
		if err != nil {
			return nil, err
		}
		if search && !begin {
			body = seqExpr(anyText, body)
		}
		if search && !end {
			body = seqExpr(body, anyText)
		}
		alts = append(alts, body)
	}
	return altExpr(alts...), nil
}

func regexBody(n *regexNode, json bool) (*expr, error) {
	switch n.op {
	case opChar:
		return runesExpr(n.set, json), nil
	case opBegin, opEnd:
		return nil, fmt.Errorf("%w: regex anchors ^ and $ other than at the start and end", ErrUnsupported)
	case opRepeat:
		sub, err := regexBody(n.subs[0], json)
		if err != nil {
			return nil, err
		}
		return repeatExpr(sub, n.min, n.max), nil
	}
	subs := make([]*expr, len(n.subs))
	for i, s := range n.subs {
		var err error
		if subs[i], err = regexBody(s, json); err != nil {
			return nil, err
		}
	}
	if n.op == opAlt {
		return altExpr(subs...), nil
	}
	return seqExpr(subs...), nil
}

// regexGrammar is the Regex kind: the whole output matches src.
func regexGrammar(src string) (*grammar, error) {
	n, err := parseRegex(src)
	if err != nil {
		return nil, err
	}
	e, err := regexExpr(n, false, false)
	if err != nil {
		return nil, fmt.Errorf("regex %q: %w", src, err)
	}
	g := &grammar{}
	g.root = g.add("root", e)
	return g, nil
}
