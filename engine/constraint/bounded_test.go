package constraint

import (
	"math/rand/v2"
	"testing"
)

// TestBoundedSharing: the states of a long bounded string that have more characters left than the
// longest token has bytes share one entry, and masks stay exact along random walks (the test
// vocabulary's tokens are short, so most states share).
func TestBoundedSharing(t *testing.T) {
	v := testVocab(t)
	g := compileT(t, Spec{Kind: JSONSchema, Text: `{"type":"array","items":{"type":"string","minLength":3,"maxLength":60},"maxItems":2}`}, v)
	keys := map[string]bool{}
	leafStates := 0
	for s, fl := range g.a.flags {
		if fl&flagScan == 0 {
			continue
		}
		if k, ok := g.a.leafSignature(int32(s)); ok {
			keys[k] = true
			leafStates++
		}
	}
	// Counts 0-2 (below minLength) and the last maxTokenLen ones are distinct; the ~48 between
	// share, each count being a few states (a character's UTF-8 bytes and escapes).
	if 3*len(keys) > leafStates {
		t.Errorf("%d distinct leaf keys for %d leaf states: states far from the end should share", len(keys), leafStates)
	}
	rng := rand.New(rand.NewPCG(7, 8))
	for range 20 {
		text, ok := randomWalk(t, g, rng, 140, 0.2)
		if ok && !g.match([]byte(text)) {
			t.Errorf("walk %q complete but does not match", text)
		}
	}
}
