package weights

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"strconv"
)

// fields is a decoded JSON object whose members are decoded on demand, so that every error names the
// member it comes from and null can be told apart from absence.
type fields map[string]json.RawMessage

// decodeObject decodes data as one JSON object.
func decodeObject(data []byte) (fields, error) {
	var f fields
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.UseNumber()
	if err := dec.Decode(&f); err != nil {
		return nil, fmt.Errorf("invalid JSON: %w", err)
	}
	if f == nil {
		return nil, errors.New("invalid JSON: want an object, got null")
	}
	if dec.More() {
		return nil, errors.New("invalid JSON: data after the top-level object")
	}
	if _, err := dec.Token(); err == nil {
		return nil, errors.New("invalid JSON: data after the top-level object")
	}
	return f, nil
}

// has reports whether key is present and not null.
func (f fields) has(key string) bool {
	raw, ok := f[key]
	return ok && !isNull(raw)
}

func isNull(raw json.RawMessage) bool { return string(bytes.TrimSpace(raw)) == "null" }

// int reads key as an integer; ok is false when it is absent or null.
func (f fields) int(key string) (v int, ok bool, err error) {
	if !f.has(key) {
		return 0, false, nil
	}
	v, err = parseInt(f[key])
	if err != nil {
		return 0, false, fmt.Errorf("field %s: %w", key, err)
	}
	return v, true, nil
}

// parseInt parses an integral JSON number that fits in an int. A float with no fraction (4096.0) is
// accepted, as Python writes some integers that way.
func parseInt(raw json.RawMessage) (int, error) {
	n, err := jsonNumber(raw)
	if err != nil {
		return 0, fmt.Errorf("want an integer, got %s", abbreviate(raw))
	}
	if i, err := strconv.ParseInt(string(n), 10, 64); err == nil {
		if int64(int(i)) != i {
			return 0, fmt.Errorf("integer %s out of range", n)
		}
		return int(i), nil
	}
	fl, err := strconv.ParseFloat(string(n), 64)
	if err != nil || fl != math.Trunc(fl) || math.Abs(fl) > 1<<53 {
		return 0, fmt.Errorf("want an integer, got %s", n)
	}
	return int(fl), nil
}

// jsonNumber returns raw as a number. Unlike decoding into json.Number, it refuses a string that
// happens to hold digits.
func jsonNumber(raw json.RawMessage) (json.Number, error) {
	raw = bytes.TrimSpace(raw)
	var n json.Number
	if len(raw) == 0 || raw[0] == '"' || json.Unmarshal(raw, &n) != nil {
		return "", fmt.Errorf("want a number, got %s", abbreviate(raw))
	}
	return n, nil
}

// float reads key as a number; ok is false when it is absent or null.
func (f fields) float(key string) (v float64, ok bool, err error) {
	if !f.has(key) {
		return 0, false, nil
	}
	v, err = parseFloat(f[key])
	if err != nil {
		return 0, false, fmt.Errorf("field %s: %w", key, err)
	}
	return v, true, nil
}

func parseFloat(raw json.RawMessage) (float64, error) {
	n, err := jsonNumber(raw)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseFloat(string(n), 64)
	if err != nil || math.IsInf(v, 0) {
		return 0, fmt.Errorf("number %s out of range", n)
	}
	return v, nil
}

// bool reads key as a boolean; ok is false when it is absent or null.
func (f fields) bool(key string) (v bool, ok bool, err error) {
	if !f.has(key) {
		return false, false, nil
	}
	if err := json.Unmarshal(f[key], &v); err != nil {
		return false, false, fmt.Errorf("field %s: want true or false, got %s", key, abbreviate(f[key]))
	}
	return v, true, nil
}

// string reads key as a string; ok is false when it is absent or null.
func (f fields) string(key string) (v string, ok bool, err error) {
	if !f.has(key) {
		return "", false, nil
	}
	if err := json.Unmarshal(f[key], &v); err != nil {
		return "", false, fmt.Errorf("field %s: want a string, got %s", key, abbreviate(f[key]))
	}
	return v, true, nil
}

// tokenIDs reads key as a token id or a list of token ids; present is false when the key is absent
// (null gives present true and no ids).
func (f fields) tokenIDs(key string) (ids []int32, present bool, err error) {
	raw, ok := f[key]
	if !ok {
		return nil, false, nil
	}
	if isNull(raw) {
		return nil, true, nil
	}
	var list []json.RawMessage
	if bytes.HasPrefix(bytes.TrimSpace(raw), []byte("[")) {
		if err := json.Unmarshal(raw, &list); err != nil {
			return nil, false, fmt.Errorf("field %s: %w", key, err)
		}
	} else {
		list = []json.RawMessage{raw}
	}
	ids = make([]int32, 0, len(list))
	for _, item := range list {
		v, err := parseInt(item)
		if err != nil {
			return nil, false, fmt.Errorf("field %s: token id: %w", key, err)
		}
		if v < 0 || v > math.MaxInt32 {
			return nil, false, fmt.Errorf("field %s: token id %d out of range", key, v)
		}
		ids = append(ids, int32(v))
	}
	return ids, true, nil
}

// abbreviate shortens raw JSON for an error message.
func abbreviate(raw json.RawMessage) string {
	s := string(bytes.TrimSpace(raw))
	if len(s) > 40 {
		s = s[:37] + "..."
	}
	return s
}
