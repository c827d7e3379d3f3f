package model

import "github.com/gollm/gollm/weights"

// KVLayout says where a model's layers keep their K and V in the paged pool. The layers form KV groups
// of equal size: a sequence holds one block table per group (Step.BlockTables for group 0,
// Step.GroupBlockTables for the others), and every block of the pool is one page in each of Slots page
// arrays, so a block serves any group. Layer l's K/V live in page array Slot[l] of the blocks of group
// Group[l]'s tables. A model without sliding windows has one group of all its layers (Slot[l] == l).
//
// Layers that slide and layers that do not are never in one group: a sliding group's pages behind the
// window can go back to the pool (kvcache.Group.Window), which is what lets a long-context windowed model
// hold more sequences. The groups are as large as the smaller of the two kinds (vLLM's choice), so that
// the groups are few and the last group of a kind may leave some page arrays unused: Gemma-3-12B's 8 full
// and 40 sliding layers make 6 groups of 8, Ministral-8B's 9 and 27 make 4 groups of 9, Gemma-3-4B's 5
// and 29 make 7 groups of 5 (the last sliding one with 4 layers). Groups without a window come first,
// to anchor the prefix cache.
type KVLayout struct {
	// Windows holds each group's window (0: none).
	Windows []int
	// Group and Slot hold each layer's group and page array.
	Group, Slot []int
	// Slots is the number of page arrays: the layers of the largest group.
	Slots int
}

// KVLayoutOf returns the KV layout of a model of config cfg.
func KVLayoutOf(cfg *weights.Config) KVLayout {
	n := cfg.NumHiddenLayers
	var full, sliding []int
	for l := range n {
		if cfg.LayerWindow(l) > 0 {
			sliding = append(sliding, l)
		} else {
			full = append(full, l)
		}
	}
	size := n
	if len(full) > 0 && len(sliding) > 0 {
		size = min(len(full), len(sliding))
	}
	lay := KVLayout{Group: make([]int, n), Slot: make([]int, n), Slots: size}
	for _, kind := range [][]int{full, sliding} {
		for i, l := range kind {
			if i%size == 0 {
				lay.Windows = append(lay.Windows, cfg.LayerWindow(l))
			}
			lay.Group[l], lay.Slot[l] = len(lay.Windows)-1, i%size
		}
	}
	return lay
}

// KVLayout returns the model's KV layout.
func (m *Model) KVLayout() KVLayout { return KVLayoutOf(m.cfg) }
