package session

import "testing"

// TestSharedQuota: two processes of one VM, each with its own Quota on one
// Account (as two workers on the manager's account). Together they never
// exceed the cap; what MemGetInfo calls free (Available) can be allocated
// in one piece; freed memory beyond the slack goes back to the account; a
// process that ends gives back all it held.
func TestSharedQuota(t *testing.T) {
	const mib = 1 << 20
	acct := &Account{Limit: 64 * mib}
	slack := LeaseSlack(acct.Limit)
	p1 := &Quota{Limit: acct.Limit, Shared: acct.For(1)}
	p2 := &Quota{Limit: acct.Limit, Shared: acct.For(2)}
	if !p1.Reserve(40 * mib) {
		t.Fatal("40 MiB of 64 refused")
	}
	if got := acct.Leased(); got != 40*mib+slack {
		t.Fatalf("leased %d, want 40 MiB plus the slack %d", got, slack)
	}
	if !p1.Reserve(slack) || acct.Leased() != 40*mib+slack {
		t.Fatal("an allocation within the lease went to the account")
	}
	if p2.Reserve(40 * mib) {
		t.Fatal("the second process got 40 MiB: 80 MiB over a 64 MiB cap")
	}
	free := p2.Available()
	if free != 64*mib-40*mib-slack {
		t.Fatalf("process 2 sees %d free, want %d", free, 64*mib-40*mib-slack)
	}
	if !p2.Reserve(free) {
		t.Fatalf("process 2 could not allocate the %d bytes it was told are free", free)
	}
	if p2.Reserve(1) || p1.Reserve(1) {
		t.Fatal("an allocation past the cap")
	}
	if p1.Available() != 0 || p2.Available() != 0 {
		t.Fatalf("available %d, %d at the cap", p1.Available(), p2.Available())
	}
	p1.Release(40 * mib)
	if got := acct.Leased(); got > free+slack+2*slack {
		t.Fatalf("after process 1 freed 40 MiB the account still holds %d", got)
	}
	if !p2.Reserve(30 * mib) {
		t.Fatal("process 2 cannot use what process 1 freed")
	}
	acct.Drop(1)
	acct.Drop(2)
	if acct.Leased() != 0 || acct.Holders() != 0 {
		t.Fatalf("after both processes ended: %d bytes, %d holders", acct.Leased(), acct.Holders())
	}
}
