package hub

import (
	"context"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"testing"

	"github.com/gollm/gollm/weights/hub/hubtest"
)

var pythonOut = flag.String("out", "", "TestWriteCacheForPython: write the cache (DIR/cache) and its manifest (DIR/manifest.json) here; an absolute path")

// manifest says what a cache gollm pulled must hold, for scripts/hub/check_cache.py: per model, the
// refs and the commit each names, and per commit the files with the ETag (blob name) and size of each.
type manifest struct {
	Models map[string]manifestModel `json:"models"`
}

type manifestModel struct {
	Refs    map[string]string                  `json:"refs"`    // branch or tag → commit
	Commits map[string]map[string]manifestFile `json:"commits"` // commit → file → blob
}

type manifestFile struct {
	ETag string `json:"etag"`
	Size int    `json:"size"`
}

// TestWriteCacheForPython pulls, from hubtest, models in every form a cache can hold them (a branch
// and a tag on one commit, a second branch, sharded weights, a snapshot pulled by commit alone) and
// writes the manifest of what the cache must hold, so that scripts/hub/check_cache.py can read the
// cache back with huggingface_hub's own functions on a machine that has it:
//
//	go test ./weights/hub -run TestWriteCacheForPython -count=1 -args -out "$PWD/gpu/hubcache"
//	python3 scripts/hub/check_cache.py gpu/hubcache/cache --manifest gpu/hubcache/manifest.json
//
// Without -out it writes to a temporary folder; either way it checks the layout itself first.
func TestWriteCacheForPython(t *testing.T) {
	isolate(t)
	out := *pythonOut
	if out == "" {
		out = t.TempDir()
	} else if err := os.RemoveAll(out); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(out, "cache")
	h := hubtest.New(t)
	files := hubtest.DefaultModel(t)
	dev := append([]hubtest.File{{Name: "config.json", Data: append([]byte(" "), files[0].Data...)}}, files[1:]...)
	sharded := hubtest.Sharded(t, files)
	commits := map[string][]hubtest.File{"main": files, "dev": dev, "sharded": sharded}
	h.Add("gollm-test/default-go", hubtest.Commit("main"), false, files, "main", "v1.0")
	h.Add("gollm-test/default-go", hubtest.Commit("dev"), false, dev, "dev")
	h.Add("gollm-test/default-go-sharded", hubtest.Commit("sharded"), false, sharded, "main")
	h.Add("gollm-test/by-commit", hubtest.Commit("main"), false, files, "main")
	pulls := []struct {
		model  string
		commit string // label of the commit
	}{
		{"gollm-test/default-go", "main"},
		{"gollm-test/default-go@v1.0", "main"},
		{"gollm-test/default-go@dev", "dev"},
		{"gollm-test/default-go-sharded", "sharded"},
		{"gollm-test/by-commit@" + hubtest.Commit("main"), "main"},
	}
	m := manifest{Models: map[string]manifestModel{}}
	for _, p := range pulls {
		opts := options(h)
		opts.CacheDir = cache
		if _, err := Pull(context.Background(), p.model, opts); err != nil {
			t.Fatal(err)
		}
		name, _ := ParseName(p.model)
		mm, ok := m.Models[name.Repo]
		if !ok {
			mm = manifestModel{Refs: map[string]string{}, Commits: map[string]map[string]manifestFile{}}
			m.Models[name.Repo] = mm
		}
		commit := hubtest.Commit(p.commit)
		var refs []string
		if name.Revision != commit {
			mm.Refs[name.rev()] = commit
			refs = []string{name.rev()}
		}
		want := wanted(commits[p.commit])
		mm.Commits[commit] = map[string]manifestFile{}
		for _, f := range want {
			mm.Commits[commit][f.Name] = manifestFile{ETag: f.ETag(), Size: len(f.Data)}
		}
		checkLayout(t, cache, name.Repo, commit, refs, want)
	}
	data, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(out, "manifest.json"), append(data, '\n'), 0o644); err != nil {
		t.Fatal(err)
	}
	// The locks are huggingface_hub's too, but a cache carried to another machine needs none.
	if err := os.RemoveAll(filepath.Join(cache, ".locks")); err != nil {
		t.Fatal(err)
	}
}
