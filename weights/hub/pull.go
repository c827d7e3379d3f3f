package hub

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gollm/gollm/internal/progress"
)

// Errors that Pull's errors wrap, for callers that branch on them.
var (
	// ErrOffline: HF_HUB_OFFLINE (or TRANSFORMERS_OFFLINE) is set, so the hub is not reached.
	ErrOffline = errors.New("offline mode (HF_HUB_OFFLINE) is set")
	// ErrGated: the model is gated and the request carried no token, or one whose account has not
	// been granted access.
	ErrGated = errors.New("gated model")
	// ErrNotFound: the hub has no such model (or it is private and no usable token was given),
	// revision or file.
	ErrNotFound = errors.New("not found on the hub")
	// ErrCorrupt: a downloaded file does not match the size or checksum the hub gave for it. The
	// partial file is deleted and nothing appears in the snapshot.
	ErrCorrupt = errors.New("download does not match the hub's checksum")
)

// PullOptions configure Pull. The zero value reads the environment as huggingface_hub does.
type PullOptions struct {
	Endpoint string       // the hub's address; default HF_ENDPOINT, else https://huggingface.co
	Token    string       // access token for gated and private models; default HF_TOKEN or $HF_HOME/token
	CacheDir string       // the cache folder; default CacheDir()
	Workers  int          // files downloaded at once; default 8
	Progress io.Writer    // where the download's progress goes (see internal/progress); nil: nowhere
	Log      *slog.Logger // resumed downloads and retries; nil: not logged
	Client   *http.Client // nil: a client with connection and response-header timeouts

	// Set by tests: attempts without a byte of progress before a download gives up, the first wait
	// between attempts (doubling), and how long a response body may send nothing.
	retries     int
	backoff     time.Duration
	idleTimeout time.Duration
}

// Defaults of PullOptions.
const (
	defaultWorkers     = 8
	defaultRetries     = 5
	defaultBackoff     = time.Second
	defaultIdleTimeout = time.Minute
)

// Pull fetches the files gollm needs of model (ORG/NAME or ORG/NAME@REVISION, where the revision is
// a branch, tag or commit; main by default) into the cache, and returns the snapshot folder.
//
// It asks the hub for the revision's commit and file list, then fetches config.json, tokenizer.json,
// the weights (model.safetensors, or model.safetensors.index.json and the shards it names) and the
// optional generation_config.json, tokenizer_config.json, special_tokens_map.json and
// chat_template.jinja/.json; nothing else. Files already in the cache are not fetched again. Up to
// Workers files download at once; a download cut short resumes where it stopped (an HTTP range
// request on blobs/ETAG.incomplete), in this call or the next; a finished file is checked (the
// sha256 of a Git LFS file, the Git blob id of another, and the size) before it is renamed to
// blobs/ETAG, and only then linked into the snapshot. The branch or tag is recorded in refs/ last, so
// that Resolve finds a revision only once every file is there.
//
// Errors wrap ErrOffline, ErrGated, ErrNotFound, ErrNotLoadable or ErrCorrupt where they apply and
// name the model and revision.
func Pull(ctx context.Context, model string, opts PullOptions) (string, error) {
	name, err := ParseName(model)
	if err != nil {
		return "", fmt.Errorf("hub: %w", err)
	}
	if Offline() {
		return "", fmt.Errorf("hub: cannot pull %s: %w: unset it to reach the hub (models already in the cache load without the network)", name, ErrOffline)
	}
	p := newPuller(name, opts)
	return p.pull(ctx)
}

// puller is one Pull's settings.
type puller struct {
	name       Name
	endpoint   string
	token      string
	cache      string
	repoDir    string
	workers    int
	client     *http.Client // follows redirects: downloads
	noRedirect *http.Client // the same transport, stopping at a redirect: metadata
	progress   io.Writer
	log        *slog.Logger
	retries    int
	backoff    time.Duration
	idle       time.Duration
	gated      bool // the model info marks the model as gated
}

func newPuller(name Name, o PullOptions) *puller {
	p := &puller{name: name, endpoint: strings.TrimRight(o.Endpoint, "/"), token: cleanToken(o.Token), cache: o.CacheDir,
		workers: o.Workers, client: o.Client, progress: o.Progress, log: o.Log,
		retries: o.retries, backoff: o.backoff, idle: o.idleTimeout}
	if p.endpoint == "" {
		p.endpoint = endpoint()
	}
	if p.token == "" {
		p.token = envToken()
	}
	if p.cache == "" {
		p.cache = CacheDir()
	}
	p.repoDir = filepath.Join(p.cache, folderName(name.Repo))
	if p.workers <= 0 {
		p.workers = defaultWorkers
	}
	if p.client == nil {
		p.client = &http.Client{Transport: &http.Transport{
			Proxy:                 http.ProxyFromEnvironment,
			DialContext:           (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
			TLSHandshakeTimeout:   30 * time.Second,
			ResponseHeaderTimeout: time.Minute,
			MaxIdleConnsPerHost:   defaultWorkers,
			ForceAttemptHTTP2:     true,
		}}
	}
	c := *p.client // a copy: the caller's client is left as it was
	c.CheckRedirect = sameHostAuth(c.CheckRedirect)
	p.client = &c
	nr := *p.client
	nr.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	p.noRedirect = &nr
	if p.log == nil {
		p.log = slog.New(slog.DiscardHandler)
	}
	if p.retries <= 0 {
		p.retries = defaultRetries
	}
	if p.backoff <= 0 {
		p.backoff = defaultBackoff
	}
	if p.idle <= 0 {
		p.idle = defaultIdleTimeout
	}
	return p
}

func (p *puller) pull(ctx context.Context) (string, error) {
	info, err := p.modelInfo(ctx)
	if err != nil {
		return "", err
	}
	p.gated = info.gated()
	commit := info.SHA
	names, sharded, err := info.plan()
	if err != nil {
		return "", fmt.Errorf("hub: %s (revision %s): %w", p.name.Repo, p.name.rev(), err)
	}
	var files []remoteFile
	if sharded { // the index says which shards to fetch: fetch it first
		idx, err := p.head(ctx, commit, indexFile, info)
		if err != nil {
			return "", err
		}
		if err := p.fetch(ctx, idx, nil); err != nil {
			return "", err
		}
		data, err := os.ReadFile(p.blobPath(idx.etag))
		if err != nil {
			return "", fmt.Errorf("hub: %w", err)
		}
		shards, err := info.shardsOf(data)
		if err != nil {
			return "", fmt.Errorf("hub: %s (revision %s): %w", p.name.Repo, p.name.rev(), err)
		}
		files = append(files, idx)
		names = append(withoutName(names, indexFile), shards...)
	}
	heads := make([]remoteFile, len(names))
	err = forEach(ctx, p.workers, len(names), func(ctx context.Context, i int) error {
		f, err := p.head(ctx, commit, names[i], info)
		heads[i] = f
		return err
	})
	if err != nil {
		return "", err
	}
	files = append(files, heads...)

	// One download per blob: files with the same content share it.
	var blobs []remoteFile
	var total, cached int64
	seen := map[string]bool{}
	for _, f := range files {
		if seen[f.etag] {
			continue
		}
		seen[f.etag] = true
		if _, err := os.Stat(p.blobPath(f.etag)); err == nil {
			cached += f.size
			continue
		}
		blobs = append(blobs, f)
		total += f.size
		if fi, err := os.Stat(p.blobPath(f.etag) + incompleteSuffix); err == nil && fi.Size() <= f.size {
			total -= fi.Size()
			cached += fi.Size()
		}
	}
	label := "pull " + p.name.String()
	if p.progress != nil {
		fmt.Fprintf(p.progress, "%s: commit %s, %d files, %s to fetch, %s already in the cache\n",
			label, commit, len(files), progress.FormatBytes(total), progress.FormatBytes(cached))
	}
	if len(blobs) > 0 {
		bar := progress.New(p.progress, total, label)
		err := forEach(ctx, p.workers, len(blobs), func(ctx context.Context, i int) error {
			return p.fetch(ctx, blobs[i], bar)
		})
		bar.Done()
		if err != nil {
			return "", err
		}
	}
	for _, f := range files {
		if err := p.link(commit, f); err != nil {
			return "", fmt.Errorf("hub: %s: %w", p.name, err)
		}
	}
	if rev := p.name.rev(); rev != commit {
		if err := writeRef(p.repoDir, rev, commit); err != nil {
			return "", fmt.Errorf("hub: %s: %w", p.name, err)
		}
	}
	return filepath.Join(p.repoDir, "snapshots", commit), nil
}

func withoutName(names []string, drop string) []string {
	var out []string
	for _, n := range names {
		if n != drop {
			out = append(out, n)
		}
	}
	return out
}

// modelInfo asks the hub for the revision's commit and files.
func (p *puller) modelInfo(ctx context.Context) (*modelInfo, error) {
	u := p.endpoint + "/api/models/" + p.name.Repo + "/revision/" + url.PathEscape(p.name.rev()) + "?blobs=true"
	resp, err := p.do(ctx, p.client, http.MethodGet, u, true)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, p.httpError(resp, "")
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return nil, fmt.Errorf("hub: %s: reading the model info: %w", p.name, err)
	}
	info, err := parseModelInfo(data)
	if err != nil {
		return nil, fmt.Errorf("hub: %s: %s: %w", p.name, u, err)
	}
	return info, nil
}

// remoteFile is what the hub says of one file at a commit.
type remoteFile struct {
	name string // path in the repository
	etag string // the blob's name: the sha256 of a Git LFS file, the Git blob id of another
	size int64
	url  string // where its content is fetched (a CDN for LFS files)
	auth bool   // url is on the hub's host, so the token goes with the request
}

// etagName is what an ETag must look like to name a file in blobs/.
var etagName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.-]{0,127}$`)

// head asks the hub for one file's metadata as huggingface_hub does: a HEAD request on
// resolve/COMMIT/FILE that follows relative redirects (a renamed repository) but stops at one to
// another host (the CDN that serves LFS files), reading X-Repo-Commit, X-Linked-Etag or ETag, and
// X-Linked-Size or Content-Length. The model info's sizes and LFS hashes, when given, must agree.
func (p *puller) head(ctx context.Context, commit, file string, info *modelInfo) (remoteFile, error) {
	u := p.endpoint + "/" + p.name.Repo + "/resolve/" + commit + "/" + escapePath(file)
	var resp *http.Response
	for redirects := 0; ; redirects++ {
		var err error
		resp, err = p.do(ctx, p.noRedirect, http.MethodHead, u, true)
		if err != nil {
			return remoteFile{}, err
		}
		resp.Body.Close()
		loc := resp.Header.Get("Location")
		if resp.StatusCode/100 != 3 || loc == "" || redirects == 10 {
			break
		}
		target, err := url.Parse(loc)
		if err != nil || target.Host != "" {
			break // another host: the CDN; its address is the download's
		}
		u = resp.Request.URL.ResolveReference(target).String()
	}
	if code := resp.StatusCode; code/100 != 2 && code/100 != 3 {
		return remoteFile{}, p.httpError(resp, file)
	}
	f := remoteFile{name: file, url: resp.Request.URL.String()}
	bad := func(format string, a ...any) (remoteFile, error) {
		return remoteFile{}, fmt.Errorf("hub: %s: %s: %s", p.name, file, fmt.Sprintf(format, a...))
	}
	if c := resp.Header.Get("X-Repo-Commit"); c != "" && c != commit {
		return bad("the hub answered for commit %s, not %s", c, commit)
	}
	f.etag = normalizeETag(cmpOr(resp.Header.Get("X-Linked-Etag"), resp.Header.Get("ETag")))
	if !etagName.MatchString(f.etag) || strings.HasSuffix(f.etag, incompleteSuffix) {
		return bad("no usable ETag in the hub's answer (got %q)", f.etag)
	}
	size := resp.Header.Get("X-Linked-Size")
	redirect := resp.StatusCode/100 == 3
	if size == "" && !redirect {
		size = resp.Header.Get("Content-Length")
	}
	n, err := strconv.ParseInt(size, 10, 64)
	if err != nil || n < 0 {
		return bad("no usable size in the hub's answer (X-Linked-Size or Content-Length %q)", size)
	}
	f.size = n
	if redirect {
		loc, err := resp.Request.URL.Parse(resp.Header.Get("Location"))
		if err != nil {
			return bad("redirect to %q: %v", resp.Header.Get("Location"), err)
		}
		f.url = loc.String()
	}
	if target, err := url.Parse(f.url); err == nil {
		if base, err := url.Parse(p.endpoint); err == nil {
			f.auth = target.Host == base.Host
		}
	}
	if s, ok := info.file(file); ok {
		if s.LFS != nil && s.LFS.SHA256 != f.etag {
			return bad("the model info gives sha256 %s but the file's ETag is %s", s.LFS.SHA256, f.etag)
		}
		if s.LFS != nil && s.LFS.Size != f.size || s.LFS == nil && s.Size != nil && *s.Size != f.size {
			return bad("the model info and the file's headers disagree on its size (%d bytes in the headers)", f.size)
		}
	}
	return f, nil
}

// sameHostAuth wraps a client's redirect policy (nil: the default one) so that the token goes only
// where the request that carried it went: a redirect to another scheme, host or port (a CDN, even on
// a subdomain of the hub, which net/http would trust) is followed without the Authorization header,
// as huggingface_hub follows it.
func sameHostAuth(next func(*http.Request, []*http.Request) error) func(*http.Request, []*http.Request) error {
	return func(req *http.Request, via []*http.Request) error {
		if first := via[0].URL; req.URL.Scheme != first.Scheme || req.URL.Host != first.Host {
			req.Header.Del("Authorization")
		}
		if next != nil {
			return next(req, via)
		}
		if len(via) >= 10 {
			return errors.New("stopped after 10 redirects")
		}
		return nil
	}
}

func cmpOr(a, b string) string {
	if a != "" {
		return a
	}
	return b
}

// normalizeETag strips an ETag's weak marker and quotes: W/"abc" and "abc" are abc.
func normalizeETag(etag string) string {
	return strings.Trim(strings.TrimPrefix(etag, "W/"), `"`)
}

// escapePath escapes each part of a slash-separated path for a URL.
func escapePath(p string) string {
	parts := strings.Split(p, "/")
	for i, s := range parts {
		parts[i] = url.PathEscape(s)
	}
	return strings.Join(parts, "/")
}

// do sends a request, retrying what may pass (a network error, 429, 500, 502, 503, 504) a few
// times with a doubling wait. auth sends the token.
func (p *puller) do(ctx context.Context, c *http.Client, method, u string, auth bool) (*http.Response, error) {
	wait := p.backoff
	for attempt := 0; ; attempt++ {
		req, err := http.NewRequestWithContext(ctx, method, u, nil)
		if err != nil {
			return nil, fmt.Errorf("hub: %s: %w", p.name, err)
		}
		p.setHeaders(req, auth)
		if method == http.MethodHead {
			req.Header.Set("Accept-Encoding", "identity") // the size in the headers must be the file's
		}
		resp, err := c.Do(req)
		retry := err != nil || transientStatus(resp.StatusCode)
		if !retry || attempt >= p.retries || ctx.Err() != nil {
			if err != nil {
				if ctx.Err() != nil {
					return nil, ctx.Err()
				}
				return nil, fmt.Errorf("hub: %s: %w", p.name, err)
			}
			return resp, nil
		}
		if err == nil {
			resp.Body.Close()
			p.log.Warn("hub answered; retrying", "url", u, "status", resp.Status)
		} else {
			p.log.Warn("request failed; retrying", "url", u, "error", err)
		}
		if err := sleep(ctx, wait); err != nil {
			return nil, err
		}
		wait *= 2
	}
}

func (p *puller) setHeaders(req *http.Request, auth bool) {
	req.Header.Set("User-Agent", "gollm (hub)")
	if auth && p.token != "" {
		req.Header.Set("Authorization", "Bearer "+p.token)
	}
}

func transientStatus(code int) bool {
	switch code {
	case http.StatusTooManyRequests, http.StatusInternalServerError, http.StatusBadGateway,
		http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return true
	}
	return false
}

func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// httpError turns a refusal into an error that names the model, the revision and, for a file, the
// file, and says what to do; it wraps ErrGated or ErrNotFound where they apply. The hub explains
// itself in X-Error-Code (GatedRepo, RepoNotFound, RevisionNotFound, EntryNotFound) and
// X-Error-Message.
func (p *puller) httpError(resp *http.Response, file string) error {
	code, msg := resp.Header.Get("X-Error-Code"), resp.Header.Get("X-Error-Message")
	status := resp.Status
	if msg != "" {
		status += ": " + msg
	}
	model, rev := p.name.Repo, p.name.rev()
	page := p.endpoint + "/" + model
	gated := code == "GatedRepo" || p.gated && (resp.StatusCode == 401 || resp.StatusCode == 403)
	switch {
	case gated && p.token == "":
		return fmt.Errorf("hub: %s is a %w: accept its licence at %s while logged in to the hub, then set HF_TOKEN (or pass --token) to an access token of that account (HTTP %s)",
			model, ErrGated, page, status)
	case gated:
		return fmt.Errorf("hub: %s is a %w and the token given has no access to it: accept its licence at %s with the token's account, or use a token of an account that has (HTTP %s)",
			model, ErrGated, page, status)
	case code == "RevisionNotFound":
		return fmt.Errorf("hub: %s: revision %q %w (HTTP %s)", model, rev, ErrNotFound, status)
	case code == "EntryNotFound":
		return fmt.Errorf("hub: %s (revision %s): file %s %w (HTTP %s)", model, rev, file, ErrNotFound, status)
	case resp.StatusCode == 401 && p.token == "":
		return fmt.Errorf("hub: model %s (revision %s) %w at %s, or it is private: check the name; for a private model set HF_TOKEN or pass --token (HTTP %s)",
			model, rev, ErrNotFound, p.endpoint, status)
	case resp.StatusCode == 401:
		return fmt.Errorf("hub: model %s (revision %s) %w at %s, or the token given was refused or has no access to it (HTTP %s)",
			model, rev, ErrNotFound, p.endpoint, status)
	case resp.StatusCode == 403:
		return fmt.Errorf("hub: %s (revision %s): access denied; check that the token may read it (HTTP %s)", model, rev, status)
	case resp.StatusCode == 404:
		what := "model " + model + " (revision " + rev + ")"
		if file != "" {
			what += ": file " + file
		}
		return fmt.Errorf("hub: %s %w at %s (HTTP %s)", what, ErrNotFound, p.endpoint, status)
	}
	where := ""
	if file != "" {
		where = ": " + file
	}
	return fmt.Errorf("hub: %s (revision %s)%s: HTTP %s", model, rev, where, status)
}

// forEach calls fn(ctx, i) for i in [0, n) with at most workers calls at once. The first error
// cancels the calls under way and the rest; it is returned.
func forEach(ctx context.Context, workers, n int, fn func(context.Context, int) error) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		wg    sync.WaitGroup
		once  sync.Once
		first error
	)
	sem := make(chan struct{}, workers)
loop:
	for i := range n {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			break loop
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if err := fn(ctx, i); err != nil {
				once.Do(func() { first = err; cancel() })
			}
		}()
	}
	wg.Wait()
	if first != nil {
		return first
	}
	return ctx.Err()
}
