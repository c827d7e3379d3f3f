"""Renders the templates of CASES with Python's Jinja2 as transformers sets it up for chat templates,
and writes each output, or the error it raised, to pycases.json beside this script; the package's
TestPythonCases renders the same templates and compares.

    python3 weights/chattemplate/testdata/pycases.py

The environment is transformers' _compile_jinja_template (transformers itself is not needed):
ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True) with the loopcontrols extension,
transformers' tojson filter (json.dumps with ensure_ascii=False) and its raise_exception global.
"""
import json
import os
import sys
import unicodedata

import jinja2
import jinja2.ext
from jinja2.sandbox import ImmutableSandboxedEnvironment


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, extensions=[jinja2.ext.loopcontrols])
env.filters["tojson"] = tojson
env.globals["raise_exception"] = raise_exception

# (name, template). A case whose template raises is recorded with the error; the Go test wants an
# error there too (its text may differ).
CASES = [
    # Python's str case mapping is Unicode's full mapping (SpecialCasing), with final sigma.
    ("upper special", "{{ 'ß'.upper() }}|{{ 'straße' | upper }}|{{ 'ŉ ǰ ﬁ ﬀ ﬃ ΐ և ẞ'.upper() }}|{{ 'ᾳ ᾼ ῳ'.upper() }}|{{ ('ß'.upper()) | length }}"),
    ("lower special", "{{ 'İ'.lower() }}|{{ 'İ'.lower() | length }}|{{ 'İSTANBUL' | lower }}|{{ 'ẞ ᾼ Ω K Å'.lower() }}"),
    ("final sigma", "{{ 'ΑΣ'.lower() }}|{{ 'ΟΔΟΣ ΣΑΣ Σ'.lower() }}|{{ 'ΑΣ.'.lower() }}|{{ \"ΑΣ'Α\".lower() }}|{{ 'ΑΣ\u0301'.lower() }}|{{ 'Α\u0301Σ'.lower() }}|{{ 'ΑΣ1'.lower() }}|{{ '1Σ'.lower() }}|{{ 'ΣΣ'.lower() }}|{{ 'ΑΣ' | lower }}"),
    ("title special", "{{ 'ǆa ß ﬁx ΑΣ σσ'.title() }}|{{ 'ǆa ß ﬁx ΑΣ σσ' | title }}|{{ '中a ªb 1c'.title() }}|{{ 'ǈ ǉ Ǉ'.title() }}"),
    ("capitalize special", "{{ 'ßa'.capitalize() }}|{{ 'ßa' | capitalize }}|{{ 'ǆA' | capitalize }}|{{ 'ﬁSH ΑΣ'.capitalize() }}|{{ 'İA'.capitalize() }}|{{ ''.capitalize() }}"),
    ("swapcase special", "{{ 'ßΣ'.swapcase() }}|{{ 'ΑΣ aB'.swapcase() }}|{{ 'ǅ İ ﬁ'.swapcase() }}"),
    ("casefold", "{{ 'ß ẞ ς ſ µ ᏸ İ ﬁ Ǆ'.casefold() }}|{{ 'Straße'.casefold() == 'STRASSE'.casefold() }}"),
    ("casefold sigma and sort", "{{ 'ΑΣ ΣΑ'.casefold() }}|{{ ['b', 'ß', 'A', 'É', 'e'] | sort }}|{{ ['ß', 'SS', 'ss'] | unique | list }}|{{ {'B': 1, 'a': 2, 'Ä': 3} | dictsort }}"),
    ("case tests", "{{ 'ß' is lower }} {{ 'ß' is upper }} {{ 'ǅ' is upper }} {{ 'ǅ' is lower }} {{ 'Σ' is upper }} {{ 'ς' is lower }}"),

    # Dicts with keys other than strings.
    ("dict keys repr", "{{ {1: 'a', true: 'b', none: 'c', 1.5: 'd', 'x': 1} }}|{{ {1: 'a', 1.0: 'b', true: 'c'} }}|{{ {1.0: 'a', -0.0: 'b', 1e20: 'c'} }}|{{ {(1, 'a'): 2} }}|{{ {2 ** 70: 1} }}|{{ {false: 1, 0: 2} }}"),
    ("dict keys lookup", "{{ {1: 'a'}[1] }} {{ {1: 'a'}[true] }} {{ {1: 'a'}[1.0] }} [{{ {1: 'a'}['1'] }}] {{ {none: 'n'}[none] }} {{ {(1, 2): 't'}[(1, 2)] }} {{ {1: 'a'}.get(1) }} {{ {1: 'a'}.get('1', 'no') }} {{ 1 in {1: 2} }} {{ '1' in {1: 2} }} {{ true in {1: 2} }} {{ none in {none: 1} }} {{ (1, 2) in {(1, 2): 1} }}"),
    ("dict keys iterate", "{% for k in {1: 'a', none: 'b', 'c': 3} %}{{ k }}:{{ k is number }};{% endfor %}|{% for k, v in {1: 'a', none: 'b'}.items() %}{{ k }}={{ v }};{% endfor %}|{{ {1: 'a', 2: 'b'} | items | list }}|{{ {2: 'a', 1: 'b'} | dictsort }}|{{ {1: 'a', 2: 'b'} | list }}|{{ {1: 'a', 2: 'b'} | length }}|{{ {1: 'a'} | first }}"),
    ("dict keys tojson", "{{ {1: 'a', 2: 'b'} | tojson }}|{{ {true: 1, false: 2, none: 3, 1.5: 4} | tojson }}|{{ {1e20: 3, -0.0: 4, 2.5: 1} | tojson }}|{{ {2 ** 70: 1} | tojson }}|{{ {1: 'a', 'b': 1} | tojson(indent=2) }}|{{ {2: 'a', 1: 'b'} | tojson(sort_keys=true) }}"),
    ("dict keys equality", "{{ {1: 'a'} == {1.0: 'a'} }} {{ {1: 'a'} == {'1': 'a'} }} {{ {true: 'a'} == {1: 'a'} }}"),
    ("dict keys nested", "{% set d = {1: {none: [1, 2]}, (1, (2, 'x')): 'n'} %}{{ d }}|{{ d[1][none] }}|{{ d[(1, (2, 'x'))] }}|{{ d.copy() }}|{{ {1: 'a'}.items() | list }}|[{{ {1: 2}[[1]] }}]|{{ dict(a=1, b=none) }}"),
    ("dict key unhashable in", "{{ [1] in {1: 2} }}"),
    ("dict key unhashable get", "{{ {1: 2}.get([1]) }}"),
    ("dict key tuple tojson", "{{ {(1, 2): 'a'} | tojson }}"),
    ("dict key list", "{{ {[1]: 'a'} }}"),
    ("dict key dict", "{{ {{}: 'a'} }}"),
    ("dict tojson mixed sort", "{{ {1: 'a', 'b': 2} | tojson(sort_keys=true) }}"),
    ("dictsort mixed keys", "{{ {1: 2, 'a': 3} | dictsort }}"),

    # Macros: varargs and kwargs take the extra arguments when the body uses them.
    ("macro varargs", "{% macro m(a) %}{{ a }}{{ varargs }}{% endmacro %}{{ m() }}|{{ m(1) }}|{{ m(1, 2, 3) }}|{{ m(1, 'x') | length }}"),
    ("macro kwargs", "{% macro m(a, b=2) %}{{ a }}{{ b }}{{ kwargs }}{% endmacro %}{{ m(1) }}|{{ m(b=5, a=1, c=3) }}|{{ m(1, 2, b=4) }}|{{ m(1, a=4) }}|{{ m(1, z=1, y=2) }}"),
    ("macro both", "{% macro m(a) %}{{ a }}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, x=3) }}|{{ m(a=1) }}"),
    ("macro varargs kwargs tojson", "{% macro m() %}{{ kwargs | tojson }}{{ varargs | tojson }}{% for v in varargs %}[{{ v }}]{% endfor %}{% for k, v in kwargs.items() %}{{ k }}={{ v }}{% endfor %}{% endmacro %}{{ m(1, 2, b=3) }}"),
    ("macro nested uses varargs", "{% macro m() %}{% macro n() %}{{ varargs }}{% endmacro %}{{ n(5) }}{% endmacro %}{{ m(1) }}"),
    ("macro used then set", "{% macro m() %}{{ varargs }}{% set varargs = 1 %}{% endmacro %}{{ m(1) }}"),
    ("macro unused branch", "{% macro m() %}{% if false %}{{ kwargs }}{% endif %}{% endmacro %}{{ m(x=1) }}"),
    ("caller varargs", "{% macro m() %}{{ caller(1, 2) }}{% endmacro %}{% call(x) m() %}{{ x }}{{ varargs }}{% endcall %}"),
    ("caller kwargs", "{% macro m() %}{{ caller(1, y=2) }}{% endmacro %}{% call(x) m() %}{{ x }}{{ kwargs }}{% endcall %}"),
    ("macro caller kwarg", "{% macro m(a) %}{{ caller is defined }}{{ kwargs }}{% endmacro %}{{ m(1, caller=2) }}"),
    ("macro extra positional", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, 2) }}"),
    ("macro extra keyword", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, b=2) }}"),
    ("macro positional and keyword", "{% macro m(a) %}{{ a }}{% endmacro %}{{ m(1, a=3) }}"),
    ("macro set varargs first", "{% macro m() %}{% set varargs = 1 %}{{ varargs }}{% endmacro %}{{ m(1) }}"),
    ("macro for kwargs", "{% macro m() %}{% for kwargs in [1] %}{% endfor %}{% endmacro %}{{ m(x=1) }}"),
    ("caller without kwargs", "{% macro m() %}{{ caller(1, y=2) }}{% endmacro %}{% call(x) m() %}{{ x }}{% endcall %}"),
    ("call block without caller", "{% macro m(a) %}{{ a }}{% endmacro %}{% call m(1) %}x{% endcall %}"),
    ("call block caller in kwargs", "{% macro m(a) %}{{ a }}{{ kwargs | length }}{% endmacro %}{% call m(1) %}x{% endcall %}"),

    # groupby.
    ("groupby", "{% set xs = [{'a': 'x', 'b': 1}, {'a': 'X', 'b': 2}, {'a': 'y', 'b': 3}, {'a': 'x', 'b': 4}] %}{% for k, v in xs | groupby('a') %}{{ k }}:{{ v | map(attribute='b') | join(',') }};{% endfor %}|{% for g in xs | groupby('a', case_sensitive=true) %}{{ g.grouper }}:{{ g.list | length }};{% endfor %}|{{ (xs | groupby('b'))[0] }}|{{ xs | groupby('a') | length }}|{{ (xs | groupby('a'))[0] | tojson }}|{{ (xs | groupby('a'))[1][0] }}"),
    ("groupby default and dots", "{% set xs = [{'a': {'c': 2}}, {'a': {'c': 1}}, {'b': 1}, {'a': {'c': 2}, 'n': 1}] %}{% for k, v in xs | groupby('a.c', default=9) %}{{ k }}:{{ v | length }};{% endfor %}|{% for k, v in [[2, 'a'], [1, 'b'], [2, 'c']] | groupby(0) %}{{ k }}{{ v }};{% endfor %}|{% for k, v in [[2, 'a'], [1, 'b'], [2, 'c']] | groupby('0') %}{{ k }};{% endfor %}"),
    ("groupby mixed numbers", "{% for k, v in [{'a': 1}, {'a': true}, {'a': 1.0}, {'a': 0}] | groupby('a') %}{{ k }}={{ v | length }};{% endfor %}"),
    ("groupby attribute keyword", "{% for k, v in [{'a': 2}, {'a': 1}] | groupby(attribute='a') %}{{ k }};{% endfor %}"),
    ("groupby missing attribute", "{{ [{'a': 1}, {'b': 2}] | groupby('a') }}"),
    ("groupby mixed types", "{{ [{'a': 1}, {'a': 'x'}] | groupby('a') }}"),

    # wordwrap.
    ("wordwrap", "{{ 'The quick brown fox jumps over the lazy dog' | wordwrap(10) }}|{{ 'a b' | wordwrap(79) }}|{{ 'abcdefghijklmnop qr' | wordwrap(5) }}|{{ 'abcdefghijklmnop qr' | wordwrap(5, false) }}|{{ 'one two three' | wordwrap(5, wrapstring='<br>') }}"),
    ("wordwrap hyphens", "{{ 'a well-known half-baked idea' | wordwrap(8) }}|{{ 'a well-known half-baked idea' | wordwrap(8, break_on_hyphens=false) }}|{{ 'super-duper-long-hyphenated' | wordwrap(7) }}|{{ 'foo--bar baz' | wordwrap(5) }}|{{ 'x -- y' | wordwrap(3) }}|{{ 'ab-cd-ef-gh' | wordwrap(4) }}|{{ '---abc' | wordwrap(2) }}|{{ 'e-mail a-b-c 1-2-3' | wordwrap(3) }}"),
    ("wordwrap paragraphs", "{{ 'first line that wraps\\nsecond\\n\\nfourth  with   spaces\\r\\nlast' | wordwrap(10) }}|{{ '  leading and trailing  ' | wordwrap(8) }}|{{ 'tab\\there and\\x0bvt' | wordwrap(6) }}|{{ '' | wordwrap(5) }}|{{ 'héllo wörld ünïcode' | wordwrap(6) }}|{{ 'a\\u3000b c' | wordwrap(2) }}"),
    ("wordwrap long words", "{{ 'aaaa bbbbbbbbbb cc' | wordwrap(4) }}|{{ 'aaaa bbbbbbbbbb cc' | wordwrap(4, break_long_words=false) }}|{{ 'x abcdefgh-ijkl' | wordwrap(6) }}|{{ 'x abcdefgh-ijkl' | wordwrap(6, break_on_hyphens=false) }}|{{ 'a' | wordwrap(1) }}"),
    ("wordwrap zero width", "{{ 'abc' | wordwrap(0) }}"),

    # unique, map with a default, selectattr and rejectattr.
    ("unique", "{{ ['a', 'A', 'b', 'a'] | unique | list }}|{{ ['a', 'A', 'b'] | unique(case_sensitive=true) | list }}|{{ [{'n': 'x'}, {'n': 'X'}, {'n': 'y'}] | unique(attribute='n') | list }}|{{ [1, 1.0, true, 2] | unique | list }}|{{ 'abcab' | unique | join }}"),
    ("unique unhashable", "{{ [[1], [1]] | unique | list }}"),
    ("map attribute default", "{{ [{'a': 1}, {}, {'a': none}] | map(attribute='a', default='d') | list }}|{{ [{'a': {'b': 1}}, {'a': {}}] | map(attribute='a.b', default=0) | list }}|{{ [[1, 2], [3]] | map(attribute='1', default='-') | list }}|{{ [{'a': 1}, {}] | map(attribute='a') | list }}"),
    ("selectattr tests", "{% set xs = [{'n': 1, 'r': 'user'}, {'n': 2}, {'n': 3, 'r': 'tool'}, {'n': 4, 'r': none}] %}{{ xs | selectattr('r') | map(attribute='n') | list }}|{{ xs | selectattr('r', 'defined') | map(attribute='n') | list }}|{{ xs | rejectattr('r', 'defined') | map(attribute='n') | list }}|{{ xs | selectattr('r', 'equalto', 'tool') | map(attribute='n') | list }}|{{ xs | selectattr('r', 'in', ['user', 'tool']) | map(attribute='n') | list }}|{{ xs | rejectattr('r', 'none') | map(attribute='n') | list }}|{{ xs | selectattr('n', 'odd') | map(attribute='n') | list }}|{{ xs | selectattr('n', 'gt', 2) | map(attribute='n') | list }}|{{ xs | selectattr('r', 'string') | map(attribute='n') | list }}"),
    # dict views print as Python's repr of them, and tojson refuses them as json.dumps does.
    ("dict views repr", "{{ {1: 2, 'a': none}.keys() }}|{{ {1: 2}.values() }}|{{ {1: 2}.items() }}|{{ ({1: 2}.keys()) | list }}|{{ {}.keys() }}|{{ {'a': [1, 'b']}.values() }}"),
    ("dict views equality", "{% set d = {1: 2, 3: 4} %}{{ d.keys() == [1, 3] }} {{ d.keys() == {3: 0, 1: 0}.keys() }} {{ d.keys() == {1: 0}.keys() }} {{ d.items() == {3: 4, 1: 2}.items() }} {{ d.items() == {3: 5, 1: 2}.items() }} {{ d.values() == d.values() }} {{ d.values() == [2, 4] }} {{ d.keys() == d.items() }}"),
    ("dict view tojson", "{{ {1: 2}.keys() | tojson }}"),
    ("dict view tojson nested", "{{ {'a': {1: 2}.items()} | tojson }}"),
    # sort's attribute may name several keys, comma-separated, each a dotted path; sort keys by the list
    # of them even with one (make_multi_attrgetter), so equal items that cannot be ordered still sort.
    ("sort equal unorderable", "{{ [{}, {}] | sort(attribute='a') }}|{{ [none, none] | sort }}|{{ [{'a': 1}, {'a': 1}] | sort }}|{{ ['B', 'a'] | sort(attribute='') }}|{{ [[1, none], [1, none]] | sort }}"),
    ("sort unorderable", "{{ [none, 1] | sort }}"),
    ("sort several attributes", "{{ [{'a': 2, 'b': 1}, {'a': 1, 'b': 2}, {'a': 1, 'b': 1}] | sort(attribute='a,b') }}|{{ [{'a': 2, 'b': 'X'}, {'a': 1, 'b': 'y'}, {'a': 1, 'b': 'x'}] | sort(attribute='a,b', reverse=true) }}|{{ [{'a': {'c': 2}, 'b': 1}, {'a': {'c': 1}, 'b': 2}] | sort(attribute='a.c,b') }}|{{ [{'a': 1, 'b': 'B'}, {'a': 1, 'b': 'a'}] | sort(attribute='a,b', case_sensitive=true) }}"),
]


def render(source):
    try:
        return {"output": env.from_string(source).render()}
    except Exception as e:  # the Go test only wants an error
        return {"error": "%s: %s" % (type(e).__name__, e)}


def main():
    out = {
        "python": sys.version.split()[0],
        "jinja2": jinja2.__version__,
        "unicode": unicodedata.unidata_version,
        "cases": [dict(name=name, template=source, **render(source)) for name, source in CASES],
    }
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pycases.json")
    with open(path, "w", encoding="utf-8") as f:
        json.dump(out, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
