package session

import (
	"testing"

	"github.com/vgpu-project/vgpu/protocol"
)

// Every opcode has a row in the validators table, and every row is an
// opcode: a new opcode cannot reach a handler unchecked by accident.
func TestValidatorsCoverOps(t *testing.T) {
	known := map[protocol.Opcode]bool{}
	for _, info := range protocol.Ops {
		known[info.Op] = true
		v, ok := validators[info.Op]
		if !ok {
			t.Errorf("%v (%#04x) has no row in session.validators", info.Op, uint16(info.Op))
			continue
		}
		if v.check == nil && v.none == "" {
			t.Errorf("%v: a row that checks nothing must say why", info.Op)
		}
	}
	for op := range validators {
		if !known[op] {
			t.Errorf("validators has a row for %#04x, which is not in protocol.Ops", uint16(op))
		}
	}
}
