package constraint

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"strings"
)

// JSON values as the schema compiler reads them: objects keep their keys' order (a schema's
// properties are generated in the order it lists them), numbers keep their text.

// jsonObject is a JSON object with its keys in order.
type jsonObject struct {
	keys []string
	vals map[string]any
}

func (o *jsonObject) get(k string) (any, bool) {
	v, ok := o.vals[k]
	return v, ok
}

// decodeOrdered decodes one JSON value: nil, bool, json.Number, string, []any or *jsonObject.
func decodeOrdered(data []byte) (any, error) {
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	v, err := decodeValue(dec, 0)
	if err != nil {
		return nil, fmt.Errorf("%w: %v", ErrSyntax, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return nil, fmt.Errorf("%w: data after the JSON value", ErrSyntax)
	}
	return v, nil
}

const maxJSONDepth = 200

func decodeValue(dec *json.Decoder, depth int) (any, error) {
	if depth > maxJSONDepth {
		return nil, fmt.Errorf("JSON nested deeper than %d", maxJSONDepth)
	}
	tok, err := dec.Token()
	if err != nil {
		return nil, err
	}
	switch t := tok.(type) {
	case json.Delim:
		switch t {
		case '{':
			o := &jsonObject{vals: map[string]any{}}
			for dec.More() {
				kt, err := dec.Token()
				if err != nil {
					return nil, err
				}
				k := kt.(string)
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				if _, dup := o.vals[k]; !dup {
					o.keys = append(o.keys, k)
				}
				o.vals[k] = v
			}
			_, err := dec.Token()
			return o, err
		case '[':
			arr := []any{}
			for dec.More() {
				v, err := decodeValue(dec, depth+1)
				if err != nil {
					return nil, err
				}
				arr = append(arr, v)
			}
			_, err := dec.Token()
			return arr, err
		}
		return nil, fmt.Errorf("unexpected %v", t)
	default:
		return t, nil
	}
}

// canonicalJSON writes v compactly, as the grammar of an enum or const writes it: keys in their
// order, numbers exactly and without an exponent, strings escaped as encoding/json does.
func canonicalJSON(v any) (string, error) {
	var sb strings.Builder
	err := writeCanonical(&sb, v)
	return sb.String(), err
}

func writeCanonical(sb *strings.Builder, v any) error {
	switch t := v.(type) {
	case nil:
		sb.WriteString("null")
	case bool:
		if t {
			sb.WriteString("true")
		} else {
			sb.WriteString("false")
		}
	case json.Number:
		d, err := parseDecimal(string(t))
		if err != nil {
			return err
		}
		sb.WriteString(d.String())
	case string:
		sb.WriteByte('"')
		for _, r := range t {
			if e := jsonEscape(r); e != "" {
				sb.WriteString(e)
			} else {
				sb.WriteRune(r)
			}
		}
		sb.WriteByte('"')
	case []any:
		sb.WriteByte('[')
		for i, x := range t {
			if i > 0 {
				sb.WriteByte(',')
			}
			if err := writeCanonical(sb, x); err != nil {
				return err
			}
		}
		sb.WriteByte(']')
	case *jsonObject:
		sb.WriteByte('{')
		for i, k := range t.keys {
			if i > 0 {
				sb.WriteByte(',')
			}
			if err := writeCanonical(sb, k); err != nil {
				return err
			}
			sb.WriteByte(':')
			if err := writeCanonical(sb, t.vals[k]); err != nil {
				return err
			}
		}
		sb.WriteByte('}')
	default:
		return fmt.Errorf("constraint: internal error: JSON value %T", v)
	}
	return nil
}

// jsonBuilder makes the rules of JSON text: whitespace, strings, numbers, any value.
type jsonBuilder struct {
	g       *grammar
	ws      *expr
	strRule int
	numRule int
	intRule int
	anyRule int
	objRule int
}

func newJSONBuilder(g *grammar, opts Options) *jsonBuilder {
	var ws byteSet
	for _, c := range []byte(" \t\n\r") {
		ws.add(c)
	}
	return &jsonBuilder{g: g, ws: repeatExpr(byteSetExpr(ws), 0, opts.whitespace()), strRule: -1, numRule: -1, intRule: -1, anyRule: -1, objRule: -1}
}

// str is any JSON string.
func (b *jsonBuilder) str() *expr {
	if b.strRule < 0 {
		b.strRule = b.g.add("string", seqExpr(litExpr(`"`), starExpr(runesExpr(anyRune, true)), litExpr(`"`)))
	}
	return refExpr(b.strRule)
}

var (
	digit19 = func() (s byteSet) { s.addRange('1', '9'); return }()
	digit09 = func() (s byteSet) { s.addRange('0', '9'); return }()
)

func integerText() *expr {
	return seqExpr(optExpr(litExpr("-")), altExpr(litExpr("0"), seqExpr(byteSetExpr(digit19), starExpr(byteSetExpr(digit09)))))
}

// num is any JSON number.
func (b *jsonBuilder) num() *expr {
	if b.numRule < 0 {
		digits := repeatExpr(byteSetExpr(digit09), 1, -1)
		var e, sign byteSet
		e.add('e')
		e.add('E')
		sign.add('+')
		sign.add('-')
		b.numRule = b.g.add("number", seqExpr(integerText(),
			optExpr(seqExpr(litExpr("."), digits)),
			optExpr(seqExpr(byteSetExpr(e), optExpr(byteSetExpr(sign)), digits))))
	}
	return refExpr(b.numRule)
}

// integer is any JSON integer (written without a fraction or exponent).
func (b *jsonBuilder) integer() *expr {
	if b.intRule < 0 {
		b.intRule = b.g.add("integer", integerText())
	}
	return refExpr(b.intRule)
}

// object returns `{` members `}` where each member is member(), separated by commas.
func (b *jsonBuilder) objectOf(key, value *expr) *expr {
	member := seqExpr(key, b.ws, litExpr(":"), b.ws, value)
	return seqExpr(litExpr("{"), b.ws, optExpr(seqExpr(member, starExpr(seqExpr(b.ws, litExpr(","), b.ws, member)), b.ws)), litExpr("}"))
}

func (b *jsonBuilder) arrayOf(item *expr) *expr {
	return seqExpr(litExpr("["), b.ws, optExpr(seqExpr(item, starExpr(seqExpr(b.ws, litExpr(","), b.ws, item)), b.ws)), litExpr("]"))
}

// anyValue is any JSON value.
func (b *jsonBuilder) anyValue() *expr {
	if b.anyRule < 0 {
		b.anyRule = b.g.declare("value")
		obj := b.g.add("object", b.objectOf(b.str(), refExpr(b.anyRule)))
		b.objRule = obj
		arr := b.g.add("array", b.arrayOf(refExpr(b.anyRule)))
		b.g.define(b.anyRule, altExpr(refExpr(obj), refExpr(arr), b.str(), b.num(),
			litExpr("true"), litExpr("false"), litExpr("null")))
	}
	return refExpr(b.anyRule)
}

// anyObject is any JSON object.
func (b *jsonBuilder) anyObject() *expr {
	b.anyValue()
	return refExpr(b.objRule)
}

// jsonObjectGrammar is the JSONObject kind: one JSON object, with bounded whitespace around it.
func jsonObjectGrammar(opts Options) *grammar {
	g := &grammar{}
	b := newJSONBuilder(g, opts)
	root := g.declare("root")
	g.define(root, seqExpr(b.ws, b.anyObject(), b.ws))
	g.root = root
	return g
}
