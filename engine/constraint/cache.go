package constraint

import (
	"container/list"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
)

// Cache keeps compiled constraints, least recently used first out, keyed by the constraint (kind,
// text, choices, options) and the vocabulary's identity: a server compiles a schema once however
// many requests send it. Failed compilations are cached too, so a bad schema sent again costs a
// lookup. It is safe for concurrent use; concurrent Compiles of one key compile once.
type Cache struct {
	mu       sync.Mutex
	capacity int
	order    *list.List // of *cacheEntry, most recent first
	entries  map[cacheKey]*list.Element
}

type cacheKey struct {
	spec  string // specKey
	opts  Options
	vocab *Vocabulary
}

type cacheEntry struct {
	key  cacheKey
	done chan struct{} // closed when g and err are set
	g    *Grammar
	err  error
}

// NewCache returns a cache holding up to capacity compiled constraints (at least 1).
func NewCache(capacity int) *Cache {
	return &Cache{capacity: max(capacity, 1), order: list.New(), entries: map[cacheKey]*list.Element{}}
}

// Compile returns the compiled spec for vocab, compiling it on a miss (see Compile).
func (c *Cache) Compile(spec Spec, vocab *Vocabulary, opts Options) (*Grammar, error) {
	var sb strings.Builder
	specKey(&sb, spec)
	key := cacheKey{sb.String(), opts, vocab}
	c.mu.Lock()
	if el, ok := c.entries[key]; ok {
		c.order.MoveToFront(el)
		e := el.Value.(*cacheEntry)
		c.mu.Unlock()
		<-e.done
		return e.g, e.err
	}
	e := &cacheEntry{key: key, done: make(chan struct{})}
	c.entries[key] = c.order.PushFront(e)
	for c.order.Len() > c.capacity {
		old := c.order.Back()
		c.order.Remove(old)
		delete(c.entries, old.Value.(*cacheEntry).key)
	}
	c.mu.Unlock()
	e.g, e.err = Compile(spec, vocab, opts)
	close(e.done)
	return e.g, e.err
}

// Len returns the number of constraints cached.
func (c *Cache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.order.Len()
}

// specKey encodes spec unambiguously: each string with its length, each list with its count, the
// special tokens in order of their texts.
func specKey(sb *strings.Builder, spec Spec) {
	str := func(s string) {
		sb.WriteString(strconv.Itoa(len(s)))
		sb.WriteByte(':')
		sb.WriteString(s)
	}
	num := func(n int) {
		sb.WriteString(strconv.Itoa(n))
		sb.WriteByte(';')
	}
	str(string(spec.Kind))
	str(spec.Text)
	num(len(spec.Choices))
	for _, c := range spec.Choices {
		str(c)
	}
	str(spec.Prefix)
	str(spec.Suffix)
	str(spec.Separator)
	num(spec.MaxRepeat)
	num(len(spec.SpecialTokens))
	for _, text := range slices.Sorted(maps.Keys(spec.SpecialTokens)) {
		str(text)
		num(int(spec.SpecialTokens[text]))
	}
	num(len(spec.Alternatives))
	for _, a := range spec.Alternatives {
		specKey(sb, a)
	}
}
