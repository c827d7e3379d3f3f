package weights

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"sort"
	"strconv"
)

// maxHeaderSize bounds the JSON header of a safetensors file, as the reference implementation does
// (100 MB), so that a corrupt length prefix cannot make us allocate or scan gigabytes.
const maxHeaderSize = 100_000_000

// safetensorsDTypeBits is every element type the safetensors format defines, with its size in bits.
// Only F32, F16, BF16 and F8_E4M3 map to a DType; the others are recognised so that a file holding them is
// valid, and reading such a tensor reports the type as unsupported.
var safetensorsDTypeBits = map[string]int{
	"BOOL": 8, "U8": 8, "I8": 8, "F8_E5M2": 8, "F8_E4M3": 8, "F8_E8M0": 8,
	"I16": 16, "U16": 16, "F16": 16, "BF16": 16,
	"I32": 32, "U32": 32, "F32": 32,
	"I64": 64, "U64": 64, "F64": 64, "C64": 64,
	"F4": 4, "F6_E2M3": 6, "F6_E3M2": 6,
}

// dtypeFromSafetensors maps a safetensors dtype name to a DType (DTypeInvalid when unsupported).
func dtypeFromSafetensors(name string) DType {
	switch name {
	case "F32":
		return DTypeF32
	case "F16":
		return DTypeF16
	case "BF16":
		return DTypeBF16
	case "F8_E4M3":
		return DTypeF8E4M3
	}
	return DTypeInvalid
}

// headerEntry is one tensor's record in a safetensors header.
type headerEntry struct {
	Name      string
	DTypeName string // as in the file, e.g. "BF16" or "I64"
	DType     DType  // DTypeInvalid when gollm cannot read DTypeName
	Shape     []int
	// Begin and End are byte offsets into the file (already shifted past the header).
	Begin, End int
}

// header is a parsed and validated safetensors header.
type header struct {
	Entries  []headerEntry // in file order of their data
	Metadata map[string]string
	DataLen  int // length of the data area
}

// parseHeader parses and validates the safetensors header of file, the whole file's bytes: an 8-byte
// little-endian header length, a JSON object of tensor records (and an optional __metadata__ object of
// strings), then the data area. It checks the length bound, the JSON, the dtypes, that each record's
// dtype and shape give exactly its byte range, and that the ranges lie inside the data area without
// overlapping.
func parseHeader(file []byte) (*header, error) {
	if len(file) < 8 {
		return nil, fmt.Errorf("%w: file of %d bytes is too short for a safetensors header", ErrInvalid, len(file))
	}
	n := binary.LittleEndian.Uint64(file)
	if n > maxHeaderSize {
		return nil, fmt.Errorf("%w: header length %d exceeds the %d-byte limit", ErrInvalid, n, maxHeaderSize)
	}
	if n > uint64(len(file)-8) {
		return nil, fmt.Errorf("%w: header length %d exceeds the file (%d bytes)", ErrInvalid, n, len(file))
	}
	raw := file[8 : 8+n]
	dataStart := 8 + int(n)
	h := &header{DataLen: len(file) - dataStart}
	if len(raw) == 0 || raw[0] != '{' {
		return nil, fmt.Errorf("%w: header does not start with a JSON object", ErrInvalid)
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if _, err := dec.Token(); err != nil {
		return nil, fmt.Errorf("%w: header JSON: %w", ErrInvalid, err)
	}
	seen := make(map[string]bool)
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, fmt.Errorf("%w: header JSON: %w", ErrInvalid, err)
		}
		name, ok := tok.(string)
		if !ok {
			return nil, fmt.Errorf("%w: header JSON: unexpected %v", ErrInvalid, tok)
		}
		if seen[name] {
			return nil, fmt.Errorf("%w: header: duplicate key %q", ErrInvalid, name)
		}
		seen[name] = true
		var value json.RawMessage
		if err := dec.Decode(&value); err != nil {
			return nil, fmt.Errorf("%w: header JSON: %q: %w", ErrInvalid, name, err)
		}
		if name == "__metadata__" {
			if !isNull(value) {
				if err := json.Unmarshal(value, &h.Metadata); err != nil {
					return nil, fmt.Errorf("%w: header: __metadata__ must map strings to strings: %w", ErrInvalid, err)
				}
			}
			continue
		}
		e, err := parseEntry(name, value, h.DataLen)
		if err != nil {
			return nil, fmt.Errorf("%w: header: tensor %q: %w", ErrInvalid, name, err)
		}
		e.Begin += dataStart
		e.End += dataStart
		h.Entries = append(h.Entries, e)
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, fmt.Errorf("%w: header JSON: %w", ErrInvalid, err)
	}
	// Writers pad the header with spaces to an 8-byte boundary; nothing else may follow the object.
	if !onlySpace(raw[dec.InputOffset():]) {
		return nil, fmt.Errorf("%w: header: data after the JSON object", ErrInvalid)
	}
	sort.SliceStable(h.Entries, func(i, j int) bool { return h.Entries[i].Begin < h.Entries[j].Begin })
	prevEnd, prevName := dataStart, ""
	for _, e := range h.Entries {
		if e.Begin == e.End {
			continue // an empty tensor occupies no bytes
		}
		if e.Begin < prevEnd {
			return nil, fmt.Errorf("%w: header: tensor %q overlaps tensor %q", ErrInvalid, e.Name, prevName)
		}
		prevEnd, prevName = e.End, e.Name
	}
	return h, nil
}

func onlySpace(b []byte) bool { return len(bytes.TrimLeft(b, " \t\r\n")) == 0 }

// parseEntry validates one tensor record against a data area of dataLen bytes; offsets stay relative
// to the data area.
func parseEntry(name string, value json.RawMessage, dataLen int) (headerEntry, error) {
	var rec struct {
		DType       *string           `json:"dtype"`
		Shape       []json.RawMessage `json:"shape"`
		DataOffsets []json.RawMessage `json:"data_offsets"`
	}
	dec := json.NewDecoder(bytes.NewReader(value))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	if err := dec.Decode(&rec); err != nil {
		return headerEntry{}, err
	}
	if rec.DType == nil || rec.Shape == nil || rec.DataOffsets == nil {
		return headerEntry{}, errors.New("record needs dtype, shape and data_offsets")
	}
	e := headerEntry{Name: name, DTypeName: *rec.DType, DType: dtypeFromSafetensors(*rec.DType)}
	bitSize, ok := safetensorsDTypeBits[e.DTypeName]
	if !ok {
		return headerEntry{}, fmt.Errorf("unknown dtype %q", e.DTypeName)
	}
	numel := uint64(1)
	e.Shape = make([]int, len(rec.Shape))
	for i, d := range rec.Shape {
		v, err := parseUint(d, math.MaxInt)
		if err != nil {
			return headerEntry{}, fmt.Errorf("shape[%d]: %w", i, err)
		}
		e.Shape[i] = v
		hi, lo := bits.Mul64(numel, uint64(v))
		if hi != 0 {
			return headerEntry{}, fmt.Errorf("shape %v overflows", e.Shape)
		}
		numel = lo
	}
	if len(rec.DataOffsets) != 2 {
		return headerEntry{}, fmt.Errorf("data_offsets has %d values, want 2", len(rec.DataOffsets))
	}
	var err error
	if e.Begin, err = parseUint(rec.DataOffsets[0], dataLen); err != nil {
		return headerEntry{}, fmt.Errorf("data_offsets[0]: %w", err)
	}
	if e.End, err = parseUint(rec.DataOffsets[1], dataLen); err != nil {
		return headerEntry{}, fmt.Errorf("data_offsets[1]: %w", err)
	}
	if e.Begin > e.End {
		return headerEntry{}, fmt.Errorf("data_offsets [%d, %d] are reversed", e.Begin, e.End)
	}
	hi, totalBits := bits.Mul64(numel, uint64(bitSize))
	if hi != 0 || totalBits%8 != 0 {
		return headerEntry{}, fmt.Errorf("shape %v of %s is not a whole number of bytes", e.Shape, e.DTypeName)
	}
	if want := totalBits / 8; want != uint64(e.End-e.Begin) {
		return headerEntry{}, fmt.Errorf("shape %v of %s needs %d bytes, data_offsets [%d, %d] hold %d", e.Shape, e.DTypeName, want, e.Begin, e.End, e.End-e.Begin)
	}
	return e, nil
}

// parseUint parses a non-negative integer no larger than limit.
func parseUint(raw json.RawMessage, limit int) (int, error) {
	n, err := jsonNumber(raw)
	if err != nil {
		return 0, err
	}
	v, err := strconv.ParseUint(string(n), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("want a non-negative integer, got %s", n)
	}
	if v > uint64(limit) || v > math.MaxInt {
		return 0, fmt.Errorf("%d is beyond the limit %d", v, limit)
	}
	return int(v), nil
}
