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
		{16, 4096, 1, 0}, {3, 100000, 4, 0}, {1, 600, 1, 0}, {1, 513, 8, 64},
		{1, 1024, 8, 64}, {1, 2048, 8, 64}, {4, 1024, 8, 128}, {8, 1024, 8, 512},
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
			// The floor: minSplitTokens, or one tile where partitions that long leave a tenth of the SMs idle.
			floor := minSplitTokens
			if 10*rows*ceilDiv(longest, minSplitTokens) < 9*sms {
				floor = cudaTileTokens
			}
			switch {
			case got%cudaTileTokens != 0:
				t.Errorf("bound %d is not whole tiles", got)
			case got < floor:
				t.Errorf("bound %d below %d", got, floor)
			case parts > maxSplitPartitions:
				t.Errorf("%d partitions", parts)
			case rows*parts > sms*perSM && got > floor:
				t.Errorf("%d programs on %d slots", rows*parts, sms*perSM)
			}
			// One more partition would break a limit.
			more := parts + 1
			next := roundUp(ceilDiv(longest, more), cudaTileTokens)
			if next >= floor && more <= maxSplitPartitions && rows*more <= sms*perSM && ceilDiv(longest, next) == more {
				t.Errorf("bound %d (%d partitions) but %d partitions of %d fit", got, parts, more, next)
			}
		})
	}
}
