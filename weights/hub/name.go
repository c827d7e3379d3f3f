package hub

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
)

// DefaultRevision is the branch a name without @REVISION refers to.
const DefaultRevision = "main"

// Name is a model's name on the hub: a repository and a revision.
type Name struct {
	Repo     string // ORG/NAME
	Revision string // a branch, a tag or a commit hash; empty means DefaultRevision
}

// ErrBadName is wrapped by ParseName's errors.
var ErrBadName = errors.New("not a Hugging Face model name (ORG/NAME[@REVISION])")

// repoPart is one half of ORG/NAME as the hub accepts it (huggingface_hub's validate_repo_id, in
// ASCII): letters, digits, '_', '-' and '.', beginning and ending with a letter, digit or '_'.
var repoPart = regexp.MustCompile(`^[A-Za-z0-9_]([A-Za-z0-9_.-]{0,94}[A-Za-z0-9_])?$`)

// commitHash is a full Git commit id, as huggingface_hub recognises one.
var commitHash = regexp.MustCompile(`^[0-9a-f]{40}$`)

// isCommit reports whether rev is a commit hash rather than a branch or tag.
func isCommit(rev string) bool { return commitHash.MatchString(rev) }

// ParseName reads ORG/NAME or ORG/NAME@REVISION.
func ParseName(s string) (Name, error) {
	repo, rev, hasRev := strings.Cut(s, "@")
	if err := checkRepo(repo); err != nil {
		return Name{}, fmt.Errorf("%q: %w: %v", s, ErrBadName, err)
	}
	if hasRev {
		if err := checkRevision(rev); err != nil {
			return Name{}, fmt.Errorf("%q: %w: revision: %v", s, ErrBadName, err)
		}
	}
	return Name{Repo: repo, Revision: rev}, nil
}

// String writes the name as ParseName reads it.
func (n Name) String() string {
	if n.Revision == "" {
		return n.Repo
	}
	return n.Repo + "@" + n.Revision
}

// rev is the revision the name refers to.
func (n Name) rev() string {
	if n.Revision == "" {
		return DefaultRevision
	}
	return n.Revision
}

// folderName is the repository's folder in the cache: models--ORG--NAME.
func folderName(repo string) string { return "models--" + strings.ReplaceAll(repo, "/", "--") }

// checkRepo accepts ORG/NAME as the hub does; "--" and ".." are refused, as the cache folder's name
// could not be read back unambiguously, nor a path built from it safely.
func checkRepo(repo string) error {
	org, name, ok := strings.Cut(repo, "/")
	switch {
	case !ok || strings.Contains(name, "/"):
		return errors.New("want exactly one '/' between organisation and name")
	case strings.Contains(repo, "--") || strings.Contains(repo, ".."):
		return errors.New(`"--" and ".." are not allowed`)
	case !repoPart.MatchString(org) || !repoPart.MatchString(name):
		return errors.New("organisation and name are 1 to 96 letters, digits, '_', '-' or '.', starting and ending with a letter, digit or '_'")
	case strings.HasSuffix(name, ".git"):
		return errors.New(`a name may not end in ".git"`)
	}
	return nil
}

// checkRevision accepts a branch, tag or commit name that is safe both in a URL and as a path below
// refs/ (a pull request's revision is refs/pr/N): slash-separated parts that are not empty, "." or
// "..", without control characters, spaces or Git's special characters ~^:?*[\ and no "@{".
func checkRevision(rev string) error {
	switch {
	case rev == "":
		return errors.New("empty after '@'")
	case len(rev) > 255:
		return errors.New("longer than 255 bytes")
	case strings.Contains(rev, "@{"):
		return errors.New(`"@{" is not allowed`)
	case strings.HasSuffix(rev, ".lock"):
		return errors.New(`may not end in ".lock"`)
	}
	for _, c := range rev {
		if c < 0x20 || c == 0x7f || strings.ContainsRune(" ~^:?*[\\", c) {
			return fmt.Errorf("character %q is not allowed", c)
		}
	}
	for part := range strings.SplitSeq(rev, "/") {
		if part == "" || part == "." || part == ".." || strings.HasPrefix(part, ".") {
			return fmt.Errorf("part %q is not allowed", part)
		}
	}
	return nil
}
