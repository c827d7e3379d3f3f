package hub

import (
	"cmp"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// ErrNotCached is wrapped by Resolve's error when a model name is not in the cache.
var ErrNotCached = errors.New("not in the Hugging Face cache")

// Resolve returns the folder of model: model itself when it names an existing folder; else, when it
// is a hub name ORG/NAME[@REVISION], that revision's snapshot in the cache (CacheDir), found by
// commit hash or through refs/REVISION; else an error that says where it looked and, for a hub name,
// wraps ErrNotCached and says to fetch it with `gollm pull`. It never reaches the network, so it works
// the same offline. A snapshot is returned as it is: a file it lacks is reported by whoever opens it.
func Resolve(model string) (string, error) {
	if model == "" {
		return "", errors.New("hub: no model given")
	}
	if fi, err := os.Stat(model); err == nil {
		if !fi.IsDir() {
			return "", fmt.Errorf("hub: %s is a file, not a model folder", model)
		}
		return model, nil
	}
	name, err := ParseName(model)
	if err != nil {
		return "", fmt.Errorf("hub: %s: no such model folder (%w), and %w", model, fs.ErrNotExist, ErrBadName)
	}
	return snapshotDir(CacheDir(), name)
}

// snapshotDir returns the cached snapshot of name under cache.
func snapshotDir(cache string, name Name) (string, error) {
	repoDir := filepath.Join(cache, folderName(name.Repo))
	notCached := func(looked string) error {
		return fmt.Errorf("hub: no model folder %s, and %s is %w (no %s): fetch it with `gollm pull %s`",
			name, name, ErrNotCached, looked, name)
	}
	commit := name.rev()
	if !isCommit(commit) {
		ref := filepath.Join(repoDir, "refs", filepath.FromSlash(commit))
		c, err := readRef(ref)
		if errors.Is(err, fs.ErrNotExist) {
			return "", notCached(ref)
		}
		if err != nil {
			return "", fmt.Errorf("hub: %s: %w", name, err)
		}
		commit = c
	}
	dir := filepath.Join(repoDir, "snapshots", commit)
	fi, err := os.Stat(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return "", notCached(dir)
	}
	if err != nil {
		return "", fmt.Errorf("hub: %s: %w", name, err)
	}
	if !fi.IsDir() {
		return "", fmt.Errorf("hub: %s: %s is not a folder", name, dir)
	}
	return dir, nil
}

// readRef reads a refs file: the commit hash a branch or tag pointed at.
func readRef(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	commit := strings.TrimSpace(string(data))
	if !isCommit(commit) {
		return "", fmt.Errorf("%s holds %q, not a commit hash", path, data)
	}
	return commit, nil
}

// writeRef records that rev names commit, replacing the refs file in one rename so that a reader
// sees the old commit or the new one, never a partial file. Like huggingface_hub it writes the hash
// without a line break.
func writeRef(repoDir, rev, commit string) error {
	path := filepath.Join(repoDir, "refs", filepath.FromSlash(rev))
	if old, err := readRef(path); err == nil && old == commit {
		return nil
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name()) // a no-op once renamed
	if _, err := tmp.WriteString(commit); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Chmod(0o644); err != nil {
		tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

// Snapshot is one cached revision of a model, as List reports it.
type Snapshot struct {
	Repo    string   // ORG/NAME
	Commit  string   // the snapshot's commit hash
	Refs    []string // the branches and tags whose refs file names Commit, sorted
	Dir     string   // the snapshot folder
	Files   []string // the files present, relative to Dir with '/' separators, sorted
	Missing []string // files whose link points at no blob (a damaged cache), sorted
	Size    int64    // bytes of the distinct blobs the files point at
}

// List returns the model snapshots in the cache (CacheDir), sorted by repository and commit. A
// missing cache folder is an empty list. Datasets, spaces and folders that are not huggingface_hub's
// are skipped.
func List() ([]Snapshot, error) {
	cache := CacheDir()
	entries, err := os.ReadDir(cache)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("hub: %w", err)
	}
	var out []Snapshot
	for _, e := range entries {
		rest, ok := strings.CutPrefix(e.Name(), "models--")
		if !ok || !e.IsDir() {
			continue
		}
		org, name, ok := strings.Cut(rest, "--")
		if !ok {
			continue
		}
		repo := org + "/" + strings.ReplaceAll(name, "--", "/")
		snaps, err := listRepo(filepath.Join(cache, e.Name()), repo)
		if err != nil {
			return nil, fmt.Errorf("hub: %s: %w", repo, err)
		}
		out = append(out, snaps...)
	}
	slices.SortFunc(out, func(a, b Snapshot) int {
		return cmp.Or(strings.Compare(a.Repo, b.Repo), strings.Compare(a.Commit, b.Commit))
	})
	return out, nil
}

// listRepo reads one models--ORG--NAME folder.
func listRepo(repoDir, repo string) ([]Snapshot, error) {
	refs := map[string][]string{} // commit → ref names
	refsDir := filepath.Join(repoDir, "refs")
	err := filepath.WalkDir(refsDir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || strings.HasPrefix(d.Name(), ".") {
			return err
		}
		commit, err := readRef(path)
		if err != nil {
			return nil // not a ref gollm or huggingface_hub wrote; leave it out
		}
		rel, _ := filepath.Rel(refsDir, path)
		refs[commit] = append(refs[commit], filepath.ToSlash(rel))
		return nil
	})
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	snapsDir := filepath.Join(repoDir, "snapshots")
	entries, err := os.ReadDir(snapsDir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var out []Snapshot
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		s := Snapshot{Repo: repo, Commit: e.Name(), Refs: refs[e.Name()], Dir: filepath.Join(snapsDir, e.Name())}
		slices.Sort(s.Refs)
		blobs := map[string]bool{}
		err := filepath.WalkDir(s.Dir, func(path string, d fs.DirEntry, err error) error {
			if err != nil || d.IsDir() {
				return err
			}
			rel, _ := filepath.Rel(s.Dir, path)
			rel = filepath.ToSlash(rel)
			fi, err := os.Stat(path) // through the link to the blob
			if err != nil {
				s.Missing = append(s.Missing, rel)
				return nil
			}
			s.Files = append(s.Files, rel)
			target, err := filepath.EvalSymlinks(path)
			if err != nil {
				target = path
			}
			if !blobs[target] {
				blobs[target] = true
				s.Size += fi.Size()
			}
			return nil
		})
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}
