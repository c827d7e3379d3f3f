package openai

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
)

// UnmarshalJSON reads what MarshalJSON writes, keeping the keys' order (the tests read responses with it; the server only writes them).
func (p *promptPosition) UnmarshalJSON(data []byte) error {
	if string(bytes.TrimSpace(data)) == "null" {
		*p = nil
		return nil
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return fmt.Errorf("prompt_logprobs entry is not an object or null: %s", data)
	}
	out := promptPosition{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		id, err := strconv.ParseInt(tok.(string), 10, 32)
		if err != nil {
			return fmt.Errorf("prompt_logprobs key %q is not a token id", tok)
		}
		t := promptToken{ID: int32(id)}
		if err := dec.Decode(&t.promptLogprob); err != nil {
			return err
		}
		out = append(out, t)
	}
	*p = out
	return nil
}
