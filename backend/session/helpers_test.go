package session_test

import (
	"crypto/sha256"

	"github.com/vgpu-project/vgpu/backend/guestmem"
	"github.com/vgpu-project/vgpu/backend/session/sessiontest"
	"github.com/vgpu-project/vgpu/protocol"
)

func sha(b []byte) [32]byte { return sha256.Sum256(b) }

func guestGPA(g uint64) guestmem.GPA { return guestmem.GPA(g) }

func sessiontestDoSegs[Req, Rep any](e *env, op protocol.Opcode, req Req, segs []protocol.Segment) (int32, Rep, []byte, error) {
	return sessiontest.DoSegs[Req, Rep](e.c, op, &req, segs)
}

func waitReply(ch <-chan protocol.Frame) (protocol.Frame, error) {
	return sessiontest.Wait(ch, sessiontest.Timeout)
}
