package chattemplate

import (
	"strings"
	"testing"
)

// The expected outputs in this file are Python's Jinja2 3.1 with transformers' settings
// (ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True), the loopcontrols extension,
// transformers' tojson), which transformers renders chat templates with.

// TestStringFormatting: Python's % formatting of strings and the filters and string methods built
// on Python's str (format, truncate, center, wordcount, striptags, zfill, find with bounds, the
// character classes, splitlines, partition, copy), with Python's results.
func TestStringFormatting(t *testing.T) {
	renderCases(t, nil, []struct{ name, src, want string }{
		{"percent s d i", "{{ '%s: %d' % ('a', 3) }}|{{ '%i%%' % 7.9 }}|{{ '%s' % none }}|{{ '%s and %s' % (true, [1, 'b']) }}|{{ '%d' % true }}", "a: 3|7%|None|True and [1, 'b']|1"},
		{"percent single value", "{{ '%s!' % 'hi' }}|{{ '%s' % (1,) }}|{{ '%s' % [1, 2] }}|{{ '%s' % {'a': 1} }}|{{ 'x' % {'a': 1} }}", "hi!|1|[1, 2]|{'a': 1}|x"},
		{"percent float precision", "{{ '%.2f' % 3.14159 }}|{{ '%f' % 2 }}|{{ '%.0f' % 2.5 }}|{{ '%.1f' % 0.25 }}|{{ '%.3F' % -1 }}|{{ '%f' % 1e20 }}", "3.14|2.000000|2|0.2|-1.000|100000000000000000000.000000"},
		{"percent width and flags", "[{{ '%5d' % 42 }}][{{ '%-5d' % 42 }}][{{ '%05d' % -42 }}][{{ '%+d' % 5 }}][{{ '% d' % 5 }}][{{ '%8.3f' % 3.14159 }}][{{ '%-8s' % 'ab' }}][{{ '%.2s' % 'abc' }}][{{ '%*d' % (4, 7) }}]", "[   42][42   ][-0042][+5][ 5][   3.142][ab      ][ab][   7]"},
		{"percent r", `{{ '%r' % 'x' }}|{{ '%r' % "it's" }}|{{ '%r' % 1.5 }}|{{ '%r' % none }}|{{ '%r' % [1, 'a'] }}`, `'x'|"it's"|1.5|None|[1, 'a']`},
		{"percent mapping", "{{ '%(name)s is %(age)d' % {'name': 'Bo', 'age': 7} }}", "Bo is 7"},
		{"percent other conversions", "{{ '%x %X %o %e %E %g %G %c' % (255, 255, 8, 12345.678, 0.00012, 1e-05, 123456789.0, 65) }}|{{ '%g %g %.3g %#x' % (0.5, 100000, 3.14159, 255) }}", "ff FF 10 1.234568e+04 1.200000E-04 1e-05 1.23457E+08 A|0.5 100000 3.14 0xff"},
		{"format filter", "{{ '%s - %s' | format('a', 'b') }}|{{ '%(x)s!' | format(x=1) }}|{{ 'plain' | format }}|{{ '%.1f%%' | format(99.44) }}|{{ '%s' | format([1, 2]) }}", "a - b|1!|plain|99.4%|[1, 2]"},
		{"truncate", "{{ 'foo bar baz qux' | truncate(9) }}|{{ 'foo bar baz qux' | truncate(9, true) }}|{{ 'foo bar baz qux' | truncate(11) }}|{{ 'foo bar baz qux' | truncate(11, false, '...', 0) }}|{{ 'foo bar baz qux' | truncate(5, end='~', leeway=0) }}|{{ 'héllo wörld' | truncate(7, leeway=0) }}|{{ 'abcdefghij' | truncate(5, leeway=0) }}", "foo...|foo ba...|foo bar baz qux|foo bar...|foo~|héll...|ab..."},
		{"center filter and method", "[{{ 'ab' | center(6) }}][{{ 'abc' | center(6) }}][{{ 'abc' | center(2) }}][{{ 'ab'.center(7, '*') }}][{{ 5 | center(5) }}]", "[  ab  ][ abc  ][abc][***ab**][  5  ]"},
		{"wordcount", "{{ 'a-b c_d é, 3.5' | wordcount }}|{{ '' | wordcount }}|{{ '  hello   world  ' | wordcount }}", "6|0|2"},
		{"striptags", `[{{ '<b>x</b>  y\n<i>z</i>' | striptags }}][{{ 'a <!-- <c> --> b &amp; &lt;tag&gt; &raquo; &#65;&#x42;' | striptags }}][{{ 'a < b' | striptags }}][{{ '<p>one</p><p>two</p>' | striptags }}]`, "[x y z][a b & <tag> » AB][a < b][onetwo]"},
		{"zfill", "{{ '42'.zfill(5) }}|{{ '-42'.zfill(5) }}|{{ '+7'.zfill(3) }}|{{ 'abc'.zfill(2) }}|{{ ''.zfill(3) }}", "00042|-0042|+07|abc|000"},
		{"find count index with bounds", "{{ 'abcabc'.find('c', 3) }}|{{ 'abcabc'.count('a', 1) }}|{{ 'abcabc'.index('b', 2) }}|{{ 'abcabc'.rfind('a', 0, 3) }}|{{ 'abcabc'.find('a', -3) }}|{{ 'abcabc'.count('', 2, 4) }}|{{ 'héllo'.find('l', 3) }}|{{ 'abc'.find('', 5) }}|{{ 'abc'.rfind('') }}", "5|1|4|0|3|3|3|-1|3"},
		{"is methods", "{{ '²'.isdigit() }}{{ '½'.isnumeric() }}{{ '½'.isdigit() }}{{ '²'.isdecimal() }}{{ '½'.isalnum() }}{{ '七'.isnumeric() }}{{ '12'.isdecimal() }}{{ 'a1'.isalnum() }}{{ 'Ab'.isascii() }}{{ 'é'.isascii() }}{{ ''.isascii() }}", "TrueTrueFalseFalseTrueTrueTrueTrueTrueFalseTrue"},
		{"istitle", `{{ 'Ab Cd'.istitle() }}{{ 'ab'.istitle() }}{{ 'AB'.istitle() }}{{ 'A1b'.istitle() }}{{ ''.istitle() }}{{ '1'.istitle() }}{{ "It'S".istitle() }}`, "TrueFalseFalseFalseFalseFalseTrue"},
		{"splitlines", `{{ 'a\x0bb\x1cc\u2028d\x85e\r\nf\rg\n'.splitlines() }}|{{ 'a\nb\r\n'.splitlines(true) }}|{{ 'x\n\ny'.splitlines(keepends=true) }}|{{ ''.splitlines() }}`, `['a', 'b', 'c', 'd', 'e', 'f', 'g']|['a\n', 'b\r\n']|['x\n', '\n', 'y']|[]`},
		{"partition", "{{ 'a=b=c'.partition('=') }}|{{ 'a=b=c'.rpartition('=') }}|{{ 'abc'.partition('=') }}|{{ 'abc'.rpartition('=') }}", "('a', '=', 'b=c')|('a=b', '=', 'c')|('abc', '', '')|('', '', 'abc')"},
		{"copy and sameas", "{{ {'a': 1}.copy() }}|{{ [1, 2].copy() }}{% set d = {'a': 1} %}{% set e = d.copy() %}|{{ e is sameas d }}|{{ d is sameas d }}|{{ 1 is sameas true }}|{{ none is sameas none }}|{{ 0 is sameas false }}", "{'a': 1}|[1, 2]|False|True|False|True|False"},
	})
}

// renderErrors renders each case and wants an error containing its text.
func renderErrors(t *testing.T, tests []struct{ name, src, want string }) {
	t.Helper()
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			tpl, err := Parse(tc.src)
			if err == nil {
				var out string
				out, err = tpl.Execute(nil)
				if err == nil {
					t.Fatalf("%q: no error, output %q", tc.src, out)
				}
			}
			if !strings.Contains(err.Error(), tc.want) {
				t.Errorf("%q: error %v, want one saying %q", tc.src, err, tc.want)
			}
		})
	}
}

// TestStringFormattingErrors: what Python refuses fails the render with Python's reason.
func TestStringFormattingErrors(t *testing.T) {
	renderErrors(t, []struct{ name, src, want string }{
		{"unknown conversion", "{{ '%y' % 1 }}", "unsupported format character 'y'"},
		{"too few arguments", "{{ '%s %s' % (1,) }}", "not enough arguments for format string"},
		{"too many arguments", "{{ '%s' % (1, 2) }}", "not all arguments converted"},
		{"number from a string", "{{ '%d' % 'x' }}", "%d format: a real number is required, not str"},
		{"hex of a float", "{{ '%x' % 1.5 }}", "%x format: an integer is required, not float"},
		{"key without a mapping", "{{ '%(a)s' % 1 }}", "format requires a mapping"},
		{"missing key", "{{ '%(a)s' % {'b': 1} }}", "format key 'a' not found"},
		{"lone percent", "{{ '%' % () }}", "incomplete format"},
		{"format with both kinds of arguments", "{{ '%s' | format(1, a=2) }}", "can't handle positional and keyword arguments"},
		{"truncate shorter than its end", "{{ 'abc' | truncate(2) }}", "expected length >= 3, got 2"},
		{"empty partition separator", "{{ 'a'.partition('') }}", "empty separator"},
		{"index not found", "{{ 'abcb'.index('a', 1) }}", "substring not found"},
		{"unknown filter", "{{ 'x' | nosuchfilter }}", `unknown filter "nosuchfilter"`},
	})
}
