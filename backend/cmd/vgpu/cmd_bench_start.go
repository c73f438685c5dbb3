package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"sort"
	"time"

	"github.com/vgpu-project/vgpu/backend/bench"
)

// benchStart measures the start of a guest process: each run is a new
// process (this binary, "vgpu bench start --child") whose first CUDA calls
// are timed; the parent prints the distribution. Against vgpu it shows what
// a new program waits for its worker (a pool's, or one started for it);
// with --native, what the NVIDIA driver itself costs (cuInit, a context).
func benchStart(args []string) int {
	fs := flag.NewFlagSet("vgpu bench start", flag.ContinueOnError)
	n := fs.Int("n", 20, "processes to start, one after another")
	gap := fs.Duration("gap", 500*time.Millisecond, "pause between two processes (lets a pool refill; 0: back to back)")
	lib := fs.String("lib", "", "libcuda.so.1 to load (default: the dynamic loader's)")
	native := fs.Bool("native", false, "label the results native (NVIDIA's driver)")
	label := fs.String("label", "", "label for the result lines (default: vgpu or native)")
	child := fs.Bool("child", false, "internal: measure this process's first calls and print them as JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *child {
		st, err := bench.FirstCall(*lib)
		if err != nil {
			fmt.Fprintf(os.Stderr, "vgpu bench start: %v\n", err)
			return 1
		}
		_ = json.NewEncoder(os.Stdout).Encode(st)
		return 0
	}
	if *label == "" {
		*label = map[bool]string{true: "native", false: "vgpu"}[*native]
	}
	exe, err := os.Executable()
	if err != nil {
		fmt.Fprintf(os.Stderr, "vgpu bench start: %v\n", err)
		return 1
	}
	var runs []bench.StartTimes
	var walls []time.Duration
	for i := 0; i < *n; i++ {
		if i > 0 && *gap > 0 {
			time.Sleep(*gap)
		}
		cmd := exec.Command(exe, "bench", "start", "--child", "--lib", *lib)
		cmd.Stderr = os.Stderr
		t0 := time.Now()
		out, err := cmd.Output()
		wall := time.Since(t0)
		var st bench.StartTimes
		if err == nil {
			err = json.Unmarshal(out, &st)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "vgpu bench start: run %d: %v\n", i, err)
			return 1
		}
		runs = append(runs, st)
		walls = append(walls, wall)
	}
	fmt.Printf("# vgpu bench start: %d processes, %v apart, %s\n", *n, *gap, time.Now().UTC().Format(time.RFC3339))
	fmt.Printf("%-8s %-12s %10s %10s %10s %10s\n", "side", "step", "median", "p90", "min", "max")
	pick := func(name string, f func(bench.StartTimes) time.Duration) {
		var ds []time.Duration
		for _, r := range runs {
			ds = append(ds, f(r))
		}
		printDist(*label, name, ds)
	}
	pick("load", func(r bench.StartTimes) time.Duration { return r.Load })
	pick("cuInit", func(r bench.StartTimes) time.Duration { return r.Init })
	pick("context", func(r bench.StartTimes) time.Duration { return r.Context })
	pick("first-alloc", func(r bench.StartTimes) time.Duration { return r.FirstAlloc })
	pick("first-call", func(r bench.StartTimes) time.Duration { return r.Total })
	pick("first-copy", func(r bench.StartTimes) time.Duration { return r.FirstCopy })
	printDist(*label, "process", walls)
	return 0
}

func printDist(label, name string, ds []time.Duration) {
	sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f ms", float64(d)/1e6) }
	p90 := ds[min(len(ds)-1, len(ds)*9/10)]
	fmt.Printf("%-8s %-12s %10s %10s %10s %10s\n", label, name, ms(ds[len(ds)/2]), ms(p90), ms(ds[0]), ms(ds[len(ds)-1]))
}
