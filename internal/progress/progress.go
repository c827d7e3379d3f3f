// Package progress reports how far a long, byte-counted task has come (a download, a weight load):
// on a terminal as one line redrawn in place (a bar, bytes done of the total, percent, rate, time
// left), and otherwise as a plain log line every few seconds, so that logs and pipes get a readable
// record instead of carriage returns. It owns counting, pacing and formatting only; it must not do the
// work it reports on.
//
//	bar := progress.New(os.Stderr, total, "pull meta-llama/Llama-3.2-1B")
//	defer bar.Done()
//	io.Copy(dst, io.TeeReader(src, bar)) // or bar.Add(n) from any goroutine
package progress

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/term"
)

// How often the report is refreshed: a terminal line several times a second, a log line rarely
// enough that a long download leaves tens of lines, not thousands.
const (
	terminalInterval = 200 * time.Millisecond
	logInterval      = 10 * time.Second
	// rateWindow is the span over which the rate (and so the time left) is measured: long enough to
	// smooth bursts, short enough to follow a connection that slows down.
	rateWindow = 5 * time.Second
)

// Bar reports the progress of one task. Add may be called from any goroutine; Done ends the report.
type Bar struct {
	w        io.Writer
	label    string
	total    int64
	terminal bool
	interval time.Duration
	now      func() time.Time

	done atomic.Int64

	mu      sync.Mutex // guards what follows and writes to w
	start   time.Time
	samples []sample // recent (time, bytes) pairs, oldest first, for the rate

	stop     chan struct{}
	finished chan struct{}
	once     sync.Once
}

type sample struct {
	at    time.Time
	bytes int64
}

// New starts reporting a task of total bytes (0 or less when unknown: no percent or time left is
// shown) to w under label. The report is a redrawn line when w is a terminal and a log line every
// ten seconds otherwise. A nil w reports nothing. The caller must call Done.
func New(w io.Writer, total int64, label string) *Bar {
	return newBar(w, total, label, isTerminal(w), 0, time.Now)
}

func newBar(w io.Writer, total int64, label string, terminal bool, interval time.Duration, now func() time.Time) *Bar {
	if interval <= 0 {
		interval = logInterval
		if terminal {
			interval = terminalInterval
		}
	}
	b := &Bar{w: w, label: label, total: total, terminal: terminal, interval: interval, now: now,
		stop: make(chan struct{}), finished: make(chan struct{})}
	b.start = now()
	b.samples = []sample{{b.start, 0}}
	if w == nil {
		close(b.finished)
		return b
	}
	go b.loop()
	return b
}

// isTerminal reports whether w is a file attached to a terminal.
func isTerminal(w io.Writer) bool {
	f, ok := w.(interface{ Fd() uintptr })
	return ok && term.IsTerminal(int(f.Fd()))
}

// Add counts n more bytes done.
func (b *Bar) Add(n int64) { b.done.Add(n) }

// Write counts len(p) bytes, so that a Bar can sit in an io.TeeReader or io.MultiWriter.
func (b *Bar) Write(p []byte) (int, error) {
	b.Add(int64(len(p)))
	return len(p), nil
}

// Done stops the report and writes its last line: the bytes done, the time taken and the average
// rate. Later calls do nothing.
func (b *Bar) Done() {
	b.once.Do(func() {
		close(b.stop)
		<-b.finished
		if b.w == nil {
			return
		}
		b.mu.Lock()
		defer b.mu.Unlock()
		elapsed := b.now().Sub(b.start)
		n := b.done.Load()
		line := fmt.Sprintf("%s: %s in %s (%s)", b.label, FormatBytes(n), formatDuration(elapsed), formatRate(rate(n, elapsed)))
		if b.terminal {
			fmt.Fprintf(b.w, "\r%s\x1b[K\n", line)
		} else {
			fmt.Fprintln(b.w, line)
		}
	})
}

func (b *Bar) loop() {
	defer close(b.finished)
	tick := time.NewTicker(b.interval)
	defer tick.Stop()
	for {
		select {
		case <-b.stop:
			return
		case <-tick.C:
			b.report()
		}
	}
}

// report writes the current state: the terminal line redrawn, or one log line.
func (b *Bar) report() {
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	n := b.done.Load()
	b.samples = append(b.samples, sample{now, n})
	for len(b.samples) > 2 && now.Sub(b.samples[1].at) >= rateWindow {
		b.samples = b.samples[1:]
	}
	first := b.samples[0]
	r := rate(n-first.bytes, now.Sub(first.at))
	if b.terminal {
		line := b.label + " " + b.line(n, r, true)
		fmt.Fprintf(b.w, "\r%s\x1b[K", line)
		return
	}
	fmt.Fprintf(b.w, "%s: %s\n", b.label, b.line(n, r, false))
}

// line formats the progress of n bytes at rate r (bytes per second): with a bar on a terminal.
func (b *Bar) line(n int64, r float64, bar bool) string {
	var s strings.Builder
	if b.total > 0 {
		frac := min(float64(n)/float64(b.total), 1)
		if bar {
			const width = 24
			full := int(frac * width)
			s.WriteString("[" + strings.Repeat("=", full) + strings.Repeat(" ", width-full) + "] ")
		}
		fmt.Fprintf(&s, "%s / %s (%d%%), %s", FormatBytes(n), FormatBytes(b.total), int(frac*100), formatRate(r))
		if left := b.total - n; left > 0 {
			s.WriteString(", ETA ")
			if r > 0 {
				s.WriteString(formatDuration(time.Duration(float64(left) / r * float64(time.Second))))
			} else {
				s.WriteString("unknown")
			}
		}
		return s.String()
	}
	fmt.Fprintf(&s, "%s, %s", FormatBytes(n), formatRate(r))
	return s.String()
}

// rate is n bytes over d in bytes per second (0 over no time).
func rate(n int64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return float64(n) / d.Seconds()
}

// FormatBytes writes n bytes in decimal units as download tools do: 999 B, 1.5 kB, 12.3 MB, 4.21 GB.
func FormatBytes(n int64) string {
	if n < 1000 && n > -1000 {
		return fmt.Sprintf("%d B", n)
	}
	v := float64(n)
	for _, unit := range []string{"kB", "MB", "GB", "TB"} {
		v /= 1000
		if v < 999.5 && v > -999.5 || unit == "TB" {
			switch {
			case v < 9.995 && v > -9.995:
				return fmt.Sprintf("%.2f %s", v, unit)
			case v < 99.95 && v > -99.95:
				return fmt.Sprintf("%.1f %s", v, unit)
			default:
				return fmt.Sprintf("%.0f %s", v, unit)
			}
		}
	}
	panic("unreachable")
}

func formatRate(r float64) string { return FormatBytes(int64(r)) + "/s" }

// formatDuration writes d coarsely: 45s, 3m05s, 2h10m.
func formatDuration(d time.Duration) string {
	s := int64(d.Round(time.Second) / time.Second)
	switch {
	case s < 60:
		return fmt.Sprintf("%ds", s)
	case s < 3600:
		return fmt.Sprintf("%dm%02ds", s/60, s%60)
	default:
		return fmt.Sprintf("%dh%02dm", s/3600, s/60%60)
	}
}
