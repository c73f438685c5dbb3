package session

import (
	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/engine"
	"github.com/vgpu-project/vgpu/protocol"
)

// engineKinds maps protocol engine values to engines.
var engineKinds = map[uint64]engine.Kind{
	protocol.EngineAuto:    engine.Auto,
	protocol.EngineRuns:    engine.Direct,
	protocol.EngineGather:  engine.Gather,
	protocol.EngineStaging: engine.Staging,
}

func setOption(s *Session, c *call, r *protocol.SetOptionReq) error {
	switch r.Key {
	case protocol.OptionCopyEngine:
		k, ok := engineKinds[r.Value]
		if !ok {
			return device.Errorf("OpSetOption", device.ErrInvalidValue, "copy engine %d (want 0 auto, 1 runs, 2 gather, 3 staging)", r.Value)
		}
		if k != s.eng.Kind() {
			old := s.eng
			s.eng = engine.New(k, old.Registry())
			old.Close()
		}
		return nil
	}
	return device.Errorf("OpSetOption", device.ErrNotSupported, "unknown option %d", r.Key)
}

func getStats(s *Session, c *call, _ *protocol.Empty) (protocol.SessionStats, error) {
	return s.own.snapshot(), nil
}
