package openai

import (
	"crypto/rand"
	"encoding/binary"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/gollm/gollm/weights/chattemplate"
)

// Special tokens in text from a client.
//
// By default the text of a special token written in a prompt or in a chat message's content is that
// control token, as in HuggingFace's tokenizers and vLLM: a client can write "<|eot_id|>" and end a
// turn, or open one of another role. With split_special_tokens (HuggingFace's name for the tokenizer
// option; the request field, or gollm serve --split-special-tokens for every request) such text is
// encoded as ordinary text instead: in a completion's prompt strings all of it, in a chat only the
// messages' contents, while the special tokens the chat template writes stay control tokens.

// plainEncoder is a Tokenizer that can encode some of a text's special-token text as plain text
// (*tokenizer.Tokenizer: SpecialSpans, EncodePlain).
type plainEncoder interface {
	// SpecialSpans returns the byte ranges of text where special tokens' text occurs.
	SpecialSpans(text string) [][2]int
	// EncodePlain is Encode, with special tokens not recognised inside the byte ranges plain.
	EncodePlain(text string, addSpecial bool, plain [][2]int) []int32
}

// splitSpecial says whether a request encodes its text's special tokens as plain text: the request's
// split_special_tokens, else the server's default. It refuses the request when the tokenizer cannot.
func (s *Server) splitSpecial(requested *bool) (bool, *apiError) {
	split := s.cfg.SplitSpecialTokens
	if requested != nil {
		split = *requested
	}
	if _, ok := s.tok.(plainEncoder); split && !ok {
		return false, badRequest("split_special_tokens", "'split_special_tokens' is not supported by this server's tokenizer.")
	}
	return split, nil
}

// encodePrompt encodes a prompt string from a client, its special tokens' text as plain text when
// split.
func (s *Server) encodePrompt(text string, addSpecial, split bool) []int32 {
	if split {
		return s.tok.(plainEncoder).EncodePlain(text, addSpecial, [][2]int{{0, len(text)}})
	}
	return s.tok.Encode(text, addSpecial)
}

// chatPrompt renders the request's conversation with the chat template and encodes it (addSpecial:
// the post-processor's tokens too; the template writes its own). With split, the special tokens'
// text in the messages' contents is encoded as plain text: it is replaced by markers before the
// template runs (so that the template sees no control token in a content, and its filters, which
// leave the markers' digits and private-use characters alone, work on the rest of the content as
// given), the markers are put back in the rendered text, and the ranges they cover are encoded
// without special tokens. A template that cuts a content through a marker leaves that marker's
// characters in place of the special token's text.
func (s *Server) chatPrompt(req *chatRequest, addSpecial, split bool) ([]int32, *apiError) {
	msgs, aerr := chatMessages(req.Messages)
	if aerr != nil {
		return nil, aerr
	}
	var m *markers
	if split {
		m = newMarkers(s.tok.(plainEncoder))
		for i := range msgs {
			msgs[i].Content = m.hide(msgs[i].Content)
		}
	}
	text, aerr := s.renderMessages(msgs, req)
	if aerr != nil {
		return nil, aerr
	}
	if m == nil {
		return s.tok.Encode(text, addSpecial), nil
	}
	text, plain := m.restore(text)
	return s.tok.(plainEncoder).EncodePlain(text, addSpecial, plain), nil
}

// markers stand in for special tokens' text in chat contents while the template renders them: a
// marker is U+E000, a random nonce (so that a client cannot forge one), a dot, the index of the text it
// hides, and U+E001.
type markers struct {
	enc    plainEncoder
	prefix string   // U+E000, the nonce and the dot
	hidden []string // the special tokens' text, by index
}

func newMarkers(enc plainEncoder) *markers {
	var b [8]byte
	rand.Read(b[:])
	return &markers{enc: enc, prefix: "\ue000" + strconv.FormatUint(binary.LittleEndian.Uint64(b[:]), 10) + "."}
}

// hide returns content with each special token's text replaced by a marker.
func (m *markers) hide(content string) string {
	spans := m.enc.SpecialSpans(content)
	if len(spans) == 0 {
		return content
	}
	var b strings.Builder
	last := 0
	for _, sp := range spans {
		b.WriteString(content[last:sp[0]])
		b.WriteString(m.prefix)
		b.WriteString(strconv.Itoa(len(m.hidden)))
		b.WriteString("\ue001")
		m.hidden = append(m.hidden, content[sp[0]:sp[1]])
		last = sp[1]
	}
	b.WriteString(content[last:])
	return b.String()
}

// restore puts the hidden texts back in place of the markers of rendered and returns the byte ranges
// they cover.
func (m *markers) restore(rendered string) (string, [][2]int) {
	if len(m.hidden) == 0 {
		return rendered, nil
	}
	var b strings.Builder
	var spans [][2]int
	for {
		i := strings.Index(rendered, m.prefix)
		if i < 0 {
			break
		}
		b.WriteString(rendered[:i])
		rest := rendered[i+len(m.prefix):]
		end := strings.Index(rest, "\ue001")
		k, err := strconv.Atoi(rest[:max(end, 0)])
		if end < 0 || err != nil || k < 0 || k >= len(m.hidden) {
			b.WriteString(m.prefix) // not a whole marker (the template cut it): leave it as it is
			rendered = rest
			continue
		}
		spans = append(spans, [2]int{b.Len(), b.Len() + len(m.hidden[k])})
		b.WriteString(m.hidden[k])
		rendered = rest[end+len("\ue001"):]
	}
	b.WriteString(rendered)
	return b.String(), spans
}

// renderMessages applies the chat template to msgs with the request's options.
func (s *Server) renderMessages(msgs []chattemplate.Message, req *chatRequest) (string, *apiError) {
	if s.cfg.ChatTemplate == nil {
		return "", badRequest("messages", "This model has no chat template; use /v1/completions.")
	}
	// The variables the server gives the template itself win over chat_template_kwargs' (Render):
	// such a key would be ignored, so it is refused.
	for _, k := range []string{"messages", "add_generation_prompt", "tools", "bos_token", "eos_token", "pad_token", "unk_token"} {
		if _, ok := req.ChatTemplateKwargs[k]; ok {
			return "", unsupportedParameter("chat_template_kwargs." + k)
		}
	}
	addGen := true
	if req.AddGenerationPrompt != nil {
		addGen = *req.AddGenerationPrompt
	}
	var tools []json.RawMessage // nil without tools: the template sees None
	for _, t := range req.Tools {
		tools = append(tools, t.raw)
	}
	text, err := s.cfg.ChatTemplate.Render(chattemplate.Input{
		Messages: msgs, AddGenerationPrompt: addGen,
		BOSToken: s.cfg.BOSToken, EOSToken: s.cfg.EOSToken, PadToken: s.cfg.PadToken, UnkToken: s.cfg.UnkToken,
		Extra: req.ChatTemplateKwargs, Tools: tools,
	})
	if err != nil {
		return "", badRequest("messages", "The chat template cannot render this conversation: %v", err)
	}
	return text, nil
}
