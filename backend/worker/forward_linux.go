package worker

import (
	"fmt"
	"io"
	"net"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/transport"
	"github.com/vgpu-project/vgpu/protocol"
)

// smallFrame is the largest frame forwardFrames sends in one sendmsg; a
// frame that carries an fd (OpHostShare) is far smaller.
const smallFrame = 64 << 10

// forwardFrames copies a host-mode client's frames to the worker's end of
// the session stream, keeping each frame's fds with it: the session in the
// worker reads one frame at a time and takes the fds that came with its
// bytes, so each frame is sent with its own fds in the sendmsg of its first
// byte. Frames are not validated here (the session does that); a header
// whose lengths cannot be trusted ends the frame-by-frame copy, and the
// rest of the stream is copied as bytes (the session will hang up).
func forwardFrames(dst *net.UnixConn, src transport.FDConn) error {
	var hb [protocol.HeaderSize]byte
	buf := make([]byte, 0, smallFrame)
	for {
		if _, err := io.ReadFull(src, hb[:]); err != nil {
			closeAll(src.TakeFDs())
			return err
		}
		// Sizes only: an oversize or bad-flag frame is forwarded whole,
		// for the session to answer and skip.
		h, _ := protocol.DecodeHeader(hb[:], protocol.Limits{MaxPayload: ^uint32(0), MaxSegments: ^uint32(0)})
		if h.Magic != protocol.Magic || h.Major != protocol.Major {
			closeAll(src.TakeFDs())
			if _, err := dst.Write(hb[:]); err != nil {
				return err
			}
			_, err := io.Copy(dst, src)
			return err
		}
		n := h.FrameLen()
		if n <= smallFrame {
			buf = append(buf[:0], hb[:]...)
			buf = buf[:n]
			if _, err := io.ReadFull(src, buf[protocol.HeaderSize:]); err != nil {
				closeAll(src.TakeFDs())
				return err
			}
			if err := sendWithFDs(dst, buf, src.TakeFDs()); err != nil {
				return err
			}
			continue
		}
		// A large frame (inline data): the header with its fds (it takes
		// none; the session closes them), then the body as bytes.
		if err := sendWithFDs(dst, hb[:], src.TakeFDs()); err != nil {
			return err
		}
		if _, err := io.CopyN(dst, src, int64(n-protocol.HeaderSize)); err != nil {
			closeAll(src.TakeFDs())
			return err
		}
		closeAll(src.TakeFDs()) // fds sent in the middle of a large frame belong to no share
	}
}

// sendWithFDs writes b with fds attached to its first byte, then closes
// fds (the peer has its own copies).
func sendWithFDs(dst *net.UnixConn, b []byte, fds []int) error {
	defer closeAll(fds)
	var oob []byte
	if len(fds) > 0 {
		oob = unix.UnixRights(fds...)
	}
	n, _, err := dst.WriteMsgUnix(b, oob, nil)
	if err != nil {
		return fmt.Errorf("worker: forwarding a frame: %w", err)
	}
	if n < len(b) { // a stream socket may take part of it; the fds went with the first byte
		_, err = dst.Write(b[n:])
	}
	return err
}

func closeAll(fds []int) {
	for _, fd := range fds {
		_ = unix.Close(fd)
	}
}
