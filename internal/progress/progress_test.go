package progress

import (
	"bytes"
	"os"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestFormatBytes(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"},
		{999, "999 B"},
		{1000, "1.00 kB"},
		{1500, "1.50 kB"},
		{12_345, "12.3 kB"},
		{999_499, "999 kB"},
		{999_500, "1.00 MB"},
		{999_999, "1.00 MB"},
		{4_210_000_000, "4.21 GB"},
		{123_456_789_012, "123 GB"},
		{5_000_000_000_000_000, "5000 TB"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if got := FormatBytes(tc.n); got != tc.want {
				t.Errorf("FormatBytes(%d) = %q, want %q", tc.n, got, tc.want)
			}
		})
	}
}

func TestFormatDuration(t *testing.T) {
	for _, tc := range []struct {
		d    time.Duration
		want string
	}{
		{0, "0s"},
		{1499 * time.Millisecond, "1s"},
		{59 * time.Second, "59s"},
		{185 * time.Second, "3m05s"},
		{2*time.Hour + 10*time.Minute + 5*time.Second, "2h10m"},
	} {
		t.Run(tc.want, func(t *testing.T) {
			if got := formatDuration(tc.d); got != tc.want {
				t.Errorf("formatDuration(%v) = %q, want %q", tc.d, got, tc.want)
			}
		})
	}
}

// clock is a fake time source that tests advance by hand.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *clock) now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

// TestReport drives a bar by hand (its own ticker never fires within the test) and checks each line.
func TestReport(t *testing.T) {
	for _, tc := range []struct {
		name     string
		total    int64
		terminal bool
		want     []string // the output after each step, then after Done
	}{
		{"log lines", 10_000_000, false, []string{
			"pull x: 2.00 MB / 10.0 MB (20%), 1.00 MB/s, ETA 8s\n",
			"pull x: 6.00 MB / 10.0 MB (60%), 1.50 MB/s, ETA 3s\n",
			"pull x: 10.0 MB in 6s (1.67 MB/s)\n",
		}},
		{"terminal", 10_000_000, true, []string{
			"\rpull x [====                    ] 2.00 MB / 10.0 MB (20%), 1.00 MB/s, ETA 8s\x1b[K",
			"\rpull x [==============          ] 6.00 MB / 10.0 MB (60%), 1.50 MB/s, ETA 3s\x1b[K",
			"\rpull x: 10.0 MB in 6s (1.67 MB/s)\x1b[K\n",
		}},
		{"unknown total", 0, false, []string{
			"pull x: 2.00 MB, 1.00 MB/s\n",
			"pull x: 6.00 MB, 1.50 MB/s\n",
			"pull x: 10.0 MB in 6s (1.67 MB/s)\n",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var out bytes.Buffer
			c := &clock{t: time.Unix(1000, 0)}
			b := newBar(&out, tc.total, "pull x", tc.terminal, time.Hour, c.now)
			var got []string
			step := func() {
				got = append(got, out.String())
				out.Reset()
			}
			c.advance(2 * time.Second)
			b.Add(2_000_000)
			b.report()
			step()
			c.advance(2 * time.Second)
			b.Write(make([]byte, 4_000_000))
			b.report()
			step()
			c.advance(2 * time.Second)
			b.Add(4_000_000)
			b.Done()
			b.Done() // a second Done writes nothing
			step()
			for i := range tc.want {
				if got[i] != tc.want[i] {
					t.Errorf("step %d: got %q, want %q", i, got[i], tc.want[i])
				}
			}
		})
	}
}

// TestRateWindow checks that the rate follows the last few seconds, not the whole run: after a fast
// start and a stall, the time left grows instead of trusting the early average.
func TestRateWindow(t *testing.T) {
	var out bytes.Buffer
	c := &clock{t: time.Unix(0, 0)}
	b := newBar(&out, 100_000_000, "x", false, time.Hour, c.now)
	defer b.Done()
	c.advance(time.Second)
	b.Add(50_000_000)
	b.report()
	for range 10 { // ten seconds without a byte
		c.advance(time.Second)
		b.report()
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if last := lines[len(lines)-1]; !strings.Contains(last, "0 B/s, ETA unknown") {
		t.Errorf("after a stall the report is %q, want a zero rate and an unknown ETA", last)
	}
}

// TestLoop checks that the bar reports on its own when time passes, and that Done stops it.
func TestLoop(t *testing.T) {
	var mu sync.Mutex
	var out bytes.Buffer
	w := writerFunc(func(p []byte) (int, error) { mu.Lock(); defer mu.Unlock(); return out.Write(p) })
	b := newBar(w, 10, "x", false, time.Millisecond, time.Now)
	b.Add(5)
	deadline := time.Now().Add(10 * time.Second)
	for {
		mu.Lock()
		n := out.Len()
		mu.Unlock()
		if n > 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(time.Millisecond)
	}
	b.Done()
	mu.Lock()
	defer mu.Unlock()
	s := out.String()
	if !strings.Contains(s, "x: 5 B / 10 B (50%)") || !strings.HasSuffix(s, "\n") || !strings.Contains(s, "x: 5 B in ") {
		t.Errorf("output %q lacks a periodic line and the final line", s)
	}
}

type writerFunc func([]byte) (int, error)

func (f writerFunc) Write(p []byte) (int, error) { return f(p) }

// TestNilWriter checks that a bar with no writer counts silently.
func TestNilWriter(t *testing.T) {
	b := New(nil, 10, "x")
	b.Add(3)
	b.Done()
}

// TestNotTerminal checks the choice of mode: a file that is not a terminal gets log lines.
func TestNotTerminal(t *testing.T) {
	f, err := os.CreateTemp(t.TempDir(), "log")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if isTerminal(f) || isTerminal(&bytes.Buffer{}) {
		t.Error("a regular file or a buffer was taken for a terminal")
	}
	b := New(f, 1, "x")
	if b.terminal || b.interval != logInterval {
		t.Errorf("bar on a file: terminal %v interval %v, want log lines every %v", b.terminal, b.interval, logInterval)
	}
	b.Done()
}
