package attention

import (
	"fmt"
	"testing"
)

// TestGPUMinPartitionTokens checks the GPU dispatcher's partition bound on the issue-6 shapes and a
// ragged batch: no split when batch × kv_heads nearly fills the SMs; otherwise whole 64-token tiles, at
// least minSplitTokens, at most maxSplitPartitions per context, at most one program per slot unless the
// minimum forces fewer, longer ones, and as many partitions as those limits allow.
func TestGPUMinPartitionTokens(t *testing.T) {
	const sms, perSM = 132, 2
	for _, tc := range []struct {
		batch, ctx, kvHeads int
		want                int // 0: only the properties
	}{
		{256, 256, 12, 272}, {16, 4096, 12, 4112}, {64, 1024, 2, 1040},
		{8, 8192, 12, 4096}, {4, 16384, 12, 3328}, {2, 32768, 12, 3008}, {1, 131072, 12, 6016},
		{32, 2048, 2, 512}, {1, 8192, 8, 512}, {1, 65536, 2, 1024}, {1, 131072, 8, 4032},
		{16, 4096, 1, 0}, {3, 100000, 4, 0}, {1, 600, 1, 0}, {1, 513, 8, 0},
	} {
		t.Run(fmt.Sprintf("b%d_ctx%d_kv%d", tc.batch, tc.ctx, tc.kvHeads), func(t *testing.T) {
			lens := make([]int32, tc.batch)
			for i := range lens {
				lens[i] = int32(tc.ctx - i%3) // slightly ragged
			}
			longest := tc.ctx
			got := gpuMinPartitionTokens(lens, tc.kvHeads, 16, sms, perSM)
			if tc.want != 0 && got != tc.want {
				t.Errorf("bound %d, want %d", got, tc.want)
			}
			rows := tc.batch * tc.kvHeads
			if 10*rows >= 9*sms {
				if got <= longest {
					t.Errorf("bound %d splits %d rows on %d SMs", got, rows, sms)
				}
				return
			}
			parts := ceilDiv(longest, got)
			switch {
			case got%cudaTileTokens != 0:
				t.Errorf("bound %d is not whole tiles", got)
			case got < minSplitTokens:
				t.Errorf("bound %d below %d", got, minSplitTokens)
			case parts > maxSplitPartitions:
				t.Errorf("%d partitions", parts)
			case rows*parts > sms*perSM && got > minSplitTokens:
				t.Errorf("%d programs on %d slots", rows*parts, sms*perSM)
			}
			// One more partition would break a limit.
			more := parts + 1
			next := roundUp(ceilDiv(longest, more), cudaTileTokens)
			if next >= minSplitTokens && more <= maxSplitPartitions && rows*more <= sms*perSM && ceilDiv(longest, next) == more {
				t.Errorf("bound %d (%d partitions) but %d partitions of %d fit", got, parts, more, next)
			}
		})
	}
}
