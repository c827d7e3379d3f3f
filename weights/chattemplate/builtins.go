package chattemplate

import (
	"errors"
	"fmt"
	"math"
	"math/big"
	"reflect"
	"strconv"
	"strings"
	"unicode/utf8"
)

// RaiseError is the error a template raises itself with raise_exception(message), typically to
// reject a conversation it cannot format (roles that do not alternate, an unsupported role).
type RaiseError struct{ Message string }

func (e *RaiseError) Error() string { return "chattemplate: template error: " + e.Message }

// arg returns args[i], or kw[name], or def.
func arg(args []value, kw *dict, i int, name string, def value) value {
	if i < len(args) {
		return args[i]
	}
	if kw != nil {
		if v, ok := kw.m[name]; ok {
			return v
		}
	}
	return def
}

// applyFilter evaluates f's arguments and applies it to v.
func (r *renderer) applyFilter(f *filterExpr, v value, sc *scope) (value, error) {
	args, kw, err := r.evalArgs(f.args, f.kwNames, f.kwValues, sc)
	if err != nil {
		return nil, err
	}
	out, err := filter(r, f.name, v, args, kw)
	if err != nil {
		return nil, fmt.Errorf("chattemplate: offset %d: filter %s: %w", f.pos, f.name, err)
	}
	return out, nil
}

// filter applies the named filter.
func filter(r *renderer, name string, v value, args []value, kw *dict) (value, error) {
	switch name {
	case "trim":
		s, err := wantString(v)
		if err != nil {
			return nil, err
		}
		if chars := arg(args, kw, 0, "chars", nil); chars != nil {
			return strings.Trim(s, str(chars)), nil
		}
		return strings.TrimFunc(s, isSpace), nil
	case "upper":
		return pyUpper(str(v)), nil
	case "lower":
		return pyLower(str(v)), nil
	case "capitalize":
		return pyCapitalize(str(v)), nil
	case "title":
		return titleFilter(str(v)), nil
	case "string":
		return str(v), nil
	case "safe", "e", "escape", "forceescape":
		if name == "safe" {
			return v, nil
		}
		return htmlEscape(str(v)), nil
	case "length", "count":
		return length(v)
	case "tojson":
		indent := ""
		switch n := arg(args, kw, 0, "indent", nil).(type) {
		case int64:
			indent = strings.Repeat(" ", int(n))
		case string:
			indent = n
		}
		sortKeys := truthy(arg(args, kw, 99, "sort_keys", false))
		var b strings.Builder
		if err := toJSON(&b, v, indent, 0, sortKeys); err != nil {
			return nil, err
		}
		return b.String(), nil
	case "join":
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		sep := str(arg(args, kw, 0, "d", ""))
		get := attrGetter(arg(args, kw, 1, "attribute", nil), nil)
		parts := make([]string, len(items))
		for i, it := range items {
			if it, err = get(it); err != nil {
				return nil, err
			}
			parts[i] = str(it)
		}
		return strings.Join(parts, sep), nil
	case "default", "d":
		def := arg(args, kw, 0, "default_value", "")
		boolean := truthy(arg(args, kw, 1, "boolean", false))
		if _, undef := v.(undefined); undef || boolean && !truthy(v) {
			return def, nil
		}
		return v, nil
	case "first", "last":
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		if len(items) == 0 {
			return undefined{name: name}, nil
		}
		if name == "first" {
			return items[0], nil
		}
		return items[len(items)-1], nil
	case "list":
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		return &list{items: append([]value{}, items...)}, nil
	case "reverse":
		if s, ok := v.(string); ok {
			runes := []rune(s)
			for i, j := 0, len(runes)-1; i < j; i, j = i+1, j-1 {
				runes[i], runes[j] = runes[j], runes[i]
			}
			return string(runes), nil
		}
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		out := &list{items: make([]value, len(items))}
		for i, it := range items {
			out.items[len(items)-1-i] = it
		}
		return out, nil
	case "sort", "unique", "min", "max":
		return sortFilter(name, v, args, kw)
	case "dictsort":
		d, ok := v.(*dict)
		if !ok {
			return nil, fmt.Errorf("dictsort needs a dict, got %s", typeName(v))
		}
		return dictsort(d, args, kw)
	case "items":
		d, ok := v.(*dict)
		if !ok {
			if _, undef := v.(undefined); undef {
				return &list{}, nil
			}
			return nil, fmt.Errorf("items needs a dict, got %s", typeName(v))
		}
		return dictItems(d), nil
	case "int":
		return toInt(v, arg(args, kw, 0, "default", int64(0)))
	case "float":
		return toFloatFilter(v, arg(args, kw, 0, "default", 0.0))
	case "abs":
		switch x := v.(type) {
		case int64, *big.Int:
			if c, _ := cmpNumbers(x, int64(0)); c < 0 {
				return intArith("-", int64(0), x)
			}
			return x, nil
		case float64:
			return math.Abs(x), nil
		case bool:
			return boolInt(x), nil
		}
		return nil, fmt.Errorf("bad operand type for abs(): %s", typeName(v))
	case "round":
		return roundFilter(v, args, kw)
	case "replace":
		s := str(v)
		old, repl := str(arg(args, kw, 0, "old", "")), str(arg(args, kw, 1, "new", ""))
		n := -1
		if c, ok := arg(args, kw, 2, "count", nil).(int64); ok {
			n = int(c)
		}
		return strings.Replace(s, old, repl, n), nil
	case "indent":
		return indentFilter(v, args, kw)
	case "wordcount":
		return wordcount(str(v)), nil
	case "format":
		return formatFilter(v, args, kw)
	case "truncate":
		return truncate(v, args, kw)
	case "center":
		return stringMethod(str(v), "center")([]value{arg(args, kw, 0, "width", int64(80))}, nil)
	case "striptags":
		return striptags(str(v)), nil
	case "sum":
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		var total value = arg(args, kw, 1, "start", int64(0))
		get := attrGetter(arg(args, kw, 0, "attribute", nil), nil)
		for _, it := range items {
			if it, err = get(it); err != nil {
				return nil, err
			}
			if total, err = arithmetic("+", total, it); err != nil {
				return nil, err
			}
		}
		return total, nil
	case "map":
		return mapFilter(r, v, args, kw)
	case "groupby":
		return groupby(v, args, kw)
	case "wordwrap":
		s, ok := v.(string)
		if !ok {
			return nil, fmt.Errorf("wordwrap needs a string, got %s", typeName(v))
		}
		width, ok := arg(args, kw, 0, "width", int64(79)).(int64)
		if !ok {
			return nil, errors.New("wordwrap: width must be an integer")
		}
		wrapstring := arg(args, kw, 2, "wrapstring", nil)
		if wrapstring == nil {
			wrapstring = "\n"
		}
		return wordwrap(s, width, truthy(arg(args, kw, 1, "break_long_words", true)),
			truthy(arg(args, kw, 3, "break_on_hyphens", true)), str(wrapstring))
	case "select", "reject", "selectattr", "rejectattr":
		return selectFilter(name, v, args)
	case "batch":
		items, err := iterate(v)
		if err != nil {
			return nil, err
		}
		n, ok := arg(args, kw, 0, "linecount", nil).(int64)
		if !ok || n <= 0 {
			return nil, errors.New("batch needs a positive size")
		}
		out := &list{}
		for i := 0; i < len(items); i += int(n) {
			out.items = append(out.items, &list{items: append([]value{}, items[i:min(len(items), i+int(n))]...)})
		}
		return out, nil
	}
	return nil, fmt.Errorf("unknown filter %q", name)
}

func wantString(v value) (string, error) {
	switch x := v.(type) {
	case string:
		return x, nil
	case undefined:
		return "", nil
	}
	return str(v), nil
}

func length(v value) (value, error) {
	switch x := v.(type) {
	case string:
		return int64(runeLen(x)), nil
	case *list:
		return int64(len(x.items)), nil
	case *dict:
		return int64(len(x.keys)), nil
	case undefined:
		return int64(0), nil
	}
	return nil, fmt.Errorf("object of type %s has no len()", typeName(v))
}

func dictItems(d *dict) *list {
	out := &list{}
	for _, k := range d.keys {
		out.items = append(out.items, &list{items: []value{k, d.at(k)}, tuple: true})
	}
	return out
}

// titleFilter is Jinja2's title filter: a word begins after whitespace, '-', '(', '{', '[' or '<'
// (not after an apostrophe, as in str.title); its first character is uppercased (str.upper, not
// titlecased), the rest of it lowercased as a string of its own (str.lower).
func titleFilter(s string) string {
	isSep := func(r rune) bool { return isSpace(r) || strings.ContainsRune("-({[<", r) }
	var b strings.Builder
	for s != "" {
		r, size := utf8.DecodeRuneInString(s)
		sep := isSep(r)
		n := strings.IndexFunc(s, func(r rune) bool { return isSep(r) != sep })
		if n < 0 {
			n = len(s)
		}
		if sep {
			b.WriteString(s[:n]) // these characters have no case
		} else {
			b.WriteString(pyUpper(s[:size]))
			b.WriteString(pyLower(s[size:n]))
		}
		s = s[n:]
	}
	return b.String()
}

func htmlEscape(s string) string { return htmlEscaper.Replace(s) }

// htmlEscaper is markupsafe's escaping, built once: a Replacer is safe for concurrent use.
var htmlEscaper = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;", `"`, "&#34;", "'", "&#39;")

func toInt(v, def value) (value, error) {
	switch x := v.(type) {
	case int64, *big.Int:
		return x, nil
	case float64:
		return floatToInt(x, def)
	case bool:
		return boolInt(x), nil
	case string:
		if n, err := strconv.ParseInt(strings.TrimSpace(x), 10, 64); err == nil {
			return n, nil
		}
		if b, ok := new(big.Int).SetString(strings.TrimSpace(x), 10); ok {
			return normInt(b)
		}
		if f, err := strconv.ParseFloat(strings.TrimSpace(x), 64); err == nil {
			return floatToInt(f, def)
		}
	}
	return def, nil
}

// floatToInt is Python's int(f): truncated toward zero, exact however large; the default for
// infinities and NaN (Jinja2's int filter falls back to it).
func floatToInt(f float64, def value) (value, error) {
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return def, nil
	}
	f = math.Trunc(f)
	if f >= -(1<<63) && f < 1<<63 {
		return int64(f), nil
	}
	b, _ := big.NewFloat(f).Int(nil)
	return normInt(b)
}

func toFloatFilter(v, def value) (value, error) {
	switch x := v.(type) {
	case int64, *big.Int, float64:
		return floatOf(x)
	case bool:
		return float64(boolInt(x)), nil
	case string:
		if f, err := strconv.ParseFloat(strings.TrimSpace(x), 64); err == nil {
			return f, nil
		}
	}
	return def, nil
}

// dictsort is Jinja2's dictsort(case_sensitive=False, by="key", reverse=False): the (key, value) pairs
// sorted by key or value, strings compared lowercased unless case_sensitive, ties kept in order.
func dictsort(d *dict, args []value, kw *dict) (value, error) {
	caseSensitive := truthy(arg(args, kw, 0, "case_sensitive", false))
	by := str(arg(args, kw, 1, "by", "key"))
	reverse := truthy(arg(args, kw, 2, "reverse", false))
	if by != "key" && by != "value" {
		return nil, errors.New(`dictsort: you can only sort by either "key" or "value"`)
	}
	pairs := dictItems(d).items
	keys := make([]value, len(pairs))
	for i, p := range pairs {
		keys[i] = p.(*list).items[0]
		if by == "value" {
			keys[i] = p.(*list).items[1]
		}
		keys[i] = foldCase(keys[i], caseSensitive)
	}
	order, err := sortOrder(keys, reverse)
	if err != nil {
		return nil, err
	}
	out := &list{items: make([]value, len(pairs))}
	for i, o := range order {
		out.items[i] = pairs[o]
	}
	return out, nil
}

// roundFilter is Jinja2's round(precision=0, method="common"): "common" is Python's round, which
// rounds halves to even on the float's exact value and leaves an int an int; "ceil" and "floor" give
// floats.
func roundFilter(v value, args []value, kw *dict) (value, error) {
	if b, ok := v.(bool); ok {
		v = boolInt(b)
	}
	prec, _ := arg(args, kw, 0, "precision", int64(0)).(int64)
	method := str(arg(args, kw, 1, "method", "common"))
	if n, ok := v.(int64); ok && prec < -18 {
		v = big.NewInt(n) // 10**-prec is past int64
	}
	if b, ok := v.(*big.Int); ok && method == "common" {
		if prec >= 0 {
			return normInt(b)
		}
		// Halves to even at 10**-prec, exactly.
		unit := new(big.Int).Exp(big.NewInt(10), big.NewInt(min(-prec, maxIntBits)), nil)
		q, r := new(big.Int).QuoRem(b, unit, new(big.Int))
		if r.Sign() < 0 {
			q.Sub(q, big.NewInt(1))
			r.Add(r, unit)
		}
		if c := new(big.Int).Lsh(r, 1).Cmp(unit); c > 0 || c == 0 && q.Bit(0) == 1 {
			q.Add(q, big.NewInt(1))
		}
		return normInt(q.Mul(q, unit))
	}
	f, err := floatOf(v)
	if err != nil {
		return nil, fmt.Errorf("round needs a number, got %s", typeName(v))
	}
	p := math.Pow(10, float64(prec))
	switch method {
	case "ceil":
		return math.Ceil(f*p) / p, nil
	case "floor":
		return math.Floor(f*p) / p, nil
	case "common":
	default:
		return nil, errors.New("round: method must be common, ceil or floor")
	}
	if n, isInt := v.(int64); isInt {
		if prec >= 0 {
			return n, nil
		}
		unit := int64(math.Pow10(int(-prec)))
		q, r := n/unit, n%unit
		if r < 0 {
			q, r = q-1, r+unit
		}
		if 2*r > unit || 2*r == unit && q%2 != 0 {
			q++
		}
		return q * unit, nil
	}
	if math.IsInf(f, 0) || math.IsNaN(f) {
		return f, nil
	}
	if prec < 0 {
		return math.RoundToEven(f*p) / p, nil
	}
	// FormatFloat rounds the exact binary value to prec decimals, halves to even, as Python does.
	r, err := strconv.ParseFloat(strconv.FormatFloat(f, 'f', int(min(prec, 400)), 64), 64)
	if err != nil {
		return nil, err
	}
	return r, nil
}

func sortFilter(name string, v value, args []value, kw *dict) (value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	var reverse, caseSensitive bool
	var attr value
	if name == "sort" {
		reverse = truthy(arg(args, kw, 0, "reverse", false))
		caseSensitive = truthy(arg(args, kw, 1, "case_sensitive", false))
		attr = arg(args, kw, 2, "attribute", nil)
	} else {
		caseSensitive = truthy(arg(args, kw, 0, "case_sensitive", false))
		attr = arg(args, kw, 1, "attribute", nil)
	}
	get := attrGetter(attr, nil)
	key := func(x value) (value, error) {
		x, err := get(x)
		return foldCase(x, caseSensitive), err
	}
	if name == "sort" {
		// sort keys each item by a list (Jinja2's make_multi_attrgetter): of the keys its attribute names,
		// comma-separated, or of the one. Lists compare their items for equality first, so equal items
		// that cannot be ordered (None, dicts, undefined attributes) still sort, as in Python.
		gets := []func(value) (value, error){get}
		if a, ok := attr.(string); ok {
			gets = gets[:0]
			for _, part := range strings.Split(a, ",") {
				gets = append(gets, attrGetter(part, nil))
			}
		}
		key = func(x value) (value, error) {
			k := &list{items: make([]value, len(gets))}
			for i, g := range gets {
				v, err := g(x)
				if err != nil {
					return nil, err
				}
				k.items[i] = foldCase(v, caseSensitive)
			}
			return k, nil
		}
	}
	keys := make([]value, len(items))
	for i, it := range items {
		if keys[i], err = key(it); err != nil {
			return nil, err
		}
	}
	switch name {
	case "unique": // a set of the keys, as in Jinja2: they must be hashable
		out := &list{}
		seen := map[any]bool{}
		for i, it := range items {
			h, err := hashKey(keys[i])
			if err != nil {
				return nil, err
			}
			if !seen[h] {
				seen[h] = true
				out.items = append(out.items, it)
			}
		}
		return out, nil
	case "min", "max":
		if len(items) == 0 {
			return undefined{name: name}, nil
		}
		best := 0
		for i := 1; i < len(items); i++ {
			c, err := compare(keys[i], keys[best])
			if err != nil {
				return nil, err
			}
			if name == "min" && c < 0 || name == "max" && c > 0 {
				best = i
			}
		}
		return items[best], nil
	}
	order, err := sortOrder(keys, reverse)
	if err != nil {
		return nil, err
	}
	out := &list{items: make([]value, len(items))}
	for i, o := range order {
		out.items[i] = items[o]
	}
	return out, nil
}

// foldCase is a sort or group key as Jinja2's ignore_case makes it: a string lowercased unless
// caseSensitive, any other value as it is.
func foldCase(v value, caseSensitive bool) value {
	if s, ok := v.(string); ok && !caseSensitive {
		return pyLower(s)
	}
	return v
}

// attrGetter is Jinja2's make_attrgetter: a function that looks attribute up in an item, an item or
// attribute name (item first, as obj[name] does) or a dotted path of them ("a.b"), whose parts of
// digits are list indexes ("messages.0"); where def is not None, it stands for each part not found.
// A nil attribute gives the item itself.
func attrGetter(attribute, def value) func(value) (value, error) {
	var parts []value
	switch a := attribute.(type) {
	case nil:
	case string:
		for _, p := range strings.Split(a, ".") {
			if n, err := strconv.ParseInt(p, 10, 64); err == nil && strings.Trim(p, "0123456789") == "" {
				parts = append(parts, n)
			} else {
				parts = append(parts, p)
			}
		}
	default:
		parts = []value{a}
	}
	return func(x value) (value, error) {
		for _, p := range parts {
			var err error
			if x, err = getItem(x, p); err != nil {
				return nil, err
			}
			if _, undef := x.(undefined); undef && def != nil {
				x = def
			}
		}
		return x, nil
	}
}

// groupby is Jinja2's groupby(attribute, default=None, case_sensitive=False): the items sorted by
// their attribute (strings lowercased unless case_sensitive), in (grouper, list) tuples of the items
// with equal ones; grouper is the first item's attribute, as it is.
func groupby(v value, args []value, kw *dict) (value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	get := attrGetter(arg(args, kw, 0, "attribute", nil), arg(args, kw, 1, "default", nil))
	caseSensitive := truthy(arg(args, kw, 2, "case_sensitive", false))
	raw, keys := make([]value, len(items)), make([]value, len(items))
	for i, it := range items {
		if raw[i], err = get(it); err != nil {
			return nil, err
		}
		keys[i] = foldCase(raw[i], caseSensitive)
	}
	order, err := sortOrder(keys, false)
	if err != nil {
		return nil, err
	}
	out := &list{}
	var group *list
	var groupKey value
	for _, i := range order {
		if group == nil || !equal(keys[i], groupKey) {
			grouper := raw[i]
			groupKey, group = keys[i], &list{}
			out.items = append(out.items, &list{items: []value{grouper, group}, tuple: true, fields: groupFields})
		}
		group.items = append(group.items, items[i])
	}
	return out, nil
}

// groupFields name the items of groupby's tuples (Jinja2's _GroupTuple).
var groupFields = []string{"grouper", "list"}

func indentFilter(v value, args []value, kw *dict) (value, error) {
	s := str(v)
	width := "    "
	switch w := arg(args, kw, 0, "width", int64(4)).(type) {
	case int64:
		width = strings.Repeat(" ", int(w))
	case string:
		width = w
	}
	first := truthy(arg(args, kw, 1, "first", false))
	blank := truthy(arg(args, kw, 2, "blank", false))
	lines := strings.Split(s, "\n")
	for i, l := range lines {
		if i == 0 && !first {
			continue
		}
		if l == "" && !blank {
			continue
		}
		lines[i] = width + l
	}
	return strings.Join(lines, "\n"), nil
}

func mapFilter(r *renderer, v value, args []value, kw *dict) (value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	out := &list{}
	if kw != nil && hasKey(kw, "attribute") {
		def, _ := kw.get("default")
		get := attrGetter(kw.m["attribute"], def)
		for _, it := range items {
			x, err := get(it)
			if err != nil {
				return nil, err
			}
			out.items = append(out.items, x)
		}
		return out, nil
	}
	if len(args) == 0 {
		return nil, errors.New("map needs a filter name or attribute=")
	}
	name := str(args[0])
	for _, it := range items {
		x, err := filter(r, name, it, args[1:], kw)
		if err != nil {
			return nil, err
		}
		out.items = append(out.items, x)
	}
	return out, nil
}

func selectFilter(name string, v value, args []value) (value, error) {
	items, err := iterate(v)
	if err != nil {
		return nil, err
	}
	byAttr := strings.HasSuffix(name, "attr")
	keep := strings.HasPrefix(name, "select")
	var get func(value) (value, error)
	if byAttr && len(items) > 0 { // as Jinja2: no attribute is an error only where there are items
		if len(args) == 0 {
			return nil, errors.New("missing attribute")
		}
		get = attrGetter(args[0], nil)
	}
	out := &list{}
	for _, it := range items {
		x := it
		rest := args
		if byAttr {
			if x, err = get(it); err != nil {
				return nil, err
			}
			rest = args[1:]
		}
		var ok bool
		if len(rest) == 0 {
			ok = truthy(x)
		} else if ok, err = runTest(str(rest[0]), x, rest[1:]); err != nil {
			return nil, err
		}
		if ok == keep {
			out.items = append(out.items, it)
		}
	}
	return out, nil
}

// runTest evaluates "v is name(args)".
func runTest(name string, v value, args []value) (bool, error) {
	a0 := func() (value, error) {
		if len(args) == 0 {
			return nil, fmt.Errorf("test %s needs an argument", name)
		}
		return args[0], nil
	}
	switch name {
	case "defined":
		_, undef := v.(undefined)
		return !undef, nil
	case "undefined":
		_, undef := v.(undefined)
		return undef, nil
	case "none":
		return v == nil, nil
	case "string":
		_, ok := v.(string)
		return ok, nil
	case "number": // Jinja2's number test is isinstance(v, Number): bool is an int
		_, isBool := v.(bool)
		return isNumber(v) || isBool, nil
	case "integer": // Jinja2's integer test excludes bool
		return isInt(v), nil
	case "float":
		_, ok := v.(float64)
		return ok, nil
	case "boolean":
		_, ok := v.(bool)
		return ok, nil
	case "true":
		b, ok := v.(bool)
		return ok && b, nil
	case "false":
		b, ok := v.(bool)
		return ok && !b, nil
	case "mapping":
		_, ok := v.(*dict)
		return ok, nil
	case "iterable":
		switch v.(type) {
		case string, *list, *dict:
			return true, nil
		}
		return false, nil
	case "sequence":
		switch v.(type) {
		case string, *list, *dict:
			return true, nil
		}
		return false, nil
	case "callable":
		_, ok := v.(*function)
		return ok, nil
	case "odd", "even":
		if !isInt(v) {
			return false, fmt.Errorf("test %s needs an integer, got %s", name, typeName(v))
		}
		return (toBig(v).Bit(0) == 1) == (name == "odd"), nil
	case "divisibleby":
		d, err := a0()
		if err != nil {
			return false, err
		}
		m, err := arithmetic("%", v, d)
		if err != nil {
			return false, err
		}
		return equal(m, int64(0)), nil
	case "lower":
		return pyIsLowerString(str(v)), nil
	case "upper":
		return pyIsUpperString(str(v)), nil
	case "eq", "equalto", "==", "ne", "!=", "lt", "<", "le", "<=", "gt", ">", "ge", ">=", "in", "sameas":
		b, err := a0()
		if err != nil {
			return false, err
		}
		op := map[string]string{"eq": "==", "equalto": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">=", "sameas": "=="}[name]
		if op == "" {
			op = name
		}
		if name == "sameas" {
			// Python's "is": containers are the same object; None, True and False are singletons;
			// other values are taken as identical when of one type and equal (Python's small ints
			// and interned strings).
			switch v.(type) {
			case *list, *dict, *function:
				return sameContainer(v, b) || v == b, nil
			}
			return reflect.TypeOf(v) == reflect.TypeOf(b) && equal(v, b), nil
		}
		res, err := binary(op, v, b)
		if err != nil {
			return false, err
		}
		return res.(bool), nil
	}
	return false, fmt.Errorf("unknown test %q", name)
}
