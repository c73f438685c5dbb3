package image

import (
	"os"
	"reflect"
	"testing"
)

// Layouts of k.cu's kernels: saxpy(int, float, const float*, float*),
// withstruct(char, S{double; int; char[7]} (24 bytes, align 8), short, double*).
var wantKernels = map[string][]Param{
	"saxpy":             {{0, 4}, {4, 4}, {8, 8}, {16, 8}},
	"withstruct":        {{0, 1}, {8, 24}, {32, 2}, {40, 8}},
	"_Z6noargsv":        nil,
	"_Z4tmplIdEvPT_S0_": {{0, 8}, {8, 8}},
}

func TestRealImages(t *testing.T) {
	for _, tc := range []struct {
		file    string
		sources []string
		globals map[string]uint64
	}{
		{"k.cubin", []string{"cubin"}, map[string]uint64{"counter": 4, "coef": 64, "table": 400}},
		{"k.ptx", []string{"ptx"}, map[string]uint64{"counter": 4, "coef": 64, "table": 400}},
		{"k.fatbin", nil, map[string]uint64{"counter": 4, "table": 400}},
		{"kc.fatbin", nil, map[string]uint64{"counter": 4, "table": 400}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			b, err := os.ReadFile("testdata/" + tc.file)
			if err != nil {
				t.Fatal(err)
			}
			m, err := Parse(b, KindAuto)
			if err != nil {
				t.Fatal(err)
			}
			for name, want := range wantKernels {
				k, ok := m.Kernels[name]
				if !ok {
					t.Errorf("kernel %s missing (have %v)", name, keys(m.Kernels))
					continue
				}
				if len(k.Params) != len(want) || (len(want) > 0 && !reflect.DeepEqual(k.Params, want)) {
					t.Errorf("%s: params %v, want %v", name, k.Params, want)
				}
			}
			for name, size := range tc.globals {
				g, ok := m.Globals[name]
				if !ok || g.Size != size {
					t.Errorf("global %s: %+v, want size %d (have %v)", name, g, size, keysG(m.Globals))
				}
			}
			if tc.sources != nil && !reflect.DeepEqual(m.Sources, tc.sources) {
				t.Errorf("sources %v", m.Sources)
			}
		})
	}
}

func TestCubinGlobalInit(t *testing.T) {
	b, _ := os.ReadFile("testdata/k.cubin")
	m, err := Parse(b, KindCubin)
	if err != nil {
		t.Fatal(err)
	}
	g := m.Globals["table"]
	if g == nil || len(g.Init) != 400 || g.Init[3] != 0x3f || g.Init[7] != 0x40 { // 1.0f, 2.0f
		t.Fatalf("table's initial bytes not read: %+v", g)
	}
}

// TestRunsOn: which devices can run each fixture, by CUDA's compatibility
// rules (SASS: same major, minor at least the build's; PTX: any later
// device). The H100 is 9.0.
func TestRunsOn(t *testing.T) {
	for _, tc := range []struct {
		file string
		code []Code
		runs map[[2]int]bool
	}{
		{"k.fatbin", []Code{{Arch: 90}, {PTX: true, Arch: 90}}, map[[2]int]bool{{9, 0}: true, {10, 0}: true, {8, 9}: false}},
		{"kc.fatbin", []Code{{Arch: 80}, {PTX: true, Arch: 90}}, map[[2]int]bool{{8, 0}: true, {8, 6}: true, {9, 0}: true, {7, 5}: false}},
		{"k86.fatbin", []Code{{Arch: 86}}, map[[2]int]bool{{8, 6}: true, {8, 9}: true, {8, 0}: false, {9, 0}: false}},
		{"k52ptx.fatbin", []Code{{PTX: true, Arch: 52}}, map[[2]int]bool{{5, 2}: true, {9, 0}: true, {5, 0}: false}},
		{"k.cubin", nil, map[[2]int]bool{{9, 0}: true, {5, 0}: true}}, // no entry list: the loader decides
	} {
		b, err := os.ReadFile("testdata/" + tc.file)
		if err != nil {
			t.Fatal(err)
		}
		m, err := Parse(b, KindAuto)
		if err != nil {
			t.Fatalf("%s: %v", tc.file, err)
		}
		if !reflect.DeepEqual(m.Code, tc.code) {
			t.Errorf("%s: code %+v, want %+v", tc.file, m.Code, tc.code)
		}
		for cc, want := range tc.runs {
			if got := m.RunsOn(cc[0], cc[1]); got != want {
				t.Errorf("%s RunsOn(%d.%d) = %v, want %v", tc.file, cc[0], cc[1], got, want)
			}
		}
	}
}

func keys(m map[string]*Kernel) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func keysG(m map[string]*Global) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func FuzzParse(f *testing.F) {
	for _, n := range []string{"k.cubin", "k.ptx", "k.fatbin", "kc.fatbin", "k86.fatbin", "k52ptx.fatbin"} {
		if b, err := os.ReadFile("testdata/" + n); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(".version 8.0\n.entry x(.param .u64 a[")) // truncated
	f.Fuzz(func(t *testing.T, b []byte) {
		_, _ = Parse(b, KindAuto) // must not panic
	})
}
