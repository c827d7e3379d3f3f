package constraint

import (
	"encoding/json"
	"fmt"
	"net/url"
	"slices"
	"sort"
	"strconv"
	"strings"
)

// JSON Schema. The output is one JSON value, written compactly or with at most
// Options.MaxWhitespace whitespace characters between tokens. Keywords:
//   - type (a name or a list), enum, const; anyOf; oneOf when its alternatives are disjoint (their
//     types differ, or a required property's const or enum values do); allOf, merged into one
//     schema; $ref to the same document ("#", "#/$defs/…", "#/definitions/…", any JSON pointer),
//     recursion included; $defs and definitions;
//   - objects: properties (generated in the order the schema lists them), required,
//     additionalProperties (absent means any other property, after the listed ones),
//     patternProperties (when no key can match two patterns), propertyNames (of string keywords),
//     minProperties (at most one more than the required properties when other properties are
//     allowed: those may repeat a key, which counts once), maxProperties;
//   - arrays: items, prefixItems, items as a list and additionalItems (draft 4-2019), minItems,
//     maxItems;
//   - strings: minLength, maxLength (in characters), pattern (an ECMAScript regex, see regex.go),
//     format date-time, date, time, duration, uuid, email, hostname, ipv4 (each a subset of what
//     ajv-formats accepts in its full mode: hostnames of up to four labels of up to 20 characters,
//     durations without mixing weeks with other units, seconds without the leap second);
//   - numbers: minimum, maximum, exclusiveMinimum, exclusiveMaximum (numbers, or draft 4's
//     booleans), multipleOf (a decimal whose digits, point removed, are at most 10000), format
//     int32 and int64 (integers in that range) and float and double (any number); a number
//     with a bound or multipleOf is written without an exponent;
//   - annotations, which constrain nothing: title, description, default, examples, $schema,
//     $comment, deprecated, readOnly, writeOnly, and $id/id at the root.
// Every other keyword is refused by name. Strings are written as encoding/json and JSON.stringify
// write them: raw characters but for a quote, a backslash and control characters, which take their
// usual escapes.

// schemaKeywords are the keywords the compiler implements; annotations are accepted and ignored.
var (
	schemaKeywords = map[string]bool{
		"type": true, "enum": true, "const": true, "anyOf": true, "oneOf": true, "allOf": true, "$ref": true,
		"$defs": true, "definitions": true, "properties": true, "required": true, "additionalProperties": true,
		"items": true, "prefixItems": true, "additionalItems": true, "minItems": true, "maxItems": true,
		"minLength": true, "maxLength": true, "pattern": true, "format": true, "minimum": true, "maximum": true,
		"exclusiveMinimum": true, "exclusiveMaximum": true, "multipleOf": true, "minProperties": true, "maxProperties": true,
		"patternProperties": true, "propertyNames": true,
	}
	schemaAnnotations = map[string]bool{
		"title": true, "description": true, "default": true, "examples": true, "$schema": true, "$comment": true,
		"deprecated": true, "readOnly": true, "writeOnly": true,
	}
)

// JSON types, as a bit set.
const (
	tNull uint8 = 1 << iota
	tBoolean
	tInteger
	tNumber // numbers that need not be integers; a schema's "number" is tInteger|tNumber
	tString
	tArray
	tObject
	tAll = tNull | tBoolean | tInteger | tNumber | tString | tArray | tObject
)

var typeNames = map[string]uint8{
	"null": tNull, "boolean": tBoolean, "integer": tInteger, "number": tInteger | tNumber,
	"string": tString, "array": tArray, "object": tObject,
}

type schemaCompiler struct {
	g      *grammar
	b      *jsonBuilder
	root   any
	rules  map[any]int // $ref targets → rule
	depth  int
	anyKey *byteDFA // any key, as a JSON string
	// canonical says the texts matched are canonical JSON, whose objects never repeat a key (see
	// valid): then every member counts toward minProperties.
	canonical bool
}

// schemaGrammar is the JSONSchema kind.
func schemaGrammar(text string, opts Options) (*grammar, error) {
	doc, err := decodeOrdered([]byte(text))
	if err != nil {
		return nil, err
	}
	if o, ok := doc.(*jsonObject); ok {
		// $id and id name the root document; refs are resolved within it.
		o = o.without("$id", "id")
		doc = o
	}
	g := &grammar{}
	c := &schemaCompiler{g: g, b: newJSONBuilder(g, opts), root: doc, rules: map[any]int{}}
	e, err := c.compile(doc, "#")
	if err != nil {
		return nil, err
	}
	g.root = g.add("root", seqExpr(c.b.ws, e, c.b.ws))
	return g, nil
}

func (o *jsonObject) without(keys ...string) *jsonObject {
	out := &jsonObject{vals: map[string]any{}}
	for _, k := range o.keys {
		if !slices.Contains(keys, k) {
			out.keys = append(out.keys, k)
			out.vals[k] = o.vals[k]
		}
	}
	return out
}

func (o *jsonObject) with(k string, v any) *jsonObject {
	out := o.without(k)
	out.keys = append(out.keys, k)
	out.vals[k] = v
	return out
}

func newObject(kv ...any) *jsonObject {
	o := &jsonObject{vals: map[string]any{}}
	for i := 0; i < len(kv); i += 2 {
		o = o.with(kv[i].(string), kv[i+1])
	}
	return o
}

func unsupportedf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrUnsupported}, args...)...)
}

func invalidf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrSyntax}, args...)...)
}

const maxSchemaDepth = 100

// compile returns the expression of the JSON values valid under schema s (at path, for errors).
func (c *schemaCompiler) compile(s any, path string) (*expr, error) {
	c.depth++
	defer func() { c.depth-- }()
	if c.depth > maxSchemaDepth {
		return nil, fmt.Errorf("%w: schema nested deeper than %d (at %s)", ErrTooLarge, maxSchemaDepth, path)
	}
	switch t := s.(type) {
	case bool:
		if t {
			return c.b.anyValue(), nil
		}
		return nothingExpr, nil
	case *jsonObject:
		return c.compileObject(t, path)
	}
	return nil, invalidf("schema at %s is not an object or a boolean", path)
}

func (c *schemaCompiler) compileObject(o *jsonObject, path string) (*expr, error) {
	for _, k := range o.keys {
		if !schemaKeywords[k] && !schemaAnnotations[k] {
			return nil, unsupportedf("JSON Schema keyword %q (at %s)", k, path)
		}
	}
	if ref, ok := o.get("$ref"); ok {
		for _, k := range o.keys {
			if schemaKeywords[k] && k != "$ref" && k != "$defs" && k != "definitions" {
				return nil, unsupportedf("$ref beside %q (at %s)", k, path)
			}
		}
		return c.ref(ref, path)
	}
	if all, ok := o.get("allOf"); ok {
		list, ok := all.([]any)
		if !ok || len(list) == 0 {
			return nil, invalidf("allOf at %s is not a non-empty list", path)
		}
		merged := o.without("allOf")
		for i, sub := range list {
			var err error
			if merged, err = c.merge(merged, sub, fmt.Sprintf("%s/allOf/%d", path, i)); err != nil {
				return nil, err
			}
			if merged == nil {
				return nothingExpr, nil
			}
		}
		return c.compile(merged, path)
	}
	_, hasAny := o.get("anyOf")
	_, hasOne := o.get("oneOf")
	if hasAny || hasOne {
		if hasAny && hasOne {
			return nil, unsupportedf("anyOf beside oneOf (at %s)", path)
		}
		kw := "anyOf"
		if hasOne {
			kw = "oneOf"
		}
		list, ok := o.vals[kw].([]any)
		if !ok || len(list) == 0 {
			return nil, invalidf("%s at %s is not a non-empty list", kw, path)
		}
		base := o.without(kw)
		// With nothing beside the alternatives to merge into them, each compiles as it is: a $ref
		// among them stays a reference, so that recursion through it closes (a pydantic Optional
		// field of the model's own type: {"anyOf": [{"$ref": "#/$defs/Node"}, {"type": "null"}]}).
		plain := !hasKeywords(base)
		var alts []*expr
		var branches []*jsonObject
		for i, sub := range list {
			p := fmt.Sprintf("%s/%s/%d", path, kw, i)
			m, err := c.merge(base, sub, p)
			if err != nil {
				return nil, err
			}
			if m == nil {
				continue
			}
			branches = append(branches, m)
			var e *expr
			if plain {
				e, err = c.compile(sub, p)
			} else {
				e, err = c.compile(m, p)
			}
			if err != nil {
				return nil, err
			}
			alts = append(alts, e)
		}
		if hasOne {
			if err := c.checkDisjoint(branches, path); err != nil {
				return nil, err
			}
		}
		return altExpr(alts...), nil
	}
	if values, ok, err := enumValues(o, path); err != nil {
		return nil, err
	} else if ok {
		rest := o.without("enum", "const")
		var alts []*expr
		for _, v := range values {
			valid, err := c.valid(rest, v, path)
			if err != nil {
				return nil, err
			}
			if valid {
				text, err := canonicalJSON(v)
				if err != nil {
					return nil, err
				}
				alts = append(alts, litExpr(text))
			}
		}
		return altExpr(alts...), nil
	}
	types := tAll
	if t, ok := o.get("type"); ok {
		var names []any
		switch t := t.(type) {
		case string:
			names = []any{t}
		case []any:
			names = t
		default:
			return nil, invalidf("type at %s is not a string or a list", path)
		}
		types = 0
		for _, n := range names {
			s, _ := n.(string)
			bit, ok := typeNames[s]
			if !ok {
				return nil, invalidf("unknown type %v at %s", n, path)
			}
			types |= bit
		}
	}
	var alts []*expr
	if types&tNull != 0 {
		alts = append(alts, litExpr("null"))
	}
	if types&tBoolean != 0 {
		alts = append(alts, litExpr("true"), litExpr("false"))
	}
	if types&(tInteger|tNumber) != 0 {
		e, err := c.number(o, types&tNumber == 0, path)
		if err != nil {
			return nil, err
		}
		alts = append(alts, e)
	}
	if types&tString != 0 {
		e, err := c.str(o, path)
		if err != nil {
			return nil, err
		}
		alts = append(alts, e)
	}
	if types&tArray != 0 {
		e, err := c.array(o, path)
		if err != nil {
			return nil, err
		}
		alts = append(alts, e)
	}
	if types&tObject != 0 {
		e, err := c.object(o, path)
		if err != nil {
			return nil, err
		}
		alts = append(alts, e)
	}
	return altExpr(alts...), nil
}

// ref compiles the target of a $ref as a rule of its own, so that recursion closes.
func (c *schemaCompiler) ref(ref any, path string) (*expr, error) {
	s, ok := ref.(string)
	if !ok {
		return nil, invalidf("$ref at %s is not a string", path)
	}
	target, err := c.resolve(s)
	if err != nil {
		return nil, fmt.Errorf("%w (at %s)", err, path)
	}
	key := any(target)
	if b, ok := target.(bool); ok {
		return c.compile(b, s)
	}
	if r, ok := c.rules[key]; ok {
		return refExpr(r), nil
	}
	r := c.g.declare("ref " + s)
	c.rules[key] = r
	e, err := c.compile(target, s)
	if err != nil {
		return nil, err
	}
	c.g.define(r, e)
	return refExpr(r), nil
}

// resolve follows a JSON pointer within the document.
func (c *schemaCompiler) resolve(ref string) (any, error) {
	if !strings.HasPrefix(ref, "#") {
		return nil, unsupportedf("$ref %q outside the schema document", ref)
	}
	frag, err := url.PathUnescape(ref[1:])
	if err != nil {
		return nil, invalidf("$ref %q: %v", ref, err)
	}
	if frag != "" && !strings.HasPrefix(frag, "/") {
		return nil, unsupportedf("$ref %q to an anchor", ref)
	}
	cur := c.root
	if frag == "" {
		return cur, nil
	}
	for _, tok := range strings.Split(frag[1:], "/") {
		tok = strings.ReplaceAll(strings.ReplaceAll(tok, "~1", "/"), "~0", "~")
		switch t := cur.(type) {
		case *jsonObject:
			v, ok := t.get(tok)
			if !ok {
				return nil, invalidf("$ref %q points nowhere", ref)
			}
			cur = v
		case []any:
			i, err := strconv.Atoi(tok)
			if err != nil || i < 0 || i >= len(t) {
				return nil, invalidf("$ref %q points nowhere", ref)
			}
			cur = t[i]
		default:
			return nil, invalidf("$ref %q points nowhere", ref)
		}
	}
	switch cur.(type) {
	case bool, *jsonObject:
		return cur, nil
	}
	return nil, invalidf("$ref %q does not point to a schema", ref)
}

// enumValues returns the values enum or const allow (both: those of enum equal to const).
func enumValues(o *jsonObject, path string) ([]any, bool, error) {
	e, hasEnum := o.get("enum")
	k, hasConst := o.get("const")
	if !hasEnum && !hasConst {
		return nil, false, nil
	}
	var values []any
	if hasEnum {
		list, ok := e.([]any)
		if !ok {
			return nil, false, invalidf("enum at %s is not a list", path)
		}
		values = list
	}
	if hasConst {
		if !hasEnum {
			return []any{k}, true, nil
		}
		kt, err := canonicalJSON(k)
		if err != nil {
			return nil, false, err
		}
		var kept []any
		for _, v := range values {
			if vt, err := canonicalJSON(v); err == nil && vt == kt {
				kept = append(kept, v)
			}
		}
		values = kept
	}
	return values, true, nil
}

// valid reports whether value is valid under schema rest, by compiling rest and matching the
// value's canonical text.
func (c *schemaCompiler) valid(rest *jsonObject, value any, path string) (bool, error) {
	constrains := false
	for _, k := range rest.keys {
		if schemaKeywords[k] && k != "$defs" && k != "definitions" {
			constrains = true
		}
	}
	if !constrains {
		return true, nil
	}
	g := &grammar{}
	sub := &schemaCompiler{g: g, b: newJSONBuilder(g, Options{MaxWhitespace: -1}), root: c.root, rules: map[any]int{}, depth: c.depth, canonical: true}
	e, err := sub.compile(rest, path)
	if err != nil {
		return false, err
	}
	g.root = g.add("root", e)
	a, err := lower(g)
	if err != nil {
		return false, err
	}
	text, err := canonicalJSON(value)
	if err != nil {
		return false, err
	}
	return (&Grammar{a: a}).match([]byte(text)), nil
}

// number compiles the number part of o (integers only if integer).
func (c *schemaCompiler) number(o *jsonObject, integer bool, path string) (*expr, error) {
	var lo, hi bound
	tighten := func(b *bound, key string, exclusive, lower bool) error {
		v, ok := o.get(key)
		if !ok {
			return nil
		}
		if _, isBool := v.(bool); isBool {
			return nil // draft 4's exclusive flags, read with their bound below
		}
		n, ok := v.(json.Number)
		if !ok {
			return invalidf("%s at %s is not a number", key, path)
		}
		d, err := parseDecimal(string(n))
		if err != nil {
			return err
		}
		// Draft 4: "exclusiveMinimum": true makes minimum exclusive.
		if !exclusive {
			flag := "exclusiveMaximum"
			if lower {
				flag = "exclusiveMinimum"
			}
			if f, ok := o.get(flag); ok {
				if fb, isBool := f.(bool); isBool {
					exclusive = fb
				}
			}
		}
		cand := bound{set: true, val: d, exclusive: exclusive}
		if !b.set {
			*b = cand
			return nil
		}
		r := cmpDecimal(d, b.val)
		if (lower && r > 0) || (!lower && r < 0) || (r == 0 && exclusive) {
			*b = cand
		}
		return nil
	}
	for _, t := range []struct {
		key              string
		exclusive, lower bool
		b                *bound
	}{
		{"minimum", false, true, &lo}, {"exclusiveMinimum", true, true, &lo},
		{"maximum", false, false, &hi}, {"exclusiveMaximum", true, false, &hi},
	} {
		if err := tighten(t.b, t.key, t.exclusive, t.lower); err != nil {
			return nil, err
		}
	}
	// A number format of integers bounds them like minimum and maximum; other formats (of
	// strings) say nothing of numbers.
	if f, ok := o.get("format"); ok {
		name, ok := f.(string)
		if !ok {
			return nil, invalidf("format at %s is not a string", path)
		}
		if nf := numberFormats[name]; nf.integer {
			integer = true
			for _, t := range []struct {
				b     *bound
				val   string
				lower bool
			}{{&lo, nf.min, true}, {&hi, nf.max, false}} {
				d, err := parseDecimal(t.val)
				if err != nil {
					return nil, err
				}
				if !t.b.set {
					*t.b = bound{set: true, val: d}
				} else if r := cmpDecimal(d, t.b.val); (t.lower && r > 0) || (!t.lower && r < 0) {
					*t.b = bound{set: true, val: d}
				}
			}
		}
	}
	mult, hasMult := o.get("multipleOf")
	if !lo.set && !hi.set && !hasMult {
		if integer {
			return c.b.integer(), nil
		}
		return c.b.num(), nil
	}
	e, err := rangeExpr(lo, hi, integer)
	if err != nil || e.kind == kNothing {
		return e, err
	}
	if hasMult {
		n, ok := mult.(json.Number)
		if !ok {
			return nil, invalidf("multipleOf at %s is not a number", path)
		}
		k, err := parseDecimal(string(n))
		if err != nil {
			return nil, err
		}
		m, err := multipleExpr(k, integer)
		if err != nil {
			return nil, fmt.Errorf("%w (at %s)", err, path)
		}
		if e, err = intersectExprs(e, m); err != nil {
			return nil, err
		}
	}
	return refExpr(c.g.add("number "+path, e)), nil
}

// cmpDecimal compares two decimals.
func cmpDecimal(a, b decimal) int {
	sign := func(d decimal) int {
		switch {
		case d.int == "0" && d.frac == "":
			return 0
		case d.neg:
			return -1
		}
		return 1
	}
	sa, sb := sign(a), sign(b)
	if sa != sb {
		return cmpInt(sa, sb)
	}
	mag := cmpInt(len(a.int), len(b.int))
	if mag == 0 {
		mag = strings.Compare(a.int, b.int)
	}
	if mag == 0 {
		fa, fb := a.frac, b.frac
		n := max(len(fa), len(fb))
		fa += strings.Repeat("0", n-len(fa))
		fb += strings.Repeat("0", n-len(fb))
		mag = strings.Compare(fa, fb)
	}
	if sa < 0 {
		return -mag
	}
	return mag
}

func cmpInt(a, b int) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// count reads a non-negative integer keyword; -1 when absent.
func count(o *jsonObject, key, path string) (int, error) {
	v, ok := o.get(key)
	if !ok {
		return -1, nil
	}
	n, ok := v.(json.Number)
	if !ok {
		return 0, invalidf("%s at %s is not a number", key, path)
	}
	d, err := parseDecimal(string(n))
	if err != nil || d.neg || d.frac != "" {
		return 0, invalidf("%s at %s is not a non-negative integer", key, path)
	}
	if len(d.int) > 6 {
		return 0, fmt.Errorf("%w: %s %s at %s", ErrTooLarge, key, d.int, path)
	}
	x, _ := strconv.Atoi(d.int)
	if x > 100000 {
		return 0, fmt.Errorf("%w: %s %d at %s", ErrTooLarge, key, x, path)
	}
	return x, nil
}

// str compiles the string part of o.
func (c *schemaCompiler) str(o *jsonObject, path string) (*expr, error) {
	parts, err := c.strParts(o, path)
	if err != nil {
		return nil, err
	}
	if len(parts) == 0 {
		return c.b.str(), nil
	}
	body, err := intersectExprs(parts...)
	if err != nil {
		return nil, err
	}
	// A rule of its own: the mask cache shares a leaf rule's entries across grammars.
	return refExpr(c.g.add("string "+path, seqExpr(litExpr(`"`), body, litExpr(`"`)))), nil
}

// strParts returns the constraints o's string keywords put on a string's contents (written as in
// a JSON string), to be intersected; none for any string.
func (c *schemaCompiler) strParts(o *jsonObject, path string) ([]*expr, error) {
	minLen, err := count(o, "minLength", path)
	if err != nil {
		return nil, err
	}
	maxLen, err := count(o, "maxLength", path)
	if err != nil {
		return nil, err
	}
	var parts []*expr
	if minLen > 0 || maxLen >= 0 {
		parts = append(parts, repeatExpr(runesExpr(anyRune, true), max(minLen, 0), maxLen))
	}
	if p, ok := o.get("pattern"); ok {
		var pats []any
		switch p := p.(type) {
		case string:
			pats = []any{p}
		case []any: // merged by allOf
			pats = p
		default:
			return nil, invalidf("pattern at %s is not a string", path)
		}
		for _, p := range pats {
			s, ok := p.(string)
			if !ok {
				return nil, invalidf("pattern at %s is not a string", path)
			}
			n, err := parseRegex(s)
			if err != nil {
				return nil, fmt.Errorf("pattern at %s: %w", path, err)
			}
			e, err := regexExpr(n, true, true)
			if err != nil {
				return nil, fmt.Errorf("pattern %q at %s: %w", s, path, err)
			}
			parts = append(parts, e)
		}
	}
	if f, ok := o.get("format"); ok {
		name, ok := f.(string)
		if !ok {
			return nil, invalidf("format at %s is not a string", path)
		}
		if _, ok := numberFormats[name]; ok {
			return parts, nil // a number format says nothing of strings
		}
		e, err := formatExpr(name)
		if err != nil {
			return nil, fmt.Errorf("%w (at %s)", err, path)
		}
		parts = append(parts, e)
	}
	return parts, nil
}

// formats are the string formats supported, as regexes over characters; each is a strict subset of
// what ajv-formats accepts in its full mode.
var formats = map[string]string{
	"date":      dateRegex,
	"time":      timeRegex,
	"date-time": dateRegex + "[Tt]" + timeRegex,
	"uuid":      `[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}`,
	"ipv4":      `((25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])\.){3}(25[0-5]|2[0-4][0-9]|1[0-9][0-9]|[1-9]?[0-9])`,
	"hostname":  `[a-zA-Z0-9]([a-zA-Z0-9-]{0,18}[a-zA-Z0-9])?(\.[a-zA-Z0-9]([a-zA-Z0-9-]{0,18}[a-zA-Z0-9])?){0,3}`,
	"duration":  `P(([0-9]+Y([0-9]+M)?([0-9]+D)?|[0-9]+M([0-9]+D)?|[0-9]+D)(T` + durationTime + `)?|T` + durationTime + `|[0-9]+W)`,
	"email": `[a-zA-Z0-9!#$%&'*+/=?^_{|}~-]+(\.[a-zA-Z0-9!#$%&'*+/=?^_{|}~-]+)*@` +
		`([a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?\.)+[a-zA-Z0-9]([a-zA-Z0-9-]*[a-zA-Z0-9])?`,
}

// numberFormat is what a number format allows: any number, or integers from min to max.
type numberFormat struct {
	integer  bool
	min, max string
}

// numberFormats are the number formats supported (OpenAPI's, as ajv-formats names them).
var numberFormats = map[string]numberFormat{
	"int32":  {true, "-2147483648", "2147483647"},
	"int64":  {true, "-9223372036854775808", "9223372036854775807"},
	"float":  {},
	"double": {},
}

const (
	durationTime = `([0-9]+H([0-9]+M)?([0-9]+S)?|[0-9]+M([0-9]+S)?|[0-9]+S)`
	leapYear     = `([0-9]{2}(0[48]|[2468][048]|[13579][26])|(0[48]|[2468][048]|[13579][26])00)`
	dateRegex    = `([0-9]{4}-((0[13578]|1[02])-(0[1-9]|[12][0-9]|3[01])|(0[469]|11)-(0[1-9]|[12][0-9]|30)|02-(0[1-9]|1[0-9]|2[0-8]))|` +
		leapYear + `-02-29)`
	timeRegex = `([01][0-9]|2[0-3]):[0-5][0-9]:[0-5][0-9](\.[0-9]{1,9})?([Zz]|[+-]([01][0-9]|2[0-3]):[0-5][0-9])`
)

func formatExpr(name string) (*expr, error) {
	re, ok := formats[name]
	if !ok {
		return nil, unsupportedf("JSON Schema format %q", name)
	}
	n, err := parseRegex(re)
	if err != nil {
		return nil, err
	}
	return regexExpr(n, true, false)
}

// array compiles the array part of o.
func (c *schemaCompiler) array(o *jsonObject, path string) (*expr, error) {
	var prefix []any
	var rest any = true
	if p, ok := o.get("prefixItems"); ok {
		list, ok := p.([]any)
		if !ok {
			return nil, invalidf("prefixItems at %s is not a list", path)
		}
		prefix = list
		if it, ok := o.get("items"); ok {
			rest = it
		}
		if _, ok := o.get("additionalItems"); ok {
			return nil, unsupportedf("additionalItems beside prefixItems (at %s)", path)
		}
	} else if it, ok := o.get("items"); ok {
		if list, isList := it.([]any); isList {
			prefix = list
			if ai, ok := o.get("additionalItems"); ok {
				rest = ai
			}
		} else {
			rest = it
		}
	}
	minItems, err := count(o, "minItems", path)
	if err != nil {
		return nil, err
	}
	maxItems, err := count(o, "maxItems", path)
	if err != nil {
		return nil, err
	}
	minItems = max(minItems, 0)
	restExpr, err := c.compile(rest, path+"/items")
	if err != nil {
		return nil, err
	}
	if restExpr.kind == kNothing {
		maxItems = len(prefix)
		if o.vals["maxItems"] != nil {
			mi, _ := count(o, "maxItems", path)
			maxItems = min(mi, len(prefix))
		}
	}
	// States 0..k count the items so far; past k (unbounded) the last state loops.
	// The loop needs a comma, so it sits at a count of at least one.
	k := max(len(prefix), minItems, 1)
	if maxItems >= 0 {
		k = maxItems
	}
	itemAt := make([]*expr, 0, k+1)
	for i := range k + 1 {
		if i < len(prefix) {
			e, err := c.compile(prefix[i], fmt.Sprintf("%s/prefixItems/%d", path, i))
			if err != nil {
				return nil, err
			}
			itemAt = append(itemAt, e)
		} else {
			itemAt = append(itemAt, restExpr)
		}
	}
	// An item schema used at several counts gets a rule, so that nested arrays do not multiply.
	if k > len(prefix) && restExpr.kind != kRef && restExpr.kind != kNothing && !isSmall(restExpr) {
		r := c.g.add("items "+path, restExpr)
		for i := len(prefix); i <= k; i++ {
			itemAt[i] = refExpr(r)
		}
	}
	ws := c.b.ws
	comma := seqExpr(ws, litExpr(","), ws)
	g := &graph{n: k + 1}
	for i := 0; i <= k; i++ {
		if i >= minItems {
			g.accept = append(g.accept, i)
		}
		item := itemAt[i]
		if i > 0 {
			item = seqExpr(comma, item)
		}
		switch {
		case i < k:
			g.edges = append(g.edges, graphEdge{from: i, to: i + 1, label: item})
		case maxItems < 0:
			g.edges = append(g.edges, graphEdge{from: i, to: i, label: item})
		}
	}
	return seqExpr(litExpr("["), ws, graphExpr(g), ws, litExpr("]")), nil
}

// isSmall reports whether e is cheap to copy (no nested structure).
func isSmall(e *expr) bool {
	switch e.kind {
	case kEmpty, kNothing, kBytes, kByteSet, kRunes, kRef:
		return true
	case kAlt, kSeq:
		for _, s := range e.subs {
			if !isSmall(s) {
				return false
			}
		}
		return len(e.subs) <= 8
	}
	return false
}

// object compiles the object part of o: the listed properties in order, optional ones skippable,
// then any additional ones.
func (c *schemaCompiler) object(o *jsonObject, path string) (*expr, error) {
	props := &jsonObject{vals: map[string]any{}}
	if p, ok := o.get("properties"); ok {
		if props, ok = p.(*jsonObject); !ok {
			return nil, invalidf("properties at %s is not an object", path)
		}
	}
	required := map[string]bool{}
	if r, ok := o.get("required"); ok {
		list, ok := r.([]any)
		if !ok {
			return nil, invalidf("required at %s is not a list", path)
		}
		for _, n := range list {
			s, ok := n.(string)
			if !ok {
				return nil, invalidf("required at %s lists a non-string", path)
			}
			required[s] = true
		}
	}
	var additional any = true
	if a, ok := o.get("additionalProperties"); ok {
		additional = a
	}
	keys, err := c.objectKeys(o, path)
	if err != nil {
		return nil, err
	}
	names := slices.Clone(props.keys)
	var extra []string
	for n := range required {
		if _, ok := props.vals[n]; !ok {
			extra = append(extra, n)
		}
	}
	sort.Strings(extra)
	names = append(names, extra...)
	// A listed name's schema: its properties entry, or additionalProperties when no pattern
	// matches it, with every matching pattern's schema; a name propertyNames refuses is forbidden.
	schemas := map[string]any{}
	kept := names[:0]
	for _, n := range names {
		text, err := canonicalJSON(n)
		if err != nil {
			return nil, err
		}
		if keys.names != nil && !keys.names.match([]byte(text)) {
			if required[n] {
				return nothingExpr, nil
			}
			continue
		}
		s, listed := props.vals[n]
		matched := false
		for _, p := range keys.patterns {
			if p.lang.match([]byte(text)) {
				matched = true
				if !listed {
					s = true
					listed = true
				}
				s = allOf(s, p.schema)
			}
		}
		if !listed && !matched {
			s = additional
		}
		schemas[n] = s
		kept = append(kept, n)
	}
	names = kept
	minProps, err := count(o, "minProperties", path)
	if err != nil {
		return nil, err
	}
	maxProps, err := count(o, "maxProperties", path)
	if err != nil {
		return nil, err
	}
	minProps = max(minProps, 0)
	// Members are counted up to top: maxProperties, or minProperties (then the count saturates),
	// and at least 1, since a member after the first needs a comma.
	top := max(minProps, 1)
	if maxProps >= 0 {
		top = max(maxProps, 0)
	}
	room := func(c int) bool { return maxProps < 0 || c < maxProps }
	bump := func(c int) int { return min(c+1, top) }
	ws := c.b.ws
	comma := seqExpr(ws, litExpr(","), ws)
	// States: per property i and count k, "at i" (2·((top+1)·i+k)) and "before member i" (+1).
	n := len(names)
	at := func(i, k int) int { return 2 * ((top+1)*i + k) }
	g := &graph{n: 2 * (top + 1) * (n + 1), start: at(0, 0)}
	link := func(from, k int, member *expr, to int) {
		if k == 0 {
			g.edges = append(g.edges, graphEdge{from: from, to: from + 1})
		} else {
			g.edges = append(g.edges, graphEdge{from: from, to: from + 1, label: comma})
		}
		g.edges = append(g.edges, graphEdge{from: from + 1, to: to, label: member})
	}
	for i, name := range names {
		value, err := c.compile(schemas[name], path+"/properties/"+name)
		if err != nil {
			return nil, err
		}
		if top > 1 && !isSmall(value) {
			value = refExpr(c.g.add("property "+path+"/"+name, value))
		}
		key, err := canonicalJSON(name)
		if err != nil {
			return nil, err
		}
		member := seqExpr(litExpr(key), ws, litExpr(":"), ws, value)
		for k := 0; k <= top; k++ {
			if room(k) {
				link(at(i, k), k, member, at(i+1, bump(k)))
			}
			if !required[name] {
				g.edges = append(g.edges, graphEdge{from: at(i, k), to: at(i+1, k)})
			}
		}
	}
	for k := minProps; k <= top; k++ {
		g.accept = append(g.accept, at(n, k))
	}
	// Members beyond the listed names: those of each pattern, and the rest (additionalProperties).
	var others []keyMember
	if len(keys.patterns) > 0 || keys.additional != false {
		if others, err = keys.others(names); err != nil {
			return nil, err
		}
	}
	// Members beyond the listed names may repeat a key, which makes one property, not two: the
	// grammar cannot count them exactly, so minProperties may rely on one of them at most (the
	// required names are always there, and distinct).
	nRequired := 0
	for _, name := range names {
		if required[name] {
			nRequired++
		}
	}
	for _, m := range others {
		value, err := c.compile(m.schema, path+"/"+m.what)
		if err != nil {
			return nil, err
		}
		if value.kind == kNothing || m.key.kind == kNothing {
			continue
		}
		if minProps > nRequired+1 && !c.canonical {
			return nil, unsupportedf("minProperties %d above %d required properties plus one: other properties' names may repeat, and a repeated name is one property (at %s)", minProps, nRequired, path)
		}
		if top > 1 && !isSmall(value) {
			value = refExpr(c.g.add(m.what+" "+path, value))
		}
		member := seqExpr(m.key, ws, litExpr(":"), ws, value)
		for k := 0; k <= top; k++ {
			if room(k) {
				link(at(n, k), k, member, at(n, bump(k)))
			}
		}
	}
	return seqExpr(litExpr("{"), ws, graphExpr(g), ws, litExpr("}")), nil
}

// objectKeys holds what an object's keywords say about its keys: propertyNames (nil when absent)
// and patternProperties, each a DFA over a key written as a JSON string, quotes included.
type objectKeys struct {
	names      *byteDFA
	patterns   []keyPattern
	additional any
	anyKey     *byteDFA
}

type keyPattern struct {
	src    string
	lang   *byteDFA
	schema any
}

// keyMember is a kind of member beyond the listed names: its keys and its values' schema.
type keyMember struct {
	what   string
	key    *expr
	schema any
}

func (d *byteDFA) match(b []byte) bool {
	s := d.start
	for _, c := range b {
		if s = d.next[s][c]; s < 0 {
			return false
		}
	}
	return d.accept[s]
}

// empty reports whether d accepts nothing.
func (d *byteDFA) empty() bool { return !slices.Contains(d.accept, true) }

// propertyNamesKeywords are the keywords propertyNames may use: those of strings.
var propertyNamesKeywords = []string{"type", "minLength", "maxLength", "pattern", "format"}

func (c *schemaCompiler) objectKeys(o *jsonObject, path string) (*objectKeys, error) {
	k := &objectKeys{additional: true}
	if a, ok := o.get("additionalProperties"); ok {
		k.additional = a
	}
	if c.anyKey == nil {
		var err error
		if c.anyKey, err = exprDFA(seqExpr(litExpr(`"`), starExpr(runesExpr(anyRune, true)), litExpr(`"`))); err != nil {
			return nil, err
		}
	}
	k.anyKey = c.anyKey
	if pn, ok := o.get("propertyNames"); ok {
		switch t := pn.(type) {
		case bool:
			if !t {
				k.names = &byteDFA{next: make([][256]int32, 1), accept: []bool{false}}
				for c := range 256 {
					k.names.next[0][c] = -1
				}
			}
		case *jsonObject:
			for _, key := range t.keys {
				if !slices.Contains(propertyNamesKeywords, key) && !schemaAnnotations[key] {
					return nil, unsupportedf("propertyNames with %q (at %s)", key, path)
				}
			}
			if ty, ok := t.get("type"); ok && ty != "string" {
				return nil, unsupportedf("propertyNames of type %v (at %s)", ty, path)
			}
			parts, err := c.strParts(t, path+"/propertyNames")
			if err != nil {
				return nil, err
			}
			body := starExpr(runesExpr(anyRune, true))
			if len(parts) > 0 {
				if body, err = intersectExprs(parts...); err != nil {
					return nil, err
				}
			}
			if k.names, err = exprDFA(seqExpr(litExpr(`"`), body, litExpr(`"`))); err != nil {
				return nil, err
			}
		default:
			return nil, invalidf("propertyNames at %s is not a schema", path)
		}
	}
	if pp, ok := o.get("patternProperties"); ok {
		po, ok := pp.(*jsonObject)
		if !ok {
			return nil, invalidf("patternProperties at %s is not an object", path)
		}
		for _, src := range po.keys {
			n, err := parseRegex(src)
			if err != nil {
				return nil, fmt.Errorf("patternProperties at %s: %w", path, err)
			}
			e, err := regexExpr(n, true, true)
			if err != nil {
				return nil, fmt.Errorf("patternProperties %q at %s: %w", src, path, err)
			}
			lang, err := exprDFA(seqExpr(litExpr(`"`), e, litExpr(`"`)))
			if err != nil {
				return nil, err
			}
			k.patterns = append(k.patterns, keyPattern{src: src, lang: lang, schema: po.vals[src]})
		}
	}
	return k, nil
}

// others returns the members beyond the listed names: a key matching one pattern takes its
// schema, any other key additionalProperties. Patterns whose keys overlap are refused (such a key
// would need every matching schema at once).
func (k *objectKeys) others(names []string) ([]keyMember, error) {
	base := k.anyKey
	if len(names) > 0 {
		var lits []*expr
		for _, n := range names {
			text, err := canonicalJSON(n)
			if err != nil {
				return nil, err
			}
			lits = append(lits, litExpr(text))
		}
		named, err := exprDFA(altExpr(lits...))
		if err != nil {
			return nil, err
		}
		if base, err = base.intersect(named.complement()); err != nil {
			return nil, err
		}
	}
	if k.names != nil {
		var err error
		if base, err = base.intersect(k.names); err != nil {
			return nil, err
		}
	}
	var out []keyMember
	rest := base
	langs := make([]*byteDFA, len(k.patterns))
	for i, p := range k.patterns {
		l, err := base.intersect(p.lang)
		if err != nil {
			return nil, err
		}
		for j := range i {
			both, err := l.intersect(langs[j])
			if err != nil {
				return nil, err
			}
			if !both.empty() {
				return nil, unsupportedf("patternProperties %q and %q that a key can both match", k.patterns[j].src, p.src)
			}
		}
		langs[i] = l
		if rest, err = rest.intersect(p.lang.complement()); err != nil {
			return nil, err
		}
		out = append(out, keyMember{what: "patternProperties/" + p.src, key: l.expr(), schema: p.schema})
	}
	out = append(out, keyMember{what: "additionalProperties", key: rest.expr(), schema: k.additional})
	return out, nil
}

// hasKeywords reports whether o holds a keyword that constrains values ($defs and definitions hold
// schemas for references, and annotations constrain nothing).
func hasKeywords(o *jsonObject) bool {
	for _, k := range o.keys {
		if schemaKeywords[k] && k != "$defs" && k != "definitions" {
			return true
		}
	}
	return false
}
