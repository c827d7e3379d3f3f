// Package hubtest runs a stand-in for the Hugging Face hub on 127.0.0.1, for the tests of package hub
// and of what pulls models through it (the command line, the Go API), so that they fetch real model
// folders without the network. It serves the endpoints hub.Pull uses, as the hub documents them and
// huggingface_hub reads them:
//
//	GET  /api/models/ORG/NAME/revision/REV[?blobs=true]  model info: sha, gated, siblings
//	HEAD /ORG/NAME/resolve/REV/FILE  a Git file: 200, ETag (its Git blob id), Content-Length;
//	                                 an LFS file: 302 to the CDN, X-Linked-Etag (its sha256), X-Linked-Size
//	GET  /ORG/NAME/resolve/REV/FILE  the same, with a Git file's content (ranges honoured)
//	GET  CDN/blobs/SHA256?signature  a file's content by its sha256 (ranges honoured), on a second server
//
// with X-Repo-Commit on every answer about a file, X-Error-Code and X-Error-Message on refusals
// (RepoNotFound: 401, or 404 with the right token; RevisionNotFound, EntryNotFound; GatedRepo: 401
// without a token, 403 with the wrong one) and a relative 307 for a renamed repository. The CDN
// refuses a request that carries an Authorization header, as a signed-URL store does. Break makes
// transfers fail on purpose. It owns nothing but that; it is imported by tests only.
package hubtest

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
	"github.com/gollm/gollm/weights/defaultmodel"
)

// Token is the access token that opens the server's gated repositories.
const Token = "hf_hubtest"

// File is one file of a commit.
type File struct {
	Name string // path in the repository
	Data []byte
	LFS  bool // stored in Git LFS: served from the CDN, named by its sha256
}

// SHA256 returns the hex sha256 of the file's content.
func (f File) SHA256() string { s := sha256.Sum256(f.Data); return hex.EncodeToString(s[:]) }

// ETag returns what the hub gives as the file's ETag, and so its blob's name in the cache: the
// sha256 of an LFS file, the Git blob id of another.
func (f File) ETag() string {
	if f.LFS {
		return f.SHA256()
	}
	return GitOID(f.Data)
}

// GitOID returns the Git blob id of data: the sha1 of "blob SIZE\x00" and data.
func GitOID(data []byte) string {
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", len(data))
	h.Write(data)
	return hex.EncodeToString(h.Sum(nil))
}

// Commit makes a commit hash from a label.
func Commit(label string) string { s := sha1.Sum([]byte(label)); return hex.EncodeToString(s[:]) }

// Fault is a way Break makes a file's transfer fail.
type Fault int

const (
	Cut         Fault = iota + 1 // drop the connection after the given bytes of the body, once
	Stall                        // send the given bytes, then stall until the client goes away, once; see Stalled
	Corrupt                      // flip a byte in the middle, every time
	Short                        // send 10 bytes fewer than the headers announce, every time
	Flaky                        // drop the connection after the given bytes of the body, every time
	RedirectGet                  // answer a GET (not a HEAD) of a Git file on the hub with a 302 to the CDN, every time
	Endless                      // send the content, then more bytes without end (no Content-Length), every time
)

type fault struct {
	kind  Fault
	after int64
}

// Server is a running stand-in for the hub and its CDN.
type Server struct {
	URL string // the hub's address: for PullOptions.Endpoint or HF_ENDPOINT

	hub, cdn *httptest.Server

	mu          sync.Mutex
	repos       map[string]*repo
	renamed     map[string]string // old ORG/NAME → new
	log         []string          // "METHOD PATH [RANGE]" of every request, in order
	sent        map[string]int64  // body bytes sent per file name
	faults      map[string]fault  // by file name
	ignoreRange bool
	cdnAuth     []string // Authorization headers the CDN received
	stalled     chan struct{}
}

type repo struct {
	gated   bool
	refs    map[string]string // branch or tag → commit
	commits map[string][]File // commit → files
}

// New starts a server that t closes.
func New(t testing.TB) *Server {
	t.Helper()
	s := &Server{repos: map[string]*repo{}, renamed: map[string]string{}, sent: map[string]int64{},
		faults: map[string]fault{}, stalled: make(chan struct{}, 16)}
	s.hub = httptest.NewServer(http.HandlerFunc(s.serveHub))
	s.cdn = httptest.NewServer(http.HandlerFunc(s.serveCDN))
	s.URL = s.hub.URL
	t.Cleanup(s.cdn.Close)
	t.Cleanup(s.hub.Close)
	return s
}

// Add puts files as commit of repo (ORG/NAME), named by refs (branches, tags, refs/pr/N); a gated
// repository's files are served only with Token.
func (s *Server) Add(name, commit string, gated bool, files []File, refs ...string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.repos[name]
	if r == nil {
		r = &repo{refs: map[string]string{}, commits: map[string][]File{}}
		s.repos[name] = r
	}
	r.gated = r.gated || gated
	r.commits[commit] = files
	for _, ref := range refs {
		r.refs[ref] = commit
	}
}

// Rename makes old a former name of repository current: its model info is current's, and its
// files answer with a relative redirect to current's.
func (s *Server) Rename(old, current string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.renamed[old] = current
	s.repos[old] = s.repos[current]
}

// Break makes the transfers of the file called name fail as f says; after is the bytes sent first
// for Cut and Stall.
func (s *Server) Break(name string, f Fault, after int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.faults[name] = fault{f, after}
}

// IgnoreRanges makes every download answer with the whole file (200), as some servers do.
func (s *Server) IgnoreRanges() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.ignoreRange = true
}

// Stalled receives each time a Stall begins.
func (s *Server) Stalled() <-chan struct{} { return s.stalled }

// Requests returns the log lines ("METHOD PATH [Range]") of the requests so far that contain substr.
func (s *Server) Requests(substr string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []string
	for _, l := range s.log {
		if strings.Contains(l, substr) {
			out = append(out, l)
		}
	}
	return out
}

// BytesSent returns the body bytes sent so far of the file called name, over all requests.
func (s *Server) BytesSent(name string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sent[name]
}

// CDNAuthorization returns the Authorization headers the CDN has received (and refused).
func (s *Server) CDNAuthorization() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.cdnAuth)
}

func (s *Server) record(r *http.Request, cdn bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	line := r.Method + " " + r.URL.Path
	if rg := r.Header.Get("Range"); rg != "" {
		line += " " + rg
	}
	s.log = append(s.log, line)
	if a := r.Header.Get("Authorization"); a != "" && cdn {
		s.cdnAuth = append(s.cdnAuth, a)
	}
}

func refuse(w http.ResponseWriter, status int, code, msg string) {
	w.Header().Set("X-Error-Code", code)
	w.Header().Set("X-Error-Message", msg)
	http.Error(w, `{"error":"`+msg+`"}`, status)
}

// lookup finds the repository and resolves rev; it writes the refusal and returns false when it
// cannot.
func (s *Server) lookup(w http.ResponseWriter, r *http.Request, name, rev string) (*repo, string, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	rp := s.repos[name]
	if rp == nil {
		if r.Header.Get("Authorization") == "Bearer "+Token { // the hub says 401 unless one is logged in
			refuse(w, 404, "RepoNotFound", "Repository not found")
		} else {
			refuse(w, 401, "RepoNotFound", "Repository not found")
		}
		return nil, "", false
	}
	commit := rev
	if c, ok := rp.refs[rev]; ok {
		commit = c
	}
	if _, ok := rp.commits[commit]; !ok {
		refuse(w, 404, "RevisionNotFound", "Invalid rev id: "+rev)
		return nil, "", false
	}
	return rp, commit, true
}

func (s *Server) serveHub(w http.ResponseWriter, r *http.Request) {
	s.record(r, false)
	path := r.URL.EscapedPath()
	if rest, ok := strings.CutPrefix(path, "/api/models/"); ok && r.Method == http.MethodGet {
		parts := strings.SplitN(rest, "/", 4)
		if len(parts) != 4 || parts[2] != "revision" {
			http.NotFound(w, r)
			return
		}
		rev, err := url.PathUnescape(parts[3])
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.serveInfo(w, r, parts[0]+"/"+parts[1], rev)
		return
	}
	parts := strings.SplitN(strings.TrimPrefix(path, "/"), "/", 5)
	if len(parts) != 5 || parts[2] != "resolve" || (r.Method != http.MethodGet && r.Method != http.MethodHead) {
		http.NotFound(w, r)
		return
	}
	name := parts[0] + "/" + parts[1]
	s.mu.Lock()
	current, moved := s.renamed[name]
	s.mu.Unlock()
	if moved {
		w.Header().Set("Location", "/"+current+"/resolve/"+parts[3]+"/"+parts[4])
		w.WriteHeader(http.StatusTemporaryRedirect)
		return
	}
	rev, err1 := url.PathUnescape(parts[3])
	file, err2 := url.PathUnescape(parts[4])
	if err1 != nil || err2 != nil {
		http.Error(w, "bad path", http.StatusBadRequest)
		return
	}
	rp, commit, ok := s.lookup(w, r, name, rev)
	if !ok {
		return
	}
	w.Header().Set("X-Repo-Commit", commit)
	if rp.gated {
		switch r.Header.Get("Authorization") {
		case "Bearer " + Token:
		case "":
			refuse(w, 401, "GatedRepo", "Access to model "+name+" is restricted. You must have access to it and be authenticated to access it. Please log in.")
			return
		default:
			refuse(w, 403, "GatedRepo", "Access to model "+name+" is restricted and you are not in the authorized list. Visit https://huggingface.co/"+name+" to ask for access.")
			return
		}
	}
	i := slices.IndexFunc(rp.commits[commit], func(f File) bool { return f.Name == file })
	if i < 0 {
		refuse(w, 404, "EntryNotFound", file+" does not exist on \""+rev+"\"")
		return
	}
	f := rp.commits[commit][i]
	if f.LFS {
		w.Header().Set("ETag", `"`+GitOID([]byte("pointer of "+f.Name))+`"`) // the pointer's, not the content's
		w.Header().Set("X-Linked-Etag", `"`+f.SHA256()+`"`)
		w.Header().Set("X-Linked-Size", strconv.Itoa(len(f.Data)))
		w.Header().Set("Location", s.cdn.URL+"/blobs/"+f.SHA256()+"?X-Amz-Signature=test")
		w.WriteHeader(http.StatusFound)
		return
	}
	w.Header().Set("ETag", `"`+GitOID(f.Data)+`"`)
	s.mu.Lock()
	redirect := s.faults[f.Name].kind == RedirectGet && r.Method == http.MethodGet
	s.mu.Unlock()
	if redirect {
		w.Header().Set("Location", s.cdn.URL+"/blobs/"+f.SHA256()+"?X-Amz-Signature=test")
		w.WriteHeader(http.StatusFound)
		return
	}
	s.serveContent(w, r, f)
}

func (s *Server) serveInfo(w http.ResponseWriter, r *http.Request, name, rev string) {
	rp, commit, ok := s.lookup(w, r, name, rev)
	if !ok {
		return
	}
	type lfs struct {
		SHA256      string `json:"sha256"`
		Size        int    `json:"size"`
		PointerSize int    `json:"pointerSize"`
	}
	type sibling struct {
		Name   string `json:"rfilename"`
		Size   *int   `json:"size,omitempty"`
		BlobID string `json:"blobId,omitempty"`
		LFS    *lfs   `json:"lfs,omitempty"`
	}
	blobs := r.URL.Query().Get("blobs") == "true"
	var siblings []sibling
	for _, f := range rp.commits[commit] {
		sb := sibling{Name: f.Name}
		if blobs {
			n := len(f.Data)
			sb.Size, sb.BlobID = &n, GitOID(f.Data)
			if f.LFS {
				sb.LFS = &lfs{SHA256: f.SHA256(), Size: n, PointerSize: 134}
			}
		}
		siblings = append(siblings, sb)
	}
	var gated any = false
	if rp.gated {
		gated = "manual"
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(map[string]any{"_id": "0", "id": name, "modelId": name, "sha": commit,
		"private": false, "gated": gated, "disabled": false, "siblings": siblings})
}

func (s *Server) serveCDN(w http.ResponseWriter, r *http.Request) {
	s.record(r, true)
	if r.Header.Get("Authorization") != "" { // a signed URL takes no other credentials
		http.Error(w, "Only one auth mechanism allowed", http.StatusBadRequest)
		return
	}
	sha := strings.TrimPrefix(r.URL.Path, "/blobs/")
	s.mu.Lock()
	var found *File
	for _, rp := range s.repos {
		for _, files := range rp.commits {
			for _, f := range files {
				if f.SHA256() == sha {
					found = &f
				}
			}
		}
	}
	s.mu.Unlock()
	if found == nil {
		http.NotFound(w, r)
		return
	}
	s.serveContent(w, r, *found)
}

// serveContent sends f's content with ranges honoured, through the faults.
func (s *Server) serveContent(w http.ResponseWriter, r *http.Request, f File) {
	s.mu.Lock()
	data := f.Data
	limit, stall := int64(-1), false
	switch ft := s.faults[f.Name]; ft.kind {
	case Corrupt:
		data = bytes.Clone(data)
		data[len(data)/2] ^= 0xff
	case Short:
		data = data[:max(len(data)-10, 0)]
	case Cut, Stall:
		limit, stall = ft.after, ft.kind == Stall
		delete(s.faults, f.Name)
	case Flaky:
		limit = ft.after
	}
	endless := s.faults[f.Name].kind == Endless
	if s.ignoreRange {
		r.Header.Del("Range")
	}
	s.mu.Unlock()
	cw := &countingWriter{ResponseWriter: w, s: s, file: f.Name, limit: limit, stall: stall, r: r}
	if endless {
		w.WriteHeader(http.StatusOK)
		for junk := bytes.Repeat([]byte{'x'}, 64<<10); ; data = junk {
			if _, err := cw.Write(data); err != nil || r.Context().Err() != nil {
				return
			}
		}
	}
	http.ServeContent(cw, r, "", time.Time{}, bytes.NewReader(data))
}

// countingWriter counts the body bytes sent of a file and, with a limit, stops there: it drops the
// connection (http.ErrAbortHandler) or stalls until the client goes away.
type countingWriter struct {
	http.ResponseWriter
	s     *Server
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
			c.s.stalled <- struct{}{}
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
	c.s.mu.Lock()
	c.s.sent[c.file] += int64(n)
	c.s.mu.Unlock()
}

// DefaultModel returns gollm's built-in model (a real LLaMA folder that weights.Open loads) as a
// repository's files, model.safetensors in LFS, followed by Decoys.
func DefaultModel(t testing.TB) []File {
	t.Helper()
	dir, err := defaultmodel.Dir()
	if err != nil {
		t.Fatal(err)
	}
	var files []File
	for _, n := range []string{"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json", "model.safetensors"} {
		data, err := os.ReadFile(filepath.Join(dir, n))
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, File{Name: n, Data: data, LFS: strings.HasSuffix(n, ".safetensors")})
	}
	return append(files, Decoys()...)
}

// Decoys are files model repositories often carry that gollm does not read.
func Decoys() []File {
	return []File{
		{Name: ".gitattributes", Data: []byte("*.safetensors filter=lfs diff=lfs merge=lfs -text\n")},
		{Name: "README.md", Data: []byte("# a model\n")},
		{Name: "pytorch_model.bin", Data: bytes.Repeat([]byte("bin"), 1000), LFS: true},
		{Name: "model.gguf", Data: bytes.Repeat([]byte("gguf"), 1000), LFS: true},
		{Name: "flax_model.msgpack", Data: bytes.Repeat([]byte("msgpack"), 100), LFS: true},
		{Name: "onnx/model.onnx", Data: bytes.Repeat([]byte("onnx"), 100), LFS: true},
		{Name: "original/consolidated.00.pth", Data: bytes.Repeat([]byte("pth"), 100), LFS: true},
		{Name: "vocab.json", Data: []byte("{}")},
	}
}

// UnindexedShard is the name of the .safetensors file Sharded adds that its index does not name.
const UnindexedShard = "consolidated.safetensors"

// Sharded returns files with their model.safetensors split into two shards and an index naming
// them, plus UnindexedShard, which a client must not fetch.
func Sharded(t testing.TB, files []File) []File {
	t.Helper()
	var out []File
	var single File
	for _, f := range files {
		if f.Name == "model.safetensors" {
			single = f
		} else {
			out = append(out, f)
		}
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	if err := os.WriteFile(path, single.Data, 0o644); err != nil {
		t.Fatal(err)
	}
	set, err := weights.OpenSafetensorsFiles(path)
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
		k := i * 2 / len(names)
		shards[k] = append(shards[k], tensor)
		weightMap[n] = fmt.Sprintf("model-%05d-of-00002.safetensors", k+1)
	}
	for k, tensors := range shards {
		name := fmt.Sprintf("model-%05d-of-00002.safetensors", k+1)
		p := filepath.Join(dir, name)
		if err := weights.WriteSafetensors(p, tensors); err != nil {
			t.Fatal(err)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		out = append(out, File{Name: name, Data: data, LFS: true})
	}
	index, err := json.Marshal(map[string]any{"metadata": map[string]any{"total_size": len(single.Data)}, "weight_map": weightMap})
	if err != nil {
		t.Fatal(err)
	}
	return append(out,
		File{Name: "model.safetensors.index.json", Data: index},
		File{Name: UnindexedShard, Data: bytes.Repeat([]byte("x"), 5000), LFS: true})
}
