package chattemplate

import (
	"errors"
	"fmt"
	"html"
	"math"
	"math/big"
	"strconv"
	"strings"
	"unicode"
)

// percentFormat is Python's printf-style formatting, format % arg: arg is a tuple of the values the
// conversions take in turn, a dict that %(name)s conversions read, or else a single value. The
// conversions are s, r, d, i, u, x, X, o, e, E, f, F, g, G, c and %%, with the flags -, +, space, 0
// and # (# with x, X and o only), a width and a precision (either may be *).
func percentFormat(format string, arg value) (string, error) {
	args := []value{arg}
	var mapping *dict
	switch x := arg.(type) {
	case *list:
		if x.tuple {
			args = x.items
		}
	case *dict:
		mapping = x
	}
	next := 0
	take := func() (value, error) {
		if next >= len(args) {
			return nil, errors.New("not enough arguments for format string")
		}
		next++
		return args[next-1], nil
	}
	var b strings.Builder
	for i := 0; i < len(format); i++ {
		c := format[i]
		if c != '%' {
			b.WriteByte(c)
			continue
		}
		i++
		var v value
		haveValue := false
		if i < len(format) && format[i] == '(' {
			if mapping == nil {
				return "", errors.New("format requires a mapping")
			}
			depth, j := 1, i+1
			for ; j < len(format) && depth > 0; j++ {
				switch format[j] {
				case '(':
					depth++
				case ')':
					depth--
				}
			}
			if depth > 0 {
				return "", errors.New("incomplete format key")
			}
			key := format[i+1 : j-1]
			var ok bool
			if v, ok = mapping.m[key]; !ok {
				return "", fmt.Errorf("format key %s not found", pyQuote(key))
			}
			haveValue = true
			i = j
		}
		var spec fmtSpec
		for ; i < len(format) && strings.IndexByte("-+ #0", format[i]) >= 0; i++ {
			switch format[i] {
			case '-':
				spec.left = true
			case '+':
				spec.plus = true
			case ' ':
				spec.space = true
			case '#':
				spec.alt = true
			case '0':
				spec.zero = true
			}
		}
		number := func() (int, error) {
			if i < len(format) && format[i] == '*' {
				i++
				a, err := take()
				if err != nil {
					return 0, err
				}
				n, ok := a.(int64)
				if !ok {
					return 0, errors.New("* wants int")
				}
				return int(max(min(n, maxTextBytes), -maxTextBytes)), nil
			}
			n := 0
			for ; i < len(format) && format[i] >= '0' && format[i] <= '9'; i++ {
				if n = n*10 + int(format[i]-'0'); n > maxTextBytes {
					return 0, errTooLarge
				}
			}
			return n, nil
		}
		w, err := number()
		if err != nil {
			return "", err
		}
		if w < 0 { // a negative * width left-justifies, as in C
			spec.left, w = true, -w
		}
		spec.width = w
		spec.prec = -1
		if i < len(format) && format[i] == '.' {
			i++
			if spec.prec, err = number(); err != nil {
				return "", err
			}
			spec.prec = max(spec.prec, -1)
		}
		for i < len(format) && strings.IndexByte("hlL", format[i]) >= 0 {
			i++
		}
		if i >= len(format) {
			return "", errors.New("incomplete format")
		}
		conv := format[i]
		if conv == '%' {
			b.WriteByte('%')
			continue
		}
		if !haveValue {
			if v, err = take(); err != nil {
				return "", err
			}
		}
		s, err := formatOne(conv, spec, v)
		if err != nil {
			return "", err
		}
		b.WriteString(s)
		if b.Len() > maxTextBytes {
			return "", errTooLarge
		}
	}
	if next < len(args) && mapping == nil {
		return "", errors.New("not all arguments converted during string formatting")
	}
	return b.String(), nil
}

// fmtSpec is one printf-style conversion's flags, width and precision (-1 when absent).
type fmtSpec struct {
	left, plus, space, alt, zero bool
	width, prec                  int
}

// formatOne formats v by one printf-style conversion.
func formatOne(conv byte, spec fmtSpec, v value) (string, error) {
	if spec.alt && strings.IndexByte("xXo", conv) < 0 {
		return "", fmt.Errorf("the # flag is not supported with %%%c", conv)
	}
	switch conv {
	case 's', 'r':
		s := str(v)
		if conv == 'r' {
			s = repr(v)
		}
		if spec.prec >= 0 {
			if r := []rune(s); len(r) > spec.prec {
				s = string(r[:spec.prec])
			}
		}
		return pad(s, "", spec, false), nil
	case 'c':
		switch x := v.(type) {
		case int64:
			if x < 0 || x > unicode.MaxRune {
				return "", errors.New("%c arg not in range(0x110000)")
			}
			return pad(string(rune(x)), "", spec, false), nil
		case string:
			if runeLen(x) == 1 {
				return pad(x, "", spec, false), nil
			}
		}
		return "", fmt.Errorf("%%c requires an int or a unicode character, not %s", typeName(v))
	case 'd', 'i', 'u', 'x', 'X', 'o':
		n, err := formatInt(conv, v)
		if err != nil {
			return "", err
		}
		sign, digits := "", n
		if strings.HasPrefix(n, "-") {
			sign, digits = "-", n[1:]
		} else if spec.plus {
			sign = "+"
		} else if spec.space {
			sign = " "
		}
		if spec.prec > len(digits) {
			digits = strings.Repeat("0", spec.prec-len(digits)) + digits
		}
		if spec.alt {
			sign += map[byte]string{'x': "0x", 'X': "0X", 'o': "0o"}[conv]
		}
		return pad(digits, sign, spec, true), nil
	case 'e', 'E', 'f', 'F', 'g', 'G':
		var f float64
		switch x := v.(type) {
		case bool:
			f = float64(boolInt(x))
		case int64:
			f = float64(x)
		case *big.Int:
			var err error
			if f, err = bigToFloat(x); err != nil {
				return "", err
			}
		case float64:
			f = x
		default:
			return "", fmt.Errorf("must be real number, not %s", typeName(v))
		}
		sign := ""
		if math.Signbit(f) && !math.IsNaN(f) {
			sign, f = "-", -f
		} else if spec.plus {
			sign = "+"
		} else if spec.space {
			sign = " "
		}
		var s string
		switch {
		case math.IsInf(f, 0):
			s = "inf"
		case math.IsNaN(f):
			s = "nan"
		default:
			prec := spec.prec
			if prec < 0 {
				prec = 6
			}
			lower := conv | 0x20
			if lower == 'g' && prec == 0 {
				prec = 1
			}
			s = strconv.FormatFloat(f, lower, prec, 64)
		}
		if conv >= 'A' && conv <= 'Z' {
			s = strings.ToUpper(s)
		}
		return pad(s, sign, spec, !math.IsInf(f, 0) && !math.IsNaN(f)), nil
	}
	return "", fmt.Errorf("unsupported format character %s", pyQuote(string(rune(conv))))
}

// formatInt writes v in base 10 (d, i, u), 16 (x, X) or 8 (o), as Python's %-formatting does: a
// float is truncated for d, i and u but refused for x and o.
func formatInt(conv byte, v value) (string, error) {
	var n int64
	switch x := v.(type) {
	case bool:
		n = boolInt(x)
	case int64:
		n = x
	case *big.Int:
		base := map[byte]int{'x': 16, 'X': 16, 'o': 8}[conv]
		if base == 0 {
			base = 10
		}
		s := x.Text(base)
		if conv == 'X' {
			s = strings.ToUpper(s)
		}
		return s, nil
	case float64:
		if conv == 'x' || conv == 'X' || conv == 'o' {
			return "", fmt.Errorf("%%%c format: an integer is required, not float", conv)
		}
		if math.IsInf(x, 0) || math.IsNaN(x) {
			return "", fmt.Errorf("cannot convert float %s to integer", formatFloat(x))
		}
		i, _ := floatToInt(x, nil)
		return repr(i), nil
	default:
		if conv == 'x' || conv == 'X' || conv == 'o' {
			return "", fmt.Errorf("%%%c format: an integer is required, not %s", conv, typeName(v))
		}
		return "", fmt.Errorf("%%%c format: a real number is required, not %s", conv, typeName(v))
	}
	switch conv {
	case 'x':
		return strconv.FormatInt(n, 16), nil
	case 'X':
		return strings.ToUpper(strconv.FormatInt(n, 16)), nil
	case 'o':
		return strconv.FormatInt(n, 8), nil
	}
	return strconv.FormatInt(n, 10), nil
}

// pad writes sign and s in spec's width: left-justified with -, else right-justified, with zeros
// between the sign and the digits for a number with the 0 flag.
func pad(s, sign string, spec fmtSpec, numeric bool) string {
	n := spec.width - runeLen(s) - runeLen(sign)
	switch {
	case n <= 0:
		return sign + s
	case spec.left:
		return sign + s + strings.Repeat(" ", n)
	case spec.zero && numeric:
		return sign + strings.Repeat("0", n) + s
	}
	return strings.Repeat(" ", n) + sign + s
}

// formatFilter is Jinja2's format filter: value % args, or value % kwargs as a mapping.
func formatFilter(v value, args []value, kw *dict) (value, error) {
	if kw != nil && len(kw.keys) > 0 {
		if len(args) > 0 {
			return nil, errors.New("can't handle positional and keyword arguments at the same time")
		}
		return percentFormat(str(v), kw)
	}
	return percentFormat(str(v), &list{items: args, tuple: true})
}

// truncate is Jinja2's truncate(length=255, killwords=False, end='...', leeway=5): a string longer
// than length+leeway is cut to length-len(end) characters, back to its last space unless killwords,
// and end appended.
func truncate(v value, args []value, kw *dict) (value, error) {
	s := []rune(str(v))
	length, ok1 := arg(args, kw, 0, "length", int64(255)).(int64)
	killwords := truthy(arg(args, kw, 1, "killwords", false))
	end := str(arg(args, kw, 2, "end", "..."))
	leeway, ok2 := int64(5), true
	if lw := arg(args, kw, 3, "leeway", nil); lw != nil {
		leeway, ok2 = lw.(int64)
	}
	if !ok1 || !ok2 {
		return nil, errors.New("truncate needs integer length and leeway")
	}
	if length < int64(runeLen(end)) {
		return nil, fmt.Errorf("expected length >= %d, got %d", runeLen(end), length)
	}
	if leeway < 0 {
		return nil, fmt.Errorf("expected leeway >= 0, got %d", leeway)
	}
	if int64(len(s)) <= length+leeway {
		return string(s), nil
	}
	cut := string(s[:length-int64(runeLen(end))])
	if !killwords {
		if i := strings.LastIndexByte(cut, ' '); i >= 0 {
			cut = cut[:i]
		}
	}
	return cut + end, nil
}

// striptags is Jinja2's striptags (MarkupSafe's): comments, then tags, removed, whitespace runs
// collapsed to one space, then HTML entities unescaped.
func striptags(s string) string {
	for {
		start := strings.Index(s, "<!--")
		if start < 0 {
			break
		}
		end := strings.Index(s[start:], "-->")
		if end < 0 {
			break
		}
		s = s[:start] + s[start+end+3:]
	}
	for {
		start := strings.IndexByte(s, '<')
		if start < 0 {
			break
		}
		end := strings.IndexByte(s[start:], '>')
		if end < 0 {
			break
		}
		s = s[:start] + s[start+end+1:]
	}
	return html.UnescapeString(strings.Join(strings.FieldsFunc(s, isSpace), " "))
}

// wordcount is Jinja2's wordcount: the number of runs of word characters (Python's \w: alphanumeric
// or the underscore).
func wordcount(s string) int64 {
	n, in := int64(0), false
	for _, r := range s {
		w := r == '_' || pyIsAlnum(r)
		if w && !in {
			n++
		}
		in = w
	}
	return n
}

// Python's character classes: isdecimal is the category Nd; isdigit adds the other characters of
// Numeric_Type Digit (superscripts, circled digits, ...); isnumeric is every character with a
// Numeric_Type, the N categories plus the CJK ideographs that are numerals; isalpha is the L
// categories; isalnum is isalpha or isnumeric.
func pyIsDecimal(r rune) bool { return unicode.Is(unicode.Nd, r) }
func pyIsDigit(r rune) bool   { return unicode.Is(unicode.Nd, r) || unicode.Is(pyDigitExtra, r) }
func pyIsNumeric(r rune) bool { return unicode.IsNumber(r) || unicode.Is(pyNumericExtra, r) }
func pyIsAlnum(r rune) bool   { return unicode.IsLetter(r) || pyIsNumeric(r) }

// pyIsUpper and pyIsLower are Python's per-character isupper and islower: Unicode's Uppercase and
// Lowercase properties.
func pyIsUpper(r rune) bool { return unicode.IsUpper(r) || unicode.Is(unicode.Other_Uppercase, r) }
func pyIsLower(r rune) bool { return unicode.IsLower(r) || unicode.Is(unicode.Other_Lowercase, r) }

// pyIsTitle is Python's str.istitle: some cased character, upper- and titlecase characters only
// after uncased ones, lowercase ones only after cased ones.
func pyIsTitle(s string) bool {
	cased, prevCased := false, false
	for _, r := range s {
		switch {
		case pyIsUpper(r) || unicode.IsTitle(r):
			if prevCased {
				return false
			}
			prevCased, cased = true, true
		case pyIsLower(r):
			if !prevCased {
				return false
			}
			prevCased, cased = true, true
		default:
			prevCased = false
		}
	}
	return cased
}

// isLineBreak reports whether r ends a line for str.splitlines.
func isLineBreak(r rune) bool {
	switch r {
	case '\n', '\r', '\v', '\f', 0x1c, 0x1d, 0x1e, 0x85, 0x2028, 0x2029:
		return true
	}
	return false
}

// splitLines is Python's str.splitlines(keepends).
func splitLines(s string, keepends bool) *list {
	out := &list{}
	start := 0
	for i, r := range s {
		if i < start || !isLineBreak(r) {
			continue
		}
		end := i + len(string(r))
		if r == '\r' && strings.HasPrefix(s[end:], "\n") {
			end++
		}
		if keepends {
			out.items = append(out.items, s[start:end])
		} else {
			out.items = append(out.items, s[start:i])
		}
		start = end
	}
	if start < len(s) {
		out.items = append(out.items, s[start:])
	}
	return out
}

// zfill is Python's str.zfill: zeros after any sign up to width characters.
func zfill(s string, width int64) string {
	n := width - int64(runeLen(s))
	if n <= 0 {
		return s
	}
	n = min(n, maxTextBytes)
	sign := ""
	if strings.HasPrefix(s, "+") || strings.HasPrefix(s, "-") {
		sign, s = s[:1], s[1:]
	}
	return sign + strings.Repeat("0", int(n)) + s
}

// subRange resolves str.find's optional start and end (Python slice bounds, None for absent) to
// code point offsets into runes; ok is false when start lies past the end.
func subRange(runes []rune, args []value, kw *dict) (start, end int, ok bool, err error) {
	n := int64(len(runes))
	bound := func(i int, name string, def int64) (int64, error) {
		switch x := arg(args, kw, i, name, nil).(type) {
		case nil:
			return def, nil
		case bool:
			return boolInt(x), nil
		case int64:
			if x < 0 {
				x = max(x+n, 0)
			}
			return x, nil
		default:
			return 0, fmt.Errorf("slice indices must be integers or None, not %s", typeName(x))
		}
	}
	s, err := bound(1, "start", 0)
	if err != nil {
		return 0, 0, false, err
	}
	e, err := bound(2, "end", n)
	if err != nil {
		return 0, 0, false, err
	}
	if s > n {
		return 0, 0, false, nil
	}
	e = min(e, n)
	return int(s), int(max(e, s)), true, nil
}

// pyDigitExtra holds the characters outside Nd that Python's isdigit accepts (Numeric_Type Digit).
// It and pyNumericExtra are what testdata/pynumeric.py prints from Python's unicodedata.
var pyDigitExtra = &unicode.RangeTable{
	LatinOffset: 2,
	R16: []unicode.Range16{
		{0x00b2, 0x00b3, 1},
		{0x00b9, 0x00b9, 1},
		{0x1369, 0x1371, 1},
		{0x19da, 0x19da, 1},
		{0x2070, 0x2070, 1},
		{0x2074, 0x2079, 1},
		{0x2080, 0x2089, 1},
		{0x2460, 0x2468, 1},
		{0x2474, 0x247c, 1},
		{0x2488, 0x2490, 1},
		{0x24ea, 0x24ea, 1},
		{0x24f5, 0x24fd, 1},
		{0x24ff, 0x24ff, 1},
		{0x2776, 0x277e, 1},
		{0x2780, 0x2788, 1},
		{0x278a, 0x2792, 1},
	},
	R32: []unicode.Range32{
		{0x10a40, 0x10a43, 1},
		{0x10e60, 0x10e68, 1},
		{0x11052, 0x1105a, 1},
		{0x1f100, 0x1f10a, 1},
	},
}

// pyNumericExtra holds the characters outside the N categories that Python's isnumeric accepts
// (CJK ideographs with a numeric value).
var pyNumericExtra = &unicode.RangeTable{
	R16: []unicode.Range16{
		{0x3405, 0x3405, 1},
		{0x3483, 0x3483, 1},
		{0x382a, 0x382a, 1},
		{0x3b4d, 0x3b4d, 1},
		{0x4e00, 0x4e00, 1},
		{0x4e03, 0x4e03, 1},
		{0x4e07, 0x4e07, 1},
		{0x4e09, 0x4e09, 1},
		{0x4e5d, 0x4e5d, 1},
		{0x4e8c, 0x4e8c, 1},
		{0x4e94, 0x4e94, 1},
		{0x4e96, 0x4e96, 1},
		{0x4ebf, 0x4ec0, 1},
		{0x4edf, 0x4edf, 1},
		{0x4ee8, 0x4ee8, 1},
		{0x4f0d, 0x4f0d, 1},
		{0x4f70, 0x4f70, 1},
		{0x5104, 0x5104, 1},
		{0x5146, 0x5146, 1},
		{0x5169, 0x5169, 1},
		{0x516b, 0x516b, 1},
		{0x516d, 0x516d, 1},
		{0x5341, 0x5341, 1},
		{0x5343, 0x5345, 1},
		{0x534c, 0x534c, 1},
		{0x53c1, 0x53c4, 1},
		{0x56db, 0x56db, 1},
		{0x58f1, 0x58f1, 1},
		{0x58f9, 0x58f9, 1},
		{0x5e7a, 0x5e7a, 1},
		{0x5efe, 0x5eff, 1},
		{0x5f0c, 0x5f0e, 1},
		{0x5f10, 0x5f10, 1},
		{0x62fe, 0x62fe, 1},
		{0x634c, 0x634c, 1},
		{0x67d2, 0x67d2, 1},
		{0x6f06, 0x6f06, 1},
		{0x7396, 0x7396, 1},
		{0x767e, 0x767e, 1},
		{0x8086, 0x8086, 1},
		{0x842c, 0x842c, 1},
		{0x8cae, 0x8cae, 1},
		{0x8cb3, 0x8cb3, 1},
		{0x8d30, 0x8d30, 1},
		{0x9621, 0x9621, 1},
		{0x9646, 0x9646, 1},
		{0x964c, 0x964c, 1},
		{0x9678, 0x9678, 1},
		{0x96f6, 0x96f6, 1},
		{0xf96b, 0xf96b, 1},
		{0xf973, 0xf973, 1},
		{0xf978, 0xf978, 1},
		{0xf9b2, 0xf9b2, 1},
		{0xf9d1, 0xf9d1, 1},
		{0xf9d3, 0xf9d3, 1},
		{0xf9fd, 0xf9fd, 1},
	},
	R32: []unicode.Range32{
		{0x20001, 0x20001, 1},
		{0x20064, 0x20064, 1},
		{0x200e2, 0x200e2, 1},
		{0x20121, 0x20121, 1},
		{0x2092a, 0x2092a, 1},
		{0x20983, 0x20983, 1},
		{0x2098c, 0x2098c, 1},
		{0x2099c, 0x2099c, 1},
		{0x20aea, 0x20aea, 1},
		{0x20afd, 0x20afd, 1},
		{0x20b19, 0x20b19, 1},
		{0x22390, 0x22390, 1},
		{0x22998, 0x22998, 1},
		{0x23b1b, 0x23b1b, 1},
		{0x2626d, 0x2626d, 1},
		{0x2f890, 0x2f890, 1},
	},
}
