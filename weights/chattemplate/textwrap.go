package chattemplate

import (
	"fmt"
	"strings"
)

// wordwrap is Jinja2's wordwrap filter: each line of s (str.splitlines) wrapped on its own by
// Python's textwrap.wrap(line, width, expand_tabs=False, replace_whitespace=False,
// break_long_words, break_on_hyphens), and all the wrapped lines joined with wrapstring.
func wordwrap(s string, width int64, breakLong, breakHyphens bool, wrapstring string) (string, error) {
	var paras []string
	for _, line := range splitLines(s, false).items {
		if width <= 0 {
			return "", fmt.Errorf("invalid width %d (must be > 0)", width)
		}
		lines := wrapChunks(textwrapChunks([]rune(line.(string)), breakHyphens), int(min(width, 1<<30)), breakLong, breakHyphens)
		paras = append(paras, strings.Join(lines, wrapstring))
	}
	return strings.Join(paras, wrapstring), nil
}

// textwrapSpace is textwrap's whitespace, ASCII only.
func textwrapSpace(r rune) bool { return strings.ContainsRune("\t\n\v\f\r ", r) }

// pyWordChar is a character of Python's \w; pyLetter one of [^\d\W].
func pyWordChar(r rune) bool { return r == '_' || pyIsAlnum(r) }
func pyLetter(r rune) bool   { return pyWordChar(r) && !pyIsDecimal(r) }

// textwrapChunks splits text as TextWrapper._split does: into runs of whitespace and words. With
// breakHyphens (its wordsep_re) a word also ends after a hyphen between letters ("well-" "known")
// and before or after an em-dash of two or more hyphens between words; without (wordsep_simple_re)
// words end only at whitespace.
func textwrapChunks(t []rune, breakHyphens bool) [][]rune {
	at := func(i int) rune {
		if i < 0 || i >= len(t) {
			return 0
		}
		return t[i]
	}
	letter := func(i int) bool { return i >= 0 && i < len(t) && pyLetter(t[i]) }
	// wordPunct is [\w!"'&.,?].
	wordPunct := func(i int) bool {
		return i >= 0 && i < len(t) && (pyWordChar(t[i]) || strings.ContainsRune(`!"'&.,?`, t[i]))
	}
	// emDash reports whether two or more hyphens start at i and a \w character follows them.
	emDash := func(i int) bool {
		j := i
		for at(j) == '-' {
			j++
		}
		return j-i >= 2 && j < len(t) && pyWordChar(t[j])
	}
	var chunks [][]rune
	for i := 0; i < len(t); {
		space := textwrapSpace(t[i])
		j := i + 1
		switch {
		case space || !breakHyphens:
			for j < len(t) && textwrapSpace(t[j]) == space {
				j++
			}
		case wordPunct(i-1) && emDash(i): // (?<=wp) -{2,} (?=\w)
			for at(j) == '-' {
				j++
			}
		default: // nws+? followed by a hyphenated word's hyphen, the word's end, or an em-dash
			for ; ; j++ {
				if at(j) == '-' && (letter(j-2) && letter(j-1) || letter(j-3) && at(j-2) == '-' && letter(j-1)) &&
					letter(j+1) && (letter(j+2) || at(j+2) == '-' && letter(j+3)) {
					j++
					break
				}
				if j == len(t) || textwrapSpace(t[j]) || wordPunct(j-1) && emDash(j) {
					break
				}
			}
		}
		chunks = append(chunks, t[i:j])
		i = j
	}
	return chunks
}

// wrapChunks is TextWrapper._wrap_chunks without indents or a line limit, dropping whitespace: it
// fills each line with the chunks that fit in width, breaks a chunk longer than width (after its
// last hyphen that fits, with breakHyphens) or, without breakLong, gives it a line of its own, and
// drops the whitespace at the end of each line and at the start of each line but the first.
func wrapChunks(chunks [][]rune, width int, breakLong, breakHyphens bool) []string {
	blank := func(c []rune) bool {
		for _, r := range c {
			if !isSpace(r) {
				return false
			}
		}
		return true
	}
	var lines []string
	for len(chunks) > 0 {
		var cur [][]rune
		curLen := 0
		if len(lines) > 0 && blank(chunks[0]) {
			chunks = chunks[1:]
		}
		for len(chunks) > 0 && curLen+len(chunks[0]) <= width {
			cur = append(cur, chunks[0])
			curLen += len(chunks[0])
			chunks = chunks[1:]
		}
		if len(chunks) > 0 && len(chunks[0]) > width {
			// _handle_long_word
			if chunk, end := chunks[0], width-curLen; breakLong {
				if breakHyphens {
					hyphen := -1
					for i := end - 1; i >= 0; i-- {
						if chunk[i] == '-' {
							hyphen = i
							break
						}
					}
					if hyphen > 0 && strings.Trim(string(chunk[:hyphen]), "-") != "" {
						end = hyphen + 1
					}
				}
				cur = append(cur, chunk[:end])
				chunks[0] = chunk[end:]
			} else if len(cur) == 0 {
				cur = append(cur, chunk)
				chunks = chunks[1:]
			}
		}
		if len(cur) > 0 && blank(cur[len(cur)-1]) {
			cur = cur[:len(cur)-1]
		}
		if len(cur) > 0 {
			var b strings.Builder
			for _, c := range cur {
				b.WriteString(string(c))
			}
			lines = append(lines, b.String())
		}
	}
	return lines
}
