//go:build unix

package weights

import (
	"os"
	"syscall"
)

// openNonBlocking opens path read-only with O_NONBLOCK, so that opening a FIFO returns at once instead
// of waiting for a writer (OpenFile then refuses it). O_NONBLOCK changes nothing for regular files.
func openNonBlocking(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDONLY|syscall.O_NONBLOCK, 0)
}
