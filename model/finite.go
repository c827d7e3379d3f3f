package model

import (
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"runtime"

	"github.com/gollm/gollm/internal/dtype"
	"github.com/gollm/gollm/internal/fanout"
	"github.com/gollm/gollm/weights"
)

// ErrNonFiniteWeight is wrapped by Load's errors when a parameter of the checkpoint holds NaN or ±Inf:
// such a weight makes every logit NaN, and the model would answer nothing but garbage. Options.
// SkipWeightCheck skips the check.
var ErrNonFiniteWeight = errors.New("weight is not finite")

// Exponent masks: an element is NaN or ±Inf exactly when all its exponent bits are set.
const (
	expF32  = 0x7f800000
	expF16  = 0x7c00
	expBF16 = 0x7f80
)

// checkFinite scans t's elements for NaN and ±Inf, eight bytes at a time and over several goroutines
// for large tensors (the scan reads the checkpoint's memory once, at memory speed: a small share of
// loading it). The error wraps ErrNonFiniteWeight and names the count and the first such element.
func checkFinite(t *weights.Tensor) error {
	size := t.DType.Size()
	if size == 0 || len(t.Data)%size != 0 {
		return nil // Upload refuses these
	}
	const chunk = 8 << 20 // bytes per goroutine's piece; a multiple of 8
	pieces := (len(t.Data) + chunk - 1) / chunk
	type found struct {
		count int
		first int // element index, -1 when none
	}
	results := make([]found, pieces)
	scan := func(p int) {
		lo := p * chunk
		hi := min(lo+chunk, len(t.Data))
		n, first := scanNonFinite(t.DType, t.Data[lo:hi])
		if first >= 0 {
			first += lo / size
		}
		results[p] = found{n, first}
	}
	fanout.Each(runtime.GOMAXPROCS(0), pieces, scan)
	total, first := 0, -1
	for _, r := range results {
		total += r.count
		if first < 0 {
			first = r.first
		}
	}
	if total == 0 {
		return nil
	}
	return fmt.Errorf("tensor %q: %w: %d of its %d values are NaN or infinite, the first (%v) at %v",
		t.Name, ErrNonFiniteWeight, total, len(t.Data)/size, elementValue(t.DType, t.Data, first), elementIndex(t.Shape, first))
}

// scanNonFinite counts the non-finite elements of data (little-endian elements of d) and returns the
// index of the first, or -1.
func scanNonFinite(d weights.DType, data []byte) (count, first int) {
	first = -1
	size := d.Size()
	var mask, ones, highs uint64 // an element's exponent bits in every lane; the lanes' low and high bits
	switch d {
	case weights.DTypeF32:
		mask, ones, highs = expF32|expF32<<32, 1|1<<32, 1<<31|1<<63
	case weights.DTypeF16:
		mask, ones, highs = expF16*0x0001000100010001, 0x0001000100010001, 0x8000800080008000
	case weights.DTypeBF16:
		mask, ones, highs = expBF16*0x0001000100010001, 0x0001000100010001, 0x8000800080008000
	case weights.DTypeF8E4M3: // NaN is S.1111.111: every bit but the sign set
		mask, ones, highs = 0x7F7F7F7F7F7F7F7F, 0x0101010101010101, 0x8080808080808080
	default:
		return 0, -1
	}
	words := len(data) / 8
	for w := range words {
		// v has a zero lane exactly where an element has every exponent bit set; no lane of v has its
		// high bit set (the masks leave it clear), so the classic zero-lane test is exact in saying
		// whether any lane is zero.
		v := binary.LittleEndian.Uint64(data[8*w:])&mask ^ mask
		if (v-ones)&^v&highs == 0 {
			continue
		}
		for i := 8 * w; i < 8*w+8; i += size {
			if !finiteAt(d, data, i) {
				if first < 0 {
					first = i / size
				}
				count++
			}
		}
	}
	for i := 8 * words; i+size <= len(data); i += size {
		if !finiteAt(d, data, i) {
			if first < 0 {
				first = i / size
			}
			count++
		}
	}
	return count, first
}

// finiteAt reports whether the element of d at byte offset i of data is finite.
func finiteAt(d weights.DType, data []byte, i int) bool {
	switch d {
	case weights.DTypeF32:
		return binary.LittleEndian.Uint32(data[i:])&expF32 != expF32
	case weights.DTypeF16:
		return binary.LittleEndian.Uint16(data[i:])&expF16 != expF16
	case weights.DTypeBF16:
		return binary.LittleEndian.Uint16(data[i:])&expBF16 != expBF16
	case weights.DTypeF8E4M3:
		return data[i]&0x7F != 0x7F
	}
	return true
}

// elementValue returns element k of data as a float64 (NaN, +Inf or -Inf for the ones checkFinite
// reports).
func elementValue(d weights.DType, data []byte, k int) float64 {
	switch d {
	case weights.DTypeF32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(data[4*k:])))
	case weights.DTypeF16:
		return float64(dtype.F16ToF32(binary.LittleEndian.Uint16(data[2*k:])))
	case weights.DTypeBF16:
		return float64(dtype.BF16ToF32(binary.LittleEndian.Uint16(data[2*k:])))
	case weights.DTypeF8E4M3:
		return float64(dtype.E4M3ToF32(data[k]))
	}
	return 0
}

// elementIndex writes flat index k as an index into shape: [row col] for a matrix.
func elementIndex(shape []int, k int) []int {
	idx := make([]int, len(shape))
	for i := len(shape) - 1; i >= 0; i-- {
		if shape[i] > 0 {
			idx[i] = k % shape[i]
			k /= shape[i]
		}
	}
	return idx
}
