//go:build cuda

package model

import (
	"errors"
	"fmt"
	"log/slog"
	"os"

	"github.com/gollm/gollm/internal/cuda"
	"github.com/gollm/gollm/model/tp"
	"github.com/gollm/gollm/weights"
	"gorgonia.org/cu"
)

// tpShareGPU, set by tests, puts every rank of a tensor-parallel model on GPU 0, summing through host
// memory (hostCollective): NCCL refuses two ranks on one GPU, and this way a machine of one GPU still
// runs the sharded model's GPU arithmetic against the model run whole.
var tpShareGPU bool

// newCUDAGroup opens a GPU for each rank of comms (rank r on GPU r) and the NCCL communicators that
// join them, and returns the ranks' backend constructors (each rank's backend built without its KV
// pool, on its GPU, its AllReduceSum through its communicator).
func newCUDAGroup(cfg *weights.Config, opts Options, comms []tp.Communicator) (_ *rankGroup, err error) {
	size := len(comms)
	dt, err := computeDTypeFor(cfg, opts)
	if err != nil {
		return nil, err
	}
	count, err := cu.NumDevices()
	if err != nil {
		return nil, fmt.Errorf("device cuda: %w: %w", ErrNoCUDA, err)
	}
	if !tpShareGPU && size > count {
		return nil, fmt.Errorf("tensor parallel size %d exceeds the %d GPUs present", size, count)
	}
	var devs []*cuda.Device
	var nccl []*cuda.Comm
	var peers *peerGroup
	release := func() error {
		var errs []error
		if peers != nil {
			errs = append(errs, peers.close())
		}
		for _, c := range nccl {
			errs = append(errs, c.Close())
		}
		for _, d := range devs {
			errs = append(errs, d.Close())
		}
		return errors.Join(errs...)
	}
	defer func() {
		if err != nil {
			release()
		}
	}()
	for r := range size {
		ordinal := r
		if tpShareGPU {
			ordinal = 0
		}
		d, err := cuda.Open(ordinal) // one Device a rank, even on a shared GPU: ranks must not wait on each other's lock
		if err != nil {
			return nil, fmt.Errorf("rank %d: %w", r, err)
		}
		devs = append(devs, d)
	}
	colls := make([]deviceCollective, size)
	g := &rankGroup{sharing: 1}
	how, err := tpAllReduceMode()
	if err != nil {
		return nil, err
	}
	if tpShareGPU {
		// Every sum through the host. The one-shot kernel needs a GPU a rank: ranks on one GPU share its
		// primary context, where one rank's synchronizing driver call (cuMemFree) waits for another rank's
		// kernel, which waits for the first rank's next launch.
		if how == "peer" {
			return nil, fmt.Errorf("GOLLM_TP_ALLREDUCE=peer: the one-shot all-reduce needs a GPU a rank, and %d ranks share one", size)
		}
		g.sharing = size
		for r := range colls {
			colls[r] = &hostCollective{comm: comms[r]}
		}
	} else {
		lib, err := cuda.LoadNCCL()
		if err != nil {
			return nil, fmt.Errorf("tensor parallelism on GPUs needs NCCL (GOLLM_NCCL names its library): %w", err)
		}
		if nccl, err = lib.InitAll(devs); err != nil {
			return nil, err
		}
		limit := peerOneShotMax(size)
		if how != "nccl" {
			peers, err = newPeerGroup(devs, limit)
			if err != nil && how == "peer" {
				return nil, err
			}
			if err != nil {
				slog.Info("tensor parallelism: every all-reduce through NCCL", "reason", err)
				peers = nil
			}
		}
		for r := range colls {
			colls[r] = ncclCollective{nccl[r]}
			if peers != nil {
				colls[r] = &peerCollective{g: peers, rank: r, limit: limit, fallback: colls[r]}
			}
		}
	}
	g.backends = func(r int) NewBackendFunc {
		build := newCUDABackendFunc(cudaConfig{dtype: dt, dev: devs[r], noGraphs: opts.DisableCUDAGraphs,
			sharedPrefix: opts.SharedPrefix, coll: colls[r]})
		return func(s Shape) (Backend, error) {
			s.NumBlocks = 0 // sized once every rank's weights are in (sizeKVRanks)
			return build(s)
		}
	}
	g.abort = func(err error) {
		for _, c := range colls {
			c.abort(err)
		}
	}
	g.close = release
	return g, nil
}

// tpAllReduceMode reads GOLLM_TP_ALLREDUCE, how a GPU group sums: "" or "nccl" NCCL for every sum
// (through host memory on a shared GPU), "auto" one-shot through peer memory for small sums where every
// two GPUs have a peer-to-peer path and NCCL for the rest, "peer" the same but failing where peer access
// is missing. NCCL is the default until the one-shot kernel has been measured beside it on lent GPUs
// (device-run.sh's tp and tpgroup sections).
func tpAllReduceMode() (string, error) {
	switch v := os.Getenv("GOLLM_TP_ALLREDUCE"); v {
	case "", "nccl":
		return "nccl", nil
	case "peer", "auto":
		return v, nil
	default:
		return "", fmt.Errorf("GOLLM_TP_ALLREDUCE=%q: want auto, peer or nccl", v)
	}
}
