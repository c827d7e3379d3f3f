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
)

// String returns the safetensors name of d ("F32", "F16", "BF16").
func (d DType) String() string {
	switch d {
	case DTypeF32:
		return "F32"
	case DTypeF16:
		return "F16"
	case DTypeBF16:
		return "BF16"
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
	}
	return 0
}

// Valid reports whether d is one of the supported types.
func (d DType) Valid() bool { return d.Size() != 0 }
