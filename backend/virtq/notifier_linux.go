package virtq

import (
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"sync"

	"golang.org/x/sys/unix"
)

// Notifier is an eventfd used as a kick (driver to device) or call (device
// to driver) notification. Wait blocks in the Go netpoller, so Close wakes a
// blocked Wait.
type Notifier struct {
	f    *os.File
	fd   int
	once sync.Once
	ch   chan struct{}
}

// NewNotifier takes ownership of an eventfd (e.g. received from QEMU) and
// makes it non-blocking.
func NewNotifier(fd int, name string) (*Notifier, error) {
	if err := unix.SetNonblock(fd, true); err != nil {
		_ = unix.Close(fd)
		return nil, fmt.Errorf("virtq: set eventfd %s non-blocking: %w", name, err)
	}
	f := os.NewFile(uintptr(fd), name)
	if f == nil {
		return nil, fmt.Errorf("virtq: eventfd %s: invalid fd %d", name, fd)
	}
	return &Notifier{f: f, fd: fd}, nil
}

// NewEventfd creates a fresh eventfd notifier (tests, and the device side of
// in-process peers).
func NewEventfd(name string) (*Notifier, error) {
	fd, err := unix.Eventfd(0, unix.EFD_CLOEXEC|unix.EFD_NONBLOCK)
	if err != nil {
		return nil, fmt.Errorf("virtq: create eventfd %s: %w", name, err)
	}
	return NewNotifier(fd, name)
}

// FD returns the eventfd's descriptor (valid until Close).
func (n *Notifier) FD() int { return n.fd }

// Signal adds one to the eventfd. Errors (a closed notifier swapped out by
// SET_VRING_CALL) are ignored: the signal is then moot.
func (n *Notifier) Signal() {
	var b [8]byte
	binary.LittleEndian.PutUint64(b[:], 1)
	_, _ = n.f.Write(b[:])
}

// Wait blocks until the eventfd is signalled and resets it. It returns
// os.ErrClosed after Close.
func (n *Notifier) Wait() error {
	var b [8]byte
	_, err := n.f.Read(b[:])
	if err != nil && errors.Is(err, os.ErrClosed) {
		return os.ErrClosed
	}
	return err
}

// Close closes the eventfd, waking a blocked Wait.
func (n *Notifier) Close() error { return n.f.Close() }

// C returns a channel that receives a value after the eventfd is signalled
// (coalesced: one pending value at most). The first call starts the one
// goroutine that waits on the eventfd; it ends when the notifier is closed.
func (n *Notifier) C() <-chan struct{} {
	n.once.Do(func() {
		n.ch = make(chan struct{}, 1)
		go func() {
			for n.Wait() == nil {
				select {
				case n.ch <- struct{}{}:
				default:
				}
			}
		}()
	})
	return n.ch
}
