// Package openai owns gollm's OpenAI-compatible HTTP API: it translates OpenAI requests
// (/v1/completions, /v1/chat/completions, /v1/models) and vLLM-style extras (/tokenize,
// /detokenize, /health, /metrics) into engine requests and engine outputs back into OpenAI's JSON
// and Server-Sent Events, byte-compatible with what the official SDKs parse.
//
// Completions follow vLLM's OpenAI server where OpenAI leaves room: echo with logprobs returns the
// prompt's logprobs (the engine's prompt logprobs; the first token's are null) before the generated
// tokens', a streamed echo carries the prompt in each choice's first chunk with its first generated
// text, and echo with max_tokens 0 returns the prompt alone. best_of generates that many choices of
// each prompt (sharing its pages, as n's do) and returns the n with the highest mean logprob per token,
// OpenAI's rule, with every choice's tokens in the usage; not in a stream, nor in chat, which OpenAI's
// API lacks it for. Both endpoints take vLLM's prompt_logprobs extension (not in a stream), and return
// vLLM's "prompt_logprobs" lists.
//
// Structured output (structured.go): OpenAI's response_format (json_object, json_schema), vLLM's
// structured_outputs and guided_* fields and llama.cpp's grammar and json_schema constrain the output
// through package engine/constraint, compiled against the model's vocabulary (Config.Vocabulary) and
// cached; one per request, a matcher per choice. Tool calling (tools.go): tools, tool_choice and
// parallel_tool_calls, assistant tool_calls and tool messages in the history, all rendered by the chat
// template; the output parsed by the tool-call parser of the model's form (toolparse.go: Hermes,
// Llama 3 JSON, Mistral) into message.tool_calls or streamed delta.tool_calls; tool_choice "required"
// and a named function constrain the output to valid calls.
//
// Special tokens written in a prompt or a chat message's content are control tokens by default, as in
// HuggingFace's tokenizers and vLLM (a client can end its turn with the model's end-of-turn token).
// The request field split_special_tokens (HuggingFace's name for the tokenizer option), or the
// server's Config.SplitSpecialTokens, encodes that text as plain text instead, leaving the chat
// template's own special tokens alone (special.go).
//
// It owns HTTP concerns only: routing, authentication, limits, admission (429 when the queue is
// full), streaming, client disconnects (which cancel the engine request), graceful shutdown and
// metrics. It must not schedule, sample or touch the KV cache: those belong to the engine, reached
// through the small Engine interface declared here (FromEngine adapts *engine.Engine).
//
// A Server's Handler mounts on any mux; Serve runs it on a listener with connection limits and a
// graceful shutdown; ServeLoading binds the listener before the model is loaded and answers 503 until
// it is. Package llm builds a Server from a loaded model (llm.Model.Handler, llm.Model.NewServer):
//
//	srv, err := openai.New(openai.FromEngine(eng), tok, openai.Config{ModelName: "m", ChatTemplate: tpl})
//	if err != nil { ... }
//	err = srv.Serve(ctx, listener, 30*time.Second) // returns after ctx ends and in-flight requests drain
package openai
