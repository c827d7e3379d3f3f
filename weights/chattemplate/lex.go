package chattemplate

import (
	"fmt"
	"strconv"
	"strings"
	"unicode"
	"unicode/utf8"
)

// tokenKind classifies a token inside a tag.
type tokenKind int

const (
	tokName tokenKind = iota
	tokString
	tokInt
	tokFloat
	tokOp  // an operator or punctuation: + - * / // % ** ~ == != < > <= >= = | . , : ( ) [ ] { }
	tokEnd // the end of the tag's tokens
)

// token is one lexical item of an expression or statement.
type token struct {
	kind tokenKind
	text string // the name, the operator, the number's digits or the decoded string
	pos  int    // byte offset in the template source
}

// segmentKind says what a piece of the template is.
type segmentKind int

const (
	segText     segmentKind = iota
	segVariable             // {{ ... }}
	segBlock                // {% ... %}
	segComment              // {# ... #}
)

// segment is a piece of template text or one tag with its tokens.
type segment struct {
	kind   segmentKind
	text   string  // segText only
	tokens []token // segVariable and segBlock, ending in tokEnd
	pos    int
	// Whitespace control markers: '-' strips all whitespace on that side, '+' disables
	// lstrip_blocks / trim_blocks on that side.
	left, right byte
}

// isSpace reports whether Python's str.isspace holds for r (Go's unicode.IsSpace lacks the
// information separators U+001C to U+001F).
func isSpace(r rune) bool { return unicode.IsSpace(r) || (r >= 0x1c && r <= 0x1f) }

// lex splits src into text and tags and applies Jinja2's whitespace control with trim_blocks and
// lstrip_blocks on (transformers' settings): the template's line breaks ("\r\n", "\r", "\n") all
// become "\n" first, a single trailing newline of the template is dropped, a block or comment tag
// alone on its line takes the indentation before it, and the first newline after a block or comment
// tag is removed.
func lex(src string) ([]segment, error) {
	src = newlines.Replace(src)
	src = strings.TrimSuffix(src, "\n") // keep_trailing_newline=False
	var segs []segment
	i := 0
	for i < len(src) {
		open := indexTagOpen(src, i)
		if open < 0 {
			segs = append(segs, segment{kind: segText, text: src[i:], pos: i})
			break
		}
		if open > i {
			segs = append(segs, segment{kind: segText, text: src[i:open], pos: i})
		}
		seg, next, err := lexTag(src, open)
		if err != nil {
			return nil, err
		}
		segs = append(segs, seg)
		i = next
		if isRawStart(&seg) {
			raw, after, endTag, err := lexRaw(src, i)
			if err != nil {
				return nil, err
			}
			segs = append(segs, raw, endTag)
			i = after
		}
	}
	applyWhitespaceControl(segs)
	return segs, nil
}

// newlines turns every line break of a template into "\n", as Jinja2 reads templates (its default
// newline_sequence); line breaks inside the values a template prints are data and stay as they are.
var newlines = strings.NewReplacer("\r\n", "\n", "\r", "\n")

// indexTagOpen finds the next "{{", "{%" or "{#" at or after i.
func indexTagOpen(src string, i int) int {
	for {
		j := strings.IndexByte(src[i:], '{')
		if j < 0 || i+j+1 >= len(src) {
			return -1
		}
		switch src[i+j+1] {
		case '{', '%', '#':
			return i + j
		}
		i += j + 1
	}
}

// lexRaw reads the body of a raw block starting at i up to its {% endraw %}.
func lexRaw(src string, i int) (raw segment, after int, endTag segment, err error) {
	for j := i; ; {
		k := strings.Index(src[j:], "{%")
		if k < 0 {
			return segment{}, 0, segment{}, fmt.Errorf("chattemplate: raw block at offset %d has no endraw", i)
		}
		tag, next, err := lexTag(src, j+k)
		if err == nil && tag.kind == segBlock && len(tag.tokens) == 2 && tag.tokens[0].text == "endraw" {
			return segment{kind: segText, text: src[i : j+k], pos: i}, next, tag, nil
		}
		j += k + 2
	}
}

// lexTag reads the tag opening at src[open:] and returns it with the offset just past it.
func lexTag(src string, open int) (segment, int, error) {
	seg := segment{pos: open}
	var closer string
	switch src[open+1] {
	case '{':
		seg.kind, closer = segVariable, "}}"
	case '%':
		seg.kind, closer = segBlock, "%}"
	default:
		seg.kind, closer = segComment, "#}"
	}
	i := open + 2
	if i < len(src) && (src[i] == '-' || src[i] == '+') {
		seg.left = src[i]
		i++
	}
	if seg.kind == segComment {
		end := strings.Index(src[i:], "#}")
		if end < 0 {
			return seg, 0, fmt.Errorf("chattemplate: offset %d: unclosed comment", open)
		}
		end += i
		if end > i && (src[end-1] == '-' || src[end-1] == '+') {
			seg.right = src[end-1]
		}
		return seg, end + 2, nil
	}
	depth := 0 // open { of dict literals, so that "}}" inside one does not close the tag
	for {
		for i < len(src) && isSpace(rune(src[i])) {
			i++
		}
		if i >= len(src) {
			return seg, 0, fmt.Errorf("chattemplate: offset %d: unclosed tag", open)
		}
		if depth == 0 {
			if (src[i] == '-' || src[i] == '+') && strings.HasPrefix(src[i+1:], closer) {
				seg.right = src[i]
				seg.tokens = append(seg.tokens, token{kind: tokEnd, pos: i})
				return seg, i + 1 + len(closer), nil
			}
			if strings.HasPrefix(src[i:], closer) {
				seg.tokens = append(seg.tokens, token{kind: tokEnd, pos: i})
				return seg, i + len(closer), nil
			}
		}
		tok, next, err := lexToken(src, i)
		if err != nil {
			return seg, 0, err
		}
		if tok.kind == tokOp {
			switch tok.text {
			case "{":
				depth++
			case "}":
				depth--
			}
		}
		seg.tokens = append(seg.tokens, tok)
		i = next
	}
}

// operators, longest first so that "**" wins over "*".
var operators = []string{"**", "//", "==", "!=", "<=", ">=", "+", "-", "*", "/", "%", "~", "<", ">", "=",
	"|", ".", ",", ":", "(", ")", "[", "]", "{", "}"}

// lexToken reads one token at src[i:] (not whitespace).
func lexToken(src string, i int) (token, int, error) {
	c := src[i]
	switch {
	case c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z':
		j := i + 1
		for j < len(src) && (src[j] == '_' || src[j] >= 'a' && src[j] <= 'z' || src[j] >= 'A' && src[j] <= 'Z' || src[j] >= '0' && src[j] <= '9') {
			j++
		}
		return token{kind: tokName, text: src[i:j], pos: i}, j, nil
	case c >= '0' && c <= '9':
		j := i
		for j < len(src) && (src[j] >= '0' && src[j] <= '9' || src[j] == '_') {
			j++
		}
		kind := tokInt
		if j+1 < len(src) && src[j] == '.' && src[j+1] >= '0' && src[j+1] <= '9' {
			kind = tokFloat
			j++
			for j < len(src) && (src[j] >= '0' && src[j] <= '9' || src[j] == '_') {
				j++
			}
		}
		if j < len(src) && (src[j] == 'e' || src[j] == 'E') {
			k := j + 1
			if k < len(src) && (src[k] == '+' || src[k] == '-') {
				k++
			}
			if k < len(src) && src[k] >= '0' && src[k] <= '9' {
				kind = tokFloat
				for k < len(src) && src[k] >= '0' && src[k] <= '9' {
					k++
				}
				j = k
			}
		}
		return token{kind: kind, text: strings.ReplaceAll(src[i:j], "_", ""), pos: i}, j, nil
	case c == '\'' || c == '"':
		s, next, err := lexString(src, i)
		return token{kind: tokString, text: s, pos: i}, next, err
	}
	for _, op := range operators {
		if strings.HasPrefix(src[i:], op) {
			return token{kind: tokOp, text: op, pos: i}, i + len(op), nil
		}
	}
	r, _ := utf8.DecodeRuneInString(src[i:])
	return token{}, 0, fmt.Errorf("chattemplate: offset %d: unexpected character %q", i, r)
}

// lexString decodes a Python string literal at src[i:] (quote included) with Python's escapes;
// unknown escapes keep their backslash, as in Python.
func lexString(src string, i int) (string, int, error) {
	quote := src[i]
	var b strings.Builder
	j := i + 1
	for j < len(src) {
		c := src[j]
		switch {
		case c == quote:
			return b.String(), j + 1, nil
		case c != '\\':
			b.WriteByte(c)
			j++
			continue
		}
		if j+1 >= len(src) {
			break
		}
		e := src[j+1]
		j += 2
		switch e {
		case 'n':
			b.WriteByte('\n')
		case 't':
			b.WriteByte('\t')
		case 'r':
			b.WriteByte('\r')
		case 'b':
			b.WriteByte('\b')
		case 'f':
			b.WriteByte('\f')
		case 'v':
			b.WriteByte('\v')
		case 'a':
			b.WriteByte('\a')
		case '0':
			b.WriteByte(0)
		case '\\', '\'', '"':
			b.WriteByte(e)
		case '\n':
			// a backslash-newline continues the literal
		case 'x', 'u', 'U':
			n := map[byte]int{'x': 2, 'u': 4, 'U': 8}[e]
			if j+n > len(src) {
				return "", 0, fmt.Errorf("chattemplate: offset %d: truncated \\%c escape", j-2, e)
			}
			v, err := strconv.ParseUint(src[j:j+n], 16, 32)
			if err != nil || v > unicode.MaxRune {
				return "", 0, fmt.Errorf("chattemplate: offset %d: bad \\%c escape", j-2, e)
			}
			b.WriteRune(rune(v))
			j += n
		default:
			b.WriteByte('\\')
			b.WriteByte(e)
		}
	}
	return "", 0, fmt.Errorf("chattemplate: offset %d: unterminated string", i)
}

// applyWhitespaceControl trims the text segments around tags according to their markers and to
// trim_blocks / lstrip_blocks.
func applyWhitespaceControl(segs []segment) {
	// lineStart marks the text segments that begin a line of the source: the template's first, and
	// those whose leading newline trim_blocks took (the tag before them ends its line).
	lineStart := make([]bool, len(segs)+1)
	lineStart[0] = true
	for k := range segs {
		s := &segs[k]
		if s.kind == segText {
			continue
		}
		if k > 0 && segs[k-1].kind == segText {
			prev := &segs[k-1]
			switch {
			case s.left == '-':
				prev.text = strings.TrimRightFunc(prev.text, isSpace)
			case s.left != '+' && s.kind != segVariable:
				// lstrip_blocks: drop the spaces and tabs between the line's start and the tag.
				line := strings.LastIndexByte(prev.text, '\n')
				if line >= 0 || lineStart[k-1] {
					tail := prev.text[line+1:]
					if strings.Trim(tail, " \t") == "" {
						prev.text = prev.text[:line+1]
					}
				}
			}
		}
		if k+1 < len(segs) && segs[k+1].kind == segText {
			next := &segs[k+1]
			switch {
			case s.right == '-':
				next.text = strings.TrimLeftFunc(next.text, isSpace)
			case s.right != '+' && s.kind != segVariable && !isRawStart(s):
				// trim_blocks: the first newline after a block or comment tag goes, except after
				// {% raw %}, whose body is kept as written.
				if strings.HasPrefix(next.text, "\n") {
					next.text = next.text[1:]
					lineStart[k+1] = true
				}
			}
		}
	}
}

// isRawStart reports whether s is a {% raw %} tag.
func isRawStart(s *segment) bool {
	return s.kind == segBlock && len(s.tokens) == 2 && s.tokens[0].kind == tokName && s.tokens[0].text == "raw"
}
