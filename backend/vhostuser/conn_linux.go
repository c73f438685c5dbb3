package vhostuser

import (
	"fmt"
	"io"
	"net"

	"golang.org/x/sys/unix"
)

// oobSize holds the control message of the largest fd array a request may
// carry (one per memory region).
var oobSize = unix.CmsgSpace(4 * maxRegions)

// readMessage reads one request and the fds passed with it (header layer
// only; handle checks the rest). The fds are closed on error.
func readMessage(c *net.UnixConn) (*message, error) {
	m := &message{}
	var hb [headerSize]byte
	oob := make([]byte, oobSize)
	if err := readFull(c, hb[:], oob, &m.fds); err != nil {
		closeAll(m.fds)
		return nil, err
	}
	m.hdr.decode(hb[:])
	if m.hdr.Size > maxPayload {
		closeAll(m.fds)
		return nil, fmt.Errorf("vhost-user: message %d body of %d bytes exceeds %d", m.hdr.Request, m.hdr.Size, maxPayload)
	}
	if m.hdr.Size > 0 {
		m.body = make([]byte, m.hdr.Size)
		if err := readFull(c, m.body, oob, &m.fds); err != nil {
			closeAll(m.fds)
			return nil, fmt.Errorf("vhost-user: read body of message %d: %w", m.hdr.Request, err)
		}
	}
	if len(m.fds) > maxRegions {
		closeAll(m.fds)
		return nil, fmt.Errorf("vhost-user: message %d carries %d fds (at most %d)", m.hdr.Request, len(m.fds), maxRegions)
	}
	return m, nil
}

// readFull fills b, collecting any SCM_RIGHTS fds that arrive with it.
func readFull(c *net.UnixConn, b, oob []byte, fds *[]int) error {
	for got := 0; got < len(b); {
		n, oobn, flags, _, err := c.ReadMsgUnix(b[got:], oob)
		if oobn > 0 {
			cmsgs, perr := unix.ParseSocketControlMessage(oob[:oobn])
			if perr == nil {
				for _, cm := range cmsgs {
					if rights, err := unix.ParseUnixRights(&cm); err == nil {
						*fds = append(*fds, rights...)
					}
				}
			}
			if perr != nil {
				return fmt.Errorf("vhost-user: parse control message: %w", perr)
			}
		}
		if flags&unix.MSG_CTRUNC != 0 {
			return fmt.Errorf("vhost-user: control message truncated (too many fds)")
		}
		got += n
		if err != nil {
			if got > 0 && err == io.EOF {
				return io.ErrUnexpectedEOF
			}
			return err
		}
		if n == 0 {
			return io.EOF
		}
	}
	return nil
}

func closeFD(fd int) { _ = unix.Close(fd) }

func closeAll(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			closeFD(fd)
		}
	}
}
