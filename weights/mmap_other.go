//go:build !unix

package weights

// mapFile reads the file at path into memory where memory mapping is not available.
func mapFile(path string) (data []byte, release func() error, err error) {
	data, err = ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	return data, func() error { return nil }, nil
}
