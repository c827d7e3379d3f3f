package weights

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"io/fs"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/gollm/gollm/internal/dtype"
)

// rawSafetensors assembles a file image from a header string and a data area, by hand, so that the
// tests do not depend on WriteSafetensors.
func rawSafetensors(header string, data []byte) []byte {
	out := binary.LittleEndian.AppendUint64(nil, uint64(len(header)))
	out = append(out, header...)
	return append(out, data...)
}

// randomTensor makes a tensor of random values in dtype d; values are exact in every dtype so that
// Float32 can be compared exactly.
func randomTensor(rng *rand.Rand, name string, d DType, shape ...int) (*Tensor, []float32) {
	t := &Tensor{Name: name, DType: d, Shape: shape}
	values := make([]float32, t.NumElements())
	for i := range values {
		values[i] = float32(rng.IntN(2001)-1000) / 64 // exact in f16 (11 significant bits); bf16 is rounded below
		if d == DTypeBF16 {
			values[i] = dtype.BF16ToF32(dtype.F32ToBF16(values[i]))
		}
	}
	t.Data = make([]byte, len(values)*d.Size())
	switch d {
	case DTypeF32:
		dtype.EncodeF32(t.Data, values)
	case DTypeF16:
		dtype.EncodeF16(t.Data, values)
	case DTypeBF16:
		dtype.EncodeBF16(t.Data, values)
	}
	return t, values
}

func TestWriteOpenRoundTrip(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	var tensors []*Tensor
	want := map[string][]float32{}
	for _, spec := range []struct {
		name  string
		d     DType
		shape []int
	}{
		{"b.weight", DTypeBF16, []int{3, 5}},
		{"a.weight", DTypeF16, []int{7}},
		{"c.weight", DTypeF32, []int{2, 3, 4}},
		{"scalar", DTypeF32, []int{}},
		{"empty", DTypeBF16, []int{0, 4}},
		{"odd.bf16", DTypeBF16, []int{1, 3}}, // 6 bytes: later tensors start unaligned
		{"after.odd", DTypeF32, []int{5}},
	} {
		tensor, values := randomTensor(rng, spec.name, spec.d, spec.shape...)
		tensors = append(tensors, tensor)
		want[spec.name] = values
	}
	path := filepath.Join(t.TempDir(), "model.safetensors")
	if err := WriteSafetensors(path, tensors); err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if n := binary.LittleEndian.Uint64(raw); (8+n)%8 != 0 {
		t.Errorf("header length %d leaves the data unaligned", n)
	}

	s, err := OpenSafetensors(filepath.Dir(path))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	wantNames := []string{"a.weight", "after.odd", "b.weight", "c.weight", "empty", "odd.bf16", "scalar"}
	if got := s.Names(); !slices.Equal(got, wantNames) {
		t.Errorf("Names = %v, want %v", got, wantNames)
	}
	for _, orig := range tensors {
		t.Run(orig.Name, func(t *testing.T) {
			got, err := s.Get(orig.Name)
			if err != nil {
				t.Fatal(err)
			}
			if got.Name != orig.Name || got.DType != orig.DType || !slices.Equal(got.Shape, orig.Shape) {
				t.Errorf("got %s %v %v, want %s %v %v", got.Name, got.DType, got.Shape, orig.Name, orig.DType, orig.Shape)
			}
			if string(got.Data) != string(orig.Data) {
				t.Errorf("data differs")
			}
			if f := got.Float32(); !slices.Equal(f, want[orig.Name]) {
				t.Errorf("Float32 = %v, want %v", f, want[orig.Name])
			}
		})
	}
	// Data aliases the mapping: two Gets see the same bytes, not copies.
	a, _ := s.Get("c.weight")
	b, _ := s.Get("c.weight")
	if &a.Data[0] != &b.Data[0] {
		t.Error("Get copied the data instead of aliasing the mapping")
	}
}

func TestWriteSafetensorsErrors(t *testing.T) {
	dir := t.TempDir()
	ok := &Tensor{Name: "x", DType: DTypeF32, Shape: []int{2}, Data: make([]byte, 8)}
	tests := []struct {
		name    string
		tensors []*Tensor
		want    string
	}{
		{"duplicate", []*Tensor{ok, ok}, `"x"`},
		{"reserved name", []*Tensor{{Name: "__metadata__", DType: DTypeF32, Shape: []int{}, Data: make([]byte, 4)}}, "__metadata__"},
		{"invalid dtype", []*Tensor{{Name: "y", Shape: []int{1}, Data: make([]byte, 4)}}, `"y"`},
		{"short data", []*Tensor{{Name: "z", DType: DTypeBF16, Shape: []int{3}, Data: make([]byte, 4)}}, `"z"`},
		{"negative dim", []*Tensor{{Name: "w", DType: DTypeF16, Shape: []int{-1}}}, `"w"`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			err := WriteSafetensors(filepath.Join(dir, tc.name+".safetensors"), tc.tensors)
			checkError(t, err, nil, tc.want)
		})
	}
}

func TestParseHeaderErrors(t *testing.T) {
	f32 := func(name string, shape string, begin, end int) string {
		return `"` + name + `":{"dtype":"F32","shape":` + shape + `,"data_offsets":[` + itoa(begin) + `,` + itoa(end) + `]}`
	}
	data16 := make([]byte, 16)
	tests := []struct {
		name string
		file []byte
		want string
	}{
		{"empty file", nil, "too short"},
		{"seven bytes", []byte{1, 0, 0, 0, 0, 0, 0}, "too short"},
		{"length beyond file", append(binary.LittleEndian.AppendUint64(nil, 100), "{}"...), "exceeds the file"},
		{"length beyond bound", append(binary.LittleEndian.AppendUint64(nil, 200_000_000), "{}"...), "limit"},
		{"length with high bit", binary.LittleEndian.AppendUint64(nil, 1<<63), "limit"},
		{"empty header", rawSafetensors("", nil), "JSON object"},
		{"not an object", rawSafetensors("[]", nil), "JSON object"},
		{"truncated JSON", rawSafetensors(`{"a":`, nil), "JSON"},
		{"trailing garbage", rawSafetensors(`{} x`, nil), "after the JSON object"},
		{"second object", rawSafetensors(`{}{}`, nil), "after the JSON object"},
		{"unknown dtype", rawSafetensors(`{"t":{"dtype":"F12","shape":[1],"data_offsets":[0,4]}}`, data16), `unknown dtype "F12"`},
		{"size mismatch", rawSafetensors(`{`+f32("t", "[3]", 0, 16)+`}`, data16), "needs 12 bytes"},
		{"offsets beyond data", rawSafetensors(`{`+f32("t", "[8]", 0, 32)+`}`, data16), "data_offsets[1]"},
		{"reversed offsets", rawSafetensors(`{`+f32("t", "[0]", 8, 4)+`}`, data16), "reversed"},
		{"overlap", rawSafetensors(`{`+f32("a", "[2]", 0, 8)+`,`+f32("b", "[2]", 4, 12)+`}`, data16), "overlaps"},
		{"overlap listed out of order", rawSafetensors(`{`+f32("b", "[3]", 4, 16)+`,`+f32("a", "[2]", 0, 8)+`}`, data16), "overlaps"},
		{"duplicate name", rawSafetensors(`{`+f32("a", "[1]", 0, 4)+`,`+f32("a", "[1]", 4, 8)+`}`, data16), "duplicate"},
		{"negative dim", rawSafetensors(`{`+f32("t", "[-1]", 0, 4)+`}`, data16), "shape[0]"},
		{"fractional dim", rawSafetensors(`{`+f32("t", "[1.5]", 0, 4)+`}`, data16), "shape[0]"},
		{"string dim", rawSafetensors(`{`+f32("t", `["1"]`, 0, 4)+`}`, data16), "shape[0]"},
		{"huge dims overflow", rawSafetensors(`{`+f32("t", "[4294967296,4294967296]", 0, 4)+`}`, data16), "overflows"},
		{"three offsets", rawSafetensors(`{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4,8]}}`, data16), "3 values"},
		{"missing dtype", rawSafetensors(`{"t":{"shape":[1],"data_offsets":[0,4]}}`, data16), "dtype"},
		{"null shape", rawSafetensors(`{"t":{"dtype":"F32","shape":null,"data_offsets":[0,4]}}`, data16), "shape"},
		{"unknown field", rawSafetensors(`{"t":{"dtype":"F32","shape":[1],"data_offsets":[0,4],"x":1}}`, data16), "unknown field"},
		{"record not an object", rawSafetensors(`{"t":[1]}`, data16), `"t"`},
		{"metadata not strings", rawSafetensors(`{"__metadata__":{"format":1}}`, nil), "__metadata__"},
		{"sub-byte remainder", rawSafetensors(`{"t":{"dtype":"F4","shape":[3],"data_offsets":[0,2]}}`, data16), "whole number of bytes"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h, err := parseHeader(tc.file)
			if err == nil {
				t.Fatalf("parseHeader = %+v, want an error", h)
			}
			checkError(t, err, ErrInvalid, tc.want)
		})
	}
}

func itoa(i int) string { b, _ := json.Marshal(i); return string(b) }

func TestParseHeaderAccepts(t *testing.T) {
	data := make([]byte, 40)
	header := `{"__metadata__":{"format":"pt"},` +
		`"late":{"dtype":"BF16","shape":[2,2],"data_offsets":[24,32]},` +
		`"ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},` +
		`"none":{"dtype":"F16","shape":[0],"data_offsets":[16,16]},` +
		`"nib":{"dtype":"F4","shape":[4],"data_offsets":[32,34]}}     `
	h, err := parseHeader(rawSafetensors(header, data))
	if err != nil {
		t.Fatal(err)
	}
	if h.Metadata["format"] != "pt" {
		t.Errorf("metadata = %v", h.Metadata)
	}
	start := 8 + len(header)
	var got []string
	for _, e := range h.Entries {
		got = append(got, e.Name+":"+e.DTypeName+":"+itoa(e.Begin-start)+"-"+itoa(e.End-start))
	}
	want := []string{"ids:I64:0-16", "none:F16:16-16", "late:BF16:24-32", "nib:F4:32-34"}
	if !slices.Equal(got, want) {
		t.Errorf("entries = %v, want %v", got, want)
	}
	if h.Entries[0].DType != DTypeInvalid || h.Entries[2].DType != DTypeBF16 {
		t.Errorf("dtypes = %v, %v", h.Entries[0].DType, h.Entries[2].DType)
	}
	if _, err := parseHeader(rawSafetensors(`{"__metadata__":null}`, nil)); err != nil {
		t.Errorf("null metadata: %v", err)
	}
}

func writeFile(t *testing.T, path string, data []byte) {
	t.Helper()
	if err := os.WriteFile(path, data, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestGetUnsupportedDType(t *testing.T) {
	dir := t.TempDir()
	header := `{"position_ids":{"dtype":"I64","shape":[2],"data_offsets":[0,16]},"w":{"dtype":"F32","shape":[1],"data_offsets":[16,20]}}`
	writeFile(t, filepath.Join(dir, "model.safetensors"), rawSafetensors(header, make([]byte, 20)))
	s, err := OpenSafetensors(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if got := s.Names(); !slices.Equal(got, []string{"position_ids", "w"}) {
		t.Errorf("Names = %v", got)
	}
	_, err = s.Get("position_ids")
	checkError(t, err, ErrUnsupported, "position_ids", "I64")
	_, err = s.Get("nope")
	checkError(t, err, ErrTensorNotFound, `"nope"`)
}

func TestOpenSafetensorsMissing(t *testing.T) {
	_, err := OpenSafetensors(t.TempDir())
	checkError(t, err, fs.ErrNotExist, SafetensorsFile, SafetensorsIndexFile)
}

func TestOpenSafetensorsCorrupt(t *testing.T) {
	dir := t.TempDir()
	writeFile(t, filepath.Join(dir, "model.safetensors"), rawSafetensors(`{"t":{"dtype":"F32","shape":[9],"data_offsets":[0,36]}}`, make([]byte, 8)))
	_, err := OpenSafetensors(dir)
	checkError(t, err, ErrInvalid, "model.safetensors", `"t"`)
}

func TestCloseTwiceAndGetAfterClose(t *testing.T) {
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(2, 2))
	w, _ := randomTensor(rng, "w", DTypeF32, 4)
	if err := WriteSafetensors(filepath.Join(dir, SafetensorsFile), []*Tensor{w}); err != nil {
		t.Fatal(err)
	}
	s, err := OpenSafetensors(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	_, err = s.Get("w")
	checkError(t, err, ErrClosed, `"w"`)
}

// writeSharded writes tensors into shards as given and an index with weightMap.
func writeSharded(t *testing.T, dir string, shards map[string][]*Tensor, weightMap map[string]string) {
	t.Helper()
	for file, tensors := range shards {
		if err := WriteSafetensors(filepath.Join(dir, file), tensors); err != nil {
			t.Fatal(err)
		}
	}
	index, err := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 0}, "weight_map": weightMap})
	if err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, SafetensorsIndexFile), index)
}

func TestSharded(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	a, av := randomTensor(rng, "a", DTypeBF16, 4, 2)
	b, _ := randomTensor(rng, "b", DTypeF16, 3)
	c, cv := randomTensor(rng, "c", DTypeF32, 2)
	const s1, s2 = "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
	good := map[string][]*Tensor{s1: {a, b}, s2: {c}}
	goodMap := map[string]string{"a": s1, "b": s1, "c": s2}

	t.Run("ok", func(t *testing.T) {
		dir := t.TempDir()
		writeSharded(t, dir, good, goodMap)
		s, err := OpenSafetensors(dir)
		if err != nil {
			t.Fatal(err)
		}
		defer s.Close()
		if got := s.Names(); !slices.Equal(got, []string{"a", "b", "c"}) {
			t.Errorf("Names = %v", got)
		}
		for name, want := range map[string][]float32{"a": av, "c": cv} {
			tensor, err := s.Get(name)
			if err != nil {
				t.Fatal(err)
			}
			if got := tensor.Float32(); !slices.Equal(got, want) {
				t.Errorf("%s = %v, want %v", name, got, want)
			}
		}
	})

	errorCases := []struct {
		name      string
		shards    map[string][]*Tensor
		weightMap map[string]string
		is        error
		want      []string
	}{
		{"listed but missing", good, map[string]string{"a": s1, "b": s1, "c": s2, "d": s2}, ErrTensorNotFound, []string{`"d"`, s2}},
		{"stored but not listed", good, map[string]string{"a": s1, "c": s2}, ErrUnexpectedTensor, []string{`"b"`, s1}},
		{"listed in the wrong shard", good, map[string]string{"a": s2, "b": s1, "c": s2}, ErrInvalid, []string{`"a"`}},
		{"duplicate across shards", map[string][]*Tensor{s1: {a, b}, s2: {a, c}}, goodMap, ErrInvalid, []string{`"a"`}},
		{"shard path escapes the folder", good, map[string]string{"a": "../" + s1, "b": s1, "c": s2}, ErrInvalid, []string{"../"}},
		{"shard file missing", good, map[string]string{"a": s1, "b": s1, "c": "model-00003-of-00003.safetensors"}, fs.ErrNotExist, []string{"model-00003-of-00003.safetensors"}},
		{"empty weight map", good, map[string]string{}, ErrInvalid, []string{"weight_map"}},
	}
	for _, tc := range errorCases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			writeSharded(t, dir, tc.shards, tc.weightMap)
			s, err := OpenSafetensors(dir)
			if err == nil {
				s.Close()
				t.Fatal("no error")
			}
			checkError(t, err, tc.is, tc.want...)
		})
	}
	t.Run("index not JSON", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, SafetensorsIndexFile), []byte("{"))
		_, err := OpenSafetensors(dir)
		checkError(t, err, ErrInvalid, SafetensorsIndexFile)
	})
	t.Run("single file preferred over index", func(t *testing.T) {
		dir := t.TempDir()
		writeFile(t, filepath.Join(dir, SafetensorsIndexFile), []byte("{"))
		if err := WriteSafetensors(filepath.Join(dir, SafetensorsFile), []*Tensor{c}); err != nil {
			t.Fatal(err)
		}
		s, err := OpenSafetensors(dir)
		if err != nil {
			t.Fatal(err)
		}
		s.Close()
	})
}

func TestTensorNumElementsAndFloat32(t *testing.T) {
	tests := []struct {
		shape []int
		want  int
	}{{nil, 1}, {[]int{}, 1}, {[]int{0, 5}, 0}, {[]int{2, 3, 4}, 24}}
	for _, tc := range tests {
		if got := (&Tensor{Shape: tc.shape}).NumElements(); got != tc.want {
			t.Errorf("NumElements(%v) = %d, want %d", tc.shape, got, tc.want)
		}
	}
	bf := &Tensor{Name: "x", DType: DTypeBF16, Shape: []int{2}, Data: []byte{0x80, 0x3f, 0xc0, 0xff}}
	got := bf.Float32()
	if got[0] != 1 || !math.IsNaN(float64(got[1])) {
		t.Errorf("Float32 = %v", got)
	}
	defer func() {
		if r := recover(); r == nil || !strings.Contains(r.(string), `"bad"`) {
			t.Errorf("recover = %v, want a panic naming the tensor", r)
		}
	}()
	(&Tensor{Name: "bad", DType: DTypeInvalid, Shape: []int{1}, Data: make([]byte, 4)}).Float32()
}

func TestDType(t *testing.T) {
	tests := []struct {
		d    DType
		name string
		size int
	}{{DTypeF32, "F32", 4}, {DTypeF16, "F16", 2}, {DTypeBF16, "BF16", 2}, {DTypeInvalid, "DType(0)", 0}}
	for _, tc := range tests {
		if tc.d.String() != tc.name || tc.d.Size() != tc.size || tc.d.Valid() != (tc.size != 0) {
			t.Errorf("%d: String %q Size %d Valid %v", int(tc.d), tc.d.String(), tc.d.Size(), tc.d.Valid())
		}
		if tc.size != 0 && dtypeFromSafetensors(tc.name) != tc.d {
			t.Errorf("dtypeFromSafetensors(%q) = %v", tc.name, dtypeFromSafetensors(tc.name))
		}
	}
	if !errors.Is(func() error { _, err := parseTorchDType("int8"); return err }(), ErrUnsupported) {
		t.Error("int8 accepted")
	}
}
