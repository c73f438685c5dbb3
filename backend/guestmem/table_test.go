package guestmem_test

import (
	"errors"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/guestmem"
)

// twoRegions is guest RAM with a hole: [0x0, 0x10000) and [0x20000, 0x28000).
func twoRegions(t testing.TB) *guestmem.Table {
	t.Helper()
	tbl, err := guestmem.FromMemory([]guestmem.Region{
		{GuestPhys: 0x20000, Size: 0x8000, UserAddr: 0x7f0000020000, Host: make([]byte, 0x8000)},
		{GuestPhys: 0, Size: 0x10000, UserAddr: 0x7f0000000000, Host: make([]byte, 0x10000)},
	})
	if err != nil {
		t.Fatal(err)
	}
	return tbl
}

var sliceCases = []struct {
	name string
	gpa  guestmem.GPA
	n    uint64
	ok   bool
}{
	{"start of RAM", 0, 16, true},
	{"end of first region", 0x10000 - 16, 16, true},
	{"crosses into the hole", 0x10000 - 8, 16, false},
	{"in the hole", 0x18000, 1, false},
	{"second region", 0x20000, 0x8000, true},
	{"past the end", 0x28000, 1, false},
	{"wraps around", ^guestmem.GPA(0) - 3, 16, false},
	{"huge length", 0x100, ^uint64(0), false},
	{"empty", 0x100, 0, false},
}

func TestSlice(t *testing.T) {
	tbl := twoRegions(t)
	for _, tc := range sliceCases {
		t.Run(tc.name, func(t *testing.T) {
			b, err := tbl.Slice(tc.gpa, tc.n)
			if tc.ok != (err == nil) {
				t.Fatalf("Slice(%#x, %#x) = %v", tc.gpa, tc.n, err)
			}
			if err != nil && !errors.Is(err, guestmem.ErrOutOfRange) {
				t.Fatalf("error %v is not ErrOutOfRange", err)
			}
			if err == nil && (uint64(len(b)) != tc.n || uint64(cap(b)) != tc.n) {
				t.Fatalf("len %d cap %d, want %d", len(b), cap(b), tc.n)
			}
			if _, off, err := tbl.Locate(tc.gpa, tc.n); tc.ok != (err == nil) || (err == nil && off >= 0x10000) {
				t.Fatalf("Locate = %#x, %v", off, err)
			}
		})
	}
}

func TestUserToGPA(t *testing.T) {
	tbl := twoRegions(t)
	for _, tc := range []struct {
		ua   uint64
		want guestmem.GPA
		ok   bool
	}{
		{0x7f0000000000, 0, true},
		{0x7f0000020010, 0x20010, true},
		{0x7f0000010000, 0, false},
		{0x1000, 0, false},
	} {
		got, err := tbl.UserToGPA(tc.ua)
		if tc.ok != (err == nil) || got != tc.want {
			t.Errorf("UserToGPA(%#x) = %#x, %v", tc.ua, got, err)
		}
	}
}

func TestRefcount(t *testing.T) {
	tbl := twoRegions(t)
	t2, err := tbl.Acquire()
	if err != nil || t2 != tbl {
		t.Fatal(err)
	}
	tbl.Release()
	tbl.Release()
	if err := tbl.Retain(); !errors.Is(err, guestmem.ErrClosed) {
		t.Fatalf("Retain after the last Release = %v", err)
	}
	if _, err := tbl.Acquire(); !errors.Is(err, guestmem.ErrClosed) {
		t.Fatalf("Acquire after the last Release = %v", err)
	}
}

func TestNewTableRefuses(t *testing.T) {
	for _, tc := range []struct {
		name  string
		specs func(fd int) []guestmem.RegionSpec
	}{
		{"beyond the file", func(fd int) []guestmem.RegionSpec {
			return []guestmem.RegionSpec{{GuestPhys: 0, Size: 2 << 20, FD: fd}}
		}},
		{"misaligned offset", func(fd int) []guestmem.RegionSpec {
			return []guestmem.RegionSpec{{GuestPhys: 0, Size: 4096, MmapOffset: 100, FD: fd}}
		}},
		{"zero size", func(fd int) []guestmem.RegionSpec {
			return []guestmem.RegionSpec{{GuestPhys: 0, Size: 0, FD: fd}}
		}},
		{"overlap", func(fd int) []guestmem.RegionSpec {
			fd2, _ := unix.Dup(fd)
			return []guestmem.RegionSpec{{GuestPhys: 0, Size: 8192, FD: fd}, {GuestPhys: 4096, Size: 4096, FD: fd2}}
		}},
		{"wraps", func(fd int) []guestmem.RegionSpec {
			return []guestmem.RegionSpec{{GuestPhys: ^guestmem.GPA(0) - 4095, Size: 8192, FD: fd}}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			fd, err := unix.MemfdCreate("t", unix.MFD_CLOEXEC)
			if err != nil {
				t.Fatal(err)
			}
			unix.Ftruncate(fd, 1<<20)
			if tbl, err := guestmem.NewTable(tc.specs(fd)); err == nil {
				tbl.Release()
				t.Fatal("NewTable accepted it")
			}
			// The fd was closed by NewTable.
			if err := unix.Close(fd); err == nil {
				t.Error("NewTable left the fd open")
			}
		})
	}
}

func TestNewTableMaps(t *testing.T) {
	fd, err := unix.MemfdCreate("t", unix.MFD_CLOEXEC)
	if err != nil {
		t.Fatal(err)
	}
	unix.Ftruncate(fd, 1<<20)
	guest, err := unix.Mmap(fd, 0, 1<<20, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(guest)
	dup, _ := unix.Dup(fd)
	defer unix.Close(fd)
	tbl, err := guestmem.NewTable([]guestmem.RegionSpec{{GuestPhys: 0x100000, Size: 1 << 19, MmapOffset: 1 << 19, FD: dup}})
	if err != nil {
		t.Fatal(err)
	}
	defer tbl.Release()
	copy(guest[1<<19+8:], "shared")
	b, err := tbl.Slice(0x100008, 6)
	if err != nil || string(b) != "shared" {
		t.Fatalf("Slice = %q, %v", b, err)
	}
}

// FuzzSlice checks that every slice handed out lies inside a region and
// that refusals are ErrOutOfRange.
func FuzzSlice(f *testing.F) {
	for _, tc := range sliceCases {
		f.Add(uint64(tc.gpa), tc.n)
	}
	tbl := twoRegions(f)
	f.Fuzz(func(t *testing.T, gpa, n uint64) {
		b, err := tbl.Slice(guestmem.GPA(gpa), n)
		if err != nil {
			if !errors.Is(err, guestmem.ErrOutOfRange) {
				t.Fatal(err)
			}
			return
		}
		end := gpa + n
		ok := false
		for _, r := range tbl.Regions() {
			if gpa >= uint64(r.GuestPhys) && end <= uint64(r.GuestPhys)+r.Size && end > gpa {
				ok = true
			}
		}
		if !ok || uint64(len(b)) != n {
			t.Fatalf("Slice(%#x, %#x) returned %d bytes outside RAM", gpa, n, len(b))
		}
	})
}
