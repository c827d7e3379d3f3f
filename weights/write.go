package weights

import (
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
)

// WriteSafetensors writes tensors to a new safetensors file at path, their data laid out in the given
// order and the header padded with spaces to an 8-byte boundary. Each tensor needs a supported dtype,
// a unique name and len(Data) matching its shape. It is meant for tests and tools; it holds the whole
// header in memory but streams the data.
func WriteSafetensors(path string, tensors []*Tensor) (err error) {
	var hdr bytes.Buffer
	hdr.WriteByte('{')
	seen := make(map[string]bool, len(tensors))
	offset := 0
	for i, t := range tensors {
		if seen[t.Name] || t.Name == "__metadata__" {
			return fmt.Errorf("weights: write %s: tensor %q: %w: duplicate or reserved name", path, t.Name, ErrInvalid)
		}
		seen[t.Name] = true
		if !t.DType.Valid() {
			return fmt.Errorf("weights: write %s: tensor %q: dtype %v: %w", path, t.Name, t.DType, ErrUnsupported)
		}
		for _, d := range t.Shape {
			if d < 0 {
				return fmt.Errorf("weights: write %s: tensor %q: %w: negative dimension in %v", path, t.Name, ErrInvalid, t.Shape)
			}
		}
		if want := t.NumElements() * t.DType.Size(); len(t.Data) != want {
			return fmt.Errorf("weights: write %s: tensor %q: %w: %d bytes for shape %v of %v, want %d", path, t.Name, ErrInvalid, len(t.Data), t.Shape, t.DType, want)
		}
		if i > 0 {
			hdr.WriteByte(',')
		}
		name, _ := json.Marshal(t.Name)
		shape := t.Shape
		if shape == nil {
			shape = []int{}
		}
		shapeJSON, _ := json.Marshal(shape)
		fmt.Fprintf(&hdr, `%s:{"dtype":%s,"shape":%s,"data_offsets":[%d,%d]}`,
			name, strconv.Quote(t.DType.String()), shapeJSON, offset, offset+len(t.Data))
		offset += len(t.Data)
	}
	hdr.WriteByte('}')
	for hdr.Len()%8 != 0 {
		hdr.WriteByte(' ')
	}

	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("weights: %w", err)
	}
	defer func() {
		if cerr := f.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("weights: %w", cerr)
		}
	}()
	var prefix [8]byte
	binary.LittleEndian.PutUint64(prefix[:], uint64(hdr.Len()))
	if _, err := f.Write(prefix[:]); err != nil {
		return fmt.Errorf("weights: %w", err)
	}
	if _, err := f.Write(hdr.Bytes()); err != nil {
		return fmt.Errorf("weights: %w", err)
	}
	for _, t := range tensors {
		if _, err := f.Write(t.Data); err != nil {
			return fmt.Errorf("weights: %w", err)
		}
	}
	return nil
}
