//go:build cuda

package cuda

import (
	"math/rand/v2"
	"slices"
	"testing"
	"unsafe"
)

// TestHostAsyncRoundTrip copies random floats from page-locked memory to the device and back with the
// asynchronous copies on one stream, through a device buffer poisoned first.
func TestHostAsyncRoundTrip(t *testing.T) {
	d := openDevice(t)
	const n = 1 << 16
	s, err := d.NewStream()
	if err != nil {
		t.Fatal(err)
	}
	defer s.Destroy()
	in, err := d.AllocHost(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer d.FreeHost(in)
	out, err := d.AllocHost(4 * n)
	if err != nil {
		t.Fatal(err)
	}
	defer d.FreeHost(out)
	want := randomFloats(rand.New(rand.NewPCG(1, 2)), n)
	copy(in, Bytes(want))
	p := allocFloats(t, d, n)
	if err := d.Fill32(p, 0x7fc00000, n, s); err != nil {
		t.Fatal(err)
	}
	if err := d.CopyToDeviceAsync(p, in, s); err != nil {
		t.Fatal(err)
	}
	if err := d.CopyFromDeviceAsync(out, p, s); err != nil {
		t.Fatal(err)
	}
	if err := s.Synchronize(); err != nil {
		t.Fatal(err)
	}
	got := unsafe.Slice((*float32)(unsafe.Pointer(&out[0])), n)
	if !slices.Equal(got, want) {
		t.Fatal("round trip through page-locked memory changed the values")
	}
	if _, err := d.AllocHost(0); err == nil {
		t.Error("AllocHost(0) succeeded")
	}
}
