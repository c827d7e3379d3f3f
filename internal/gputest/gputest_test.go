package gputest

import (
	"errors"
	"fmt"
	"runtime"
	"testing"
)

// recorder is a testing.TB whose Skipf and Fatalf record their message and end only the goroutine that
// calls them, as testing's end the test's.
type recorder struct {
	testing.TB
	skipped, fatal string
}

func (r *recorder) Helper() {}
func (r *recorder) Skipf(f string, args ...any) {
	r.skipped = fmt.Sprintf(f, args...)
	runtime.Goexit()
}

func (r *recorder) Fatalf(f string, args ...any) {
	r.fatal = fmt.Sprintf(f, args...)
	runtime.Goexit()
}

func TestRequire(t *testing.T) {
	err := errors.New("cuInit: no device")
	for _, tc := range []struct {
		env            string
		err            error
		skipped, fatal string
	}{
		{"", nil, "", ""},
		{"1", nil, "", ""},
		{"", err, "no GPU: cuInit: no device", ""},
		{"0", err, "no GPU: cuInit: no device", ""},
		{"1", err, "", "GPU: cuInit: no device"},
	} {
		t.Setenv("GOLLM_REQUIRE_GPU", tc.env)
		r := &recorder{TB: t}
		done := make(chan struct{})
		go func() {
			defer close(done)
			Require(r, tc.err)
		}()
		<-done
		if r.skipped != tc.skipped || r.fatal != tc.fatal {
			t.Errorf("GOLLM_REQUIRE_GPU=%q, err %v: skipped %q, fatal %q; want %q, %q",
				tc.env, tc.err, r.skipped, r.fatal, tc.skipped, tc.fatal)
		}
	}
}
