package guestmem_test

import (
	"errors"
	"testing"

	"github.com/vgpu-project/vgpu/backend/guestmem"
)

// TestLatest: Acquire says Missing until a table is set, hands out
// references to the latest one, and Set drops its reference on the one
// before (the table is released once its last holder lets go).
func TestLatest(t *testing.T) {
	missing := errors.New("no table yet")
	l := guestmem.Latest{Missing: missing}
	if _, err := l.Acquire(); !errors.Is(err, missing) {
		t.Fatalf("Acquire before Set: %v, want %v", err, missing)
	}
	released := 0
	mk := func() *guestmem.Table {
		tbl, err := guestmem.NewTableFunc([]guestmem.Region{{Size: 4096, Host: make([]byte, 4096)}}, func() { released++ })
		if err != nil {
			t.Fatal(err)
		}
		return tbl
	}
	first, second := mk(), mk()
	l.Set(first)
	got, err := l.Acquire()
	if err != nil || got != first {
		t.Fatalf("Acquire after Set: %p, %v; want the first table", got, err)
	}
	l.Set(second) // first still held by got
	if released != 0 {
		t.Fatalf("a table held by a caller was released")
	}
	got.Release()
	if released != 1 {
		t.Fatalf("the replaced table was not released once its caller let go (%d releases)", released)
	}
	l.Set(nil)
	if released != 2 {
		t.Fatalf("Set(nil) did not release the latest table (%d releases)", released)
	}
	if _, err := l.Acquire(); !errors.Is(err, missing) {
		t.Fatalf("Acquire after Set(nil): %v, want %v", err, missing)
	}
	var zero guestmem.Latest
	if _, err := zero.Acquire(); err == nil {
		t.Fatal("a zero Latest acquired a table")
	}
}
