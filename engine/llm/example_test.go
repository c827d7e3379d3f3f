package llm_test

import (
	"context"
	"encoding/json"
	"fmt"
	"log"
	"net/http"
	"net/http/httptest"
	"strings"

	"github.com/gollm/gollm/engine/llm"
	"github.com/gollm/gollm/engine/openai"
)

// The examples run the built-in model on the CPU, where greedy decoding (temperature 0) gives the same
// text on every machine. The built-in model is tiny and was trained on Go source code only.

func ExampleLoad() {
	ctx := context.Background()
	// "" is the built-in model; give a HuggingFace model folder for a real one. Device "" picks the
	// GPU when there is one.
	m, err := llm.Load(ctx, "", llm.Config{Device: "cpu"})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	fmt.Println(m.Name(), m.Device(), m.MaxModelLen())
	// Output: gollm-default-go cpu 1024
}

func ExampleModel_Generate() {
	ctx := context.Background()
	m, err := llm.Load(ctx, "", llm.Config{Device: "cpu"})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	res, err := m.Generate(ctx, "// Copyright", llm.Temperature(0), llm.Stop("\n"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q (%s, %d tokens)\n", res.Text, res.FinishReason, res.Usage.CompletionTokens)
	// Output: " 2020 The Go Authors. All rights reserved." (stop, 11 tokens)
}

func ExampleModel_Stream() {
	ctx := context.Background()
	m, err := llm.Load(ctx, "", llm.Config{Device: "cpu"})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	prompt := "func (b *Buffer) Len() int {"
	fmt.Print(prompt)
	for out, err := range m.Stream(ctx, prompt, llm.Temperature(0), llm.Stop("\n}"), llm.IncludeStopString()) {
		if err != nil {
			log.Fatal(err)
		}
		fmt.Print(out.Text) // leaving the loop early would abort the request
	}
	fmt.Println()
	// Output:
	// func (b *Buffer) Len() int {
	// 	return int(b.N)
	// }
}

func ExampleModel_Chat() {
	ctx := context.Background()
	m, err := llm.Load(ctx, "", llm.Config{Device: "cpu"})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	res, err := m.Chat(ctx, []llm.Message{
		{Role: "system", Content: "You write Go."},
		{Role: "user", Content: "How do I print hello world?"},
	}, llm.Temperature(0), llm.Stop("\n"))
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%q\n", res.Text)
	// Output: "How do a thing of the legal instruction"
}

func ExampleModel_Handler() {
	ctx := context.Background()
	m, err := llm.Load(ctx, "", llm.Config{Device: "cpu"})
	if err != nil {
		log.Fatal(err)
	}
	defer m.Close()
	api, err := m.Handler(openai.Config{}) // set APIKey, limits or a Logger here
	if err != nil {
		log.Fatal(err)
	}
	mux := http.NewServeMux()
	mux.Handle("/", api) // /v1/completions, /v1/chat/completions, /v1/models, /health, /metrics, ...
	srv := httptest.NewServer(mux)
	defer srv.Close() // before m.Close (deferred first): requests finish before the engine stops

	resp, err := http.Post(srv.URL+"/v1/completions", "application/json",
		strings.NewReader(`{"prompt": "// Copyright", "max_tokens": 10, "temperature": 0}`))
	if err != nil {
		log.Fatal(err)
	}
	defer resp.Body.Close()
	var completion struct {
		Model   string `json:"model"`
		Choices []struct {
			Text string `json:"text"`
		} `json:"choices"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&completion); err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s: %q\n", completion.Model, completion.Choices[0].Text)
	// Output: gollm-default-go: " 2020 The Go Authors. All rights reserved."
}
