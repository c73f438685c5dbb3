package main

import (
	"context"
	"os"
	"path/filepath"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/engine"
	"github.com/vgpu-project/vgpu/backend/serveconf"
	"github.com/vgpu-project/vgpu/backend/server"
	"github.com/vgpu-project/vgpu/backend/vm"
	"github.com/vgpu-project/vgpu/backend/worker"
	"github.com/vgpu-project/vgpu/protocol"
)

func init() {
	register("vm", command{summary: "test guest: vm image (build it), vm run [options] -- COMMAND, vm domain (as a libvirt domain)", run: cmdVM})
	register("attach", command{summary: "hot-plug a vGPU into a running QEMU through QMP or libvirt", run: func(a []string) int { return vmCLI().Attach(a) }})
	register("qemu-args", command{summary: "print the QEMU options a VM needs for a vGPU", run: func(a []string) int { return vmCLI().QemuArgs(a) }})
}

func vmCLI() vm.CLI {
	level := hclog.Warn
	if l := os.Getenv("VGPU_LOG_LEVEL"); l != "" {
		level = hclog.LevelFromString(l)
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "vgpu", Level: level, Output: os.Stderr})
	return vm.CLI{
		Logger: log, StartBackend: startInProcessBackend,
		DefaultSocket: func() (string, error) { return configDefault(serveconf.KeyVhostUserSocket, "") },
		VMSocket:      serveconf.VMSocket,
	}
}

func cmdVM(args []string) int {
	if len(args) == 0 {
		os.Stderr.WriteString("usage: vgpu vm image [options] | vgpu vm run [options] -- COMMAND... | vgpu vm domain [options] -- COMMAND...\n")
		return 2
	}
	c := vmCLI()
	switch args[0] {
	case "image":
		return c.VMImage(args[1:])
	case "run":
		return c.VMRun(args[1:])
	case "domain":
		return c.VMDomain(args[1:])
	}
	os.Stderr.WriteString("vgpu vm: unknown subcommand " + args[0] + " (image, run, domain)\n")
	return 2
}

// startInProcessBackend serves a vGPU for `vgpu vm run` without --vgpu: the
// GPU if there is one, else the simulated device (with its banner), with a
// worker process per guest process as `vgpu serve` does by default (so a
// program's device printf reaches its own output).
// VGPU_DEVICE=cuda|sim|auto and VGPU_ISOLATE=process|vm|none override.
func startInProcessBackend(ctx context.Context, log hclog.Logger) (string, func(), error) {
	dir, err := os.MkdirTemp("", "vgpu-vm-")
	if err != nil {
		return "", nil, err
	}
	f := serveFlags{device: "auto", simDevices: 1, simMem: "16G", memLimit: "0", engine: "auto", logLevel: "warn",
		isolate: "process", pool: 1, maxProcesses: worker.DefaultMaxPerVM}
	if d := os.Getenv("VGPU_DEVICE"); d != "" {
		f.device = d
	}
	if i := os.Getenv("VGPU_ISOLATE"); i != "" {
		f.isolate = i
	}
	drv, err := openDriver(f, log)
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	cfg := server.Config{Driver: drv, Engine: engine.Auto, Limits: protocol.DefaultLimits, Version: version, Logger: log}
	mgr, err := isolate(f, drv, &cfg, log)
	if err != nil {
		drv.Close()
		os.RemoveAll(dir)
		return "", nil, err
	}
	closeMgr := func() {
		if mgr != nil {
			mgr.Close()
		}
	}
	srv, err := server.New(cfg)
	if err != nil {
		closeMgr()
		drv.Close()
		os.RemoveAll(dir)
		return "", nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	sock := filepath.Join(dir, "vgpu.sock")
	errc := make(chan error, 1)
	if _, err := serveVhostUser(ctx, srv, sock, 3, false, log, errc); err != nil {
		cancel()
		closeMgr()
		drv.Close()
		os.RemoveAll(dir)
		return "", nil, err
	}
	stop := func() {
		cancel()
		closeMgr()
		drv.Close()
		os.RemoveAll(dir)
	}
	return sock, stop, nil
}
