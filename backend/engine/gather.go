package engine

import (
	"github.com/vgpu-project/vgpu/backend/device"
)

type gatherKernels struct{}

func (e *Engine) gather(c device.Context, dir Dir, dev device.Ptr, pieces []Piece, s device.Stream) error {
	return device.Errorf("engine.Gather", device.ErrNotSupported, "gather engine not built yet")
}
