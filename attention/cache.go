package attention

import (
	"fmt"

	"github.com/gollm/gollm/internal/dtype"
)

// Cache holds one layer's paged K and V, each [NumBlocks][BlockSize][NumKVHeads][HeadDim]: float32
// (NewCache), or OCP FP8 e4m3 with a scale for K and one for V (NewFP8Cache).
//
// A token's K (and V) for every KV head lives at one slot, slot = block*BlockSize + offset, where block
// is a physical block id taken from a sequence's block table and offset its position within the page.
// The row of KV head h at slot s starts at (s*NumKVHeads + h)*HeadDim.
//
// In an FP8 cache the element x is stored as e4m3(x / scale), rounded to nearest even and saturated to
// ±448 (dtype.F32ToE4M3Sat, a NaN kept NaN), and read back as float32(e4m3) · scale: KScale for K,
// VScale for V. That is the arithmetic the GPU kernels must reproduce. The pages hold a quarter of the
// bytes of float32 ones (half of bfloat16's).
type Cache struct {
	NumBlocks, BlockSize, NumKVHeads, HeadDim int
	// K and V hold the pages of a float32 cache (nil in an FP8 one).
	K, V []float32
	// K8 and V8 hold the e4m3 pages of an FP8 cache (nil in a float32 one).
	K8, V8 []uint8
	// KScale and VScale are the scales of an FP8 cache's K and V (1 from NewFP8Cache; WithScales gives
	// a layer its own); a float32 cache ignores them.
	KScale, VScale float32
}

// NewCache allocates a zeroed float32 cache of numBlocks pages of blockSize tokens. It panics on a
// non-positive dimension (a programmer error).
func NewCache(numBlocks, blockSize, numKVHeads, headDim int) *Cache {
	n := cacheElements(numBlocks, blockSize, numKVHeads, headDim, "NewCache")
	return &Cache{
		NumBlocks:  numBlocks,
		BlockSize:  blockSize,
		NumKVHeads: numKVHeads,
		HeadDim:    headDim,
		K:          make([]float32, n),
		V:          make([]float32, n),
	}
}

// NewFP8Cache allocates a zeroed FP8 e4m3 cache of numBlocks pages of blockSize tokens, with scales 1.
// It panics on a non-positive dimension (a programmer error).
func NewFP8Cache(numBlocks, blockSize, numKVHeads, headDim int) *Cache {
	n := cacheElements(numBlocks, blockSize, numKVHeads, headDim, "NewFP8Cache")
	return &Cache{
		NumBlocks:  numBlocks,
		BlockSize:  blockSize,
		NumKVHeads: numKVHeads,
		HeadDim:    headDim,
		K8:         make([]uint8, n),
		V8:         make([]uint8, n),
		KScale:     1,
		VScale:     1,
	}
}

func cacheElements(numBlocks, blockSize, numKVHeads, headDim int, who string) int {
	if numBlocks <= 0 || blockSize <= 0 || numKVHeads <= 0 || headDim <= 0 {
		panic(fmt.Sprintf("attention: %s(%d, %d, %d, %d): dimensions must be positive",
			who, numBlocks, blockSize, numKVHeads, headDim))
	}
	return numBlocks * blockSize * numKVHeads * headDim
}

// FP8 reports whether c holds e4m3 pages.
func (c *Cache) FP8() bool { return c.K8 != nil }

// ElementSize is the bytes of one stored K or V element: 4, or 1 in an FP8 cache.
func (c *Cache) ElementSize() int {
	if c.FP8() {
		return 1
	}
	return 4
}

// WithScales returns a view of c that shares its pages but has the K and V scales of one layer: the
// page arrays of a KV layout serve several layers (one per KV group), each with its own scales. It
// panics unless both are finite and positive (the loader checks a checkpoint's scales).
func (c *Cache) WithScales(k, v float32) *Cache {
	if !(k > 0 && v > 0) || k > 3.4e38 || v > 3.4e38 {
		panic(fmt.Sprintf("attention: Cache.WithScales(%v, %v): scales must be finite and positive", k, v))
	}
	view := *c
	view.KScale, view.VScale = k, v
	return &view
}

// NumSlots is the number of token slots in the cache, NumBlocks*BlockSize.
func (c *Cache) NumSlots() int { return c.NumBlocks * c.BlockSize }

// Slot returns the slot of logical position pos of a sequence whose pages are blockTable (physical block
// ids in logical order): blockTable[pos/blockSize]*blockSize + pos%blockSize.
func Slot(blockTable []int32, blockSize, pos int) int32 {
	return blockTable[pos/blockSize]*int32(blockSize) + int32(pos%blockSize)
}

// Write stores the K and V rows of len(slots) tokens: k and v are [len(slots)][NumKVHeads][HeadDim], and
// token i goes to slots[i] (in an FP8 cache as e4m3(x / KScale) and e4m3(x / VScale)). A negative slot
// marks a padding token, which is skipped. It panics when k or v is too short or a slot is out of range
// (programmer errors).
func (c *Cache) Write(k, v []float32, slots []int32) {
	row := c.NumKVHeads * c.HeadDim
	if len(k) < len(slots)*row || len(v) < len(slots)*row {
		panic(fmt.Sprintf("attention: Cache.Write: %d slots need %d values, have k %d, v %d",
			len(slots), len(slots)*row, len(k), len(v)))
	}
	numSlots := c.NumSlots()
	for i, slot := range slots {
		if slot < 0 {
			continue
		}
		if int(slot) >= numSlots {
			panic(fmt.Sprintf("attention: Cache.Write: slot %d of token %d out of range [0, %d)", slot, i, numSlots))
		}
		dst := int(slot) * row
		if c.FP8() {
			dtype.EncodeE4M3Sat(c.K8[dst:dst+row], k[i*row:(i+1)*row], c.KScale)
			dtype.EncodeE4M3Sat(c.V8[dst:dst+row], v[i*row:(i+1)*row], c.VScale)
			continue
		}
		copy(c.K[dst:dst+row], k[i*row:(i+1)*row])
		copy(c.V[dst:dst+row], v[i*row:(i+1)*row])
	}
}
