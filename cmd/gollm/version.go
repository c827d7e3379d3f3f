package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/pflag"
)

func init() {
	register("version", "print gollm's version, commit, Go version and whether CUDA is built in", runVersion)
}

// versionInfo is what gollm version prints.
type versionInfo struct {
	// Version is the module's version: a tag such as v0.3.0, or the commit's pseudo-version
	// (v0.0.0-TIME-COMMIT, "+dirty" with local changes) for a build in a git clone, or "(devel)".
	Version string `json:"version"`
	// Commit, CommitTime and Modified come from the git checkout the binary was built in (go build
	// stamps them); Commit is empty when it was built outside one.
	Commit     string `json:"commit"`
	CommitTime string `json:"commit_time,omitempty"`
	Modified   bool   `json:"modified"`
	Go         string `json:"go"`
	Platform   string `json:"platform"`
	// CUDA says whether the binary was built with -tags cuda (the GPU backend).
	CUDA bool `json:"cuda"`
}

// buildVersion reads the binary's build information.
func buildVersion() versionInfo {
	v := versionInfo{Version: "(unknown)", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH, CUDA: cudaBuilt}
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return v
	}
	if info.Main.Version != "" {
		v.Version = info.Main.Version
	}
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.CommitTime = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

func runVersion(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("version", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	jsonOut := fs.Bool("json", false, "print one JSON object")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gollm version [--json]")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "gollm version: %v\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gollm version: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	v := buildVersion()
	if *jsonOut {
		if err := json.NewEncoder(stdout).Encode(v); err != nil {
			fmt.Fprintf(stderr, "gollm version: %v\n", err)
			return 1
		}
		return 0
	}
	commit := "unknown (not built in a git checkout)"
	if v.Commit != "" {
		commit = v.Commit
		if v.CommitTime != "" {
			commit += " (" + v.CommitTime + ")"
		}
		if v.Modified {
			commit += " with local changes"
		}
	}
	cuda := "not built in (build with -tags cuda for NVIDIA GPUs)"
	if v.CUDA {
		cuda = "built in (-tags cuda)"
	}
	fmt.Fprintf(stdout, "gollm %s\ncommit: %s\ngo:     %s %s\ncuda:   %s\n", v.Version, commit, v.Go, v.Platform, cuda)
	return 0
}
