package chattemplate

import (
	"strings"
	"testing"
)

// TestPathologicalTemplates: a faulty template fails its render (or its parse) with an error; it
// must never exhaust the stack (a fatal error that ends the process), loop without end, or
// allocate without bound.
func TestPathologicalTemplates(t *testing.T) {
	tests := []struct {
		name, src string
		parseErr  bool
		want      string // the output, or a part of the error
	}{
		{"endless macro recursion", "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", false, "nested deeper than 200"},
		{"huge range", "{{ range(100000000) | length }}", false, "range too long"},
		{"huge string repetition", "{{ 'x' * 1000000000 }}", false, "output exceeds"},
		{"huge list repetition", "{{ [1, 2] * 1000000000 }}", false, "list repetition too long"},
		{"nested loops", "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}", false, "runs too long"},
		{"huge output", "{% set s = 'x' * 1000000 %}{% for i in range(1000) %}{{ s }}{% endfor %}", false, "output exceeds"},
		{"list containing itself", "{% set l = [] %}{{ l.append(l) }}{{ l }}|{{ l == l }}", false, "None[[...]]|True"},
		{"namespace containing itself", "{% set ns = namespace(a=1) %}{% set ns.x = ns %}{{ ns.x.x.a }}", false, "1"},
		{"tojson of a cycle", "{% set l = [] %}{{ l.append(l) }}{{ l | tojson }}", false, "circular reference"},
		{"sorting a cycle", "{% set l = [] %}{{ l.append(l) }}{{ [l, l] | sort }}", false, ""},
		{"deep parentheses", "{{ " + strings.Repeat("(", 100000) + "1" + strings.Repeat(")", 100000) + " }}", true, "nested deeper than 500"},
		{"deep negation", "{{ " + strings.Repeat("-", 100000) + "1 }}", true, "nested deeper than 500"},
		{"deep not", "{{ " + strings.Repeat("not ", 100000) + "1 }}", true, "nested deeper than 500"},
		{"deep list literal", "{{ " + strings.Repeat("[", 100000) + strings.Repeat("]", 100000) + " }}", true, "nested deeper than 500"},
		{"deep blocks", strings.Repeat("{% if true %}", 100000) + strings.Repeat("{% endif %}", 100000), true, "nested deeper than 500"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tpl, err := Parse(tc.src)
			if tc.parseErr {
				if err == nil || !strings.Contains(err.Error(), tc.want) {
					t.Fatalf("Parse: %v, want an error saying %q", err, tc.want)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			out, err := tpl.Render(Input{})
			switch {
			case tc.want == "":
				// Either outcome is fine; finishing is the point.
			case err != nil && !strings.Contains(err.Error(), tc.want):
				t.Errorf("Render error %v, want one saying %q", err, tc.want)
			case err == nil && out != tc.want:
				t.Errorf("Render = %q, want %q", out, tc.want)
			}
		})
	}
}
