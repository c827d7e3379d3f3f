package chattemplate

import (
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func TestExecute(t *testing.T) {
	vars := map[string]any{
		"s":    "  Hello World  ",
		"n":    3,
		"xs":   []any{"a", "b", "c"},
		"msgs": []any{map[string]any{"role": "user", "content": "hi"}, map[string]any{"role": "assistant", "content": "yo"}},
		"d":    map[string]any{"b": 2, "a": 1},
		"none": nil,
	}
	tests := []struct{ name, src, want string }{
		{"text", "plain text", "plain text"},
		{"trailing newline dropped", "x\n", "x"},
		{"print", "{{ s }}", "  Hello World  "},
		{"undefined prints nothing", "[{{ missing }}]", "[]"},
		{"none prints None", "{{ none }}", "None"},
		{"booleans", "{{ true }} {{ False }}", "True False"},
		{"arith", "{{ 1 + 2 * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 2 ** 10 }} {{ 7 / 2 }}", "7 3 -4 1 2 1024 3.5"},
		{"float repr", "{{ 1.0 }} {{ 0.1 + 0.2 }} {{ 4 / 2 }}", "1.0 0.30000000000000004 2.0"},
		{"concat tilde", "{{ 'a' ~ 1 ~ none }}", "a1None"},
		{"filter binds tighter than plus", "{{ 'x' + s | trim }}", "xHello World"},
		{"ternary", "{{ 'y' if n > 2 else 'n' }}{{ ('a' if false) }}", "y"},
		{"ternary in parens with concat", "{{ 'p' + ('q' if n == 3 else '') }}", "pq"},
		{"and or return operands", "{{ 0 or 'z' }} {{ 'a' and 'b' }} {{ not 0 }}", "z b True"},
		{"in", "{{ 'ell' in 'hello' }} {{ 'b' in xs }} {{ 'a' in d }} {{ 'q' not in xs }}", "True True True True"},
		{"comparisons", "{{ 1 < 2 <= 2 }} {{ 'a' < 'b' }} {{ 1 == 1.0 }} {{ xs == ['a','b','c'] }}", "True True True True"},
		{"slicing", "{{ xs[::-1] | join(',') }} {{ xs[1:] | join }} {{ xs[-1] }} {{ 'hello'[1:3] }} {{ 'héllo'[::-2] }}", "c,b,a bc c el olh"},
		{"index out of range is undefined", "[{{ xs[10] }}]", "[]"},
		{"dict attr and item", "{{ d.a }}{{ d['b'] }}{{ msgs[0].role }}{{ msgs[1]['content'] }}", "12useryo"},
		{"methods", "{{ s.strip() }}|{{ s.lstrip() }}|{{ 'xxhixx'.strip('x') }}|{{ 'a,b,,c'.split(',') | length }}|{{ 'a b  c'.split() }}|{{ 'ab'.upper() }}|{{ 'Hi'.startswith('H') }}|{{ 'Hi'.endswith(('x','i')) }}",
			"Hello World|Hello World  |hi|4|['a', 'b', 'c']|AB|True|True"},
		{"split maxsplit", "{{ 'a b c'.split(' ', 1) }} {{ 'a-b-c'.rsplit('-', 1) }} {{ '  a  b c '.split(none, 1) }}", "['a', 'b c'] ['a-b', 'c'] ['a', 'b c ']"},
		{"dict methods", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d.get('z', 9) }}{{ d.keys() | list | length }}", "a=1;b=2;92"},
		{"filters", "{{ s | trim | upper }} {{ xs | length }} {{ xs | first }}{{ xs | last }} {{ 'ab' | capitalize }} {{ 'hello world' | title }} {{ -3 | abs }} {{ '7' | int + 1 }} {{ [3,1,2] | sort | join }} {{ [1,1,2] | unique | list | length }}",
			"HELLO WORLD 3 ac Ab Hello World 3 8 123 2"},
		{"default", "{{ missing | default('dflt') }} {{ '' | default('e', true) }} {{ n | d(0) }}", "dflt e 3"},
		{"tojson", "{{ d | tojson }} {{ xs | tojson }} {{ 'é\"\\n' | tojson }} {{ none | tojson }} {{ {'k': [1, 2.5, true]} | tojson(indent=2) }}",
			"{\"a\": 1, \"b\": 2} [\"a\", \"b\", \"c\"] \"é\\\"\\n\" null {\n  \"k\": [\n    1,\n    2.5,\n    true\n  ]\n}"},
		// Undefined is null in tojson (Python raises): a tool without parameters renders as vLLM, which
		// model_dump()s its tools, renders it.
		{"tojson undefined", "{{ missing | tojson }} {{ {'p': d.missing} | tojson }} {{ [missing] | tojson }}", "null {\"p\": null} [null]"},
		{"map selectattr", "{{ msgs | map(attribute='role') | join(',') }} {{ msgs | selectattr('role', 'equalto', 'user') | list | length }} {{ msgs | rejectattr('role', 'eq', 'user') | map(attribute='content') | first }}",
			"user,assistant 1 yo"},
		{"tests", "{{ s is string }} {{ n is number }} {{ missing is defined }} {{ none is none }} {{ xs is iterable }} {{ d is mapping }} {{ n is odd }} {{ 6 is divisibleby 3 }} {{ n is not string }}",
			"True True False True True True True True True"},
		{"loop vars", "{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.first }}{{ loop.last }}{{ loop.length }}{{ loop.revindex }} {% endfor %}",
			"10TrueFalse33 21FalseFalse32 32FalseTrue31 "},
		{"loop cycle prev next", "{% for x in xs %}{{ loop.cycle('o','e') }}{{ loop.previtem }}{{ loop.nextitem }}|{% endfor %}", "ob|eac|ob|"},
		{"for else and filter", "{% for x in [] %}x{% else %}empty{% endfor %} {% for x in xs if x != 'b' %}{{ x }}{% endfor %}", "empty ac"},
		{"break continue", "{% for x in xs %}{% if x == 'b' %}{% continue %}{% endif %}{% if x == 'c' %}{% break %}{% endif %}{{ x }}{% endfor %}", "a"},
		{"set scoping in loops", "{% set v = 1 %}{% for x in xs %}{% set v = 2 %}{% endfor %}{{ v }}", "1"},
		{"set in if leaks", "{% if true %}{% set v = 5 %}{% endif %}{{ v }}", "5"},
		{"namespace", "{% set ns = namespace(c=0, s='') %}{% for x in xs %}{% set ns.c = ns.c + 1 %}{% set ns.s = ns.s ~ x %}{% endfor %}{{ ns.c }}{{ ns.s }}", "3abc"},
		{"tuple unpack set", "{% set a, b = 1, 2 %}{{ a }}{{ b }}", "12"},
		{"block set", "{% set block %}x{{ n }}{% endset %}[{{ block }}]", "[x3]"},
		{"macro", "{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}{{ greet('Bob') }} {{ greet('Al', punct='?') }}", "Hi Bob! Hi Al?"},
		{"list append", "{% set l = [] %}{% for x in xs %}{% set _ = l.append(x | upper) %}{% endfor %}{{ l | join }}", "ABC"},
		{"range", "{% for i in range(3) %}{{ i }}{% endfor %}{{ range(1, 10, 4) | list }}", "012[1, 5, 9]"},
		{"dict literal in output", "{{ {'a': {'b': 1}} }}", "{'a': {'b': 1}}"},
		{"string escapes", `{{ 'a\nb\t\'q\'' }}{{ "\u00e9\x41" }}{{ 'x' 'y' }}`, "a\nb\t'q'éAxy"},
		{"comment", "a{# hidden #}b{#- strip -#}  c", "abc"},
		{"raw", "{% raw %}{{ not parsed }}{% endraw %}", "{{ not parsed }}"},
		{"generation tag ignored", "{% generation %}x{% endgeneration %}", "x"},
		{"filter block", "{% filter upper %}abc{% endfilter %}", "ABC"},
		{"whitespace dash", "a  {{- 'b' -}}  c\n {%- if true -%}\n d {%- endif %}", "abcd"},
		{"trim_blocks", "{% if true %}\nx\n{% endif %}\ny", "x\ny"},
		{"lstrip_blocks", "a\n    {% if true %}\n    x\n    {% endif %}\nb", "a\n    x\nb"},
		{"lstrip keeps text before tag", "a {% if true %}b{% endif %}", "a b"},
		{"lstrip not on variables", "  {{ 'x' }}", "  x"},
		{"plus disables lstrip", "  {%+ if true %}x{% endif %}", "  x"},
		{"elif chain", "{% for v in [1, 2, 3] %}{% if v == 1 %}one{% elif v == 2 %}two{% else %}many{% endif %} {% endfor %}", "one two many "},
		{"unicode length", "{{ 'héllo🙂' | length }}", "6"},
		{"strftime", "{{ strftime_now('%d %B %Y') }}", "07 June 2024"},
		{"replace and format", "{{ 'aaa'.replace('a', 'b', 2) }} {{ '{} and {x}'.format(1, x=2) }}", "bba 1 and 2"},
		{"items filter", "{% for k, v in d | items %}{{ k }}{{ v }}{% endfor %}{{ d | dictsort | first | first }}", "a1b2a"},
		{"string iteration", "{% for c in 'héy' %}[{{ c }}]{% endfor %}", "[h][é][y]"},
		{"indent", "{{ 'a\nb\n\nc' | indent(2) }}", "a\n  b\n\n  c"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tpl, err := Parse(tc.src)
			if err != nil {
				t.Fatalf("parse %q: %v", tc.src, err)
			}
			tpl.now = func() time.Time { return time.Date(2024, 6, 7, 12, 0, 0, 0, time.UTC) }
			got, err := tpl.Execute(vars)
			if err != nil {
				t.Fatalf("execute %q: %v", tc.src, err)
			}
			if got != tc.want {
				t.Errorf("%q:\n got %q\nwant %q", tc.src, got, tc.want)
			}
		})
	}
}

func TestErrors(t *testing.T) {
	tests := []struct{ name, src string }{
		{"unclosed tag", "{{ x "},
		{"unclosed if", "{% if x %}y"},
		{"stray endif", "{% endif %}"},
		{"unknown statement", "{% frobnicate %}"},
		{"bad expression", "{{ 1 + }}"},
		{"unterminated string", "{{ 'abc }}"},
		{"unclosed comment", "{# abc"},
		{"unknown filter", "{{ 1 | nosuchfilter }}"},
		{"unknown test", "{{ 1 is nosuchtest }}"},
		{"undefined attribute of undefined", "{{ missing.attr }}"},
		{"calling undefined", "{{ missing() }}"},
		{"string plus int", "{{ 'a' + 1 }}"},
		{"division by zero", "{{ 1 / 0 }}"},
		{"set attribute on dict", "{% set d = {} %}{% set d.x = 1 %}"},
		{"compare mismatched", "{{ 'a' < 1 }}"},
		{"raise", "{{ raise_exception('nope') }}"},
		{"runaway loop", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tpl, err := Parse(tc.src)
			if err != nil {
				return // a parse error is the expected failure
			}
			if out, err := tpl.Execute(nil); err == nil {
				t.Errorf("%q: no error, output %q", tc.src, out)
			}
		})
	}
	if _, err := Parse("  \n"); !errors.Is(err, ErrNoTemplate) {
		t.Errorf("empty template: %v, want ErrNoTemplate", err)
	}
	tpl, _ := Parse("{{ raise_exception('roles must alternate') }}")
	_, err := tpl.Execute(nil)
	var re *RaiseError
	if !errors.As(err, &re) || re.Message != "roles must alternate" {
		t.Errorf("raise_exception: %v, want RaiseError", err)
	}
}

// chatML is a typical template written for the tests (not a model's).
const chatML = `{%- for message in messages %}
    {{- '<|im_start|>' + message['role'] + '\n' + message['content'] | trim + '<|im_end|>\n' }}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
{%- endif %}`

func TestRender(t *testing.T) {
	tpl, err := Parse(chatML)
	if err != nil {
		t.Fatal(err)
	}
	got, err := tpl.Render(Input{Messages: []Message{{Role: "system", Content: "S"}, {Role: "user", Content: " U \n"}}, AddGenerationPrompt: true})
	if err != nil {
		t.Fatal(err)
	}
	want := "<|im_start|>system\nS<|im_end|>\n<|im_start|>user\nU<|im_end|>\n<|im_start|>assistant\n"
	if got != want {
		t.Errorf("got %q want %q", got, want)
	}
	bos, _ := Parse("{{ bos_token }}|{{ eos_token is none }}|{{ enable_thinking }}")
	got, err = bos.Render(Input{BOSToken: "<s>", Extra: map[string]any{"enable_thinking": false}})
	if err != nil || got != "<s>|True|False" {
		t.Errorf("special tokens: %q, %v", got, err)
	}
}

// FuzzRender renders random message contents through a template and checks that each content
// appears in the output exactly as given (templates must treat content as data, never as code).
func FuzzRender(f *testing.F) {
	tpl, err := Parse(`{% for m in messages %}<{{ m.role }}>{{ m.content }}</{{ m.role }}>{% endfor %}{% if add_generation_prompt %}<assistant>{% endif %}`)
	if err != nil {
		f.Fatal(err)
	}
	for _, s := range []string{"", "hello", "{{ x }}", "{% if %}", "</user>", "\n\n", "é🙂", "\x00\xff"} {
		f.Add(s, s+"2", true)
	}
	f.Fuzz(func(t *testing.T, a, b string, gen bool) {
		out, err := tpl.Render(Input{Messages: []Message{{Role: "user", Content: a}, {Role: "assistant", Content: b}}, AddGenerationPrompt: gen})
		if err != nil {
			t.Fatal(err)
		}
		want := "<user>" + a + "</user><assistant>" + b + "</assistant>"
		if gen {
			want += "<assistant>"
		}
		if out != want {
			t.Fatalf("got %q want %q", out, want)
		}
	})
}

// FuzzParse feeds arbitrary sources to the parser and renderer: errors are fine, panics are not.
func FuzzParse(f *testing.F) {
	for _, s := range []string{chatML, "{{ a[1:2:3] }}", "{% for a, b in c if d %}{% else %}{% endfor %}", "{{ {'a': [1, (2,)]} }}",
		"{% set ns = namespace(x=1) %}{% set ns.x = ns.x + 1 %}{{ ns.x }}", "{{ 'x' | replace('a', 'b') | trim }}", "{%- raw -%}{{{% endraw %}"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, src string) {
		tpl, err := Parse(src)
		if err != nil {
			return
		}
		tpl.Render(Input{Messages: []Message{{Role: "user", Content: "hi"}}, AddGenerationPrompt: true}) //nolint:errcheck // errors are fine
	})
}

// TestRenderTools: tools and tool calls reach the template as dicts with their keys in the JSON's order
// (tojson shows it), tool messages carry tool_call_id, and tools is None without tools.
func TestRenderTools(t *testing.T) {
	tpl, err := Parse(`{% if tools is none %}no tools{% else %}{% for t in tools %}{{ t.function | tojson }};{% endfor %}{% endif %}` +
		`{% for m in messages %}|{{ m.role }}:{{ m.content }}{% if m.tool_calls is defined %}{% for c in m.tool_calls %}` +
		`[{{ c.id }} {{ c.function.name }} {{ c.function.arguments | tojson }}]{% endfor %}{% endif %}` +
		`{% if m.tool_call_id is defined %}<{{ m.tool_call_id }}>{% endif %}{% endfor %}`)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		in   Input
		want string
	}{
		{"no tools", Input{Messages: []Message{{Role: "user", Content: "hi"}}}, "no tools|user:hi"},
		{"tools and calls", Input{
			Tools: []json.RawMessage{json.RawMessage(`{"type":"function","function":{"name":"f","parameters":{"z":1,"a":[true,null,2.5,"é"]}}}`)},
			Messages: []Message{
				{Role: "user", Content: "q"},
				{Role: "assistant", ToolCalls: []json.RawMessage{json.RawMessage(`{"id":"c1","type":"function","function":{"name":"f","arguments":{"y":2,"b":{"k":"v"}}}}`)}},
				{Role: "tool", Content: "r", ToolCallID: "c1"},
			}},
			`{"name": "f", "parameters": {"z": 1, "a": [true, null, 2.5, "é"]}};|user:q|assistant:[c1 f {"y": 2, "b": {"k": "v"}}]|tool:r<c1>`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tpl.Render(tc.in)
			if err != nil || got != tc.want {
				t.Errorf("Render = %q, %v; want %q", got, err, tc.want)
			}
		})
	}
	for _, bad := range []string{`{"a":`, `{} x`, `{}{}`, `0A0`} {
		if _, err := tpl.Render(Input{Tools: []json.RawMessage{json.RawMessage(bad)}}); err == nil {
			t.Errorf("a tool of broken JSON %q rendered", bad)
		}
	}
}

// renderCases parses and renders each case with vars and compares with its expected output.
func renderCases(t *testing.T, vars map[string]any, tests []struct{ name, src, want string }) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tpl, err := Parse(tc.src)
			if err != nil {
				t.Fatalf("parse %q: %v", tc.src, err)
			}
			got, err := tpl.Execute(vars)
			if err != nil {
				t.Fatalf("execute %q: %v", tc.src, err)
			}
			if got != tc.want {
				t.Errorf("%q:\n got %q\nwant %q", tc.src, got, tc.want)
			}
		})
	}
}

// TestLstripAfterTrimmedNewline: a tag whose line trim_blocks began (the tag before ends the previous
// line) still takes its indentation (lstrip_blocks), as in Python's Jinja2 and @huggingface/jinja;
// {% raw %} keeps the newline after it (Python's Jinja2; @huggingface/jinja has no raw).
func TestLstripAfterTrimmedNewline(t *testing.T) {
	renderCases(t, map[string]any{"xs": []any{"a", "b"}}, []struct{ name, src, want string }{
		{"block after block", "{% if true %}\n  {% endif %}x", "x"},
		{"nested block", "{% if true %}\n  {% if true %}y{% endif %}{% endif %}", "y"},
		{"indented loop body", "{% for i in xs %}\n  {% if true %}{{ i }}{% endif %}\n{% endfor %}", "ab"},
		{"after comment", "x{# c #}\n  {% if true %}y{% endif %}", "xy"},
		{"comment after block", "y {% if true %}\n\t {# c #}\n\n z{% endif %}", "y \n z"},
		{"variable is not stripped", "{% if true %}\n  {{ 'v' }}{% endif %}", "  v"},
		{"plus keeps it", "{% if true %}\n  {%+ endif %}x", "  x"},
		{"plus on the right keeps the newline", "{% if true +%}\n  {% endif %}x", "\nx"},
		{"raw keeps its first newline", "{% raw %}\n{{ x }}\n{% endraw %}\nz", "\n{{ x }}\nz"},
		{"raw with dash", "{% raw -%}\n  {{ x }}{% endraw %}", "{{ x }}"},
	})
}

// TestNewlineNormalization: a template's line breaks render as "\n" whatever it was saved with, as
// Python's Jinja2 reads templates (transformers renders with it); escapes in string literals and the
// values printed keep their "\r".
func TestNewlineNormalization(t *testing.T) {
	renderCases(t, map[string]any{"c": "p\r\nq"}, []struct{ name, src, want string }{
		{"crlf with trim_blocks", "a\r\n{% if true %}\r\nb\r\n{% endif %}\r\nc\r\n", "a\nb\nc"},
		{"lone cr", "a\rb\r", "a\nb"},
		{"raw cr in a string literal", "{{ \"x\ry\" }}", "x\ny"},
		{"escapes kept", `{{ "x\r\ny" }}`, "x\r\ny"},
		{"values kept", "{{ c }}\r\n", "p\r\nq"},
		{"crlf indentation", "{% for i in [1, 2] %}\r\n  {% if true %}{{ i }}{% endif %}\r\n{% endfor %}", "12"},
	})
}

// TestMacroParamsAndCallBlocks: macros with several defaults, and {% call %} blocks whose macro
// calls caller(), with and without caller parameters, as Python's Jinja2 and @huggingface/jinja
// render them (@huggingface/jinja prints none as the empty string where Python prints None).
func TestMacroParamsAndCallBlocks(t *testing.T) {
	renderCases(t, nil, []struct{ name, src, want string }{
		{"several defaults", "{% macro m(a, b='B', c=none) %}{{ a }}{{ b }}{{ c }}{% endmacro %}{{ m(1) }} {{ m(1, 2) }} {{ m(1, c=3) }} {{ m(a=5) }}",
			"1BNone 12None 1B3 5BNone"},
		{"default of a ternary", "{% macro m(a, b='x' if a else 'y', c=[1, 2]) %}{{ b }}{{ c | length }}{% endmacro %}{{ m(0) }}", "y2"},
		{"caller", "{% macro m() %}[{{ caller() }}]{% endmacro %}{% call m() %}inside{% endcall %}", "[inside]"},
		{"caller with arguments", "{% macro m(x) %}<{{ caller(x * 2) }}>{% endmacro %}{% call(v) m(3) %}v={{ v }}{% endcall %}", "<v=6>"},
		{"caller sees the scope around the block", "{% macro m(x, y=1) %}{{ x }}{{ y }}:{{ caller() }}{% endmacro %}{% set q = 'Q' %}{% call m(1, y=2) %}{{ q }}{% endcall %}",
			"12:Q"},
		{"caller parameter defaults", "{% macro m() %}{{ caller() }}|{{ caller(1, b=2) }}{% endmacro %}{% call(a, b='d') m() %}{{ a }}{{ b }}{% endcall %}", "d|12"},
	})
}

// TestChainedComparisons: a < b < c means a < b and b < c, each operand evaluated once, as in
// Python's Jinja2 (@huggingface/jinja compares left to right, (a < b) < c, and fails on 3 > 2 > 1).
func TestChainedComparisons(t *testing.T) {
	renderCases(t, nil, []struct{ name, src, want string }{
		{"descending", "{{ 3 > 2 > 1 }}", "True"},
		{"ascending", "{{ 1 < 2 < 3 }} {{ 1 < 3 < 2 }}", "True False"},
		{"equalities", "{{ 1 == 1 == 1 }} {{ 2 == 2 == 1 }}", "True False"},
		{"mixed", "{{ 0 < 1 > 0 }} {{ 1 < 2 == true }} {{ 'a' in 'abc' in ['abc'] }}", "True False True"},
		{"stops at the first false", "{{ 1 > 2 < 'x' }}", "False"},
		{"middle evaluated once", "{% set l = [3, 2] %}{{ 1 < l.pop() < 3 }}{{ l }}", "True[3]"},
		{"single comparison unchanged", "{{ 2 > 1 }} {{ 'b' not in 'abc' }}", "True False"},
	})
}

// TestDictsortFilter: dictsort compares keys case-insensitively unless case_sensitive, and takes by
// and reverse, as Python's Jinja2 and @huggingface/jinja do (outputs in Python's repr).
func TestDictsortFilter(t *testing.T) {
	renderCases(t, nil, []struct{ name, src, want string }{
		{"case-insensitive", "{{ {'B': 1, 'a': 2, 'c': 0} | dictsort }}", "[('a', 2), ('B', 1), ('c', 0)]"},
		{"case-sensitive", "{{ {'B': 1, 'a': 2} | dictsort(true) }}", "[('B', 1), ('a', 2)]"},
		{"reverse", "{{ {'b': 2, 'a': 1, 'c': 3} | dictsort(reverse=true) }}", "[('c', 3), ('b', 2), ('a', 1)]"},
		{"by value, ties in order", "{{ {'b': 2, 'a': 1, 'c': 2} | dictsort(by='value') }}", "[('a', 1), ('b', 2), ('c', 2)]"},
		{"by value reversed, ties in order", "{{ {'b': 2, 'a': 1, 'c': 2} | dictsort(false, 'value', true) }}", "[('b', 2), ('c', 2), ('a', 1)]"},
		{"loop", "{% for k, v in {'z': 1, 'Y': 2} | dictsort %}{{ k }}{{ v }}{% endfor %}", "Y2z1"},
	})
}

// TestRoundFilter: round is Python's round (halves to even, ints stay ints) unless the method is ceil
// or floor, as in Python's Jinja2 (@huggingface/jinja has no round filter).
func TestRoundFilter(t *testing.T) {
	renderCases(t, nil, []struct{ name, src, want string }{
		{"halves to even", "{{ 2.5 | round }} {{ 3.5 | round }} {{ -2.5 | round }} {{ 0.5 | round }}", "2.0 4.0 -2.0 0.0"},
		{"precision on the exact value", "{{ 2.675 | round(2) }} {{ 2.567 | round(2) }} {{ 0.125 | round(2) }}", "2.67 2.57 0.12"},
		{"ints stay ints", "{{ 3 | round }} {{ 7 | round(2) }} {{ 1250 | round(-2) }} {{ -1250 | round(-2) }} {{ 1350 | round(-2) }}", "3 7 1200 -1200 1400"},
		{"negative precision", "{{ 1234.5 | round(-2) }} {{ -1351.0 | round(-2) }}", "1200.0 -1400.0"},
		{"ceil and floor", "{{ 2.5 | round(0, 'floor') }} {{ 2.1 | round(method='ceil') }} {{ 3 | round(1, 'ceil') }}", "2.0 3.0 3.0"},
	})
}

// TestReprEscapes: printing a list or dict writes its strings as Python's repr does, which escapes the
// characters str.isprintable rejects (controls, format characters, separators other than the space,
// private use), as transformers renders, for example, a message whose content is a list of parts
// through a template that expects a string. (@huggingface/jinja prints lists as JSON instead.)
func TestReprEscapes(t *testing.T) {
	renderCases(t, map[string]any{"content": []any{map[string]any{"type": "text", "text": "a\u2028b\u00a0\u200b\ufeff"}}},
		[]struct{ name, src, want string }{
			{"content parts", "{{ content }}", `[{'text': 'a\u2028b\xa0\u200b\ufeff', 'type': 'text'}]`},
			{"escape widths", `{{ ['\x7f\x85', '\U0001f642', '\U000e0001', 'é\u3000', '\x1f', '\t\n\r'] }}`,
				`['\x7f\x85', '🙂', '\U000e0001', 'é\u3000', '\x1f', '\t\n\r']`},
			{"strings print raw", "{{ content[0].text }}", "a\u2028b\u00a0\u200b\ufeff"},
		})
}

// TestRepetitionEitherSide: n * seq repeats seq as seq * n does, booleans counting as 0 and 1, as in
// Python's Jinja2 (@huggingface/jinja 0.5 repeats neither).
func TestRepetitionEitherSide(t *testing.T) {
	renderCases(t, nil, []struct{ name, src, want string }{
		{"string", "{{ 'ab' * 3 }} {{ 3 * 'ab' }} [{{ 'ab' * 0 }}] [{{ -1 * 'x' }}]", "ababab ababab [] []"},
		{"list", "{{ [1] * 3 }} {{ 2 * [1, 2] }}", "[1, 1, 1] [1, 2, 1, 2]"},
		{"booleans", "[{{ true * 'ab' }}] [{{ 'ab' * false }}]", "[ab] []"},
		{"numbers unchanged", "{{ 2 * 3 }} {{ 2 * 1.5 }} {{ true * 2 }}", "6 3.0 2"},
	})
}
