package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
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
	register("worker", command{summary: "one guest process's or one VM's GPU work in its own process (started by 'vgpu serve')", hidden: true, run: cmdWorker})
}

// workerArgs are the serve options a worker needs, as command-line flags.
func workerArgs(f serveFlags, mode worker.Mode, vm string) []string {
	args := []string{"worker", "--mode", mode.String(), "--vm", vm, "--device", f.device, "--sim-devices", fmt.Sprint(f.simDevices), "--sim-mem", f.simMem,
		"--gpus", f.gpus, "--mem-limit", f.memLimit, "--engine", f.engine, "--log-level", f.logLevel, "--host-func-timeout", f.hostFuncTimeout.String(),
		"--call-timeout", f.callTimeout.String(), "--d2h-small", f.d2hSmall}
	if f.logJSON {
		args = append(args, "--log-json")
	}
	if f.allowUnprivileged {
		args = append(args, "--allow-unprivileged-segments")
	}
	if f.trace {
		args = append(args, "--trace")
	}
	if f.ringSpin != 0 {
		args = append(args, "--ring-spin", f.ringSpin.String())
	}
	if f.noGuestRings {
		args = append(args, "--no-guest-rings")
	}
	return args
}

func cmdWorker(args []string) int {
	var f serveFlags
	var vm, modeName string
	fs := flag.NewFlagSet("worker", flag.ContinueOnError)
	fs.StringVar(&modeName, "mode", "vm", "process (one guest process, then exit) or vm (one VM's sessions)")
	fs.StringVar(&vm, "vm", "", "the VM this worker serves (for logs; empty for a process worker)")
	fs.StringVar(&f.device, "device", "auto", "cuda, sim or auto")
	fs.IntVar(&f.simDevices, "sim-devices", 1, "simulated devices")
	fs.StringVar(&f.simMem, "sim-mem", "80G", "memory per simulated device")
	fs.StringVar(&f.gpus, "gpus", "", "host GPUs in guest order")
	fs.StringVar(&f.memLimit, "mem-limit", "0", "device memory cap of the VM")
	fs.StringVar(&f.engine, "engine", "auto", "memcpy engine")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level")
	fs.BoolVar(&f.logJSON, "log-json", false, "log JSON lines")
	fs.BoolVar(&f.allowUnprivileged, "allow-unprivileged-segments", false, "testing only")
	fs.BoolVar(&f.trace, "trace", false, "stamp every request at each layer boundary")
	fs.StringVar(&f.d2hSmall, "d2h-small", "bounce", "small inline device-to-host copies: bounce or sync")
	fs.DurationVar(&f.hostFuncTimeout, "host-func-timeout", session.DefaultHostFuncTimeout, "host-function deadline")
	fs.DurationVar(&f.callTimeout, "call-timeout", session.DefaultCallTimeout, "call deadline (then this worker exits)")
	fs.DurationVar(&f.ringSpin, "ring-spin", 0, "how long the backend's side of a guest's rings polls before it sleeps")
	fs.BoolVar(&f.noGuestRings, "no-guest-rings", false, "do not offer guests rings in their RAM")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	mode, err := worker.ParseMode(modeName)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vgpu worker: %v\n", err)
		return 2
	}
	ctrlFile := os.NewFile(3, "vgpu-control")
	if ctrlFile == nil {
		fmt.Fprintln(os.Stderr, "vgpu worker: no control socket on fd 3 (this command is started by 'vgpu serve')")
		return 2
	}
	// A worker for one guest process owns its fd 1 and 2: what the driver
	// prints there (device printf, asserts) is that process's output. Its
	// own log goes where stderr went.
	logOut := io.Writer(os.Stderr)
	var out *worker.Output
	if mode == worker.PerProcess {
		o, logFile, err := worker.CaptureOutput()
		if err != nil {
			fmt.Fprintf(os.Stderr, "vgpu worker: %v\n", err)
			return 1
		}
		out, logOut = o, logFile
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "vgpu-worker", Level: hclog.LevelFromString(f.logLevel), JSONFormat: f.logJSON, Output: logOut}).
		With("vm", vm, "pid", os.Getpid())
	if out != nil && f.device != "sim" {
		if err := worker.LineBufferStdio(); err != nil {
			log.Warn("device printf may reach the guest only when the worker exits", "err", err)
		}
	}
	// The manager has announced the device (the sim's banner included);
	// the driver of a worker, one per guest process, says only what goes
	// wrong.
	drvLog := hclog.New(&hclog.LoggerOptions{Name: "vgpu-worker", Level: max(hclog.LevelFromString(f.logLevel), hclog.Error), JSONFormat: f.logJSON, Output: logOut}).
		With("vm", vm, "pid", os.Getpid())
	if err := runWorker(f, mode, worker.NewControl(ctrlFile), out, log, drvLog); err != nil {
		log.Error("worker failed", "err", err)
		return 1
	}
	return 0
}

func runWorker(f serveFlags, mode worker.Mode, ctrl *worker.Control, out *worker.Output, log, drvLog hclog.Logger) error {
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
	d2hSmall, err := session.ParseDtoHMode(f.d2hSmall)
	if err != nil {
		return err
	}
	if f.device == "auto" {
		f.device = "auto-quiet"
	}
	drv, err := openDriver(f, drvLog)
	if err != nil {
		return err
	}
	defer drv.Close()
	cfg := server.Config{
		Driver: drv, GPUs: gpus, MemLimit: memLimit, Engine: eng, Limits: protocol.DefaultLimits,
		AllowUnprivilegedSegments: f.allowUnprivileged, Version: version, Logger: log,
		OnStickyError:   ctrl.Poisoned,
		HostFuncTimeout: f.hostFuncTimeout,
		CallTimeout:     f.callTimeout,
		OnCallTimeout:   ctrl.EndOnCallTimeout(log),
		Trace:           f.trace,
		RingSpin:        f.ringSpin,
		NoGuestRings:    f.noGuestRings,
		DtoHSmall:       d2hSmall,
		// The VM's process list spans its workers (in either mode: a
		// PerVM worker's VM may still have the poisoned one it replaced).
		OtherProcesses: ctrl.OtherProcesses,
	}
	if mode == worker.PerProcess {
		// One guest process: its output is its own, and what its VM's
		// other processes share lives in the manager. (The context is its
		// own too, but cudaDeviceReset still releases only what the session
		// created: a real reset would also drop the copy engines' guest-RAM
		// registrations and gather kernel.)
		cfg.VMResources = ctrl.VMResources(memLimit)
		cfg.VMBudget = ctrl.VMBudget()
		if out != nil {
			cfg.Output = out
		}
	}
	srv, err := server.New(cfg)
	if err != nil {
		return err
	}
	if err := srv.Warm(); err != nil {
		return err
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log.Debug("worker ready", "device", drv.Kind(), "mode", mode)
	err = worker.Run(ctx, ctrl, srv, log, worker.RunOptions{Mode: mode})
	if errors.Is(err, context.Canceled) {
		err = nil
	}
	return err
}
