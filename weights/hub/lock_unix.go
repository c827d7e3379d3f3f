//go:build unix

package hub

import (
	"context"
	"errors"
	"os"
	"syscall"
	"time"
)

// lockFile takes an exclusive flock(2) on path, the kind of lock huggingface_hub's filelock takes on
// the same file, waiting for it (polling, so that ctx can end the wait); waiting, when not nil, is
// called once when the lock is found held, before the wait. unlock releases it; the file stays, as
// huggingface_hub leaves it. A lock whose holder died was released by the kernel with it.
func lockFile(ctx context.Context, path string, waiting func()) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return func() {
				syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
				f.Close()
			}, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) && !errors.Is(err, syscall.EINTR) {
			f.Close()
			return nil, err
		}
		if waiting != nil {
			waiting()
			waiting = nil
		}
		if err := sleep(ctx, 100*time.Millisecond); err != nil {
			f.Close()
			return nil, err
		}
	}
}
