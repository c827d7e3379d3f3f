package hub

import (
	"context"
	"errors"
	"github.com/gollm/gollm/weights/hub/hubtest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// writeSnapshot lays out a cached snapshot by hand: files as links into blobs/, and refs.
func writeSnapshot(t *testing.T, cache, repo, commit string, files map[string]string, refs ...string) string {
	t.Helper()
	repoDir := filepath.Join(cache, folderName(repo))
	snap := filepath.Join(repoDir, "snapshots", commit)
	for name, content := range files {
		f := hubtest.File{Name: name, Data: []byte(content)}
		blob := filepath.Join(repoDir, "blobs", f.ETag())
		pointer := filepath.Join(snap, name)
		for _, d := range []string{filepath.Dir(blob), filepath.Dir(pointer)} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		if err := os.WriteFile(blob, f.Data, 0o644); err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(filepath.Dir(pointer), blob)
		if err := os.Symlink(rel, pointer); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.MkdirAll(snap, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, ref := range refs {
		if err := writeRef(repoDir, ref, commit); err != nil {
			t.Fatal(err)
		}
	}
	return snap
}

func TestResolve(t *testing.T) {
	cache := isolate(t)
	c1, c2 := hubtest.Commit("one"), hubtest.Commit("two")
	snap1 := writeSnapshot(t, cache, "org/m", c1, map[string]string{"config.json": "{}"}, "main", "refs/pr/7")
	snap2 := writeSnapshot(t, cache, "org/m", c2, map[string]string{"config.json": "{ }"}, "dev")
	local := t.TempDir()
	file := filepath.Join(local, "config.json")
	os.WriteFile(file, []byte("{}"), 0o644)
	repoDir := filepath.Join(cache, "models--org--m")
	os.WriteFile(filepath.Join(repoDir, "refs", "broken"), []byte("not a hash"), 0o644)
	os.WriteFile(filepath.Join(repoDir, "refs", "gone"), []byte(hubtest.Commit("gone")), 0o644)
	os.WriteFile(filepath.Join(repoDir, "refs", "nl"), []byte(c2+"\n"), 0o644)
	for _, tc := range []struct {
		model   string
		want    string
		is      error
		wantErr []string
	}{
		{model: local, want: local},
		{model: "org/m", want: snap1},
		{model: "org/m@main", want: snap1},
		{model: "org/m@dev", want: snap2},
		{model: "org/m@refs/pr/7", want: snap1},
		{model: "org/m@nl", want: snap2},
		{model: "org/m@" + c2, want: snap2},
		{model: "org/other", is: ErrNotCached, wantErr: []string{"no model folder org/other", filepath.Join(cache, "models--org--other", "refs", "main"), "gollm pull org/other"}},
		{model: "org/m@v2", is: ErrNotCached, wantErr: []string{filepath.Join(repoDir, "refs", "v2"), "gollm pull org/m@v2"}},
		{model: "org/m@" + hubtest.Commit("three"), is: ErrNotCached, wantErr: []string{filepath.Join(repoDir, "snapshots", hubtest.Commit("three"))}},
		{model: "org/m@gone", is: ErrNotCached, wantErr: []string{filepath.Join(repoDir, "snapshots", hubtest.Commit("gone"))}},
		{model: "org/m@broken", wantErr: []string{"not a commit hash"}},
		{model: file, wantErr: []string{"is a file, not a model folder"}},
		{model: filepath.Join(local, "missing"), is: ErrBadName, wantErr: []string{filepath.Join(local, "missing") + ": no such model folder", "not a Hugging Face model name"}},
		{model: "./models/x", is: ErrBadName},
		{model: "", wantErr: []string{"no model given"}},
	} {
		t.Run(tc.model, func(t *testing.T) {
			got, err := Resolve(tc.model)
			if tc.want != "" {
				if err != nil || got != tc.want {
					t.Fatalf("Resolve = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("Resolve = %q, want an error", got)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v does not wrap %v", err, tc.is)
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
		})
	}
}

func TestParseName(t *testing.T) {
	for _, tc := range []struct {
		in   string
		want Name
		ok   bool
	}{
		{"meta-llama/Llama-3.2-1B-Instruct", Name{Repo: "meta-llama/Llama-3.2-1B-Instruct"}, true},
		{"org/m@main", Name{"org/m", "main"}, true},
		{"org/m@refs/pr/1", Name{"org/m", "refs/pr/1"}, true},
		{"org/m@v1.0", Name{"org/m", "v1.0"}, true},
		{"Org_1/m.v2_x@" + hubtest.Commit("x"), Name{"Org_1/m.v2_x", hubtest.Commit("x")}, true},
		{"m", Name{}, false},
		{"a/b/c", Name{}, false},
		{"/abs/path", Name{}, false},
		{"./rel/x", Name{}, false},
		{"../x", Name{}, false},
		{"org/m--x", Name{}, false},
		{"org/m..x", Name{}, false},
		{"org/-m", Name{}, false},
		{"org/m.", Name{}, false},
		{"org/m.git", Name{}, false},
		{"org/" + strings.Repeat("x", 97), Name{}, false},
		{"org/m@", Name{}, false},
		{"org/m@../../etc", Name{}, false},
		{"org/m@a//b", Name{}, false},
		{"org/m@/main", Name{}, false},
		{"org/m@main/", Name{}, false},
		{"org/m@.hidden", Name{}, false},
		{"org/m@a b", Name{}, false},
		{"org/m@a\\b", Name{}, false},
		{"org/m@x.lock", Name{}, false},
		{"org/m@a@{1}", Name{}, false},
		{"org/m@a\x00", Name{}, false},
		{"org/mé", Name{}, false},
	} {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseName(tc.in)
			if tc.ok != (err == nil) || got != tc.want {
				t.Fatalf("ParseName = %+v, %v; want %+v, ok %v", got, err, tc.want, tc.ok)
			}
			if err != nil && !errors.Is(err, ErrBadName) {
				t.Errorf("error %v does not wrap ErrBadName", err)
			}
			if err == nil && got.String() != tc.in {
				t.Errorf("String() = %q, want %q", got.String(), tc.in)
			}
		})
	}
}

func TestCacheDir(t *testing.T) {
	home, _ := os.UserHomeDir()
	for _, tc := range []struct {
		name string
		env  map[string]string
		want string
	}{
		{"default", nil, filepath.Join(home, ".cache", "huggingface", "hub")},
		{"XDG_CACHE_HOME", map[string]string{"XDG_CACHE_HOME": "/x"}, "/x/huggingface/hub"},
		{"HF_HOME", map[string]string{"HF_HOME": "/h", "XDG_CACHE_HOME": "/x"}, "/h/hub"},
		{"HF_HOME with ~", map[string]string{"HF_HOME": "~/hf"}, filepath.Join(home, "hf", "hub")},
		{"HUGGINGFACE_HUB_CACHE", map[string]string{"HF_HOME": "/h", "HUGGINGFACE_HUB_CACHE": "/old"}, "/old"},
		{"HF_HUB_CACHE", map[string]string{"HF_HOME": "/h", "HUGGINGFACE_HUB_CACHE": "/old", "HF_HUB_CACHE": "/new"}, "/new"},
		{"HF_HUB_CACHE with variables", map[string]string{"BASE": "/b", "HF_HUB_CACHE": "$BASE/c/${UNSET_FOR_TEST}"}, "/b/c/${UNSET_FOR_TEST}"},
		{"unset $VARIABLE left as written", map[string]string{"HF_HUB_CACHE": "/c/$UNSET_FOR_TEST/d"}, "/c/$UNSET_FOR_TEST/d"},
		{"a $ that starts no name", map[string]string{"HF_HUB_CACHE": "/c/a$-b/$1x/$"}, "/c/a$-b/$1x/$"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for _, v := range []string{"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "HF_HOME", "XDG_CACHE_HOME"} {
				t.Setenv(v, "")
			}
			os.Unsetenv("UNSET_FOR_TEST")
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			if got := CacheDir(); got != tc.want {
				t.Errorf("CacheDir() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestEnvToken(t *testing.T) {
	for _, tc := range []struct {
		name string
		env  map[string]string
		file string // $HF_HOME/token
		path string // HF_TOKEN_PATH's file
		want string
	}{
		{name: "none"},
		{name: "HF_TOKEN", env: map[string]string{"HF_TOKEN": " hf_a\n", "HUGGING_FACE_HUB_TOKEN": "hf_b"}, file: "hf_c", want: "hf_a"},
		{name: "HUGGING_FACE_HUB_TOKEN", env: map[string]string{"HUGGING_FACE_HUB_TOKEN": "hf_b"}, file: "hf_c", want: "hf_b"},
		{name: "token file", file: "hf_c\r\n", want: "hf_c"},
		{name: "HF_TOKEN_PATH", file: "hf_c", path: "hf_d", want: "hf_d"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			isolate(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			if tc.file != "" {
				os.WriteFile(filepath.Join(os.Getenv("HF_HOME"), "token"), []byte(tc.file), 0o600)
			}
			if tc.path != "" {
				p := filepath.Join(t.TempDir(), "tok")
				os.WriteFile(p, []byte(tc.path), 0o600)
				t.Setenv("HF_TOKEN_PATH", p)
			}
			if got := envToken(); got != tc.want {
				t.Errorf("envToken() = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestEndpoint(t *testing.T) {
	for _, tc := range []struct{ env, want string }{
		{"", DefaultEndpoint},
		{"https://hf-mirror.com/", "https://hf-mirror.com"},
		{"http://127.0.0.1:8080", "http://127.0.0.1:8080"},
	} {
		t.Run(tc.env, func(t *testing.T) {
			t.Setenv("HF_ENDPOINT", tc.env)
			if got := endpoint(); got != tc.want {
				t.Errorf("endpoint() = %q, want %q", got, tc.want)
			}
		})
	}
}

// TestEndpointFromEnvironment pulls through HF_ENDPOINT alone, as from a mirror.
func TestEndpointFromEnvironment(t *testing.T) {
	isolate(t)
	h := hubtest.New(t)
	h.Add("org/m", hubtest.Commit("one"), false, hubtest.DefaultModel(t), "main")
	t.Setenv("HF_ENDPOINT", h.URL+"/")
	opts := options(h)
	opts.Endpoint = ""
	if _, err := Pull(context.Background(), "org/m", opts); err != nil {
		t.Fatal(err)
	}
}

func TestList(t *testing.T) {
	cache := isolate(t)
	if got, err := List(); err != nil || len(got) != 0 {
		t.Fatalf("List of a missing cache = %v, %v; want nothing", got, err)
	}
	c1, c2 := hubtest.Commit("one"), hubtest.Commit("two")
	snap1 := writeSnapshot(t, cache, "org/m", c1, map[string]string{"config.json": "{}", "tokenizer.json": "{}", "sub/x.json": "12345"}, "main", "v1", "refs/pr/2")
	snap2 := writeSnapshot(t, cache, "org/m", c2, map[string]string{"config.json": "{ }"})
	snap3 := writeSnapshot(t, cache, "a-b/c", c1, map[string]string{"config.json": "[]", "model.safetensors": "abc"}, "main")
	os.Remove(filepath.Join(cache, "models--a-b--c", "blobs", hubtest.File{Data: []byte("abc")}.ETag())) // a damaged cache
	os.MkdirAll(filepath.Join(cache, "datasets--org--d", "snapshots", c1), 0o755)
	os.MkdirAll(filepath.Join(cache, ".locks", "models--org--m"), 0o755)
	os.WriteFile(filepath.Join(cache, "CACHEDIR.TAG"), nil, 0o644)
	got, err := List()
	if err != nil {
		t.Fatal(err)
	}
	want := []Snapshot{ // by repository, then commit (c2 < c1)
		{Repo: "a-b/c", Commit: c1, Refs: []string{"main"}, Dir: snap3, Files: []string{"config.json"}, Missing: []string{"model.safetensors"}, Size: 2},
		{Repo: "org/m", Commit: c2, Dir: snap2, Files: []string{"config.json"}, Size: 3},
		{Repo: "org/m", Commit: c1, Refs: []string{"main", "refs/pr/2", "v1"}, Dir: snap1, Files: []string{"config.json", "sub/x.json", "tokenizer.json"}, Size: 2 + 5},
	}
	if len(got) != len(want) {
		t.Fatalf("List = %+v, want %+v", got, want)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Repo != w.Repo || g.Commit != w.Commit || g.Dir != w.Dir || g.Size != w.Size ||
			!slices.Equal(g.Refs, w.Refs) || !slices.Equal(g.Files, w.Files) || !slices.Equal(g.Missing, w.Missing) {
			t.Errorf("List()[%d] = %+v, want %+v", i, g, w)
		}
	}
}
