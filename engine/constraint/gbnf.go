package constraint

import (
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"
)

// GBNF is llama.cpp's grammar format. Supported:
//   - rules `name ::= alternatives`, names of letters, digits and '-', one rule per line (a rule
//     continues on the next lines inside parentheses, or after a trailing |), `root` the start;
//   - alternation |, grouping ( ), sequences;
//   - string literals "…" and character classes […] and [^…] with ranges, over characters
//     (encoded as UTF-8), with the escapes \n \r \t \\ \" \[ \] \- \xHH \uHHHH \UHHHHHHHH;
//   - . (any character);
//   - repetition * + ? {n} {n,} {n,m} (up to 1000), after blanks or another repetition;
//   - comments from # to the end of the line.
// Refused by name: token references (<…>, <[id]>) and left recursion (a rule that can reach
// itself before consuming a character), which llama.cpp's matcher refuses too.

type gbnfParser struct {
	src   string
	pos   int
	g     *grammar
	names map[string]int
	used  map[string]int // first use offset, for undefined-rule errors
}

func (p *gbnfParser) errorf(format string, args ...any) error {
	line := 1 + strings.Count(p.src[:min(p.pos, len(p.src))], "\n")
	return fmt.Errorf("%w: grammar line %d: %s", ErrSyntax, line, fmt.Sprintf(format, args...))
}

// parseGBNF parses a GBNF grammar.
func parseGBNF(src string) (*grammar, error) {
	if !utf8.ValidString(src) {
		return nil, fmt.Errorf("%w: grammar is not valid UTF-8", ErrSyntax)
	}
	p := &gbnfParser{src: src, g: &grammar{}, names: map[string]int{}, used: map[string]int{}}
	defined := map[string]bool{}
	p.space(true)
	for p.pos < len(p.src) {
		name := p.name()
		if name == "" {
			return nil, p.errorf("expected a rule name")
		}
		p.space(false)
		if !strings.HasPrefix(p.src[p.pos:], "::=") {
			return nil, p.errorf("expected ::= after %q", name)
		}
		p.pos += 3
		p.space(true)
		body, err := p.alternatives(false, 0)
		if err != nil {
			return nil, err
		}
		if defined[name] {
			return nil, p.errorf("rule %q defined twice", name)
		}
		defined[name] = true
		p.g.define(p.rule(name), body)
		p.space(true)
	}
	root, ok := p.names["root"]
	if !ok {
		return nil, fmt.Errorf("%w: grammar has no root rule", ErrSyntax)
	}
	for name := range p.names {
		if !defined[name] {
			p.pos = p.used[name]
			return nil, p.errorf("rule %q is used but not defined", name)
		}
	}
	p.g.root = root
	return p.g, nil
}

// rule returns the index of a rule by name, declaring it on first use.
func (p *gbnfParser) rule(name string) int {
	if i, ok := p.names[name]; ok {
		return i
	}
	i := p.g.declare(name)
	p.names[name] = i
	p.used[name] = p.pos
	return i
}

// space skips blanks and comments; newlines too when newlines is set.
func (p *gbnfParser) space(newlines bool) {
	for p.pos < len(p.src) {
		switch c := p.src[p.pos]; {
		case c == '#':
			for p.pos < len(p.src) && p.src[p.pos] != '\n' {
				p.pos++
			}
		case c == ' ' || c == '\t' || (newlines && (c == '\n' || c == '\r')):
			p.pos++
		case c == '\r' || c == '\n':
			return
		default:
			return
		}
	}
}

func isNameByte(c byte) bool {
	return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '-' || c == '_'
}

func (p *gbnfParser) name() string {
	start := p.pos
	for p.pos < len(p.src) && isNameByte(p.src[p.pos]) {
		p.pos++
	}
	return p.src[start:p.pos]
}

const maxGBNFDepth = 200

// alternatives reads sequences separated by |; nested says it is inside parentheses, where
// newlines are blanks.
func (p *gbnfParser) alternatives(nested bool, depth int) (*expr, error) {
	if depth > maxGBNFDepth {
		return nil, p.errorf("groups nested too deeply")
	}
	var alts []*expr
	for {
		seq, err := p.sequence(nested, depth)
		if err != nil {
			return nil, err
		}
		alts = append(alts, seq)
		p.space(nested)
		if p.pos < len(p.src) && p.src[p.pos] == '|' {
			p.pos++
			p.space(true)
			continue
		}
		return altExpr(alts...), nil
	}
}

func (p *gbnfParser) sequence(nested bool, depth int) (*expr, error) {
	var items []*expr
	for {
		p.space(nested)
		if p.pos >= len(p.src) {
			break
		}
		c := p.src[p.pos]
		if c == '|' || c == ')' || c == '\n' || c == '\r' {
			break
		}
		var item *expr
		switch {
		case c == '"':
			p.pos++
			var lit []byte
			for {
				if p.pos >= len(p.src) {
					return nil, p.errorf("unterminated string")
				}
				if p.src[p.pos] == '"' {
					p.pos++
					break
				}
				r, err := p.char()
				if err != nil {
					return nil, err
				}
				lit = utf8.AppendRune(lit, r)
			}
			item = litExpr(string(lit))
		case c == '[':
			set, err := p.class()
			if err != nil {
				return nil, err
			}
			item = runesExpr(set, false)
		case c == '.':
			p.pos++
			item = runesExpr(anyRune, false)
		case c == '(':
			p.pos++
			p.space(true)
			inner, err := p.alternatives(true, depth+1)
			if err != nil {
				return nil, err
			}
			p.space(true)
			if p.pos >= len(p.src) || p.src[p.pos] != ')' {
				return nil, p.errorf("missing )")
			}
			p.pos++
			item = inner
		case c == '<':
			return nil, fmt.Errorf("%w: grammar token references <…>", ErrUnsupported)
		case isNameByte(c):
			start := p.pos
			name := p.name()
			// A name followed by ::= starts the next rule: this sequence has ended (a rule's
			// body may end without a newline before it only at the end of a line, so this is a
			// missing newline).
			save := p.pos
			p.space(false)
			if strings.HasPrefix(p.src[p.pos:], "::=") {
				p.pos = start
				return nil, p.errorf("rule %q starts before the previous rule's line ends", name)
			}
			p.pos = save
			item = refExpr(p.rule(name))
		default:
			return nil, p.errorf("unexpected %q", c)
		}
		item, err := p.repetition(item, nested)
		if err != nil {
			return nil, err
		}
		items = append(items, item)
	}
	return seqExpr(items...), nil
}

// repetition applies the operators after an item: * + ? {n} {n,} {n,m}, each of which may follow
// blanks (newlines too when nested), as in llama.cpp, and may follow another.
func (p *gbnfParser) repetition(item *expr, nested bool) (*expr, error) {
	for {
		save := p.pos
		p.space(nested)
		if p.pos >= len(p.src) {
			return item, nil
		}
		switch p.src[p.pos] {
		case '*':
			p.pos++
			item = starExpr(item)
		case '+':
			p.pos++
			item = repeatExpr(item, 1, -1)
		case '?':
			p.pos++
			item = optExpr(item)
		case '{':
			lo, hi, err := p.braces(nested)
			if err != nil {
				return nil, err
			}
			item = repeatExpr(item, lo, hi)
		default:
			p.pos = save
			return item, nil
		}
	}
}

// braces reads {n}, {n,} or {n,m}, with blanks between its parts; hi is -1 for {n,}.
func (p *gbnfParser) braces(nested bool) (lo, hi int, err error) {
	p.pos++ // {
	p.space(nested)
	if lo, err = p.count(); err != nil {
		return 0, 0, err
	}
	p.space(nested)
	hi = lo
	if p.pos < len(p.src) && p.src[p.pos] == ',' {
		p.pos++
		p.space(nested)
		hi = -1
		if p.pos < len(p.src) && p.src[p.pos] >= '0' && p.src[p.pos] <= '9' {
			if hi, err = p.count(); err != nil {
				return 0, 0, err
			}
			p.space(nested)
		}
	}
	if p.pos >= len(p.src) || p.src[p.pos] != '}' {
		return 0, 0, p.errorf("expected , or } in a repetition")
	}
	p.pos++
	if hi >= 0 && hi < lo {
		return 0, 0, p.errorf("repetition {%d,%d} out of order", lo, hi)
	}
	return lo, hi, nil
}

// count reads a repetition count, at most maxRepeat.
func (p *gbnfParser) count() (int, error) {
	start := p.pos
	for p.pos < len(p.src) && p.src[p.pos] >= '0' && p.src[p.pos] <= '9' {
		p.pos++
	}
	if p.pos == start {
		return 0, p.errorf("expected a repetition count")
	}
	n, err := strconv.Atoi(p.src[start:p.pos])
	if err != nil || n > maxRepeat {
		return 0, p.errorf("repetition count above %d", maxRepeat)
	}
	return n, nil
}

// char reads one character of a string or class, with its escape.
func (p *gbnfParser) char() (rune, error) {
	r, n := utf8.DecodeRuneInString(p.src[p.pos:])
	p.pos += n
	if r != '\\' {
		return r, nil
	}
	if p.pos >= len(p.src) {
		return 0, p.errorf("trailing backslash")
	}
	e := p.src[p.pos]
	p.pos++
	hex := func(n int) (rune, error) {
		if p.pos+n > len(p.src) {
			return 0, p.errorf(`\%c needs %d hex digits`, e, n)
		}
		v, err := strconv.ParseUint(p.src[p.pos:p.pos+n], 16, 32)
		if err != nil || v > utf8.MaxRune {
			return 0, p.errorf(`bad \%c escape`, e)
		}
		p.pos += n
		return rune(v), nil
	}
	switch e {
	case 'n':
		return '\n', nil
	case 'r':
		return '\r', nil
	case 't':
		return '\t', nil
	case '\\', '"', '[', ']', '-', '/', '\'':
		return rune(e), nil
	case 'x':
		return hex(2)
	case 'u':
		return hex(4)
	case 'U':
		return hex(8)
	}
	return 0, p.errorf(`unknown escape \%c`, e)
}

// class reads [...] or [^...].
func (p *gbnfParser) class() (runeSet, error) {
	p.pos++ // [
	negate := false
	if p.pos < len(p.src) && p.src[p.pos] == '^' {
		negate = true
		p.pos++
	}
	var set runeSet
	for {
		if p.pos >= len(p.src) {
			return nil, p.errorf("missing ]")
		}
		if p.src[p.pos] == ']' {
			p.pos++
			break
		}
		lo, err := p.char()
		if err != nil {
			return nil, err
		}
		hi := lo
		if p.pos+1 < len(p.src) && p.src[p.pos] == '-' && p.src[p.pos+1] != ']' {
			p.pos++
			if hi, err = p.char(); err != nil {
				return nil, err
			}
			if hi < lo {
				return nil, p.errorf("class range out of order")
			}
		}
		set = set.union(newRuneSet(runeRange{lo, hi}))
	}
	if negate {
		set = set.negate()
	}
	return set, nil
}
