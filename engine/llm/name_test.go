package llm

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/gollm/gollm/weights/defaultmodel"
)

// TestDisplayName: the name a model is served under is ORG/NAME (without the revision) for a Hugging
// Face name, a folder's base name for a folder, and the built-in model's name for "".
func TestDisplayName(t *testing.T) {
	dir := t.TempDir()
	local := filepath.Join(dir, "Llama-3.2-1B")
	if err := os.Mkdir(local, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct{ model, want string }{
		{"", defaultmodel.Name()},
		{"meta-llama/Llama-3.2-1B-Instruct", "meta-llama/Llama-3.2-1B-Instruct"},
		{"meta-llama/Llama-3.2-1B-Instruct@main", "meta-llama/Llama-3.2-1B-Instruct"},
		{local, "Llama-3.2-1B"},
		{local + "/", "Llama-3.2-1B"},
	} {
		t.Run(tc.model, func(t *testing.T) {
			if got := displayName(tc.model); got != tc.want {
				t.Errorf("displayName(%q) = %q, want %q", tc.model, got, tc.want)
			}
		})
	}
}
