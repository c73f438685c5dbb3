package session_test

import (
	"testing"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/device/sim"
	"github.com/vgpu-project/vgpu/backend/session"
	"github.com/vgpu-project/vgpu/protocol"
)

func hello(e *env, pid uint32, role uint32) {
	e.t.Helper()
	must[protocol.HelloReq, protocol.HelloReply](e, protocol.OpHello, protocol.HelloReq{Major: 1, Role: role, PID: pid}, nil)
}

// processes returns OpDeviceGetProcesses' list for dev.
func processes(e *env, dev uint32) []protocol.ProcessInfo {
	e.t.Helper()
	rep, tail := must[protocol.DeviceReq, protocol.ProcessListReply](e, protocol.OpDeviceGetProcesses, protocol.DeviceReq{Device: dev}, nil)
	if rep.Count != rep.Total || len(tail) != int(rep.Count)*16 {
		e.t.Fatalf("process list: count %d total %d, %d tail bytes", rep.Count, rep.Total, len(tail))
	}
	var out []protocol.ProcessInfo
	for i := 0; i < int(rep.Count); i++ {
		p, _, err := protocol.Decode[protocol.ProcessInfo](tail[i*16:])
		if err != nil {
			e.t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

func wantProcs(t *testing.T, what string, got []protocol.ProcessInfo, want ...protocol.ProcessInfo) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("%s: processes %+v, want %+v", what, got, want)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("%s: processes %+v, want %+v", what, got, want)
		}
	}
}

// A session is listed on a device once it set the device up (as a CUDA
// context would be), with the memory it holds there, until it resets the
// device; the guest driver's PID wins over the library's.
func TestProcessList(t *testing.T) {
	e := start(t, opts{devices: 2})
	hello(e, 4242, protocol.RoleLibrary)
	wantProcs(t, "before any use", processes(e, 0))
	p := e.alloc(3 << 20)
	wantProcs(t, "after an allocation", processes(e, 0), protocol.ProcessInfo{PID: 4242, UsedMemory: 3 << 20})
	wantProcs(t, "on the other device", processes(e, 1))
	must[protocol.StreamCreateReq, protocol.HandleReply](e, protocol.OpStreamCreate, protocol.StreamCreateReq{Device: 1}, nil)
	wantProcs(t, "a stream on device 1", processes(e, 1), protocol.ProcessInfo{PID: 4242})
	must[protocol.PtrReq, protocol.Empty](e, protocol.OpMemFree, protocol.PtrReq{Ptr: p}, nil)
	wantProcs(t, "after the free", processes(e, 0), protocol.ProcessInfo{PID: 4242})

	hello(e, 77, protocol.RoleDriver)
	hello(e, 4243, protocol.RoleLibrary)
	wantProcs(t, "the driver's PID", processes(e, 1), protocol.ProcessInfo{PID: 77})

	must[protocol.DeviceReq, protocol.Empty](e, protocol.OpDeviceReset, protocol.DeviceReq{Device: 1}, nil)
	wantProcs(t, "after a device reset", processes(e, 1))
	wantProcs(t, "device 0 untouched by it", processes(e, 0), protocol.ProcessInfo{PID: 77})

	st, _, _ := do[protocol.DeviceReq, protocol.ProcessListReply](e, protocol.OpDeviceGetProcesses, protocol.DeviceReq{Device: 2}, nil)
	wantStatus(t, "device 2 of 2", st, device.ErrInvalidDevice)
}

// Sessions of one VM share its table and see each other; a session of
// another VM (another table) never appears; an ended session leaves.
func TestProcessListPerVM(t *testing.T) {
	drv, err := sim.New(sim.Config{Devices: 1, MemBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Close() })
	vmA, vmB := session.NewProcessTable(), session.NewProcessTable()
	a1 := start(t, opts{drv: drv, procs: vmA})
	a2 := start(t, opts{drv: drv, procs: vmA})
	b := start(t, opts{drv: drv, procs: vmB})
	hello(a1, 100, protocol.RoleLibrary)
	hello(a2, 101, protocol.RoleLibrary)
	hello(b, 100, protocol.RoleLibrary)
	a1.alloc(1 << 20)
	a2.alloc(2 << 20)
	b.alloc(8 << 20)
	both := []protocol.ProcessInfo{{PID: 100, UsedMemory: 1 << 20}, {PID: 101, UsedMemory: 2 << 20}}
	wantProcs(t, "VM A from its first session", processes(a1, 0), both...)
	wantProcs(t, "VM A from its second session", processes(a2, 0), both...)
	wantProcs(t, "VM B", processes(b, 0), protocol.ProcessInfo{PID: 100, UsedMemory: 8 << 20})
	a2.close()
	wantProcs(t, "VM A after a session ended", processes(a1, 0), both[0])
}

// A table whose VM has processes in other host processes (a worker's)
// lists them beside its own, the sessions of one guest process merged;
// Local, what a worker tells the manager, lists only its own.
func TestProcessListWithOthers(t *testing.T) {
	procs := session.NewProcessTable()
	asked := -1
	procs.Others = func(dev int) []protocol.ProcessInfo {
		asked = dev
		return []protocol.ProcessInfo{{PID: 300, UsedMemory: 5}, {PID: 100, UsedMemory: 7}, {PID: 0, UsedMemory: 9}}
	}
	e := start(t, opts{procs: procs})
	hello(e, 100, protocol.RoleLibrary)
	e.alloc(1 << 20)
	wantProcs(t, "with the other workers'", processes(e, 0),
		protocol.ProcessInfo{PID: 100, UsedMemory: 1<<20 + 7}, protocol.ProcessInfo{PID: 300, UsedMemory: 5})
	if asked != 0 {
		t.Fatalf("Others asked about device %d, want 0", asked)
	}
	wantProcs(t, "local only", procs.Local(0), protocol.ProcessInfo{PID: 100, UsedMemory: 1 << 20})
}

// The sim's monitor says what it knows: zero utilization (kernels never
// run) and the model's maximum clocks; the driver release is the sim's.
func TestMonitorAndDriverInfo(t *testing.T) {
	e := start(t, opts{})
	m, _ := must[protocol.DeviceReq, protocol.DeviceMonitor](e, protocol.OpDeviceGetMonitor, protocol.DeviceReq{}, nil)
	want := protocol.MonitorUtilization | protocol.MonitorMaxClock<<device.ClockSM | protocol.MonitorMaxClock<<device.ClockMemory
	if m.Valid != want|protocol.MonitorMaxClock<<device.ClockGraphics || m.GPUUtil != 0 || m.MaxClocks[device.ClockSM] != 1755 || m.MaxClocks[device.ClockMemory] != 1593 {
		t.Fatalf("sim monitor %+v", m)
	}
	if m.Valid&protocol.MonitorTemperature != 0 {
		t.Fatal("the sim claims a temperature")
	}
	st, _, _ := do[protocol.DeviceReq, protocol.DeviceMonitor](e, protocol.OpDeviceGetMonitor, protocol.DeviceReq{Device: 5}, nil)
	wantStatus(t, "monitor of device 5", st, device.ErrInvalidDevice)
	di, _ := must[protocol.Empty, protocol.DriverInfoReply](e, protocol.OpDriverGetInfo, protocol.Empty{}, nil)
	if got := protocol.GetString(di.DriverVersion[:]); got != "vgpu-sim" {
		t.Fatalf("driver release %q", got)
	}
}

// device.Monitor's field bits travel unchanged as protocol.Monitor*.
func TestMonitorBitsAgree(t *testing.T) {
	pairs := []struct {
		d device.MonitorFields
		p uint32
	}{
		{device.HasUtilization, protocol.MonitorUtilization}, {device.HasTemperature, protocol.MonitorTemperature},
		{device.HasPower, protocol.MonitorPower}, {device.HasPowerLimit, protocol.MonitorPowerLimit},
		{device.HasFan, protocol.MonitorFan}, {device.HasPstate, protocol.MonitorPstate},
		{device.HasClock, protocol.MonitorClock}, {device.HasMaxClock, protocol.MonitorMaxClock},
	}
	for _, p := range pairs {
		if uint32(p.d) != p.p {
			t.Errorf("device bit %#x, protocol bit %#x", p.d, p.p)
		}
	}
	if device.NumClocks != protocol.MonitorClocks {
		t.Errorf("%d clocks in device, %d in protocol", device.NumClocks, protocol.MonitorClocks)
	}
}
