package main

import (
	"bytes"
	"strings"
	"testing"
)

func TestDispatch(t *testing.T) {
	tests := []struct {
		name     string
		args     []string
		wantCode int
		wantErr  string
	}{
		{"no args prints usage", nil, 2, "usage: gollm"},
		{"help", []string{"--help"}, 0, "commands:"},
		{"unknown command", []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
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

// Every registered command must answer --help without panicking.
func TestEveryCommandHasHelp(t *testing.T) {
	for name := range commands {
		t.Run(name, func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run([]string{name, "--help"}, &out, &errb)
			if code != 0 && code != 2 {
				t.Fatalf("exit code %d", code)
			}
		})
	}
}
