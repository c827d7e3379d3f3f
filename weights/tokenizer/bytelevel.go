package tokenizer

import (
	"strings"
	"unicode/utf8"
)

// byteToRune is GPT-2's byte→rune alphabet used by the ByteLevel pre-tokenizer and decoder:
// printable Latin-1 bytes map to themselves, the other 68 bytes to U+0100 upwards in byte order.
var byteToRune = func() (table [256]rune) {
	n := rune(0)
	for b := range 256 {
		if (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF) {
			table[b] = rune(b)
		} else {
			table[b] = 0x100 + n
			n++
		}
	}
	return table
}()

// runeToByte inverts byteToRune; the alphabet lies below U+0144.
var runeToByte = func() (table [0x144]int16) {
	for i := range table {
		table[i] = -1
	}
	for b, r := range byteToRune {
		table[r] = int16(b)
	}
	return table
}()

// byteLevelEncode maps every byte of s to its ByteLevel rune.
func byteLevelEncode(s string) string {
	var sb strings.Builder
	sb.Grow(2 * len(s))
	for i := 0; i < len(s); i++ {
		sb.WriteRune(byteToRune[s[i]])
	}
	return sb.String()
}

// byteLevelDecodeStrict maps a ByteLevel token back to its bytes; ok is false when a rune is outside
// the alphabet.
func byteLevelDecodeStrict(token string) (string, bool) {
	buf := make([]byte, 0, len(token))
	buf, ok := appendByteLevelBytes(buf, token)
	return string(buf), ok
}

// appendByteLevelBytes appends the bytes a ByteLevel token stands for; when a rune lies outside the
// alphabet it appends nothing and reports false.
func appendByteLevelBytes(dst []byte, token string) ([]byte, bool) {
	start := len(dst)
	for _, r := range token {
		if r >= rune(len(runeToByte)) || runeToByte[r] < 0 {
			return dst[:start], false
		}
		dst = append(dst, byte(runeToByte[r]))
	}
	return dst, true
}

// appendLossyUTF8 appends b to dst as valid UTF-8, replacing each maximal invalid subpart with one
// U+FFFD, as Rust's String::from_utf8_lossy does (Unicode's "substitution of maximal subparts").
// Go's own conversions differ: they replace every invalid byte, or every run of them.
func appendLossyUTF8(dst []byte, b []byte) []byte {
	for i := 0; i < len(b); {
		c := b[i]
		if c < utf8.RuneSelf {
			dst = append(dst, c)
			i++
			continue
		}
		if r, size := utf8.DecodeRune(b[i:]); r != utf8.RuneError || size == 3 {
			dst = append(dst, b[i:i+size]...)
			i += size
			continue
		}
		// Invalid: skip the longest prefix of a well-formed sequence, at least one byte.
		i += maximalSubpart(b[i:])
		dst = append(dst, "\uFFFD"...)
	}
	return dst
}

// maximalSubpart returns the length of the longest prefix of b that begins a well-formed UTF-8
// sequence (at least 1), for a b that does not start with a complete valid one.
func maximalSubpart(b []byte) int {
	c := b[0]
	var need int
	lo, hi := byte(0x80), byte(0xBF)
	switch {
	case c >= 0xC2 && c <= 0xDF:
		need = 1
	case c == 0xE0:
		need, lo = 2, 0xA0
	case c >= 0xE1 && c <= 0xEC, c == 0xEE, c == 0xEF:
		need = 2
	case c == 0xED:
		need, hi = 2, 0x9F
	case c == 0xF0:
		need, lo = 3, 0x90
	case c >= 0xF1 && c <= 0xF3:
		need = 3
	case c == 0xF4:
		need, hi = 3, 0x8F
	default:
		return 1
	}
	n := 1
	for k := 0; k < need && n < len(b); k++ {
		x := b[n]
		if k == 0 {
			if x < lo || x > hi {
				return n
			}
		} else if x < 0x80 || x > 0xBF {
			return n
		}
		n++
	}
	return n
}
