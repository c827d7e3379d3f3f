package weights

import (
	"slices"
	"testing"
)

// FuzzParseHeader feeds arbitrary file images to the header parser. It must never panic, and whatever
// it accepts must satisfy the invariants that readers rely on: every tensor's bytes inside the file
// and after the header, sized exactly by dtype and shape, and no two non-empty tensors overlapping.
// The seed corpus is in testdata/fuzz/FuzzParseHeader; run `go test -fuzz FuzzParseHeader ./weights`
// to explore further.
func FuzzParseHeader(f *testing.F) {
	f.Add(rawSafetensors(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)))
	f.Add(rawSafetensors(`{"__metadata__":{"format":"pt"},"b":{"dtype":"BF16","shape":[1,2],"data_offsets":[4,8]},"a":{"dtype":"I64","shape":[],"data_offsets":[8,16]}}  `, make([]byte, 16)))
	f.Fuzz(func(t *testing.T, file []byte) {
		h, err := parseHeader(file)
		if err != nil {
			return
		}
		dataStart := len(file) - h.DataLen
		if dataStart < 8 {
			t.Fatalf("data area starts at %d", dataStart)
		}
		prevEnd := dataStart
		for i, e := range h.Entries {
			if e.Begin < dataStart || e.End > len(file) || e.Begin > e.End {
				t.Fatalf("tensor %q: [%d, %d] outside the data area [%d, %d]", e.Name, e.Begin, e.End, dataStart, len(file))
			}
			bitsPer := safetensorsDTypeBits[e.DTypeName]
			if bitsPer == 0 {
				t.Fatalf("tensor %q: unknown dtype %q accepted", e.Name, e.DTypeName)
			}
			numel := 1
			for _, d := range e.Shape {
				numel *= d
			}
			if numel*bitsPer != 8*(e.End-e.Begin) {
				t.Fatalf("tensor %q: %d elements of %d bits in %d bytes", e.Name, numel, bitsPer, e.End-e.Begin)
			}
			if i > 0 && e.Begin < h.Entries[i-1].Begin {
				t.Fatal("entries not sorted by offset")
			}
			if e.Begin < e.End {
				if e.Begin < prevEnd {
					t.Fatalf("tensor %q overlaps its predecessor", e.Name)
				}
				prevEnd = e.End
			}
			if e.DType.Valid() != slices.Contains([]string{"F32", "F16", "BF16", "F8_E4M3"}, e.DTypeName) {
				t.Fatalf("tensor %q: dtype %q mapped to %v", e.Name, e.DTypeName, e.DType)
			}
		}
	})
}
