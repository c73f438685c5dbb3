package main

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestProcaddrTableCurrent regenerates tables/procaddr.tbl from the probe
// output it names and fails when the checked-in table differs.
func TestProcaddrTableCurrent(t *testing.T) {
	have, err := os.ReadFile(filepath.Join("..", "tables", procaddrTable))
	if err != nil {
		t.Fatal(err)
	}
	var source string
	for _, line := range strings.Split(string(have), "\n") {
		if s, ok := strings.CutPrefix(line, "# source: "); ok {
			source = s
		}
	}
	if source == "" {
		t.Fatalf("%s names no '# source:' probe file", procaddrTable)
	}
	data, err := os.ReadFile(filepath.Join("..", "..", source))
	if err != nil {
		t.Fatal(err)
	}
	p, err := parseProbe(data)
	if err != nil {
		t.Fatal(err)
	}
	if want := procaddrText(p, source); !bytes.Equal(have, want) {
		t.Fatalf("%s is stale: run go run ./guest-lib/gen -procaddr %s", procaddrTable, source)
	}
}

// TestProcaddrRoundTrip: the table says what the probe says.
func TestProcaddrRoundTrip(t *testing.T) {
	in := "# driver 13000, cuInit 0\n" +
		"cuMemAlloc 0 1000 -2\ncuMemAlloc 0 2000 cuMemAlloc\ncuMemAlloc 0 3020 cuMemAlloc_v2\ncuMemAlloc 0 13010 !1\n" +
		"cuMemAlloc 2 1000 -2\ncuMemAlloc 2 2000 cuMemAlloc\ncuMemAlloc 2 3020 cuMemAlloc_v2\ncuMemAlloc 2 13010 !1\n" +
		"cuLaunchKernel 0 1000 -2\ncuLaunchKernel 0 4000 cuLaunchKernel\n" +
		"cuLaunchKernel 2 1000 -2\ncuLaunchKernel 2 7000 cuLaunchKernel_ptsz\n" +
		"cudbgMain 0 1000 -1\ncudbgMain 2 1000 -1\n"
	p, err := parseProbe([]byte(in))
	if err != nil {
		t.Fatal(err)
	}
	text := procaddrText(p, "x")
	for _, want := range []string{
		"driver 13000\n",
		"cuLaunchKernel                               0 4000:cuLaunchKernel\n",
		"cuLaunchKernel                               2 7000:cuLaunchKernel_ptsz\n",
		"cuMemAlloc                                   * 2000:cuMemAlloc 3020:cuMemAlloc_v2\n",
		"cudbgMain                                    * 1000:-1\n",
	} {
		if !strings.Contains(string(text), want) {
			t.Errorf("table lacks %q:\n%s", want, text)
		}
	}
	q, err := parseProcaddr(text)
	if err != nil {
		t.Fatal(err)
	}
	if q.Driver != p.Driver || len(q.Names) != len(p.Names) {
		t.Fatalf("round trip: %+v != %+v", q, p)
	}
	for i := range p.Names {
		for f := 0; f < 2; f++ {
			if !sameSteps(p.Names[i].Steps[f], q.Names[i].Steps[f]) {
				t.Errorf("%s flags %d: %v != %v", p.Names[i].Name, f, q.Names[i].Steps[f], p.Names[i].Steps[f])
			}
		}
	}
	lib := &Table{Rows: []Row{{Name: "cuMemAlloc"}, {Name: "cuMemAlloc_v2"}, {Name: "cuLaunchKernel"}}}
	if _, err := procaddrC(q, lib); err == nil {
		t.Error("procaddrC accepted cuLaunchKernel_ptsz, which the library does not export")
	}
	lib.Rows = append(lib.Rows, Row{Name: "cuLaunchKernel_ptsz"})
	c, err := procaddrC(q, lib)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"const int vgpu_procaddr_driver_version = 13000;",
		`{"cuMemAlloc", {2, (const struct vgpu_pa_step[]){{2000, 0, cuMemAlloc}, {3020, 0, cuMemAlloc_v2}}}, {0, 0}},`,
		`{"cudbgMain", {1, (const struct vgpu_pa_step[]){{1000, 1, 0}}}, {0, 0}},`,
	} {
		if !strings.Contains(string(c), want) {
			t.Errorf("C table lacks %q:\n%s", want, c)
		}
	}
}

func TestParseProbeRejects(t *testing.T) {
	for name, in := range map[string]string{
		"no driver": "cuMemAlloc 0 2000 cuMemAlloc\n",
		"fields":    "# driver 13000\ncuMemAlloc 0 2000\n",
		"flags":     "# driver 13000\ncuMemAlloc 1 2000 cuMemAlloc\n",
		"version":   "# driver 13000\ncuMemAlloc 0 x cuMemAlloc\n",
		"result":    "# driver 13000\ncuMemAlloc 0 2000 cu-Mem\n",
		"order":     "# driver 13000\ncuMemAlloc 0 3020 cuMemAlloc_v2\ncuMemAlloc 0 2000 cuMemAlloc\n",
		"empty":     "# driver 13000\n",
	} {
		if _, err := parseProbe([]byte(in)); err == nil {
			t.Errorf("%s: accepted %q", name, in)
		}
	}
}

func TestParseProcaddrRejects(t *testing.T) {
	for name, in := range map[string]string{
		"no driver": "cuA * 2000:cuA\n",
		"no steps":  "driver 13000\ncuA *\n",
		"flags":     "driver 13000\ncuA 1 2000:cuA\n",
		"step":      "driver 13000\ncuA * 2000\n",
		"status":    "driver 13000\ncuA * 2000:-3\n",
		"order":     "driver 13000\ncuA * 3000:cuA 2000:cuA\n",
		"twice":     "driver 13000\ncuA * 2000:cuA\ncuA 0 2000:cuA\n",
		"half":      "driver 13000\ncuA 0 2000:cuA\n",
	} {
		if _, err := parseProcaddr([]byte(in)); err == nil {
			t.Errorf("%s: accepted %q", name, in)
		}
	}
}
