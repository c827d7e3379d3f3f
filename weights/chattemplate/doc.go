// Package chattemplate renders a model's chat template (the Jinja template of tokenizer_config.json)
// into the prompt text the model was trained on.
//
// It holds its own interpreter for the subset of Jinja2 that chat templates use: text with
// whitespace control (trim_blocks and lstrip_blocks on, as in transformers), {{ expressions }},
// if/elif/else, for (with loop.*, else, filters, break and continue), set (names, namespace
// attributes, blocks), macro (with varargs and kwargs) and call blocks, filter blocks and raw, the
// usual operators with Jinja2's precedence, slicing, dicts with any hashable keys, Python string,
// list and dict methods (startswith, split, strip, items, get, ...) with Python's full Unicode case
// mapping, and printf-style % formatting of strings, the filters and tests templates use (trim,
// tojson, length, map, selectattr, groupby, wordwrap, defined, string, format, truncate, ...), and
// the globals transformers adds (raise_exception, strftime_now, namespace, range). Rendering
// matches transformers' own renderer, Python's Jinja2: testdata/pycases.py renders templates with
// it for the tests to compare, and the tests compare real templates byte for byte against
// @huggingface/jinja, the npm package that reproduces it, tool use included: Input.Tools and a
// message's ToolCalls, ToolCallID and Name reach the template as transformers passes them (tools as
// a list of dicts, an assistant's tool_calls, a tool message's tool_call_id), JSON objects with
// their keys in order.
//
// The package must not tokenize: it returns text; the caller encodes it (the template writes
// bos_token itself, so callers encode without adding special tokens again).
//
// Example:
//
//	t, err := chattemplate.Parse(folder.TokenizerConfig.ChatTemplate)
//	if err != nil { ... }
//	prompt, err := t.Render(chattemplate.Input{
//		Messages:            []chattemplate.Message{{Role: "user", Content: "Hello!"}},
//		AddGenerationPrompt: true,
//		BOSToken:            "<|begin_of_text|>",
//	})
package chattemplate
