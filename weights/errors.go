package weights

import "errors"

// Sentinel errors that callers may branch on with errors.Is.
var (
	// ErrUnsupported marks a well-formed input that gollm cannot run exactly (an architecture, rope
	// type, dtype or option it does not implement).
	ErrUnsupported = errors.New("not supported")
	// ErrInvalid marks malformed input: bad JSON, a missing or out-of-range field, a corrupt
	// safetensors header.
	ErrInvalid = errors.New("invalid")
	// ErrTensorNotFound marks a tensor name missing from a TensorSet.
	ErrTensorNotFound = errors.New("tensor not found")
	// ErrUnexpectedTensor marks a tensor a checkpoint holds that the model does not use.
	ErrUnexpectedTensor = errors.New("unexpected tensor")
	// ErrClosed marks use of a TensorSet after Close.
	ErrClosed = errors.New("tensor set closed")
	// ErrShapeMismatch marks a tensor whose shape differs from the one the config implies.
	ErrShapeMismatch = errors.New("shape mismatch")
)
