package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/spf13/pflag"

	"github.com/gollm/gollm/engine/llm"
	"github.com/gollm/gollm/weights/defaultmodel"
	"github.com/gollm/gollm/weights/tokenizer"
)

func init() {
	register("tokenize", "encode text to token ids, or decode ids to text, with a model's tokenizer", runTokenize)
}

// tokenizeOptions are the parsed flags of gollm tokenize.
type tokenizeOptions struct {
	modelDir    string
	file        string
	jsonOut     bool
	addSpecial  bool
	decode      string
	skipSpecial bool
}

func runTokenize(_ context.Context, args []string, stdout, stderr io.Writer) int {
	fs := pflag.NewFlagSet("tokenize", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	var o tokenizeOptions
	fs.StringVar(&o.modelDir, "model", "", "model folder holding tokenizer.json, or a Hugging Face name ORG/NAME[@REVISION] in its cache; default: the built-in "+defaultmodel.Name()+" model")
	fs.StringVar(&o.file, "tokenizer", "", "path of a tokenizer.json (instead of --model)")
	fs.BoolVar(&o.jsonOut, "json", false, `print JSON: {"ids":[...]} when encoding, {"text":"..."} when decoding`)
	fs.BoolVar(&o.addSpecial, "add-special", false, "add the post-processor's special tokens (BOS), like add_special_tokens=True")
	fs.StringVar(&o.decode, "decode", "", "decode comma-separated token ids, e.g. 1,2,3, instead of encoding TEXT")
	fs.BoolVar(&o.skipSpecial, "skip-special", false, "with --decode: leave special tokens out of the text")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: gollm tokenize [--model DIR | --tokenizer FILE] [--json] [--add-special] TEXT")
		fmt.Fprintln(stderr, "       gollm tokenize [--model DIR | --tokenizer FILE] [--json] [--skip-special] --decode 1,2,3")
		fmt.Fprintln(stderr)
		fmt.Fprintln(stderr, "Special tokens written in TEXT are always recognised, as in HuggingFace tokenizers.")
		fmt.Fprintln(stderr)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "gollm tokenize: %v (see gollm tokenize --help)\n", err)
		return 2
	}
	decoding := fs.Changed("decode")
	usageError := func(format string, a ...any) int {
		fmt.Fprintf(stderr, "gollm tokenize: "+format+"\n", a...)
		return 2
	}
	switch {
	case o.modelDir != "" && o.file != "":
		return usageError("give --model or --tokenizer, not both")
	case decoding && fs.NArg() > 0:
		return usageError("--decode takes no TEXT argument")
	case !decoding && fs.NArg() != 1:
		return usageError("want exactly one TEXT argument (quote it), got %d", fs.NArg())
	case decoding && o.addSpecial:
		return usageError("--add-special applies to encoding, not --decode")
	case !decoding && o.skipSpecial:
		return usageError("--skip-special applies to --decode")
	}
	var ids []int32
	if decoding {
		var err error
		if ids, err = parseTokenIDs(o.decode); err != nil {
			return usageError("--decode: %v", err)
		}
	}

	var tok *tokenizer.Tokenizer
	var err error
	if o.file != "" {
		tok, err = tokenizer.Load(o.file)
	} else {
		tok, err = llm.LoadTokenizer(o.modelDir)
	}
	if err != nil {
		fmt.Fprintf(stderr, "gollm tokenize: %v\n", err)
		return 1
	}

	if decoding {
		text := tok.Decode(ids, o.skipSpecial)
		if o.jsonOut {
			return writeTokenizeJSON(stdout, stderr, struct {
				Text string `json:"text"`
			}{text})
		}
		fmt.Fprintln(stdout, text)
		return 0
	}
	ids = tok.Encode(fs.Arg(0), o.addSpecial)
	if o.jsonOut {
		if ids == nil {
			ids = []int32{}
		}
		return writeTokenizeJSON(stdout, stderr, struct {
			IDs []int32 `json:"ids"`
		}{ids})
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.Itoa(int(id))
	}
	fmt.Fprintln(stdout, strings.Join(parts, " "))
	return 0
}

// parseTokenIDs reads "1,2,3" (spaces allowed; empty for no ids).
func parseTokenIDs(s string) ([]int32, error) {
	ids := []int32{}
	if strings.TrimSpace(s) == "" {
		return ids, nil
	}
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		id, err := strconv.ParseInt(f, 10, 32)
		if err != nil || id < 0 {
			return nil, fmt.Errorf("%q is not a token id", f)
		}
		ids = append(ids, int32(id))
	}
	return ids, nil
}

// writeTokenizeJSON prints v as one line of JSON.
func writeTokenizeJSON(stdout, stderr io.Writer, v any) int {
	enc := json.NewEncoder(stdout)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		fmt.Fprintf(stderr, "gollm tokenize: %v\n", err)
		return 1
	}
	return 0
}
