//go:build !unix

package hub

import (
	"context"
	"os"
)

// lockFile creates path and returns at once: without flock(2) there is no lock that huggingface_hub
// shares, so concurrent pulls of one blob are not kept apart here; a file two writers interleaved
// fails its checksum and is deleted, never renamed into place.
func lockFile(_ context.Context, path string, _ func()) (unlock func(), err error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	return func() { f.Close() }, nil
}
