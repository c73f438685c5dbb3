package session

import (
	"github.com/vgpu-project/vgpu/backend/device"
)

// Argument checks that run before a device is called. The real driver is
// not a validator: it trusts its caller, and an out-of-range enum can crash
// it inside the backend (a FUNC_SET_ATTRIBUTE attribute of 0x7fffffff made
// libcuda 580 segfault). So every enum and size a guest sends is checked
// here against what the device supports; unknown values get INVALID_VALUE.

// CUfunction_attribute values cuFuncSetAttribute accepts (cuda.h), with the
// range of values each takes. The others are read-only.
const (
	funcAttrMaxDynamicSharedSize   = 8
	funcAttrPreferredCarveout      = 9
	funcAttrRequiredClusterWidth   = 11
	funcAttrRequiredClusterHeight  = 12
	funcAttrRequiredClusterDepth   = 13
	funcAttrNonPortableClusterSize = 14
	funcAttrClusterSchedPolicy     = 15
)

// Device attributes the checks read (CUdevice_attribute, cuda.h).
const (
	devAttrMaxSharedPerBlockOptin = 97
)

// checkFuncSetAttribute refuses attributes that are not settable and values
// out of their documented range.
func checkFuncSetAttribute(op string, props *device.Properties, attr uint32, v int32) error {
	switch attr {
	case funcAttrMaxDynamicSharedSize:
		if v < 0 || (props != nil && v > props.Attrs[devAttrMaxSharedPerBlockOptin]) {
			return device.Errorf(op, device.ErrInvalidValue, "dynamic shared memory %d bytes: the device allows 0..%d", v, optinSmem(props))
		}
	case funcAttrPreferredCarveout:
		if v < -1 || v > 100 {
			return device.Errorf(op, device.ErrInvalidValue, "shared memory carveout %d: want -1 (default) or 0..100 percent", v)
		}
	case funcAttrRequiredClusterWidth, funcAttrRequiredClusterHeight, funcAttrRequiredClusterDepth:
		if v < 0 || v > 16 {
			return device.Errorf(op, device.ErrInvalidValue, "cluster dimension %d: want 0..16", v)
		}
	case funcAttrNonPortableClusterSize:
		if v != 0 && v != 1 {
			return device.Errorf(op, device.ErrInvalidValue, "non-portable cluster size allowed %d: want 0 or 1", v)
		}
	case funcAttrClusterSchedPolicy:
		if v < 0 || v > 2 {
			return device.Errorf(op, device.ErrInvalidValue, "cluster scheduling policy %d: want 0..2", v)
		}
	default:
		return device.Errorf(op, device.ErrInvalidValue, "function attribute %d is not settable (settable: 8, 9, 11-15)", attr)
	}
	return nil
}

func optinSmem(props *device.Properties) int32 {
	if props == nil {
		return 0
	}
	return props.Attrs[devAttrMaxSharedPerBlockOptin]
}

// occupancyDisableCachingOverride is CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE,
// the only flag cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags knows.
const occupancyDisableCachingOverride = 1

func checkOccupancyFlags(op string, flags uint32) error {
	if flags&^occupancyDisableCachingOverride != 0 {
		return device.Errorf(op, device.ErrInvalidValue, "occupancy flags %#x: only CU_OCCUPANCY_DISABLE_CACHING_OVERRIDE (1) exists", flags)
	}
	return nil
}
