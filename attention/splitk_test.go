package attention

import (
	"fmt"
	"testing"
)

// BenchmarkDecodeSplitK reports the K/V bytes read per second (MB/s) of split-k at a few partition sizes.
func BenchmarkDecodeSplitK(b *testing.B) {
	for _, s := range benchShapes {
		for _, part := range []int{256, 1024} {
			b.Run(fmt.Sprintf("%v_part%d", s, part), func(b *testing.B) {
				bd := newBenchDecode(b, s)
				b.SetBytes(bd.kvBytes)
				for b.Loop() {
					DecodeSplitK(bd.out, bd.q, bd.numHeads, bd.scale, bd.cache, bd.tables, bd.lens, part)
				}
			})
		}
	}
}
