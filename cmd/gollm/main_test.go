package main

import (
	"bytes"
	"regexp"
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

// Every registered command (and bench's subcommands) must answer --help without panicking, and no help
// text names a source file: users read them, not the code.
func TestEveryCommandHasHelp(t *testing.T) {
	sourceFile := regexp.MustCompile(`\b[\w/.-]+\.(go|cu|sh|py|mjs)\b`)
	helps := [][]string{{"--help"}}
	for name := range commands {
		helps = append(helps, []string{name, "--help"})
	}
	for name := range benchSubcommands {
		helps = append(helps, []string{"bench", name, "--help"})
	}
	for _, args := range helps {
		t.Run(strings.Join(args, " "), func(t *testing.T) {
			var out, errb bytes.Buffer
			code := run(args, &out, &errb)
			if code != 0 && code != 2 {
				t.Fatalf("exit code %d", code)
			}
			if f := sourceFile.FindString(out.String() + errb.String()); f != "" {
				t.Errorf("the help names the source file %s:\n%s%s", f, out.String(), errb.String())
			}
		})
	}
}
