package weights

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
)

// ErrNotRegular marks a model file that is not a regular file (nor a symbolic link to one): a FIFO,
// a device, a socket or a directory. Opening a FIFO for reading blocks until a writer appears, and
// reading a device such as /dev/zero never ends, so such a file is refused before it is opened for
// reading.
var ErrNotRegular = errors.New("not a regular file")

// OpenFile opens a model file for reading. Only regular files, and symbolic links to them, are
// opened: anything else is refused at once with an error wrapping ErrNotRegular, without blocking.
// The file is checked before it is opened (os.Stat follows links) and again through the open
// descriptor, which is opened without blocking, so that a file swapped for a FIFO in between is
// refused too. A missing file gives an error wrapping fs.ErrNotExist.
func OpenFile(path string) (*os.File, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if !st.Mode().IsRegular() {
		return nil, notRegular(path, st.Mode())
	}
	f, err := openNonBlocking(path)
	if err != nil {
		return nil, err
	}
	if st, err = f.Stat(); err != nil || !st.Mode().IsRegular() {
		f.Close()
		if err == nil {
			err = notRegular(path, st.Mode())
		}
		return nil, err
	}
	return f, nil
}

// ReadFile reads a whole model file (a configuration, a tokenizer, a template) as os.ReadFile does,
// opening it with OpenFile: anything but a regular file is refused at once.
func ReadFile(path string) ([]byte, error) {
	f, err := OpenFile(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	buf.Grow(int(min(st.Size(), 1<<30)) + bytes.MinRead)
	if _, err := buf.ReadFrom(f); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

func notRegular(path string, mode fs.FileMode) error {
	kind := "special file"
	switch {
	case mode.IsDir():
		kind = "directory"
	case mode&fs.ModeNamedPipe != 0:
		kind = "FIFO"
	case mode&fs.ModeSocket != 0:
		kind = "socket"
	case mode&fs.ModeDevice != 0:
		kind = "device"
	}
	return &fs.PathError{Op: "open", Path: path, Err: fmt.Errorf("%w (a %s)", ErrNotRegular, kind)}
}
