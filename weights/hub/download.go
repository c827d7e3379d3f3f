package hub

import (
	"context"
	"crypto/rand"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"hash"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/gollm/gollm/internal/progress"
)

// incompleteSuffix marks a blob being downloaded, as in huggingface_hub.
const incompleteSuffix = ".incomplete"

func (p *puller) blobPath(etag string) string { return filepath.Join(p.repoDir, "blobs", etag) }

// fetch makes blobs/ETAG hold f's checked content. Under a lock on .locks/models--ORG--NAME/ETAG.lock
// (the file huggingface_hub locks, so that neither writes a blob the other is writing) it downloads
// into blobs/ETAG.incomplete, resuming from what that file holds, attempt after attempt while each
// takes the file further than any before (up to p.retries attempts in a row that do not: bytes a
// restart throws away are no progress), then checks and renames it. Bytes are counted on bar (which
// may be nil), and taken off it again when a restart throws them away.
func (p *puller) fetch(ctx context.Context, f remoteFile, bar *progress.Bar) error {
	blob := p.blobPath(f.etag)
	if _, err := os.Stat(blob); err == nil {
		return nil
	}
	lock := filepath.Join(p.cache, ".locks", folderName(p.name.Repo), f.etag+".lock")
	for _, dir := range []string{filepath.Dir(blob), filepath.Dir(lock)} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return fmt.Errorf("hub: %w", err)
		}
	}
	unlock, err := lockFile(ctx, lock, func() {
		// A wait can last as long as another download: it is said, never silent.
		p.log.Warn("another download of this file is under way (gollm or huggingface_hub); waiting for it to finish",
			"model", p.name.String(), "file", f.name, "lock", lock)
	})
	if err != nil {
		return fmt.Errorf("hub: %s: %w", f.name, err)
	}
	defer unlock()
	if _, err := os.Stat(blob); err == nil { // another process fetched it while we waited
		return nil
	}
	counter := &tally{bar: bar}
	var best int64 // the most the .incomplete file has held
	if fi, err := os.Stat(blob + incompleteSuffix); err == nil {
		best = fi.Size()
	}
	wait, fruitless := p.backoff, 0
	for {
		have, err := p.fetchOnce(ctx, f, counter)
		if err == nil {
			return nil
		}
		var cut *cutError
		if !errors.As(err, &cut) || ctx.Err() != nil {
			return err
		}
		if have > best {
			best, fruitless, wait = have, 0, p.backoff
		} else if fruitless++; fruitless >= p.retries {
			return fmt.Errorf("hub: %s: %s: giving up after %d attempts without progress: %w", p.name, f.name, fruitless, cut.err)
		}
		p.log.Warn("download cut short; resuming", "model", p.name.String(), "file", f.name, "error", cut.err)
		if err := sleep(ctx, wait); err != nil {
			return err
		}
		wait = min(2*wait, 30*time.Second)
	}
}

// tally counts one file's bytes on a progress bar (which may be nil) and takes them off it again
// when a restart throws them away, so that the bar shows what is on disk, not what crossed the
// network.
type tally struct {
	bar *progress.Bar
	n   int64 // bytes counted and not taken back
}

func (t *tally) Write(b []byte) (int, error) {
	t.n += int64(len(b))
	if t.bar != nil {
		t.bar.Add(int64(len(b)))
	}
	return len(b), nil
}

// discard takes back every byte counted so far.
func (t *tally) discard() {
	if t.bar != nil {
		t.bar.Add(-t.n)
	}
	t.n = 0
}

// cutError is a download that stopped early for a reason that may pass (a dropped connection, a
// stalled or refused-for-now request): the next attempt resumes it.
type cutError struct{ err error }

func (e *cutError) Error() string { return e.err.Error() }
func (e *cutError) Unwrap() error { return e.err }

// fetchOnce makes one attempt at f: it hashes what blobs/ETAG.incomplete already holds, asks for the
// rest (Range: bytes=N-), appends it, and once the file is whole checks it and renames it to
// blobs/ETAG. A server that ignores the range (200) restarts the file. It returns the bytes the
// .incomplete file holds when the attempt ends.
func (p *puller) fetchOnce(ctx context.Context, f remoteFile, counter *tally) (int64, error) {
	blob := p.blobPath(f.etag)
	inc := blob + incompleteSuffix
	file, err := os.OpenFile(inc, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return 0, fmt.Errorf("hub: %w", err)
	}
	defer file.Close()
	sum := newChecksum(f)
	have, err := io.Copy(sum, file)
	if err != nil {
		return 0, fmt.Errorf("hub: %w", err)
	}
	restart := func() error {
		sum.Reset()
		counter.discard()
		have = 0
		if err := file.Truncate(0); err != nil {
			return err
		}
		_, err := file.Seek(0, io.SeekStart)
		return err
	}
	if have > f.size {
		if err := restart(); err != nil {
			return 0, fmt.Errorf("hub: %w", err)
		}
	}
	if have < f.size {
		got, err := p.download(ctx, f, have, restart, io.MultiWriter(file, sum, counter))
		have += got
		if err != nil {
			return have, err
		}
	}
	if have > f.size {
		os.Remove(inc)
		return 0, fmt.Errorf("hub: %s: %s: %w: the server sent more than the %d bytes the hub gave as its size", p.name, f.name, ErrCorrupt, f.size)
	}
	if have != f.size {
		os.Remove(inc)
		return 0, fmt.Errorf("hub: %s: %s: %w: %d bytes received, the hub gave the size as %d", p.name, f.name, ErrCorrupt, have, f.size)
	}
	if err := sum.check(); err != nil {
		os.Remove(inc)
		return 0, fmt.Errorf("hub: %s: %s: %w: %v", p.name, f.name, ErrCorrupt, err)
	}
	if err := file.Sync(); err != nil {
		return have, fmt.Errorf("hub: %w", err)
	}
	if err := file.Close(); err != nil {
		return have, fmt.Errorf("hub: %w", err)
	}
	if err := os.Rename(inc, blob); err != nil {
		return have, fmt.Errorf("hub: %w", err)
	}
	return have, nil
}

// download requests f from offset have and copies the body to w, restarting the file (restart) when
// the server sends all of it instead of the range. The body may send nothing for p.idle at most, and
// is read up to one byte past the file's size at most.
func (p *puller) download(ctx context.Context, f remoteFile, have int64, restart func() error, w io.Writer) (int64, error) {
	dctx, cancel := context.WithCancel(ctx) // cancelled by the stall timer too
	defer cancel()
	req, err := http.NewRequestWithContext(dctx, http.MethodGet, f.url, nil)
	if err != nil {
		return 0, fmt.Errorf("hub: %s: %w", p.name, err)
	}
	p.setHeaders(req, f.auth)
	if have > 0 {
		req.Header.Set("Range", "bytes="+strconv.FormatInt(have, 10)+"-")
	}
	stall := time.AfterFunc(p.idle, cancel)
	defer stall.Stop()
	resp, err := p.client.Do(req)
	if err != nil {
		return 0, cut(ctx, err)
	}
	defer resp.Body.Close()
	switch {
	case resp.StatusCode == http.StatusPartialContent && have > 0:
		if start, ok := rangeStart(resp.Header.Get("Content-Range")); !ok || start != have {
			return 0, fmt.Errorf("hub: %s: %s: asked for bytes from %d, got Content-Range %q", p.name, f.name, have, resp.Header.Get("Content-Range"))
		}
	case resp.StatusCode == http.StatusOK:
		if have > 0 {
			if err := restart(); err != nil {
				return 0, fmt.Errorf("hub: %w", err)
			}
			have = 0
		}
	case resp.StatusCode == http.StatusRequestedRangeNotSatisfiable:
		if err := restart(); err != nil {
			return 0, fmt.Errorf("hub: %w", err)
		}
		return 0, &cutError{fmt.Errorf("%s: range from byte %d refused (HTTP %s): starting over", f.name, have, resp.Status)}
	case transientStatus(resp.StatusCode):
		return 0, &cutError{fmt.Errorf("%s: HTTP %s", f.name, resp.Status)}
	default:
		return 0, p.httpError(resp, f.name)
	}
	// No more than one byte past the file's size is written, however much the server sends: that
	// byte is enough to tell that the body is too long, and the disk is never filled by a body
	// without end.
	body := io.LimitReader(resp.Body, f.size-have+1)
	n, err := io.Copy(w, &idleReader{r: body, timer: stall, idle: p.idle})
	if err != nil {
		return n, cut(ctx, err)
	}
	return n, nil
}

// cut classifies a failed transfer: when the caller's ctx has ended its error is returned; anything
// else (a dropped connection, a stall) may pass and is a cutError.
func cut(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	return &cutError{err}
}

// idleReader pushes back a stall timer on every read that brings bytes.
type idleReader struct {
	r     io.Reader
	timer *time.Timer
	idle  time.Duration
}

func (r *idleReader) Read(b []byte) (int, error) {
	n, err := r.r.Read(b)
	if n > 0 {
		r.timer.Reset(r.idle)
	}
	return n, err
}

// rangeStart reads the first byte's offset from a Content-Range header: "bytes 100-199/200".
func rangeStart(h string) (int64, bool) {
	rest, ok := strings.CutPrefix(h, "bytes ")
	if !ok {
		return 0, false
	}
	start, _, ok := strings.Cut(rest, "-")
	if !ok {
		return 0, false
	}
	n, err := strconv.ParseInt(start, 10, 64)
	return n, err == nil && n >= 0
}

// checksum hashes a download and checks it against what the hub gave: the sha256 that is an LFS
// file's ETag, or the Git blob id (the sha1 of "blob SIZE\x00" and the content) that is another
// file's. Any other ETag (a mirror's) leaves only the size to check.
type checksum struct {
	hash.Hash
	want   string
	prefix []byte // written first after every Reset
	kind   string
}

func newChecksum(f remoteFile) *checksum {
	switch {
	case isSHA256(f.etag):
		return &checksum{Hash: sha256.New(), want: f.etag, kind: "sha256"}
	case isGitOID(f.etag):
		c := &checksum{Hash: sha1.New(), want: f.etag, kind: "git blob id",
			prefix: []byte("blob " + strconv.FormatInt(f.size, 10) + "\x00")}
		c.Hash.Write(c.prefix)
		return c
	}
	return &checksum{Hash: nopHash{}}
}

func (c *checksum) Reset() {
	c.Hash.Reset()
	c.Hash.Write(c.prefix)
}

// check compares the hash of what was written with the one wanted.
func (c *checksum) check() error {
	if c.want == "" {
		return nil
	}
	if got := hex.EncodeToString(c.Sum(nil)); got != c.want {
		return fmt.Errorf("%s %s, want %s", c.kind, got, c.want)
	}
	return nil
}

// isGitOID reports whether s is a Git object id (40 lowercase hex digits).
func isGitOID(s string) bool { return isCommit(s) }

// nopHash stands for a hash when there is nothing to check against.
type nopHash struct{}

func (nopHash) Write(b []byte) (int, error) { return len(b), nil }
func (nopHash) Sum(b []byte) []byte         { return b }
func (nopHash) Reset()                      {}
func (nopHash) Size() int                   { return 0 }
func (nopHash) BlockSize() int              { return 1 }

// link makes snapshots/COMMIT/FILE a relative symbolic link to blobs/ETAG, as huggingface_hub does,
// so that the cache can be moved. The link is made under a temporary name and renamed into place: a
// reader sees no file or the whole one. A link that already leads to a file is kept.
func (p *puller) link(commit string, f remoteFile) error {
	pointer := filepath.Join(p.repoDir, "snapshots", commit, filepath.FromSlash(f.name))
	if fi, err := os.Stat(pointer); err == nil && fi.Mode().IsRegular() {
		return nil
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(pointer), 0o755); err != nil {
		return err
	}
	target, err := filepath.Rel(filepath.Dir(pointer), p.blobPath(f.etag))
	if err != nil {
		return err
	}
	tmp := pointer + "." + randomHex() + ".tmp"
	if err := os.Symlink(target, tmp); err != nil {
		return err
	}
	if err := os.Rename(tmp, pointer); err != nil {
		os.Remove(tmp)
		return err
	}
	return nil
}

func randomHex() string {
	var b [6]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
