package weights

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"github.com/gollm/gollm/internal/dtype"
)

// File names of a HuggingFace checkpoint's weights.
const (
	SafetensorsFile      = "model.safetensors"
	SafetensorsIndexFile = "model.safetensors.index.json"
)

// Tensor is one named tensor of a checkpoint. Data holds its little-endian bytes, row-major; for a
// tensor from a TensorSet it aliases the read-only memory map, so it must not be written and is valid
// only until the set is closed.
type Tensor struct {
	Name  string // e.g. "model.layers.0.self_attn.q_proj.weight"
	DType DType  // the element type of Data
	Shape []int  // dimensions, outermost first
	Data  []byte // NumElements() × DType.Size() bytes
}

// NumElements returns the product of the tensor's dimensions (1 for a scalar).
func (t *Tensor) NumElements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// Float32 returns a float32 copy of the tensor's values (for F8_E4M3, the e4m3 values themselves,
// without the scales that give them meaning). It panics when the tensor's dtype is not a supported
// DType or Data does not match its shape; tensors from a TensorSet always do.
func (t *Tensor) Float32() []float32 {
	out := make([]float32, t.NumElements())
	switch t.DType {
	case DTypeF32:
		dtype.DecodeF32(out, t.Data)
	case DTypeF16:
		dtype.DecodeF16(out, t.Data)
	case DTypeBF16:
		dtype.DecodeBF16(out, t.Data)
	case DTypeF8E4M3:
		dtype.DecodeE4M3(out, t.Data, 1)
	default:
		panic(fmt.Sprintf("weights: tensor %q: Float32 of unsupported dtype %v", t.Name, t.DType))
	}
	return out
}

// mappedFile is one memory-mapped safetensors file.
type mappedFile struct {
	path    string
	data    []byte
	release func() error
}

// tensorRef locates one tensor's record in one of the set's files.
type tensorRef struct {
	file  *mappedFile
	entry headerEntry
}

// fileName is the base name of the file holding the tensor (its shard), for error messages.
func (r tensorRef) fileName() string { return filepath.Base(r.file.path) }

// TensorSet is the tensors of a checkpoint, memory-mapped from one or more safetensors files. It is
// safe for concurrent reads; Close unmaps every file and invalidates the Data of every Tensor it
// returned.
type TensorSet struct {
	tensors map[string]tensorRef
	names   []string
	files   []*mappedFile
}

// OpenSafetensors opens the weights of the model folder dir: model.safetensors when present (as
// transformers prefers it), otherwise the shards listed by model.safetensors.index.json.
func OpenSafetensors(dir string) (*TensorSet, error) {
	single := filepath.Join(dir, SafetensorsFile)
	if _, err := os.Stat(single); err == nil {
		return OpenSafetensorsFiles(single)
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("weights: %w", err)
	}
	index := filepath.Join(dir, SafetensorsIndexFile)
	if _, err := os.Stat(index); errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("weights: %s: neither %s nor %s: %w", dir, SafetensorsFile, SafetensorsIndexFile, fs.ErrNotExist)
	}
	return OpenSafetensorsIndex(index)
}

// OpenSafetensorsFiles opens one or more safetensors files as one set; a tensor name may appear in
// only one of them.
func OpenSafetensorsFiles(paths ...string) (*TensorSet, error) {
	s := &TensorSet{tensors: make(map[string]tensorRef)}
	for _, path := range paths {
		if err := s.add(path); err != nil {
			s.Close()
			return nil, fmt.Errorf("weights: %w", err)
		}
	}
	s.names = make([]string, 0, len(s.tensors))
	for name := range s.tensors {
		s.names = append(s.names, name)
	}
	sort.Strings(s.names)
	return s, nil
}

// OpenSafetensorsIndex opens the shards listed by a model.safetensors.index.json. The index's
// weight_map and the shards' contents must agree exactly: a listed tensor missing from its shard, or a
// shard tensor the map does not list, is an error naming it.
func OpenSafetensorsIndex(indexPath string) (*TensorSet, error) {
	data, err := ReadFile(indexPath)
	if err != nil {
		return nil, fmt.Errorf("weights: %w", err)
	}
	var index struct {
		WeightMap map[string]string `json:"weight_map"`
	}
	if err := json.Unmarshal(data, &index); err != nil {
		return nil, fmt.Errorf("weights: %s: %w: %w", indexPath, ErrInvalid, err)
	}
	if len(index.WeightMap) == 0 {
		return nil, fmt.Errorf("weights: %s: %w: empty or missing weight_map", indexPath, ErrInvalid)
	}
	dir := filepath.Dir(indexPath)
	var shards []string
	for name, shard := range index.WeightMap {
		if shard == "" || shard != filepath.Base(shard) || shard == "." || shard == ".." || strings.ContainsAny(shard, `/\`) {
			return nil, fmt.Errorf("weights: %s: %w: tensor %q: shard %q is not a file name in the folder", indexPath, ErrInvalid, name, shard)
		}
		if !slices.Contains(shards, shard) {
			shards = append(shards, shard)
		}
	}
	sort.Strings(shards)
	paths := make([]string, len(shards))
	for i, shard := range shards {
		paths[i] = filepath.Join(dir, shard)
	}
	s, err := OpenSafetensorsFiles(paths...)
	if err != nil {
		return nil, err
	}
	var problems []error
	for name, shard := range index.WeightMap {
		ref, ok := s.tensors[name]
		switch {
		case !ok:
			problems = append(problems, fmt.Errorf("tensor %q listed in shard %s: %w", name, shard, ErrTensorNotFound))
		case ref.fileName() != shard:
			problems = append(problems, fmt.Errorf("%w: tensor %q is listed in shard %s but stored in %s", ErrInvalid, name, shard, ref.fileName()))
		}
	}
	for _, name := range s.names {
		if _, ok := index.WeightMap[name]; !ok {
			problems = append(problems, fmt.Errorf("tensor %q in %s is not in the weight_map: %w", name, s.tensors[name].fileName(), ErrUnexpectedTensor))
		}
	}
	if len(problems) > 0 {
		s.Close()
		sortErrors(problems)
		return nil, fmt.Errorf("weights: %s: %w", indexPath, errors.Join(problems...))
	}
	return s, nil
}

func sortErrors(errs []error) {
	sort.Slice(errs, func(i, j int) bool { return errs[i].Error() < errs[j].Error() })
}

// add maps one file and registers its tensors.
func (s *TensorSet) add(path string) error {
	data, release, err := mapFile(path)
	if err != nil {
		return err
	}
	f := &mappedFile{path: path, data: data, release: release}
	s.files = append(s.files, f)
	h, err := parseHeader(data)
	if err != nil {
		return fmt.Errorf("safetensors %s: %w", path, err)
	}
	for _, e := range h.Entries {
		if prev, dup := s.tensors[e.Name]; dup {
			return fmt.Errorf("safetensors %s: %w: tensor %q is also in %s", path, ErrInvalid, e.Name, prev.file.path)
		}
		s.tensors[e.Name] = tensorRef{file: f, entry: e}
	}
	return nil
}

// Names returns the names of all tensors in the set, sorted. The caller may modify the slice.
func (s *TensorSet) Names() []string {
	return slices.Clone(s.names)
}

// Get returns the tensor called name. The error wraps ErrTensorNotFound when there is none, and
// ErrUnsupported when its dtype is one gollm cannot read (e.g. I64); both name the tensor.
func (s *TensorSet) Get(name string) (*Tensor, error) {
	ref, ok := s.tensors[name]
	if !ok {
		return nil, fmt.Errorf("weights: tensor %q: %w", name, ErrTensorNotFound)
	}
	e := ref.entry
	if !e.DType.Valid() {
		return nil, fmt.Errorf("weights: %s: tensor %q: dtype %s: %w", ref.file.path, name, e.DTypeName, ErrUnsupported)
	}
	if ref.file.data == nil {
		return nil, fmt.Errorf("weights: tensor %q: %w", name, ErrClosed)
	}
	return &Tensor{
		Name:  name,
		DType: e.DType,
		Shape: slices.Clone(e.Shape),
		Data:  ref.file.data[e.Begin:e.End:e.End],
	}, nil
}

// Close unmaps the set's files. Tensors obtained from the set must not be used afterwards. Closing
// twice is harmless.
func (s *TensorSet) Close() error {
	var errs []error
	for _, f := range s.files {
		if f.data == nil {
			continue
		}
		if err := f.release(); err != nil {
			errs = append(errs, fmt.Errorf("weights: unmap %s: %w", f.path, err))
		}
		f.data = nil
	}
	return errors.Join(errs...)
}
