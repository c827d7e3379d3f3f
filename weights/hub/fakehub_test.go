package hub

import (
	"bytes"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
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

// fakeHub speaks, on 127.0.0.1, the endpoints of the Hugging Face hub that Pull uses, as the hub
// documents and huggingface_hub reads them:
//
//	GET  /api/models/ORG/NAME/revision/REV[?blobs=true]   model info: sha, gated, siblings
//	HEAD /ORG/NAME/resolve/REV/FILE   a Git file: 200, ETag (Git blob id), Content-Length
//	                                  an LFS file: 302 to the CDN, X-Linked-Etag (sha256), X-Linked-Size
//	GET  /ORG/NAME/resolve/REV/FILE   the same, with the Git file's body (ranges honoured)
//	GET  cdn/blobs/SHA256?signature  the LFS file's body (ranges honoured) on a second server
//
// with X-Repo-Commit on every answer, X-Error-Code and X-Error-Message on refusals (RepoNotFound,
// RevisionNotFound, EntryNotFound, GatedRepo: 401 without a token, 403 with the wrong one), and a
// relative 307 for a renamed repository. The CDN refuses requests that carry an Authorization
// header, as a signed-URL store does. Hooks break transfers on purpose: drop the connection once
// after some bytes, stall once, serve wrong or short content, ignore ranges.
type fakeHub struct {
	t     *testing.T
	hub   *httptest.Server
	cdn   *httptest.Server
	token string // the token that opens gated repositories

	mu      sync.Mutex
	repos   map[string]*fakeRepo
	renamed map[string]string // old ORG/NAME → new
	log     []string          // "METHOD PATH [Range]" of every request, in order
	sent    map[string]int64  // body bytes sent per file name

	cutAfter    map[string]int64          // file → drop the connection after this many body bytes, once
	stallAfter  map[string]int64          // file → send this many bytes, then stall until the client leaves, once
	stalled     chan struct{}             // receives when a stall begins
	corrupt     map[string]bool           // file → flip a byte of its content
	short       map[string]bool           // file → send 10 bytes fewer than the headers say
	ignoreRange bool                      // answer every request with the whole file (200)
	authSeen    map[string][]string       // host → Authorization headers it received
	onRequest   func(method, path string) // called for every request, before the answer
}

// fakeRepo is one repository: commits and the branches and tags that name them.
type fakeRepo struct {
	gated   bool
	refs    map[string]string     // branch or tag → commit
	commits map[string][]fakeFile // commit → files
}

// fakeFile is one file of a commit.
type fakeFile struct {
	name string
	data []byte
	lfs  bool
}

func (f fakeFile) sha256() string { s := sha256.Sum256(f.data); return hex.EncodeToString(s[:]) }

// gitOID is the Git blob id of data: what the hub gives as a Git file's ETag.
func gitOID(data []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(data))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

// etag is the ETag Pull names the file's blob by.
func (f fakeFile) etag() string {
	if f.lfs {
		return f.sha256()
	}
	return gitOID(f.data)
}

// fakeCommit makes a commit hash from a label.
func fakeCommit(label string) string { s := sha1.Sum([]byte(label)); return hex.EncodeToString(s[:]) }

func newFakeHub(t *testing.T) *fakeHub {
	t.Helper()
	h := &fakeHub{t: t, token: "hf_good", repos: map[string]*fakeRepo{}, renamed: map[string]string{},
		sent: map[string]int64{}, cutAfter: map[string]int64{}, stallAfter: map[string]int64{},
		stalled: make(chan struct{}, 8), corrupt: map[string]bool{}, short: map[string]bool{}, authSeen: map[string][]string{}}
	h.hub = httptest.NewServer(http.HandlerFunc(h.serveHub))
	h.cdn = httptest.NewServer(http.HandlerFunc(h.serveCDN))
	t.Cleanup(h.cdn.Close)
	t.Cleanup(h.hub.Close)
	return h
}

// add puts a repository with one commit, named by the given refs.
func (h *fakeHub) add(repo, commit string, gated bool, files []fakeFile, refs ...string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	r := h.repos[repo]
	if r == nil {
		r = &fakeRepo{refs: map[string]string{}, commits: map[string][]fakeFile{}}
		h.repos[repo] = r
	}
	r.gated = r.gated || gated
	r.commits[commit] = files
	for _, ref := range refs {
		r.refs[ref] = commit
	}
}

// requests returns the log lines that contain s.
func (h *fakeHub) requests(s string) []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for _, l := range h.log {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return out
}

// bytesSent returns the body bytes sent for file so far.
func (h *fakeHub) bytesSent(file string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.sent[file]
}

func (h *fakeHub) record(r *http.Request) {
	h.mu.Lock()
	line := r.Method + " " + r.URL.Path
	if rg := r.Header.Get("Range"); rg != "" {
		line += " " + rg
	}
	h.log = append(h.log, line)
	if a := r.Header.Get("Authorization"); a != "" {
		h.authSeen[r.Host] = append(h.authSeen[r.Host], a)
	}
	hook := h.onRequest
	h.mu.Unlock()
	if hook != nil {
		hook(r.Method, r.URL.Path)
	}
}

func hubRefusal(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("X-Error-Code", code)
	w.Header().Set("X-Error-Message", msg)
	http.Error(w, `{"error":"`+msg+`"}`, status)
}

// lookup finds repo and resolves rev; it writes the refusal and returns false when it cannot.
func (h *fakeHub) lookup(w http.ResponseWriter, r *http.Request, repo, rev string) (*fakeRepo, string, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	rp := h.repos[repo]
	authorized := r.Header.Get("Authorization") == "Bearer "+h.token
	if rp == nil {
		if authorized { // the hub answers 401 for unknown repositories unless the caller is logged in
			hubRefusal(w, 404, "RepoNotFound", "Repository not found")
		} else {
			hubRefusal(w, 401, "RepoNotFound", "Repository not found")
		}
		return nil, "", false
	}
	commit := rev
	if c, ok := rp.refs[rev]; ok {
		commit = c
	}
	if _, ok := rp.commits[commit]; !ok {
		hubRefusal(w, 404, "RevisionNotFound", "Invalid rev id: "+rev)
		return nil, "", false
	}
	return rp, commit, true
}

func (h *fakeHub) serveHub(w http.ResponseWriter, r *http.Request) {
	h.record(r)
	path := r.URL.EscapedPath()
	if rest, ok := strings.CutPrefix(path, "/api/models/"); ok && r.Method == http.MethodGet {
		parts := strings.SplitN(rest, "/", 4)
		if len(parts) != 4 || parts[2] != "revision" {
			http.NotFound(w, r)
			return
		}
		rev, err := url.PathUnescape(parts[3])
		if err != nil {
			http.Error(w, err.Error(), 400)
			return
		}
		h.serveInfo(w, r, parts[0]+"/"+parts[1], rev)
		return
	}
	parts := strings.SplitN(strings.TrimPrefix(path, "/"), "/", 5)
	if len(parts) != 5 || parts[2] != "resolve" {
		http.NotFound(w, r)
		return
	}
	repo := parts[0] + "/" + parts[1]
	h.mu.Lock()
	newRepo, moved := h.renamed[repo]
	h.mu.Unlock()
	if moved { // a renamed repository: a relative redirect to its new name
		w.Header().Set("Location", "/"+newRepo+"/resolve/"+parts[3]+"/"+parts[4])
		w.WriteHeader(http.StatusTemporaryRedirect)
		return
	}
	rev, err1 := url.PathUnescape(parts[3])
	file, err2 := url.PathUnescape(parts[4])
	if err1 != nil || err2 != nil {
		http.Error(w, "bad path", 400)
		return
	}
	rp, commit, ok := h.lookup(w, r, repo, rev)
	if !ok {
		return
	}
	w.Header().Set("X-Repo-Commit", commit)
	if rp.gated {
		switch r.Header.Get("Authorization") {
		case "Bearer " + h.token:
		case "":
			hubRefusal(w, 401, "GatedRepo", "Access to model "+repo+" is restricted. You must have access to it and be authenticated to access it. Please log in.")
			return
		default:
			hubRefusal(w, 403, "GatedRepo", "Access to model "+repo+" is restricted and you are not in the authorized list. Visit https://huggingface.co/"+repo+" to ask for access.")
			return
		}
	}
	i := slices.IndexFunc(rp.commits[commit], func(f fakeFile) bool { return f.name == file })
	if i < 0 {
		hubRefusal(w, 404, "EntryNotFound", file+" does not exist on \""+rev+"\"")
		return
	}
	f := rp.commits[commit][i]
	if f.lfs {
		w.Header().Set("ETag", `"`+gitOID([]byte("pointer of "+f.name))+`"`) // the pointer's, not the content's
		w.Header().Set("X-Linked-Etag", `"`+f.sha256()+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(f.data)))
		w.Header().Set("Location", h.cdn.URL+"/blobs/"+f.sha256()+"?name="+url.QueryEscape(f.name)+"&X-Amz-Signature=abc")
		w.WriteHeader(http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+gitOID(f.data)+`"`)
	h.serveContent(w, r, f)
}

func (h *fakeHub) serveInfo(w http.ResponseWriter, r *http.Request, repo, rev string) {
	rp, commit, ok := h.lookup(w, r, repo, rev)
	if !ok {
		return
	}
	type lfs struct {
		SHA256      string `json:"sha256"`
		Size        int    `json:"size"`
		PointerSize int    `json:"pointerSize"`
	}
	type sib struct {
		Name   string `json:"rfilename"`
		Size   *int   `json:"size,omitempty"`
		BlobID string `json:"blobId,omitempty"`
		LFS    *lfs   `json:"lfs,omitempty"`
	}
	blobs := r.URL.Query().Get("blobs") == "true"
	var sibs []sib
	for _, f := range rp.commits[commit] {
		s := sib{Name: f.name}
		if blobs {
			n := len(f.data)
			s.Size, s.BlobID = &n, gitOID(f.data)
			if f.lfs {
				s.LFS = &lfs{SHA256: f.sha256(), Size: n, PointerSize: 134}
			}
		}
		sibs = append(sibs, s)
	}
	var gated any = false
	if rp.gated {
		gated = "manual"
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"_id": "x", "id": repo, "modelId": repo, "sha": commit,
		"private": false, "gated": gated, "disabled": false, "siblings": sibs})
}

func (h *fakeHub) serveCDN(w http.ResponseWriter, r *http.Request) {
	h.record(r)
	if r.Header.Get("Authorization") != "" { // a signed URL takes no other credentials
		http.Error(w, "Only one auth mechanism allowed", http.StatusBadRequest)
		return
	}
	sha := strings.TrimPrefix(r.URL.Path, "/blobs/")
	h.mu.Lock()
	var found *fakeFile
	for _, rp := range h.repos {
		for _, files := range rp.commits {
			for _, f := range files {
				if f.lfs && f.sha256() == sha {
					found = &f
				}
			}
		}
	}
	h.mu.Unlock()
	if found == nil {
		http.NotFound(w, r)
		return
	}
	h.serveContent(w, r, *found)
}

// serveContent sends f's content with ranges honoured, through the hooks.
func (h *fakeHub) serveContent(w http.ResponseWriter, r *http.Request, f fakeFile) {
	h.mu.Lock()
	data := f.data
	if h.corrupt[f.name] {
		data = bytes.Clone(data)
		data[len(data)/2] ^= 0xff
	}
	if h.short[f.name] {
		data = data[:len(data)-10]
	}
	if h.ignoreRange {
		r.Header.Del("Range")
	}
	limit, stall := int64(-1), false
	if n, ok := h.cutAfter[f.name]; ok {
		limit = n
		delete(h.cutAfter, f.name)
	} else if n, ok := h.stallAfter[f.name]; ok {
		limit, stall = n, true
		delete(h.stallAfter, f.name)
	}
	h.mu.Unlock()
	cw := &countingWriter{ResponseWriter: w, h: h, file: f.name, limit: limit, stall: stall, r: r}
	http.ServeContent(cw, r, "", time.Time{}, bytes.NewReader(data))
}

// countingWriter counts the body bytes sent for a file and, with a limit, stops there: it drops the
// connection (http.ErrAbortHandler) or stalls until the client goes away.
type countingWriter struct {
	http.ResponseWriter
	h     *fakeHub
	file  string
	limit int64 // -1: none
	stall bool
	r     *http.Request
	n     int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	if c.limit >= 0 && c.n+int64(len(p)) > c.limit {
		p = p[:c.limit-c.n]
		c.ResponseWriter.Write(p)
		c.add(len(p))
		c.ResponseWriter.(http.Flusher).Flush()
		if c.stall {
			c.h.stalled <- struct{}{}
			<-c.r.Context().Done()
		}
		panic(http.ErrAbortHandler)
	}
	n, err := c.ResponseWriter.Write(p)
	c.add(n)
	return n, err
}

func (c *countingWriter) add(n int) {
	c.n += int64(n)
	c.h.mu.Lock()
	c.h.sent[c.file] += int64(n)
	c.h.mu.Unlock()
}

// defaultModelFiles returns gollm's built-in model (a real LLaMA folder that weights.Open loads)
// as a repository's files, model.safetensors in LFS, with files of other formats beside it that
// Pull must leave alone.
func defaultModelFiles(t *testing.T) []fakeFile {
	t.Helper()
	var files []fakeFile
	for _, n := range []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"} {
		data, err := os.ReadFile(filepath.Join("..", "defaultmodel", "files", n))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, fakeFile{name: n, data: data, lfs: strings.HasSuffix(n, ".safetensors")})
	}
	return append(files, decoys()...)
}

// decoys are files a model repository often carries that gollm does not read.
func decoys() []fakeFile {
	return []fakeFile{
		{name: ".gitattributes", data: []byte("*.safetensors filter=lfs diff=lfs merge=lfs -text\n")},
		{name: "README.md", data: []byte("# a model\n")},
		{name: "pytorch_model.bin", data: bytes.Repeat([]byte("bin"), 1000), lfs: true},
		{name: "model.gguf", data: bytes.Repeat([]byte("gguf"), 1000), lfs: true},
		{name: "flax_model.msgpack", data: bytes.Repeat([]byte("msgpack"), 100), lfs: true},
		{name: "onnx/model.onnx", data: bytes.Repeat([]byte("onnx"), 100), lfs: true},
		{name: "original/consolidated.00.pth", data: bytes.Repeat([]byte("pth"), 100), lfs: true},
		{name: "vocab.json", data: []byte("{}")},
	}
}

// shardedFiles splits the built-in model's weights into two shards with an index, plus a third
// .safetensors file the index does not name, which Pull must not fetch.
func shardedFiles(t *testing.T) []fakeFile {
	t.Helper()
	dir := t.TempDir()
	set, err := weights.OpenSafetensors(filepath.Join("..", "defaultmodel", "files"))
	if err != nil {
		t.Fatal(err)
	}
	defer set.Close()
	names := set.Names()
	shards := [][]*weights.Tensor{nil, nil}
	weightMap := map[string]string{}
	for i, n := range names {
		tensor, err := set.Get(n)
		if err != nil {
			t.Fatal(err)
		}
		s := i * 2 / len(names)
		shards[s] = append(shards[s], tensor)
		weightMap[n] = fmt.Sprintf("model-%05d-of-00002.safetensors", s+1)
	}
	var files []fakeFile
	for _, f := range defaultModelFiles(t) {
		if f.name != "model.safetensors" {
			files = append(files, f)
		}
	}
	for s, tensors := range shards {
		name := fmt.Sprintf("model-%05d-of-00002.safetensors", s+1)
		path := filepath.Join(dir, name)
		if err := weights.WriteSafetensors(path, tensors); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, fakeFile{name: name, data: data, lfs: true})
	}
	index, err := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": 0}, "weight_map": weightMap})
	if err != nil {
		t.Fatal(err)
	}
	return append(files,
		fakeFile{name: "model.safetensors.index.json", data: index},
		fakeFile{name: "consolidated.safetensors", data: bytes.Repeat([]byte("x"), 5000), lfs: true})
}
