package hub

import (
	"github.com/gollm/gollm/weights/hub/hubtest"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParseName feeds arbitrary strings to ParseName. What it accepts must print back as it was
// read, and its repository folder and refs path must stay inside the cache. Seeds: the f.Add calls
// and testdata/fuzz/FuzzParseName.
func FuzzParseName(f *testing.F) {
	for _, s := range []string{"org/m", "org/m@main", "org/m@refs/pr/1", "org/m@" + hubtest.Commit("x"), "org/m@../x",
		"a/b/c", "org/m--x", "org/m@a//b", "./x/y", "org/m@v1.0.lock", "org/.m", "org/m@@"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseName(s)
		if err != nil {
			return
		}
		if n.String() != s {
			t.Fatalf("ParseName(%q).String() = %q", s, n.String())
		}
		cache := "/cache"
		repoDir := filepath.Join(cache, folderName(n.Repo))
		if filepath.Dir(repoDir) != cache || strings.Count(folderName(n.Repo), "--") != 2 {
			t.Fatalf("%q: repository folder %q is not one level below the cache, or reads back ambiguously", s, repoDir)
		}
		ref := filepath.Join(repoDir, "refs", filepath.FromSlash(n.rev()))
		if !strings.HasPrefix(ref, filepath.Join(repoDir, "refs")+string(filepath.Separator)) {
			t.Fatalf("%q: ref %q escapes refs/", s, ref)
		}
	})
}

// FuzzModelInfo feeds arbitrary JSON to the model info parser and the planning that follows. What it
// accepts has a commit hash, and every file planned is a plain file name at the top of the repository
// that the model info lists. Seeds: the f.Add calls and testdata/fuzz/FuzzModelInfo.
func FuzzModelInfo(f *testing.F) {
	c := hubtest.Commit("x")
	f.Add(`{"sha":"`+c+`","siblings":[{"rfilename":"config.json"},{"rfilename":"tokenizer.json"},{"rfilename":"model.safetensors","size":3,"lfs":{"sha256":"`+strings.Repeat("a", 64)+`","size":3}}]}`,
		`{}`)
	f.Add(`{"sha":"`+c+`","gated":"manual","siblings":[{"rfilename":"config.json"},{"rfilename":"tokenizer.json"},{"rfilename":"model.safetensors.index.json"},{"rfilename":"a.safetensors"}]}`,
		`{"weight_map":{"x":"a.safetensors","y":"a.safetensors"}}`)
	f.Add(`{"sha":"x","siblings":null}`, `{"weight_map":{"x":"../a.safetensors"}}`)
	f.Fuzz(func(t *testing.T, info, index string) {
		m, err := parseModelInfo([]byte(info))
		if err != nil {
			return
		}
		if !isCommit(m.SHA) {
			t.Fatalf("accepted sha %q", m.SHA)
		}
		m.gated()
		files, sharded, err := m.plan()
		if err != nil {
			return
		}
		if sharded {
			shards, err := m.shardsOf([]byte(index))
			if err == nil {
				files = append(files, shards...)
			}
		}
		for _, name := range files {
			if _, ok := m.file(name); !ok || strings.ContainsAny(name, `/\`) || name == ".." {
				t.Fatalf("planned %q, which is not a listed top-level file", name)
			}
		}
	})
}

// FuzzIndexShards feeds arbitrary JSON to the index reader: every shard it returns is a plain
// .safetensors file name. Seeds: the f.Add calls and testdata/fuzz/FuzzIndexShards.
func FuzzIndexShards(f *testing.F) {
	f.Add(`{"metadata":{"total_size":8},"weight_map":{"a":"model-00001-of-00002.safetensors","b":"model-00002-of-00002.safetensors"}}`)
	f.Add(`{"weight_map":{"a":"sub/x.safetensors"}}`)
	f.Add(`{"weight_map":{}}`)
	f.Fuzz(func(t *testing.T, index string) {
		shards, err := parseIndexShards([]byte(index))
		if err != nil {
			return
		}
		if len(shards) == 0 {
			t.Fatal("no shards and no error")
		}
		for _, s := range shards {
			if s != filepath.Base(s) || strings.ContainsAny(s, `/\`) || !strings.HasSuffix(s, ".safetensors") {
				t.Fatalf("shard %q is not a plain .safetensors name", s)
			}
		}
	})
}

// FuzzRangeStart feeds arbitrary Content-Range headers to rangeStart: an accepted one starts at a
// byte offset that is not negative and that the header spells. Seeds: the f.Add calls and
// testdata/fuzz/FuzzRangeStart.
func FuzzRangeStart(f *testing.F) {
	f.Add("bytes 100-199/200")
	f.Add("bytes */200")
	f.Add("bytes -5-9/10")
	f.Fuzz(func(t *testing.T, h string) {
		n, ok := rangeStart(h)
		if ok && (n < 0 || !strings.HasPrefix(h, "bytes ")) {
			t.Fatalf("rangeStart(%q) = %d", h, n)
		}
	})
}
