package budget

import (
	"errors"
	"sync"
	"testing"
)

func lim(r Resource, n int64) Limits {
	var l Limits
	l[r] = n
	return l
}

func TestLevels(t *testing.T) {
	root := NewRoot("process", lim(FDs, 10))
	vm := root.Child("vm a", lim(FDs, 6))
	a := vm.Client("client 1", lim(FDs, 4), Limits{})
	b := vm.Client("client 2", lim(FDs, 4), Limits{})
	other := root.Child("vm b", lim(FDs, 6)).Client("client 3", lim(FDs, 4), Limits{})

	if err := a.Take(FDs, 4); err != nil {
		t.Fatal(err)
	}
	var ex *Exhausted
	if err := a.Take(FDs, 1); !errors.As(err, &ex) || ex.Level != "client 1" {
		t.Fatalf("over the client's limit: %v", err)
	}
	if err := b.Take(FDs, 3); !errors.As(err, &ex) || ex.Level != "vm a" || ex.Used != 4 || ex.Limit != 6 {
		t.Fatalf("over the VM's limit: %v", err)
	}
	if err := b.Take(FDs, 2); err != nil {
		t.Fatal(err)
	}
	// The VM is full; another VM still has the process's last 4.
	if err := other.Take(FDs, 4); err != nil {
		t.Fatal(err)
	}
	if root.Used(FDs) != 10 || vm.Used(FDs) != 6 {
		t.Fatalf("used: process %d vm %d", root.Used(FDs), vm.Used(FDs))
	}
	a.Give(FDs, 4)
	b.Give(FDs, 2)
	other.Give(FDs, 4)
	if root.Used(FDs) != 0 || vm.Used(FDs) != 0 || a.Used(FDs) != 0 {
		t.Fatal("not everything came back")
	}
	if vm.Refused(FDs) != 1 || a.Refused(FDs) != 1 {
		t.Fatalf("refusals counted: vm %d client %d", vm.Refused(FDs), a.Refused(FDs))
	}
}

func TestReserve(t *testing.T) {
	root := NewRoot("process", lim(ReplyBytes, 100))
	full := root.Client("hog", Limits{}, Limits{})
	if err := full.Take(ReplyBytes, 100); err != nil {
		t.Fatal(err)
	}
	c := root.Client("client", lim(ReplyBytes, 50), lim(ReplyBytes, 20))
	// The reserve is the client's own, whatever the process has left.
	if err := c.Take(ReplyBytes, 20); err != nil {
		t.Fatalf("within the reserve: %v", err)
	}
	if err := c.Take(ReplyBytes, 1); err == nil {
		t.Fatal("past the reserve with the process full")
	}
	full.Give(ReplyBytes, 30)
	if err := c.Take(ReplyBytes, 25); err != nil {
		t.Fatal(err)
	}
	if root.Used(ReplyBytes) != 95 {
		t.Fatalf("process holds %d, want 70 + 25 above the reserve", root.Used(ReplyBytes))
	}
	c.Give(ReplyBytes, 45)
	if root.Used(ReplyBytes) != 70 || c.Used(ReplyBytes) != 0 {
		t.Fatalf("after giving back: process %d client %d", root.Used(ReplyBytes), c.Used(ReplyBytes))
	}
}

func TestCloseHandsBackLeaks(t *testing.T) {
	root := NewRoot("process", Limits{})
	vm := root.Child("vm", Limits{})
	c := vm.Client("client", Limits{}, lim(Mappings, 2))
	if err := c.Take(Mappings, 5); err != nil {
		t.Fatal(err)
	}
	held := c.Close()
	if held[Mappings] != 5 || vm.Used(Mappings) != 0 || root.Used(Mappings) != 0 {
		t.Fatalf("close: held %d, vm %d, process %d", held[Mappings], vm.Used(Mappings), root.Used(Mappings))
	}
	c.Give(Mappings, 5) // a late release after the session ended
	if vm.Used(Mappings) != 0 || root.Used(Mappings) != 0 {
		t.Fatal("a Give after Close reached the parents twice")
	}
}

func TestConcurrentNeverOverLimit(t *testing.T) {
	root := NewRoot("process", lim(Objects, 1000))
	var wg sync.WaitGroup
	var mu sync.Mutex
	peak := int64(0)
	for i := 0; i < 8; i++ {
		c := root.Client("c", Limits{}, lim(Objects, 3))
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 2000; j++ {
				if c.Take(Objects, 7) == nil {
					mu.Lock()
					peak = max(peak, root.Used(Objects))
					mu.Unlock()
					c.Give(Objects, 7)
				}
			}
		}()
	}
	wg.Wait()
	if peak > 1000 || root.Used(Objects) != 0 {
		t.Fatalf("peak %d (limit 1000), left %d", peak, root.Used(Objects))
	}
}

func TestDefaultBoundsFitTheProcess(t *testing.T) {
	for _, f := range []Facts{{NoFile: 1024, MaxMapCount: 65530, MaxFrame: 17 << 20}, {NoFile: 1 << 20, MaxMapCount: 65530, MaxFrame: 17 << 20}, {NoFile: 256, MaxMapCount: 1000, MaxFrame: 1 << 20}} {
		b := DefaultBounds(f)
		s := b.Global[Sessions]
		if fds := b.Global[FDs] + s*(fdsPerSession+b.Reserve[FDs]); f.NoFile > processFDs+64 && fds > f.NoFile-processFDs {
			t.Errorf("%+v: guests may hold %d fds of %d", f, fds, f.NoFile)
		}
		if maps := b.Global[Mappings] + s*b.Reserve[Mappings]; f.MaxMapCount >= 512 && maps > f.MaxMapCount/2 {
			t.Errorf("%+v: guests may hold %d mappings of %d", f, maps, f.MaxMapCount)
		}
		for _, r := range All() {
			if b.VM[r] > b.Global[r] || b.Client[r] > max(b.VM[r], b.Reserve[r]) && r != RequestBytes && r != ReplyBytes {
				t.Errorf("%+v: %s: client %d, vm %d, global %d", f, r, b.Client[r], b.VM[r], b.Global[r])
			}
		}
	}
}
