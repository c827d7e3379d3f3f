package bench

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// Progress draws a one-line progress bar ("latency b=8 [=========      ] 120/256 tokens 3.1s") on w,
// rewritten in place with \r at most ten times a second. A nil *Progress, or one with a nil writer,
// draws nothing; its methods are safe for concurrent use.
type Progress struct {
	w     io.Writer
	label string
	unit  string

	mu    sync.Mutex
	done  int
	total int
	start time.Time
	last  time.Time
}

// NewProgress returns a bar over total units on w (nil for none).
func NewProgress(w io.Writer, label string, total int, unit string) *Progress {
	if w == nil {
		return nil
	}
	now := time.Now()
	return &Progress{w: w, label: label, unit: unit, total: total, start: now}
}

// Add records n more units done.
func (p *Progress) Add(n int) {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.done += n
	if now := time.Now(); now.Sub(p.last) >= 100*time.Millisecond || p.done >= p.total {
		p.last = now
		p.draw(now)
	}
}

func (p *Progress) draw(now time.Time) {
	const width = 30
	filled := 0
	if p.total > 0 {
		filled = min(width*p.done/p.total, width)
	}
	fmt.Fprintf(p.w, "\r%s [%s%s] %d/%d %s %.1fs", p.label, strings.Repeat("=", filled),
		strings.Repeat(" ", width-filled), p.done, p.total, p.unit, now.Sub(p.start).Seconds())
}

// Done ends the bar's line.
func (p *Progress) Done() {
	if p == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.draw(time.Now())
	fmt.Fprintln(p.w)
}
