package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/spf13/pflag"

	"github.com/gollm/gollm/internal/progress"
	"github.com/gollm/gollm/weights"
	"github.com/gollm/gollm/weights/hub"
	"github.com/gollm/gollm/weights/tokenizer"
)

func init() {
	register("list", "list the models in the Hugging Face cache and whether gollm can load them", runList)
}

// listEntry is one cached snapshot as gollm list --json prints it.
type listEntry struct {
	Model    string   `json:"model"`
	Refs     []string `json:"refs"`
	Commit   string   `json:"commit"`
	Dir      string   `json:"dir"`
	Size     int64    `json:"size"`
	Loadable bool     `json:"loadable"`
	Problem  string   `json:"problem,omitempty"`
}

func runList(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("list", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	jsonOut := fs.Bool("json", false, "print a JSON array: model, refs, commit, dir, size, loadable, problem")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gollm list [--json]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Lists each cached model revision: its name, the branches or tags that point at it, its commit,")
		fmt.Fprintln(stderr, "its size, and whether gollm can load it (and why not). The cache is $HF_HUB_CACHE, else")
		fmt.Fprintln(stderr, "$HF_HOME/hub, else ~/.cache/huggingface/hub; it is shared with transformers and vLLM.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "gollm list: %v (see gollm list --help)\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "gollm list: unexpected argument %q\n", fs.Arg(0))
		return 2
	}
	snaps, err := hub.List()
	if err != nil {
		fmt.Fprintf(stderr, "gollm list: %v\n", err)
		return 1
	}
	entries := make([]listEntry, 0, len(snaps))
	for _, s := range snaps {
		e := listEntry{Model: s.Repo, Refs: s.Refs, Commit: s.Commit, Dir: s.Dir, Size: s.Size, Loadable: true}
		if e.Refs == nil {
			e.Refs = []string{}
		}
		if err := checkLoadable(s); err != nil {
			e.Loadable, e.Problem = false, err.Error()
		}
		entries = append(entries, e)
	}
	if *jsonOut {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(entries); err != nil {
			fmt.Fprintf(stderr, "gollm list: %v\n", err)
			return 1
		}
		return 0
	}
	if len(entries) == 0 {
		fmt.Fprintf(stderr, "gollm list: no models in %s (gollm pull ORG/NAME fetches one)\n", hub.CacheDir())
		return 0
	}
	tw := tabwriter.NewWriter(stdout, 0, 8, 2, ' ', 0)
	fmt.Fprintln(tw, "MODEL\tREVISION\tCOMMIT\tSIZE\tLOADABLE")
	for _, e := range entries {
		refs := strings.Join(e.Refs, ",")
		if refs == "" {
			refs = "-"
		}
		loadable := "yes"
		if !e.Loadable {
			loadable = "no: " + strings.ReplaceAll(e.Problem, "\n", "; ")
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", e.Model, refs, e.Commit[:min(12, len(e.Commit))], progress.FormatBytes(e.Size), loadable)
	}
	tw.Flush()
	return 0
}

// checkLoadable opens the snapshot as gollm generate and serve do (weights.Open, then the
// tokenizer), so that "yes" means they would load it.
func checkLoadable(s hub.Snapshot) error {
	if len(s.Missing) > 0 {
		return fmt.Errorf("files whose blobs are missing: %s", strings.Join(s.Missing, ", "))
	}
	folder, err := weights.Open(s.Dir)
	if err != nil {
		return err
	}
	defer folder.Close()
	if _, err := tokenizer.Load(folder.TokenizerPath()); err != nil {
		return err
	}
	return nil
}
