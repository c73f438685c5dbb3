package vsock

import "testing"

// TestOpTable checks that every operation a guest may send has a handler
// and a name.
func TestOpTable(t *testing.T) {
	for _, op := range []uint16{OpRequest, OpResponse, OpRST, OpShutdown, OpRW, OpCreditUpdate, OpCreditRequest} {
		if opHandlers[op] == nil {
			t.Errorf("%s has no handler", OpName(op))
		}
		if _, ok := opNames[op]; !ok {
			t.Errorf("op %d has no name", op)
		}
	}
	if _, ok := opHandlers[OpInvalid]; ok {
		t.Error("OpInvalid must not be handled")
	}
}
