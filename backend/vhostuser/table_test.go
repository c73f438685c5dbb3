package vhostuser

import (
	"strings"
	"testing"
)

// TestHandlerTable checks that every dispatch entry is complete and that
// the requests QEMU 7.2 sends for vhost-user-vsock are all handled.
func TestHandlerTable(t *testing.T) {
	for req, h := range handlers {
		if h.name == "" || h.fn == nil {
			t.Errorf("request %d: incomplete entry %+v", req, h)
		}
		if strings.HasPrefix(h.name, "GET_") != h.reply {
			t.Errorf("%s: reply flag %v does not match its name", h.name, h.reply)
		}
		if (h.fds != fdsNone) != (h.name == "SET_MEM_TABLE" || strings.HasPrefix(h.name, "SET_VRING_") && (strings.HasSuffix(h.name, "KICK") || strings.HasSuffix(h.name, "CALL") || strings.HasSuffix(h.name, "ERR"))) {
			t.Errorf("%s: fd rule %d", h.name, h.fds)
		}
	}
	for _, req := range []uint32{reqGetFeatures, reqGetProtocolFeatures, reqSetProtocolFeatures, reqGetQueueNum, reqSetOwner,
		reqSetVringCall, reqSetVringErr, reqGetConfig, reqSetFeatures, reqSetMemTable, reqSetVringNum, reqSetVringBase,
		reqSetVringAddr, reqSetVringKick, reqSetVringEnable, reqGetVringBase, reqResetOwner} {
		if _, ok := handlers[req]; !ok {
			t.Errorf("request %d is not handled", req)
		}
	}
}
