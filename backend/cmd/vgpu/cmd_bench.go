package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/vgpu-project/vgpu/backend/bench"
)

func init() {
	register("bench", command{summary: "measure memcpy paths, call latency and process start (memcpy | calls | start | plot)", run: cmdBench})
}

func cmdBench(args []string) int {
	if len(args) == 0 {
		fmt.Fprintln(os.Stderr, "usage: vgpu bench memcpy|calls|start|plot [options]  (-h for each)")
		return 2
	}
	switch args[0] {
	case "memcpy":
		return benchMemcpy(args[1:])
	case "calls":
		return benchCalls(args[1:])
	case "start":
		return benchStart(args[1:])
	case "plot":
		return benchPlot(args[1:])
	}
	fmt.Fprintf(os.Stderr, "vgpu bench: unknown benchmark %q (memcpy, calls, start, plot)\n", args[0])
	return 2
}

func openBenchDriver(native bool, lib string) (*bench.Driver, int) {
	d, err := bench.Open(lib)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vgpu bench: %v\n", err)
		return nil, 1
	}
	if native && d.IsVGPU() {
		fmt.Fprintf(os.Stderr, "vgpu bench: --native but %s is vgpu's library; point --lib at NVIDIA's libcuda.so.1\n", d.Library)
		return nil, 1
	}
	if !native && !d.IsVGPU() {
		fmt.Fprintf(os.Stderr, "vgpu bench: %s is not vgpu's library (run in a guest with vgpu's libraries, or pass --native)\n", d.Library)
		return nil, 1
	}
	return d, 0
}

func benchMemcpy(args []string) int {
	fs := flag.NewFlagSet("vgpu bench memcpy", flag.ContinueOnError)
	native := fs.Bool("native", false, "measure NVIDIA's driver on this host (the baseline)")
	lib := fs.String("lib", "", "libcuda.so.1 to load (default: the dynamic loader's choice)")
	maxSize := fs.String("max-size", "1G", "largest copy (sizes go 4K, 16K, ... up to it)")
	minTime := fs.Duration("min-time", 300*time.Millisecond, "time per size and direction")
	maxIter := fs.Int("max-iter", 1000, "most copies per size and direction")
	paths := fs.String("paths", "", "comma-separated paths to run (default: all the library offers)")
	csvPath := fs.String("csv", "", "write results as CSV here")
	pngPath := fs.String("png", "", "write a plot (PNG) here")
	machine := fs.String("machine", "", "machine label for the CSV (default: device name)")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	max, err := parseBytes(*maxSize) // cmd_serve.go
	if err == nil && max == 0 {
		err = fmt.Errorf("bad size %q (want e.g. 4096, 64K, 16M, 1G)", *maxSize)
	}
	if err != nil {
		fmt.Fprintf(os.Stderr, "vgpu bench memcpy: --max-size: %v\n", err)
		return 2
	}
	d, rc := openBenchDriver(*native, *lib)
	if d == nil {
		return rc
	}
	if *machine == "" {
		*machine = d.DeviceName()
	}
	fmt.Printf("# vgpu bench memcpy: %s via %s (%s), %s\n", d.DeviceName(), d.Library, map[bool]string{true: "vgpu", false: "native"}[d.IsVGPU()], time.Now().UTC().Format(time.RFC3339))
	opt := bench.MemcpyOptions{Sizes: bench.DefaultSizes(max), MinTime: *minTime, MaxIter: *maxIter}
	if *paths != "" {
		opt.Paths = strings.Split(*paths, ",")
	}
	np := len(opt.Paths)
	if np == 0 {
		np = len(d.Paths())
	}
	n := np * 2 * len(opt.Sizes)
	fmt.Fprintf(os.Stderr, "vgpu bench memcpy: %d measurements (%d paths, 2 directions, %d sizes up to %s), at least %s each: about %s; each line below as it finishes\n",
		n, np, len(opt.Sizes), *maxSize, *minTime, (time.Duration(n) * *minTime).Round(time.Second))
	rs, err := d.Memcpy(opt, func(r bench.Result) {
		fmt.Printf("%-18s %s %12d bytes %8.2f GB/s", r.Path, r.Dir, r.Size, r.GBps)
		if r.BackendGBps > 0 {
			fmt.Printf("  (backend %.2f GB/s)", r.BackendGBps)
		}
		fmt.Println()
	})
	if err != nil {
		fmt.Fprintf(os.Stderr, "vgpu bench memcpy: %v\n", err)
		return 1
	}
	return writeBenchOutputs(*csvPath, *pngPath, *machine, rs)
}

func writeBenchOutputs(csvPath, pngPath, machine string, rs []bench.Result) int {
	if csvPath != "" {
		f, err := os.Create(csvPath)
		if err != nil {
			fmt.Fprintf(os.Stderr, "vgpu bench: %v\n", err)
			return 1
		}
		if err := bench.WriteCSV(f, machine, rs); err != nil {
			fmt.Fprintf(os.Stderr, "vgpu bench: write %s: %v\n", csvPath, err)
			return 1
		}
		f.Close()
	}
	if pngPath != "" {
		if err := bench.Plot(pngPath, "memcpy bandwidth: "+machine, []bench.Set{{Label: plotLabel("memcpy-vgpu.csv", rs), Results: rs}}); err != nil {
			fmt.Fprintf(os.Stderr, "vgpu bench: %v\n", err)
			return 1
		}
	}
	return 0
}

func benchCalls(args []string) int {
	fs := flag.NewFlagSet("vgpu bench calls", flag.ContinueOnError)
	native := fs.Bool("native", false, "measure NVIDIA's driver on this host (the baseline)")
	lib := fs.String("lib", "", "libcuda.so.1 to load")
	minTime := fs.Duration("min-time", time.Second, "time per measurement")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	d, rc := openBenchDriver(*native, *lib)
	if d == nil {
		return rc
	}
	label := map[bool]string{true: "vgpu", false: "native"}[d.IsVGPU()]
	rs, err := d.Calls(*minTime)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vgpu bench calls: %v\n", err)
		return 1
	}
	fmt.Printf("# vgpu bench calls: %s via %s (%s)\n", d.DeviceName(), d.Library, label)
	fmt.Printf("%-8s %-14s %10s %14s %14s\n", "side", "call", "count", "us/call", "backend us")
	for _, r := range rs {
		be := "-"
		if r.BackendUS > 0 {
			be = fmt.Sprintf("%.2f", r.BackendUS)
		}
		fmt.Printf("%-8s %-14s %10d %14.2f %14s\n", label, r.Name, r.Count, r.PerCallUS, be)
	}
	printLayers(label, rs)
	printWaits(label, rs)
	return 0
}

// printWaits prints how the library waited on the rings in each
// measurement (VGPU_STATS=1), per program call and per reply.
func printWaits(label string, rs []bench.CallResult) {
	counted := false
	for _, r := range rs {
		counted = counted || r.Waits != nil
	}
	if !counted {
		return
	}
	fmt.Println("# the library's waits on the rings (VGPU_STATS=1): replies waited for per call, the share the caller slept")
	fmt.Println("# for (its spin ended first), us per reply from request written to reply handed over by the reader thread")
	fmt.Println("# and from hand-over to the caller running, the reader thread's sleeps and the doorbells rung per call,")
	fmt.Println("# the share of replies the caller read from the ring itself (own: no hand-over)")
	fmt.Printf("%-8s %-14s %8s %8s %9s %9s %9s %8s %6s\n", "side", "call", "replies", "asleep", "reply us", "handoff", "rsleeps", "bells", "own")
	for _, r := range rs {
		if w := r.Waits; w != nil {
			fmt.Printf("%-8s %-14s %8.3f %7.0f%% %9.2f %9.2f %9.3f %8.3f %5.0f%%\n", label, r.Name, w.PerCall, 100*w.SleptShare,
				w.ReplyUS, w.HandoffUS, w.ReaderSleeps, w.Bells, 100*w.OwnShare)
		}
	}
}

// printLayers prints the backend's per-layer trace of each measurement
// (vgpu serve --trace), microseconds per program call.
func printLayers(label string, rs []bench.CallResult) {
	traced := false
	for _, r := range rs {
		traced = traced || r.Layers != nil
	}
	if !traced {
		if label == "vgpu" {
			fmt.Println("# no per-layer breakdown: start the backend with --trace (or VGPU_TRACE=1)")
		}
		return
	}
	fmt.Println("# per-layer breakdown, us per call: frames/call, then the backend's layers (read: first byte to whole frame;")
	fmt.Println("# queued: behind earlier frames; validate; handler: translation and the driver call; reply: built and written),")
	fmt.Println("# their sum, and the rest (library, transport both ways, guest emulation)")
	fmt.Printf("%-8s %-14s %8s %8s %8s %8s %8s %8s %9s %9s\n", "side", "call", "frames", "read", "queued", "validate", "handler", "reply", "backend", "rest")
	for _, r := range rs {
		if l := r.Layers; l != nil {
			fmt.Printf("%-8s %-14s %8.3f %8.2f %8.2f %8.2f %8.2f %8.2f %9.2f %9.2f\n", label, r.Name, l.FramesPerCall,
				l.ReadUS, l.QueuedUS, l.ValidateUS, l.HandlerUS, l.ReplyUS, l.BackendUS(), l.RestUS)
		}
	}
}

func benchPlot(args []string) int {
	fs := flag.NewFlagSet("vgpu bench plot", flag.ContinueOnError)
	var inputs multiFlag
	fs.Var(&inputs, "csv", "[LABEL=]FILE: a CSV written by vgpu bench memcpy (repeat); the label defaults to native for native runs, else the file's name without memcpy- and .csv")
	out := fs.String("png", "memcpy.png", "output PNG")
	title := fs.String("title", "memcpy bandwidth", "plot title")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	var sets []bench.Set
	for _, in := range inputs {
		label, p, ok := strings.Cut(in, "=")
		if !ok {
			label, p = "", in
		}
		f, err := os.Open(p)
		if err != nil {
			fmt.Fprintf(os.Stderr, "vgpu bench plot: %v\n", err)
			return 1
		}
		rs, err := bench.ReadCSV(f)
		f.Close()
		if err != nil {
			fmt.Fprintf(os.Stderr, "vgpu bench plot: %s: %v\n", p, err)
			return 1
		}
		if label == "" {
			label = plotLabel(p, rs)
		}
		sets = append(sets, bench.Set{Label: label, Results: rs})
	}
	if err := bench.Plot(*out, *title, sets); err != nil {
		fmt.Fprintf(os.Stderr, "vgpu bench plot: %v\n", err)
		return 1
	}
	return 0
}

// plotLabel names a CSV's results: "native" for a native run, else the
// file name without "memcpy-" and ".csv" (memcpy-guest.csv: "guest").
func plotLabel(path string, rs []bench.Result) string {
	native := len(rs) > 0
	for _, r := range rs {
		native = native && strings.HasPrefix(r.Path, "native-")
	}
	if native {
		return "native"
	}
	return strings.TrimSuffix(strings.TrimPrefix(filepath.Base(path), "memcpy-"), ".csv")
}

type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, ",") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }
