// Package constraint owns constrained decoding: it compiles what a request asks its output to be
// (a JSON Schema, any JSON object, a regular expression, one of a list of strings, or a GBNF
// grammar) against a model's vocabulary, and then, token by token, says which tokens may come next
// as a bitmask over the vocabulary. It is pure Go: it must not know about HTTP, devices or the
// engine's loop (the engine applies the mask; a server translates wire formats into a Spec).
//
// Every front end compiles to one IR (ir.go), a context-free grammar over bytes, so tokens that
// span several grammar symbols and characters split across tokens need nothing special. The IR is
// lowered (lower.go) to one DFA per rule with call edges: a pushdown automaton, run by a matcher
// whose state is a set of persistent stacks (stack.go), which rolls back by dropping states.
// Masks come from an adaptive cache (mask.go): per automaton state, the tokens accepted or
// rejected whatever lies below on the stack are computed once by walking the vocabulary's trie
// (vocab.go); only the few tokens that leave the state's rule are checked against the real stack.
//
//	vocab, err := constraint.NewVocabulary(tok, cfg.VocabSize) // once per model
//	cache := constraint.NewCache(64)
//	g, err := cache.Compile(constraint.Spec{Kind: constraint.JSONSchema, Text: schema}, vocab, constraint.Options{})
//	if err != nil { ... } // errors.Is ErrUnsupported / ErrSyntax / ErrTooLarge / ErrEmpty: a 400
//	m := g.NewMatcher() // one per request; it satisfies engine.Constraint
//	m.Mask(mask)        // the tokens allowed next (EOS is the caller's: allowed when m.Complete())
//	err = m.Accept(id)  // after drawing
//
// The languages and their limits are documented beside their front ends: schema.go (JSON Schema
// keywords), regex.go (the ECMAScript subset), gbnf.go (llama.cpp's GBNF). Specs compose: a
// prefix, suffix and repetition around one (Spec.Prefix...), one of several (AnyOf), and special
// tokens written mid-output, where their text appears in those literals (Spec.SpecialTokens; vocab.go
// says how a special token, which adds no bytes, is a terminal of a grammar over bytes). JSON output allows at
// most Options.MaxWhitespace whitespace characters between tokens (DefaultMaxWhitespace), so that
// only an unbounded string, number or array can run a request to its max_tokens.
package constraint
