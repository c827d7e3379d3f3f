package weights

import (
	"path/filepath"
	"reflect"
	"testing"
)

func TestLoadTokenizerConfig(t *testing.T) {
	tests := []struct {
		file string
		want *TokenizerConfig
	}{
		{"added-token-objects.json", &TokenizerConfig{
			BOSToken: "<s>", EOSToken: "</s>", AddBOSToken: ptr(true), AddEOSToken: ptr(false),
		}},
		{"string-template.json", &TokenizerConfig{
			BOSToken: "<|begin_of_text|>", EOSToken: "<|eot_id|>", ModelMaxLength: 131072,
			ChatTemplate: "{{ bos_token }}{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}{{ eos_token }}{% endfor %}",
		}},
		{"template-list.json", &TokenizerConfig{
			BOSToken: "<BOS>", EOSToken: "<EOS>", PadToken: "<PAD>", ModelMaxLength: 8192,
			ChatTemplate: "{% for m in messages %}{{ m['content'] }}{% endfor %}",
			ChatTemplates: map[string]string{
				"default":  "{% for m in messages %}{{ m['content'] }}{% endfor %}",
				"tool_use": "{{ tools | length }}",
			},
		}},
		{"absent.json", &TokenizerConfig{}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			got, err := LoadTokenizerConfig(filepath.Join("testdata", "tokenizer_config", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %s, want %s", describe(got), describe(tc.want))
			}
		})
	}
}

func TestParseTokenizerConfigVariants(t *testing.T) {
	tests := []struct {
		name, data string
		want       *TokenizerConfig
	}{
		{"template list without default", `{"chat_template": [{"name": "tool_use", "template": "x"}]}`,
			&TokenizerConfig{ChatTemplates: map[string]string{"tool_use": "x"}}},
		{"null tokens", `{"bos_token": null, "eos_token": null, "chat_template": null, "model_max_length": null}`, &TokenizerConfig{}},
		{"huge model_max_length as float", `{"model_max_length": 1e30}`, &TokenizerConfig{}},
		{"int64 max is beyond nothing", `{"model_max_length": 9223372036854775807}`, &TokenizerConfig{ModelMaxLength: 9223372036854775807}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ParseTokenizerConfig([]byte(tc.data))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %s, want %s", describe(got), describe(tc.want))
			}
		})
	}
}

func TestParseTokenizerConfigErrors(t *testing.T) {
	tests := []struct {
		name, data, field string
	}{
		{"token as number", `{"bos_token": 1}`, "bos_token"},
		{"token object without content", `{"eos_token": {"lstrip": false}}`, "eos_token"},
		{"token object with numeric content", `{"eos_token": {"content": 5}}`, "eos_token"},
		{"add_bos_token as string", `{"add_bos_token": "yes"}`, "add_bos_token"},
		{"template as number", `{"chat_template": 3}`, "chat_template"},
		{"template entry without name", `{"chat_template": [{"template": "x"}]}`, "chat_template"},
		{"duplicate template names", `{"chat_template": [{"name": "a", "template": "x"}, {"name": "a", "template": "y"}]}`, "chat_template"},
		{"fractional model_max_length", `{"model_max_length": 2.5}`, "model_max_length"},
		{"negative model_max_length", `{"model_max_length": -1}`, "model_max_length"},
		{"model_max_length as string", `{"model_max_length": "2048"}`, "model_max_length"},
		{"not JSON", `{`, "tokenizer config"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseTokenizerConfig([]byte(tc.data))
			checkError(t, err, ErrInvalid, tc.field)
		})
	}
}
