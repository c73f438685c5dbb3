package worker

import (
	"fmt"
	"unsafe"

	"github.com/ebitengine/purego"
)

// LineBufferStdio makes the C library's stdout line-buffered in this
// process (stderr is unbuffered already). A driver that prints device
// output with stdio would otherwise leave it in a full buffer, since fd 1
// is a pipe (CaptureOutput), until the process exits; line by line it
// reaches the pipe as a terminal would show it. Best effort: without a
// loadable C library there is nothing to buffer.
func LineBufferStdio() error {
	libc, err := purego.Dlopen("libc.so.6", purego.RTLD_NOW|purego.RTLD_GLOBAL)
	if err != nil {
		return fmt.Errorf("worker: loading libc to line-buffer stdout: %w", err)
	}
	sym, err := purego.Dlsym(libc, "stdout")
	if err != nil || sym == 0 {
		return fmt.Errorf("worker: libc has no stdout: %v", err)
	}
	var setvbuf func(stream, buf uintptr, mode int32, size uintptr) int32
	purego.RegisterLibFunc(&setvbuf, libc, "setvbuf")
	const ioLBF = 1                               // _IOLBF (stdio.h)
	stream := **(**uintptr)(unsafe.Pointer(&sym)) // sym is the address of libc's FILE *stdout
	if stream == 0 || setvbuf(stream, 0, ioLBF, 0) != 0 {
		return fmt.Errorf("worker: setvbuf(stdout, _IOLBF) failed")
	}
	return nil
}
