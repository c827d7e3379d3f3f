package constraint

import (
	"errors"
	"sync"
	"testing"
)

func TestCache(t *testing.T) {
	v := testVocab(t)
	c := NewCache(2)
	a := Spec{Kind: Regex, Text: "a+"}
	var wg sync.WaitGroup
	got := make([]*Grammar, 8)
	for i := range got {
		wg.Go(func() {
			g, err := c.Compile(a, v, Options{})
			if err != nil {
				t.Error(err)
			}
			got[i] = g
		})
	}
	wg.Wait()
	for _, g := range got {
		if g != got[0] {
			t.Fatal("concurrent compiles of one spec gave different grammars")
		}
	}
	if g, _ := c.Compile(a, v, Options{MaxWhitespace: 2}); g == got[0] {
		t.Error("options are not part of the key")
	}
	if _, err := c.Compile(Spec{Kind: Regex, Text: "("}, v, Options{}); !errors.Is(err, ErrSyntax) {
		t.Errorf("bad regex: %v", err)
	}
	if c.Len() != 2 {
		t.Errorf("%d cached, want the capacity 2", c.Len())
	}
	if g, _ := c.Compile(a, v, Options{}); g == got[0] {
		t.Error("least recently used entry not evicted")
	}
	x, _ := c.Compile(Spec{Kind: Choice, Choices: []string{"a", "b"}}, v, Options{})
	y, _ := c.Compile(Spec{Kind: Choice, Choices: []string{"a" + "2:b"}}, v, Options{})
	if x == y {
		t.Error("choice keys collide")
	}
}
