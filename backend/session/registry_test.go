package session

import (
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/device/cuda"
	"github.com/vgpu-project/vgpu/backend/device/sim"
	"github.com/vgpu-project/vgpu/protocol"
)

// TestRegistryComplete: every row of the call registry (protocol.Ops) has
// what each layer needs — a handler and a validator here (calls), a device
// method that device.Context declares and both devices (sim and cuda)
// implement, and its golden frames in protocol/testdata/golden/ops.
func TestRegistryComplete(t *testing.T) {
	ctxType := reflect.TypeOf((*device.Context)(nil)).Elem()
	impls := map[string]reflect.Type{
		"sim":  reflect.TypeOf((*sim.Context)(nil)),
		"cuda": reflect.TypeOf((*cuda.Context)(nil)),
	}
	for _, info := range protocol.Ops {
		name := info.Op.String()
		call := info.Shape != protocol.ShapeNotify
		if _, ok := handlers[info.Op]; ok != call {
			t.Errorf("%s: has a handler %v, is a call %v", name, ok, call)
		}
		if _, ok := validators[info.Op]; !ok {
			t.Errorf("%s: no validator", name)
		}
		if info.Device != "" {
			if _, ok := ctxType.MethodByName(info.Device); !ok {
				t.Errorf("%s: device.Context has no method %s", name, info.Device)
			}
			for kind, typ := range impls {
				if _, ok := typ.MethodByName(info.Device); !ok {
					t.Errorf("%s: the %s device has no method %s", name, kind, info.Device)
				}
			}
		}
		golden := filepath.Join("..", "..", "protocol", "testdata", "golden", "ops", strings.ToLower(info.Name)+".bin")
		if _, err := os.Stat(golden); err != nil {
			t.Errorf("%s: no golden frame (%v); run go generate ./protocol/...", name, err)
		}
	}
	for op := range handlers {
		if _, ok := protocol.Lookup(op); !ok {
			t.Errorf("handler for %#04x, which is not in the registry", uint16(op))
		}
	}
}
