package main

import (
	"fmt"
	"io"
	"os"
	"strings"

	"golang.org/x/term"
)

// loadProgress returns what every command that loads weights shows of their progress on w (its
// stderr), in bytes: a bar rewritten in place when w is a terminal; nothing otherwise (nil), so that
// logs and redirected output never fill with carriage returns. It is the commands' one reporter of
// loading progress.
func loadProgress(w io.Writer) func(loaded, total int64) {
	f, ok := w.(*os.File)
	if !ok || !term.IsTerminal(int(f.Fd())) {
		return nil
	}
	return func(loaded, total int64) {
		const width = 30
		filled := 0
		if total > 0 {
			filled = int(int64(width) * loaded / total)
		}
		fmt.Fprintf(w, "\rloading weights [%s%s] %.1f/%.1f MiB", strings.Repeat("=", filled), strings.Repeat(" ", width-filled),
			float64(loaded)/(1<<20), float64(total)/(1<<20))
		if loaded >= total {
			fmt.Fprintln(w)
		}
	}
}
