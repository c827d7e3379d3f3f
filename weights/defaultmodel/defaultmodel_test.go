package defaultmodel

import (
	"bytes"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
)

// checkFolder requires dir to hold exactly the model files, each byte-equal to the embedded one.
func checkFolder(t *testing.T, dir string) {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, fileNames) { // ReadDir sorts by name, as fileNames is
		t.Fatalf("%s holds %v, want %v", dir, names, fileNames)
	}
	for _, n := range fileNames {
		got, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		want, err := embedded.ReadFile("files/" + n)
		if err != nil {
			t.Fatal(err)
		}
		if len(want) == 0 {
			t.Fatalf("embedded %s is empty", n)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s: %d bytes on disk differ from the %d embedded", n, len(got), len(want))
		}
	}
}

// checkNoLeftovers requires root to hold only the model folder: no temporary or damaged copies.
func checkNoLeftovers(t *testing.T, root, dir string) {
	t.Helper()
	entries, err := os.ReadDir(root)
	if err != nil {
		t.Fatal(err)
	}
	if len(entries) != 1 || entries[0].Name() != filepath.Base(dir) {
		var names []string
		for _, e := range entries {
			names = append(names, e.Name())
		}
		t.Errorf("%s holds %v, want only %s", root, names, filepath.Base(dir))
	}
}

func TestMaterialize(t *testing.T) {
	root := filepath.Join(t.TempDir(), "gollm")
	dir, err := materialize(root)
	if err != nil {
		t.Fatal(err)
	}
	sum, err := digest()
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(root, "default-"+sum); dir != want || len(sum) != 12 {
		t.Errorf("dir %s, want %s (12 hex digits)", dir, want)
	}
	checkFolder(t, dir)
	checkNoLeftovers(t, root, dir)
}

// TestMaterializeIdempotent checks that a second call returns the same folder without rewriting it.
func TestMaterializeIdempotent(t *testing.T) {
	root := t.TempDir()
	first, err := materialize(root)
	if err != nil {
		t.Fatal(err)
	}
	// Backdate the files: a rewrite would give them a new modification time.
	old := time.Date(2000, 1, 1, 0, 0, 0, 0, time.UTC)
	for _, n := range fileNames {
		if err := os.Chtimes(filepath.Join(first, n), old, old); err != nil {
			t.Fatal(err)
		}
	}
	for range 3 {
		again, err := materialize(root)
		if err != nil {
			t.Fatal(err)
		}
		if again != first {
			t.Fatalf("second call gave %s, first %s", again, first)
		}
	}
	for _, n := range fileNames {
		fi, err := os.Stat(filepath.Join(first, n))
		if err != nil {
			t.Fatal(err)
		}
		if !fi.ModTime().Equal(old) {
			t.Errorf("%s was rewritten (modified %v)", n, fi.ModTime())
		}
	}
	checkFolder(t, first)
	checkNoLeftovers(t, root, first)
}

func TestMaterializeConcurrent(t *testing.T) {
	root := t.TempDir()
	const callers = 8
	dirs := make([]string, callers)
	errs := make([]error, callers)
	var wg sync.WaitGroup
	for i := range callers {
		wg.Go(func() { dirs[i], errs[i] = materialize(root) })
	}
	wg.Wait()
	for i := range callers {
		if errs[i] != nil {
			t.Fatalf("caller %d: %v", i, errs[i])
		}
		if dirs[i] != dirs[0] {
			t.Fatalf("caller %d got %s, caller 0 %s", i, dirs[i], dirs[0])
		}
	}
	checkFolder(t, dirs[0])
	checkNoLeftovers(t, root, dirs[0])
}

// TestMaterializeRepairs damages a written folder in the ways a cache cleaner or a crash elsewhere
// might, and requires the next call to restore it.
func TestMaterializeRepairs(t *testing.T) {
	tests := []struct {
		name   string
		damage func(dir string) error
	}{
		{"truncated", func(dir string) error {
			return os.Truncate(filepath.Join(dir, "model.safetensors"), 100)
		}},
		{"missing", func(dir string) error { return os.Remove(filepath.Join(dir, "tokenizer.json")) }},
		{"empty", func(dir string) error {
			for _, n := range fileNames {
				if err := os.Remove(filepath.Join(dir, n)); err != nil {
					return err
				}
			}
			return nil
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			dir, err := materialize(root)
			if err != nil {
				t.Fatal(err)
			}
			if err := tc.damage(dir); err != nil {
				t.Fatal(err)
			}
			again, err := materialize(root)
			if err != nil {
				t.Fatal(err)
			}
			if again != dir {
				t.Fatalf("repair gave %s, want %s", again, dir)
			}
			checkFolder(t, dir)
			checkNoLeftovers(t, root, dir)
		})
	}
}

// TestDir checks that Dir writes under the user's cache directory (pointed at a temporary one here).
func TestDir(t *testing.T) {
	cache := t.TempDir()
	t.Setenv("XDG_CACHE_HOME", cache) // Unix
	t.Setenv("HOME", cache)           // macOS: $HOME/Library/Caches
	t.Setenv("LocalAppData", cache)   // Windows
	want, err := os.UserCacheDir()
	if err != nil {
		t.Skipf("no user cache directory: %v", err)
	}
	dir, err := Dir()
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Dir(dir) != filepath.Join(want, "gollm") || !strings.HasPrefix(filepath.Base(dir), "default-") {
		t.Errorf("Dir() = %s, want %s/default-<hash>", dir, filepath.Join(want, "gollm"))
	}
	checkFolder(t, dir)
	if again, err := Dir(); err != nil || again != dir {
		t.Errorf("second Dir() = %s, %v; want %s", again, err, dir)
	}
}

func TestName(t *testing.T) {
	if n := Name(); n == "" || strings.ContainsAny(n, " /\t\n") {
		t.Errorf("Name() = %q, want a non-empty name without spaces or slashes", n)
	}
}
