package hub

import (
	"context"
	"errors"
	"github.com/gollm/gollm/weights/hub/hubtest"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gollm/gollm/weights"
)

// isolate points every variable Pull and Resolve read at fresh temporary places, so that the
// machine's own cache, token and settings play no part, and returns the cache folder.
func isolate(t *testing.T) string {
	t.Helper()
	home := t.TempDir()
	for _, v := range []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE",
		"TRANSFORMERS_OFFLINE", "HF_ENDPOINT", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"} {
		t.Setenv(v, "")
	}
	t.Setenv("HF_HOME", home)
	cache := filepath.Join(home, "hub")
	t.Setenv("HF_HUB_CACHE", cache)
	return cache
}

// options are PullOptions against h, with short waits.
func options(h *hubtest.Server) PullOptions {
	return PullOptions{Endpoint: h.URL, Workers: 3, retries: 3, backoff: time.Millisecond, idleTimeout: 5 * time.Second}
}

// wanted returns the files of files that Pull should fetch: all but the decoys and, with an index,
// the shards it names.
func wanted(files []hubtest.File) []hubtest.File {
	var out []hubtest.File
	for _, f := range files {
		switch {
		case f.Name == hubtest.UnindexedShard, slices.ContainsFunc(hubtest.Decoys(), func(d hubtest.File) bool { return d.Name == f.Name }):
		default:
			out = append(out, f)
		}
	}
	return out
}

// checkLayout checks repo's folder in cache as huggingface_hub lays it out: snapshots/COMMIT holds
// exactly the files of want, each a relative link to ../../blobs/ETAG whose content is the file's
// and matches its name (sha256 or Git blob id); refs/REF holds commit without a line break for each
// of refs; no .incomplete file is left.
func checkLayout(t *testing.T, cache, repo, commit string, refs []string, want []hubtest.File) {
	t.Helper()
	repoDir := filepath.Join(cache, "models--"+strings.ReplaceAll(repo, "/", "--"))
	snap := filepath.Join(repoDir, "snapshots", commit)
	var got []string
	filepath.WalkDir(snap, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			rel, _ := filepath.Rel(snap, path)
			got = append(got, filepath.ToSlash(rel))
		}
		return err
	})
	var names []string
	for _, f := range want {
		names = append(names, f.Name)
	}
	slices.Sort(names)
	if !slices.Equal(got, names) {
		t.Errorf("snapshot files %v, want %v", got, names)
	}
	for _, f := range want {
		pointer := filepath.Join(snap, filepath.FromSlash(f.Name))
		fi, err := os.Lstat(pointer)
		if err != nil {
			t.Errorf("%s: %v", f.Name, err)
			continue
		}
		if fi.Mode()&fs.ModeSymlink == 0 {
			t.Errorf("%s is not a symbolic link", f.Name)
			continue
		}
		target, _ := os.Readlink(pointer)
		wantTarget := strings.Repeat("../", strings.Count(f.Name, "/")+2) + "blobs/" + f.ETag()
		if target != wantTarget {
			t.Errorf("%s links to %q, want %q", f.Name, target, wantTarget)
		}
		data, err := os.ReadFile(filepath.Join(repoDir, "blobs", f.ETag()))
		if err != nil {
			t.Errorf("%s: blob: %v", f.Name, err)
			continue
		}
		if string(data) != string(f.Data) {
			t.Errorf("%s: blob content differs from the file's", f.Name)
		}
		if f.LFS && f.SHA256() != f.ETag() || !f.LFS && hubtest.GitOID(data) != f.ETag() {
			t.Errorf("%s: blob name is not its content's hash", f.Name)
		}
	}
	for _, ref := range refs {
		data, err := os.ReadFile(filepath.Join(repoDir, "refs", filepath.FromSlash(ref)))
		if err != nil || string(data) != commit {
			t.Errorf("refs/%s = %q (%v), want %q", ref, data, err, commit)
		}
	}
	if inc, _ := filepath.Glob(filepath.Join(repoDir, "blobs", "*.incomplete")); len(inc) > 0 {
		t.Errorf("left behind: %v", inc)
	}
}

// TestPull pulls into an empty cache and checks the layout, what was requested, that Resolve finds
// the same folder and that weights.Open loads it.
func TestPull(t *testing.T) {
	c1, c2 := hubtest.Commit("one"), hubtest.Commit("two")
	for _, tc := range []struct {
		name     string
		model    string                // what is pulled and resolved
		commit   string                // the snapshot expected
		refs     []string              // refs files expected
		sharded  bool                  // the repository's weights are sharded
		setup    func(*hubtest.Server) // beyond the repository org/m (main → c2, dev and v1.0 → c1, refs/pr/1 → c1)
		resolves []string              // other names that must resolve to the same folder afterwards
	}{
		{name: "default branch", model: "org/m", commit: c2, refs: []string{"main"}, resolves: []string{"org/m@main", "org/m@" + c2}},
		{name: "branch", model: "org/m@dev", commit: c1, refs: []string{"dev"}, resolves: []string{"org/m@" + c1}},
		{name: "tag", model: "org/m@v1.0", commit: c1, refs: []string{"v1.0"}},
		{name: "pull request ref", model: "org/m@refs/pr/1", commit: c1, refs: []string{"refs/pr/1"}},
		{name: "commit", model: "org/m@" + c1, commit: c1},
		{name: "sharded", model: "org/sharded", commit: c1, refs: []string{"main"}, sharded: true},
		{name: "renamed repository", model: "old/m", commit: c2, refs: []string{"main"},
			setup: func(h *hubtest.Server) { h.Rename("old/m", "org/m") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := isolate(t)
			h := hubtest.New(t)
			files1, files2 := hubtest.DefaultModel(t), hubtest.DefaultModel(t)
			files1[0].Data = append([]byte(" "), files1[0].Data...) // commit one's config.json differs
			h.Add("org/m", c1, false, files1, "dev", "v1.0", "refs/pr/1")
			h.Add("org/m", c2, false, files2, "main")
			sharded := hubtest.Sharded(t, hubtest.DefaultModel(t))
			h.Add("org/sharded", c1, false, sharded, "main")
			if tc.setup != nil {
				tc.setup(h)
			}
			dir, err := Pull(context.Background(), tc.model, options(h))
			if err != nil {
				t.Fatal(err)
			}
			name, _ := ParseName(tc.model)
			if want := filepath.Join(cache, folderName(name.Repo), "snapshots", tc.commit); dir != want {
				t.Fatalf("Pull returned %s, want %s", dir, want)
			}
			want := wanted(files2)
			switch {
			case tc.sharded:
				want = wanted(sharded)
			case tc.commit == c1:
				want = wanted(files1)
			}
			checkLayout(t, cache, name.Repo, tc.commit, tc.refs, want)
			for _, d := range hubtest.Decoys() {
				if got := h.Requests(d.Name); len(got) > 0 {
					t.Errorf("requested %v, which gollm does not read", got)
				}
			}
			if got := h.Requests(hubtest.UnindexedShard); len(got) > 0 {
				t.Errorf("requested %v, which the index does not name", got)
			}
			for _, m := range append([]string{tc.model}, tc.resolves...) {
				if got, err := Resolve(m); err != nil || got != dir {
					t.Errorf("Resolve(%q) = %q, %v; want %q", m, got, err, dir)
				}
			}
			folder, err := weights.Open(dir)
			if err != nil {
				t.Fatalf("weights.Open of the pulled folder: %v", err)
			}
			folder.Close()
		})
	}
}

// TestPullAgain checks that a second pull of a cached model fetches no file again, and that a new
// commit on the branch fetches only what changed and moves the ref.
func TestPullAgain(t *testing.T) {
	cache := isolate(t)
	h := hubtest.New(t)
	files := hubtest.DefaultModel(t)
	c1, c2 := hubtest.Commit("one"), hubtest.Commit("two")
	h.Add("org/m", c1, false, files, "main")
	if _, err := Pull(context.Background(), "org/m", options(h)); err != nil {
		t.Fatal(err)
	}
	weightBytes := h.BytesSent("model.safetensors")
	if _, err := Pull(context.Background(), "org/m", options(h)); err != nil {
		t.Fatal(err)
	}
	if got := h.BytesSent("model.safetensors"); got != weightBytes {
		t.Errorf("second pull sent %d more bytes of the weights", got-weightBytes)
	}
	if got := h.Requests("GET /blobs/"); len(got) != 1 {
		t.Errorf("weights fetched %d times (%v), want once", len(got), got)
	}
	files2 := slices.Clone(files)
	files2[0].Data = []byte(strings.Replace(string(files[0].Data), "{", "{ ", 1))
	h.Add("org/m", c2, false, files2, "main")
	dir, err := Pull(context.Background(), "org/m", options(h))
	if err != nil {
		t.Fatal(err)
	}
	if got := h.Requests("GET /blobs/"); len(got) != 1 {
		t.Errorf("weights fetched again for a commit that did not change them: %v", got)
	}
	checkLayout(t, cache, "org/m", c2, []string{"main"}, wanted(files2))
	if got, err := Resolve("org/m"); got != dir || err != nil {
		t.Errorf("Resolve after the branch moved = %q, %v; want %q", got, err, dir)
	}
	if got, err := Resolve("org/m@" + c1); err != nil || !strings.HasSuffix(got, c1) {
		t.Errorf("the old commit's snapshot: %q, %v", got, err)
	}
}

// TestPullResume cuts the weights' transfer and checks that the download resumes with a range
// request instead of starting over, in the same pull or the next one.
func TestPullResume(t *testing.T) {
	files := hubtest.DefaultModel(t)
	weightsFile := files[slices.IndexFunc(files, func(f hubtest.File) bool { return f.Name == "model.safetensors" })]
	total := int64(len(weightsFile.Data))
	half := total / 2
	for _, tc := range []struct {
		name        string
		setup       func(*hubtest.Server)
		cancelFirst bool // cancel the first pull when the transfer stalls; a second pull finishes
		idle        time.Duration
		wantRange   bool // the last request for the weights asks for a range
	}{
		{name: "connection dropped, same pull", setup: func(h *hubtest.Server) { h.Break("model.safetensors", hubtest.Cut, half) }, wantRange: true},
		{name: "stalled, resumed after the idle timeout", setup: func(h *hubtest.Server) { h.Break("model.safetensors", hubtest.Stall, half) },
			idle: 200 * time.Millisecond, wantRange: true},
		{name: "interrupted, resumed by the next pull", setup: func(h *hubtest.Server) { h.Break("model.safetensors", hubtest.Stall, half) },
			cancelFirst: true, wantRange: true},
		{name: "server ignores the range", setup: func(h *hubtest.Server) { h.Break("model.safetensors", hubtest.Cut, half); h.IgnoreRanges() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := isolate(t)
			h := hubtest.New(t)
			c := hubtest.Commit("one")
			h.Add("org/m", c, false, files, "main")
			tc.setup(h)
			opts := options(h)
			if tc.idle > 0 {
				opts.idleTimeout = tc.idle
			}
			if tc.cancelFirst {
				// Interrupt the first pull once the half it was sent is on disk.
				inc := filepath.Join(cache, "models--org--m", "blobs", weightsFile.ETag()+".incomplete")
				ctx, cancel := context.WithCancel(context.Background())
				go func() {
					<-h.Stalled()
					for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
						if fi, err := os.Stat(inc); err == nil && fi.Size() >= half {
							break
						}
					}
					cancel()
				}()
				_, err := Pull(ctx, "org/m", opts)
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("first pull: %v, want context.Canceled", err)
				}
				fi, err := os.Stat(inc)
				if err != nil || fi.Size() != half {
					t.Fatalf("after the interrupted pull: %v (size %v), want %d bytes in %s", err, fi, half, inc)
				}
				if _, err := Resolve("org/m"); !errors.Is(err, ErrNotCached) {
					t.Errorf("Resolve after an interrupted pull: %v, want ErrNotCached", err)
				}
				if link := filepath.Join(cache, "models--org--m", "snapshots", c, "model.safetensors"); exists(link) {
					t.Errorf("%s exists before its blob is complete", link)
				}
			}
			sentBefore := h.BytesSent("model.safetensors")
			if _, err := Pull(context.Background(), "org/m", opts); err != nil {
				t.Fatal(err)
			}
			checkLayout(t, cache, "org/m", c, []string{"main"}, wanted(files))
			gets := h.Requests("GET /blobs/")
			if len(gets) != 2 {
				t.Fatalf("weights requested %d times (%v), want twice", len(gets), gets)
			}
			last := gets[len(gets)-1]
			if tc.wantRange {
				if want := "bytes=" + strconv.FormatInt(half, 10) + "-"; !strings.HasSuffix(last, want) {
					t.Errorf("second request %q, want a range %s", last, want)
				}
				again := h.BytesSent("model.safetensors") - half
				if tc.cancelFirst {
					again = h.BytesSent("model.safetensors") - sentBefore
				}
				if again >= total || again != total-half {
					t.Errorf("the resumed transfer sent %d bytes of %d, want the %d missing", again, total, total-half)
				}
			}
		})
	}
}

func exists(path string) bool { _, err := os.Lstat(path); return err == nil }

// TestPullCorrupt serves wrong content and checks that it is refused: an error wrapping ErrCorrupt,
// no blob, no partial file, nothing in the snapshot, no ref.
func TestPullCorrupt(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(*hubtest.Server)
		file  string
	}{
		{name: "LFS file, wrong bytes (sha256)", setup: func(h *hubtest.Server) { h.Break("model.safetensors", hubtest.Corrupt, 0) }, file: "model.safetensors"},
		{name: "Git file, wrong bytes (blob id)", setup: func(h *hubtest.Server) { h.Break("tokenizer.json", hubtest.Corrupt, 0) }, file: "tokenizer.json"},
		{name: "shorter than the hub said", setup: func(h *hubtest.Server) { h.Break("model.safetensors", hubtest.Short, 0) }, file: "model.safetensors"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := isolate(t)
			h := hubtest.New(t)
			files := hubtest.DefaultModel(t)
			h.Add("org/m", hubtest.Commit("one"), false, files, "main")
			tc.setup(h)
			_, err := Pull(context.Background(), "org/m", options(h))
			if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), tc.file) {
				t.Fatalf("Pull: %v, want ErrCorrupt naming %s", err, tc.file)
			}
			repoDir := filepath.Join(cache, "models--org--m")
			f := files[slices.IndexFunc(files, func(f hubtest.File) bool { return f.Name == tc.file })]
			for _, p := range []string{
				filepath.Join(repoDir, "blobs", f.ETag()),
				filepath.Join(repoDir, "blobs", f.ETag()+".incomplete"),
				filepath.Join(repoDir, "snapshots"),
				filepath.Join(repoDir, "refs", "main"),
			} {
				if exists(p) {
					t.Errorf("%s exists after a refused download", p)
				}
			}
			if _, err := Resolve("org/m"); !errors.Is(err, ErrNotCached) {
				t.Errorf("Resolve: %v, want ErrNotCached", err)
			}
		})
	}
}

// TestPullGated checks a gated model: refused without a token with a message that says what to do,
// refused with a token that has no access, fetched with the right token from each place it may come
// from; the token never goes to the CDN.
func TestPullGated(t *testing.T) {
	for _, tc := range []struct {
		name    string
		token   string            // PullOptions.Token
		env     map[string]string // environment
		file    string            // written to $HF_HOME/token
		setup   func(*hubtest.Server)
		wantErr []string // substrings of the error; none: success
	}{
		{name: "no token", wantErr: []string{"org/gated is a gated model", "accept its licence at", "/org/gated", "HF_TOKEN", "--token", "401"}},
		{name: "token without access", token: "hf_bad", wantErr: []string{"org/gated is a gated model", "the token given has no access", "403"}},
		{name: "token option", token: hubtest.Token},
		{name: "HF_TOKEN", env: map[string]string{"HF_TOKEN": hubtest.Token}},
		{name: "HUGGING_FACE_HUB_TOKEN", env: map[string]string{"HUGGING_FACE_HUB_TOKEN": hubtest.Token}},
		{name: "token file", file: hubtest.Token + "\n"},
		{name: "option before environment", token: hubtest.Token, env: map[string]string{"HF_TOKEN": "hf_bad"}},
		{name: "download redirected to another host", token: hubtest.Token,
			setup: func(h *hubtest.Server) { h.Break("config.json", hubtest.RedirectGet, 0) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := isolate(t)
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			if tc.file != "" {
				if err := os.WriteFile(filepath.Join(os.Getenv("HF_HOME"), "token"), []byte(tc.file), 0o600); err != nil {
					t.Fatal(err)
				}
			}
			h := hubtest.New(t)
			files := hubtest.DefaultModel(t)
			h.Add("org/gated", hubtest.Commit("g"), true, files, "main")
			if tc.setup != nil {
				tc.setup(h)
			}
			opts := options(h)
			opts.Token = tc.token
			_, err := Pull(context.Background(), "org/gated", opts)
			if len(tc.wantErr) == 0 {
				if err != nil {
					t.Fatal(err)
				}
				checkLayout(t, cache, "org/gated", hubtest.Commit("g"), []string{"main"}, wanted(files))
			} else {
				if !errors.Is(err, ErrGated) {
					t.Fatalf("Pull: %v, want ErrGated", err)
				}
				for _, s := range tc.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("error %q lacks %q", err, s)
					}
				}
				if exists(filepath.Join(cache, "models--org--gated", "snapshots")) {
					t.Error("a refused pull left a snapshot")
				}
			}
			if seen := h.CDNAuthorization(); len(seen) > 0 {
				t.Errorf("the CDN received Authorization %v", seen)
			}
		})
	}
}

// TestPullErrors checks the refusals that name the model and revision, and those for repositories
// gollm cannot load, made before any download.
func TestPullErrors(t *testing.T) {
	stub := func(name, data string) hubtest.File { return hubtest.File{Name: name, Data: []byte(data)} }
	binOnly := []hubtest.File{stub("config.json", "{}"), stub("tokenizer.json", "{}"),
		{Name: "pytorch_model.bin", Data: []byte("bin"), LFS: true}}
	badIndex := []hubtest.File{stub("config.json", "{}"), stub("tokenizer.json", "{}"),
		stub("model.safetensors.index.json", `{"weight_map":{"a":"model-00001-of-00002.safetensors"}}`)}
	escIndex := []hubtest.File{stub("config.json", "{}"), stub("tokenizer.json", "{}"),
		stub("model.safetensors.index.json", `{"weight_map":{"a":"../x.safetensors"}}`)}
	for _, tc := range []struct {
		name    string
		model   string
		token   string
		is      error
		wantErr []string
	}{
		{name: "unknown model", model: "org/nope", is: ErrNotFound, wantErr: []string{"org/nope", "revision main", "HF_TOKEN", "401"}},
		{name: "unknown model, logged in", model: "org/nope", token: hubtest.Token, is: ErrNotFound, wantErr: []string{"org/nope", "revision main", "404"}},
		{name: "unknown revision", model: "org/m@nope", is: ErrNotFound, wantErr: []string{"org/m", `revision "nope"`, "404"}},
		{name: "only .bin weights", model: "org/bin", is: ErrNotLoadable, wantErr: []string{"org/bin", "model.safetensors", "pytorch_model.bin"}},
		{name: "no tokenizer.json", model: "org/notok", is: ErrNotLoadable, wantErr: []string{"tokenizer.json"}},
		{name: "index names a missing shard", model: "org/badindex", wantErr: []string{"model-00001-of-00002.safetensors", "does not have"}},
		{name: "index names a path", model: "org/escindex", wantErr: []string{`"../x.safetensors"`}},
		{name: "not a name", model: "no-slash", is: ErrBadName, wantErr: []string{"no-slash"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := isolate(t)
			h := hubtest.New(t)
			h.Add("org/m", hubtest.Commit("one"), false, hubtest.DefaultModel(t), "main")
			h.Add("org/bin", hubtest.Commit("bin"), false, binOnly, "main")
			notok := wanted(hubtest.DefaultModel(t))
			notok = slices.DeleteFunc(notok, func(f hubtest.File) bool { return f.Name == "tokenizer.json" })
			h.Add("org/notok", hubtest.Commit("notok"), false, notok, "main")
			h.Add("org/badindex", hubtest.Commit("bad"), false, badIndex, "main")
			h.Add("org/escindex", hubtest.Commit("esc"), false, escIndex, "main")
			opts := options(h)
			opts.Token = tc.token
			_, err := Pull(context.Background(), tc.model, opts)
			if err == nil {
				t.Fatal("Pull succeeded")
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v does not wrap %v", err, tc.is)
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("error %q lacks %q", err, s)
				}
			}
			if got := h.Requests("GET /blobs/"); len(got) > 0 {
				t.Errorf("weights were downloaded before the refusal: %v", got)
			}
			if snaps, _ := filepath.Glob(filepath.Join(cache, "*", "snapshots", "*")); len(snaps) > 0 {
				t.Errorf("snapshots left: %v", snaps)
			}
		})
	}
}

// TestOffline checks that HF_HUB_OFFLINE stops Pull before any request, and that Resolve still
// finds what is cached.
func TestOffline(t *testing.T) {
	isolate(t)
	h := hubtest.New(t)
	h.Add("org/m", hubtest.Commit("one"), false, hubtest.DefaultModel(t), "main")
	dir, err := Pull(context.Background(), "org/m", options(h))
	if err != nil {
		t.Fatal(err)
	}
	before := len(h.Requests(""))
	for _, tc := range []struct{ name, env, value string }{
		{"HF_HUB_OFFLINE=1", "HF_HUB_OFFLINE", "1"},
		{"HF_HUB_OFFLINE=true", "HF_HUB_OFFLINE", "true"},
		{"TRANSFORMERS_OFFLINE=YES", "TRANSFORMERS_OFFLINE", "YES"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			_, err := Pull(context.Background(), "org/m", options(h))
			if !errors.Is(err, ErrOffline) || !strings.Contains(err.Error(), "org/m") || !strings.Contains(err.Error(), "HF_HUB_OFFLINE") {
				t.Errorf("Pull offline: %v, want ErrOffline naming the model and HF_HUB_OFFLINE", err)
			}
			if got, err := Resolve("org/m"); got != dir || err != nil {
				t.Errorf("Resolve offline = %q, %v; want %q", got, err, dir)
			}
			if _, err := Resolve("org/other"); !errors.Is(err, ErrNotCached) {
				t.Errorf("Resolve of an uncached model offline: %v, want ErrNotCached", err)
			}
		})
	}
	if after := len(h.Requests("")); after != before {
		t.Errorf("%d requests reached the hub in offline mode", after-before)
	}
}

// TestPullConcurrent runs two pulls of one model at once: both succeed and the weights cross the
// network once, since the second waits on the blob's lock and then finds it.
func TestPullConcurrent(t *testing.T) {
	cache := isolate(t)
	h := hubtest.New(t)
	files := hubtest.DefaultModel(t)
	h.Add("org/m", hubtest.Commit("one"), false, files, "main")
	var wg sync.WaitGroup
	errs := make([]error, 2)
	for i := range errs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, errs[i] = Pull(context.Background(), "org/m", options(h))
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	checkLayout(t, cache, "org/m", hubtest.Commit("one"), []string{"main"}, wanted(files))
	if got := h.Requests("GET /blobs/"); len(got) != 1 {
		t.Errorf("weights fetched %d times, want once: %v", len(got), got)
	}
}

// TestPullProgress checks that a pull reports its plan and its progress to PullOptions.Progress, and
// that bytes a restarted download throws away are taken off the count again.
func TestPullProgress(t *testing.T) {
	for _, tc := range []struct {
		name  string
		setup func(*hubtest.Server)
	}{
		{name: "plain", setup: func(*hubtest.Server) {}},
		{name: "restarted by a server that ignores the range", setup: func(h *hubtest.Server) {
			h.Break("model.safetensors", hubtest.Cut, 4<<20)
			h.IgnoreRanges()
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			isolate(t)
			h := hubtest.New(t)
			h.Add("org/m", hubtest.Commit("one"), false, hubtest.DefaultModel(t), "main")
			tc.setup(h)
			var out strings.Builder
			opts := options(h)
			opts.Progress = &out
			if _, err := Pull(context.Background(), "org/m", opts); err != nil {
				t.Fatal(err)
			}
			for _, want := range []string{"pull org/m: commit " + hubtest.Commit("one") + ", 5 files, 9.31 MB to fetch", "pull org/m: 9.31 MB in "} {
				if !strings.Contains(out.String(), want) {
					t.Errorf("progress output %q lacks %q", out.String(), want)
				}
			}
		})
	}
}

// TestPullMisbehavingServer checks that a server that never lets a download finish, or sends more
// than the file, makes Pull fail in bounded time and space, with nothing published, instead of
// retrying or writing without end.
func TestPullMisbehavingServer(t *testing.T) {
	files := hubtest.DefaultModel(t)
	weightsFile := files[slices.IndexFunc(files, func(f hubtest.File) bool { return f.Name == "model.safetensors" })]
	for _, tc := range []struct {
		name    string
		setup   func(*hubtest.Server)
		is      error
		wantErr string
	}{
		{name: "ignores ranges and drops every connection at the same byte",
			setup:   func(h *hubtest.Server) { h.IgnoreRanges(); h.Break("model.safetensors", hubtest.Flaky, 1000) },
			wantErr: "without progress"},
		{name: "sends more than the file, without end", setup: func(h *hubtest.Server) { h.Break("model.safetensors", hubtest.Endless, 0) },
			is: ErrCorrupt, wantErr: "model.safetensors"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := isolate(t)
			h := hubtest.New(t)
			h.Add("org/m", hubtest.Commit("one"), false, files, "main")
			tc.setup(h)
			ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
			defer cancel()
			_, err := Pull(ctx, "org/m", options(h))
			if err == nil || errors.Is(err, context.DeadlineExceeded) || !strings.Contains(err.Error(), tc.wantErr) {
				t.Fatalf("Pull: %v, want an error naming %q before the deadline", err, tc.wantErr)
			}
			if tc.is != nil && !errors.Is(err, tc.is) {
				t.Errorf("error %v does not wrap %v", err, tc.is)
			}
			if sent := h.BytesSent("model.safetensors"); sent > 4*int64(len(weightsFile.Data)) {
				t.Errorf("read %d bytes of a %d-byte file", sent, len(weightsFile.Data))
			}
			repoDir := filepath.Join(cache, "models--org--m")
			for _, p := range []string{filepath.Join(repoDir, "blobs", weightsFile.ETag()), filepath.Join(repoDir, "snapshots"), filepath.Join(repoDir, "refs", "main")} {
				if exists(p) {
					t.Errorf("%s exists after a failed download", p)
				}
			}
		})
	}
}

// TestPullWaitsForLock holds a blob's lock as another process downloading it would, and checks that
// Pull says that it waits (so that a long wait is not silent), then finishes once the lock is
// released; a lock file that no one holds (left by a killed process) does not stop it.
func TestPullWaitsForLock(t *testing.T) {
	files := hubtest.DefaultModel(t)
	weightsFile := files[slices.IndexFunc(files, func(f hubtest.File) bool { return f.Name == "model.safetensors" })]
	for _, tc := range []struct {
		name     string
		hold     bool
		wantWait bool
	}{
		{name: "held by another download", hold: true, wantWait: true},
		{name: "left by a killed process", hold: false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cache := isolate(t)
			h := hubtest.New(t)
			h.Add("org/m", hubtest.Commit("one"), false, files, "main")
			lock := filepath.Join(cache, ".locks", "models--org--m", weightsFile.ETag()+".lock")
			if err := os.MkdirAll(filepath.Dir(lock), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(lock, nil, 0o644); err != nil {
				t.Fatal(err)
			}
			if tc.hold {
				unlock, err := lockFile(context.Background(), lock, nil)
				if err != nil {
					t.Fatal(err)
				}
				time.AfterFunc(500*time.Millisecond, unlock)
			}
			var logged strings.Builder
			var mu sync.Mutex
			opts := options(h)
			opts.Log = slog.New(slog.NewTextHandler(lockedWriter{&mu, &logged}, nil))
			if _, err := Pull(context.Background(), "org/m", opts); err != nil {
				t.Fatal(err)
			}
			checkLayout(t, cache, "org/m", hubtest.Commit("one"), []string{"main"}, wanted(files))
			mu.Lock()
			defer mu.Unlock()
			if waited := strings.Contains(logged.String(), "waiting"); waited != tc.wantWait {
				t.Errorf("log %q: said it waited %v, want %v", logged.String(), waited, tc.wantWait)
			}
		})
	}
}

type lockedWriter struct {
	mu *sync.Mutex
	w  io.Writer
}

func (l lockedWriter) Write(b []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(b)
}
