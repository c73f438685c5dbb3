package session_test

import (
	"errors"
	"testing"
	"time"

	"github.com/vgpu-project/vgpu/backend/budget"
	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/device/sim"
	"github.com/vgpu-project/vgpu/backend/internal/testwait"
	"github.com/vgpu-project/vgpu/backend/session"
	"github.com/vgpu-project/vgpu/backend/session/sessiontest"
	"github.com/vgpu-project/vgpu/protocol"
)

// One client must not stall another (issue 20, item 2): sessions that
// share a context each get a default stream of their own, so a host
// function a client never answers on its default stream (or a wait for an
// event that never completes) holds only that client's work.
func TestDefaultStreamNotShared(t *testing.T) {
	drv, err := sim.New(sim.Config{Devices: 1, MemBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Close() })
	attacker := start(t, opts{drv: drv, vm: "attacker"})
	// 1. A host function on the legacy default stream, never answered.
	must[protocol.HostFuncReq, protocol.Empty](attacker, protocol.OpHostFuncLaunch, protocol.HostFuncReq{Stream: 1, CallbackID: 1}, nil)
	<-attacker.c.Notes
	// 2. An event recorded behind a host function on a blocking stream,
	//    waited for on stream 0.
	s, _ := must[protocol.StreamCreateReq, protocol.HandleReply](attacker, protocol.OpStreamCreate, protocol.StreamCreateReq{}, nil)
	must[protocol.HostFuncReq, protocol.Empty](attacker, protocol.OpHostFuncLaunch, protocol.HostFuncReq{Stream: s.Handle, CallbackID: 2}, nil)
	ev, _ := must[protocol.EventCreateReq, protocol.HandleReply](attacker, protocol.OpEventCreate, protocol.EventCreateReq{}, nil)
	must[protocol.EventRecordReq, protocol.Empty](attacker, protocol.OpEventRecord, protocol.EventRecordReq{Event: ev.Handle, Stream: s.Handle}, nil)
	must[protocol.StreamWaitEventReq, protocol.Empty](attacker, protocol.OpStreamWaitEvent, protocol.StreamWaitEventReq{Stream: 0, Event: ev.Handle}, nil)

	// Another client's synchronous work on its default stream goes on.
	victim := start(t, opts{drv: drv, vm: "victim"})
	p := victim.alloc(4096)
	wantStatus(t, "victim's synchronous copy", victim.htod(p, []byte("still served")), 0)
	if st, got := victim.dtoh(p, 12); st != 0 || string(got) != "still served" {
		t.Fatalf("victim's read back: %d %q", st, got)
	}
	must[protocol.MemsetReq, protocol.Empty](victim, protocol.OpMemset, protocol.MemsetReq{Dst: p, Count: 16, ElemSize: 1}, nil)
	must[protocol.DeviceReq, protocol.Empty](victim, protocol.OpDeviceSynchronize, protocol.DeviceReq{}, nil)
	must[protocol.HandleReq, protocol.Empty](victim, protocol.OpStreamSynchronize, protocol.HandleReq{Handle: 0}, nil)
}

// Within one session the legacy default stream's rules still hold: work on
// the default stream waits for the session's blocking streams, work on a
// blocking stream waits for the default stream; non-blocking streams wait
// for nothing.
func TestLegacyDefaultStreamWithinSession(t *testing.T) {
	e := start(t, opts{})
	blocking, _ := must[protocol.StreamCreateReq, protocol.HandleReply](e, protocol.OpStreamCreate, protocol.StreamCreateReq{}, nil)
	nonBlocking, _ := must[protocol.StreamCreateReq, protocol.HandleReply](e, protocol.OpStreamCreate, protocol.StreamCreateReq{Flags: 1}, nil)
	p := e.alloc(4096)

	// A host function holds the non-blocking stream: the default stream
	// does not wait for it.
	must[protocol.HostFuncReq, protocol.Empty](e, protocol.OpHostFuncLaunch, protocol.HostFuncReq{Stream: nonBlocking.Handle, CallbackID: 1}, nil)
	<-e.c.Notes
	wantStatus(t, "sync copy beside a held non-blocking stream", e.htod(p, []byte("a")), 0)

	// A host function holds the blocking stream: a synchronous memset on
	// the default stream waits until the guest answers.
	must[protocol.HostFuncReq, protocol.Empty](e, protocol.OpHostFuncLaunch, protocol.HostFuncReq{Stream: blocking.Handle, CallbackID: 2}, nil)
	<-e.c.Notes
	id := e.c.ID()
	memsetDone := e.c.Expect(id)
	if err := e.c.Send(protocol.AppendFrame(nil, protocol.NewHeader(protocol.OpMemset, id), protocol.Bytes(&protocol.MemsetReq{Dst: p, Count: 8, ElemSize: 1, Value: 'z'}), nil)); err != nil {
		t.Fatal(err)
	}
	select {
	case f := <-memsetDone:
		t.Fatalf("the default stream did not wait for the blocking stream (status %d)", f.Status)
	case <-time.After(100 * time.Millisecond):
	}
	must[protocol.HostFuncDoneReq, protocol.Empty](e, protocol.OpHostFuncDone, protocol.HostFuncDoneReq{CallbackID: 2}, nil)
	if f, err := waitReply(memsetDone); err != nil || f.Status != 0 {
		t.Fatalf("memset after the blocking stream: %v %d", err, f.Status)
	}

	// Work on the blocking stream waits for the default stream's: an
	// event recorded on it behind a held default stream is not reached.
	must[protocol.HostFuncReq, protocol.Empty](e, protocol.OpHostFuncLaunch, protocol.HostFuncReq{Stream: 0, CallbackID: 3}, nil)
	<-e.c.Notes
	ev, _ := must[protocol.EventCreateReq, protocol.HandleReply](e, protocol.OpEventCreate, protocol.EventCreateReq{}, nil)
	must[protocol.EventRecordReq, protocol.Empty](e, protocol.OpEventRecord, protocol.EventRecordReq{Event: ev.Handle, Stream: blocking.Handle}, nil)
	st, _, _ := do[protocol.HandleReq, protocol.Empty](e, protocol.OpEventQuery, protocol.HandleReq{Handle: ev.Handle}, nil)
	wantStatus(t, "event on a blocking stream behind the default stream", st, device.ErrNotReady)
	must[protocol.HostFuncDoneReq, protocol.Empty](e, protocol.OpHostFuncDone, protocol.HostFuncDoneReq{CallbackID: 3}, nil)
	must[protocol.HandleReq, protocol.Empty](e, protocol.OpEventSynchronize, protocol.HandleReq{Handle: ev.Handle}, nil)
	must[protocol.HostFuncDoneReq, protocol.Empty](e, protocol.OpHostFuncDone, protocol.HostFuncDoneReq{CallbackID: 1}, nil)
	must[protocol.DeviceReq, protocol.Empty](e, protocol.OpDeviceSynchronize, protocol.DeviceReq{}, nil)
}

// A host function nobody answers holds its stream for HostFuncTimeout at
// most: then the stream goes on and the guest gets CUDA_ERROR_TIMEOUT
// (909) naming the launch; a late DONE finds nothing pending.
func TestHostFuncDeadline(t *testing.T) {
	e := start(t, opts{hostFuncTimeout: 50 * time.Millisecond})
	p := e.alloc(4096)
	launch := e.c.ID()
	ch := e.c.Expect(launch)
	if err := e.c.Send(protocol.AppendFrame(nil, protocol.NewHeader(protocol.OpHostFuncLaunch, launch), protocol.Bytes(&protocol.HostFuncReq{CallbackID: 5}), nil)); err != nil {
		t.Fatal(err)
	}
	if f, err := waitReply(ch); err != nil || f.Status != 0 {
		t.Fatalf("launch: %v %d", err, f.Status)
	}
	// A synchronous copy behind it completes once the deadline has passed.
	wantStatus(t, "copy behind an unanswered host function", e.htod(p, []byte("later")), 0)
	var notes []protocol.Frame
	for len(notes) < 2 {
		select {
		case n := <-e.c.Notes:
			notes = append(notes, n)
		case <-time.After(10 * time.Second):
			t.Fatalf("notifications: %v", notes)
		}
	}
	en, _, _ := protocol.Decode[protocol.ErrorNotify](notes[1].Payload)
	if notes[0].Opcode != protocol.OpNotifyHostFunc || notes[1].Opcode != protocol.OpNotifyError ||
		en.RequestID != launch || en.Error != 909 || protocol.Opcode(en.Opcode) != protocol.OpHostFuncLaunch {
		t.Fatalf("notifications %v, %v %+v", notes[0].Opcode, notes[1].Opcode, en)
	}
	st, _, _ := do[protocol.HostFuncDoneReq, protocol.Empty](e, protocol.OpHostFuncDone, protocol.HostFuncDoneReq{CallbackID: 5}, nil)
	wantStatus(t, "late DONE", st, device.ErrInvalidHandle)
	if n := e.stats.Snapshot().HostFuncTimeouts; n != 1 {
		t.Fatalf("host function timeouts counted: %d", n)
	}
}

// The reader never starves its own completions: while the executor waits
// on a stream for a host function, the guest may send more frames than the
// request queue holds before its HOST_FUNC_DONE; the reader reads on to
// find it. (Before, the reader stopped at 64 queued frames and the session
// hung until the connection ended.)
func TestReaderFindsHostFuncDoneBehindQueuedFrames(t *testing.T) {
	var lim budget.Limits
	lim[budget.RequestBytes] = 256 << 10 // 64 small frames, as the old queue held
	pool := budget.NewRoot("process", budget.Limits{}).Child("vm", budget.Limits{}).Client("session", lim, budget.Limits{})
	e := start(t, opts{budget: pool, hostFuncTimeout: time.Hour})
	s, _ := must[protocol.StreamCreateReq, protocol.HandleReply](e, protocol.OpStreamCreate, protocol.StreamCreateReq{Flags: 1}, nil)
	must[protocol.HostFuncReq, protocol.Empty](e, protocol.OpHostFuncLaunch, protocol.HostFuncReq{Stream: s.Handle, CallbackID: 9}, nil)
	<-e.c.Notes
	var frames []byte
	sync := e.c.ID()
	syncDone := e.c.Expect(sync)
	frames = protocol.AppendFrame(frames, protocol.NewHeader(protocol.OpStreamSynchronize, sync), protocol.Bytes(&protocol.HandleReq{Handle: s.Handle}), nil)
	var pings []<-chan protocol.Frame
	for i := 0; i < 200; i++ {
		id := e.c.ID()
		pings = append(pings, e.c.Expect(id))
		frames = protocol.AppendFrame(frames, protocol.NewHeader(protocol.OpPing, id), nil, nil)
	}
	frames = protocol.AppendFrame(frames, protocol.NewHeader(protocol.OpHostFuncDone, e.c.ID()), protocol.Bytes(&protocol.HostFuncDoneReq{CallbackID: 9}), nil)
	go func() { _ = e.c.Send(frames) }()
	if f, err := sessiontest.Wait(syncDone, 10*time.Second); err != nil || f.Status != 0 {
		t.Fatalf("stream sync waiting for the host function: %v %d", err, f.Status)
	}
	for i, ch := range pings {
		if f, err := waitReply(ch); err != nil || f.Status != 0 {
			t.Fatalf("ping %d: %v %d", i, err, f.Status)
		}
	}
	// A frame's bytes go back just after its reply is sent, so the last
	// ping's may still be held for a moment after its reply arrived.
	testwait.For(t, 10*time.Second, "every request byte given back after every frame ran", func() bool {
		return pool.Used(budget.RequestBytes) == 0
	})
}

// A limit one client sets is its own (issue 20, item 6: one client's
// malloc heap size became every client's): others still see the value the
// context had, the context runs with the largest request, and goes back
// when the client leaves.
func TestLimitsPerSession(t *testing.T) {
	drv, err := sim.New(sim.Config{Devices: 1, MemBytes: 1 << 30})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { drv.Close() })
	table := session.NewLimitTable()
	ctx, _ := drv.Context(0)
	def, _ := ctx.GetLimit(2)
	a := start(t, opts{drv: drv, limitTable: table, vm: "a"})
	b := start(t, opts{drv: drv, limitTable: table, vm: "b"})
	get := func(e *env, l uint32) uint64 {
		r, _ := must[protocol.LimitReq, protocol.LimitReply](e, protocol.OpDeviceGetLimit, protocol.LimitReq{Limit: l}, nil)
		return r.Value
	}
	must[protocol.LimitReq, protocol.Empty](a, protocol.OpDeviceSetLimit, protocol.LimitReq{Limit: 2, Value: 256 << 20}, nil)
	if got := get(a, 2); got != 256<<20 {
		t.Fatalf("a's own heap limit: %d", got)
	}
	if got := get(b, 2); got != def {
		t.Fatalf("b sees a's heap limit: %d, want the default %d", got, def)
	}
	must[protocol.LimitReq, protocol.Empty](b, protocol.OpDeviceSetLimit, protocol.LimitReq{Limit: 2, Value: 64 << 20}, nil)
	if got := get(b, 2); got != 64<<20 {
		t.Fatalf("b's own heap limit: %d", got)
	}
	if v, _ := ctx.GetLimit(2); v != 256<<20 {
		t.Fatalf("the context runs with %d, want the largest request", v)
	}
	a.close()
	if v, _ := ctx.GetLimit(2); v != 64<<20 {
		t.Fatalf("after a left the context runs with %d, want b's 64 MiB", v)
	}
	b.close()
	if v, _ := ctx.GetLimit(2); v != def {
		t.Fatalf("after both left: %d, want the default %d", v, def)
	}
}

// A call that waits for the device past the call deadline is answered
// CUDA_ERROR_LAUNCH_TIMEOUT and the connection closed, with the reason
// logged and OnCallTimeout told (a worker then exits, ending the kernel).
// On the H100 the field fuzzer launched a valid grid of 2^31-1 x 65535
// blocks and the synchronous copy behind it got no reply at all
// (bench/results/2026-11-25-h100-fuzz); here an unanswered host function
// (bounded by a deadline far past the call's) holds the stream as such a
// kernel would.
func TestCallTimeoutAnswersAndCloses(t *testing.T) {
	told := make(chan error, 2)
	e := start(t, opts{hostFuncTimeout: time.Hour, callTimeout: 100 * time.Millisecond, onCallTimeout: func(err error) { told <- err }})
	p := e.alloc(4096)
	launch := e.c.ID()
	ch := e.c.Expect(launch)
	if err := e.c.Send(protocol.AppendFrame(nil, protocol.NewHeader(protocol.OpHostFuncLaunch, launch), protocol.Bytes(&protocol.HostFuncReq{CallbackID: 5}), nil)); err != nil {
		t.Fatal(err)
	}
	if f, err := waitReply(ch); err != nil || f.Status != 0 {
		t.Fatalf("launch: %v %d", err, f.Status)
	}
	wantStatus(t, "a copy behind a stream that does not move", e.htod(p, []byte("never")), session.ErrLaunchTimeout)
	select {
	case err := <-told:
		var de *device.Error
		if !errors.As(err, &de) || de.Result != session.ErrLaunchTimeout {
			t.Fatalf("OnCallTimeout got %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("OnCallTimeout not called")
	}
	// The connection is closed: the session ends (the host function is
	// released with it) without the client closing anything.
	select {
	case <-e.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the session still runs after its call timed out")
	}
	e.done <- nil // for e.close
	if n := e.stats.Snapshot().CallTimeouts; n != 1 {
		t.Fatalf("call timeouts counted: %d", n)
	}
	if len(told) != 0 {
		t.Fatal("OnCallTimeout called twice")
	}
}

// The deadline is for calls: a session that waits for nothing is not
// ended, however long it is idle.
func TestCallTimeoutSparesIdleSessions(t *testing.T) {
	e := start(t, opts{callTimeout: time.Second})
	time.Sleep(1500 * time.Millisecond)
	if n := e.stats.Snapshot().CallTimeouts; n != 0 {
		t.Fatalf("an idle session timed out (%d)", n)
	}
	e.ping()
}
