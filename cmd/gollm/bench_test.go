package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestBenchDispatch(t *testing.T) {
	tests := []struct {
		args     []string
		wantCode int
		wantErr  string
	}{
		{[]string{"bench"}, 2, "usage: gollm bench"},
		{[]string{"bench", "--help"}, 0, "attention"},
		{[]string{"bench", "nonsense"}, 2, `unknown benchmark "nonsense"`},
		{[]string{"bench", "latency"}, 2, "give exactly one of --config NAME and --model DIR"},
		{[]string{"bench", "throughput"}, 2, "give exactly one of --config NAME and --model DIR"},
		{[]string{"bench", "serve", "--concurrency", "0"}, 2, "concurrency 0"},
	}
	for _, tc := range tests {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			if got := run(tc.args, &out, &errb); got != tc.wantCode {
				t.Fatalf("exit code %d, want %d (stderr %q)", got, tc.wantCode, errb.String())
			}
			if !strings.Contains(errb.String(), tc.wantErr) {
				t.Fatalf("stderr %q does not contain %q", errb.String(), tc.wantErr)
			}
		})
	}
}
