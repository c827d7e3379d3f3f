package weights

import "fmt"

// DType is the element type of a tensor or the compute type a config asks for. Only the types gollm
// can read are named; the zero value is DTypeInvalid.
type DType int

// The element types gollm reads.
const (
	DTypeInvalid DType = iota // the zero value: no type
	DTypeF32                  // IEEE binary32 ("F32", "float32")
	DTypeF16                  // IEEE binary16 ("F16", "float16")
	DTypeBF16                 // bfloat16 ("BF16", "bfloat16")
	// DTypeF8E4M3 is OCP FP8 E4M3 ("F8_E4M3", PyTorch's float8_e4m3fn): the weights of FP8 checkpoints,
	// meaningful only with their scales (see Quantization).
	DTypeF8E4M3
)

// String returns the safetensors name of d ("F32", "F16", "BF16", "F8_E4M3").
func (d DType) String() string {
	switch d {
	case DTypeF32:
		return "F32"
	case DTypeF16:
		return "F16"
	case DTypeBF16:
		return "BF16"
	case DTypeF8E4M3:
		return "F8_E4M3"
	}
	return fmt.Sprintf("DType(%d)", int(d))
}

// Size returns the size of one element of type d in bytes, or 0 for an invalid type.
func (d DType) Size() int {
	switch d {
	case DTypeF32:
		return 4
	case DTypeF16, DTypeBF16:
		return 2
	case DTypeF8E4M3:
		return 1
	}
	return 0
}

// Valid reports whether d is one of the supported types.
func (d DType) Valid() bool { return d.Size() != 0 }
