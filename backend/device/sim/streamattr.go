package sim

import (
	"math"

	"github.com/vgpu-project/vgpu/backend/device"
)

// Stream attributes (cuStreamSetAttribute, ...): kept per stream with the
// driver's defaults and checked as the driver checks them. They change
// nothing of how the simulated device runs work (it has no L2 to keep
// lines in and schedules every stream alike).

// The H100's stream priority range (cuCtxGetStreamPriorityRange): lower
// numbers are higher priorities.
const (
	greatestPriority = -5
	leastPriority    = 0
)

// maxWindowBytes is the H100's CU_DEVICE_ATTRIBUTE_MAX_ACCESS_POLICY_WINDOW_SIZE.
const maxWindowBytes = 134213632

type streamAttrs struct {
	window    device.AccessPolicyWindow
	policy    uint32 // CUsynchronizationPolicy: 1 auto, 2 spin, 3 yield, 4 blocking sync
	priority  int32
	domainMap uint32 // default | remote<<8
	domain    uint32 // 0 default, 1 remote
}

func defaultStreamAttrs() streamAttrs {
	return streamAttrs{policy: 1, domainMap: 1 << 8}
}

func clampPriority(p int32) int32 { return min(max(p, greatestPriority), leastPriority) }

// StreamSetAttribute sets attribute attr of stream h.
func (c *Context) StreamSetAttribute(h device.Stream, attr int, v device.StreamAttr) error {
	const op = "cuStreamSetAttribute"
	if err := c.broken(op); err != nil {
		return err
	}
	s, err := c.stream(op, h)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return s.attrs.set(op, attr, v)
}

// set sets attribute attr, checked as the driver checks it.
func (a *streamAttrs) set(op string, attr int, v device.StreamAttr) error {
	switch attr {
	case device.StreamAttrAccessPolicyWindow:
		w := v.Window
		if w.Bytes > maxWindowBytes || w.HitProp > 2 || w.MissProp > 2 || !(w.HitRatio >= 0 && w.HitRatio <= 1) || math.IsNaN(float64(w.HitRatio)) {
			return device.Errorf(op, device.ErrInvalidValue, "access policy window of %d bytes, hit ratio %g, properties %d/%d", w.Bytes, w.HitRatio, w.HitProp, w.MissProp)
		}
		a.window = w
	case device.StreamAttrSyncPolicy:
		if v.Value < 1 || v.Value > 4 {
			return device.Errorf(op, device.ErrInvalidValue, "synchronization policy %d (1..4)", v.Value)
		}
		a.policy = v.Value
	case device.StreamAttrPriority:
		a.priority = clampPriority(int32(v.Value))
	case device.StreamAttrMemSyncDomainMap:
		a.domainMap = v.Value & 0xffff
	case device.StreamAttrMemSyncDomain:
		if v.Value > 1 {
			return device.Errorf(op, device.ErrInvalidValue, "memory sync domain %d (0 default, 1 remote)", v.Value)
		}
		a.domain = v.Value
	default:
		return device.Errorf(op, device.ErrInvalidValue, "stream attribute %d", attr)
	}
	return nil
}

// get reads attribute attr.
func (a *streamAttrs) get(op string, attr int) (device.StreamAttr, error) {
	switch attr {
	case device.StreamAttrAccessPolicyWindow:
		return device.StreamAttr{Window: a.window}, nil
	case device.StreamAttrSyncPolicy:
		return device.StreamAttr{Value: a.policy}, nil
	case device.StreamAttrPriority:
		return device.StreamAttr{Value: uint32(a.priority)}, nil
	case device.StreamAttrMemSyncDomainMap:
		return device.StreamAttr{Value: a.domainMap}, nil
	case device.StreamAttrMemSyncDomain:
		return device.StreamAttr{Value: a.domain}, nil
	}
	return device.StreamAttr{}, device.Errorf(op, device.ErrInvalidValue, "stream attribute %d", attr)
}

// StreamGetAttribute reads attribute attr of stream h.
func (c *Context) StreamGetAttribute(h device.Stream, attr int) (device.StreamAttr, error) {
	const op = "cuStreamGetAttribute"
	if err := c.broken(op); err != nil {
		return device.StreamAttr{}, err
	}
	s, err := c.stream(op, h)
	if err != nil {
		return device.StreamAttr{}, err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	return s.attrs.get(op, attr)
}

// StreamCopyAttributes gives dst src's attributes.
func (c *Context) StreamCopyAttributes(dst, src device.Stream) error {
	const op = "cuStreamCopyAttributes"
	if err := c.broken(op); err != nil {
		return err
	}
	d, err := c.stream(op, dst)
	if err != nil {
		return err
	}
	s, err := c.stream(op, src)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	d.attrs = s.attrs
	return nil
}
