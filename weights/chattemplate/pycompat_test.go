package chattemplate

import (
	"encoding/json"
	"os"
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

// TestBigIntegers: ints are unbounded as in Python: arithmetic past int64 goes on exactly, integer
// literals and JSON integers of any size keep their value, and each prints all its digits.
func TestBigIntegers(t *testing.T) {
	vars := map[string]any{"n": json.Number("100000000000000000000"), "m": json.Number("-18446744073709551617")}
	renderCases(t, vars, []struct{ name, src, want string }{
		{"powers past int64", "{{ 2 ** 64 }} {{ 10 ** 20 }} {{ 3 ** 40 }} {{ (2 ** 64) ** 2 }} {{ (-2) ** 63 }} {{ (-1) ** 1000000000000 }} {{ 2 ** -1 }}", "18446744073709551616 100000000000000000000 12157665459056928801 340282366920938463463374607431768211456 -9223372036854775808 1 0.5"},
		{"sums and products past int64", "{{ 9223372036854775807 + 1 }} {{ -9223372036854775808 - 1 }} {{ 4294967296 * 4294967296 }} {{ -(-9223372036854775808) }} {{ -9223372036854775808 // -1 }} {{ 2 ** 63 - 1 }}", "9223372036854775808 -9223372036854775809 18446744073709551616 9223372036854775808 9223372036854775808 9223372036854775807"},
		{"floor division and modulo", "{{ (2 ** 64) // 3 }} {{ -(2 ** 64) // 3 }} {{ -(2 ** 64) % 7 }} {{ (2 ** 64) % -7 }} {{ (10 ** 40) // (10 ** 39) }}", "6148914691236517205 -6148914691236517206 5 -5 10"},
		{"true division and floats", "{{ 2 ** 64 / 2 }} {{ n / 3 }} {{ 2 ** 64 * 1.5 }} {{ 9007199254740993 / 1 }} {{ n + 0.5 }}", "9.223372036854776e+18 3.333333333333333e+19 2.7670116110564327e+19 9007199254740992.0 1e+20"},
		{"literals", "{{ 100000000000000000000 }} {{ 9223372036854775808 }} {{ -9223372036854775809 }}", "100000000000000000000 9223372036854775808 -9223372036854775809"},
		{"context integers", "{{ n }} {{ m }} {{ [n] | tojson }} {{ {'a': n} }} {{ n + 1 }} {{ n - n }} {{ (n - n) is integer }}", "100000000000000000000 -18446744073709551617 [100000000000000000000] {'a': 100000000000000000000} 100000000000000000001 0 True"},
		{"comparisons", "{{ n > 1.5 }} {{ n == 10 ** 20 }} {{ n == 1e20 }} {{ n < m }} {{ [n, 1, m] | sort }} {{ [n, 3] | max }} {{ n in [10 ** 20] }} {{ 2 ** 64 == 2.0 ** 64 }} {{ 2 ** 64 + 1 > 2.0 ** 64 }}", "True True True False [-18446744073709551617, 1, 100000000000000000000] 100000000000000000000 True True True"},
		{"filters and tests", "{{ n | abs }} {{ m | abs }} {{ -9223372036854775808 | abs }} {{ n is number }} {{ n is integer }} {{ n is odd }} {{ m is odd }} {{ n | string }} {{ n | float }} {{ 1e20 | int }} {{ '100000000000000000000' | int }} {{ [n, 2] | sum }}", "100000000000000000000 18446744073709551617 9223372036854775808 True True False True 100000000000000000000 1e+20 100000000000000000000 100000000000000000000 100000000000000000002"},
		{"round", "{{ n | round }} {{ (15 * 10 ** 19) | round(-20) }} {{ (25 * 10 ** 19) | round(-20) }} {{ (-25 * 10 ** 19) | round(-20) }} {{ 19 | round(-20) }} {{ 5 | round(-30) }}", "100000000000000000000 200000000000000000000 200000000000000000000 -200000000000000000000 0 0"},
		{"formatting", "{{ '%d %x %.1f %s %r' % (n, n, n, n, m) }} {{ '%d' % 1e30 }} {{ 'abc'[:n] }} {{ 'abc'[-n:] }}", "100000000000000000000 56bc75e2d63100000 100000000000000000000.0 100000000000000000000 -18446744073709551617 1000000000000000019884624838656 abc abc"},
	})
}

// TestBigIntegerErrors: what Python refuses, or an integer past 4300 digits (which Python refuses to
// print), fails the render; none gives a wrong number.
func TestBigIntegerErrors(t *testing.T) {
	renderErrors(t, []struct{ name, src, want string }{
		{"too many digits", "{{ 2 ** 100000 }}", "integer too large"},
		{"huge exponent", "{{ 7 ** 999999999999 }}", "integer too large"},
		{"too large for a float", "{{ 10 ** 400 + 1.5 }}", "int too large to convert to float"},
		{"quotient too large for a float", "{{ 10 ** 400 / 3 }}", "too large for a float"},
		{"zero to a negative power", "{{ 0 ** -1 }}", "cannot be raised to a negative power"},
		{"repetition", "{{ 'x' * 2 ** 64 }}", "index-sized integer"},
		{"range", "{{ range(2 ** 64) | length }}", "range argument too large"},
	})
}

// TestStartsWithBounds: str.startswith and endswith take Python's optional start and end (slice
// bounds in code points) and a tuple of prefixes, any of which may match.
func TestStartsWithBounds(t *testing.T) {
	renderCases(t, nil, []struct{ name, src, want string }{
		{"start and end", "{{ 'Hello'.startswith('e', 1) }} {{ 'Hello'.startswith('H', 1) }} {{ 'Hello'.endswith('l', 0, 4) }} {{ 'Hello'.endswith('lo', -2) }} {{ 'Hello'.startswith('', 5) }} {{ 'Hello'.startswith('', 6) }} {{ 'héllo'.startswith('l', 2) }} {{ 'Hello'.endswith('H', 0, 1) }} {{ 'abc'.startswith('a', none, 2) }}", "True False True True True False True True True"},
		{"tuples of prefixes", "{{ 'Hello'.startswith(('x', 'He')) }} {{ 'Hello'.endswith(('x', 'y')) }} {{ 'Hello'.startswith(('l', 'e'), 1) }} {{ 'Hello'.endswith(()) }}", "True False True False"},
	})
	renderErrors(t, []struct{ name, src, want string }{
		{"a list is not a tuple", "{{ 'a'.startswith(['a']) }}", "must be str or a tuple of str, not list"},
		{"not a string", "{{ 'a'.endswith(1) }}", "must be str or a tuple of str, not int"},
	})
}

// TestNumberTests: Jinja2's number test accepts bool (a Python bool is an int); its integer and
// float tests take neither bool nor the other kind of number.
func TestNumberTests(t *testing.T) {
	renderCases(t, nil, []struct{ name, src, want string }{
		{"bool is a number", "{{ true is number }} {{ false is number }} {{ true is integer }} {{ true is float }} {{ 1 is integer }} {{ 1.0 is float }} {{ 1.0 is integer }} {{ 1 is float }} {{ none is number }} {{ '1' is number }}", "True True False False True True False False False False"},
	})
}

// TestTitle: Jinja2's title filter begins words only after whitespace, '-', '(', '{', '[' and '<',
// where Python's str.title method begins one after any character that is not cased.
func TestTitle(t *testing.T) {
	renderCases(t, nil, []struct{ name, src, want string }{
		{"filter", `{{ "it's o'neil" | title }}|{{ 'x-y (ab) [cd] {ef} <gh> a.b 3rd mcDONALD' | title }}|{{ 'hello\tworld\nnew' | title }}|{{ "'quoted' words" | title }}|{{ 'ÉCOLE élève' | title }}`, "It's O'neil|X-Y (Ab) [Cd] {Ef} <Gh> A.b 3rd Mcdonald|Hello\tWorld\nNew|'quoted' Words|École Élève"},
		{"method", `{{ "it's o'neil".title() }}|{{ 'x-y (ab) a.b 3rd mcDONALD'.title() }}`, "It'S O'Neil|X-Y (Ab) A.B 3Rd Mcdonald"},
	})
}

// pyCasesPath is written by testdata/pycases.py: templates rendered by Python's Jinja2 with
// transformers' settings, each with its output or the error it raised.
const pyCasesPath = "testdata/pycases.json"

// TestPythonCases renders the templates of testdata/pycases.json and wants Python's output, or an
// error where Python raised one (the error's text may differ).
func TestPythonCases(t *testing.T) {
	data, err := os.ReadFile(pyCasesPath)
	if err != nil {
		t.Fatal(err)
	}
	var cases struct {
		Cases []struct {
			Name, Template string
			Output, Error  *string
		}
	}
	if err := json.Unmarshal(data, &cases); err != nil {
		t.Fatalf("%s: %v", pyCasesPath, err)
	}
	for _, tc := range cases.Cases {
		t.Run(tc.Name, func(t *testing.T) {
			out, err := renderString(tc.Template)
			switch {
			case tc.Error != nil && err == nil:
				t.Errorf("%q: output %q, want an error (Python: %s)", tc.Template, out, *tc.Error)
			case tc.Error == nil && err != nil:
				t.Errorf("%q: %v, want %q", tc.Template, err, *tc.Output)
			case tc.Output != nil && out != *tc.Output:
				t.Errorf("%q:\n got %q\nwant %q", tc.Template, out, *tc.Output)
			}
		})
	}
}

// renderString parses and executes source without variables.
func renderString(source string) (string, error) {
	tpl, err := Parse(source)
	if err != nil {
		return "", err
	}
	return tpl.Execute(nil)
}
