package main

import "testing"

func TestFirstFunction(t *testing.T) {
	tests := []struct {
		name, src string
		want      bool
	}{
		{"simple", "func f() int { return 1 }\nfunc g(", true},
		{"brace in string", "func f() string { return \"}\" }", true},
		{"nested blocks", "func f(x int) { if x > 0 { x-- } }\n}}}", true},
		{"never closed", "func f() { x := 1", false},
		{"syntax error", "func f() { return + }", false},
		{"method", "func (s *S) Len() int { return len(s.x) }", true},
		{"two spaces then name", "func  main() {}", true},
		{"no body", "func", false},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if _, got := firstFunction(tc.src); got != tc.want {
				t.Fatalf("firstFunction(%q) parsed = %v, want %v", tc.src, got, tc.want)
			}
		})
	}
}
