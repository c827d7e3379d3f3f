package chattemplate

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
)

// method returns obj's Python method name bound to obj, or nil.
func method(obj value, name string) *function {
	var call func(args []value, kw *dict) (value, error)
	switch x := obj.(type) {
	case string:
		call = stringMethod(x, name)
	case *dict:
		if x.namespace {
			return nil
		}
		call = dictMethod(x, name)
	case *list:
		call = listMethod(x, name)
	}
	if call == nil {
		return nil
	}
	return &function{name: name, call: call}
}

// stripChars returns the function deciding which characters strip/lstrip/rstrip remove.
func stripChars(args []value, kw *dict) (func(rune) bool, error) {
	switch c := arg(args, kw, 0, "chars", nil).(type) {
	case nil:
		return isSpace, nil
	case string:
		return func(r rune) bool { return strings.ContainsRune(c, r) }, nil
	default:
		return nil, fmt.Errorf("strip arg must be None or str, not %s", typeName(c))
	}
}

func stringMethod(s, name string) func(args []value, kw *dict) (value, error) {
	switch name {
	case "startswith", "endswith":
		return func(args []value, kw *dict) (value, error) {
			has := strings.HasPrefix
			if name == "endswith" {
				has = strings.HasSuffix
			}
			runes := []rune(s)
			start, end, inRange, err := subRange(runes, args, kw)
			if err != nil {
				return nil, err
			}
			in := string(runes[start:end])
			var prefixes []value
			switch p := arg(args, kw, 0, "prefix", nil).(type) {
			case string:
				prefixes = []value{p}
			case *list:
				if !p.tuple {
					return nil, fmt.Errorf("%s first arg must be str or a tuple of str, not list", name)
				}
				prefixes = p.items
			default:
				return nil, fmt.Errorf("%s first arg must be str or a tuple of str, not %s", name, typeName(p))
			}
			for _, e := range prefixes {
				ps, ok := e.(string)
				if !ok {
					return nil, fmt.Errorf("tuple for %s must only contain str, not %s", name, typeName(e))
				}
				if inRange && has(in, ps) {
					return true, nil
				}
			}
			return false, nil
		}
	case "strip", "lstrip", "rstrip":
		return func(args []value, kw *dict) (value, error) {
			f, err := stripChars(args, kw)
			if err != nil {
				return nil, err
			}
			switch name {
			case "lstrip":
				return strings.TrimLeftFunc(s, f), nil
			case "rstrip":
				return strings.TrimRightFunc(s, f), nil
			}
			return strings.TrimFunc(s, f), nil
		}
	case "split", "rsplit":
		return func(args []value, kw *dict) (value, error) {
			sep := arg(args, kw, 0, "sep", nil)
			maxsplit := int64(-1)
			if m, ok := arg(args, kw, 1, "maxsplit", int64(-1)).(int64); ok {
				maxsplit = m
			}
			var parts []string
			switch sp := sep.(type) {
			case nil:
				parts = splitWhitespace(s, int(maxsplit), name == "rsplit")
			case string:
				if sp == "" {
					return nil, errors.New("empty separator")
				}
				if name == "rsplit" && maxsplit >= 0 {
					parts = rsplitN(s, sp, int(maxsplit))
				} else {
					n := -1
					if maxsplit >= 0 {
						n = int(maxsplit) + 1
					}
					parts = strings.SplitN(s, sp, n)
				}
			default:
				return nil, fmt.Errorf("must be str or None, not %s", typeName(sep))
			}
			out := &list{items: make([]value, len(parts))}
			for i, p := range parts {
				out.items[i] = p
			}
			return out, nil
		}
	case "splitlines":
		return func(args []value, kw *dict) (value, error) {
			return splitLines(s, truthy(arg(args, kw, 0, "keepends", false))), nil
		}
	case "upper", "lower", "title", "capitalize", "swapcase", "casefold":
		return func(args []value, kw *dict) (value, error) {
			switch name {
			case "upper":
				return pyUpper(s), nil
			case "lower":
				return pyLower(s), nil
			case "casefold":
				return pyCasefold(s), nil
			case "title":
				return pyTitle(s), nil
			case "capitalize":
				return pyCapitalize(s), nil
			}
			return pySwapcase(s), nil
		}
	case "replace":
		return func(args []value, kw *dict) (value, error) {
			n := -1
			if c, ok := arg(args, kw, 2, "count", int64(-1)).(int64); ok {
				n = int(c)
			}
			return strings.Replace(s, str(arg(args, kw, 0, "old", "")), str(arg(args, kw, 1, "new", "")), n), nil
		}
	case "find", "rfind", "index", "rindex", "count":
		return func(args []value, kw *dict) (value, error) {
			sub, ok := arg(args, kw, 0, "sub", nil).(string)
			if !ok {
				return nil, fmt.Errorf("%s needs a string", name)
			}
			runes := []rune(s)
			start, end, inRange, err := subRange(runes, args, kw)
			if err != nil {
				return nil, err
			}
			i := -1
			if inRange {
				in := string(runes[start:end])
				switch name {
				case "count":
					if sub == "" {
						return int64(end - start + 1), nil
					}
					return int64(strings.Count(in, sub)), nil
				case "find", "index":
					i = strings.Index(in, sub)
				default:
					i = strings.LastIndex(in, sub)
				}
				if i >= 0 {
					i = start + runeLen(in[:i])
				}
			}
			switch {
			case name == "count":
				return int64(0), nil
			case i < 0 && (name == "index" || name == "rindex"):
				return nil, errors.New("substring not found")
			}
			return int64(i), nil
		}
	case "join":
		return func(args []value, kw *dict) (value, error) {
			items, err := iterate(arg(args, kw, 0, "iterable", nil))
			if err != nil {
				return nil, err
			}
			parts := make([]string, len(items))
			for i, it := range items {
				p, ok := it.(string)
				if !ok {
					return nil, fmt.Errorf("sequence item %d: expected str instance, %s found", i, typeName(it))
				}
				parts[i] = p
			}
			return strings.Join(parts, s), nil
		}
	case "isdigit", "isnumeric", "isdecimal", "isalpha", "isalnum", "isspace", "islower", "isupper", "istitle", "isascii":
		return func(args []value, kw *dict) (value, error) {
			switch name {
			case "isascii":
				for i := 0; i < len(s); i++ {
					if s[i] >= 0x80 {
						return false, nil
					}
				}
				return true, nil
			case "istitle":
				return pyIsTitle(s), nil
			}
			if s == "" {
				return false, nil
			}
			switch name {
			case "islower":
				return pyIsLowerString(s), nil
			case "isupper":
				return pyIsUpperString(s), nil
			}
			for _, r := range s {
				var ok bool
				switch name {
				case "isdecimal":
					ok = pyIsDecimal(r)
				case "isdigit":
					ok = pyIsDigit(r)
				case "isnumeric":
					ok = pyIsNumeric(r)
				case "isalpha":
					ok = unicode.IsLetter(r)
				case "isalnum":
					ok = pyIsAlnum(r)
				case "isspace":
					ok = isSpace(r)
				}
				if !ok {
					return false, nil
				}
			}
			return true, nil
		}
	case "zfill":
		return func(args []value, kw *dict) (value, error) {
			width, ok := arg(args, kw, 0, "width", nil).(int64)
			if !ok {
				return nil, errors.New("zfill needs an integer width")
			}
			return zfill(s, width), nil
		}
	case "partition", "rpartition":
		return func(args []value, kw *dict) (value, error) {
			sep, ok := arg(args, kw, 0, "sep", nil).(string)
			switch {
			case !ok:
				return nil, fmt.Errorf("%s needs a string", name)
			case sep == "":
				return nil, errors.New("empty separator")
			}
			out := &list{tuple: true}
			i := strings.Index(s, sep)
			if name == "rpartition" {
				i = strings.LastIndex(s, sep)
			}
			switch {
			case i >= 0:
				out.items = []value{s[:i], sep, s[i+len(sep):]}
			case name == "partition":
				out.items = []value{s, "", ""}
			default:
				out.items = []value{"", "", s}
			}
			return out, nil
		}
	case "center", "ljust", "rjust":
		return func(args []value, kw *dict) (value, error) {
			width, ok := arg(args, kw, 0, "width", nil).(int64)
			if !ok {
				return nil, fmt.Errorf("%s needs an integer width", name)
			}
			fill := str(arg(args, kw, 1, "fillchar", " "))
			pad := int(width) - runeLen(s)
			if pad <= 0 {
				return s, nil
			}
			switch name {
			case "ljust":
				return s + strings.Repeat(fill, pad), nil
			case "rjust":
				return strings.Repeat(fill, pad) + s, nil
			}
			left := pad / 2
			if pad%2 == 1 && int(width)%2 == 1 {
				left++
			}
			return strings.Repeat(fill, left) + s + strings.Repeat(fill, pad-left), nil
		}
	case "removeprefix", "removesuffix":
		return func(args []value, kw *dict) (value, error) {
			a := str(arg(args, kw, 0, "prefix", ""))
			if name == "removeprefix" {
				return strings.TrimPrefix(s, a), nil
			}
			return strings.TrimSuffix(s, a), nil
		}
	case "format":
		return func(args []value, kw *dict) (value, error) { return pyFormat(s, args, kw) }
	}
	return nil
}

// splitWhitespace is Python's str.split() / rsplit() without a separator.
func splitWhitespace(s string, maxsplit int, fromRight bool) []string {
	fields := strings.FieldsFunc(s, isSpace)
	if maxsplit < 0 || len(fields) <= maxsplit+1 {
		return fields
	}
	if !fromRight {
		// Keep the rest after maxsplit fields, with its inner whitespace, left-trimmed.
		rest := s
		out := make([]string, 0, maxsplit+1)
		for range maxsplit {
			rest = strings.TrimLeftFunc(rest, isSpace)
			i := strings.IndexFunc(rest, isSpace)
			out = append(out, rest[:i])
			rest = rest[i:]
		}
		return append(out, strings.TrimLeftFunc(rest, isSpace))
	}
	rest := s
	var out []string
	for range maxsplit {
		rest = strings.TrimRightFunc(rest, isSpace)
		i := strings.LastIndexFunc(rest, isSpace)
		out = append([]string{rest[i+1:]}, out...)
		rest = rest[:i+1]
	}
	return append([]string{strings.TrimRightFunc(rest, isSpace)}, out...)
}

// rsplitN splits s by sep at most n times from the right.
func rsplitN(s, sep string, n int) []string {
	var out []string
	for range n {
		i := strings.LastIndex(s, sep)
		if i < 0 {
			break
		}
		out = append([]string{s[i+len(sep):]}, out...)
		s = s[:i]
	}
	return append([]string{s}, out...)
}

// pyFormat implements str.format with {} and {0} and {name} fields (no format specs).
func pyFormat(s string, args []value, kw *dict) (value, error) {
	var b strings.Builder
	auto := 0
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '{' && i+1 < len(s) && s[i+1] == '{' || c == '}' && i+1 < len(s) && s[i+1] == '}' {
			b.WriteByte(c)
			i++
			continue
		}
		if c != '{' {
			b.WriteByte(c)
			continue
		}
		j := strings.IndexByte(s[i:], '}')
		if j < 0 {
			return nil, errors.New("single '{' encountered in format string")
		}
		field := s[i+1 : i+j]
		i += j
		var v value
		switch {
		case field == "":
			if auto >= len(args) {
				return nil, errors.New("format: not enough arguments")
			}
			v = args[auto]
			auto++
		case field[0] >= '0' && field[0] <= '9':
			var n int
			fmt.Sscan(field, &n)
			if n >= len(args) {
				return nil, errors.New("format: argument index out of range")
			}
			v = args[n]
		default:
			if kw == nil || !hasKey(kw, field) {
				return nil, fmt.Errorf("format: missing key %q", field)
			}
			v = kw.m[field]
		}
		b.WriteString(str(v))
	}
	return b.String(), nil
}

func dictMethod(d *dict, name string) func(args []value, kw *dict) (value, error) {
	switch name {
	case "items":
		return func([]value, *dict) (value, error) {
			items := dictItems(d)
			items.view = "dict_items"
			return items, nil
		}
	case "copy":
		return func([]value, *dict) (value, error) {
			c := newDict()
			c.update(d)
			return c, nil
		}
	case "keys":
		return func([]value, *dict) (value, error) {
			return &list{items: append([]value(nil), d.keys...), view: "dict_keys"}, nil
		}
	case "values":
		return func([]value, *dict) (value, error) {
			out := &list{view: "dict_values"}
			for _, k := range d.keys {
				out.items = append(out.items, d.at(k))
			}
			return out, nil
		}
	case "get":
		return func(args []value, kw *dict) (value, error) {
			if len(args) == 0 {
				return nil, errors.New("get needs a key")
			}
			v, ok, err := d.lookup(args[0])
			if err != nil {
				return nil, err
			}
			if ok {
				return v, nil
			}
			return arg(args, kw, 1, "default", nil), nil
		}
	}
	return nil
}

func listMethod(l *list, name string) func(args []value, kw *dict) (value, error) {
	switch name {
	case "append":
		if l.tuple {
			return nil
		}
		return func(args []value, kw *dict) (value, error) {
			if len(args) != 1 {
				return nil, errors.New("append takes exactly one argument")
			}
			l.items = append(l.items, args[0])
			return nil, nil
		}
	case "pop":
		if l.tuple {
			return nil
		}
		return func(args []value, kw *dict) (value, error) {
			i := len(l.items) - 1
			if len(args) > 0 {
				var ok bool
				if i, ok = index(args[0], len(l.items)); !ok {
					return nil, errors.New("pop index out of range")
				}
			}
			if i < 0 {
				return nil, errors.New("pop from empty list")
			}
			v := l.items[i]
			l.items = append(l.items[:i], l.items[i+1:]...)
			return v, nil
		}
	case "copy":
		if l.tuple {
			return nil
		}
		return func([]value, *dict) (value, error) { return &list{items: append([]value{}, l.items...)}, nil }
	case "index", "count":
		return func(args []value, kw *dict) (value, error) {
			if len(args) == 0 {
				return nil, fmt.Errorf("%s needs an argument", name)
			}
			n := int64(0)
			for i, x := range l.items {
				if equal(x, args[0]) {
					if name == "index" {
						return int64(i), nil
					}
					n++
				}
			}
			if name == "index" {
				return nil, fmt.Errorf("%s is not in list", repr(args[0]))
			}
			return n, nil
		}
	}
	return nil
}
