package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"

	"github.com/spf13/pflag"

	"github.com/gollm/gollm/weights/hub"
)

func init() {
	register("pull", "download a model from the Hugging Face hub into its cache (ORG/NAME[@REVISION])", runPull)
}

func runPull(ctx context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("pull", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	token := fs.String("token", "", "access token for gated and private models (default: $HF_TOKEN, else the token file $HF_HOME/token that 'hf auth login' writes)")
	workers := fs.Int("workers", 8, "files downloaded at once")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gollm pull [--token TOKEN] ORG/NAME[@REVISION]")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Downloads what gollm needs of a model (config, tokenizer and generation files, safetensors")
		fmt.Fprintln(stderr, "weights) into the Hugging Face cache, where transformers and vLLM find it too, and prints the")
		fmt.Fprintln(stderr, "snapshot folder. REVISION is a branch, tag or commit (default main). An interrupted pull")
		fmt.Fprintln(stderr, "resumes where it stopped. The cache is $HF_HUB_CACHE, else $HF_HOME/hub, else")
		fmt.Fprintln(stderr, "~/.cache/huggingface/hub; $HF_ENDPOINT names a mirror; $HF_HUB_OFFLINE=1 forbids downloads.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "gollm pull: %v (see gollm pull --help)\n", err)
		return 2
	}
	if fs.NArg() != 1 {
		fmt.Fprintf(stderr, "gollm pull: want one model name ORG/NAME[@REVISION], got %d arguments\n", fs.NArg())
		return 2
	}
	if *workers < 1 {
		fmt.Fprintf(stderr, "gollm pull: --workers %d: want at least 1\n", *workers)
		return 2
	}
	if _, err := hub.ParseName(fs.Arg(0)); err != nil {
		fmt.Fprintf(stderr, "gollm pull: %v\n", err)
		return 2
	}
	dir, err := hub.Pull(ctx, fs.Arg(0), hub.PullOptions{
		Token:    *token,
		Workers:  *workers,
		Progress: stderr,
		Log:      slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
	})
	if err != nil {
		fmt.Fprintf(stderr, "gollm pull: %v\n", err)
		if ctx.Err() != nil {
			fmt.Fprintln(stderr, "gollm pull: interrupted; run it again to resume")
			return 130
		}
		return 1
	}
	fmt.Fprintln(stdout, dir)
	return 0
}
