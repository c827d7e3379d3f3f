package weights

import (
	"encoding/json"
	"path/filepath"
	"reflect"
	"testing"
)

func ptr[T any](v T) *T { return &v }

func TestLoadGenerationConfig(t *testing.T) {
	tests := []struct {
		file string
		want *GenerationConfig
	}{
		{"llama-3.2-1b-instruct.json", &GenerationConfig{
			BOSTokenIDs: []int32{128000}, EOSTokenIDs: []int32{128001, 128008, 128009},
			Temperature: ptr(0.6), TopP: ptr(0.9), DoSample: ptr(true),
		}},
		{"tinyllama-1.1b-chat-v1.0.json", &GenerationConfig{
			BOSTokenIDs: []int32{1}, EOSTokenIDs: []int32{2}, MaxLength: ptr(2048),
		}},
		{"full.json", &GenerationConfig{
			BOSTokenIDs: []int32{1}, EOSTokenIDs: []int32{2, 7}, DoSample: ptr(false),
			Temperature: ptr(0.7), TopP: ptr(1.0), TopK: ptr(40), MinP: ptr(0.05),
			RepetitionPenalty: ptr(1.1), MaxNewTokens: ptr(256),
		}},
		{"absent.json", &GenerationConfig{}},
	}
	for _, tc := range tests {
		t.Run(tc.file, func(t *testing.T) {
			got, err := LoadGenerationConfig(filepath.Join("testdata", "generation", tc.file))
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, tc.want) {
				t.Errorf("got %s, want %s", describe(got), describe(tc.want))
			}
		})
	}
}

// describe prints a struct with its pointers followed.
func describe(v any) string {
	data, _ := json.Marshal(v)
	return string(data)
}

func TestParseGenerationConfigErrors(t *testing.T) {
	tests := []struct {
		name, data, field string
	}{
		{"top_p above one", `{"top_p": 1.5}`, "top_p"},
		{"negative temperature", `{"temperature": -0.1}`, "temperature"},
		{"temperature as string", `{"temperature": "hot"}`, "temperature"},
		{"negative top_k", `{"top_k": -1}`, "top_k"},
		{"fractional top_k", `{"top_k": 2.5}`, "top_k"},
		{"zero repetition penalty", `{"repetition_penalty": 0}`, "repetition_penalty"},
		{"min_p above one", `{"min_p": 2}`, "min_p"},
		{"do_sample as int", `{"do_sample": 1}`, "do_sample"},
		{"eos as string", `{"eos_token_id": "2"}`, "eos_token_id"},
		{"eos list with null", `{"eos_token_id": [2, null]}`, "eos_token_id"},
		{"negative max_new_tokens", `{"max_new_tokens": -5}`, "max_new_tokens"},
		{"not an object", `[1]`, "generation config"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := ParseGenerationConfig([]byte(tc.data))
			checkError(t, err, ErrInvalid, tc.field)
		})
	}
}
