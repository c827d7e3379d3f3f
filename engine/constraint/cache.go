package constraint

import (
	"container/list"
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
	kind                      Kind
	text                      string
	prefix, suffix, separator string
	maxRepeat                 int
	opts                      Options
	vocab                     *Vocabulary
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
	text := spec.Text
	if spec.Kind == Choice {
		text = choiceKey(spec.Choices)
	}
	key := cacheKey{spec.Kind, text, spec.Prefix, spec.Suffix, spec.Separator, spec.MaxRepeat, opts, vocab}
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

// choiceKey encodes a list of choices unambiguously: each with its length.
func choiceKey(choices []string) string {
	var sb strings.Builder
	for _, s := range choices {
		sb.WriteString(strconv.Itoa(len(s)))
		sb.WriteByte(':')
		sb.WriteString(s)
	}
	return sb.String()
}
