// Command guestvsock is the guest side of the vhost-user-vsock integration
// test. It runs as /init's child in a throwaway initramfs (static,
// CGO_ENABLED=0), reads its parameters from the kernel command line
// (vgt.mode, vgt.conns, vgt.bytes, vgt.port, vgt.privport) and talks to
// the host (CID 2) over AF_VSOCK. Results are printed on the console as
// lines starting with "VGT ".
//
// Wire format per connection: the guest sends a 16-byte hello
// (id u32, mode u32, bytes u64, little endian), then `bytes` of the
// checkable stream of package stream (seed 2*id); the host verifies and sends `bytes` of pattern data
// (seed 2*id+1); the guest verifies and answers one byte, 'K' or 'F'.
// Odd ids then close from the guest side first, even ids wait for the
// host's close (EOF) first.
package main

import (
	"encoding/binary"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/vhostuser/internal/stream"
)

type vconn struct{ fd int }

func (c vconn) Read(p []byte) (int, error) {
	for {
		n, err := unix.Read(c.fd, p)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return 0, err
		}
		if n == 0 {
			return 0, io.EOF
		}
		return n, nil
	}
}

func (c vconn) Write(p []byte) (int, error) {
	w := 0
	for w < len(p) {
		n, err := unix.Write(c.fd, p[w:])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return w, err
		}
		w += n
	}
	return w, nil
}

func dial(port, privport uint32) (vconn, error) {
	fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return vconn{}, fmt.Errorf("socket: %w", err)
	}
	if privport != 0 {
		// Walk the reserved range like the kernel driver will.
		var berr error
		for p := privport; p > 0; p-- {
			if berr = unix.Bind(fd, &unix.SockaddrVM{CID: unix.VMADDR_CID_ANY, Port: p}); berr == nil {
				break
			}
		}
		if berr != nil {
			unix.Close(fd)
			return vconn{}, fmt.Errorf("bind privileged port: %w", berr)
		}
	}
	if err := unix.Connect(fd, &unix.SockaddrVM{CID: 2, Port: port}); err != nil {
		unix.Close(fd)
		return vconn{}, fmt.Errorf("connect: %w", err)
	}
	return vconn{fd}, nil
}

func param(cmdline, key, def string) string {
	for _, f := range strings.Fields(cmdline) {
		if v, ok := strings.CutPrefix(f, key+"="); ok {
			return v
		}
	}
	return def
}

func num(cmdline, key string, def uint64) uint64 {
	v, err := strconv.ParseUint(param(cmdline, key, strconv.FormatUint(def, 10)), 0, 64)
	if err != nil {
		return def
	}
	return v
}

const chunk = 256 << 10

func run(id uint32, mode uint32, total uint64, port, privport uint32) error {
	c, err := dial(port, privport)
	if err != nil {
		return err
	}
	defer unix.Close(c.fd)
	var hello [16]byte
	binary.LittleEndian.PutUint32(hello[0:], id)
	binary.LittleEndian.PutUint32(hello[4:], mode)
	binary.LittleEndian.PutUint64(hello[8:], total)
	if _, err := c.Write(hello[:]); err != nil {
		return fmt.Errorf("hello: %w", err)
	}
	buf := make([]byte, chunk)
	t0 := time.Now()
	for off := uint64(0); off < total; {
		n := min(uint64(len(buf)), total-off)
		stream.Fill(buf[:n], 2*uint64(id), off)
		if _, err := c.Write(buf[:n]); err != nil {
			return fmt.Errorf("send at %d: %w", off, err)
		}
		off += n
	}
	t1 := time.Now()
	ok := true
	for off := uint64(0); off < total; {
		n := min(uint64(len(buf)), total-off)
		if _, err := io.ReadFull(c, buf[:n]); err != nil {
			return fmt.Errorf("receive at %d: %w", off, err)
		}
		if !stream.Check(buf[:n], 2*uint64(id)+1, off) {
			ok = false
		}
		off += n
	}
	t2 := time.Now()
	ack := []byte{'K'}
	if !ok {
		ack[0] = 'F'
	}
	if _, err := c.Write(ack); err != nil {
		return fmt.Errorf("ack: %w", err)
	}
	if !ok {
		return fmt.Errorf("host data did not match the pattern")
	}
	if id%2 == 0 {
		// The host closes first: expect EOF.
		var b [1]byte
		if n, err := c.Read(b[:]); n != 0 || err != io.EOF {
			return fmt.Errorf("want EOF after the host's close, got %d bytes, %v", n, err)
		}
	}
	fmt.Printf("VGT conn %d ok g2h %.1f MB/s h2g %.1f MB/s\n", id,
		float64(total)/t1.Sub(t0).Seconds()/1e6, float64(total)/t2.Sub(t1).Seconds()/1e6)
	return nil
}

func main() {
	raw, _ := os.ReadFile("/proc/cmdline")
	cmdline := string(raw)
	mode := param(cmdline, "vgt.mode", "bulk")
	conns := num(cmdline, "vgt.conns", 1)
	total := num(cmdline, "vgt.bytes", 1<<20)
	port := uint32(num(cmdline, "vgt.port", 0x7667))
	privport := uint32(num(cmdline, "vgt.privport", 1023))
	fmt.Printf("VGT start mode=%s conns=%d bytes=%d port=%d\n", mode, conns, total, port)
	switch mode {
	case "unpriv":
		// Connect from an unprivileged port: the host must refuse.
		c, err := dial(port, 0)
		if err == nil {
			unix.Close(c.fd)
			fmt.Println("VGT FAIL unprivileged connection was accepted")
		} else {
			fmt.Printf("VGT unpriv refused: %v\n", err)
		}
		privport = 1023
	}
	var wg sync.WaitGroup
	failed := false
	var mu sync.Mutex
	t0 := time.Now()
	for i := uint64(0); i < conns; i++ {
		wg.Add(1)
		go func(id uint32) {
			defer wg.Done()
			if err := run(id, 0, total, port, privport-uint32(id)); err != nil {
				mu.Lock()
				failed = true
				mu.Unlock()
				fmt.Printf("VGT FAIL conn %d: %v\n", id, err)
			}
		}(uint32(i))
	}
	wg.Wait()
	el := time.Since(t0).Seconds()
	if failed {
		fmt.Println("VGT DONE FAIL")
	} else {
		fmt.Printf("VGT DONE OK %.2fs\n", el)
	}
}
