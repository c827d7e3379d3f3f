package kvcache

// Slot returns the cache slot of token position pos of a sequence with the given block table:
// table[pos/blockSize]*blockSize + pos%blockSize. The position must be covered by the table.
func Slot(table []int32, blockSize, pos int) int32 {
	return table[pos/blockSize]*int32(blockSize) + int32(pos%blockSize)
}

// SlotMapping appends to dst the cache slot of each token position in [start, end) of a sequence
// with the given block table and returns the extended slice. The model writes the KV of the i-th
// token of a step to slot dst[i]. The positions must be covered by the table.
func SlotMapping(dst []int32, table []int32, blockSize, start, end int) []int32 {
	dst = growInt32(dst, end-start)
	for pos := start; pos < end; {
		base := table[pos/blockSize] * int32(blockSize)
		off := pos % blockSize
		for ; off < blockSize && pos < end; off, pos = off+1, pos+1 {
			dst = append(dst, base+int32(off))
		}
	}
	return dst
}

// growInt32 makes room for n more elements without changing len(s).
func growInt32(s []int32, n int) []int32 {
	if n <= 0 || cap(s)-len(s) >= n {
		return s
	}
	grown := make([]int32, len(s), len(s)+n)
	copy(grown, s)
	return grown
}
