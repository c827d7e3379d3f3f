// Command quality measures the embedded default model honestly: it reads the JSON lines that
// `gollm generate --prompts-file` writes for completions of "func ", cuts each completion at the end of
// its first function (the brace that closes the first body, found with go/scanner so braces in strings
// and comments do not count) and reports how many of them go/parser accepts.
//
//	go run ./weights/defaultmodel/quality -write-prompts > /tmp/prompts.jsonl
//	go run ./cmd/gollm generate --prompts-file /tmp/prompts.jsonl > /tmp/out.jsonl
//	go run ./weights/defaultmodel/quality < /tmp/out.jsonl
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"go/parser"
	"go/scanner"
	"go/token"
	"os"
)

// The figure the README quotes: 20 completions of "func ", temperature 0.8, 200 tokens, seeds 1..20.
const (
	defaultPrompt = "func "
	samples       = 20
	temperature   = 0.8
	maxTokens     = 200
)

func main() {
	writePrompts := flag.Bool("write-prompts", false, "print the prompts file instead of scoring")
	verbose := flag.Bool("v", false, "print each first function and whether it parsed")
	prompt := flag.String("prompt", defaultPrompt, "the prompt the completions continue")
	flag.Parse()
	if *writePrompts {
		enc := json.NewEncoder(os.Stdout)
		for i := 1; i <= samples; i++ {
			enc.Encode(map[string]any{"prompt": *prompt, "temperature": temperature, "max_tokens": maxTokens, "seed": i})
		}
		return
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 1<<24)
	total, ok := 0, 0
	for in.Scan() {
		var line struct {
			Text  string `json:"text"`
			Error any    `json:"error"`
		}
		if err := json.Unmarshal(in.Bytes(), &line); err != nil {
			fmt.Fprintln(os.Stderr, "quality: bad input line:", err)
			os.Exit(1)
		}
		if line.Error != nil {
			fmt.Fprintln(os.Stderr, "quality: generation failed:", line.Error)
			os.Exit(1)
		}
		total++
		fn, parsed := firstFunction(*prompt + line.Text)
		if parsed {
			ok++
		}
		if *verbose {
			fmt.Printf("--- parsed=%v\n%s\n", parsed, fn)
		}
	}
	if total == 0 {
		fmt.Fprintln(os.Stderr, "quality: no completions on stdin")
		os.Exit(1)
	}
	fmt.Printf("%d of %d first functions parse (%.0f%%)\n", ok, total, 100*float64(ok)/float64(total))
}

// firstFunction cuts src after the brace that closes the first function body and reports whether that
// prefix parses as a Go file's declaration. A completion that never closes its body does not parse.
func firstFunction(src string) (string, bool) {
	const header = "package p\n\n"
	fset := token.NewFileSet()
	file := fset.AddFile("", fset.Base(), len(src))
	var s scanner.Scanner
	s.Init(file, []byte(src), nil, scanner.ScanComments)
	depth, opened := 0, false
	for {
		pos, tok, _ := s.Scan()
		switch tok {
		case token.EOF:
			return src, false
		case token.LBRACE:
			depth++
			opened = true
		case token.RBRACE:
			depth--
			if opened && depth == 0 {
				end := file.Offset(pos) + 1
				fn := src[:end]
				_, err := parser.ParseFile(token.NewFileSet(), "", header+fn, 0)
				return fn, err == nil
			}
		}
	}
}
