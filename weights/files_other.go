//go:build !unix

package weights

import "os"

// openNonBlocking opens path read-only (OpenFile has checked it is a regular file).
func openNonBlocking(path string) (*os.File, error) { return os.Open(path) }
