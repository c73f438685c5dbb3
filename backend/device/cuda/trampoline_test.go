package cuda

import (
	"testing"
	"time"

	"github.com/ebitengine/purego"
)

// TestHostFuncTrampolineOnForeignThread: the driver runs host functions on
// its own threads; the purego trampoline must work there in a
// CGO_ENABLED=0 build. pthread_create stands in for the driver.
func TestHostFuncTrampolineOnForeignThread(t *testing.T) {
	h, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW)
	if err != nil {
		t.Skipf("no libc.so.6: %v", err)
	}
	var pthreadCreate func(th *uint64, attr uintptr, start uintptr, arg uintptr) int32
	purego.RegisterLibFunc(&pthreadCreate, h, "pthread_create")
	const id = 1 << 40 // far from the ids LaunchHostFunc hands out
	done := make(chan struct{})
	hostFns.Store(uintptr(id), func() { close(done) })
	var th uint64
	if r := pthreadCreate(&th, 0, hostFnTrampoline(), id); r != 0 {
		t.Fatalf("pthread_create: %d", r)
	}
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the trampoline did not run the function on a foreign thread")
	}
	if _, ok := hostFns.Load(uintptr(id)); ok {
		t.Fatal("the function was not removed after running")
	}
}
