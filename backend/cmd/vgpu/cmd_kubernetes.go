package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/deviceplugin"
	"github.com/vgpu-project/vgpu/backend/kubevirthook"
	"github.com/vgpu-project/vgpu/backend/serveconf"
)

func init() {
	register("device-plugin", command{summary: "Kubernetes device plugin: advertise this node's vGPUs and hand each VM pod its socket", run: cmdDevicePlugin})
	register(hookCommand, command{summary: "KubeVirt hook: add the vGPU to a VMI's domain (run by KubeVirt's sidecar-shim as onDefineDomain)", run: cmdKubevirtHook})
}

// hookCommand is the hook's subcommand; hookProgram is the name KubeVirt's
// sidecar-shim runs, under which the binary is the hook (see hookArgs).
const (
	hookCommand = "kubevirt-hook"
	hookProgram = "onDefineDomain"
)

// hookArgs turns an invocation as onDefineDomain (the hook image installs
// the binary under that name) into "vgpu kubevirt-hook ARGS".
func hookArgs(argv []string) []string {
	if len(argv) > 0 && filepath.Base(argv[0]) == hookProgram {
		return append([]string{hookCommand}, argv[1:]...)
	}
	return argv[1:]
}

func cmdKubevirtHook(args []string) int {
	return kubevirthook.Main(args, os.Stdout, os.Stderr)
}

func cmdDevicePlugin(args []string) int {
	fs := flag.NewFlagSet("device-plugin", flag.ContinueOnError)
	var cfg deviceplugin.Config
	conf := fs.String("config", "", "the backend's configuration (default $"+serveconf.EnvPath+", else "+serveconf.DefaultPath+"): front-socket, status-socket and mem-limit come from it")
	fs.StringVar(&cfg.KubeletDir, "kubelet-dir", "", "the kubelet's device-plugin folder (default /var/lib/kubelet/device-plugins)")
	fs.StringVar(&cfg.HostDir, "host-dir", deviceplugin.DefaultHostDir, "folder for the allocated vGPUs' sockets (one subfolder per device, mounted into the VM pod)")
	owner := fs.String("qemu-user", fmt.Sprintf("%d:%d", deviceplugin.DefaultQEMUID, deviceplugin.DefaultQEMUID), "UID:GID that owns the allocated sockets (QEMU's in KubeVirt's virt-launcher); -1:-1 keeps root's")
	fs.DurationVar(&cfg.Interval, "interval", deviceplugin.DefaultInterval, "how often to check the backend and the kubelet")
	logLevel := fs.String("log-level", "info", "log level: trace, debug, info, warn, error")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: vgpu device-plugin [options]\n\nAdvertise this node's vGPUs to the kubelet as %s: (total GPU memory) / mem-limit of\nthem. Each one allocated to a VM pod gets a vgpu front (its socket mounted at %s).\n", deviceplugin.ResourceName, deviceplugin.ContainerDir)
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		return 2
	}
	fail := func(err error) int {
		fmt.Fprintf(os.Stderr, "vgpu device-plugin: %v\n", err)
		return 2
	}
	var c *serveconf.Config
	var err error
	if *conf != "" {
		c, err = serveconf.Load(*conf)
	} else {
		c, err = serveconf.LoadDefault()
	}
	if err != nil {
		return fail(err)
	}
	cfg.Backend = c.Or(serveconf.KeyFrontSocket, serveconf.DefaultFrontSocket)
	cfg.StatusSocket = c.Or(serveconf.KeyStatusSocket, serveconf.DefaultStatusSocket)
	if cfg.MemLimit, err = parseBytes(c.Or(serveconf.KeyMemLimit, "0")); err != nil {
		return fail(fmt.Errorf("mem-limit: %w", err))
	}
	if cfg.MemLimit == 0 {
		return fail(fmt.Errorf("%s sets no mem-limit: each vGPU the plugin advertises is mem-limit of GPU memory", c.Path))
	}
	u, g, ok := strings.Cut(*owner, ":")
	if cfg.QEMUUID, err = strconv.Atoi(u); err == nil && ok {
		cfg.QEMUGID, err = strconv.Atoi(g)
	}
	if err != nil || !ok {
		return fail(fmt.Errorf("--qemu-user %q: want UID:GID", *owner))
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "vgpu", Level: hclog.LevelFromString(*logLevel), Output: os.Stderr})
	cfg.Logger = log
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	var p *deviceplugin.Plugin
	for {
		// The kubelet may not be up yet (or restarting): try again.
		if p, err = deviceplugin.Start(ctx, cfg); err == nil {
			break
		}
		log.Error("device plugin", "err", err)
		select {
		case <-ctx.Done():
			return 1
		case <-time.After(5 * time.Second):
		}
	}
	<-ctx.Done()
	p.Close()
	return 0
}
