package constraint

import (
	"bytes"
	"fmt"
	"slices"
	"sync"
)

// TokenSource gives the bytes of each token id: what the token adds to the output text.
// *tokenizer.Tokenizer satisfies it (TokenBytes reports false for special tokens, which a
// constraint allows only where it names them: Spec.SpecialTokens; EOS is the engine's to allow,
// when the constraint is complete).
type TokenSource interface {
	TokenBytes(id int32) ([]byte, bool)
}

// Vocabulary is the byte strings of a model's tokens, arranged for constrained decoding: a trie in
// depth-first order, so that a walk shares the work of tokens' common prefixes and skips the
// subtree under a dead prefix in one jump. It is immutable and safe for concurrent use; build one
// per model and share it (compiled constraints are cached by its identity).
type Vocabulary struct {
	size   int
	tokens [][]byte // id → bytes; nil for ids no constraint allows
	nodes  []trieNode
	order  []int32 // token ids in trie order; node i's tokens are order[nodes[i].tokLo:nodes[i].tokHi]
	maxLen int     // the longest token's byte length

	// shared caches mask entries of leaf rules' states by their signature, across grammars.
	sharedMu sync.Mutex
	shared   map[string]*maskEntry
}

// maxShared bounds a vocabulary's shared mask entries; past it the cache restarts.
const maxShared = 4096

func (v *Vocabulary) sharedEntry(key string) *maskEntry {
	v.sharedMu.Lock()
	defer v.sharedMu.Unlock()
	return v.shared[key]
}

func (v *Vocabulary) storeShared(key string, e *maskEntry) {
	v.sharedMu.Lock()
	defer v.sharedMu.Unlock()
	if v.shared == nil || len(v.shared) >= maxShared {
		v.shared = map[string]*maskEntry{}
	}
	v.shared[key] = e
}

// trieNode is one byte of the trie, in depth-first order: its subtree is nodes[i:end].
type trieNode struct {
	b            byte
	depth        int32 // the node's byte is the token's byte depth-1
	end          int32
	tokLo, tokHi int32
}

// Special tokens as grammar terminals. A grammar is over bytes, and a special token adds none to
// the text; so each id src gives no bytes for (a special token, or a padding row) stands in the
// vocabulary for specialBytes(id): the byte specialEscape, which no UTF-8 text has, then the id. A
// special-token terminal of a grammar (Spec.SpecialTokens) is a literal of those bytes. Every front
// end admits only UTF-8 text (a literal that is not is refused), so the escape byte is nowhere else
// in a grammar, and the tokens whose bytes have it (byte-fallback or byte-level tokens that no UTF-8
// text is made of) are left out: no other token, nor a run of them, can spell a special token's
// bytes, and a special token is allowed exactly where a grammar names it.
const specialEscape = 0xFF

// specialBytes is what special token id stands for in a grammar.
func specialBytes(id int32) []byte {
	return []byte{specialEscape, byte(id >> 24), byte(id >> 16), byte(id >> 8), byte(id)}
}

// NewVocabulary reads the bytes of ids [0, size) from src; size is the model's vocabulary (it may
// exceed the tokenizer's, for padding rows). Ids without bytes (special or missing) are allowed
// only where a constraint names them (Spec.SpecialTokens); empty tokens, and tokens with a byte no
// UTF-8 text has (0xFF), never.
func NewVocabulary(src TokenSource, size int) (*Vocabulary, error) {
	if size <= 0 {
		return nil, fmt.Errorf("constraint: vocabulary size %d", size)
	}
	v := &Vocabulary{size: size, tokens: make([][]byte, size)}
	for id := range size {
		b, ok := src.TokenBytes(int32(id))
		switch {
		case !ok:
			v.tokens[id] = specialBytes(int32(id))
		case len(b) == 0 || bytes.IndexByte(b, specialEscape) >= 0:
			continue
		default:
			v.tokens[id] = slices.Clone(b)
		}
		v.order = append(v.order, int32(id))
	}
	for _, id := range v.order {
		v.maxLen = max(v.maxLen, len(v.tokens[id]))
	}
	slices.SortStableFunc(v.order, func(a, b int32) int { return bytes.Compare(v.tokens[a], v.tokens[b]) })
	// Build the trie from the sorted tokens: the path of open nodes is the previous token's bytes.
	var path []int32 // node index per depth
	var prev []byte
	for k, id := range v.order {
		b := v.tokens[id]
		l := commonPrefix(prev, b)
		if k > 0 && l == len(b) && len(prev) == len(b) {
			v.nodes[path[len(path)-1]].tokHi = int32(k + 1)
			continue
		}
		for len(path) > l {
			v.nodes[path[len(path)-1]].end = int32(len(v.nodes))
			path = path[:len(path)-1]
		}
		for d := l; d < len(b); d++ {
			path = append(path, int32(len(v.nodes)))
			v.nodes = append(v.nodes, trieNode{b: b[d], depth: int32(d + 1), tokLo: int32(k), tokHi: int32(k)})
		}
		last := path[len(path)-1]
		v.nodes[last].tokLo, v.nodes[last].tokHi = int32(k), int32(k+1)
		prev = b
	}
	for _, n := range path {
		v.nodes[n].end = int32(len(v.nodes))
	}
	return v, nil
}

// special reports whether id is a special token of v: one its source gives no bytes for.
func (v *Vocabulary) special(id int32) bool {
	if id < 0 || int(id) >= v.size {
		return false
	}
	b := v.tokens[id]
	return len(b) > 0 && b[0] == specialEscape
}

// Size returns the number of token ids a mask covers.
func (v *Vocabulary) Size() int { return v.size }

// MaskWords returns the length of a mask over v: one bit per token id.
func (v *Vocabulary) MaskWords() int { return (v.size + 63) / 64 }

// maxTokenLen returns the longest token's byte length.
func (v *Vocabulary) maxTokenLen() int { return v.maxLen }

func commonPrefix(a, b []byte) int {
	n := min(len(a), len(b))
	for i := range n {
		if a[i] != b[i] {
			return i
		}
	}
	return n
}
