package main

import (
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/vgpu-project/vgpu/backend/serveconf"
	"github.com/vgpu-project/vgpu/backend/server"
)

func init() {
	register("status", command{summary: "show a running backend's devices, VMs, sessions and counters", run: cmdStatus})
}

func cmdStatus(args []string) int {
	fs := flag.NewFlagSet("status", flag.ContinueOnError)
	sock := fs.String("status-socket", os.Getenv("VGPU_STATUS_SOCKET"), "the backend's status socket (vgpu serve --status-socket; default $VGPU_STATUS_SOCKET, else status-socket in "+serveconf.DefaultPath+", else "+serveconf.DefaultStatusSocket+")")
	asJSON := fs.Bool("json", false, "print the raw JSON")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *sock == "" {
		p, err := configDefault(serveconf.KeyStatusSocket, serveconf.DefaultStatusSocket)
		if err != nil {
			fmt.Fprintf(os.Stderr, "vgpu status: %v\n", err)
			return 2
		}
		*sock = p
	}
	st, err := server.ReadStatus(*sock, 5*time.Second)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vgpu status: %v\n", err)
		return 1
	}
	if *asJSON {
		enc := json.NewEncoder(os.Stdout)
		enc.SetIndent("", "  ")
		_ = enc.Encode(st)
		return 0
	}
	printStatus(st)
	return 0
}

func mib(b uint64) string { return fmt.Sprintf("%d MiB", b>>20) }

func printStatus(st *server.Status) {
	fmt.Printf("backend: %s devices, CUDA %d, up %s\n", st.DeviceKind, st.DriverVersion, st.Uptime)
	if st.DeviceKind == "sim" {
		fmt.Println("  SIMULATED: kernels are validated but NOT executed")
	}
	fmt.Println("\ndevices (guest ordinal -> host ordinal):")
	for _, d := range st.Devices {
		fmt.Printf("  %d -> %d  %s  %s free of %s, %s allocated through vgpu (%d allocations), %d launches",
			d.GuestOrdinal, d.HostOrdinal, d.Name, mib(d.MemFree), mib(d.MemTotal), mib(d.MemUsedByVGPU), d.Allocations, d.Launches)
		if d.LaunchesSkipped > 0 {
			fmt.Printf(" (%d not executed)", d.LaunchesSkipped)
		}
		fmt.Println()
	}
	fmt.Println("\nVMs:")
	if len(st.VMs) == 0 {
		fmt.Println("  none")
	}
	for _, v := range st.VMs {
		limit := "no cap"
		if v.MemLimit > 0 {
			limit = "cap " + mib(v.MemLimit)
		}
		fmt.Printf("  %s  %d sessions, %s device memory (%s)\n", v.VM, v.Sessions, mib(v.MemUsed), limit)
	}
	fmt.Println("\nsessions:")
	if len(st.Sessions) == 0 {
		fmt.Println("  none")
	}
	for _, s := range st.Sessions {
		fmt.Printf("  #%d  %s  %s  since %s\n", s.ID, s.VM, s.Peer, s.Started)
	}
	fmt.Printf("\ncalls (%d sessions so far, %d bad frames, %d unknown opcodes, %d deferred errors):\n",
		st.Stats.TotalSessions, st.Stats.BadFrames, st.Stats.UnknownOps, st.Stats.DeferredErrors)
	names := make([]string, 0, len(st.Stats.Ops))
	for n := range st.Stats.Ops {
		names = append(names, n)
	}
	sort.Strings(names)
	for _, n := range names {
		o := st.Stats.Ops[n]
		fmt.Printf("  %-24s %10d calls %8d errors %8.2f us avg\n", n, o.Calls, o.Errors, float64(o.Nanos)/float64(max(o.Calls, 1))/1000)
	}
	fmt.Printf("\ncopied: %s host->device, %s device->host\n", mib(st.Stats.BytesHtoD), mib(st.Stats.BytesDtoH))
	if st.Fronts != nil {
		b, _ := json.MarshalIndent(st.Fronts, "  ", "  ")
		fmt.Printf("\nvgpu front processes (--front-socket):\n  %s\n", b)
	}
	if st.Workers != nil {
		b, _ := json.MarshalIndent(st.Workers, "  ", "  ")
		fmt.Printf("\nworker processes (their counters are included above):\n  %s\n", b)
	}
}
