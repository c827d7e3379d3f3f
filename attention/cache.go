package attention

import "fmt"

// Cache holds one layer's paged K and V, each [NumBlocks][BlockSize][NumKVHeads][HeadDim] float32.
//
// A token's K (and V) for every KV head lives at one slot, slot = block*BlockSize + offset, where block
// is a physical block id taken from a sequence's block table and offset its position within the page.
// The row of KV head h at slot s starts at (s*NumKVHeads + h)*HeadDim.
type Cache struct {
	NumBlocks, BlockSize, NumKVHeads, HeadDim int
	K, V                                      []float32
}

// NewCache allocates a zeroed cache of numBlocks pages of blockSize tokens. It panics on a non-positive
// dimension (a programmer error).
func NewCache(numBlocks, blockSize, numKVHeads, headDim int) *Cache {
	if numBlocks <= 0 || blockSize <= 0 || numKVHeads <= 0 || headDim <= 0 {
		panic(fmt.Sprintf("attention: NewCache(%d, %d, %d, %d): dimensions must be positive",
			numBlocks, blockSize, numKVHeads, headDim))
	}
	n := numBlocks * blockSize * numKVHeads * headDim
	return &Cache{
		NumBlocks:  numBlocks,
		BlockSize:  blockSize,
		NumKVHeads: numKVHeads,
		HeadDim:    headDim,
		K:          make([]float32, n),
		V:          make([]float32, n),
	}
}

// NumSlots is the number of token slots in the cache, NumBlocks*BlockSize.
func (c *Cache) NumSlots() int { return c.NumBlocks * c.BlockSize }

// Slot returns the slot of logical position pos of a sequence whose pages are blockTable (physical block
// ids in logical order): blockTable[pos/blockSize]*blockSize + pos%blockSize.
func Slot(blockTable []int32, blockSize, pos int) int32 {
	return blockTable[pos/blockSize]*int32(blockSize) + int32(pos%blockSize)
}

// Write stores the K and V rows of len(slots) tokens: k and v are [len(slots)][NumKVHeads][HeadDim], and
// token i goes to slots[i]. A negative slot marks a padding token, which is skipped. It panics when k or v
// is too short or a slot is out of range (programmer errors).
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
		copy(c.K[dst:dst+row], k[i*row:(i+1)*row])
		copy(c.V[dst:dst+row], v[i*row:(i+1)*row])
	}
}
