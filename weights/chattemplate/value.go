package chattemplate

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/big"
	"reflect"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode"
)

// value is a template value: nil (None), undefined, bool, int64 or *big.Int (an int, see
// normInt), float64, string, *list, *dict, *function.
type value = any

// undefined is the value of a missing name, attribute or item. It renders as the empty string, is
// false, iterates as empty, and fails in arithmetic, as Jinja2's default Undefined does.
type undefined struct{ name string }

// list is a Python list (or tuple): mutable through append, shared by reference.
type list struct {
	items []value
	tuple bool
	// fields name the items of a named tuple, attributes besides indexes.
	fields []string
	// view names a dict view (dict_keys, dict_values, dict_items: what a dict's keys, values and items
	// methods return), which prints as Python prints it and is not JSON-serializable.
	view string
}

// dict is a Python dict in insertion order (tojson and items() keep it). Its keys are strings, or
// other hashable values as in a template's dict literal {1: 'a', none: 'b'}: numbers, None, tuples.
type dict struct {
	keys []value       // each key as it was first set
	m    map[any]value // the values by hashKey of their key: a string key is itself
	// namespace marks the object namespace() returns: its attributes can be set.
	namespace bool
}

func newDict() *dict { return &dict{m: map[any]value{}} }

// set sets the value of the string key k.
func (d *dict) set(k string, v value) {
	if _, ok := d.m[k]; !ok {
		d.keys = append(d.keys, k)
	}
	d.m[k] = v
}

// setKey sets the value of key k, which must be hashable; a key equal to one already there (1 and
// 1.0 and True) keeps the first one and takes the new value, as in Python.
func (d *dict) setKey(k, v value) error {
	h, err := hashKey(k)
	if err != nil {
		return err
	}
	if _, ok := d.m[h]; !ok {
		d.keys = append(d.keys, k)
	}
	d.m[h] = v
	return nil
}

// get returns the value of the string key k.
func (d *dict) get(k string) (value, bool) {
	v, ok := d.m[k]
	return v, ok
}

// lookup returns the value of key k; an unhashable k is an error.
func (d *dict) lookup(k value) (value, bool, error) {
	h, err := hashKey(k)
	if err != nil {
		return nil, false, err
	}
	v, ok := d.m[h]
	return v, ok, nil
}

// at returns the value of k, one of d.keys.
func (d *dict) at(k value) value {
	h, _ := hashKey(k)
	return d.m[h]
}

// update sets each key of src in d.
func (d *dict) update(src *dict) {
	for _, k := range src.keys {
		d.setKey(k, src.at(k)) // src's keys are hashable
	}
}

// bigKey, floatKey and tupleKey are the hashKey of an int past int64, of a float that is no int,
// and of a tuple; undefinedKey is that of undefined (Jinja2's Undefined objects are equal and hash
// alike).
type (
	bigKey       string
	tupleKey     string
	undefinedKey struct{}
)

// hashKey is the Go map key of a Python dict key: keys that are equal in Python (1, 1.0 and True;
// 0, -0.0 and False; 2 ** 70 and 2.0 ** 70) give the same one, others different ones. A list or
// dict (or a tuple holding one) is unhashable, an error as in Python.
func hashKey(k value) (any, error) {
	switch x := k.(type) {
	case string, nil, int64, *function:
		return x, nil
	case bool:
		return boolInt(x), nil
	case *big.Int:
		if x.IsInt64() {
			return x.Int64(), nil
		}
		return bigKey(x.String()), nil
	case float64:
		if x != math.Trunc(x) || math.IsInf(x, 0) {
			return x, nil
		}
		if x >= -(1<<63) && x < 1<<63 {
			return int64(x), nil
		}
		b, _ := big.NewFloat(x).Int(nil)
		return bigKey(b.String()), nil
	case undefined:
		return undefinedKey{}, nil
	case *list:
		if !x.tuple {
			break
		}
		var b strings.Builder
		for _, it := range x.items {
			h, err := hashKey(it)
			if err != nil {
				return nil, err
			}
			switch h := h.(type) {
			case *function:
				fmt.Fprintf(&b, "%T %p;", h, h)
			default:
				fmt.Fprintf(&b, "%T %q;", h, fmt.Sprint(h))
			}
		}
		return tupleKey(b.String()), nil
	}
	return nil, fmt.Errorf("unhashable type: '%s'", typeName(k))
}

// function is a callable: a global, a method bound to its receiver, or a macro.
type function struct {
	name string
	call func(args []value, kw *dict) (value, error)
}

// fromGo converts a Go value (as encoding/json decodes, or the package's own types) to a template
// value. Maps become dicts with sorted keys, since Go maps have no order; a json.RawMessage becomes
// the value its JSON text holds, objects as dicts with their keys in the text's order (fromJSON).
func fromGo(v any) (value, error) {
	switch x := v.(type) {
	case nil, bool, int64, float64, string, *list, *dict, *function, undefined:
		return x, nil
	case json.RawMessage:
		return fromJSON(x)
	case int:
		return int64(x), nil
	case int32:
		return int64(x), nil
	case float32:
		return float64(x), nil
	case json.Number:
		if n, err := x.Int64(); err == nil {
			return n, nil
		}
		if !strings.ContainsAny(string(x), ".eE") { // an integer past int64: exact, as in Python
			if b, ok := new(big.Int).SetString(string(x), 10); ok {
				return normInt(b)
			}
		}
		f, err := x.Float64()
		if err != nil {
			return nil, fmt.Errorf("number %s: %w", x, err)
		}
		return f, nil
	case []any:
		l := &list{items: make([]value, len(x))}
		for i, e := range x {
			c, err := fromGo(e)
			if err != nil {
				return nil, err
			}
			l.items[i] = c
		}
		return l, nil
	case []string:
		l := &list{items: make([]value, len(x))}
		for i, e := range x {
			l.items[i] = e
		}
		return l, nil
	case map[string]any:
		keys := make([]string, 0, len(x))
		for k := range x {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		d := newDict()
		for _, k := range keys {
			c, err := fromGo(x[k])
			if err != nil {
				return nil, err
			}
			d.set(k, c)
		}
		return d, nil
	}
	return nil, fmt.Errorf("unsupported value of type %T", v)
}

// typeName names a value's type the Python way, for error messages.
func typeName(v value) string {
	switch x := v.(type) {
	case nil:
		return "NoneType"
	case undefined:
		return "Undefined"
	case bool:
		return "bool"
	case int64, *big.Int:
		return "int"
	case float64:
		return "float"
	case string:
		return "str"
	case *list:
		if x.tuple {
			return "tuple"
		}
		return "list"
	case *dict:
		if x.namespace {
			return "Namespace"
		}
		return "dict"
	case *function:
		return "function"
	case *loopInfo:
		return "LoopContext"
	}
	return fmt.Sprintf("%T", v)
}

// truthy is Python's bool(v).
func truthy(v value) bool {
	switch x := v.(type) {
	case nil, undefined:
		return false
	case bool:
		return x
	case int64:
		return x != 0
	case float64:
		return x != 0
	case string:
		return x != ""
	case *list:
		return len(x.items) > 0
	case *dict:
		return x.namespace || len(x.keys) > 0
	}
	return true
}

// str is Python's str(v), which {{ }} prints (undefined prints nothing).
func str(v value) string {
	switch x := v.(type) {
	case string:
		return x
	case undefined:
		return ""
	}
	return repr(v)
}

// maxValueDepth bounds the recursion of repr, equal and tojson into nested lists and dicts: a
// template can build a list that contains itself, which would otherwise recurse until the stack is
// exhausted (a fatal error). Python prints such a cycle as [...] and raises on comparing or
// serialising it; so do these, past this depth.
const maxValueDepth = 1000

// sameContainer reports whether a and b are the same list or dict.
func sameContainer(a, b value) bool {
	switch x := a.(type) {
	case *list:
		y, ok := b.(*list)
		return ok && x == y
	case *dict:
		y, ok := b.(*dict)
		return ok && x == y
	}
	return false
}

// repr is Python's repr(v).
func repr(v value) string { return reprPath(v, nil) }

// reprPath is repr of v inside the containers of path: a container that contains itself prints as
// [...] or {...}, as in Python.
func reprPath(v value, path []value) string {
	for _, p := range path {
		if sameContainer(v, p) || len(path) > maxValueDepth {
			if _, ok := v.(*dict); ok {
				return "{...}"
			}
			return "[...]"
		}
	}
	switch v.(type) {
	case *list, *dict:
		path = append(path, v)
	}
	switch x := v.(type) {
	case nil:
		return "None"
	case undefined:
		return "Undefined"
	case bool:
		if x {
			return "True"
		}
		return "False"
	case int64:
		return strconv.FormatInt(x, 10)
	case *big.Int:
		return x.String()
	case float64:
		return formatFloat(x)
	case string:
		return pyQuote(x)
	case *list:
		parts := make([]string, len(x.items))
		for i, e := range x.items {
			parts[i] = reprPath(e, path)
		}
		if x.tuple {
			if len(parts) == 1 {
				return "(" + parts[0] + ",)"
			}
			return "(" + strings.Join(parts, ", ") + ")"
		}
		if x.view != "" {
			return x.view + "([" + strings.Join(parts, ", ") + "])"
		}
		return "[" + strings.Join(parts, ", ") + "]"
	case *dict:
		parts := make([]string, len(x.keys))
		for i, k := range x.keys {
			parts[i] = reprPath(k, path) + ": " + reprPath(x.at(k), path)
		}
		if x.namespace {
			return "<Namespace {" + strings.Join(parts, ", ") + "}>"
		}
		return "{" + strings.Join(parts, ", ") + "}"
	case *function:
		return "<function " + x.name + ">"
	case *loopInfo:
		return fmt.Sprintf("<LoopContext %d/%d>", x.i+1, len(x.items))
	}
	return fmt.Sprint(v)
}

// formatFloat prints a float as Python's repr does: shortest round-trip digits, always with a
// decimal point or an exponent.
func formatFloat(f float64) string {
	switch {
	case math.IsInf(f, 1):
		return "inf"
	case math.IsInf(f, -1):
		return "-inf"
	case math.IsNaN(f):
		return "nan"
	}
	abs := math.Abs(f)
	if abs != 0 && (abs < 1e-4 || abs >= 1e16) {
		s := strconv.FormatFloat(f, 'e', -1, 64)
		// Python writes 1e-05 and 1e+16: at least two exponent digits, as Go does.
		return s
	}
	s := strconv.FormatFloat(f, 'f', -1, 64)
	if !strings.ContainsAny(s, ".") {
		s += ".0"
	}
	return s
}

// pyQuote quotes a string as Python's repr does.
func pyQuote(s string) string {
	quote := byte('\'')
	if strings.ContainsRune(s, '\'') && !strings.ContainsRune(s, '"') {
		quote = '"'
	}
	var b strings.Builder
	b.WriteByte(quote)
	for _, r := range s {
		switch {
		case r == '\\':
			b.WriteString(`\\`)
		case r == rune(quote):
			b.WriteByte('\\')
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case !pyPrintable(r):
			switch {
			case r < 0x100:
				fmt.Fprintf(&b, `\x%02x`, r)
			case r < 0x10000:
				fmt.Fprintf(&b, `\u%04x`, r)
			default:
				fmt.Fprintf(&b, `\U%08x`, r)
			}
		default:
			b.WriteRune(r)
		}
	}
	b.WriteByte(quote)
	return b.String()
}

// pyPrintable is Python's str.isprintable for one character, which repr leaves unescaped: assigned,
// and neither a control, format, surrogate, private-use or separator character (the space excepted).
func pyPrintable(r rune) bool {
	if r < 0x7f {
		return r >= 0x20
	}
	return unicode.In(r, unicode.L, unicode.M, unicode.N, unicode.P, unicode.S, unicode.Z, unicode.C) &&
		!unicode.In(r, unicode.Cc, unicode.Cf, unicode.Cs, unicode.Co, unicode.Zl, unicode.Zp, unicode.Zs)
}

// equal is Python's ==.
func equal(a, b value) bool { return equalDepth(a, b, 0) }

func equalDepth(a, b value, depth int) bool {
	if depth > maxValueDepth {
		return false // Python raises RecursionError
	}
	if sameContainer(a, b) {
		return true // Python compares items by identity first
	}
	if _, ok := a.(*big.Int); ok {
		c, ok := cmpNumbers(a, b)
		return ok && c == 0
	}
	if _, ok := b.(*big.Int); ok {
		c, ok := cmpNumbers(a, b)
		return ok && c == 0
	}
	switch x := a.(type) {
	case int64:
		switch y := b.(type) {
		case int64:
			return x == y
		case float64:
			return float64(x) == y
		case bool:
			return x == boolInt(y)
		}
		return false
	case float64:
		switch y := b.(type) {
		case int64:
			return x == float64(y)
		case float64:
			return x == y
		case bool:
			return x == float64(boolInt(y))
		}
		return false
	case bool:
		switch y := b.(type) {
		case bool:
			return x == y
		case int64, float64:
			return equalDepth(boolInt(x), y, depth+1)
		}
		return false
	case *list:
		y, ok := b.(*list)
		if !ok || len(x.items) != len(y.items) || x.tuple != y.tuple || x.view != y.view {
			return false
		}
		switch x.view {
		case "dict_values": // compared by identity (sameContainer, above)
			return false
		case "dict_keys", "dict_items": // set-like: the same members in any order
			for _, e := range x.items {
				if !slices.ContainsFunc(y.items, func(f value) bool { return equalDepth(e, f, depth+1) }) {
					return false
				}
			}
			return true
		}
		for i := range x.items {
			if !equalDepth(x.items[i], y.items[i], depth+1) {
				return false
			}
		}
		return true
	case *dict:
		y, ok := b.(*dict)
		if !ok || len(x.keys) != len(y.keys) {
			return false
		}
		for _, k := range x.keys {
			w, ok, _ := y.lookup(k)
			if !ok || !equalDepth(x.at(k), w, depth+1) {
				return false
			}
		}
		return true
	case undefined:
		_, ok := b.(undefined)
		return ok
	case *function:
		return a == b
	}
	return reflect.TypeOf(a) == reflect.TypeOf(b) && a == b
}

// isSmallNumber reports whether v is an int64 or a float64.
func isSmallNumber(v value) bool {
	switch v.(type) {
	case int64, float64:
		return true
	}
	return false
}

func boolInt(b bool) int64 {
	if b {
		return 1
	}
	return 0
}

// compare orders numbers with numbers, strings with strings and lists element-wise (Python's <);
// other pairs are an error.
func compare(a, b value) (int, error) { return compareDepth(a, b, 0) }

func compareDepth(a, b value, depth int) (int, error) {
	if depth > maxValueDepth {
		return 0, errors.New("maximum recursion depth exceeded in comparison")
	}
	if a, ok := a.(bool); ok {
		return compareDepth(boolInt(a), b, depth+1)
	}
	if b, ok := b.(bool); ok {
		return compareDepth(a, boolInt(b), depth+1)
	}
	if c, ok := cmpNumbers(a, b); ok && (!isSmallNumber(a) || !isSmallNumber(b)) {
		return c, nil
	}
	switch x := a.(type) {
	case int64:
		switch y := b.(type) {
		case int64:
			return cmpOrdered(x, y), nil
		case float64:
			return cmpOrdered(float64(x), y), nil
		}
	case float64:
		switch y := b.(type) {
		case int64:
			return cmpOrdered(x, float64(y)), nil
		case float64:
			return cmpOrdered(x, y), nil
		}
	case string:
		if y, ok := b.(string); ok {
			return strings.Compare(x, y), nil
		}
	case *list:
		if y, ok := b.(*list); ok {
			for i := 0; i < len(x.items) && i < len(y.items); i++ {
				if equalDepth(x.items[i], y.items[i], depth+1) {
					continue
				}
				return compareDepth(x.items[i], y.items[i], depth+1)
			}
			return cmpOrdered(len(x.items), len(y.items)), nil
		}
	}
	return 0, fmt.Errorf("cannot compare %s with %s", typeName(a), typeName(b))
}

func cmpOrdered[T int | int64 | float64](a, b T) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// iterate returns the items a for loop visits: a list's items, a dict's keys, a string's
// characters; undefined and None iterate as empty.
func iterate(v value) ([]value, error) {
	switch x := v.(type) {
	case nil, undefined:
		return nil, nil
	case *list:
		return x.items, nil
	case *dict:
		return append([]value(nil), x.keys...), nil
	case string:
		var out []value
		for _, r := range x {
			out = append(out, string(r))
		}
		return out, nil
	}
	return nil, fmt.Errorf("%s is not iterable", typeName(v))
}

// toJSON writes v as Python's json.dumps(v, ensure_ascii=False, indent=indent) does: ", " and
// ": " separators without indent, "," and ": " with it.
func toJSON(b *strings.Builder, v value, indent string, depth int, sortKeys bool) error {
	newline := func(d int) {
		if indent != "" {
			b.WriteByte('\n')
			b.WriteString(strings.Repeat(indent, d))
		}
	}
	itemSep := ", "
	if indent != "" {
		itemSep = ","
	}
	if depth > maxValueDepth {
		return errors.New("tojson: circular reference or nesting too deep")
	}
	switch x := v.(type) {
	case nil, undefined:
		// An undefined value is null, where json.dumps of Jinja2's Undefined raises: a request's tool
		// without a description or parameters renders as vLLM renders it (its tools are model_dump()ed,
		// absent fields None), not as an error.
		b.WriteString("null")
	case bool:
		if x {
			b.WriteString("true")
		} else {
			b.WriteString("false")
		}
	case int64:
		b.WriteString(strconv.FormatInt(x, 10))
	case *big.Int:
		b.WriteString(x.String())
	case float64:
		switch {
		case math.IsNaN(x):
			b.WriteString("NaN")
		case math.IsInf(x, 1):
			b.WriteString("Infinity")
		case math.IsInf(x, -1):
			b.WriteString("-Infinity")
		default:
			b.WriteString(formatFloat(x))
		}
	case string:
		writeJSONString(b, x)
	case *list:
		if x.view != "" {
			return fmt.Errorf("tojson: Object of type %s is not JSON serializable", x.view)
		}
		if len(x.items) == 0 {
			b.WriteString("[]")
			return nil
		}
		b.WriteByte('[')
		for i, e := range x.items {
			if i > 0 {
				b.WriteString(itemSep)
			}
			newline(depth + 1)
			if err := toJSON(b, e, indent, depth+1, sortKeys); err != nil {
				return err
			}
		}
		newline(depth)
		b.WriteByte(']')
	case *dict:
		if len(x.keys) == 0 {
			b.WriteString("{}")
			return nil
		}
		keys := x.keys
		if sortKeys {
			var err error
			if keys, err = sortedValues(keys); err != nil {
				return err
			}
		}
		b.WriteByte('{')
		for i, k := range keys {
			if i > 0 {
				b.WriteString(itemSep)
			}
			newline(depth + 1)
			s, err := jsonKey(k)
			if err != nil {
				return err
			}
			writeJSONString(b, s)
			b.WriteString(": ")
			if err := toJSON(b, x.at(k), indent, depth+1, sortKeys); err != nil {
				return err
			}
		}
		newline(depth)
		b.WriteByte('}')
	default:
		return fmt.Errorf("object of type %s is not JSON serializable", typeName(v))
	}
	return nil
}

// jsonKey is the string Python's json.dumps writes for a dict key: a string as it is, a number as
// Python prints it, true, false and null; other keys are an error.
func jsonKey(k value) (string, error) {
	switch x := k.(type) {
	case string:
		return x, nil
	case nil:
		return "null", nil
	case bool, int64, *big.Int, float64:
		var b strings.Builder
		err := toJSON(&b, x, "", 0, false)
		return b.String(), err
	}
	return "", fmt.Errorf("keys must be str, int, float, bool or None, not %s", typeName(k))
}

// sortedValues returns vs sorted by Python's <, stably; values Python cannot order are an error.
func sortedValues(vs []value) ([]value, error) {
	order, err := sortOrder(vs, false)
	out := make([]value, len(vs))
	for i, o := range order {
		out[i] = vs[o]
	}
	return out, err
}

// sortOrder returns the indexes of keys in the order of a stable sort by Python's < (or >, where
// reverse); keys Python cannot order are an error.
func sortOrder(keys []value, reverse bool) ([]int, error) {
	order := make([]int, len(keys))
	for i := range order {
		order[i] = i
	}
	var err error
	sort.SliceStable(order, func(a, b int) bool {
		c, cerr := compare(keys[order[a]], keys[order[b]])
		if cerr != nil && err == nil {
			err = cerr
		}
		if reverse {
			return c > 0
		}
		return c < 0
	})
	return order, err
}

// writeJSONString quotes s as Python's json module does with ensure_ascii=False: only ", \ and
// control characters are escaped.
func writeJSONString(b *strings.Builder, s string) {
	b.WriteByte('"')
	for _, r := range s {
		switch r {
		case '"':
			b.WriteString(`\"`)
		case '\\':
			b.WriteString(`\\`)
		case '\n':
			b.WriteString(`\n`)
		case '\r':
			b.WriteString(`\r`)
		case '\t':
			b.WriteString(`\t`)
		case '\b':
			b.WriteString(`\b`)
		case '\f':
			b.WriteString(`\f`)
		default:
			if r < 0x20 {
				fmt.Fprintf(b, `\u%04x`, r)
			} else {
				b.WriteRune(r)
			}
		}
	}
	b.WriteByte('"')
}

// fromJSON decodes one JSON value into a template value as Python's json.loads does: objects as dicts
// with their keys in order (a repeated key keeps its first place and its last value), integers as
// int64 where they fit, other numbers as float64.
func fromJSON(data []byte) (value, error) {
	dec := json.NewDecoder(strings.NewReader(string(data)))
	dec.UseNumber()
	v, err := decodeJSONValue(dec, 0)
	if err != nil {
		return nil, fmt.Errorf("json: %w", err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, errors.New("json: more than one value")
	}
	return v, nil
}

func decodeJSONValue(dec *json.Decoder, depth int) (value, error) {
	if depth > maxValueDepth {
		return nil, errors.New("nesting too deep")
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			d := newDict()
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				v, err := decodeJSONValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				d.set(kt.(string), v)
			}
			_, err := dec.Token() // '}'
			return d, err
		case '[':
			l := &list{}
			for dec.More() {
				v, err := decodeJSONValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				l.items = append(l.items, v)
			}
			_, err := dec.Token() // ']'
			return l, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	case json.Number:
		return fromGo(t)
	default: // nil, bool, string
		return t, nil
	}
}
