// Package defaultmodel owns gollm's built-in model: a tiny LLaMA (about 4.5 million parameters, 3
// layers, 6 query heads over 2 KV heads, a 4096-token byte-level BPE vocabulary, 1024-token context)
// trained on the Go standard library's sources, so that gollm generates something meaningful with no
// download. The model folder is embedded in the binary (about 9.3 MB) and written out on first use to a
// cache directory, where weights.Open reads it like any HuggingFace model folder:
//
//	dir, err := defaultmodel.Dir()
//	if err != nil { ... }
//	folder, err := weights.Open(dir)
//
// The files under files/ were written by train/train.py (see its header to retrain; its settings and
// losses are in train/train_log.json); files/NOTICE carries the licence of the Go source code the model
// was trained on, and is written out with the model. testdata/greedy.json holds transformers' greedy
// continuations for the parity test.
//
// This package only provides the files: it must not parse or run the model (that is weights' and
// model's job), and it writes nothing outside its own cache directory.
package defaultmodel

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
)

//go:embed files
var embedded embed.FS

// fileNames are the files of the model folder, in the order the digest covers them.
var fileNames = []string{
	"NOTICE",
	"config.json",
	"generation_config.json",
	"model.safetensors",
	"tokenizer.json",
	"tokenizer_config.json",
}

// name is what Name returns.
const name = "gollm-default-go"

// Name returns the default model's name, as gollm reports it (in the OpenAI API's model field, say).
func Name() string { return name }

// digest is the short content hash that names the cache directory, computed once: it depends only on
// the embedded files.
var digest = sync.OnceValues(func() (string, error) {
	h := sha256.New()
	for _, n := range fileNames {
		data, err := embedded.ReadFile("files/" + n)
		if err != nil {
			return "", fmt.Errorf("defaultmodel: embedded %s: %w", n, err)
		}
		h.Write([]byte(n))
		h.Write([]byte{0})
		h.Write(binary.LittleEndian.AppendUint64(nil, uint64(len(data))))
		h.Write(data)
	}
	return hex.EncodeToString(h.Sum(nil))[:12], nil
})

// Dir returns a directory holding the default model's files (config.json, generation_config.json,
// model.safetensors, tokenizer.json, tokenizer_config.json and NOTICE), ready for weights.Open. On first
// use it writes them to os.UserCacheDir()/gollm/default-<hash of the files>: into a temporary directory
// beside it first, renamed into place, so that a reader never sees a half-written folder and concurrent
// callers, in this process or others, agree on one complete copy. Later calls find the folder and write
// nothing; a folder whose files have the wrong sizes is replaced.
func Dir() (string, error) {
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("defaultmodel: %w", err)
	}
	return materialize(filepath.Join(cache, "gollm"))
}

// materialize makes root/default-<digest> hold the model files and returns its path.
func materialize(root string) (string, error) {
	sum, err := digest()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(root, "default-"+sum)
	ok, err := complete(dir)
	if err != nil {
		return "", err
	}
	if ok {
		return dir, nil
	}
	if err := os.MkdirAll(root, 0o755); err != nil {
		return "", fmt.Errorf("defaultmodel: %w", err)
	}
	// A folder that exists but is not complete was damaged after its rename (a folder is only ever
	// renamed into place whole): move it aside, so the rename below can replace it, and remove it. It is
	// checked again first, since another caller may have just renamed a complete copy into place.
	if _, err := os.Lstat(dir); err == nil {
		if ok, err := complete(dir); err != nil {
			return "", err
		} else if ok {
			return dir, nil
		}
		aside, err := os.MkdirTemp(root, ".damaged-")
		if err != nil {
			return "", fmt.Errorf("defaultmodel: %w", err)
		}
		if err := os.Rename(dir, filepath.Join(aside, "old")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			os.RemoveAll(aside)
			return "", fmt.Errorf("defaultmodel: replacing damaged %s: %w", dir, err)
		}
		os.RemoveAll(aside)
	}
	tmp, err := os.MkdirTemp(root, ".default-"+sum+"-")
	if err != nil {
		return "", fmt.Errorf("defaultmodel: %w", err)
	}
	defer os.RemoveAll(tmp) // a no-op once renamed
	if err := writeFiles(tmp); err != nil {
		return "", err
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		return "", fmt.Errorf("defaultmodel: %w", err)
	}
	if err := os.Rename(tmp, dir); err != nil {
		// Another caller may have renamed its copy into place first; its copy is as good as ours.
		if ok, cerr := complete(dir); cerr == nil && ok {
			return dir, nil
		}
		return "", fmt.Errorf("defaultmodel: %w", err)
	}
	return dir, nil
}

// complete reports whether dir holds every model file with the embedded size. A missing dir is not an
// error.
func complete(dir string) (bool, error) {
	for _, n := range fileNames {
		want, err := fs.Stat(embedded, "files/"+n)
		if err != nil {
			return false, fmt.Errorf("defaultmodel: embedded %s: %w", n, err)
		}
		got, err := os.Stat(filepath.Join(dir, n))
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		if err != nil {
			return false, fmt.Errorf("defaultmodel: %w", err)
		}
		if !got.Mode().IsRegular() || got.Size() != want.Size() {
			return false, nil
		}
	}
	return true, nil
}

// writeFiles writes the embedded model files into dir and flushes them to disk.
func writeFiles(dir string) error {
	for _, n := range fileNames {
		data, err := embedded.ReadFile("files/" + n)
		if err != nil {
			return fmt.Errorf("defaultmodel: embedded %s: %w", n, err)
		}
		if err := writeFile(filepath.Join(dir, n), data); err != nil {
			return fmt.Errorf("defaultmodel: %w", err)
		}
	}
	return nil
}

func writeFile(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return err
	}
	if _, err := bytes.NewReader(data).WriteTo(f); err != nil {
		f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
