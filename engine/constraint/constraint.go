package constraint

import (
	"errors"
	"fmt"
	"maps"
	"strings"
	"sync"
	"sync/atomic"
	"unicode/utf8"
)

// Sentinel errors; a server answers each with a 400 that carries the message (it names what is
// refused or wrong).
var (
	// ErrUnsupported: the constraint uses a JSON Schema keyword, regex or grammar feature this
	// package does not implement (the message names it).
	ErrUnsupported = errors.New("unsupported")
	// ErrSyntax: the constraint's text is malformed (bad JSON, a regex or GBNF syntax error, an
	// undefined rule, a $ref that points nowhere).
	ErrSyntax = errors.New("syntax error")
	// ErrTooLarge: the constraint would compile to more states than a request may cost.
	ErrTooLarge = errors.New("too large")
	// ErrEmpty: the constraint admits no output at all (an unsatisfiable schema, say).
	ErrEmpty = errors.New("admits no output")
)

// Kind names a constraint's language.
type Kind string

// Constraint kinds.
const (
	// JSONSchema: Spec.Text is a JSON Schema; the output is one JSON value valid under it.
	JSONSchema Kind = "json_schema"
	// JSONObject: the output is one JSON object (OpenAI's response_format json_object).
	JSONObject Kind = "json_object"
	// Regex: Spec.Text is a regular expression (see regex.go for the subset) the whole output
	// matches.
	Regex Kind = "regex"
	// Choice: the output is exactly one of Spec.Choices.
	Choice Kind = "choice"
	// GBNF: Spec.Text is a grammar in llama.cpp's GBNF (see gbnf.go for the features); the output is
	// a string of its root rule.
	GBNF Kind = "grammar"
	// AnyOf: the output is that of one of Spec.Alternatives, each a Spec of its own (its Prefix,
	// Suffix and repetition included). Tool calls whose functions each have a name before their
	// arguments are one use: "get_weather" [ARGS] {its parameters} or "get_time" [ARGS] {...}.
	AnyOf Kind = "any_of"
)

// Spec says what to constrain the output to.
type Spec struct {
	Kind    Kind
	Text    string   // the schema, regex or grammar
	Choices []string // for Choice
	// Prefix and Suffix are literal texts around the constrained value, and MaxRepeat (when above
	// 1) lets the whole repeat up to that many times, Separator between repetitions: the output is
	// Prefix value Suffix (Separator Prefix value Suffix)*. Tool calls in tagged formats are one
	// use: "<tool_call>\n" {JSON} "\n</tool_call>", separated by "\n".
	Prefix, Suffix, Separator string
	MaxRepeat                 int
	// Alternatives are AnyOf's constraints.
	Alternatives []Spec
	// SpecialTokens are special-token terminals: each occurrence of one of these texts in Prefix,
	// Suffix or Separator (here and in Alternatives, which add their own) stands for one token,
	// that special token id, not for the text's bytes. The ids must be special tokens of the
	// vocabulary (ids its TokenSource gives no bytes for): control tokens that no text encodes to,
	// such as Mistral's [TOOL_CALLS] and [ARGS], which a constraint can then write anywhere.
	SpecialTokens map[string]int32
}

// DefaultMaxWhitespace is the whitespace allowed between two JSON tokens when Options leaves it
// zero: room for a space, or a newline and a short indent, but not for a weak model to spend its
// max_tokens on blank space (what xgrammar's and llguidance's bounded whitespace are for).
const DefaultMaxWhitespace = 4

// Options tune compilation.
type Options struct {
	// MaxWhitespace caps the whitespace characters (space, tab, newline, carriage return) between
	// two tokens of JSON output; 0 means DefaultMaxWhitespace, a negative value allows none
	// (compact JSON).
	MaxWhitespace int
}

func (o Options) whitespace() int {
	switch {
	case o.MaxWhitespace == 0:
		return DefaultMaxWhitespace
	case o.MaxWhitespace < 0:
		return 0
	}
	return o.MaxWhitespace
}

// Grammar is a compiled constraint over one vocabulary: the automaton and its token mask cache.
// It is immutable (the cache fills in behind atomic pointers) and safe for concurrent use; each
// request takes its own Matcher.
type Grammar struct {
	a       *automaton
	vocab   *Vocabulary
	entries []atomic.Pointer[maskEntry]
	walkers sync.Pool
}

// Compile compiles spec against vocab and fills its mask cache. Errors wrap ErrUnsupported,
// ErrSyntax, ErrTooLarge or ErrEmpty, and name what they refuse.
func Compile(spec Spec, vocab *Vocabulary, opts Options) (*Grammar, error) {
	g, err := compileLazy(spec, vocab, opts)
	if err != nil {
		return nil, err
	}
	g.precompute()
	return g, nil
}

// compileLazy compiles spec without filling the mask cache (entries are then computed on first use).
func compileLazy(spec Spec, vocab *Vocabulary, opts Options) (*Grammar, error) {
	if err := checkSpecial(spec, vocab); err != nil {
		return nil, fmt.Errorf("constraint: %s: %w", spec.Kind, err)
	}
	ir, err := buildIR(spec, opts)
	if err != nil {
		return nil, fmt.Errorf("constraint: %s: %w", spec.Kind, err)
	}
	a, err := lower(ir)
	if err != nil {
		return nil, fmt.Errorf("constraint: %s: %w", spec.Kind, err)
	}
	if a.flags[a.root]&flagAccept == 0 && !hasStart(a) {
		return nil, fmt.Errorf("constraint: %s: %w", spec.Kind, ErrEmpty)
	}
	a.signLeaves(vocab.maxTokenLen())
	return newGrammar(a, vocab), nil
}

// hasStart reports whether the root's closure can take a byte or is complete.
func hasStart(a *automaton) bool {
	var c config
	newStepper(a).start(&c, a.root, nil)
	return !c.dead()
}

func newGrammar(a *automaton, vocab *Vocabulary) *Grammar {
	g := &Grammar{a: a, vocab: vocab, entries: make([]atomic.Pointer[maskEntry], a.numStates())}
	g.walkers.New = func() any { return g.newWalker() }
	return g
}

// maxSpecRepeat bounds Spec.MaxRepeat.
const maxSpecRepeat = 64

// maxSpecDepth bounds the nesting of Spec.Alternatives.
const maxSpecDepth = 16

// buildIR runs spec's front end, then wraps its root in Prefix, Suffix and the repetition.
func buildIR(spec Spec, opts Options) (*grammar, error) {
	return buildSpec(spec, opts, nil, 0)
}

// buildSpec is buildIR for a spec nested depth deep in Alternatives, under the special tokens of
// the specs around it.
func buildSpec(spec Spec, opts Options, special map[string]int32, depth int) (*grammar, error) {
	if depth > maxSpecDepth {
		return nil, fmt.Errorf("%w: alternatives nested more than %d deep", ErrTooLarge, maxSpecDepth)
	}
	if len(spec.SpecialTokens) > 0 {
		special = maps.Clone(special)
		if special == nil {
			special = map[string]int32{}
		}
		maps.Copy(special, spec.SpecialTokens)
	}
	var g *grammar
	var err error
	if spec.Kind == AnyOf {
		g, err = anyOfGrammar(spec.Alternatives, opts, special, depth)
	} else {
		g, err = buildKind(spec, opts)
	}
	if err != nil || (spec.Prefix == "" && spec.Suffix == "" && spec.MaxRepeat <= 1) {
		return g, err
	}
	if spec.MaxRepeat > maxSpecRepeat {
		return nil, fmt.Errorf("%w: max repeat %d above %d", ErrTooLarge, spec.MaxRepeat, maxSpecRepeat)
	}
	var lits [3]*expr
	for i, s := range []string{spec.Prefix, spec.Suffix, spec.Separator} {
		if lits[i], err = literalExpr(s, special); err != nil {
			return nil, err
		}
	}
	one := seqExpr(lits[0], refExpr(g.root), lits[1])
	body := one
	if spec.MaxRepeat > 1 {
		body = seqExpr(one, repeatExpr(seqExpr(lits[2], one), 0, spec.MaxRepeat-1))
	}
	g.root = g.add("wrapped", body)
	return g, nil
}

// anyOfGrammar matches the output of one of alts.
func anyOfGrammar(alts []Spec, opts Options, special map[string]int32, depth int) (*grammar, error) {
	if len(alts) == 0 {
		return nil, fmt.Errorf("%w: any_of needs at least one alternative", ErrSyntax)
	}
	g := &grammar{}
	subs := make([]*expr, len(alts))
	for i, a := range alts {
		h, err := buildSpec(a, opts, special, depth+1)
		if err != nil {
			return nil, fmt.Errorf("alternative %d (%s): %w", i, a.Kind, err)
		}
		subs[i] = refExpr(g.include(h, fmt.Sprintf("alternative %d", i)))
	}
	g.root = g.add("any of", altExpr(subs...))
	return g, nil
}

// literalExpr matches the text s, each occurrence of a text of special (the longest, where they
// overlap) being that special token instead.
func literalExpr(s string, special map[string]int32) (*expr, error) {
	if !utf8.ValidString(s) {
		return nil, fmt.Errorf("%w: literal %q is not UTF-8", ErrSyntax, s)
	}
	var parts []*expr
	start := 0
	for i := 0; i < len(s); {
		n, id := 0, int32(0)
		for text, tid := range special {
			if len(text) > n && strings.HasPrefix(s[i:], text) {
				n, id = len(text), tid
			}
		}
		if n == 0 {
			i++
			continue
		}
		parts = append(parts, litExpr(s[start:i]), litExpr(string(specialBytes(id))))
		i += n
		start = i
	}
	parts = append(parts, litExpr(s[start:]))
	return seqExpr(parts...), nil
}

// checkSpecial checks that the special tokens of spec (and of its alternatives) are special tokens of
// vocab, named by UTF-8 texts.
func checkSpecial(spec Spec, vocab *Vocabulary) error {
	for text, id := range spec.SpecialTokens {
		if text == "" || !utf8.ValidString(text) {
			return fmt.Errorf("%w: special token text %q", ErrSyntax, text)
		}
		if !vocab.special(id) {
			return fmt.Errorf("%w: special token %q: id %d is not a special token of the vocabulary", ErrSyntax, text, id)
		}
	}
	for _, a := range spec.Alternatives {
		if err := checkSpecial(a, vocab); err != nil {
			return err
		}
	}
	return nil
}

// buildKind runs spec's front end.
func buildKind(spec Spec, opts Options) (*grammar, error) {
	switch spec.Kind {
	case JSONSchema:
		return schemaGrammar(spec.Text, opts)
	case JSONObject:
		return jsonObjectGrammar(opts), nil
	case Regex:
		return regexGrammar(spec.Text)
	case Choice:
		return choiceGrammar(spec.Choices)
	case GBNF:
		return parseGBNF(spec.Text)
	}
	return nil, fmt.Errorf("%w: constraint kind %q", ErrUnsupported, spec.Kind)
}

// choiceGrammar matches exactly one of choices.
func choiceGrammar(choices []string) (*grammar, error) {
	if len(choices) == 0 {
		return nil, fmt.Errorf("%w: choice needs at least one string", ErrSyntax)
	}
	alts := make([]*expr, len(choices))
	for i, c := range choices {
		if !utf8.ValidString(c) {
			return nil, fmt.Errorf("%w: choice %q is not UTF-8", ErrSyntax, c)
		}
		alts[i] = litExpr(c)
	}
	g := &grammar{}
	g.root = g.add("root", altExpr(alts...))
	return g, nil
}

// Vocabulary returns the vocabulary g was compiled for.
func (g *Grammar) Vocabulary() *Vocabulary { return g.vocab }

// NumStates returns the number of automaton states (a measure of the constraint's size).
func (g *Grammar) NumStates() int { return g.a.numStates() }

// match reports whether the whole of b is a string of the grammar.
func (g *Grammar) match(b []byte) bool {
	st := newStepper(g.a)
	var start, x, y config
	st.start(&start, g.a.root, nil)
	end := st.advanceBytes(&start, b, &x, &y)
	return end != nil && end.complete
}

// Matcher follows one request's output through a Grammar: Mask gives the tokens allowed next,
// Accept takes the token drawn, Rollback undoes tokens. It belongs to one goroutine at a time.
type Matcher struct {
	g       *Grammar
	st      *stepper
	history []config // the state after each accepted token; history[0] before any
	x, y    config
	depth   []config // scratch for uncertain tokens, per byte depth
}

// NewMatcher returns a matcher at the start of the output.
func (g *Grammar) NewMatcher() *Matcher {
	m := &Matcher{g: g, st: newStepper(g.a)}
	var c config
	m.st.start(&c, g.a.root, nil)
	m.history = []config{c}
	return m
}

func (m *Matcher) cur() *config { return &m.history[len(m.history)-1] }

// Accept advances over token id. It fails, changing nothing, when the constraint does not allow
// the token.
func (m *Matcher) Accept(id int32) error {
	v := m.g.vocab
	if id < 0 || int(id) >= v.size || v.tokens[id] == nil {
		return fmt.Errorf("constraint: token %d is never allowed (empty, not UTF-8, or outside the vocabulary)", id)
	}
	end := m.st.advanceBytes(m.cur(), v.tokens[id], &m.x, &m.y)
	if end == nil {
		if v.special(id) {
			return fmt.Errorf("constraint: special token %d is not allowed here", id)
		}
		return fmt.Errorf("constraint: token %d (%q) is not allowed here", id, v.tokens[id])
	}
	m.history = append(m.history, end.clone())
	return nil
}

// Complete reports whether the output so far is a whole string of the constraint, so that EOS
// may end it.
func (m *Matcher) Complete() bool { return m.cur().complete }

// Done reports whether the output is complete and nothing may follow it.
func (m *Matcher) Done() bool { c := m.cur(); return c.complete && len(c.stacks) == 0 }

// Rollback undoes the last n accepted tokens (all of them if n is larger).
func (m *Matcher) Rollback(n int) {
	keep := max(len(m.history)-n, 1)
	clear(m.history[keep:])
	m.history = m.history[:keep]
}

// NumAccepted returns the number of tokens accepted and not rolled back.
func (m *Matcher) NumAccepted() int { return len(m.history) - 1 }

// Mask sets dst (bit id%64 of word id/64 for token id; Vocabulary.MaskWords long, ids past a
// shorter dst are left out) to the tokens allowed next, special tokens excluded but where the
// constraint names them (Spec.SpecialTokens): the caller allows EOS when Complete.
func (m *Matcher) Mask(dst []uint64) {
	clear(dst)
	c := m.cur()
	for _, s := range c.stacks {
		e := m.g.entry(s.state)
		e.or(dst)
		if len(e.uncertain) > 0 {
			m.checkUncertain(dst, s, e.uncertain)
		}
	}
}

// checkUncertain adds the tokens of ids (in trie order) that stack s takes, sharing the work of
// common prefixes and skipping the tokens under a prefix that died.
func (m *Matcher) checkUncertain(dst []uint64, s stack, ids []int32) {
	v := m.g.vocab
	if m.depth == nil {
		m.depth = make([]config, v.maxTokenLen()+1)
	}
	d := m.depth
	d[0].reset()
	d[0].stacks = append(d[0].stacks, s)
	var prev []byte
	valid := 0   // d[0:valid+1] hold prev's prefixes' configs
	deadAt := -1 // prev's prefix of this length died
	for _, id := range ids {
		b := v.tokens[id]
		l := commonPrefix(prev, b)
		if deadAt >= 0 && l >= deadAt {
			continue
		}
		deadAt = -1
		k := min(l, valid)
		for ; k < len(b); k++ {
			m.st.advance(&d[k+1], &d[k], b[k])
			if d[k+1].dead() {
				deadAt = k + 1
				break
			}
		}
		valid = k
		if deadAt >= 0 {
			valid = deadAt - 1
		}
		prev = b
		if deadAt < 0 && int(id>>6) < len(dst) {
			dst[id>>6] |= 1 << (id & 63)
		}
	}
}

// Warm computes the mask entries every JSON constraint shares (free strings, numbers), so that
// the first schema compiled afterwards does not pay for them: each is a walk over the whole
// vocabulary, tens of milliseconds at a 128k vocabulary. Call it once after NewVocabulary (in the
// background if you like); it is safe for concurrent use.
func (v *Vocabulary) Warm() {
	g, err := compileLazy(Spec{Kind: JSONObject}, v, Options{})
	if err != nil {
		panic(fmt.Sprintf("constraint: the JSON object grammar does not compile: %v", err))
	}
	g.precompute()
}
