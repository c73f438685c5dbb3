package main

// cuGetProcAddress facts: what the real driver resolves each driver name to,
// per flags and CUDA version.
//
// Input: the probe's output (scripts/probe/procaddr-probe.c, run by
// scripts/gpu-probe.sh on a GPU machine), one line per change point:
//
//	name flags version symbol|-status|!result
//
// `go run ./guest-lib/gen -procaddr PROBE.txt` turns it into
// guest-lib/tables/procaddr.tbl (below), the checked-in fact table;
// the ordinary generation turns that table into
// generated/libcuda.so.1.procaddr.c, which cuGetProcAddress resolves by.

import (
	"bytes"
	"fmt"
	"sort"
	"strconv"
	"strings"
)

// procaddrTable is the file name of the fact table under tables/.
const procaddrTable = "procaddr.tbl"

// Step is one change point: from Version on, a name resolves to Symbol,
// or (Symbol empty) to the status Status (1 SYMBOL_NOT_FOUND,
// 2 VERSION_NOT_SUFFICIENT).
type Step struct {
	Version int
	Symbol  string
	Status  int
}

func (s Step) String() string {
	if s.Symbol != "" {
		return fmt.Sprintf("%d:%s", s.Version, s.Symbol)
	}
	return fmt.Sprintf("%d:-%d", s.Version, s.Status)
}

// ProcName is every step of one base name: Steps[0] for flags 0 (and 1),
// Steps[1] for flags 2 (per-thread default stream).
type ProcName struct {
	Name  string
	Steps [2][]Step
}

// Procaddr is the whole fact table.
type Procaddr struct {
	Driver int // the probed driver's cuDriverGetVersion
	Names  []ProcName
}

func parseStep(field string) (Step, error) {
	v, sym, ok := strings.Cut(field, ":")
	if !ok {
		sym = ""
	}
	ver, err := strconv.Atoi(v)
	if err != nil || ver < 0 {
		return Step{}, fmt.Errorf("step %q: bad version", field)
	}
	return parseResult(ver, sym)
}

func parseResult(ver int, sym string) (Step, error) {
	switch {
	case sym == "-1":
		return Step{Version: ver, Status: 1}, nil
	case sym == "-2":
		return Step{Version: ver, Status: 2}, nil
	case validName(sym):
		return Step{Version: ver, Symbol: sym}, nil
	}
	return Step{}, fmt.Errorf("result %q is neither a symbol nor -1/-2", sym)
}

func validName(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if !(c == '_' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9') {
			return false
		}
	}
	return true
}

// parseProbe reads procaddr-probe.c's output. Lines answered with a
// CUresult (!N: a version above the probed driver's) are dropped: the
// library answers those from the version it reports itself. A leading
// VERSION_NOT_SUFFICIENT step is implicit and dropped too.
func parseProbe(data []byte) (*Procaddr, error) {
	p := &Procaddr{}
	idx := map[string]int{}
	for i, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if f[0] == "#" {
			if len(f) >= 3 && f[1] == "driver" {
				v, err := strconv.Atoi(strings.TrimSuffix(f[2], ","))
				if err != nil {
					return nil, fmt.Errorf("probe:%d: driver version %q: %w", i+1, f[2], err)
				}
				p.Driver = v
			}
			continue
		}
		if len(f) != 4 {
			return nil, fmt.Errorf("probe:%d: want 4 fields (name flags version result), have %d", i+1, len(f))
		}
		if !validName(f[0]) {
			return nil, fmt.Errorf("probe:%d: bad name %q", i+1, f[0])
		}
		var slot int
		switch f[1] {
		case "0":
		case "2":
			slot = 1
		default:
			return nil, fmt.Errorf("probe:%d: flags %q: want 0 or 2", i+1, f[1])
		}
		ver, err := strconv.Atoi(f[2])
		if err != nil {
			return nil, fmt.Errorf("probe:%d: version %q: %w", i+1, f[2], err)
		}
		if strings.HasPrefix(f[3], "!") {
			continue
		}
		st, err := parseResult(ver, f[3])
		if err != nil {
			return nil, fmt.Errorf("probe:%d: %w", i+1, err)
		}
		j, ok := idx[f[0]]
		if !ok {
			j = len(p.Names)
			idx[f[0]] = j
			p.Names = append(p.Names, ProcName{Name: f[0]})
		}
		steps := &p.Names[j].Steps[slot]
		if len(*steps) == 0 && st.Status == 2 && st.Symbol == "" {
			continue
		}
		if n := len(*steps); n > 0 && (*steps)[n-1].Version >= ver {
			return nil, fmt.Errorf("probe:%d: %s flags %s: versions out of order", i+1, f[0], f[1])
		}
		*steps = append(*steps, st)
	}
	if p.Driver == 0 {
		return nil, fmt.Errorf("probe: no '# driver N' line")
	}
	if len(p.Names) == 0 {
		return nil, fmt.Errorf("probe: no names")
	}
	sort.Slice(p.Names, func(a, b int) bool { return p.Names[a].Name < p.Names[b].Name })
	return p, nil
}

func sameSteps(a, b []Step) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

const procaddrHeader = `# cuGetProcAddress facts: what the real driver resolves each base name to, by flags
# and CUDA version. Generated from a probe of a real driver; DO NOT EDIT:
#
#   go run ./guest-lib/gen -procaddr bench/results/<run>/procaddr-probe.txt
#
# then ` + "`go run ./guest-lib/gen`" + ` writes generated/libcuda.so.1.procaddr.c from it.
#
#   driver N                  cuDriverGetVersion of the probed driver: the newest CUDA
#                             version this table knows (libcuda.so.1 reports at most this)
#   name  flags  step...      flags: 0 (also 1, which the driver treats alike), 2
#                             (per-thread default stream) or * (both the same)
#                             step: version:symbol (from that version on) or
#                             version:-1 (SYMBOL_NOT_FOUND) / version:-2 (VERSION_NOT_SUFFICIENT);
#                             below the first step: VERSION_NOT_SUFFICIENT.
`

// procaddrText renders the fact table.
func procaddrText(p *Procaddr, source string) []byte {
	var b bytes.Buffer
	b.WriteString(procaddrHeader)
	fmt.Fprintf(&b, "# source: %s\n", source)
	fmt.Fprintf(&b, "driver %d\n", p.Driver)
	row := func(name, flags string, steps []Step) {
		fmt.Fprintf(&b, "%-44s %s", name, flags)
		for _, s := range steps {
			fmt.Fprintf(&b, " %s", s)
		}
		b.WriteByte('\n')
	}
	for _, n := range p.Names {
		if sameSteps(n.Steps[0], n.Steps[1]) {
			row(n.Name, "*", n.Steps[0])
			continue
		}
		row(n.Name, "0", n.Steps[0])
		row(n.Name, "2", n.Steps[1])
	}
	return b.Bytes()
}

// parseProcaddr reads tables/procaddr.tbl.
func parseProcaddr(data []byte) (*Procaddr, error) {
	p := &Procaddr{}
	idx := map[string]int{}
	seen := map[string]bool{}
	for i, line := range strings.Split(string(data), "\n") {
		if j := strings.IndexByte(line, '#'); j >= 0 {
			line = line[:j]
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if f[0] == "driver" {
			if len(f) != 2 {
				return nil, fmt.Errorf("%s:%d: want 'driver N'", procaddrTable, i+1)
			}
			v, err := strconv.Atoi(f[1])
			if err != nil || v <= 0 {
				return nil, fmt.Errorf("%s:%d: driver version %q", procaddrTable, i+1, f[1])
			}
			p.Driver = v
			continue
		}
		if len(f) < 3 {
			return nil, fmt.Errorf("%s:%d: want name, flags and at least one step", procaddrTable, i+1)
		}
		if !validName(f[0]) {
			return nil, fmt.Errorf("%s:%d: bad name %q", procaddrTable, i+1, f[0])
		}
		var slots []int
		switch f[1] {
		case "*":
			slots = []int{0, 1}
		case "0":
			slots = []int{0}
		case "2":
			slots = []int{1}
		default:
			return nil, fmt.Errorf("%s:%d: flags %q: want 0, 2 or *", procaddrTable, i+1, f[1])
		}
		var steps []Step
		for _, field := range f[2:] {
			s, err := parseStep(field)
			if err != nil {
				return nil, fmt.Errorf("%s:%d: %w", procaddrTable, i+1, err)
			}
			if n := len(steps); n > 0 && steps[n-1].Version >= s.Version {
				return nil, fmt.Errorf("%s:%d: steps out of order", procaddrTable, i+1)
			}
			steps = append(steps, s)
		}
		j, ok := idx[f[0]]
		if !ok {
			j = len(p.Names)
			idx[f[0]] = j
			p.Names = append(p.Names, ProcName{Name: f[0]})
		}
		for _, s := range slots {
			key := fmt.Sprintf("%s/%d", f[0], s)
			if seen[key] {
				return nil, fmt.Errorf("%s:%d: %s flags %s listed twice", procaddrTable, i+1, f[0], f[1])
			}
			seen[key] = true
			p.Names[j].Steps[s] = steps
		}
	}
	if p.Driver == 0 {
		return nil, fmt.Errorf("%s: no 'driver N' line", procaddrTable)
	}
	for _, n := range p.Names {
		if !seen[n.Name+"/0"] || !seen[n.Name+"/1"] {
			return nil, fmt.Errorf("%s: %s lacks a row for flags 0 or 2", procaddrTable, n.Name)
		}
	}
	sort.Slice(p.Names, func(a, b int) bool { return p.Names[a].Name < p.Names[b].Name })
	return p, nil
}

// procaddrC renders the resolution table of libcuda.so.1; every symbol
// must be one the library exports (lib).
func procaddrC(p *Procaddr, lib *Table) ([]byte, error) {
	exported := map[string]bool{}
	for _, r := range lib.Rows {
		exported[r.Name] = true
	}
	var b bytes.Buffer
	fmt.Fprintf(&b, "/* Code generated by guest-lib/gen from guest-lib/tables/%s; DO NOT EDIT. */\n", procaddrTable)
	b.WriteString("/* cuGetProcAddress: every driver base name, sorted, with its steps per flags (procaddr.h). */\n")
	b.WriteString("#include \"procaddr.h\"\n\n")
	var syms []string
	have := map[string]bool{}
	for _, n := range p.Names {
		for _, steps := range n.Steps {
			for _, s := range steps {
				if s.Symbol == "" || have[s.Symbol] {
					continue
				}
				if !exported[s.Symbol] {
					return nil, fmt.Errorf("%s: %s resolves to %s, which libcuda.so.1.tbl does not export", procaddrTable, n.Name, s.Symbol)
				}
				have[s.Symbol] = true
				syms = append(syms, s.Symbol)
			}
		}
	}
	sort.Strings(syms)
	for _, s := range syms {
		fmt.Fprintf(&b, "extern void %s(void);\n", s)
	}
	fmt.Fprintf(&b, "\nconst int vgpu_procaddr_driver_version = %d;\n\n", p.Driver)
	steps := func(st []Step) string {
		var parts []string
		for _, s := range st {
			if s.Symbol != "" {
				parts = append(parts, fmt.Sprintf("{%d, 0, %s}", s.Version, s.Symbol))
			} else {
				parts = append(parts, fmt.Sprintf("{%d, %d, 0}", s.Version, s.Status))
			}
		}
		return fmt.Sprintf("%d, (const struct vgpu_pa_step[]){%s}", len(st), strings.Join(parts, ", "))
	}
	b.WriteString("const struct vgpu_pa_name vgpu_procaddr_names[] = {\n")
	for _, n := range p.Names {
		if sameSteps(n.Steps[0], n.Steps[1]) {
			fmt.Fprintf(&b, "\t{\"%s\", {%s}, {0, 0}},\n", n.Name, steps(n.Steps[0]))
		} else {
			fmt.Fprintf(&b, "\t{\"%s\", {%s}, {%s}},\n", n.Name, steps(n.Steps[0]), steps(n.Steps[1]))
		}
	}
	b.WriteString("};\n\nconst unsigned vgpu_procaddr_count = sizeof vgpu_procaddr_names / sizeof vgpu_procaddr_names[0];\n")
	return b.Bytes(), nil
}
