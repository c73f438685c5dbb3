// Command simserve serves the vgpu protocol on a unix socket with the
// simulated device, for the guest library's host-mode tests. It is the
// same server `vgpu serve --device sim --unix PATH` runs; tests/run.sh uses
// that subcommand when the vgpu binary has it and falls back to this.
//
//	go run ./guest-lib/tests/simserve -unix /tmp/vgpu.sock
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/device/sim"
	"github.com/vgpu-project/vgpu/backend/hostmode"
	"github.com/vgpu-project/vgpu/backend/server"
	"github.com/vgpu-project/vgpu/protocol"
)

func main() {
	path := flag.String("unix", "", "unix socket path")
	devices := flag.Int("devices", 1, "simulated devices")
	mem := flag.Uint64("mem", 16<<30, "device memory per device, bytes")
	memLimit := flag.Uint64("mem-limit", 0, "device memory cap per VM, bytes (vgpu serve --mem-limit; 0: none)")
	verbose := flag.Bool("v", false, "log at debug level")
	flag.Parse()
	if *path == "" {
		fmt.Fprintln(os.Stderr, "simserve: -unix PATH is required")
		os.Exit(2)
	}
	level := hclog.Warn
	if *verbose {
		level = hclog.Debug
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "simserve", Level: level, Output: os.Stderr})
	drv, err := sim.New(sim.Config{Devices: *devices, MemBytes: *mem, Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "simserve:", err)
		os.Exit(1)
	}
	srv, err := server.New(server.Config{Driver: drv, MemLimit: *memLimit, Limits: protocol.DefaultLimits, Version: "simserve", Logger: log})
	if err != nil {
		fmt.Fprintln(os.Stderr, "simserve:", err)
		os.Exit(1)
	}
	ln, err := hostmode.Listen(*path, hostmode.Options{})
	if err != nil {
		fmt.Fprintln(os.Stderr, "simserve:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	if err := srv.Serve(ctx, ln); err != nil {
		fmt.Fprintln(os.Stderr, "simserve:", err)
		os.Exit(1)
	}
}
