package sim

import "github.com/vgpu-project/vgpu/backend/device"

// CUdevice_attribute numbers (cuda.h) and the values an H100 PCIe reports
// (driver 580). The sim device reports these so that guest code sizing its
// launches from device properties behaves as it would on the real GPU.
var h100Attrs = map[int]int32{
	1: 1024, 2: 1024, 3: 1024, 4: 64, // max threads per block, block dims
	5: 2147483647, 6: 65535, 7: 65535, // grid dims
	8: 49152, 9: 65536, 10: 32, 11: 2147483647, 12: 65536, // smem/block, const, warp, pitch, regs/block
	13: 1755000, 14: 512, 15: 1, 16: 114, 17: 0, 18: 0, 19: 1, 20: 0, // clock kHz, tex align, overlap, SMs, ...
	21: 131072, 22: 131072, 23: 65536, 24: 16384, 25: 16384, 26: 16384, 27: 32768, 28: 32768, 29: 2048,
	30: 512, 31: 1, 32: 1, 33: 0, 34: 0, 35: 0, 36: 1593000, 37: 5120, 38: 52428800, 39: 2048,
	40: 3, 41: 1, 42: 32768, 43: 2048, 45: 32768, 46: 32768, 47: 8192, 48: 8192, 49: 32768,
	50: 0, 51: 32, 52: 32768, 53: 32768, 54: 2046, 55: 32768, 56: 131072, 57: 65536, 58: 16384,
	59: 16384, 60: 16384, 61: 32768, 62: 2048, 63: 32768, 64: 32768, 65: 2048, 66: 32768, 67: 32768,
	68: 2046, 69: 268435456, 70: 131072, 71: 65000, 72: 2097120, 73: 32768, 74: 32768,
	75: 9, 76: 0, // compute capability 9.0
	77: 32768, 78: 1, 79: 1, 80: 1, 81: 233472, 82: 65536, 83: 1, 84: 0, 85: 0, 86: 0, 87: 2,
	88: 0, 89: 1, 90: 1, 91: 1, 95: 1, 96: 1, 97: 232448, 98: 0, 99: 1, 100: 0, 101: 0, 102: 1,
	103: 1, 106: 32, 107: 1, 108: 32505856, 109: 134213632, 111: 1024, 112: 1, 113: 1, 114: 1, 115: 1,
	// PCI device and subsystem IDs, device/vendor in one word each
	// (CU_DEVICE_ATTRIBUTE_GPU_PCI_DEVICE_ID, _SUBSYSTEM_ID, CUDA 12.8+):
	// H100 PCIe 0x2331, NVIDIA 0x10de, board 0x1626.
	139: 0x233110de, 140: 0x162610de,
}

// Device attribute numbers the sim consults itself.
const (
	attrMaxThreadsPerBlock = 1
	attrClockRate          = 13 // kHz
	attrMemClockRate       = 36 // kHz
	attrMaxBlockDimX       = 2
	attrCCMajor            = 75
	attrCCMinor            = 76
	attrMaxGridDimX        = 5
	attrMaxSmemPerBlock    = 8
	attrSMCount            = 16
	attrCooperativeLaunch  = 95
	attrPCIBusID           = 33
	attrMaxThreadsPerSM    = 39
	attrMaxSmemPerSM       = 81
	attrMaxSmemOptin       = 97
	attrMaxBlocksPerSM     = 106
)

func h100Properties(ordinal int, mem uint64) device.Properties {
	p := device.Properties{
		Name:     "vgpu-sim H100 model (kernels not executed)",
		TotalMem: mem,
	}
	copy(p.UUID[:], "vgpu-sim-dev")
	p.UUID[15] = byte(ordinal)
	for a, v := range h100Attrs {
		p.Attrs[a] = v
	}
	p.Attrs[attrPCIBusID] = int32(0x10 + ordinal)
	return p
}
