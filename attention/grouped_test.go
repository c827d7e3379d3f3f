package attention

import "testing"

// BenchmarkDecodeGrouped reports the K/V bytes read per second (MB/s) of the grouped algorithm.
func BenchmarkDecodeGrouped(b *testing.B) {
	for _, s := range benchShapes {
		b.Run(s.String(), func(b *testing.B) {
			bd := newBenchDecode(b, s)
			b.SetBytes(bd.kvBytes)
			for b.Loop() {
				DecodeGrouped(bd.out, bd.q, bd.numHeads, bd.scale, bd.cache, bd.tables, bd.lens)
			}
		})
	}
}
