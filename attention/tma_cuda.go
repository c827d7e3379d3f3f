//go:build cuda

package attention

import (
	"sync"

	"github.com/gollm/gollm/internal/cuda"
)

// kvTensorMaps holds the tensor maps through which the Hopper kernels (prefill_sm90.cu) copy a paged
// cache's pages, by cache address and shape: encoding one is a driver call, and a model's layers call
// on the same few caches step after step.
type kvTensorMaps struct {
	mu sync.Mutex
	m  map[kvMapKey]cuda.TensorMap
}

type kvMapKey struct {
	base                        cuda.DevicePtr
	dt                          cuda.DataType
	headDim, kvHeads, blockSize int
}

// kvMapsMax bounds the maps held; past it they are encoded afresh (callers that allocate a cache a
// call, as tests do, would otherwise grow the map without end).
const kvMapsMax = 1024

// get returns the tensor map of cache base ([pages][blockSize][kvHeads][headDim] of dt) as the kernels
// read it: 4-D (headDim, kvHeads, blockSize, pages). 16-bit pages: the box one page of one KV head and 64
// columns (128 bytes, the 128-byte swizzle). FP8 pages (dt cuda.E4M3): the box one page of one KV head,
// all headDim codes of a row, unswizzled (the converters read the codes as rows). The pages dimension is
// what an int32 block table can name: the kernels copy only pages their tables hold.
func (c *kvTensorMaps) get(dev *cuda.Device, dt cuda.DataType, base cuda.DevicePtr, headDim, kvHeads, blockSize int) (cuda.TensorMap, error) {
	key := kvMapKey{base, dt, headDim, kvHeads, blockSize}
	c.mu.Lock()
	defer c.mu.Unlock()
	if m, ok := c.m[key]; ok {
		return m, nil
	}
	row, encode, box := int64(headDim)*2, dev.EncodeTiled, []int{64, 1, blockSize, 1}
	if dt == cuda.E4M3 {
		row, encode, box = int64(headDim), dev.EncodeTiledLinear, []int{headDim, 1, blockSize, 1}
	}
	m, err := encode(dt, base,
		[]int64{int64(headDim), int64(kvHeads), int64(blockSize), 1 << 31},
		[]int64{row, int64(kvHeads) * row, int64(blockSize*kvHeads) * row},
		box)
	if err != nil {
		return m, err
	}
	if c.m == nil || len(c.m) >= kvMapsMax {
		c.m = map[kvMapKey]cuda.TensorMap{}
	}
	c.m[key] = m
	return m, nil
}

// pair returns the maps of a call's K and V caches (get's, each): pages of dt, the queries' 16-bit type,
// or of e4m3 codes with kvFP8.
func (c *kvTensorMaps) pair(dev *cuda.Device, dt cuda.DataType, kvFP8 bool, kCache, vCache cuda.DevicePtr, headDim, kvHeads, blockSize int) (k, v cuda.TensorMap, err error) {
	if kvFP8 {
		dt = cuda.E4M3
	}
	if k, err = c.get(dev, dt, kCache, headDim, kvHeads, blockSize); err == nil {
		v, err = c.get(dev, dt, vCache, headDim, kvHeads, blockSize)
	}
	return k, v, err
}
