package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/gollm/gollm/weights/hub/hubtest"
)

// hubEnv points gollm at a fresh cache and at a stand-in hub (hubtest) holding org/m (the built-in
// model, on main), org/gated (the same, gated) and org/gpt2 (the same but for an architecture gollm
// does not run), with nothing of the machine's own token or settings in play.
func hubEnv(t *testing.T) (cache string, h *hubtest.Server) {
	t.Helper()
	home := t.TempDir()
	for _, v := range []string{"HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH", "HF_HUB_OFFLINE",
		"TRANSFORMERS_OFFLINE", "HUGGINGFACE_HUB_CACHE"} {
		t.Setenv(v, "")
	}
	t.Setenv("HF_HOME", home)
	cache = filepath.Join(home, "hub")
	t.Setenv("HF_HUB_CACHE", cache)
	h = hubtest.New(t)
	t.Setenv("HF_ENDPOINT", h.URL)
	files := hubtest.DefaultModel(t)
	h.Add("org/m", hubtest.Commit("m"), false, files, "main")
	h.Add("org/gated", hubtest.Commit("gated"), true, files, "main")
	var gpt2 []hubtest.File
	for _, f := range files {
		if f.Name == "config.json" {
			f.Data = []byte(strings.Replace(string(f.Data), "LlamaForCausalLM", "GPT2LMHeadModel", 1))
		}
		gpt2 = append(gpt2, f)
	}
	h.Add("org/gpt2", hubtest.Commit("gpt2"), false, gpt2, "main")
	return cache, h
}

func TestPullCommand(t *testing.T) {
	cache, _ := hubEnv(t)
	snapshot := filepath.Join(cache, "models--org--m", "snapshots", hubtest.Commit("m"))
	for _, tc := range []struct {
		name    string
		args    []string
		env     map[string]string
		code    int
		stdout  string
		wantErr []string
	}{
		{name: "no name", args: nil, code: 2, wantErr: []string{"want one model name"}},
		{name: "two names", args: []string{"org/m", "org/n"}, code: 2, wantErr: []string{"want one model name"}},
		{name: "bad name", args: []string{"./x"}, code: 2, wantErr: []string{"not a Hugging Face model name"}},
		{name: "bad workers", args: []string{"--workers", "0", "org/m"}, code: 2, wantErr: []string{"--workers 0"}},
		{name: "help", args: []string{"--help"}, code: 0, wantErr: []string{"usage: gollm pull", "HF_HUB_OFFLINE"}},
		{name: "offline", args: []string{"org/m"}, env: map[string]string{"HF_HUB_OFFLINE": "1"}, code: 1, wantErr: []string{"cannot pull org/m", "HF_HUB_OFFLINE"}},
		{name: "gated without a token", args: []string{"org/gated"}, code: 1, wantErr: []string{"org/gated is a gated model", "accept its licence", "HF_TOKEN", "--token"}},
		{name: "unknown model", args: []string{"org/nope"}, code: 1, wantErr: []string{"org/nope", "revision main", "not found"}},
		{name: "pull", args: []string{"org/m"}, code: 0, stdout: snapshot + "\n",
			wantErr: []string{"pull org/m: commit " + hubtest.Commit("m") + ", 5 files, 9.31 MB to fetch", "pull org/m: 9.31 MB in "}},
		{name: "pull again", args: []string{"org/m"}, code: 0, stdout: snapshot + "\n", wantErr: []string{"0 B to fetch, 9.31 MB already in the cache"}},
		{name: "gated with --token", args: []string{"--token", hubtest.Token, "org/gated"}, code: 0,
			stdout: filepath.Join(cache, "models--org--gated", "snapshots", hubtest.Commit("gated")) + "\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			code, stdout, stderr := runCLI(t, append([]string{"pull"}, tc.args...)...)
			if code != tc.code || (tc.stdout != "" && stdout != tc.stdout) {
				t.Errorf("exit %d, stdout %q; want %d, %q (stderr %s)", code, stdout, tc.code, tc.stdout, stderr)
			}
			for _, s := range tc.wantErr {
				if !strings.Contains(stderr, s) {
					t.Errorf("stderr %q lacks %q", stderr, s)
				}
			}
		})
	}
}

// TestModelByName pulls models and then uses them by name: gollm list, tokenize, generate, and serve
// with the served model name defaulting to ORG/NAME.
func TestModelByName(t *testing.T) {
	cache, _ := hubEnv(t)
	code, _, stderr := runCLI(t, "list")
	if code != 0 || !strings.Contains(stderr, "no models in "+cache) {
		t.Errorf("list of an empty cache: exit %d, %q", code, stderr)
	}
	code, _, stderr = runCLI(t, "generate", "--model", "org/m", "--prompt", "func", "--max-tokens", "2")
	if code != 1 || !strings.Contains(stderr, "gollm pull org/m") {
		t.Errorf("generate before the pull: exit %d, %q; want a hint to pull", code, stderr)
	}
	for _, m := range []string{"org/m", "org/gpt2"} {
		if code, _, stderr := runCLI(t, "pull", m); code != 0 {
			t.Fatalf("pull %s: %s", m, stderr)
		}
	}

	code, stdout, stderr := runCLI(t, "list")
	if code != 0 {
		t.Fatalf("list: exit %d: %s", code, stderr)
	}
	for _, re := range []string{
		`(?m)^MODEL +REVISION +COMMIT +SIZE +LOADABLE$`,
		`(?m)^org/gpt2 +main +` + hubtest.Commit("gpt2")[:12] + ` +9\.31 MB +no: .*GPT2LMHeadModel`,
		`(?m)^org/m +main +` + hubtest.Commit("m")[:12] + ` +9\.31 MB +yes$`,
	} {
		if !regexp.MustCompile(re).MatchString(stdout) {
			t.Errorf("list output lacks %s:\n%s", re, stdout)
		}
	}
	code, stdout, _ = runCLI(t, "list", "--json")
	var entries []listEntry
	if err := json.Unmarshal([]byte(stdout), &entries); code != 0 || err != nil || len(entries) != 2 ||
		entries[1].Model != "org/m" || !entries[1].Loadable || entries[1].Refs[0] != "main" || entries[0].Loadable {
		t.Errorf("list --json: exit %d, %v: %s", code, err, stdout)
	}

	dir := filepath.Join(cache, "models--org--m", "snapshots", hubtest.Commit("m"))
	_, byDir, _ := runCLI(t, "tokenize", "--model", dir, "func main() {")
	code, byName, stderr := runCLI(t, "tokenize", "--model", "org/m", "func main() {")
	if code != 0 || byName != byDir || byName == "" {
		t.Errorf("tokenize by name: exit %d, %q (by folder %q): %s", code, byName, byDir, stderr)
	}
	code, stdout, stderr = runCLI(t, "generate", "--model", "org/m@main", "--prompt", "func", "--max-tokens", "3", "--temperature", "0")
	if code != 0 || stdout == "" {
		t.Errorf("generate by name: exit %d, %q: %s", code, stdout, stderr)
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"default name", []string{"--model", "org/m@main"}, "org/m"},
		{"--served-model-name", []string{"--model", "org/m", "--served-model-name", "mine"}, "mine"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := servedNameOfRunningServer(t, tc.args); got != tc.want {
				t.Errorf("served model name %q, want %q", got, tc.want)
			}
		})
	}
}

// servedNameOfRunningServer runs gollm serve with args, asks /v1/models and a completion which model
// they name, checks that they agree, and stops the server.
func servedNameOfRunningServer(t *testing.T, args []string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stderr lockedBuffer
	done := make(chan int, 1)
	go func() {
		done <- runServe(ctx, append([]string{"--port", "0", "--kv-blocks", "64"}, args...), &bytes.Buffer{}, &stderr)
	}()
	addr := regexp.MustCompile(`ready on (http://\S+)`) // once the model is loaded
	var url string
	for deadline := time.Now().Add(time.Minute); url == ""; time.Sleep(5 * time.Millisecond) {
		if m := addr.FindStringSubmatch(stderr.String()); m != nil {
			url = m[1]
		}
		select {
		case code := <-done:
			t.Fatalf("serve exited with %d: %s", code, stderr.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no ready line: %s", stderr.String())
		}
	}
	defer func() {
		cancel()
		if code := <-done; code != 0 {
			t.Errorf("serve exited with %d: %s", code, stderr.String())
		}
	}()
	resp, err := http.Get(url + "/v1/models")
	if err != nil {
		t.Fatal(err)
	}
	var models struct {
		Data []struct {
			ID string `json:"id"`
		} `json:"data"`
	}
	err = json.NewDecoder(resp.Body).Decode(&models)
	resp.Body.Close()
	if err != nil || len(models.Data) != 1 {
		t.Fatalf("/v1/models: %v %+v", err, models)
	}
	name := models.Data[0].ID
	body, _ := json.Marshal(map[string]any{"model": name, "prompt": "func", "max_tokens": 2})
	resp, err = http.Post(url+"/v1/completions", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var answer struct {
		Model string `json:"model"`
	}
	err = json.NewDecoder(resp.Body).Decode(&answer)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 200 || answer.Model != name {
		t.Errorf("completion for %q: HTTP %d, model %q, %v", name, resp.StatusCode, answer.Model, err)
	}
	return name
}
