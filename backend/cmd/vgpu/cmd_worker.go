package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/engine"
	"github.com/vgpu-project/vgpu/backend/server"
	"github.com/vgpu-project/vgpu/backend/session"
	"github.com/vgpu-project/vgpu/backend/worker"
	"github.com/vgpu-project/vgpu/protocol"
)

func init() {
	register("worker", command{summary: "one VM's GPU work in its own process (started by 'vgpu serve --isolate vm')", hidden: true, run: cmdWorker})
}

// workerArgs are the serve options a worker needs, as command-line flags.
func workerArgs(f serveFlags, vm string) []string {
	args := []string{"worker", "--vm", vm, "--device", f.device, "--sim-devices", fmt.Sprint(f.simDevices), "--sim-mem", f.simMem,
		"--gpus", f.gpus, "--mem-limit", f.memLimit, "--engine", f.engine, "--log-level", f.logLevel, "--host-func-timeout", f.hostFuncTimeout.String()}
	if f.logJSON {
		args = append(args, "--log-json")
	}
	if f.allowUnprivileged {
		args = append(args, "--allow-unprivileged-segments")
	}
	return args
}

func cmdWorker(args []string) int {
	var f serveFlags
	var vm string
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.StringVar(&vm, "vm", "", "the VM this worker serves (for logs)")
	fs.StringVar(&f.device, "device", "auto", "cuda, sim or auto")
	fs.IntVar(&f.simDevices, "sim-devices", 1, "simulated devices")
	fs.StringVar(&f.simMem, "sim-mem", "80G", "memory per simulated device")
	fs.StringVar(&f.gpus, "gpus", "", "host GPUs in guest order")
	fs.StringVar(&f.memLimit, "mem-limit", "0", "device memory cap of the VM")
	fs.StringVar(&f.engine, "engine", "auto", "memcpy engine")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level")
	fs.BoolVar(&f.logJSON, "log-json", false, "log JSON lines")
	fs.BoolVar(&f.allowUnprivileged, "allow-unprivileged-segments", false, "testing only")
	fs.DurationVar(&f.hostFuncTimeout, "host-func-timeout", session.DefaultHostFuncTimeout, "host-function deadline")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "vgpu-worker", Level: hclog.LevelFromString(f.logLevel), JSONFormat: f.logJSON, Output: os.Stderr}).
		With("vm", vm, "pid", os.Getpid())
	ctrl := os.NewFile(3, "vgpu-control")
	if ctrl == nil {
		fmt.Fprintln(os.Stderr, "vgpu worker: no control socket on fd 3 (this command is started by 'vgpu serve --isolate vm')")
		return 2
	}
	if err := runWorker(f, ctrl, log); err != nil {
		log.Error("worker failed", "err", err)
		return 1
	}
	return 0
}

func runWorker(f serveFlags, ctrl *os.File, log hclog.Logger) error {
	gpus, err := parseGPUs(f.gpus)
	if err != nil {
		return err
	}
	memLimit, err := parseBytes(f.memLimit)
	if err != nil {
		return err
	}
	eng, err := engine.ParseKind(f.engine)
	if err != nil {
		return err
	}
	if f.device == "auto" {
		f.device = "auto-quiet"
	}
	drv, err := openDriver(f, log)
	if err != nil {
		return err
	}
	defer drv.Close()
	srv, err := server.New(server.Config{
		Driver: drv, GPUs: gpus, MemLimit: memLimit, Engine: eng, Limits: protocol.DefaultLimits,
		AllowUnprivilegedSegments: f.allowUnprivileged, Version: version, Logger: log,
		OnStickyError:   func(err error) { worker.Poisoned(ctrl, err) },
		HostFuncTimeout: f.hostFuncTimeout,
	})
	if err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Info("worker ready", "device", drv.Kind())
	err = worker.Run(ctx, ctrl, srv, log)
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}
