package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"runtime/pprof"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/vgpu-project/vgpu/backend/device"
	"github.com/vgpu-project/vgpu/backend/device/cuda"
	"github.com/vgpu-project/vgpu/backend/device/sim"
	"github.com/vgpu-project/vgpu/backend/engine"
	"github.com/vgpu-project/vgpu/backend/front"
	"github.com/vgpu-project/vgpu/backend/hostmode"
	"github.com/vgpu-project/vgpu/backend/kvsock"
	"github.com/vgpu-project/vgpu/backend/metrics"
	"github.com/vgpu-project/vgpu/backend/serveconf"
	"github.com/vgpu-project/vgpu/backend/server"
	"github.com/vgpu-project/vgpu/backend/session"
	"github.com/vgpu-project/vgpu/backend/transport"
	"github.com/vgpu-project/vgpu/backend/vhostuser"
	"github.com/vgpu-project/vgpu/backend/worker"
	"github.com/vgpu-project/vgpu/protocol"
)

func init() {
	register("serve", command{summary: "run the backend: serve guests (vhost-user-vsock) and host-mode clients (unix socket)", run: cmdServe})
}

// serveFlags are the options of "vgpu serve".
type serveFlags struct {
	device, unix, gpus, memLimit, simMem, logLevel, metricsAddr, statusSocket, engine string
	vhostUserSocket, frontSocket                                                      string
	simDevices                                                                        int
	guestCID                                                                          uint64
	logJSON, allowUnprivileged, kernelVsock, trace                                    bool
	isolate                                                                           string
	d2hSmall                                                                          string
	pool, maxProcesses, maxPerUser                                                    int
	moduleCache                                                                       string
	unixNoShare                                                                       bool
	unixNoRing                                                                        bool
	noGuestRings                                                                      bool
	ringSpin                                                                          time.Duration
	unixShareMax                                                                      int
	unixShareBytes                                                                    string
	hostFuncTimeout, slotWait, callTimeout                                            time.Duration
	cpuProfile                                                                        string
}

func cmdServe(args []string) int {
	f, rc := parseServe(args)
	if rc != 0 {
		return rc
	}
	log := hclog.New(&hclog.LoggerOptions{Name: "vgpu", Level: hclog.LevelFromString(f.logLevel), JSONFormat: f.logJSON, Output: os.Stderr})
	if err := serve(f, log); err != nil {
		log.Error("serve failed", "err", err)
		fmt.Fprintf(os.Stderr, "vgpu serve: %v\n", err)
		return 1
	}
	return 0
}

// parseServe parses serve's flags and then its --config file (flags win);
// rc is 2 when either is wrong.
func parseServe(args []string) (f serveFlags, rc int) {
	var configPath string
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	fs.StringVar(&configPath, "config", "", "read options from this file, one 'NAME = VALUE' per line (the packaged service uses "+serveconf.DefaultPath+"); flags given here win")
	fs.StringVar(&f.device, "device", "auto", "GPU to use: cuda (libcuda.so.1), sim (simulated, kernels not executed) or auto (cuda if usable, else sim)")
	fs.IntVar(&f.simDevices, "sim-devices", 1, "number of simulated devices (--device sim)")
	fs.StringVar(&f.simMem, "sim-mem", "80G", "device memory per simulated device (bytes; K, M, G suffixes)")
	fs.StringVar(&f.unix, "unix", "", "serve host-mode clients on this unix socket (guest library: VGPU_TRANSPORT=unix:PATH)")
	fs.BoolVar(&f.unixNoShare, "unix-no-share", false, "host-mode clients may not share pinned memory (memfds): all their data travels inline")
	fs.BoolVar(&f.unixNoRing, "unix-no-ring", false, "host-mode clients may not move onto shared-memory rings: every frame travels on the socket")
	fs.DurationVar(&f.ringSpin, "ring-spin", 0, "how long the backend's side of a shared-memory ring (host mode's, and a guest's in its RAM) polls before sleeping on its doorbell (0: 20µs with 4 or more CPUs, else none; negative: never)")
	fs.BoolVar(&f.noGuestRings, "no-guest-rings", false, "do not offer guests request and completion rings in their RAM (RING_SETUP_GUEST): every frame travels on the vsock stream")
	fs.IntVar(&f.unixShareMax, "unix-share-max", hostmode.DefaultMaxShares, "shared pinned-memory blocks (memfds) per host-mode connection")
	fs.StringVar(&f.unixShareBytes, "unix-share-bytes", "256G", "shared pinned memory per host-mode connection (bytes; K, M, G suffixes)")
	fs.StringVar(&f.gpus, "gpus", "", "host GPUs guests see, in guest order, e.g. 1,0 (default: all)")
	fs.StringVar(&f.memLimit, "mem-limit", "0", "device memory cap per VM (bytes; K, M, G suffixes; 0: none)")
	fs.StringVar(&f.engine, "engine", "auto", "memcpy engine for guest memory: auto, direct or gather")
	fs.StringVar(&f.d2hSmall, "d2h-small", "bounce", "small device-to-host copies answered inline (up to 64 KiB): bounce (an async copy into a pinned buffer, then a stream synchronize) or sync (a stream synchronize, then a synchronous copy into the reply)")
	fs.StringVar(&f.logLevel, "log-level", "info", "log level: trace, debug, info, warn, error")
	fs.BoolVar(&f.logJSON, "log-json", false, "log JSON lines")
	fs.StringVar(&f.metricsAddr, "metrics-addr", "", "serve Prometheus metrics on this address, e.g. 127.0.0.1:9477")
	fs.StringVar(&f.statusSocket, "status-socket", "", "answer 'vgpu status' on this unix socket")
	fs.StringVar(&f.vhostUserSocket, "vhost-user-socket", "", "serve a VM's vhost-user-vsock device on this socket")
	fs.StringVar(&f.frontSocket, "front-socket", "", "accept 'vgpu front' processes on this unix socket: each forwards one VM's guest connections, and its VM keeps its device across restarts of this backend")
	fs.Uint64Var(&f.guestCID, "guest-cid", 3, "the VM's vsock CID (with --vhost-user-socket)")
	fs.BoolVar(&f.kernelVsock, "kernel-vsock", false, "also listen on the host kernel's vhost-vsock (AF_VSOCK port 30311); guest memory is not known there, so data travels inline")
	fs.StringVar(&f.isolate, "isolate", "process", "where GPU work runs: process (one 'vgpu worker' process, with its own CUDA context, per guest process: a sticky CUDA error, crash or kill ends only that program's GPU work), vm (one worker per VM: it ends that VM's work) or none (in this process: it ends every VM's work)")
	fs.IntVar(&f.pool, "pool", worker.DefaultPool, "--isolate process: workers kept started (CUDA initialised, a context per GPU, about 0.5 GiB of device memory each) so a new guest program does not wait for them")
	fs.IntVar(&f.maxProcesses, "max-processes", worker.DefaultMaxPerVM, "--isolate process: guest processes of one VM (host mode: of one socket) on the GPU at once; each holds a CUDA context (a process's connections share one)")
	fs.IntVar(&f.maxPerUser, "max-processes-per-user", 0, "--isolate process: of those, how many one guest user other than root may hold (the uid vgpu.ko sends; users other than root also leave 1/16 of the slots to root); 0: half of --max-processes")
	fs.DurationVar(&f.slotWait, "slot-wait", worker.DefaultSlotWait, "--isolate process: how long a new guest process waits for one of its VM's --max-processes slots to free before it is refused (0: refused at once)")
	fs.StringVar(&f.moduleCache, "module-cache", "1G", "module images kept per VM, so its next programs may load them by hash (bytes; K, M, G suffixes)")
	fs.BoolVar(&f.allowUnprivileged, "allow-unprivileged-segments", false, "accept guest-physical segments from unprivileged guest ports (testing only: lets any guest process name guest memory)")
	fs.DurationVar(&f.hostFuncTimeout, "host-func-timeout", session.DefaultHostFuncTimeout, "how long a stream waits for the guest to run a host function it reached; then the stream goes on and the guest gets CUDA_ERROR_TIMEOUT (909)")
	fs.DurationVar(&f.callTimeout, "call-timeout", session.DefaultCallTimeout, "how long one call may wait for the device (a kernel that does not end); then it is answered CUDA_ERROR_LAUNCH_TIMEOUT (702), the connection closed and, with --isolate process or vm, the worker ended, which ends the kernel (0: no bound)")
	fs.StringVar(&f.cpuProfile, "cpu-profile", "", "write a Go CPU profile of this process (not of worker processes) to this file until it stops (go tool pprof reads it): where the backend's own time goes")
	fs.BoolVar(&f.trace, "trace", os.Getenv("VGPU_TRACE") == "1", "stamp every request at each layer boundary (read, queued, validated, handler, reply; also VGPU_TRACE=1): 'vgpu bench calls' prints the breakdown, GET_STATS carries the sums")
	if err := fs.Parse(args); err != nil {
		return f, 2
	}
	if configPath != "" {
		c, err := serveconf.Load(configPath)
		if err == nil {
			err = c.Apply(fs)
		}
		if err != nil {
			fmt.Fprintf(os.Stderr, "vgpu serve: %v\n", err)
			return f, 2
		}
	}
	return f, 0
}

// parseBytes parses a byte count with an optional K/M/G/T suffix (powers of 1024).
func parseBytes(s string) (uint64, error) {
	s = strings.TrimSpace(strings.ToUpper(s))
	s = strings.TrimSuffix(strings.TrimSuffix(s, "B"), "I")
	mult := uint64(1)
	if n := len(s); n > 0 {
		switch s[n-1] {
		case 'K':
			mult = 1 << 10
		case 'M':
			mult = 1 << 20
		case 'G':
			mult = 1 << 30
		case 'T':
			mult = 1 << 40
		}
		if mult > 1 {
			s = s[:n-1]
		}
	}
	v, err := strconv.ParseUint(s, 0, 64)
	if err != nil || (v != 0 && v > ^uint64(0)/mult) {
		return 0, fmt.Errorf("bad size %q (want bytes with an optional K, M, G or T suffix)", s)
	}
	return v * mult, nil
}

func parseGPUs(s string) ([]int, error) {
	if strings.TrimSpace(s) == "" {
		return nil, nil
	}
	var out []int
	for _, p := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(p))
		if err != nil || n < 0 {
			return nil, fmt.Errorf("--gpus %q: want a comma-separated list of host device ordinals", s)
		}
		out = append(out, n)
	}
	return out, nil
}

// openDriver opens the device driver --device names.
func openDriver(f serveFlags, log hclog.Logger) (device.Driver, error) {
	simDriver := func() (device.Driver, error) {
		mem, err := parseBytes(f.simMem)
		if err != nil {
			return nil, fmt.Errorf("--sim-mem: %w", err)
		}
		return sim.New(sim.Config{Devices: f.simDevices, MemBytes: mem, Logger: log})
	}
	switch f.device {
	case "sim":
		return simDriver()
	case "cuda":
		return cuda.Open(log)
	case "auto", "auto-quiet":
		d, err := cuda.Open(log)
		if err == nil {
			return d, nil
		}
		if !errors.Is(err, device.ErrNoGPU) {
			return nil, err
		}
		banner := strings.Repeat("!", 78)
		if f.device == "auto" {
			fmt.Fprintf(os.Stderr, "%s\n!! vgpu: %v\n!! vgpu: falling back to the SIMULATED device: memory and copies are real,\n!! vgpu: KERNELS ARE NOT EXECUTED. Use --device cuda to refuse this.\n%s\n", banner, err, banner)
		}
		log.Warn("no usable GPU; using the simulated device (kernels are not executed)", "reason", err)
		return simDriver()
	}
	return nil, fmt.Errorf("--device %q: want cuda, sim or auto", f.device)
}

func serve(f serveFlags, log hclog.Logger) error {
	if f.unix == "" && f.vhostUserSocket == "" && f.frontSocket == "" && !f.kernelVsock {
		return errors.New("nothing to serve: give --unix PATH, --vhost-user-socket PATH, --front-socket PATH and/or --kernel-vsock")
	}
	gpus, err := parseGPUs(f.gpus)
	if err != nil {
		return err
	}
	memLimit, err := parseBytes(f.memLimit)
	if err != nil {
		return fmt.Errorf("--mem-limit: %w", err)
	}
	d2hSmall, err := session.ParseDtoHMode(f.d2hSmall)
	if err != nil {
		return fmt.Errorf("--d2h-small: %w", err)
	}
	eng, err := engine.ParseKind(f.engine)
	if err != nil {
		return err
	}
	drv, err := openDriver(f, log)
	if err != nil {
		return err
	}
	defer drv.Close()
	modCache, err := parseBytes(f.moduleCache)
	if err != nil {
		return fmt.Errorf("--module-cache: %w", err)
	}
	cfg := server.Config{
		Driver: drv, GPUs: gpus, MemLimit: memLimit, ModuleCacheBytes: modCache, Engine: eng,
		Limits: protocol.DefaultLimits, AllowUnprivilegedSegments: f.allowUnprivileged,
		Version: version, Logger: log, HostFuncTimeout: f.hostFuncTimeout, Trace: f.trace, CallTimeout: f.callTimeout,
		RingSpin: f.ringSpin, NoGuestRings: f.noGuestRings,
		DtoHSmall: d2hSmall,
	}
	mgr, err := isolate(f, drv, &cfg, log)
	if err != nil {
		return err
	}
	if mgr != nil {
		defer mgr.Close()
	}
	var fronts *front.Listener
	if f.frontSocket != "" {
		fronts, err = front.Listen(f.frontSocket, front.ListenOptions{Logger: log.Named("front")})
		if err != nil {
			return err
		}
		defer fronts.Close()
		cfg.FrontStatus = func() any { return fronts.Fronts() }
	}
	srv, err := server.New(cfg)
	if err != nil {
		return err
	}
	if f.cpuProfile != "" {
		pf, err := os.Create(f.cpuProfile)
		if err != nil {
			return fmt.Errorf("--cpu-profile: %w", err)
		}
		if err := pprof.StartCPUProfile(pf); err != nil {
			_ = pf.Close()
			return fmt.Errorf("--cpu-profile: %w", err)
		}
		defer func() { pprof.StopCPUProfile(); _ = pf.Close() }()
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	errc := make(chan error, 4)
	running := 0
	if f.metricsAddr != "" {
		m, err := metrics.Listen(f.metricsAddr, srv, log)
		if err != nil {
			return err
		}
		defer m.Close()
		log.Info("metrics", "addr", m.Addr())
	}
	if f.statusSocket != "" {
		sl, err := server.ListenStatus(f.statusSocket)
		if err != nil {
			return err
		}
		go func() {
			if err := srv.ServeStatus(ctx, sl); err != nil {
				log.Warn("status socket failed", "err", err)
			}
		}()
	}
	if f.unix != "" {
		shareBytes, err := parseBytes(f.unixShareBytes)
		if err != nil {
			return fmt.Errorf("--unix-share-bytes: %w", err)
		}
		ln, err := hostmode.Listen(f.unix, hostmode.Options{NoShare: f.unixNoShare, NoRing: f.unixNoRing, RingSpin: f.ringSpin, MaxShares: f.unixShareMax, MaxShareBytes: shareBytes})
		if err != nil {
			return err
		}
		running++
		go func() { errc <- srv.Serve(ctx, ln) }()
		log.Info("serving host-mode clients", "socket", f.unix, "device", drv.Kind(), "devices", drv.Count())
	}
	if f.vhostUserSocket != "" {
		n, err := serveVhostUser(ctx, srv, f.vhostUserSocket, f.guestCID, f.allowUnprivileged, log, errc)
		if err != nil {
			return err
		}
		running += n
	}
	if fronts != nil {
		running++
		go func() { errc <- srv.Serve(ctx, fronts) }()
		log.Info("serving VMs through vgpu front processes", "socket", f.frontSocket)
	}
	if f.kernelVsock {
		ln, err := kvsock.Listen(kvsock.Config{Port: transport.DefaultPort, RequirePrivileged: !f.allowUnprivileged, Logger: log.Named("kvsock")})
		if err != nil {
			return err
		}
		running++
		go func() { errc <- srv.Serve(ctx, ln) }()
		log.Info("serving guests over the kernel's vhost-vsock", "port", transport.DefaultPort)
	}
	for i := 0; i < running; i++ {
		if err := <-errc; err != nil {
			stop()
			return err
		}
	}
	return nil
}

// isolate sets cfg up to run sessions where --isolate says: in worker
// processes (it returns their manager, started) or in this process (nil).
func isolate(f serveFlags, drv device.Driver, cfg *server.Config, log hclog.Logger) (*worker.Manager, error) {
	switch f.isolate {
	case "none":
		log.Warn("--isolate none: every VM's GPU work runs in this process; one guest's sticky CUDA error or crash ends all of it")
		return nil, nil
	case "process", "vm", "":
	default:
		return nil, fmt.Errorf("--isolate %q: want process, vm or none", f.isolate)
	}
	mode := worker.PerProcess
	if f.isolate == "vm" {
		mode = worker.PerVM
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("--isolate %s: finding this binary: %w", mode, err)
	}
	if drv.Kind() == "sim" && f.device != "sim" {
		f.device = "sim" // this process already fell back; workers follow
	}
	if f.pool < 0 {
		return nil, fmt.Errorf("--pool %d: want 0 or more", f.pool)
	}
	mgr := worker.NewManager(func(vm string) *exec.Cmd { return exec.Command(exe, workerArgs(f, mode, vm)...) }, log)
	mgr.Mode, mgr.Pool, mgr.MemLimit, mgr.ModuleCacheBytes, mgr.MaxPerVM = mode, f.pool, cfg.MemLimit, cfg.ModuleCacheBytes, f.maxProcesses
	mgr.MaxPerUser = f.maxPerUser
	mgr.SlotWait = f.slotWait
	mgr.Start()
	cfg.Dispatch = mgr.ServeConn
	cfg.WorkerStatus = func() any { return mgr.Status() }
	cfg.Aggregate = mgr.Aggregate
	if mode == worker.PerProcess {
		log.Info("each guest process's GPU work runs in its own worker process", "pool", f.pool)
	} else {
		log.Info("each VM's GPU work runs in its own worker process")
	}
	return mgr, nil
}

// serveVhostUser serves one VM's vhost-user-vsock socket (QEMU:
// -chardev socket,id=vg,path=PATH -device vhost-user-vsock-pci,chardev=vg)
// and runs a session per guest connection to the vGPU port. It returns how
// many results it will send on errc.
func serveVhostUser(ctx context.Context, srv *server.Server, path string, cid uint64, allowUnprivileged bool, log hclog.Logger, errc chan<- error) (int, error) {
	vm, err := vhostuser.ServeVsock(ctx, vhostuser.VsockConfig{
		SocketPath: path, GuestCID: cid, Port: transport.DefaultPort,
		AllowUnprivileged: allowUnprivileged, Logger: log,
	})
	if err != nil {
		return 0, err
	}
	log.Info("serving a VM over vhost-user-vsock", "socket", path, "guest_cid", cid, "port", transport.DefaultPort)
	go func() { errc <- srv.Serve(ctx, vm.Listener) }()
	return 1, nil
}
