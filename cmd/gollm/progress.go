package main

import (
	"io"

	"github.com/gollm/gollm/internal/progress"
)

// loadProgress returns what every command that loads weights shows of their progress on w (its
// stderr), in bytes, with the rate and the time left: a bar redrawn in place when w is a terminal, a
// log line every few seconds otherwise (internal/progress decides). It is the commands' one reporter of
// loading progress; the bar starts with the first report, when the total is known.
func loadProgress(w io.Writer) func(loaded, total int64) {
	var bar *progress.Bar
	var shown int64
	return func(loaded, total int64) {
		if bar == nil {
			bar = progress.New(w, total, "loading weights")
		}
		bar.Add(loaded - shown)
		shown = loaded
		if loaded >= total {
			bar.Done()
		}
	}
}
