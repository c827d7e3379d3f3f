package constraint

import (
	"errors"
	"strings"
	"testing"
)

// numberFormatCases: the OpenAPI number formats. int32 and int64 allow integers in their range,
// float and double any number; like every format they constrain only values of their type (a
// number format says nothing of a string).
var numberFormatCases = []schemaCase{
	{"int32", `{"type":"integer","format":"int32"}`,
		[]string{`0`, `-2147483648`, `2147483647`, `-7`}, []string{`2147483648`, `-2147483649`, `10000000000`, `1.5`, `"1"`}},
	{"int32-number", `{"type":"number","format":"int32"}`,
		[]string{`7`, `-2147483648`}, []string{`0.5`, `2147483648`, `-1e10`}},
	{"int32-bounds", `{"type":"integer","format":"int32","minimum":-5,"exclusiveMaximum":3000000000}`,
		[]string{`-5`, `2147483647`}, []string{`-6`, `2147483648`}},
	{"int32-minimum", `{"type":"integer","format":"int32","minimum":2147483647}`,
		[]string{`2147483647`}, []string{`2147483646`, `2147483648`}},
	{"int64", `{"type":"integer","format":"int64"}`,
		[]string{`0`, `-9223372036854775808`, `9223372036854775807`}, []string{`1.5`, `-0.5`}},
	{"float", `{"type":"number","format":"float"}`,
		[]string{`1.5`, `-2e10`, `3`, `0`}, []string{`"x"`, `null`}},
	{"double-bounded", `{"type":"number","format":"double","maximum":10}`,
		[]string{`10`, `9.5`, `-1`}, []string{`10.5`, `11`}},
	{"untyped", `{"format":"int32"}`,
		[]string{`"x"`, `5`, `null`, `[1.5]`, `{"a":3000000000}`}, []string{`1.5`, `2147483648`}},
	{"string-or-integer", `{"type":["string","integer"],"format":"int32"}`,
		[]string{`"abc"`, `12`}, []string{`3000000000`, `true`}},
	{"string-or-number-double", `{"type":["string","number"],"format":"double"}`,
		[]string{`"abc"`, `1.25`}, []string{`true`}},
	{"enum", `{"enum":[1,3000000000,"a"],"format":"int32"}`,
		[]string{`1`, `"a"`}, []string{`3000000000`, `2`}},
	{"property-names", `{"type":"object","propertyNames":{"format":"int64"},"additionalProperties":{"type":"integer","format":"int32"}}`,
		[]string{`{}`, `{"abc":1}`}, []string{`{"abc":2147483648}`}},
}

// numberFormatRanges: int64's range, which ajv does not check (it takes any integer, as JavaScript
// numbers lose int64's precision): integers beyond it are refused.
var numberFormatRanges = []schemaCase{
	{"int64-range", `{"type":"integer","format":"int64"}`,
		[]string{`9223372036854775807`, `-9223372036854775808`}, []string{`9223372036854775808`, `-9223372036854775809`, `100000000000000000000`}},
	{"int64-untyped", `{"format":"int64"}`,
		[]string{`"s"`, `-9223372036854775808`}, []string{`9223372036854775808`, `0.5`}},
}

func TestNumberFormats(t *testing.T) {
	t.Run("ajv", func(t *testing.T) { checkWithAjv(t, numberFormatCases) })
	checkSchemaCases(t, numberFormatCases)
	checkSchemaCases(t, numberFormatRanges)
	v := testVocab(t)
	for _, schema := range []string{`{"type":"integer","format":5}`, `{"type":"string","format":["date"]}`} {
		if _, err := Compile(Spec{Kind: JSONSchema, Text: schema}, v, Options{}); !errors.Is(err, ErrSyntax) {
			t.Errorf("%s: %v, want a syntax error", schema, err)
		}
	}
}

// minPropertiesCases: a member repeated under one key is one property (the last value wins), so it
// cannot help meet minProperties. Members beyond the listed properties may repeat a key, so a
// schema that would need two of them is refused, naming minProperties; the others are exact.
var minPropertiesCases = []schemaCase{
	{"any-keys", `{"type":"object","minProperties":2}`,
		[]string{`{"a":1,"b":2}`, `{"a":1,"b":2,"c":3}`}, []string{`{"a":1,"a":2}`, `{"a":1}`, `{}`}},
	{"optional-listed", `{"type":"object","properties":{"a":{},"b":{},"c":{}},"minProperties":2}`,
		[]string{`{"a":1,"b":2}`, `{"a":1,"x":2}`}, []string{`{"x":1,"x":2}`, `{"a":1,"a":2}`, `{"c":1}`}},
	{"patterns", `{"type":"object","patternProperties":{"^x":{}},"additionalProperties":false,"minProperties":2}`,
		[]string{`{"x":1,"xy":2}`}, []string{`{"x":1,"x":2}`, `{"x":1}`}},
	{"required-plus-two", `{"type":"object","required":["a"],"minProperties":3}`,
		[]string{`{"a":1,"b":2,"c":3}`}, []string{`{"a":1,"b":2,"b":3}`, `{"a":1,"b":2}`}},
	{"required-plus-one", `{"type":"object","properties":{"a":{}},"required":["a"],"minProperties":2}`,
		[]string{`{"a":1,"x":1}`, `{"a":1,"x":1,"y":2}`}, []string{`{"a":1}`, `{"a":1,"a":2}`, `{"x":1,"x":2}`}},
	{"required-two", `{"type":"object","required":["a","b"],"minProperties":3,"maxProperties":3}`,
		[]string{`{"a":1,"b":2,"c":3}`}, []string{`{"a":1,"b":2,"b":3}`, `{"a":1,"b":2}`, `{"a":1,"b":2,"c":3,"d":4}`}},
	{"enum", `{"enum":[{"a":1,"b":2},{"a":1},{"x":[]}],"minProperties":2}`,
		[]string{`{"a":1,"b":2}`}, []string{`{"a":1}`, `{"x":[]}`, `{"a":1,"a":2}`}},
	{"closed", `{"type":"object","properties":{"a":{},"b":{},"c":{}},"additionalProperties":false,"minProperties":3}`,
		[]string{`{"a":1,"b":2,"c":3}`}, []string{`{"a":1,"b":2}`, `{"a":1,"a":2,"a":3}`, `{"a":1,"b":2,"x":3}`}},
}

// minPropertiesRefused are the cases of minPropertiesCases that may be refused.
var minPropertiesRefused = map[string]bool{"any-keys": true, "optional-listed": true, "patterns": true, "required-plus-two": true}

func TestMinPropertiesDistinct(t *testing.T) {
	t.Run("ajv", func(t *testing.T) { checkWithAjv(t, minPropertiesCases) })
	v := testVocab(t)
	for _, c := range minPropertiesCases {
		t.Run(c.name, func(t *testing.T) {
			g, err := Compile(Spec{Kind: JSONSchema, Text: c.schema}, v, Options{})
			if err != nil {
				if !minPropertiesRefused[c.name] || !errors.Is(err, ErrUnsupported) || !strings.Contains(err.Error(), "minProperties") {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			checkMatches(t, g, c.accept, c.reject)
		})
	}
}
