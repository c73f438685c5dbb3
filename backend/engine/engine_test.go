package engine

import (
	"testing"

	"github.com/vgpu-project/vgpu/backend/guestmem"
)

func TestCoalesce(t *testing.T) {
	r := &guestmem.Region{Size: 1 << 20, Host: make([]byte, 1<<20)}
	r2 := &guestmem.Region{Size: 1 << 20, Host: make([]byte, 1<<20)}
	p := func(rg *guestmem.Region, off, n uint64) Piece {
		return Piece{Host: rg.Host[off : off+n], Region: rg, Off: off}
	}
	got := Coalesce([]Piece{p(r, 0, 4096), p(r, 4096, 4096), p(r, 16384, 4096), p(r2, 20480, 4096), p(r2, 24576, 100), {Host: make([]byte, 8)}})
	want := []struct{ off, n uint64 }{{0, 8192}, {16384, 4096}, {20480, 4196}, {0, 8}}
	if len(got) != len(want) {
		t.Fatalf("%d pieces, want %d", len(got), len(want))
	}
	for i, w := range want {
		if got[i].Off != w.off || uint64(len(got[i].Host)) != w.n {
			t.Fatalf("piece %d: off %d len %d, want %d %d", i, got[i].Off, len(got[i].Host), w.off, w.n)
		}
	}
}

func TestChoose(t *testing.T) {
	for _, tc := range []struct {
		count     int
		total     uint64
		canGather bool
		want      Kind
	}{
		{65536, 256 << 20, true, Gather},
		{65536, 256 << 20, false, Direct},
		{128, 256 << 20, true, Direct}, // 2 MiB runs
		{2, 8192, true, Direct},
	} {
		if got := Choose(tc.count, tc.total, tc.canGather); got != tc.want {
			t.Errorf("Choose(%d, %d, %v) = %v, want %v", tc.count, tc.total, tc.canGather, got, tc.want)
		}
	}
	for _, s := range []string{"auto", "runs", "direct", "gather", "staging"} {
		if _, err := ParseKind(s); err != nil {
			t.Error(err)
		}
	}
	if _, err := ParseKind("warp"); err == nil {
		t.Error("ParseKind accepted nonsense")
	}
}
