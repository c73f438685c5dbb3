package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/front"
	"github.com/vgpu-project/vgpu/backend/serveconf"
)

func init() {
	register("front", command{summary: "serve one VM's vhost-user-vsock device and forward it to 'vgpu serve --front-socket' (the VM survives backend restarts)", run: cmdFront})
}

func cmdFront(args []string) int {
	var cfg front.Config
	var logLevel string
	var logJSON bool
	var vmName string
	fs := flag.NewFlagSet("front", flag.ContinueOnError)
	fs.StringVar(&vmName, "vm", "", "the VM's name: --name NAME and, unless given, --vhost-user-socket "+serveconf.VMDir+"/NAME.sock (what the vgpu-front@NAME unit runs)")
	fs.StringVar(&cfg.SocketPath, "vhost-user-socket", "", "the VM's vhost-user-vsock socket (QEMU: -chardev socket,path=PATH -device vhost-user-vsock-pci)")
	fs.StringVar(&cfg.Backend, "backend-socket", "", "the backend's front socket (vgpu serve --front-socket PATH; default front-socket in "+serveconf.DefaultPath+", else "+serveconf.DefaultFrontSocket+")")
	fs.Uint64Var(&cfg.GuestCID, "guest-cid", 3, "the VM's vsock CID")
	fs.StringVar(&cfg.VM, "name", "", "the VM's name at the backend (logs, --mem-limit; default the vhost-user socket path); unique per backend")
	fs.BoolVar(&cfg.AllowUnprivileged, "allow-unprivileged-ports", false, "forward guest connections from unprivileged source ports (testing only)")
	fs.DurationVar(&cfg.MaxBackoff, "max-backoff", 0, "longest wait between dials while the backend is away (default 2s)")
	fs.StringVar(&logLevel, "log-level", "info", "log level: trace, debug, info, warn, error")
	fs.BoolVar(&logJSON, "log-json", false, "log JSON lines")
	fs.Usage = func() {
		fmt.Fprintln(os.Stderr, "usage: vgpu front --vhost-user-socket PATH | --vm NAME [--backend-socket PATH] [options]\n\nServe one VM's vGPU device (vhost-user-vsock) and forward its guest connections to the\nbackend. QEMU keeps its device when the backend restarts: running guest programs get an\nerror, new ones work once the backend is back.")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if vmName != "" {
		if cfg.VM != "" && cfg.VM != vmName {
			fmt.Fprintln(os.Stderr, "vgpu front: --vm and --name disagree; give one")
			return 2
		}
		cfg.VM = vmName
		if cfg.SocketPath == "" {
			p, err := serveconf.VMSocket(vmName)
			if err != nil {
				fmt.Fprintf(os.Stderr, "vgpu front: --vm: %v\n", err)
				return 2
			}
			cfg.SocketPath = p
		}
	}
	if cfg.Backend == "" {
		p, err := configDefault(serveconf.KeyFrontSocket, serveconf.DefaultFrontSocket)
		if err != nil {
			fmt.Fprintf(os.Stderr, "vgpu front: %v\n", err)
			return 2
		}
		cfg.Backend = p
	}
	if cfg.SocketPath == "" {
		fs.Usage()
		return 2
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "vgpu-front", Level: hclog.LevelFromString(logLevel), JSONFormat: logJSON, Output: os.Stderr})
	cfg.Logger = log
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	f, err := front.Start(ctx, cfg)
	if err != nil {
		fmt.Fprintf(os.Stderr, "vgpu front: %v\n", err)
		return 1
	}
	log.Info("serving a VM's vGPU device; forwarding to the backend", "socket", cfg.SocketPath, "backend", cfg.Backend, "guest_cid", cfg.GuestCID)
	if err := f.Wait(); err != nil {
		log.Error("front failed", "err", err)
		return 1
	}
	return 0
}
