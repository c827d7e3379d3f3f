package chattemplate

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"unicode"
	"unicode/utf8"

	"github.com/gollm/gollm/weights/defaultmodel"
)

// realTemplate is a real model's chat template with its special tokens.
type realTemplate struct {
	name string
	tpl  *Template
	in   Input // special tokens
}

// realTemplates returns the built-in model's template and, when the npm test data is installed,
// the real templates of golden.json (Llama 3, 3.1, Qwen2.5, Qwen3, Gemma 3, DeepSeek V3).
func realTemplates(tb testing.TB) []realTemplate {
	tb.Helper()
	var out []realTemplate
	dir, err := defaultmodel.Dir()
	if err != nil {
		tb.Fatal(err)
	}
	data, err := os.ReadFile(filepath.Join(dir, "tokenizer_config.json"))
	if err != nil {
		tb.Fatal(err)
	}
	var tc struct {
		ChatTemplate string `json:"chat_template"`
		BOS          string `json:"bos_token"`
		EOS          string `json:"eos_token"`
	}
	if err := json.Unmarshal(data, &tc); err != nil {
		tb.Fatal(err)
	}
	tpl, err := Parse(tc.ChatTemplate)
	if err != nil {
		tb.Fatal(err)
	}
	out = append(out, realTemplate{name: defaultmodel.Name(), tpl: tpl, in: Input{BOSToken: tc.BOS, EOSToken: tc.EOS}})

	data, err = os.ReadFile(goldenPath)
	if errors.Is(err, os.ErrNotExist) {
		if os.Getenv("GOLLM_REQUIRE_TESTDATA") == "1" {
			tb.Fatalf("%s missing (run .ci/setup.d/30-serve-testdata.sh)", goldenPath)
		}
		return out
	}
	if err != nil {
		tb.Fatal(err)
	}
	var g golden
	if err := json.Unmarshal(data, &g); err != nil {
		tb.Fatal(err)
	}
	for _, gt := range g.Templates {
		tpl, err := Parse(gt.Source)
		if err != nil {
			tb.Fatalf("%s: %v", gt.Name, err)
		}
		in := Input{}
		for name, dst := range map[string]*string{"bos_token": &in.BOSToken, "eos_token": &in.EOSToken, "pad_token": &in.PadToken, "unk_token": &in.UnkToken} {
			if s, ok := gt.Special[name].(string); ok {
				*dst = s
			}
		}
		out = append(out, realTemplate{name: gt.Name, tpl: tpl, in: in})
	}
	return out
}

// plainEdges reports whether s begins and ends with a character no template trims (so a trimmed
// or verbatim content must appear in the output as it is).
func plainEdges(s string) bool {
	first, _ := utf8.DecodeRuneInString(s)
	last, _ := utf8.DecodeLastRuneInString(s)
	plain := func(r rune) bool {
		return r != utf8.RuneError && !unicode.IsSpace(r) && !unicode.IsControl(r) && !unicode.Is(unicode.Zs, r) && r != '\u200b' && r != '\ufeff'
	}
	return s != "" && utf8.ValidString(s) && plain(first) && plain(last)
}

// FuzzRenderRealTemplates renders a conversation with arbitrary contents through real chat
// templates: whatever the contents, a template that renders the conversation with plain contents
// must render it with these too (content is data: it must never change control flow into an error
// or a panic), deterministically, and every user message's content must appear in the output as
// it is (templates may trim surrounding whitespace, so that property is checked for contents
// without it). Run with `go test -run '^$' -fuzz '^FuzzRenderRealTemplates$' ./weights/chattemplate`.
func FuzzRenderRealTemplates(f *testing.F) {
	for _, s := range []string{"hello", "{{ messages }}", "{% raise_exception('x') %}", "</think>\n\nok", "<think>a</think>b",
		"<tool_response>x</tool_response>", "<|eot_id|>", "  padded  ", "é🙂漢字", "\x00\x01", "'\"\\", "\u3000x\u00a0"} {
		f.Add(s, "answer "+s, s+" again", true)
	}
	templates := realTemplates(f)
	conversation := func(sys, user, assistant string) []Message {
		return []Message{{Role: "system", Content: sys}, {Role: "user", Content: user}, {Role: "assistant", Content: assistant}, {Role: "user", Content: user + "?"}}
	}
	for _, rt := range templates {
		in := rt.in
		in.Messages = conversation("S", "U", "A")
		if _, err := rt.tpl.Render(in); err != nil {
			f.Fatalf("%s: plain conversation: %v", rt.name, err)
		}
	}
	f.Fuzz(func(t *testing.T, user, assistant, sys string, gen bool) {
		for _, rt := range templates {
			in := rt.in
			in.Messages = conversation(sys, user, assistant)
			in.AddGenerationPrompt = gen
			out, err := rt.tpl.Render(in)
			if err != nil {
				t.Fatalf("%s: %v (user %q, assistant %q, system %q)", rt.name, err, user, assistant, sys)
			}
			again, _ := rt.tpl.Render(in)
			if again != out {
				t.Fatalf("%s: two renders differ", rt.name)
			}
			if plainEdges(user) && !strings.Contains(out, user) {
				t.Fatalf("%s: user content %q missing from %q", rt.name, user, out)
			}
		}
	})
}
