package chattemplate

import (
	"fmt"
	"math/big"
	"strconv"
)

// node is a statement of the template body.
type node interface{}

// expr is an expression.
type expr interface{}

type (
	textNode   struct{ text string }
	outputNode struct{ e expr }
	ifNode     struct {
		conds  []expr
		bodies [][]node // one per cond, then the else body (possibly nil)
	}
	forNode struct {
		targets  []string // loop variables (several for tuple unpacking)
		iter     expr
		filter   expr // optional "if" condition
		body     []node
		elseBody []node
		pos      int
	}
	setNode struct {
		targets []expr // names, or attribute expressions (ns.x); several for tuple unpacking
		value   expr   // nil for a block set
		body    []node // block set
		filters []*filterExpr
	}
	macroNode struct {
		name string
		sig  signature
		body []node
	}
	callBlockNode struct {
		call *callExpr
		sig  signature // caller's: {% call(a, b=1) m() %}
		body []node
	}
	filterBlockNode struct {
		filters []*filterExpr
		body    []node
	}
	breakNode    struct{}
	continueNode struct{}
)

// signature is the parameter list of a macro, or of a call block's caller, and which of Jinja2's
// special names its body reads: caller, varargs (a tuple of the positional arguments past the
// parameters) and kwargs (a dict of the keyword arguments that are no parameter's). As in Jinja2, a
// macro takes extra arguments only where its body reads varargs or kwargs, and the caller a call
// block passes only where it reads caller (or kwargs).
type signature struct {
	params   []string
	defaults []expr // nil where a parameter has no default
	// usesCaller, usesVarargs and usesKwargs: the body reads the name (as Jinja2 finds it: loaded,
	// in nested macros too, before any assignment to it) and it is no parameter.
	usesCaller, usesVarargs, usesKwargs bool
}

// specialNames are the names a macro's body may read for what its call passes beyond its parameters.
var specialNames = [...]string{"caller", "varargs", "kwargs"}

// nameUse records, for each of the specialNames, whether a body read it before anything assigned
// it (1) or the other way round (2).
type nameUse [len(specialNames)]int8

type (
	literal  struct{ v value }
	nameExpr struct {
		name string
		pos  int
	}
	listExpr  struct{ items []expr }
	tupleExpr struct{ items []expr }
	dictExpr  struct{ keys, values []expr }
	attrExpr  struct {
		obj  expr
		name string
	}
	indexExpr struct{ obj, index expr }
	sliceExpr struct{ obj, start, stop, step expr }
	callExpr  struct {
		fn       expr
		args     []expr
		kwNames  []string
		kwValues []expr
		pos      int
	}
	filterExpr struct {
		arg      expr // nil inside a filter block or a block set
		name     string
		args     []expr
		kwNames  []string
		kwValues []expr
		pos      int
	}
	testExpr struct {
		arg    expr
		name   string
		args   []expr
		negate bool
		pos    int
	}
	unaryExpr struct {
		op string // "not", "-", "+"
		e  expr
	}
	binaryExpr struct {
		op   string // "or", "and", "==", ..., "in", "not in", "+", "-", "~", "*", "/", "//", "%", "**"
		l, r expr
		pos  int
	}
	condExpr struct{ cond, yes, no expr } // yes if cond else no (no may be nil)
	// chainExpr is a chain of two or more comparisons, a < b <= c: each operand is evaluated once,
	// and the chain holds while every comparison holds (Python's a < b and b <= c).
	chainExpr struct {
		operands []expr // len(ops)+1
		ops      []string
		pos      []int
	}
)

// parser turns segments into a tree of nodes.
type parser struct {
	segs []segment
	i    int // next segment
	// Tokens of the tag being parsed.
	toks []token
	t    int
	// depth is the nesting of the block or expression being parsed, bounded by maxNesting so that
	// a pathological template fails to parse instead of exhausting the stack.
	depth int
	// uses holds, for each macro or call block being parsed (innermost last), the specialNames
	// its body has read or assigned so far.
	uses []*nameUse
}

// noteName records that name is read (load) or assigned in the macro bodies being parsed: the
// first of the two counts, as for Jinja2's find_undeclared.
func (p *parser) noteName(name string, load bool) {
	for i, special := range specialNames {
		if name != special {
			continue
		}
		for _, u := range p.uses {
			if u[i] == 0 {
				u[i] = 2
				if load {
					u[i] = 1
				}
			}
		}
	}
}

// parseSignatureBody parses a macro's or call block's body up to its end tag, and sets in sig
// which special names it reads.
func (p *parser) parseSignatureBody(sig *signature, end string) ([]node, error) {
	u := &nameUse{}
	p.uses = append(p.uses, u)
	body, _, err := p.parseBody(end)
	p.uses = p.uses[:len(p.uses)-1]
	if err != nil {
		return nil, err
	}
	uses := func(i int) bool { return u[i] == 1 && !contains(sig.params, specialNames[i]) }
	sig.usesCaller, sig.usesVarargs, sig.usesKwargs = u[0] == 1, uses(1), uses(2)
	return body, nil
}

// maxNesting is the deepest nesting of blocks, or of an expression's parts, a template may have.
const maxNesting = 500

// enter counts one more level of nesting; the caller defers p.leave.
func (p *parser) enter() error {
	p.depth++
	if p.depth > maxNesting {
		return p.syntaxError("nested deeper than %d levels", maxNesting)
	}
	return nil
}

func (p *parser) leave() { p.depth-- }

// parse builds the template body from its segments.
func parse(segs []segment) ([]node, error) {
	p := &parser{segs: segs}
	body, end, err := p.parseBody()
	if err != nil {
		return nil, err
	}
	if end != "" {
		return nil, fmt.Errorf("chattemplate: unexpected {%% %s %%}", end)
	}
	return body, nil
}

// syntaxError reports a problem at the current token.
func (p *parser) syntaxError(format string, args ...any) error {
	pos := 0
	if p.t < len(p.toks) {
		pos = p.toks[p.t].pos
	}
	return fmt.Errorf("chattemplate: offset %d: %s", pos, fmt.Sprintf(format, args...))
}

// parseBody parses nodes until the end of the template or a block tag that it does not own
// (endif, else, endfor, ...), whose keyword it returns with p.toks positioned after the keyword.
func (p *parser) parseBody(stops ...string) ([]node, string, error) {
	defer p.leave()
	if err := p.enter(); err != nil {
		return nil, "", err
	}
	var body []node
	for p.i < len(p.segs) {
		s := p.segs[p.i]
		p.i++
		switch s.kind {
		case segText:
			if s.text != "" {
				body = append(body, &textNode{text: s.text})
			}
		case segComment:
		case segVariable:
			p.toks, p.t = s.tokens, 0
			e, err := p.parseExpr()
			if err != nil {
				return nil, "", err
			}
			if err := p.expectEnd(); err != nil {
				return nil, "", err
			}
			body = append(body, &outputNode{e: e})
		case segBlock:
			p.toks, p.t = s.tokens, 0
			kw := p.next()
			if kw.kind != tokName {
				return nil, "", p.syntaxError("expected a statement keyword")
			}
			for _, stop := range stops {
				if kw.text == stop {
					return body, kw.text, nil
				}
			}
			n, err := p.parseStatement(kw)
			if err != nil {
				return nil, "", err
			}
			if n != nil {
				body = append(body, n)
			}
		}
	}
	if len(stops) > 0 {
		return nil, "", fmt.Errorf("chattemplate: missing {%% %s %%}", stops[len(stops)-1])
	}
	return body, "", nil
}

func (p *parser) parseStatement(kw token) (node, error) {
	switch kw.text {
	case "if":
		return p.parseIf()
	case "for":
		return p.parseFor(kw.pos)
	case "set":
		return p.parseSet()
	case "macro":
		return p.parseMacro()
	case "call":
		n := &callBlockNode{}
		if p.acceptOp("(") {
			var err error
			if n.sig.params, n.sig.defaults, err = p.parseParams(); err != nil {
				return nil, err
			}
		}
		e, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		call, ok := e.(*callExpr)
		if !ok {
			return nil, p.syntaxError("call block needs a call")
		}
		n.call = call
		if err := p.expectEnd(); err != nil {
			return nil, err
		}
		if n.body, err = p.parseSignatureBody(&n.sig, "endcall"); err != nil {
			return nil, err
		}
		return n, p.expectEnd()
	case "filter":
		var filters []*filterExpr
		for {
			f, err := p.parseFilterCall(nil)
			if err != nil {
				return nil, err
			}
			filters = append(filters, f)
			if !p.acceptOp("|") {
				break
			}
		}
		if err := p.expectEnd(); err != nil {
			return nil, err
		}
		body, _, err := p.parseBody("endfilter")
		if err != nil {
			return nil, err
		}
		return &filterBlockNode{filters: filters, body: body}, p.expectEnd()
	case "raw":
		// lex turned the raw body into a text segment followed by the endraw tag.
		if err := p.expectEnd(); err != nil {
			return nil, err
		}
		var text string
		if p.i < len(p.segs) && p.segs[p.i].kind == segText {
			text = p.segs[p.i].text
			p.i++
		}
		p.i++ // endraw
		return &textNode{text: text}, nil
	case "generation", "endgeneration":
		// transformers' marker for assistant tokens; it renders nothing.
		return nil, p.expectEnd()
	case "break":
		return &breakNode{}, p.expectEnd()
	case "continue":
		return &continueNode{}, p.expectEnd()
	}
	return nil, fmt.Errorf("chattemplate: offset %d: unknown statement %q", kw.pos, kw.text)
}

func (p *parser) parseIf() (node, error) {
	n := &ifNode{}
	for {
		cond, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		if err := p.expectEnd(); err != nil {
			return nil, err
		}
		body, end, err := p.parseBody("elif", "else", "endif")
		if err != nil {
			return nil, err
		}
		n.conds = append(n.conds, cond)
		n.bodies = append(n.bodies, body)
		switch end {
		case "elif":
			continue
		case "else":
			if err := p.expectEnd(); err != nil {
				return nil, err
			}
			body, _, err := p.parseBody("endif")
			if err != nil {
				return nil, err
			}
			n.bodies = append(n.bodies, body)
		}
		return n, p.expectEnd()
	}
}

func (p *parser) parseFor(pos int) (node, error) {
	n := &forNode{pos: pos}
	for {
		t := p.next()
		if t.kind != tokName {
			return nil, p.syntaxError("expected a loop variable")
		}
		n.targets = append(n.targets, t.text)
		p.noteName(t.text, false)
		if !p.acceptOp(",") {
			break
		}
	}
	if t := p.next(); t.kind != tokName || t.text != "in" {
		return nil, p.syntaxError("expected 'in'")
	}
	iter, err := p.parseCondless()
	if err != nil {
		return nil, err
	}
	n.iter = iter
	if p.acceptName("if") {
		if n.filter, err = p.parseCondless(); err != nil {
			return nil, err
		}
	}
	p.acceptName("recursive")
	if err := p.expectEnd(); err != nil {
		return nil, err
	}
	body, end, err := p.parseBody("else", "endfor")
	if err != nil {
		return nil, err
	}
	n.body = body
	if end == "else" {
		if err := p.expectEnd(); err != nil {
			return nil, err
		}
		if n.elseBody, _, err = p.parseBody("endfor"); err != nil {
			return nil, err
		}
	}
	return n, p.expectEnd()
}

func (p *parser) parseSet() (node, error) {
	n := &setNode{}
	for {
		t := p.next()
		if t.kind != tokName {
			return nil, p.syntaxError("expected a name to set")
		}
		var target expr = &nameExpr{name: t.text, pos: t.pos}
		if p.acceptOp(".") {
			attr := p.next()
			if attr.kind != tokName {
				return nil, p.syntaxError("expected an attribute name")
			}
			target = &attrExpr{obj: target, name: attr.text}
		}
		_, isName := target.(*nameExpr)
		p.noteName(t.text, !isName) // ns.x = ... reads ns
		n.targets = append(n.targets, target)
		if !p.acceptOp(",") {
			break
		}
	}
	if p.acceptOp("=") {
		v, err := p.parseExpr()
		if err != nil {
			return nil, err
		}
		n.value = v
		return n, p.expectEnd()
	}
	// Block set: {% set x %}...{% endset %}, optionally with filters.
	for p.acceptOp("|") {
		f, err := p.parseFilterCall(nil)
		if err != nil {
			return nil, err
		}
		n.filters = append(n.filters, f)
	}
	if err := p.expectEnd(); err != nil {
		return nil, err
	}
	body, _, err := p.parseBody("endset")
	if err != nil {
		return nil, err
	}
	n.body = body
	return n, p.expectEnd()
}

func (p *parser) parseMacro() (node, error) {
	name := p.next()
	if name.kind != tokName {
		return nil, p.syntaxError("expected a macro name")
	}
	n := &macroNode{name: name.text}
	if err := p.expectOp("("); err != nil {
		return nil, err
	}
	var err error
	if n.sig.params, n.sig.defaults, err = p.parseParams(); err != nil {
		return nil, err
	}
	if err := p.expectEnd(); err != nil {
		return nil, err
	}
	body, err := p.parseSignatureBody(&n.sig, "endmacro")
	if err != nil {
		return nil, err
	}
	n.body = body
	return n, p.expectEnd()
}

// parseParams parses a parameter list after its "(" up to and including ")": names, each with an
// optional default (a single expression: the comma after it starts the next parameter).
func (p *parser) parseParams() (params []string, defaults []expr, err error) {
	for !p.acceptOp(")") {
		t := p.next()
		if t.kind != tokName {
			return nil, nil, p.syntaxError("expected a parameter name")
		}
		params = append(params, t.text)
		p.noteName(t.text, false)
		var def expr
		if p.acceptOp("=") {
			if def, err = p.parseCond(); err != nil {
				return nil, nil, err
			}
		}
		defaults = append(defaults, def)
		if !p.acceptOp(",") {
			if err := p.expectOp(")"); err != nil {
				return nil, nil, err
			}
			break
		}
	}
	return params, defaults, nil
}

// Token helpers.

func (p *parser) peek() token {
	if p.t < len(p.toks) {
		return p.toks[p.t]
	}
	return token{kind: tokEnd}
}

func (p *parser) next() token {
	t := p.peek()
	if p.t < len(p.toks) {
		p.t++
	}
	return t
}

func (p *parser) isOp(op string) bool {
	t := p.peek()
	return t.kind == tokOp && t.text == op
}

func (p *parser) acceptOp(op string) bool {
	if p.isOp(op) {
		p.t++
		return true
	}
	return false
}

func (p *parser) isName(name string) bool {
	t := p.peek()
	return t.kind == tokName && t.text == name
}

func (p *parser) acceptName(name string) bool {
	if p.isName(name) {
		p.t++
		return true
	}
	return false
}

func (p *parser) expectOp(op string) error {
	if !p.acceptOp(op) {
		return p.syntaxError("expected %q", op)
	}
	return nil
}

func (p *parser) expectEnd() error {
	if p.peek().kind != tokEnd {
		return p.syntaxError("unexpected %q", p.peek().text)
	}
	return nil
}

// Expressions, by Jinja2's precedence: conditional < or < and < not < comparison (in, is,
// ==, ...) < + - < ~ < * / // % < ** < unary - + < postfix (. [] ()) and filters.

// parseExpr parses a full expression, tuples without parentheses included (a, b).
func (p *parser) parseExpr() (expr, error) {
	e, err := p.parseCond()
	if err != nil || !p.isOp(",") {
		return e, err
	}
	items := []expr{e}
	for p.acceptOp(",") {
		if t := p.peek(); t.kind == tokEnd || t.kind == tokOp && (t.text == ")" || t.text == "]") {
			break
		}
		e, err := p.parseCond()
		if err != nil {
			return nil, err
		}
		items = append(items, e)
	}
	return &tupleExpr{items: items}, nil
}

func (p *parser) parseCond() (expr, error) {
	defer p.leave()
	if err := p.enter(); err != nil {
		return nil, err
	}
	e, err := p.parseOr()
	if err != nil {
		return nil, err
	}
	for p.acceptName("if") {
		cond, err := p.parseOr()
		if err != nil {
			return nil, err
		}
		c := &condExpr{cond: cond, yes: e}
		if p.acceptName("else") {
			if c.no, err = p.parseCond(); err != nil {
				return nil, err
			}
		}
		e = c
	}
	return e, nil
}

// parseCondless parses an expression without a trailing conditional (the for loop's iterable,
// where "if" starts the loop filter).
func (p *parser) parseCondless() (expr, error) { return p.parseOr() }

func (p *parser) parseOr() (expr, error) {
	l, err := p.parseAnd()
	for err == nil && p.isName("or") {
		pos := p.next().pos
		var r expr
		if r, err = p.parseAnd(); err == nil {
			l = &binaryExpr{op: "or", l: l, r: r, pos: pos}
		}
	}
	return l, err
}

func (p *parser) parseAnd() (expr, error) {
	l, err := p.parseNot()
	for err == nil && p.isName("and") {
		pos := p.next().pos
		var r expr
		if r, err = p.parseNot(); err == nil {
			l = &binaryExpr{op: "and", l: l, r: r, pos: pos}
		}
	}
	return l, err
}

func (p *parser) parseNot() (expr, error) {
	defer p.leave()
	if err := p.enter(); err != nil {
		return nil, err
	}
	if p.acceptName("not") {
		e, err := p.parseNot()
		return &unaryExpr{op: "not", e: e}, err
	}
	return p.parseCompare()
}

func (p *parser) parseCompare() (expr, error) {
	first, err := p.parseMath1()
	if err != nil {
		return nil, err
	}
	chain := &chainExpr{operands: []expr{first}}
	for {
		t := p.peek()
		var op string
		switch {
		case t.kind == tokOp && (t.text == "==" || t.text == "!=" || t.text == "<" || t.text == ">" || t.text == "<=" || t.text == ">="):
			op = t.text
			p.t++
		case t.kind == tokName && t.text == "in":
			op = "in"
			p.t++
		case t.kind == tokName && t.text == "not" && p.t+1 < len(p.toks) && p.toks[p.t+1].kind == tokName && p.toks[p.t+1].text == "in":
			op = "not in"
			p.t += 2
		default:
			switch len(chain.ops) {
			case 0:
				return first, nil
			case 1:
				return &binaryExpr{op: chain.ops[0], l: first, r: chain.operands[1], pos: chain.pos[0]}, nil
			}
			return chain, nil
		}
		r, err := p.parseMath1()
		if err != nil {
			return nil, err
		}
		chain.operands = append(chain.operands, r)
		chain.ops = append(chain.ops, op)
		chain.pos = append(chain.pos, t.pos)
	}
}

func (p *parser) parseMath1() (expr, error) {
	l, err := p.parseConcat()
	for err == nil && (p.isOp("+") || p.isOp("-")) {
		t := p.next()
		var r expr
		if r, err = p.parseConcat(); err == nil {
			l = &binaryExpr{op: t.text, l: l, r: r, pos: t.pos}
		}
	}
	return l, err
}

func (p *parser) parseConcat() (expr, error) {
	l, err := p.parseMath2()
	for err == nil && p.isOp("~") {
		t := p.next()
		var r expr
		if r, err = p.parseMath2(); err == nil {
			l = &binaryExpr{op: "~", l: l, r: r, pos: t.pos}
		}
	}
	return l, err
}

func (p *parser) parseMath2() (expr, error) {
	l, err := p.parsePow()
	for err == nil && (p.isOp("*") || p.isOp("/") || p.isOp("//") || p.isOp("%")) {
		t := p.next()
		var r expr
		if r, err = p.parsePow(); err == nil {
			l = &binaryExpr{op: t.text, l: l, r: r, pos: t.pos}
		}
	}
	return l, err
}

func (p *parser) parsePow() (expr, error) {
	l, err := p.parseUnary(true)
	for err == nil && p.isOp("**") {
		t := p.next()
		var r expr
		if r, err = p.parseUnary(true); err == nil {
			l = &binaryExpr{op: "**", l: l, r: r, pos: t.pos}
		}
	}
	return l, err
}

func (p *parser) parseUnary(withFilter bool) (expr, error) {
	defer p.leave()
	if err := p.enter(); err != nil {
		return nil, err
	}
	var e expr
	var err error
	switch {
	case p.isOp("-"), p.isOp("+"):
		op := p.next().text
		var operand expr
		if operand, err = p.parseUnary(false); err != nil {
			return nil, err
		}
		e = &unaryExpr{op: op, e: operand}
	default:
		if e, err = p.parsePrimary(); err != nil {
			return nil, err
		}
	}
	if e, err = p.parsePostfix(e); err != nil {
		return nil, err
	}
	if withFilter {
		return p.parseFilters(e)
	}
	return e, nil
}

func (p *parser) parsePrimary() (expr, error) {
	t := p.next()
	switch t.kind {
	case tokName:
		switch t.text {
		case "true", "True":
			return &literal{v: true}, nil
		case "false", "False":
			return &literal{v: false}, nil
		case "none", "None":
			return &literal{v: nil}, nil
		}
		p.noteName(t.text, true)
		return &nameExpr{name: t.text, pos: t.pos}, nil
	case tokString:
		s := t.text
		for p.peek().kind == tokString { // adjacent literals concatenate
			s += p.next().text
		}
		return &literal{v: s}, nil
	case tokInt:
		if n, err := strconv.ParseInt(t.text, 10, 64); err == nil {
			return &literal{v: n}, nil
		}
		b, ok := new(big.Int).SetString(t.text, 10)
		if !ok {
			return nil, fmt.Errorf("chattemplate: offset %d: bad integer %q", t.pos, t.text)
		}
		n, err := normInt(b)
		if err != nil {
			return nil, fmt.Errorf("chattemplate: offset %d: %w", t.pos, err)
		}
		return &literal{v: n}, nil
	case tokFloat:
		f, err := strconv.ParseFloat(t.text, 64)
		if err != nil {
			return nil, fmt.Errorf("chattemplate: offset %d: %w", t.pos, err)
		}
		return &literal{v: f}, nil
	case tokOp:
		switch t.text {
		case "(":
			if p.acceptOp(")") {
				return &tupleExpr{}, nil
			}
			e, err := p.parseExpr()
			if err != nil {
				return nil, err
			}
			return e, p.expectOp(")")
		case "[":
			l := &listExpr{}
			for !p.acceptOp("]") {
				e, err := p.parseCond()
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, e)
				if !p.acceptOp(",") {
					if err := p.expectOp("]"); err != nil {
						return nil, err
					}
					break
				}
			}
			return l, nil
		case "{":
			d := &dictExpr{}
			for !p.acceptOp("}") {
				k, err := p.parseCond()
				if err != nil {
					return nil, err
				}
				if err := p.expectOp(":"); err != nil {
					return nil, err
				}
				v, err := p.parseCond()
				if err != nil {
					return nil, err
				}
				d.keys = append(d.keys, k)
				d.values = append(d.values, v)
				if !p.acceptOp(",") {
					if err := p.expectOp("}"); err != nil {
						return nil, err
					}
					break
				}
			}
			return d, nil
		}
	}
	p.t--
	return nil, p.syntaxError("unexpected %q", t.text)
}

func (p *parser) parsePostfix(e expr) (expr, error) {
	for {
		switch {
		case p.acceptOp("."):
			t := p.next()
			if t.kind != tokName && t.kind != tokInt {
				return nil, p.syntaxError("expected an attribute name")
			}
			if t.kind == tokInt {
				n, _ := strconv.ParseInt(t.text, 10, 64)
				e = &indexExpr{obj: e, index: &literal{v: n}}
			} else {
				e = &attrExpr{obj: e, name: t.text}
			}
		case p.acceptOp("["):
			var parts [3]expr
			colons := 0
			for {
				if p.isOp(":") {
					p.t++
					colons++
					if colons > 2 {
						return nil, p.syntaxError("too many colons in a slice")
					}
					continue
				}
				if p.acceptOp("]") {
					break
				}
				if parts[colons] != nil {
					return nil, p.syntaxError("expected ':' or ']'")
				}
				x, err := p.parseExpr()
				if err != nil {
					return nil, err
				}
				parts[colons] = x
			}
			if colons == 0 {
				if parts[0] == nil {
					return nil, p.syntaxError("empty subscript")
				}
				e = &indexExpr{obj: e, index: parts[0]}
			} else {
				e = &sliceExpr{obj: e, start: parts[0], stop: parts[1], step: parts[2]}
			}
		case p.isOp("("):
			pos := p.next().pos
			c := &callExpr{fn: e, pos: pos}
			if err := p.parseArgs(&c.args, &c.kwNames, &c.kwValues); err != nil {
				return nil, err
			}
			e = c
		default:
			return e, nil
		}
	}
}

// parseArgs parses call arguments after "(" up to and including ")".
func (p *parser) parseArgs(args *[]expr, kwNames *[]string, kwValues *[]expr) error {
	for !p.acceptOp(")") {
		if t := p.peek(); t.kind == tokName && p.t+1 < len(p.toks) && p.toks[p.t+1].kind == tokOp && p.toks[p.t+1].text == "=" {
			p.t += 2
			v, err := p.parseCond()
			if err != nil {
				return err
			}
			*kwNames = append(*kwNames, t.text)
			*kwValues = append(*kwValues, v)
		} else {
			v, err := p.parseCond()
			if err != nil {
				return err
			}
			*args = append(*args, v)
		}
		if !p.acceptOp(",") {
			return p.expectOp(")")
		}
	}
	return nil
}

// parseFilters parses "| filter(args)" and "is [not] test(args)" chains after an operand.
func (p *parser) parseFilters(e expr) (expr, error) {
	for {
		switch {
		case p.acceptOp("|"):
			f, err := p.parseFilterCall(e)
			if err != nil {
				return nil, err
			}
			e = f
		case p.isName("is"):
			pos := p.next().pos
			t := &testExpr{arg: e, pos: pos}
			t.negate = p.acceptName("not")
			name := p.next()
			if name.kind != tokName {
				return nil, p.syntaxError("expected a test name")
			}
			t.name = name.text
			switch nt := p.peek(); {
			case nt.kind == tokOp && nt.text == "(":
				p.t++
				var kwNames []string
				var kwValues []expr
				if err := p.parseArgs(&t.args, &kwNames, &kwValues); err != nil {
					return nil, err
				}
			case nt.kind == tokString || nt.kind == tokInt || nt.kind == tokFloat ||
				nt.kind == tokName && nt.text != "and" && nt.text != "or" && nt.text != "else" && nt.text != "if" && nt.text != "is" && nt.text != "in" && nt.text != "not":
				// A test with one argument and no parentheses: "x is divisibleby 3", "x is sameas none".
				arg, err := p.parsePrimary()
				if err != nil {
					return nil, err
				}
				if arg, err = p.parsePostfix(arg); err != nil {
					return nil, err
				}
				t.args = append(t.args, arg)
			}
			e = t
		default:
			return e, nil
		}
	}
}

// parseFilterCall parses a filter's name and optional arguments.
func (p *parser) parseFilterCall(arg expr) (*filterExpr, error) {
	t := p.next()
	if t.kind != tokName {
		return nil, p.syntaxError("expected a filter name")
	}
	name := t.text
	for p.isOp(".") { // dotted filter names
		p.t++
		n := p.next()
		name += "." + n.text
	}
	f := &filterExpr{arg: arg, name: name, pos: t.pos}
	if p.acceptOp("(") {
		if err := p.parseArgs(&f.args, &f.kwNames, &f.kwValues); err != nil {
			return nil, err
		}
	}
	return f, nil
}
