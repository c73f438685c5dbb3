package cuda

import (
	"fmt"
	"sync"

	"github.com/ebitengine/purego"
	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/device"
)

// hostNVML is the host's libnvidia-ml.so.1, loaded with purego like
// libcuda: the source of Context.Monitor's readings and Driver.Release.
// Every entry point is optional (looked up with Dlsym first); a missing one
// leaves its reading out. Without the library, or when nvmlInit fails,
// Monitor has no readings and Release is "".
type hostNVML struct {
	handle  uintptr
	release string

	shutdown         func() int32
	handleByUUID     func(uuid *byte, dev *uintptr) int32
	utilization      func(dev uintptr, u *[2]uint32) int32
	temperature      func(dev uintptr, sensor uint32, c *uint32) int32
	powerUsage       func(dev uintptr, mw *uint32) int32
	enforcedPowerLim func(dev uintptr, mw *uint32) int32
	fanSpeed         func(dev uintptr, pct *uint32) int32
	performanceState func(dev uintptr, p *uint32) int32
	clockInfo        func(dev uintptr, typ uint32, mhz *uint32) int32
	maxClockInfo     func(dev uintptr, typ uint32, mhz *uint32) int32
}

// nvmlTemperatureGPU is NVML_TEMPERATURE_GPU (nvml.h).
const nvmlTemperatureGPU = 0

// openNVML loads and initialises the host's NVML, or returns nil and logs
// why (monitor readings are a convenience; the GPU works without them).
func openNVML(log hclog.Logger) *hostNVML {
	h, err := purego.Dlopen("libnvidia-ml.so.1", purego.RTLD_NOW|purego.RTLD_LOCAL)
	if err != nil {
		log.Info("host NVML not loaded: guests get no utilization, temperature, power or clock readings", "err", err)
		return nil
	}
	n := &hostNVML{handle: h}
	var initV2 func() int32
	if !n.sym(&initV2, "nvmlInit_v2") {
		log.Info("host libnvidia-ml.so.1 has no nvmlInit_v2: no monitor readings")
		return nil
	}
	if r := initV2(); r != 0 {
		log.Info("host nvmlInit_v2 failed: no monitor readings", "nvml_return", r)
		return nil
	}
	n.sym(&n.shutdown, "nvmlShutdown")
	n.sym(&n.handleByUUID, "nvmlDeviceGetHandleByUUID")
	n.sym(&n.utilization, "nvmlDeviceGetUtilizationRates")
	n.sym(&n.temperature, "nvmlDeviceGetTemperature")
	n.sym(&n.powerUsage, "nvmlDeviceGetPowerUsage")
	n.sym(&n.enforcedPowerLim, "nvmlDeviceGetEnforcedPowerLimit")
	n.sym(&n.fanSpeed, "nvmlDeviceGetFanSpeed")
	n.sym(&n.performanceState, "nvmlDeviceGetPerformanceState")
	n.sym(&n.clockInfo, "nvmlDeviceGetClockInfo")
	n.sym(&n.maxClockInfo, "nvmlDeviceGetMaxClockInfo")
	var driverVersion func(buf *byte, n uint32) int32
	if n.sym(&driverVersion, "nvmlSystemGetDriverVersion") {
		var buf [96]byte
		if driverVersion(&buf[0], uint32(len(buf))) == 0 {
			n.release = goString(&buf[0])
		}
	}
	log.Info("host NVML ready", "driver", n.release, "by_uuid", n.handleByUUID != nil)
	return n
}

func (n *hostNVML) sym(fptr any, name string) bool {
	p, err := purego.Dlsym(n.handle, name)
	if err != nil || p == 0 {
		return false
	}
	purego.RegisterFunc(fptr, p)
	return true
}

func (n *hostNVML) close() {
	if n != nil && n.shutdown != nil {
		n.shutdown()
	}
}

// nvmlUUID is the text form NVML names a GPU by (lower-case hex).
func nvmlUUID(u [16]byte) string {
	return fmt.Sprintf("GPU-%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// device finds NVML's handle of the GPU with CUDA UUID u. By UUID, not by
// index: CUDA_VISIBLE_DEVICES and CUDA_DEVICE_ORDER may number the GPUs
// differently from NVML.
func (n *hostNVML) device(u [16]byte) (uintptr, bool) {
	if n == nil || n.handleByUUID == nil {
		return 0, false
	}
	var h uintptr
	if n.handleByUUID(cstr(nvmlUUID(u)), &h) != 0 || h == 0 {
		return 0, false
	}
	return h, true
}

// read takes every reading the library offers for dev.
func (n *hostNVML) read(dev uintptr) device.Monitor {
	var m device.Monitor
	var u [2]uint32
	if n.utilization != nil && n.utilization(dev, &u) == 0 {
		m.GPUUtil, m.MemUtil = u[0], u[1]
		m.Has |= device.HasUtilization
	}
	one := func(f func(uintptr, *uint32) int32, v *uint32, bit device.MonitorFields) {
		if f != nil && f(dev, v) == 0 {
			m.Has |= bit
		}
	}
	if n.temperature != nil && n.temperature(dev, nvmlTemperatureGPU, &m.TemperatureC) == 0 {
		m.Has |= device.HasTemperature
	}
	one(n.powerUsage, &m.PowerMilliwatts, device.HasPower)
	one(n.enforcedPowerLim, &m.PowerLimitMilliwatts, device.HasPowerLimit)
	one(n.fanSpeed, &m.FanPercent, device.HasFan)
	one(n.performanceState, &m.Pstate, device.HasPstate)
	for t := 0; t < device.NumClocks; t++ {
		if n.clockInfo != nil && n.clockInfo(dev, uint32(t), &m.Clocks[t]) == 0 {
			m.Has |= device.HasClock << t
		}
		if n.maxClockInfo != nil && n.maxClockInfo(dev, uint32(t), &m.MaxClocks[t]) == 0 {
			m.Has |= device.HasMaxClock << t
		}
	}
	return m
}

// nvmlDevice is a Context's NVML handle, looked up once.
type nvmlDevice struct {
	once sync.Once
	h    uintptr
	ok   bool
}

// Monitor reads the GPU's state through the host's NVML: the whole
// physical GPU, whoever uses it. Without host NVML it has no readings.
func (c *Context) Monitor() (device.Monitor, error) {
	n := c.d.nvml
	if n == nil {
		return device.Monitor{}, nil
	}
	c.nvmlDev.once.Do(func() {
		p, err := c.Properties()
		if err == nil {
			c.nvmlDev.h, c.nvmlDev.ok = n.device(p.UUID)
		}
		if !c.nvmlDev.ok {
			c.d.log.Info("host NVML does not know this GPU by its CUDA UUID: no monitor readings", "device", c.ord)
		}
	})
	if !c.nvmlDev.ok {
		return device.Monitor{}, nil
	}
	return n.read(c.nvmlDev.h), nil
}
