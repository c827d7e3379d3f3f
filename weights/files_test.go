//go:build unix

package weights

import (
	"errors"
	"math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// TestOpenSpecialFiles puts a FIFO, a directory, a socket or a device where Open reads a model file,
// and a symbolic link to a FIFO: Open must refuse each at once (a FIFO opened for reading waits for a
// writer forever), naming the file, while a symbolic link to a regular file still opens.
func TestOpenSpecialFiles(t *testing.T) {
	dims := tinyDims{V: 5, H: 4, I: 6, L: 1, Hq: 2, Hkv: 1}
	rng := rand.New(rand.NewPCG(3, 7))
	fifo := func(t *testing.T, path string) {
		os.Remove(path)
		if err := syscall.Mkfifo(path, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	tests := []struct {
		name  string
		file  string
		setup func(t *testing.T, path string)
	}{
		{"FIFO config", ConfigFile, fifo},
		{"FIFO generation config", GenerationConfigFile, fifo},
		{"FIFO tokenizer config", TokenizerConfigFile, fifo},
		{"FIFO chat template", ChatTemplateFile, fifo},
		{"FIFO weights", SafetensorsFile, fifo},
		{"link to a FIFO", ConfigFile, func(t *testing.T, path string) {
			target := filepath.Join(t.TempDir(), "pipe")
			fifo(t, target)
			os.Remove(path)
			if err := os.Symlink(target, path); err != nil {
				t.Fatal(err)
			}
		}},
		{"directory config", ConfigFile, func(t *testing.T, path string) {
			os.Remove(path)
			if err := os.Mkdir(path, 0o755); err != nil {
				t.Fatal(err)
			}
		}},
		{"device config", ConfigFile, func(t *testing.T, path string) {
			os.Remove(path)
			if err := os.Symlink("/dev/zero", path); err != nil {
				t.Fatal(err)
			}
		}},
		{"socket config", ConfigFile, func(t *testing.T, path string) {
			os.Remove(path)
			ln, err := net.Listen("unix", path)
			if err != nil {
				t.Skipf("no unix socket here: %v", err)
			}
			t.Cleanup(func() { ln.Close() })
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			dir := writeModelFolder(t, dims.config(), dims.tensors(rng, DTypeF32))
			path := filepath.Join(dir, tc.file)
			tc.setup(t, path)
			done := make(chan error, 1)
			go func() {
				f, err := Open(dir)
				if err == nil {
					f.Close()
				}
				done <- err
			}()
			select {
			case err := <-done:
				if !errors.Is(err, ErrNotRegular) {
					t.Fatalf("Open: %v, want an error wrapping ErrNotRegular", err)
				}
				checkError(t, err, ErrNotRegular, tc.file)
			case <-time.After(time.Second):
				// Unblock the reader so that the test can end: open the FIFO for writing.
				if w, err := os.OpenFile(path, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
					w.Close()
				}
				t.Fatal("Open still blocked after a second")
			}
		})
	}
	t.Run("link to a regular file", func(t *testing.T) {
		dir := writeModelFolder(t, dims.config(), dims.tensors(rng, DTypeF32))
		moved := filepath.Join(t.TempDir(), "config.json")
		if err := os.Rename(filepath.Join(dir, ConfigFile), moved); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(moved, filepath.Join(dir, ConfigFile)); err != nil {
			t.Fatal(err)
		}
		f, err := Open(dir)
		if err != nil {
			t.Fatal(err)
		}
		f.Close()
	})
}

// TestReadFile reads regular files of several sizes whole.
func TestReadFile(t *testing.T) {
	for _, n := range []int{0, 1, 511, 512, 513, 100_000} {
		path := filepath.Join(t.TempDir(), "f")
		want := make([]byte, n)
		for i := range want {
			want[i] = byte(i * 7)
		}
		if err := os.WriteFile(path, want, 0o644); err != nil {
			t.Fatal(err)
		}
		got, err := ReadFile(path)
		if err != nil || string(got) != string(want) {
			t.Errorf("%d bytes: got %d bytes, err %v", n, len(got), err)
		}
	}
	if _, err := ReadFile(filepath.Join(t.TempDir(), "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v, want ErrNotExist", err)
	}
}
