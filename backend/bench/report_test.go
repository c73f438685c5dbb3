package bench

import (
	"bytes"
	"image/png"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func results(paths ...string) []Result {
	var rs []Result
	for _, p := range paths {
		for _, dir := range []string{"H2D", "D2H"} {
			for _, size := range []uint64{4096, 1 << 20, 1 << 26} {
				rs = append(rs, Result{Path: p, Dir: dir, Size: size, GBps: float64(size) / (1 << 22), BackendGBps: float64(size) / (1 << 21)})
			}
		}
	}
	return rs
}

func TestPlotSeries(t *testing.T) {
	native := Set{Label: "native", Results: results("native-pageable", "native-pinned")}
	guest := Set{Label: "guest", Results: results("pinned", "pageable-auto", "segments-runs", "segments-gather", "inline")}
	host := Set{Label: "hostmode", Results: results("pinned", "pageable-auto")}
	for _, tc := range []struct {
		name string
		sets []Set
		want []string
	}{
		{"native and guest", []Set{native, guest}, []string{
			"native pinned", "native pageable", "guest pinned", "guest pageable", "guest pinned, backend side", "guest pageable, backend side"}},
		{"three sets: the backend side gives way", []Set{native, guest, host}, []string{
			"native pinned", "native pageable", "guest pinned", "guest pageable", "hostmode pinned", "hostmode pageable"}},
		{"guest alone", []Set{guest}, []string{"guest pinned", "guest pageable", "guest pinned, backend side", "guest pageable, backend side"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var got []string
			for _, s := range plotSeries(tc.sets) {
				got = append(got, s.name)
			}
			if strings.Join(got, "|") != strings.Join(tc.want, "|") {
				t.Fatalf("series %q, want %q", got, tc.want)
			}
		})
	}
}

func TestPlotWritesPNG(t *testing.T) {
	out := filepath.Join(t.TempDir(), "m.png")
	if err := Plot(out, "memcpy", []Set{{Label: "native", Results: results("native-pageable", "native-pinned")}, {Label: "guest", Results: results("pinned", "pageable-auto")}}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	img, err := png.Decode(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	if w, h := img.Bounds().Dx(), img.Bounds().Dy(); w <= h {
		t.Fatalf("image %dx%d: want the two panels side by side", w, h)
	}
	if err := Plot(out, "", []Set{{Label: "guest", Results: results("inline")}}); err == nil {
		t.Fatal("a plot with nothing to draw succeeded")
	}
}
