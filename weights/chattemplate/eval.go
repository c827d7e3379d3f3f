package chattemplate

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"strings"
	"unicode/utf8"
)

// scope holds the variables of one level: the template's globals, a loop iteration, a macro call.
type scope struct {
	vars   map[string]value
	parent *scope
}

func newScope(parent *scope) *scope { return &scope{vars: map[string]value{}, parent: parent} }

func (s *scope) lookup(name string) (value, bool) {
	for ; s != nil; s = s.parent {
		if v, ok := s.vars[name]; ok {
			return v, true
		}
	}
	return nil, false
}

// Loop control, passed up as errors from a loop body to its loop.
var (
	errBreak    = errors.New("chattemplate: break outside a loop")
	errContinue = errors.New("chattemplate: continue outside a loop")
)

// renderer executes a parsed template.
type renderer struct {
	env *Template
	// steps bounds the work of one render, so that a template cannot loop for ever.
	steps int
	// calls is the depth of macro calls: a template that recurses without end gets an error, as
	// in Python, instead of exhausting the goroutine's stack (a fatal error that would end the
	// process).
	calls int
}

// Bounds on one render: a template is trusted code from the model folder, but a faulty one must
// fail its request with an error, never take the server down.
const (
	// maxSteps is the most statements and loop iterations one render may execute.
	maxSteps = 1_000_000
	// maxCallDepth is the deepest nesting of macro calls.
	maxCallDepth = 200
	// maxTextBytes caps the output of a render (and of every block rendered into a value) and any
	// string or list built by repetition.
	maxTextBytes = 64 << 20
)

var errTooLarge = fmt.Errorf("chattemplate: output exceeds %d bytes", maxTextBytes)

func (r *renderer) tick() error {
	r.steps++
	if r.steps > maxSteps {
		return errors.New("chattemplate: template runs too long")
	}
	return nil
}

func (r *renderer) execBody(out *strings.Builder, body []node, sc *scope) error {
	for _, n := range body {
		if err := r.exec(out, n, sc); err != nil {
			return err
		}
	}
	return nil
}

func (r *renderer) exec(out *strings.Builder, n node, sc *scope) error {
	if err := r.tick(); err != nil {
		return err
	}
	if out.Len() > maxTextBytes {
		return errTooLarge
	}
	switch n := n.(type) {
	case *textNode:
		out.WriteString(n.text)
	case *outputNode:
		v, err := r.eval(n.e, sc)
		if err != nil {
			return err
		}
		out.WriteString(str(v))
	case *ifNode:
		for i, c := range n.conds {
			v, err := r.eval(c, sc)
			if err != nil {
				return err
			}
			if truthy(v) {
				return r.execBody(out, n.bodies[i], sc)
			}
		}
		if len(n.bodies) > len(n.conds) {
			return r.execBody(out, n.bodies[len(n.conds)], sc)
		}
	case *forNode:
		return r.execFor(out, n, sc)
	case *setNode:
		return r.execSet(n, sc)
	case *macroNode:
		sc.vars[n.name] = r.macro(n, sc)
	case *callBlockNode:
		// The called macro gets caller as a keyword argument; caller renders the block's body in the
		// scope around the block, with its own parameters bound.
		caller := &function{name: "caller", call: func(args []value, kw *dict) (value, error) {
			s := newScope(sc)
			if err := r.bindParams("caller", &n.sig, args, kw, s); err != nil {
				return nil, err
			}
			var b strings.Builder
			err := r.execBody(&b, n.body, s)
			return b.String(), err
		}}
		call := *n.call
		call.kwNames = append(append([]string(nil), n.call.kwNames...), "caller")
		call.kwValues = append(append([]expr(nil), n.call.kwValues...), &literal{v: caller})
		v, err := r.eval(&call, sc)
		if err != nil {
			return err
		}
		out.WriteString(str(v))
	case *filterBlockNode:
		var b strings.Builder
		if err := r.execBody(&b, n.body, sc); err != nil {
			return err
		}
		var v value = b.String()
		for _, f := range n.filters {
			var err error
			if v, err = r.applyFilter(f, v, sc); err != nil {
				return err
			}
		}
		out.WriteString(str(v))
	case *breakNode:
		return errBreak
	case *continueNode:
		return errContinue
	default:
		return fmt.Errorf("chattemplate: unknown node %T", n)
	}
	return nil
}

func (r *renderer) execFor(out *strings.Builder, n *forNode, sc *scope) error {
	iv, err := r.eval(n.iter, sc)
	if err != nil {
		return err
	}
	items, err := iterate(iv)
	if err != nil {
		return fmt.Errorf("chattemplate: offset %d: for: %w", n.pos, err)
	}
	bind := func(s *scope, item value) error {
		if len(n.targets) == 1 {
			s.vars[n.targets[0]] = item
			return nil
		}
		parts, err := iterate(item)
		if err != nil || len(parts) != len(n.targets) {
			return fmt.Errorf("chattemplate: offset %d: cannot unpack %s into %d loop variables", n.pos, typeName(item), len(n.targets))
		}
		for i, t := range n.targets {
			s.vars[t] = parts[i]
		}
		return nil
	}
	if n.filter != nil {
		var kept []value
		for _, item := range items {
			s := newScope(sc)
			if err := bind(s, item); err != nil {
				return err
			}
			v, err := r.eval(n.filter, s)
			if err != nil {
				return err
			}
			if truthy(v) {
				kept = append(kept, item)
			}
		}
		items = kept
	}
	if len(items) == 0 {
		return r.execBody(out, n.elseBody, sc)
	}
	for i, item := range items {
		if err := r.tick(); err != nil {
			return err
		}
		s := newScope(sc)
		if err := bind(s, item); err != nil {
			return err
		}
		loop := &loopInfo{items: items, i: i}
		s.vars["loop"] = loop
		err := r.execBody(out, n.body, s)
		switch {
		case errors.Is(err, errBreak):
			return nil
		case errors.Is(err, errContinue):
		case err != nil:
			return err
		}
	}
	return nil
}

func (r *renderer) execSet(n *setNode, sc *scope) error {
	var v value
	if n.value != nil {
		var err error
		if v, err = r.eval(n.value, sc); err != nil {
			return err
		}
	} else {
		var b strings.Builder
		if err := r.execBody(&b, n.body, sc); err != nil {
			return err
		}
		v = b.String()
		for _, f := range n.filters {
			var err error
			if v, err = r.applyFilter(f, v, sc); err != nil {
				return err
			}
		}
	}
	values := []value{v}
	if len(n.targets) > 1 {
		parts, err := iterate(v)
		if err != nil || len(parts) != len(n.targets) {
			return fmt.Errorf("chattemplate: cannot unpack %s into %d names", typeName(v), len(n.targets))
		}
		values = parts
	}
	for i, t := range n.targets {
		switch t := t.(type) {
		case *nameExpr:
			sc.vars[t.name] = values[i]
		case *attrExpr:
			obj, err := r.eval(t.obj, sc)
			if err != nil {
				return err
			}
			d, ok := obj.(*dict)
			if !ok || !d.namespace {
				return fmt.Errorf("chattemplate: cannot assign attribute %q on %s (only on a namespace)", t.name, typeName(obj))
			}
			d.set(t.name, values[i])
		}
	}
	return nil
}

// macro makes the function a {% macro %} defines; its body sees the scope it was defined in.
func (r *renderer) macro(n *macroNode, defScope *scope) *function {
	return &function{name: n.name, call: func(args []value, kw *dict) (value, error) {
		if r.calls >= maxCallDepth {
			return nil, fmt.Errorf("chattemplate: macro %s: calls nested deeper than %d", n.name, maxCallDepth)
		}
		r.calls++
		defer func() { r.calls-- }()
		s := newScope(defScope)
		if err := r.bindParams("macro "+n.name, &n.sig, args, kw, s); err != nil {
			return nil, err
		}
		var b strings.Builder
		if err := r.execBody(&b, n.body, s); err != nil {
			return nil, err
		}
		return b.String(), nil
	}}
}

// bindParams binds a macro's (or a call block's caller's) parameters in s as Jinja2's Macro does:
// the positional arguments first; the parameters after them from the keyword arguments, else their
// defaults (evaluated in s, so they may use earlier parameters), else undefined; then caller,
// kwargs and varargs where the body reads them. Keyword arguments left over (one for a parameter
// already given positionally among them) are an error unless the body reads kwargs, positional
// arguments past the parameters unless it reads varargs.
func (r *renderer) bindParams(what string, sig *signature, args []value, kw *dict, s *scope) error {
	rest := newDict() // the keyword arguments not bound to a parameter
	if kw != nil {
		rest.update(kw)
	}
	take := func(name string) (value, bool) {
		v, ok := rest.get(name)
		if ok {
			delete(rest.m, name)
			for i, k := range rest.keys {
				if k == name {
					rest.keys = append(rest.keys[:i:i], rest.keys[i+1:]...)
					break
				}
			}
		}
		return v, ok
	}
	foundCaller := len(args) >= len(sig.params) && contains(sig.params, "caller")
	var missing []int
	for i, p := range sig.params {
		if i < len(args) {
			s.vars[p] = args[i]
			continue
		}
		if p == "caller" {
			foundCaller = true
		}
		if v, ok := take(p); ok {
			s.vars[p] = v
		} else {
			missing = append(missing, i)
		}
	}
	if sig.usesCaller && !foundCaller {
		c, ok := take("caller")
		if !ok || c == nil {
			c = undefined{name: "caller"}
		}
		s.vars["caller"] = c
	}
	switch {
	case sig.usesKwargs:
		s.vars["kwargs"] = rest
	case hasKey(rest, "caller"):
		return fmt.Errorf("chattemplate: %s was invoked with two values for the special caller argument", what)
	case len(rest.keys) > 0:
		return fmt.Errorf("chattemplate: %s has no parameter %q", what, rest.keys[0])
	}
	switch {
	case sig.usesVarargs:
		extra := &list{tuple: true}
		if len(args) > len(sig.params) {
			extra.items = append(extra.items, args[len(sig.params):]...)
		}
		s.vars["varargs"] = extra
	case len(args) > len(sig.params):
		return fmt.Errorf("chattemplate: %s takes %d arguments, got %d", what, len(sig.params), len(args))
	}
	for _, i := range missing {
		p := sig.params[i]
		if sig.defaults[i] == nil {
			s.vars[p] = undefined{name: p}
			continue
		}
		v, err := r.eval(sig.defaults[i], s)
		if err != nil {
			return err
		}
		s.vars[p] = v
	}
	return nil
}

func hasKey(d *dict, k string) bool { _, ok := d.m[k]; return ok }

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

func (r *renderer) eval(e expr, sc *scope) (value, error) {
	switch e := e.(type) {
	case *literal:
		return e.v, nil
	case *nameExpr:
		if v, ok := sc.lookup(e.name); ok {
			return v, nil
		}
		if f, ok := r.env.globals[e.name]; ok {
			return f, nil
		}
		return undefined{name: e.name}, nil
	case *listExpr, *tupleExpr:
		var items []expr
		l := &list{}
		if t, ok := e.(*tupleExpr); ok {
			items, l.tuple = t.items, true
		} else {
			items = e.(*listExpr).items
		}
		for _, it := range items {
			v, err := r.eval(it, sc)
			if err != nil {
				return nil, err
			}
			l.items = append(l.items, v)
		}
		return l, nil
	case *dictExpr:
		d := newDict()
		for i := range e.keys {
			k, err := r.eval(e.keys[i], sc)
			if err != nil {
				return nil, err
			}
			v, err := r.eval(e.values[i], sc)
			if err != nil {
				return nil, err
			}
			if err := d.setKey(k, v); err != nil {
				return nil, err
			}
		}
		return d, nil
	case *attrExpr:
		obj, err := r.eval(e.obj, sc)
		if err != nil {
			return nil, err
		}
		return getAttr(obj, e.name)
	case *indexExpr:
		obj, err := r.eval(e.obj, sc)
		if err != nil {
			return nil, err
		}
		idx, err := r.eval(e.index, sc)
		if err != nil {
			return nil, err
		}
		return getItem(obj, idx)
	case *sliceExpr:
		return r.evalSlice(e, sc)
	case *callExpr:
		fv, err := r.eval(e.fn, sc)
		if err != nil {
			return nil, err
		}
		f, ok := fv.(*function)
		if !ok {
			if u, ok := fv.(undefined); ok {
				return nil, fmt.Errorf("chattemplate: offset %d: %q is undefined", e.pos, u.name)
			}
			return nil, fmt.Errorf("chattemplate: offset %d: %s is not callable", e.pos, typeName(fv))
		}
		args, kw, err := r.evalArgs(e.args, e.kwNames, e.kwValues, sc)
		if err != nil {
			return nil, err
		}
		v, err := f.call(args, kw)
		if err != nil {
			var re *RaiseError
			if errors.As(err, &re) {
				return nil, err
			}
			return nil, fmt.Errorf("chattemplate: offset %d: %s(): %w", e.pos, f.name, err)
		}
		return v, nil
	case *filterExpr:
		v, err := r.eval(e.arg, sc)
		if err != nil {
			return nil, err
		}
		return r.applyFilter(e, v, sc)
	case *testExpr:
		v, err := r.eval(e.arg, sc)
		if err != nil {
			return nil, err
		}
		args, _, err := r.evalArgs(e.args, nil, nil, sc)
		if err != nil {
			return nil, err
		}
		ok, err := runTest(e.name, v, args)
		if err != nil {
			return nil, fmt.Errorf("chattemplate: offset %d: %w", e.pos, err)
		}
		return ok != e.negate, nil
	case *unaryExpr:
		v, err := r.eval(e.e, sc)
		if err != nil {
			return nil, err
		}
		switch e.op {
		case "not":
			return !truthy(v), nil
		case "-":
			switch x := v.(type) {
			case int64, *big.Int:
				return intArith("-", int64(0), x)
			case float64:
				return -x, nil
			case bool:
				return -boolInt(x), nil
			}
			return nil, fmt.Errorf("chattemplate: bad operand type for unary -: %s", typeName(v))
		default:
			switch v.(type) {
			case int64, *big.Int, float64:
				return v, nil
			case bool:
				return boolInt(v.(bool)), nil
			}
			return nil, fmt.Errorf("chattemplate: bad operand type for unary +: %s", typeName(v))
		}
	case *chainExpr:
		l, err := r.eval(e.operands[0], sc)
		if err != nil {
			return nil, err
		}
		var v value
		for i, op := range e.ops {
			rv, err := r.eval(e.operands[i+1], sc)
			if err != nil {
				return nil, err
			}
			if v, err = binary(op, l, rv); err != nil {
				return nil, fmt.Errorf("chattemplate: offset %d: %w", e.pos[i], err)
			}
			if !truthy(v) {
				break
			}
			l = rv
		}
		return v, nil
	case *binaryExpr:
		return r.evalBinary(e, sc)
	case *condExpr:
		c, err := r.eval(e.cond, sc)
		if err != nil {
			return nil, err
		}
		if truthy(c) {
			return r.eval(e.yes, sc)
		}
		if e.no == nil {
			return undefined{}, nil
		}
		return r.eval(e.no, sc)
	}
	return nil, fmt.Errorf("chattemplate: unknown expression %T", e)
}

func (r *renderer) evalArgs(args []expr, kwNames []string, kwValues []expr, sc *scope) ([]value, *dict, error) {
	var out []value
	for _, a := range args {
		v, err := r.eval(a, sc)
		if err != nil {
			return nil, nil, err
		}
		out = append(out, v)
	}
	var kw *dict
	if len(kwNames) > 0 {
		kw = newDict()
		for i, k := range kwNames {
			v, err := r.eval(kwValues[i], sc)
			if err != nil {
				return nil, nil, err
			}
			kw.set(k, v)
		}
	}
	return out, kw, nil
}

func (r *renderer) evalBinary(e *binaryExpr, sc *scope) (value, error) {
	l, err := r.eval(e.l, sc)
	if err != nil {
		return nil, err
	}
	switch e.op { // short-circuit: Python returns the deciding operand
	case "and":
		if !truthy(l) {
			return l, nil
		}
		return r.eval(e.r, sc)
	case "or":
		if truthy(l) {
			return l, nil
		}
		return r.eval(e.r, sc)
	}
	rv, err := r.eval(e.r, sc)
	if err != nil {
		return nil, err
	}
	v, err := binary(e.op, l, rv)
	if err != nil {
		return nil, fmt.Errorf("chattemplate: offset %d: %w", e.pos, err)
	}
	return v, nil
}

// binary applies an operator other than and/or with Python's semantics.
func binary(op string, l, r value) (value, error) {
	switch op {
	case "==":
		return equal(l, r), nil
	case "!=":
		return !equal(l, r), nil
	case "<", ">", "<=", ">=":
		c, err := compare(l, r)
		if err != nil {
			return nil, err
		}
		return op == "<" && c < 0 || op == ">" && c > 0 || op == "<=" && c <= 0 || op == ">=" && c >= 0, nil
	case "in", "not in":
		in, err := membership(l, r)
		if err != nil {
			return nil, err
		}
		return in == (op == "in"), nil
	case "~":
		return str(l) + str(r), nil
	case "%":
		if s, ok := l.(string); ok {
			return percentFormat(s, r)
		}
	case "+":
		switch x := l.(type) {
		case string:
			if y, ok := r.(string); ok {
				return x + y, nil
			}
		case *list:
			if y, ok := r.(*list); ok {
				out := &list{items: append(append([]value{}, x.items...), y.items...), tuple: x.tuple}
				return out, nil
			}
		}
	case "*":
		switch r.(type) {
		case string, *list: // n * seq repeats seq, as seq * n does
			switch l.(type) {
			case int64, *big.Int, bool:
				l, r = r, l
			}
		}
		switch r.(type) {
		case bool:
			switch l.(type) {
			case string, *list:
				r = boolInt(r.(bool))
			}
		case *big.Int:
			switch l.(type) {
			case string, *list:
				return nil, errors.New("cannot fit 'int' into an index-sized integer")
			}
		}
		if s, ok := l.(string); ok {
			if n, ok := r.(int64); ok {
				if n > 0 && int64(len(s)) > maxTextBytes/n {
					return nil, errTooLarge
				}
				return strings.Repeat(s, int(max(0, n))), nil
			}
		}
		if x, ok := l.(*list); ok {
			if n, ok := r.(int64); ok {
				if n > 0 && int64(len(x.items)) > maxSteps/n {
					return nil, errors.New("chattemplate: list repetition too long")
				}
				out := &list{tuple: x.tuple}
				for range max(0, n) {
					out.items = append(out.items, x.items...)
				}
				return out, nil
			}
		}
	}
	return arithmetic(op, l, r)
}

func arithmetic(op string, l, r value) (value, error) {
	if b, ok := l.(bool); ok {
		l = boolInt(b)
	}
	if b, ok := r.(bool); ok {
		r = boolInt(b)
	}
	if !isNumber(l) || !isNumber(r) {
		return nil, fmt.Errorf("unsupported operand types for %s: %s and %s", op, typeName(l), typeName(r))
	}
	if isInt(l) && isInt(r) {
		switch op {
		case "/":
			return intDivide(l, r)
		case "**":
			if y, ok := r.(int64); ok && y < 0 {
				break // a float, below
			}
			if y, ok := r.(*big.Int); ok && y.Sign() < 0 {
				break
			}
			return intArith(op, l, r)
		default:
			return intArith(op, l, r)
		}
	}
	lf, err := floatOf(l)
	if err != nil {
		return nil, err
	}
	rf, err := floatOf(r)
	if err != nil {
		return nil, err
	}
	switch op {
	case "+":
		return lf + rf, nil
	case "-":
		return lf - rf, nil
	case "*":
		return lf * rf, nil
	case "/":
		if rf == 0 {
			return nil, errors.New("division by zero")
		}
		return lf / rf, nil
	case "//":
		if rf == 0 {
			return nil, errors.New("float floor division by zero")
		}
		return math.Floor(lf / rf), nil
	case "%":
		if rf == 0 {
			return nil, errors.New("float modulo")
		}
		m := math.Mod(lf, rf)
		if m != 0 && (m < 0) != (rf < 0) {
			m += rf
		}
		return m, nil
	case "**":
		if lf == 0 && rf < 0 {
			return nil, errors.New("0.0 cannot be raised to a negative power")
		}
		return math.Pow(lf, rf), nil
	}
	return nil, fmt.Errorf("unknown operator %s", op)
}

// intDivide is Python's int / int: the correctly rounded quotient as a float.
func intDivide(l, r value) (value, error) {
	a, aSmall := l.(int64)
	b, bSmall := r.(int64)
	if aSmall && bSmall && b != 0 && abs64(a) <= 1<<53 && abs64(b) <= 1<<53 {
		return float64(a) / float64(b), nil // exact operands: one rounding, as Python's
	}
	y := toBig(r)
	if y.Sign() == 0 {
		return nil, errors.New("division by zero")
	}
	f, _ := new(big.Rat).SetFrac(toBig(l), y).Float64()
	if math.IsInf(f, 0) {
		return nil, errors.New("integer division result too large for a float")
	}
	return f, nil
}

// isNumber reports whether v is an int or a float (bool excluded).
func isNumber(v value) bool {
	switch v.(type) {
	case int64, *big.Int, float64:
		return true
	}
	return false
}

// floatOf converts a number to a float, as Python does when an operation mixes ints and floats.
func floatOf(v value) (float64, error) {
	switch x := v.(type) {
	case int64:
		return float64(x), nil
	case *big.Int:
		return bigToFloat(x)
	case float64:
		return x, nil
	}
	return 0, fmt.Errorf("%s is not a number", typeName(v))
}

func toFloat(v value) (float64, bool) {
	switch x := v.(type) {
	case int64:
		return float64(x), true
	case float64:
		return x, true
	}
	return 0, false
}

// membership is Python's "l in r".
func membership(l, r value) (bool, error) {
	switch c := r.(type) {
	case string:
		s, ok := l.(string)
		if !ok {
			return false, fmt.Errorf("'in <string>' requires string as left operand, not %s", typeName(l))
		}
		return strings.Contains(c, s), nil
	case *list:
		for _, x := range c.items {
			if equal(l, x) {
				return true, nil
			}
		}
		return false, nil
	case *dict:
		_, in, err := c.lookup(l)
		return in, err
	case undefined, nil:
		return false, fmt.Errorf("argument of type %s is not iterable", typeName(r))
	}
	return false, fmt.Errorf("argument of type %s is not iterable", typeName(r))
}

// loopInfo is the loop variable of a for loop's iteration i over items; its attributes are
// computed when read, so that iterations allocate nothing for it.
type loopInfo struct {
	items []value
	i     int
}

func (l *loopInfo) attr(name string) value {
	n, i := int64(len(l.items)), int64(l.i)
	switch name {
	case "index":
		return i + 1
	case "index0":
		return i
	case "revindex":
		return n - i
	case "revindex0":
		return n - i - 1
	case "first":
		return i == 0
	case "last":
		return i == n-1
	case "length":
		return n
	case "depth":
		return int64(1)
	case "depth0":
		return int64(0)
	case "previtem":
		if i > 0 {
			return l.items[i-1]
		}
	case "nextitem":
		if i < n-1 {
			return l.items[i+1]
		}
	case "cycle":
		return &function{name: "cycle", call: func(args []value, _ *dict) (value, error) {
			if len(args) == 0 {
				return nil, errors.New("loop.cycle needs at least one argument")
			}
			return args[l.i%len(args)], nil
		}}
	}
	return undefined{name: "loop." + name}
}

// getAttr is obj.name: a method or attribute first, then an item, as Jinja2 does.
func getAttr(obj value, name string) (value, error) {
	switch x := obj.(type) {
	case undefined:
		return nil, fmt.Errorf("chattemplate: %q is undefined (reading its attribute %q)", x.name, name)
	case *loopInfo:
		return x.attr(name), nil
	case *list:
		for i, f := range x.fields {
			if f == name {
				return x.items[i], nil
			}
		}
	}
	if m := method(obj, name); m != nil {
		return m, nil
	}
	if d, ok := obj.(*dict); ok {
		if v, ok := d.m[name]; ok {
			return v, nil
		}
	}
	return undefined{name: name}, nil
}

// getItem is obj[idx]: an item first, then an attribute.
func getItem(obj value, idx value) (value, error) {
	switch x := obj.(type) {
	case undefined:
		return nil, fmt.Errorf("chattemplate: %q is undefined (reading its item %s)", x.name, repr(idx))
	case *loopInfo:
		return x.attr(str(idx)), nil
	case *dict:
		if v, ok, _ := x.lookup(idx); ok { // an unhashable key is not there
			return v, nil
		}
		if k, ok := idx.(string); ok {
			if m := method(obj, k); m != nil {
				return m, nil
			}
		}
		return undefined{name: str(idx)}, nil
	case *list:
		if i, ok := index(idx, len(x.items)); ok {
			return x.items[i], nil
		}
	case string:
		runes := []rune(x)
		if i, ok := index(idx, len(runes)); ok {
			return string(runes[i]), nil
		}
	}
	if k, ok := idx.(string); ok {
		return getAttr(obj, k)
	}
	return undefined{}, nil
}

// index resolves a Python index (negative from the end) into [0, n).
func index(idx value, n int) (int, bool) {
	var i int64
	switch x := idx.(type) {
	case int64:
		i = x
	case bool:
		i = boolInt(x)
	default:
		return 0, false
	}
	if i < 0 {
		i += int64(n)
	}
	if i < 0 || i >= int64(n) {
		return 0, false
	}
	return int(i), true
}

func (r *renderer) evalSlice(e *sliceExpr, sc *scope) (value, error) {
	obj, err := r.eval(e.obj, sc)
	if err != nil {
		return nil, err
	}
	bound := func(x expr) (*int64, error) {
		if x == nil {
			return nil, nil
		}
		v, err := r.eval(x, sc)
		if err != nil {
			return nil, err
		}
		switch n := v.(type) {
		case nil:
			return nil, nil
		case int64:
			return &n, nil
		case *big.Int: // past any length: clamped, as Python clamps
			c := int64(math.MaxInt64)
			if n.Sign() < 0 {
				c = math.MinInt64 + 1
			}
			return &c, nil
		}
		return nil, fmt.Errorf("chattemplate: slice indices must be integers or None, not %s", typeName(v))
	}
	start, err := bound(e.start)
	if err != nil {
		return nil, err
	}
	stop, err := bound(e.stop)
	if err != nil {
		return nil, err
	}
	step, err := bound(e.step)
	if err != nil {
		return nil, err
	}
	switch x := obj.(type) {
	case *list:
		idx, err := sliceIndices(len(x.items), start, stop, step)
		if err != nil {
			return nil, err
		}
		out := &list{tuple: x.tuple}
		for _, i := range idx {
			out.items = append(out.items, x.items[i])
		}
		return out, nil
	case string:
		runes := []rune(x)
		idx, err := sliceIndices(len(runes), start, stop, step)
		if err != nil {
			return nil, err
		}
		var b strings.Builder
		for _, i := range idx {
			b.WriteRune(runes[i])
		}
		return b.String(), nil
	case undefined:
		return nil, fmt.Errorf("chattemplate: %q is undefined (slicing it)", x.name)
	}
	return nil, fmt.Errorf("chattemplate: %s cannot be sliced", typeName(obj))
}

// sliceIndices returns the indices obj[start:stop:step] visits, with Python's clamping rules.
func sliceIndices(n int, start, stop, step *int64) ([]int, error) {
	st := int64(1)
	if step != nil {
		st = *step
	}
	if st == 0 {
		return nil, errors.New("chattemplate: slice step cannot be zero")
	}
	clamp := func(p *int64, def, lo, hi int64) int64 {
		if p == nil {
			return def
		}
		v := *p
		if v < 0 {
			v += int64(n)
		}
		return min(max(v, lo), hi)
	}
	var out []int
	if st > 0 {
		a, b := clamp(start, 0, 0, int64(n)), clamp(stop, int64(n), 0, int64(n))
		for i := a; i < b; i += st {
			out = append(out, int(i))
		}
	} else {
		a, b := clamp(start, int64(n)-1, -1, int64(n)-1), clamp(stop, -1, -1, int64(n)-1)
		if stop != nil && *stop < 0 && *stop+int64(n) < 0 {
			b = -1
		}
		for i := a; i > b; i += st {
			out = append(out, int(i))
		}
	}
	return out, nil
}

// runeLen is a string's length in code points, as Python counts.
func runeLen(s string) int { return utf8.RuneCountInString(s) }
