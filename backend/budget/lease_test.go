package budget

import (
	"errors"
	"sync"
	"testing"
)

// Two workers of one VM: the VM's bound holds for their sum, a refusal
// names the manager's level, and a worker that ends gives its lease back.
func TestLeasedVMLevelSpansWorkers(t *testing.T) {
	mgr := NewRoot("workers", Limits{})
	vm := NewLedger(mgr.Child("vm a (all its workers)", lim(Objects, 1000)))
	worker := func(name string) (*Pool, *Pool) {
		root := NewRoot(name, Limits{})
		v := root.Child("vm a", lim(Objects, 1000))
		v.LeaseFrom(vm.For(name), Slack(lim(Objects, 1000)))
		return root, v.Client(name+" session", Limits{}, Limits{})
	}
	_, a := worker("worker 1")
	_, b := worker("worker 2")
	if err := a.Take(Objects, 600); err != nil {
		t.Fatal(err)
	}
	// Worker 2's own pools are empty, yet its VM is nearly full.
	var ex *Exhausted
	if err := b.Take(Objects, 500); !errors.As(err, &ex) || ex.Level != "vm a (all its workers)" {
		t.Fatalf("the VM's bound across workers: %v", err)
	}
	if err := b.Take(Objects, 390); err != nil {
		t.Fatal(err)
	}
	if used := vm.Pool().Used(Objects); used > 1000 || used < 990 {
		t.Fatalf("the VM's level holds %d (in use 990, slack within the bound)", used)
	}
	// Giving back trims the lease to the slack.
	a.Give(Objects, 600)
	if l := vm.Pool().Used(Objects); l > 390+2*Slack(lim(Objects, 1000))[Objects]+2*3 {
		t.Fatalf("after worker 1 freed its objects the VM's level still holds %d", l)
	}
	if err := b.Take(Objects, 500); err != nil {
		t.Fatalf("room freed by worker 1 is worker 2's now: %v", err)
	}
	// Worker 2 dies holding its lease: the manager drops it.
	if held := vm.Drop("worker 2"); held[Objects] < 890 {
		t.Fatalf("dropped %d", held[Objects])
	}
	vm.Drop("worker 1")
	if vm.Pool().Used(Objects) != 0 || vm.Holders() != 0 {
		t.Fatalf("after both workers ended the VM holds %d (%d holders)", vm.Pool().Used(Objects), vm.Holders())
	}
}

// Force (notifications from driver threads) is granted past the bound and
// still counted.
func TestLeasedForce(t *testing.T) {
	vm := NewLedger(NewRoot("workers", Limits{}).Child("vm", lim(ReplyBytes, 100)))
	p := NewRoot("worker", Limits{}).Child("vm", Limits{})
	p.LeaseFrom(vm.For(1), Slack(lim(ReplyBytes, 100)))
	c := p.Client("s", Limits{}, Limits{})
	if err := c.Take(ReplyBytes, 100); err != nil {
		t.Fatal(err)
	}
	c.Force(ReplyBytes, 10)
	if vm.Pool().Used(ReplyBytes) < 110 {
		t.Fatalf("forced units not counted: %d", vm.Pool().Used(ReplyBytes))
	}
	if err := c.Take(ReplyBytes, 1); err == nil {
		t.Fatal("a take past a forced overrun was granted")
	}
	c.Give(ReplyBytes, 110)
	if vm.Pool().Used(ReplyBytes) > 2 {
		t.Fatalf("the VM's level holds %d after everything was given back", vm.Pool().Used(ReplyBytes))
	}
}

// Many sessions of many workers at once never take the VM past its bound.
func TestLeasedConcurrentNeverOverLimit(t *testing.T) {
	const bound = 5000
	vm := NewLedger(NewRoot("workers", Limits{}).Child("vm", lim(Objects, bound)))
	var wg sync.WaitGroup
	for w := 0; w < 8; w++ {
		p := NewRoot("worker", Limits{}).Child("vm", Limits{})
		p.LeaseFrom(vm.For(w), Slack(lim(Objects, bound)))
		for s := 0; s < 4; s++ {
			c := p.Client("s", Limits{}, Limits{})
			wg.Add(1)
			go func() {
				defer wg.Done()
				held := int64(0)
				for i := 0; i < 2000; i++ {
					if vm.Pool().Used(Objects) > bound {
						t.Errorf("the VM's level holds %d > %d", vm.Pool().Used(Objects), bound)
						return
					}
					if i%3 == 2 && held > 0 {
						c.Give(Objects, 1)
						held--
					} else if c.Take(Objects, 1) == nil {
						held++
					}
				}
				c.Give(Objects, held)
			}()
		}
	}
	wg.Wait()
	for w := 0; w < 8; w++ {
		vm.Drop(w)
	}
	if vm.Pool().Used(Objects) != 0 {
		t.Fatalf("%d left", vm.Pool().Used(Objects))
	}
}
