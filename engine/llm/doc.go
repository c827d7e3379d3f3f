// Package llm is gollm for Go programs: it loads a model in one call and generates, streams and
// chats with it, or serves it as the OpenAI-compatible API on the caller's own HTTP server.
//
// Load opens a HuggingFace model folder, a model in the Hugging Face cache by its name ORG/NAME (see
// gollm pull), or, given an empty name, the built-in model; it loads its
// weights on the CPU or a GPU, sizes the KV cache from the memory there and starts the engine's step
// loop; Model.Close stops it. One Model serves any number of goroutines at once: their requests share
// the engine's continuous batches.
//
//	m, err := llm.Load(ctx, "", llm.Config{}) // the built-in model
//	if err != nil { ... }
//	defer m.Close()
//	res, err := m.Generate(ctx, "func main() {", llm.MaxTokens(32), llm.Temperature(0))
//	fmt.Println(res.Text)
//
// Stream and ChatStream yield the output as it is generated (range over them; leaving the loop
// early, or ending ctx, aborts the request). Chat renders the messages with the model's chat template
// first. Handler returns the OpenAI-compatible API (completions, chat completions, models, tokenize,
// health and Prometheus metrics) as an http.Handler to mount on any mux; NewServer returns the
// openai.Server behind it, whose Serve adds connection limits and a graceful shutdown.
//
// The package owns the one way gollm goes from a model name to a running engine: the command line
// uses it too. Resolve turns a name into a folder. Below it, engine (requests, sampling, the step
// loop), engine/openai (the HTTP API), model (the forward pass), weights (model folders) and
// weights/tokenizer remain usable on their own. It must not know about command-line flags, and it
// adds no generation logic of its own: every request goes through the engine.
package llm
