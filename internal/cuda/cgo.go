//go:build cuda

package cuda

// The driver calls gorgonia.org/cu does not wrap, and the bridge from its handle types to ours.

/*
#cgo LDFLAGS: -lcuda -ldl
#include <dlfcn.h>
#include <stdlib.h>
#include "gollm_cuda.h"

static inline void *gollm_open_library(const char *name) { return dlopen(name, RTLD_NOW | RTLD_LOCAL); }
static inline const char *gollm_library_error(void) { const char *e = dlerror(); return e ? e : "unknown"; }
*/
import "C"

import (
	"fmt"
	"strings"
	"unsafe"

	"gorgonia.org/cu"
)

const maxSharedPerBlockOptin = cu.DeviceAttribute(C.CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN)

// Result is a CUDA driver error code from a call this package makes itself.
type Result int

func (r Result) Error() string {
	return fmt.Sprintf("%s (%d)", C.GoString(C.gollm_error_name(C.CUresult(r))), int(r))
}

func check(r C.CUresult) error {
	if r == C.CUDA_SUCCESS {
		return nil
	}
	return Result(r)
}

// The handle types of gorgonia.org/cu are structs of one C handle with unexported fields; these read the
// handle out so that our cgo can pass it on. The size checks below fail the build if that ever changes.
var (
	_ [unsafe.Sizeof(cu.Function{}) - unsafe.Sizeof(uintptr(0))]struct{}
	_ [unsafe.Sizeof(uintptr(0)) - unsafe.Sizeof(cu.Function{})]struct{}
	_ [unsafe.Sizeof(cu.Stream{}) - unsafe.Sizeof(uintptr(0))]struct{}
	_ [unsafe.Sizeof(uintptr(0)) - unsafe.Sizeof(cu.Stream{})]struct{}
)

func cFunction(f cu.Function) C.CUfunction { return *(*C.CUfunction)(unsafe.Pointer(&f)) }
func cStream(s cu.Stream) C.CUstream       { return *(*C.CUstream)(unsafe.Pointer(&s)) }

// openLibrary dlopens the first of candidates that loads (a soname through the loader's search path, or
// a path) and returns its handle and name; the error lists why each failed, wrapping notFound.
func openLibrary(candidates []string, notFound error) (unsafe.Pointer, string, error) {
	var tried []string
	for _, name := range candidates {
		cname := C.CString(name)
		h := C.gollm_open_library(cname)
		C.free(unsafe.Pointer(cname))
		if h != nil {
			return h, name, nil
		}
		tried = append(tried, name+": "+C.GoString(C.gollm_library_error()))
	}
	return nil, "", fmt.Errorf("%w (tried %s)", notFound, strings.Join(tried, "; "))
}
