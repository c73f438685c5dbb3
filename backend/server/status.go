package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"time"
)

// ListenStatus creates the status socket at path (replacing a stale one).
func ListenStatus(path string) (net.Listener, error) {
	if fi, err := os.Lstat(path); err == nil && fi.Mode()&os.ModeSocket != 0 {
		_ = os.Remove(path)
	}
	ln, err := net.Listen("unix", path)
	if err != nil {
		return nil, fmt.Errorf("server: status socket %s: %w", path, err)
	}
	return ln, nil
}

// ServeStatus answers every connection on ln (see ListenStatus) with the
// JSON encoding of Status, then closes it. It returns when ctx is done.
func (s *Server) ServeStatus(ctx context.Context, ln net.Listener) error {
	stop := context.AfterFunc(ctx, func() { ln.Close() })
	defer stop()
	for {
		c, err := ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return nil
			}
			return err
		}
		go func() {
			defer c.Close()
			_ = c.SetWriteDeadline(time.Now().Add(5 * time.Second))
			enc := json.NewEncoder(c)
			enc.SetIndent("", "  ")
			_ = enc.Encode(s.Status())
		}()
	}
}

// ReadStatus fetches a Status from a status socket.
func ReadStatus(path string, timeout time.Duration) (*Status, error) {
	c, err := net.DialTimeout("unix", path, timeout)
	if err != nil {
		return nil, fmt.Errorf("connecting to the status socket %s (is 'vgpu serve --status-socket' running?): %w", path, err)
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(timeout))
	var st Status
	if err := json.NewDecoder(c).Decode(&st); err != nil {
		return nil, fmt.Errorf("reading status from %s: %w", path, err)
	}
	return &st, nil
}
