package model

import (
	"context"
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/gollm/gollm/weights"
)

// TestKVTooLarge asks for KV pools no memory holds: a count whose slices Go could not even make
// (makeslice panicked before), and one just past the host's whole memory (the runtime's fatal
// out-of-memory before). Both must give an error wrapping ErrKVTooLarge that says how many pages fit,
// from Load's path (the weights counted) and from NewCPUBackend alone.
func TestKVTooLarge(t *testing.T) {
	cfg := tinyConfig()
	r := newRandomModel(cfg, weights.DTypeF32, 1)
	perBlock := int64(KVBytesPerBlock(cfg, 16, ""))
	tests := []struct {
		name      string
		numBlocks int
	}{
		{"beyond any slice", 1_000_000_000_000},
		{"beyond int64 bytes", math.MaxInt / 2},
	}
	// One page past the host's whole memory, not past what is available when the test starts: that
	// grows when other processes (the other test packages) end, and a pool that then fit would take it.
	if total, ok := meminfo("MemTotal"); ok {
		tests = append(tests, struct {
			name      string
			numBlocks int
		}{"beyond the host's memory", int(total/perBlock) + 1})
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			newBackend, deferKV, err := backendFor(cfg, Options{Device: DeviceCPU})
			if err != nil || deferKV {
				t.Fatalf("backendFor: %v, deferKV %v", err, deferKV)
			}
			_, err = loadContext(context.Background(), cfg, r.get, Options{NumBlocks: tc.numBlocks, BlockSize: 16}, newBackend, false)
			if !errors.Is(err, ErrKVTooLarge) || !strings.Contains(err.Error(), "pages fit") {
				t.Errorf("Load's path: %v, want ErrKVTooLarge saying how many pages fit", err)
			}
			_, err = load(cfg, r.get, Options{NumBlocks: tc.numBlocks, BlockSize: 16}, NewCPUBackend)
			if !errors.Is(err, ErrKVTooLarge) {
				t.Errorf("NewCPUBackend: %v, want ErrKVTooLarge", err)
			}
		})
	}
	m, err := load(cfg, r.get, Options{NumBlocks: 64, BlockSize: 16}, NewCPUBackend)
	if err != nil {
		t.Fatalf("a pool that fits: %v", err)
	}
	m.Close()
}

func TestCheckKVFits(t *testing.T) {
	s := Shape{NumBlocks: 10, BlockSize: 16}
	if err := checkKVFits(s, 100, 1000, "host memory", ""); err != nil {
		t.Errorf("10 pages of 100 bytes in 1000 bytes: %v", err)
	}
	err := checkKVFits(s, 100, 999, "host memory", " after the weights (1 KiB)")
	want := "10 pages of 16 tokens need 1000 B, but only 999 B of host memory is available after the weights (1 KiB): at most 9 pages fit"
	if !errors.Is(err, ErrKVTooLarge) || !strings.Contains(err.Error(), want) {
		t.Errorf("one byte short: %v, want %q", err, want)
	}
	if err := checkKVFits(s, 100, -5, "device memory", ""); err == nil || !strings.Contains(err.Error(), "only 0 B") ||
		!strings.Contains(err.Error(), "at most 0 pages") {
		t.Errorf("weights larger than the memory: %v", err)
	}
	s.NumBlocks = math.MaxInt
	if err := checkKVFits(s, 1<<20, 1<<30, "host memory", ""); err == nil || !strings.Contains(err.Error(), "more than 8 EiB") {
		t.Errorf("overflowing size: %v", err)
	}
}

func TestFormatBytes(t *testing.T) {
	for _, tc := range []struct {
		n    int64
		want string
	}{
		{0, "0 B"}, {1023, "1023 B"}, {1024, "1.00 KiB"}, {1536, "1.50 KiB"}, {10 << 20, "10.0 MiB"},
		{300 << 30, "300 GiB"}, {82 << 30, "82.0 GiB"}, {math.MaxInt64, "8.00 EiB"},
	} {
		if got := formatBytes(tc.n); got != tc.want {
			t.Errorf("formatBytes(%d) = %q, want %q", tc.n, got, tc.want)
		}
	}
}

func TestHostMemoryAvailable(t *testing.T) {
	avail, ok := HostMemoryAvailable()
	if !ok {
		t.Skip("no /proc/meminfo")
	}
	if avail <= 0 {
		t.Errorf("MemAvailable %d", avail)
	}
}
