//go:build !unix

package weights

import "os"

// mapFile reads the file at path into memory where memory mapping is not available.
func mapFile(path string) (data []byte, release func() error, err error) {
	data, err = os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	return data, func() error { return nil }, nil
}
