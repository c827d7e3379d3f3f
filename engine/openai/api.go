package openai

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/gollm/gollm/engine"
	"github.com/gollm/gollm/weights/chattemplate"
)

// samplingFields are the request fields shared by completions and chat completions.
type samplingFields struct {
	Model             string          `json:"model"`
	MaxTokens         *int            `json:"max_tokens"`
	Temperature       *float64        `json:"temperature"`
	TopP              *float64        `json:"top_p"`
	TopK              *int            `json:"top_k"`
	MinP              *float64        `json:"min_p"`
	N                 *int            `json:"n"`
	Stop              json.RawMessage `json:"stop"`
	StopTokenIDs      []int32         `json:"stop_token_ids"`
	Seed              *int64          `json:"seed"`
	PresencePenalty   *float64        `json:"presence_penalty"`
	FrequencyPenalty  *float64        `json:"frequency_penalty"`
	RepetitionPenalty *float64        `json:"repetition_penalty"`
	MinTokens         int             `json:"min_tokens"`
	IgnoreEOS         bool            `json:"ignore_eos"`
	// IncludeStopStrInOutput is vLLM's: a matched stop string stays at the end of the text.
	IncludeStopStrInOutput bool `json:"include_stop_str_in_output"`
	Stream                 bool `json:"stream"`
	StreamOptions          *struct {
		IncludeUsage bool `json:"include_usage"`
	} `json:"stream_options"`
	User              string         `json:"user"`
	LogitBias         map[string]any `json:"logit_bias"`
	SkipSpecialTokens *bool          `json:"skip_special_tokens"`
	BestOf            *int           `json:"best_of"`
	// Store is OpenAI's request to keep the completion for later retrieval: the server keeps none, so
	// false (what agent frameworks send) is what it does and true is refused.
	Store *bool `json:"store"`
	// PromptLogprobs is vLLM's extension: the number of alternatives per prompt token of the
	// response's prompt_logprobs.
	PromptLogprobs *int `json:"prompt_logprobs"`
	// SplitSpecialTokens encodes special tokens' text in the prompt strings (completions) or the
	// messages' contents (chat) as plain text (special.go); nil means the server's default.
	SplitSpecialTokens *bool `json:"split_special_tokens"`
	// The fields that constrain the output (structured.go).
	constraintFields
}

// completionRequest is the body of POST /v1/completions.
type completionRequest struct {
	samplingFields
	Prompt   json.RawMessage `json:"prompt"`
	Logprobs *int            `json:"logprobs"`
	Echo     bool            `json:"echo"`
	Suffix   *string         `json:"suffix"`
}

// chatRequest is the body of POST /v1/chat/completions.
type chatRequest struct {
	samplingFields
	Messages            []chatMessage  `json:"messages"`
	MaxCompletionTokens *int           `json:"max_completion_tokens"`
	Logprobs            bool           `json:"logprobs"`
	TopLogprobs         *int           `json:"top_logprobs"`
	AddGenerationPrompt *bool          `json:"add_generation_prompt"`
	ChatTemplateKwargs  map[string]any `json:"chat_template_kwargs"`
	// Tools, ToolChoice and ParallelToolCalls are the request's tool use (tools.go).
	Tools             []chatTool      `json:"tools"`
	ToolChoice        json.RawMessage `json:"tool_choice"`
	ParallelToolCalls *bool           `json:"parallel_tool_calls"`
}

// chatMessage is one message; content is a string, a list of parts, or null. An assistant message
// may carry the tool calls it made, a tool message the id of the call it answers.
type chatMessage struct {
	Role       string          `json:"role"`
	Content    json.RawMessage `json:"content"`
	Name       string          `json:"name"`
	ToolCalls  []chatToolCall  `json:"tool_calls"`
	ToolCallID *string         `json:"tool_call_id"`
}

// decodeBody parses a JSON request body into v, turning type errors into 400s naming the field. It
// decodes from body itself (json.Unmarshal: no copy of a body of megabytes), and refuses anything after
// the value, and a body that is not UTF-8 (JSON text is UTF-8, RFC 8259 section 8.1; encoding/json would
// read each bad byte as U+FFFD, a prompt the client never sent).
func decodeBody(body []byte, v any) *apiError {
	if len(bytes.TrimSpace(body)) == 0 {
		return badRequest("", "The request body is empty; expected a JSON object.")
	}
	if !utf8.Valid(body) {
		return invalidUTF8(body)
	}
	if err := json.Unmarshal(body, v); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) && te.Field == "" {
			return badRequest("", "The request body must be a JSON object, got JSON %s.", te.Value)
		}
		if errors.As(err, &te) {
			field := typeErrorPath(body, te)
			return badRequest(field, "Invalid type for '%s': expected %s, got JSON %s.", field, jsonTypeName(te.Type), te.Value)
		}
		if strings.Contains(err.Error(), "after top-level value") {
			return badRequest("", "The request body holds more than one JSON value.")
		}
		return badRequest("", "The request body is not valid JSON: %v.", err)
	}
	if field := unknownField(body, reflect.TypeOf(v)); field != "" {
		return unsupportedParameter(field)
	}
	return nil
}

// typeErrorPath returns the path, list indexes included, of the value a type error is about: the first
// value in the body of the error's kind (the decoder reports the first error) whose path without its
// indexes is the error's field. It falls back to that field (which encoding/json gives without indexes)
// when no value matches, as when the key's case differs from the field's name.
func typeErrorPath(body []byte, te *json.UnmarshalTypeError) string {
	field := strings.TrimPrefix(strings.TrimPrefix(te.Field, "samplingFields."), "constraintFields.")
	kind, _, _ := strings.Cut(te.Value, " ") // "number 1.5"
	path := jsonPathAt(body, func(t jsonToken) bool {
		if t.key || jsonKind(t.tok) != kind {
			return false
		}
		return listIndex.ReplaceAllString(t.path(), "") == field
	})
	if path == "" {
		return field
	}
	return path
}

// listIndex matches the list indexes of a path.
var listIndex = regexp.MustCompile(`\[[0-9]+\]`)

// jsonKind names a value's token as UnmarshalTypeError.Value does.
func jsonKind(tok json.Token) string {
	switch tok := tok.(type) {
	case json.Delim:
		if tok == '[' {
			return "array"
		}
		return "object"
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "bool"
	}
	return "null"
}

// jsonTypeName names the JSON type a request field of Go type t takes.
func jsonTypeName(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Struct, reflect.Map:
		return "an object"
	case reflect.Slice, reflect.Array:
		return "a list"
	case reflect.String:
		return "a string"
	case reflect.Bool:
		return "a boolean"
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return "an integer"
	case reflect.Float32, reflect.Float64:
		return "a number"
	}
	return t.String()
}

// invalidUTF8 is the 400 for a body that is not valid UTF-8: it gives the first bad byte, its offset
// and the field that holds it.
func invalidUTF8(body []byte) *apiError {
	i := 0
	for i < len(body) {
		r, size := utf8.DecodeRune(body[i:])
		if r == utf8.RuneError && size <= 1 {
			break
		}
		i += size
	}
	field := jsonPathAt(body, func(t jsonToken) bool { return t.start <= int64(i) && int64(i) < t.end })
	where := ""
	if field != "" {
		where = fmt.Sprintf(", in '%s'", field)
	}
	return badRequest(field, "The request body is not valid UTF-8: byte 0x%02x at offset %d%s. JSON text must be encoded as UTF-8.", body[i], i, where)
}

// jsonToken is a token of a JSON text, as jsonPathAt shows it.
type jsonToken struct {
	// start and end delimit the token in the text, with the separators and white space before it.
	start, end int64
	tok        json.Token // an object's or array's token is its opening bracket
	key        bool       // tok is an object's key
	// path is the path of the token's value, or for a key the path of the object that holds it.
	path func() string
}

// jsonPathAt walks the tokens of the JSON text body and returns the path (messages[0].content, as
// unknownField names fields) of the first for which hit holds: "" for the whole body, and when no token
// is hit or body is not JSON.
func jsonPathAt(body []byte, hit func(t jsonToken) bool) string {
	type frame struct {
		array  bool
		index  int
		key    string
		inKey  bool // an object's next token is a key
		isRoot bool
	}
	var stack []frame
	pathOf := func(n int) func() string { // the path of stack[:n]
		return func() string {
			var b strings.Builder
			for _, f := range stack[1:n] {
				if f.array {
					fmt.Fprintf(&b, "[%d]", f.index)
				} else {
					if b.Len() > 0 {
						b.WriteByte('.')
					}
					b.WriteString(f.key)
				}
			}
			return b.String()
		}
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	stack = append(stack, frame{isRoot: true})
	// done marks the value of the innermost container as read: its next token is a key, or the next item.
	done := func() {
		top := &stack[len(stack)-1]
		if top.array {
			top.index++
		} else {
			top.inKey = true
		}
	}
	for {
		start := dec.InputOffset()
		tok, err := dec.Token()
		if err != nil {
			return ""
		}
		end := dec.InputOffset()
		top := &stack[len(stack)-1]
		if !top.array && !top.isRoot && top.inKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				done()
				continue
			}
			top.key, _ = tok.(string)
			top.inKey = false
			if t := (jsonToken{start: start, end: end, tok: tok, key: true, path: pathOf(len(stack) - 1)}); hit(t) {
				return t.path()
			}
			continue
		}
		if d, ok := tok.(json.Delim); ok && d == ']' {
			stack = stack[:len(stack)-1]
			done()
			continue
		}
		if t := (jsonToken{start: start, end: end, tok: tok, path: pathOf(len(stack))}); hit(t) {
			return t.path()
		}
		switch tok {
		case json.Delim('['):
			stack = append(stack, frame{array: true})
		case json.Delim('{'):
			stack = append(stack, frame{inKey: true})
		default:
			if len(stack) == 1 {
				return ""
			}
			done()
		}
	}
}

// parseStop reads "stop": a string, a list of strings, or null.
func parseStop(raw json.RawMessage, limit int) ([]string, *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil
	}
	var one string
	if err := json.Unmarshal(raw, &one); err == nil {
		if one == "" {
			return nil, nil
		}
		return []string{one}, nil
	}
	var many []string
	if err := json.Unmarshal(raw, &many); err != nil {
		return nil, badRequest("stop", "'stop' must be a string or a list of strings.")
	}
	if len(many) > limit {
		return nil, badRequest("stop", "'stop' holds %d strings; at most %d are allowed.", len(many), limit)
	}
	out := many[:0]
	for _, s := range many {
		if s != "" {
			out = append(out, s)
		}
	}
	return out, nil
}

// prompts reads "prompt": a string, a list of strings, a list of token ids, or a list of lists of
// token ids. Exactly one of texts and ids is non-nil.
func parsePrompt(raw json.RawMessage) (texts []string, ids [][]int32, err *apiError) {
	raw = bytes.TrimSpace(raw)
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, badRequest("prompt", "'prompt' is required.")
	}
	var one string
	if json.Unmarshal(raw, &one) == nil {
		return []string{one}, nil, nil
	}
	var strs []string
	if json.Unmarshal(raw, &strs) == nil && len(strs) > 0 {
		return strs, nil, nil
	}
	var flat []int32
	if json.Unmarshal(raw, &flat) == nil && len(flat) > 0 {
		return nil, [][]int32{flat}, nil
	}
	var nested [][]int32
	if json.Unmarshal(raw, &nested) == nil && len(nested) > 0 {
		for i, p := range nested {
			if len(p) == 0 {
				return nil, nil, badRequest("prompt", "'prompt' item %d is an empty list of token ids.", i)
			}
		}
		return nil, nested, nil
	}
	return nil, nil, badRequest("prompt", "'prompt' must be a string, a non-empty list of strings, a list of token ids or a list of lists of token ids.")
}

// contentPart is one part of a message's content: only text parts are supported.
type contentPart struct {
	Type string  `json:"type"`
	Text *string `json:"text"`
}

// messageText flattens a message's content: a string, or the text of its text parts joined by
// newlines (as vLLM does); null is the empty string.
func messageText(i int, m chatMessage) (string, *apiError) {
	raw := bytes.TrimSpace(m.Content)
	param := fmt.Sprintf("messages[%d].content", i)
	if len(raw) == 0 || string(raw) == "null" {
		if m.Role == "assistant" {
			return "", nil
		}
		return "", badRequest(param, "'%s' is required.", param)
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s, nil
	}
	var parts []contentPart
	if err := json.Unmarshal(raw, &parts); err != nil {
		return "", badRequest(param, "'%s' must be a string or a list of content parts.", param)
	}
	texts := make([]string, 0, len(parts))
	for j, p := range parts {
		if p.Type == "" {
			field := fmt.Sprintf("%s[%d].type", param, j)
			return "", badRequest(field, "'%s' is required.", field)
		}
		if p.Type != "text" {
			return "", badRequest(fmt.Sprintf("%s[%d]", param, j), "Only text content parts are supported (got type %q).", p.Type)
		}
		if p.Text == nil {
			field := fmt.Sprintf("%s[%d].text", param, j)
			return "", badRequest(field, "'%s' is required.", field)
		}
		texts = append(texts, *p.Text)
	}
	if field := unknownIn(raw, reflect.TypeFor[[]contentPart](), param); field != "" {
		return "", unsupportedParameter(field)
	}
	return strings.Join(texts, "\n"), nil
}

// chatMessages converts and validates the conversation: its tool calls (assistant messages) and tool
// results (tool messages, which need the tool_call_id they answer) included.
func chatMessages(msgs []chatMessage) ([]chattemplate.Message, *apiError) {
	if len(msgs) == 0 {
		return nil, badRequest("messages", "'messages' must hold at least one message.")
	}
	out := make([]chattemplate.Message, len(msgs))
	for i, m := range msgs {
		role := m.Role
		switch role {
		case "":
			field := fmt.Sprintf("messages[%d].role", i)
			return nil, badRequest(field, "'%s' is required.", field)
		case "system", "user", "assistant", "tool":
		case "developer":
			role = "system" // OpenAI's newer name for system instructions
		default:
			return nil, badRequest(fmt.Sprintf("messages[%d].role", i), "Unsupported role %q (supported: system, developer, user, assistant, tool).", m.Role)
		}
		if len(m.ToolCalls) > 0 && role != "assistant" {
			return nil, badRequest(fmt.Sprintf("messages[%d].tool_calls", i), "Only assistant messages carry 'tool_calls'.")
		}
		switch {
		case role == "tool" && (m.ToolCallID == nil || *m.ToolCallID == ""):
			return nil, badRequest(fmt.Sprintf("messages[%d].tool_call_id", i), "A tool message needs the 'tool_call_id' it answers.")
		case role != "tool" && m.ToolCallID != nil:
			return nil, badRequest(fmt.Sprintf("messages[%d].tool_call_id", i), "Only tool messages carry 'tool_call_id'.")
		}
		text, err := messageText(i, m)
		if err != nil {
			return nil, err
		}
		cm := chattemplate.Message{Role: role, Content: text, Name: m.Name}
		if m.ToolCallID != nil {
			cm.ToolCallID = *m.ToolCallID
		}
		if len(m.ToolCalls) > 0 {
			if cm.ToolCalls, err = historyToolCalls(i, m.ToolCalls); err != nil {
				return nil, err
			}
		}
		out[i] = cm
	}
	return out, nil
}

// finite reports whether a given float field is a real number.
func finite(p *float64) bool { return p == nil || !math.IsNaN(*p) && !math.IsInf(*p, 0) }

// sampling merges the request's fields over the model's defaults and checks ranges (the engine
// checks them again; checking here names the field in the 400).
func (f *samplingFields) sampling(defaults engine.SamplingParams) (engine.SamplingParams, *apiError) {
	p := defaults
	for name, v := range map[string]*float64{"temperature": f.Temperature, "top_p": f.TopP, "min_p": f.MinP,
		"presence_penalty": f.PresencePenalty, "frequency_penalty": f.FrequencyPenalty, "repetition_penalty": f.RepetitionPenalty} {
		if !finite(v) {
			return p, badRequest(name, "'%s' must be a finite number.", name)
		}
	}
	if f.Temperature != nil {
		if *f.Temperature < 0 || *f.Temperature > 2 {
			return p, badRequest("temperature", "'temperature' %v must lie in [0, 2].", *f.Temperature)
		}
		p.Temperature = *f.Temperature
	}
	if f.TopP != nil {
		if *f.TopP <= 0 || *f.TopP > 1 {
			return p, badRequest("top_p", "'top_p' %v must lie in (0, 1].", *f.TopP)
		}
		p.TopP = *f.TopP
	}
	if f.TopK != nil {
		if *f.TopK < -1 {
			return p, badRequest("top_k", "'top_k' %d must be -1, 0 (off) or positive.", *f.TopK)
		}
		p.TopK = *f.TopK
	}
	if f.MinP != nil {
		if *f.MinP < 0 || *f.MinP > 1 {
			return p, badRequest("min_p", "'min_p' %v must lie in [0, 1].", *f.MinP)
		}
		p.MinP = *f.MinP
	}
	if f.PresencePenalty != nil {
		if *f.PresencePenalty < -2 || *f.PresencePenalty > 2 {
			return p, badRequest("presence_penalty", "'presence_penalty' %v must lie in [-2, 2].", *f.PresencePenalty)
		}
		p.PresencePenalty = *f.PresencePenalty
	}
	if f.FrequencyPenalty != nil {
		if *f.FrequencyPenalty < -2 || *f.FrequencyPenalty > 2 {
			return p, badRequest("frequency_penalty", "'frequency_penalty' %v must lie in [-2, 2].", *f.FrequencyPenalty)
		}
		p.FrequencyPenalty = *f.FrequencyPenalty
	}
	if f.RepetitionPenalty != nil {
		if *f.RepetitionPenalty <= 0 {
			return p, badRequest("repetition_penalty", "'repetition_penalty' %v must be positive.", *f.RepetitionPenalty)
		}
		p.RepetitionPenalty = *f.RepetitionPenalty
	}
	if f.Seed != nil {
		seed := uint64(*f.Seed)
		p.Seed = &seed
	}
	return p, nil
}

// defaultMaxTokens is the max_tokens of a request that gives none, with a prompt of promptLen tokens:
// def (0: the context's room), within the room the prompt leaves and --max-tokens-limit.
func (s *Server) defaultMaxTokens(def, promptLen int) int {
	n := s.eng.MaxModelLen() - promptLen
	if def > 0 {
		n = min(n, def)
	}
	if s.cfg.MaxTokensLimit > 0 {
		n = min(n, s.cfg.MaxTokensLimit)
	}
	return n
}

// checkMinTokens refuses a min_tokens above the most tokens the request can generate (its max_tokens,
// or the default or the context's room when it has none), as vLLM does: the request would otherwise
// suppress its stop tokens for its whole output.
func checkMinTokens(minTokens, maxGen int) *apiError {
	if minTokens > maxGen {
		return badRequest("min_tokens", "'min_tokens' %d exceeds the %d tokens this request may generate.", minTokens, maxGen)
	}
	return nil
}

// maxLogitBias bounds a logit_bias value: OpenAI's documented range, to which vLLM clamps.
const maxLogitBias = 100

// parseLogitBias turns logit_bias (token id strings to numbers) into the engine's map: keys must be
// token ids within the vocabulary (when vocab is known), each named once, values finite numbers, clamped to
// [−100, 100] as vLLM clamps them.
func parseLogitBias(raw map[string]any, vocab int) (map[int32]float32, *apiError) {
	if len(raw) == 0 {
		return nil, nil
	}
	bias := make(map[int32]float32, len(raw))
	for k, v := range raw {
		id, err := strconv.ParseInt(k, 10, 32)
		if err != nil || id < 0 || (vocab > 0 && int(id) >= vocab) {
			return nil, badRequest("logit_bias", "'logit_bias' key %q is not a token id of the vocabulary of %d.", k, vocab)
		}
		b, ok := v.(float64)
		if !ok || math.IsNaN(b) || math.IsInf(b, 0) {
			return nil, badRequest("logit_bias", "'logit_bias' value of token %d must be a number.", id)
		}
		if _, dup := bias[int32(id)]; dup { // "5" and "05": which one would win is not defined
			return nil, badRequest("logit_bias", "'logit_bias' names token %d twice.", id)
		}
		bias[int32(id)] = float32(min(max(b, -maxLogitBias), maxLogitBias))
	}
	return bias, nil
}

// bestOf is how many choices a completions request generates for each prompt, of which it returns the
// n with the highest mean log-probability per token (best_of, the completions API's): n where not given,
// else at least n and at most the server's MaxN, and n itself when streamed (the choices must be
// finished before the best are known, as OpenAI's API refuses too).
func (f *samplingFields) bestOf(cfg *Config, n int, stream bool) (int, *apiError) {
	if f.BestOf == nil {
		return n, nil
	}
	b := *f.BestOf
	if b < n || b > cfg.MaxN {
		return 0, badRequest("best_of", "'best_of' %d must lie in [n=%d, %d].", b, n, cfg.MaxN)
	}
	if b > n && stream {
		return 0, badRequest("best_of", "'best_of' greater than 'n' cannot be streamed.")
	}
	return b, nil
}

// common validates the fields shared by both endpoints against the server's limits and returns
// the engine request template (without prompt) and n.
func (f *samplingFields) common(cfg *Config, maxTokens *int, maxTokensParam string) (engine.Request, int, *apiError) {
	var req engine.Request
	if f.Store != nil && *f.Store {
		e := badRequest("store", "'store' true is not supported: this server keeps no completions; send false or leave it out.")
		e.Code = strPtr("unsupported_parameter")
		return req, 0, e
	}
	n := 1
	if f.N != nil {
		n = *f.N
		if n < 1 || n > cfg.MaxN {
			return req, 0, badRequest("n", "'n' %d must lie in [1, %d].", n, cfg.MaxN)
		}
	}
	if maxTokens != nil {
		if *maxTokens < 1 {
			return req, 0, badRequest(maxTokensParam, "'%s' %d must be at least 1.", maxTokensParam, *maxTokens)
		}
		if cfg.MaxTokensLimit > 0 && *maxTokens > cfg.MaxTokensLimit {
			return req, 0, badRequest(maxTokensParam, "'%s' %d exceeds this server's limit of %d.", maxTokensParam, *maxTokens, cfg.MaxTokensLimit)
		}
		req.MaxTokens = *maxTokens
	}
	if f.MinTokens < 0 {
		return req, 0, badRequest("min_tokens", "'min_tokens' must not be negative.")
	}
	if maxTokens != nil && f.MinTokens > *maxTokens {
		return req, 0, badRequest("min_tokens", "'min_tokens' %d exceeds '%s' %d.", f.MinTokens, maxTokensParam, *maxTokens)
	}
	req.MinTokens = f.MinTokens
	stop, err := parseStop(f.Stop, cfg.MaxStopStrings)
	if err != nil {
		return req, 0, err
	}
	for _, s := range stop {
		if len(s) > cfg.MaxStopLength {
			return req, 0, badRequest("stop", "A stop string is %d bytes long; at most %d are allowed.", len(s), cfg.MaxStopLength)
		}
	}
	req.Stop = stop
	if len(f.StopTokenIDs) > cfg.MaxStopStrings {
		return req, 0, badRequest("stop_token_ids", "'stop_token_ids' holds %d ids; at most %d are allowed.", len(f.StopTokenIDs), cfg.MaxStopStrings)
	}
	if cfg.VocabSize > 0 {
		for _, t := range f.StopTokenIDs {
			if t < 0 || int(t) >= cfg.VocabSize {
				return req, 0, badRequest("stop_token_ids", "Token %d is outside the vocabulary of %d.", t, cfg.VocabSize)
			}
		}
	}
	req.StopTokenIDs = f.StopTokenIDs
	req.IgnoreEOS = f.IgnoreEOS
	req.IncludeStopString = f.IncludeStopStrInOutput
	if f.SkipSpecialTokens != nil {
		req.KeepSpecialTokens = !*f.SkipSpecialTokens
	}
	sp, err := f.sampling(cfg.Sampling)
	if err != nil {
		return req, 0, err
	}
	req.Sampling = sp
	if req.Sampling.LogitBias, err = parseLogitBias(f.LogitBias, cfg.VocabSize); err != nil {
		return req, 0, err
	}
	if f.StreamOptions != nil && !f.Stream {
		return req, 0, badRequest("stream_options", "'stream_options' is only allowed with 'stream': true.")
	}
	if err := f.checkPromptLogprobs(); err != nil {
		return req, 0, err
	}
	if f.wantPromptLogprobs() {
		req.PromptLogprobs, req.PromptTopLogprobs = true, *f.PromptLogprobs
	}
	return req, n, nil
}

// checkPromptLogprobs checks prompt_logprobs as vLLM's check_logprobs does (a count of at least 0;
// with stream only 0, since a stream carries no prompt_logprobs) and caps it as vLLM caps it at
// its max_logprobs. vLLM's -1, the whole vocabulary, is refused: it would return vocabulary-sized
// objects for every prompt token.
func (f *samplingFields) checkPromptLogprobs() *apiError {
	if f.PromptLogprobs == nil {
		return nil
	}
	k := *f.PromptLogprobs
	switch {
	case k == -1:
		return badRequest("prompt_logprobs", "'prompt_logprobs' -1 (the whole vocabulary) is not supported; it must lie in [0, %d].", DefaultMaxLogprobs)
	case k < 0 || k > DefaultMaxLogprobs:
		return badRequest("prompt_logprobs", "'prompt_logprobs' %d must lie in [0, %d].", k, DefaultMaxLogprobs)
	case k > 0 && f.Stream:
		return badRequest("prompt_logprobs", "'prompt_logprobs' is not available with 'stream': true.")
	}
	return nil
}

// wantPromptLogprobs reports whether the response carries prompt_logprobs: the request asks for
// them, and not in a stream (vLLM's streamed chunks have no such field, and accept prompt_logprobs
// 0 only to ignore it).
func (f *samplingFields) wantPromptLogprobs() bool { return f.PromptLogprobs != nil && !f.Stream }
