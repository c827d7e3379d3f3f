package constraint

import (
	"encoding/json"
	"fmt"
	"slices"
)

// allOf: the schemas are merged into one, keyword by keyword (types intersected, bounds
// tightened, properties and items combined through allOf of their schemas (items position by
// position, each side's items applying after its own prefixItems), required united,
// patterns all applied, enums intersected), so that the grammar stays one. Combinations this
// cannot express are refused by name.

// merge returns the schema of values valid under both base and sub; nil when none is (sub is
// false). path names sub in errors.
func (c *schemaCompiler) merge(base *jsonObject, sub any, path string) (*jsonObject, error) {
	return c.mergeDepth(base, sub, path, 0)
}

func (c *schemaCompiler) mergeDepth(base *jsonObject, sub any, path string, depth int) (*jsonObject, error) {
	if depth > maxSchemaDepth {
		return nil, unsupportedf("allOf through $ref cycles (at %s)", path)
	}
	var o *jsonObject
	switch t := sub.(type) {
	case bool:
		if !t {
			return nil, nil
		}
		return base, nil
	case *jsonObject:
		o = t
	default:
		return nil, invalidf("schema at %s is not an object or a boolean", path)
	}
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
		s, _ := ref.(string)
		target, err := c.resolve(s)
		if err != nil {
			return nil, fmt.Errorf("%w (at %s)", err, path)
		}
		return c.mergeDepth(base, target, path, depth+1)
	}
	if base == nil {
		base = &jsonObject{vals: map[string]any{}}
	}
	out := base.without()
	for _, k := range o.keys {
		if schemaAnnotations[k] || k == "$defs" || k == "definitions" || itemKeywords[k] {
			continue
		}
		v := o.vals[k]
		old, has := out.get(k)
		if !has {
			out = out.with(k, v)
			continue
		}
		merged, err := mergeKeyword(k, old, v, path)
		if err != nil {
			return nil, err
		}
		out = out.with(k, merged)
	}
	// A pattern of one side names keys the other side's additionalProperties also judges.
	for _, pair := range [][2]*jsonObject{{base, o}, {o, base}} {
		_, pp := pair[0].get("patternProperties")
		ap, has := pair[1].get("additionalProperties")
		if pp && has && ap != true {
			return nil, unsupportedf("allOf of patternProperties and additionalProperties (at %s)", path)
		}
	}
	if err := crossAdditional(out, base, o); err != nil {
		return nil, err
	}
	return mergeItems(out, base, o, path)
}

// itemKeywords are the keywords that give an array's item schemas, merged together by mergeItems.
var itemKeywords = map[string]bool{"prefixItems": true, "items": true, "additionalItems": true}

// itemSchemas reads what o says of an array's items: the schemas of the first positions (prefixItems,
// or items as a list), then the schema of every later item (items beside prefixItems, or
// additionalItems beside an items list; true when absent). Each applies only to the positions o
// itself gives it: a schema's items starts after its own prefixItems, not another's.
func itemSchemas(o *jsonObject, path string) (prefix []any, rest any, err error) {
	rest = true
	if p, ok := o.get("prefixItems"); ok {
		if prefix, ok = p.([]any); !ok {
			return nil, nil, invalidf("prefixItems at %s is not a list", path)
		}
		if _, ok := o.get("additionalItems"); ok {
			return nil, nil, unsupportedf("additionalItems beside prefixItems (at %s)", path)
		}
		if it, ok := o.get("items"); ok {
			if _, isList := it.([]any); isList {
				return nil, nil, unsupportedf("items as a list beside prefixItems (at %s)", path)
			}
			rest = it
		}
		return prefix, rest, nil
	}
	if it, ok := o.get("items"); ok {
		list, isList := it.([]any)
		if !isList {
			return nil, it, nil
		}
		if ai, ok := o.get("additionalItems"); ok {
			rest = ai
		}
		return list, rest, nil
	}
	return nil, true, nil
}

// mergeItems sets out's item keywords to those of arrays valid under both a and b: position i takes
// the allOf of what a and b each say of position i, and the items past both prefixes the allOf of
// their rests.
func mergeItems(out, a, b *jsonObject, path string) (*jsonObject, error) {
	has := func(o *jsonObject) bool {
		for k := range itemKeywords {
			if _, ok := o.get(k); ok {
				return true
			}
		}
		return false
	}
	if !has(b) {
		return out, nil
	}
	pa, ra, err := itemSchemas(a, path)
	if err != nil {
		return nil, err
	}
	pb, rb, err := itemSchemas(b, path)
	if err != nil {
		return nil, err
	}
	at := func(prefix []any, rest any, i int) any {
		if i < len(prefix) {
			return prefix[i]
		}
		return rest
	}
	var prefix []any
	for i := range max(len(pa), len(pb)) {
		prefix = append(prefix, allOf(at(pa, ra, i), at(pb, rb, i)))
	}
	out = out.without("prefixItems", "items", "additionalItems")
	if prefix != nil {
		out = out.with("prefixItems", prefix)
	}
	if rest := allOf(ra, rb); rest != true {
		out = out.with("items", rest)
	}
	return out, nil
}

// crossAdditional applies one side's additionalProperties to the properties only the other side
// lists: under allOf, a property one schema does not list is an additional property for it.
func crossAdditional(out, a, b *jsonObject) error {
	props, _ := out.get("properties")
	po, ok := props.(*jsonObject)
	if !ok {
		return nil
	}
	for _, side := range []*jsonObject{a, b} {
		addl, has := side.get("additionalProperties")
		if !has || addl == true {
			continue
		}
		sideProps := &jsonObject{vals: map[string]any{}}
		if p, ok := side.get("properties"); ok {
			sideProps, _ = p.(*jsonObject)
		}
		for _, k := range po.keys {
			if sideProps != nil {
				if _, listed := sideProps.get(k); listed {
					continue
				}
			}
			po = po.with(k, allOf(po.vals[k], addl))
		}
	}
	out.vals["properties"] = po
	return nil
}

func allOf(a, b any) any {
	switch {
	case a == true:
		return b
	case b == true:
		return a
	case a == false || b == false:
		return false
	}
	return newObject("allOf", []any{a, b})
}

func mergeKeyword(k string, a, b any, path string) (any, error) {
	switch k {
	case "type":
		ta, err := typeBits(a)
		if err != nil {
			return nil, err
		}
		tb, err := typeBits(b)
		if err != nil {
			return nil, err
		}
		t := ta & tb
		var names []any
		for _, n := range []string{"null", "boolean", "string", "array", "object"} {
			if t&typeNames[n] != 0 {
				names = append(names, n)
			}
		}
		if t&tNumber != 0 {
			names = append(names, "number")
		} else if t&tInteger != 0 {
			names = append(names, "integer")
		}
		if names == nil {
			names = []any{}
		}
		return names, nil
	case "properties":
		pa, ok1 := a.(*jsonObject)
		pb, ok2 := b.(*jsonObject)
		if !ok1 || !ok2 {
			return nil, invalidf("properties at %s is not an object", path)
		}
		out := pa.without()
		for _, key := range pb.keys {
			if old, ok := out.get(key); ok {
				out = out.with(key, allOf(old, pb.vals[key]))
			} else {
				out = out.with(key, pb.vals[key])
			}
		}
		return out, nil
	case "required":
		la, ok1 := a.([]any)
		lb, ok2 := b.([]any)
		if !ok1 || !ok2 {
			return nil, invalidf("required at %s is not a list", path)
		}
		out := slices.Clone(la)
		for _, x := range lb {
			if !slices.Contains(out, x) {
				out = append(out, x)
			}
		}
		return out, nil
	case "additionalProperties":
		return allOf(a, b), nil
	case "minimum", "minLength", "minItems", "maximum", "maxLength", "maxItems", "exclusiveMinimum", "exclusiveMaximum":
		na, ok1 := a.(json.Number)
		nb, ok2 := b.(json.Number)
		if !ok1 || !ok2 {
			if a == b {
				return a, nil
			}
			return nil, unsupportedf("allOf of %s values %v and %v (at %s)", k, a, b, path)
		}
		da, err := parseDecimal(string(na))
		if err != nil {
			return nil, err
		}
		db, err := parseDecimal(string(nb))
		if err != nil {
			return nil, err
		}
		r := cmpDecimal(da, db)
		lower := k == "minimum" || k == "minLength" || k == "minItems" || k == "exclusiveMinimum"
		if (lower && r >= 0) || (!lower && r <= 0) {
			return a, nil
		}
		return b, nil
	case "pattern":
		var out []any
		for _, p := range []any{a, b} {
			if l, ok := p.([]any); ok {
				out = append(out, l...)
			} else {
				out = append(out, p)
			}
		}
		return out, nil
	case "format":
		if a == b {
			return a, nil
		}
		return nil, unsupportedf("allOf of formats %v and %v (at %s)", a, b, path)
	case "enum":
		la, ok1 := a.([]any)
		lb, ok2 := b.([]any)
		if !ok1 || !ok2 {
			return nil, invalidf("enum at %s is not a list", path)
		}
		var out []any
		for _, x := range la {
			tx, err := canonicalJSON(x)
			if err != nil {
				return nil, err
			}
			for _, y := range lb {
				if ty, err := canonicalJSON(y); err == nil && tx == ty {
					out = append(out, x)
					break
				}
			}
		}
		if out == nil {
			out = []any{}
		}
		return out, nil
	case "const":
		ta, err := canonicalJSON(a)
		if err != nil {
			return nil, err
		}
		tb, err := canonicalJSON(b)
		if err != nil {
			return nil, err
		}
		if ta == tb {
			return a, nil
		}
		return nil, unsupportedf("allOf of different consts (at %s)", path)
	case "anyOf", "oneOf":
		la, ok1 := a.([]any)
		lb, ok2 := b.([]any)
		if !ok1 || !ok2 {
			return nil, invalidf("%s at %s is not a list", k, path)
		}
		if k == "oneOf" {
			return nil, unsupportedf("allOf of several oneOf (at %s)", path)
		}
		var out []any
		for _, x := range la {
			for _, y := range lb {
				out = append(out, allOf(x, y))
			}
		}
		return out, nil
	case "allOf":
		la, ok1 := a.([]any)
		lb, ok2 := b.([]any)
		if !ok1 || !ok2 {
			return nil, invalidf("allOf at %s is not a list", path)
		}
		return append(slices.Clone(la), lb...), nil
	}
	return nil, unsupportedf("allOf combining %q (at %s)", k, path)
}

func typeBits(t any) (uint8, error) {
	var names []any
	switch t := t.(type) {
	case string:
		names = []any{t}
	case []any:
		names = t
	default:
		return 0, invalidf("type is not a string or a list")
	}
	var bits uint8
	for _, n := range names {
		s, _ := n.(string)
		b, ok := typeNames[s]
		if !ok {
			return 0, invalidf("unknown type %v", n)
		}
		bits |= b
	}
	return bits, nil
}

// checkDisjoint accepts oneOf only when no value can be valid under two of its alternatives, so
// that generating under anyOf gives only valid values: alternatives of different types, of
// disjoint enums, or objects whose required discriminator properties have disjoint values.
func (c *schemaCompiler) checkDisjoint(branches []*jsonObject, path string) error {
	for i := range branches {
		for j := i + 1; j < len(branches); j++ {
			if !disjoint(branches[i], branches[j]) {
				return unsupportedf("oneOf whose alternatives %d and %d may both match (at %s; anyOf allows that)", i, j, path)
			}
		}
	}
	return nil
}

func disjoint(a, b *jsonObject) bool {
	if valueTypes(a)&valueTypes(b) == 0 {
		return true
	}
	if va, ok, _ := enumValues(a, ""); ok {
		if vb, ok, _ := enumValues(b, ""); ok && disjointValues(va, vb) {
			return true
		}
	}
	pa, _ := a.get("properties")
	pb, _ := b.get("properties")
	oa, ok1 := pa.(*jsonObject)
	ob, ok2 := pb.(*jsonObject)
	if !ok1 || !ok2 || valueTypes(a)&^tObject != 0 && valueTypes(b)&^tObject != 0 {
		return false
	}
	ra, _ := a.get("required")
	rb, _ := b.get("required")
	la, _ := ra.([]any)
	lb, _ := rb.([]any)
	for _, k := range oa.keys {
		if !slices.Contains(la, any(k)) || !slices.Contains(lb, any(k)) {
			continue
		}
		sa, ok1 := oa.vals[k].(*jsonObject)
		sb, ok2 := ob.vals[k].(*jsonObject)
		if !ok1 || !ok2 {
			continue
		}
		va, okA, _ := enumValues(sa, "")
		vb, okB, _ := enumValues(sb, "")
		if okA && okB && disjointValues(va, vb) {
			return valueTypes(a)&valueTypes(b) == tObject
		}
	}
	return false
}

// valueTypes is the set of JSON types a schema may allow, from its type and enum or const.
func valueTypes(o *jsonObject) uint8 {
	t := tAll
	if tv, ok := o.get("type"); ok {
		if bits, err := typeBits(tv); err == nil {
			t = bits
		}
	}
	if vals, ok, _ := enumValues(o, ""); ok {
		var vt uint8
		for _, v := range vals {
			switch x := v.(type) {
			case nil:
				vt |= tNull
			case bool:
				vt |= tBoolean
			case json.Number:
				if d, err := parseDecimal(string(x)); err == nil && d.frac == "" {
					vt |= tInteger
				} else {
					vt |= tNumber
				}
			case string:
				vt |= tString
			case []any:
				vt |= tArray
			case *jsonObject:
				vt |= tObject
			}
		}
		t &= vt
	}
	return t
}

func disjointValues(a, b []any) bool {
	seen := map[string]bool{}
	for _, v := range a {
		if t, err := canonicalJSON(v); err == nil {
			seen[t] = true
		}
	}
	for _, v := range b {
		if t, err := canonicalJSON(v); err == nil && seen[t] {
			return false
		}
	}
	return true
}
