package worker

import (
	"fmt"
	"os"
	"runtime/debug"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/protocol"
)

// Device output. The CUDA driver prints a kernel's printf lines and its
// assert messages on the process's fd 1 and 2. A worker that serves one
// guest process makes those two fds pipes it reads itself (CaptureOutput),
// and its session sends what they carry to the guest program
// (session.Config.Output) before the reply of each call, so the lines reach
// the program's own stdout and stderr in order with its synchronisation
// points. Its own log goes to what fd 2 was before (the manager's stderr).

// MaxBufferedOutput bounds the output a stream holds between two drains;
// more is dropped and the next drain says how much.
const MaxBufferedOutput = 4 << 20

// Output is a process's captured fd 1 and 2. It implements
// session.DeviceOutput.
type Output struct {
	mu      sync.Mutex // held while a stream's pipe is read and its buffer used
	streams [2]*outStream
}

type outStream struct {
	id      uint32 // protocol.OutputStdout or OutputStderr
	fd      int    // the pipe's read end, non-blocking
	f       *os.File
	buf     []byte
	dropped uint64
}

// CaptureOutput turns this process's fd 1 and 2 into pipes that the
// returned Output reads, and returns a file that is what fd 2 was before
// (for the process's own log). Call it before anything that may print
// (before the CUDA driver is loaded). Go's crash output (a fatal error)
// also goes to the log file.
func CaptureOutput() (*Output, *os.File, error) {
	logFD, err := unix.Dup(2)
	if err != nil {
		return nil, nil, fmt.Errorf("worker: keeping stderr for the log: %w", err)
	}
	unix.CloseOnExec(logFD)
	logFile := os.NewFile(uintptr(logFD), "vgpu-worker-log")
	o := &Output{}
	for i, target := range []int{1, 2} {
		var p [2]int
		if err := unix.Pipe2(p[:], unix.O_CLOEXEC); err != nil {
			logFile.Close()
			return nil, nil, fmt.Errorf("worker: pipe for fd %d: %w", target, err)
		}
		_, _ = unix.FcntlInt(uintptr(p[1]), unix.F_SETPIPE_SZ, 1<<20) // fewer wakeups; the default 64 KiB works too
		if err := unix.Dup3(p[1], target, 0); err != nil {
			logFile.Close()
			return nil, nil, fmt.Errorf("worker: dup2 onto fd %d: %w", target, err)
		}
		unix.Close(p[1])
		if err := unix.SetNonblock(p[0], true); err != nil {
			logFile.Close()
			return nil, nil, err
		}
		s := &outStream{id: []uint32{protocol.OutputStdout, protocol.OutputStderr}[i], fd: p[0], f: os.NewFile(uintptr(p[0]), fmt.Sprintf("vgpu-fd%d-pipe", target))}
		o.streams[i] = s
		go o.pump(s)
	}
	_ = debug.SetCrashOutput(logFile, debug.CrashOptions{})
	return o, logFile, nil
}

// pump keeps a pipe from filling up (the driver would block in the middle
// of a call): it reads whenever the pipe has data, under the lock, so that
// Drain, which reads what is left under the same lock, sees every byte
// written before it was called.
func (o *Output) pump(s *outStream) {
	rc, err := s.f.SyscallConn()
	if err != nil {
		return
	}
	_ = rc.Read(func(uintptr) bool {
		o.mu.Lock()
		defer o.mu.Unlock()
		return o.readLocked(s) // false: wait until readable again
	})
}

// readLocked reads s's pipe until it is empty and reports whether it has
// ended (EOF or an error).
func (o *Output) readLocked(s *outStream) bool {
	var chunk [64 << 10]byte
	for {
		n, err := unix.Read(s.fd, chunk[:])
		if n > 0 {
			keep := min(n, MaxBufferedOutput-len(s.buf))
			s.buf = append(s.buf, chunk[:keep]...)
			s.dropped += uint64(n - keep)
		}
		switch {
		case err == unix.EAGAIN:
			return false
		case err == unix.EINTR:
			continue
		case err != nil || n == 0:
			return true
		}
	}
}

// Drain passes emit what was written to fd 1 and 2 up to now, stdout
// first; see session.DeviceOutput.
func (o *Output) Drain(emit func(stream uint32, b []byte)) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	// One poll for both pipes (this runs before every reply): read only
	// what has data, or what the pump left in a buffer.
	pfd := [2]unix.PollFd{{Fd: int32(o.streams[0].fd), Events: unix.POLLIN}, {Fd: int32(o.streams[1].fd), Events: unix.POLLIN}}
	if n, err := unix.Poll(pfd[:], 0); err != nil {
		pfd[0].Revents, pfd[1].Revents = unix.POLLIN, unix.POLLIN // read both; they are non-blocking
	} else if n == 0 && len(o.streams[0].buf) == 0 && len(o.streams[1].buf) == 0 && o.streams[0].dropped == 0 && o.streams[1].dropped == 0 {
		return false
	}
	any := false
	for i, s := range o.streams {
		if pfd[i].Revents != 0 {
			o.readLocked(s)
		}
		if s.dropped > 0 {
			if n := len(s.buf); n > 0 && s.buf[n-1] != '\n' {
				s.buf = append(s.buf, '\n')
			}
			s.buf = fmt.Appendf(s.buf, "[vgpu: %d bytes of device output dropped: more than %d between two synchronising calls]\n", s.dropped, MaxBufferedOutput)
			s.dropped = 0
		}
		if len(s.buf) > 0 {
			emit(s.id, s.buf)
			s.buf = s.buf[:0]
			any = true
		}
	}
	return any
}
