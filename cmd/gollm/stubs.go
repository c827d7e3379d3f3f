package main

import (
	"context"
	"fmt"
	"io"
)

// notYet registers a subcommand that is not implemented yet. It exits 2 with one line, never panics.
// Delete a line here when the real command lands in its own file.
func notYet(name, summary string) {
	register(name, summary, func(_ context.Context, _ []string, _, stderr io.Writer) int {
		fmt.Fprintf(stderr, "gollm %s: not implemented yet\n", name)
		return 2
	})
}

func init() {
}
