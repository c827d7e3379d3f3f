package hub

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
)

// DefaultEndpoint is the hub's address when HF_ENDPOINT is not set.
const DefaultEndpoint = "https://huggingface.co"

// CacheDir returns the hub cache folder as huggingface_hub finds it: HF_HUB_CACHE, else the older
// HUGGINGFACE_HUB_CACHE, else $HF_HOME/hub, where HF_HOME defaults to $XDG_CACHE_HOME/huggingface or
// ~/.cache/huggingface. A leading ~ and $VARIABLES in these values are expanded, as Python's
// expanduser and expandvars do.
func CacheDir() string {
	for _, v := range []string{"HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE"} {
		if dir := os.Getenv(v); dir != "" {
			return expandPath(dir)
		}
	}
	return filepath.Join(hfHome(), "hub")
}

// hfHome is huggingface_hub's HF_HOME: where its cache and token file live.
func hfHome() string {
	if home := os.Getenv("HF_HOME"); home != "" {
		return expandPath(home)
	}
	if xdg := os.Getenv("XDG_CACHE_HOME"); xdg != "" {
		return filepath.Join(expandPath(xdg), "huggingface")
	}
	return filepath.Join(expandPath("~"), ".cache", "huggingface")
}

// envVar is what Python's os.path.expandvars replaces: $NAME (letters, digits, '_') or ${ANYTHING}.
var envVar = regexp.MustCompile(`\$(\w+|\{[^}]*\})`)

// expandPath expands a leading ~ (the user's home) and $VAR or ${VAR} as Python's os.path.expanduser
// and expandvars do, so that a path names the folder huggingface_hub would use: an unset variable,
// or a $ that starts no name, is left exactly as written.
func expandPath(p string) string {
	if p == "~" || strings.HasPrefix(p, "~/") {
		if home, err := os.UserHomeDir(); err == nil {
			p = home + p[1:]
		}
	}
	return envVar.ReplaceAllStringFunc(p, func(m string) string {
		name := strings.TrimSuffix(strings.TrimPrefix(m[1:], "{"), "}")
		if val, ok := os.LookupEnv(name); ok {
			return val
		}
		return m
	})
}

// Offline reports whether HF_HUB_OFFLINE (or transformers' TRANSFORMERS_OFFLINE) asks that the hub
// not be reached: set to 1, ON, YES or TRUE in any case. Pull refuses then; Resolve never reaches
// the hub anyway.
func Offline() bool {
	v := os.Getenv("HF_HUB_OFFLINE")
	if v == "" {
		v = os.Getenv("TRANSFORMERS_OFFLINE")
	}
	switch strings.ToUpper(v) {
	case "1", "ON", "YES", "TRUE":
		return true
	}
	return false
}

// endpoint is HF_ENDPOINT, or the public hub, without a trailing slash.
func endpoint() string {
	if e := os.Getenv("HF_ENDPOINT"); e != "" {
		return strings.TrimRight(e, "/")
	}
	return DefaultEndpoint
}

// envToken is the access token huggingface_hub would use: HF_TOKEN, else the older
// HUGGING_FACE_HUB_TOKEN, else the file HF_TOKEN_PATH (default $HF_HOME/token) that `hf auth login`
// writes. Line breaks and surrounding spaces are dropped; "" means none.
func envToken() string {
	for _, v := range []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"} {
		if t := cleanToken(os.Getenv(v)); t != "" {
			return t
		}
	}
	path := os.Getenv("HF_TOKEN_PATH")
	if path == "" {
		path = filepath.Join(hfHome(), "token")
	} else {
		path = expandPath(path)
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return cleanToken(string(data))
}

func cleanToken(t string) string {
	return strings.TrimSpace(strings.NewReplacer("\r", "", "\n", "").Replace(t))
}
