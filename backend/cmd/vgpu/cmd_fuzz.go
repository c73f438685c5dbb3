package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"sort"
	"syscall"
	"time"

	"github.com/vgpu-project/vgpu/backend/fieldfuzz"
	"github.com/vgpu-project/vgpu/backend/server"
)

func init() {
	register("fuzz", command{summary: "attack a running backend with every opcode's fields set to boundary values (a test tool)", run: cmdFuzz})
}

// cmdFuzz runs package fieldfuzz against "vgpu serve --unix PATH": every
// field of every opcode's request set to boundary values, then random
// mutations for --duration, with a good client checking its bytes. Exit
// 0: every case answered, the backend alive, no panic caught, the good
// client's bytes exact.
func cmdFuzz(args []string) int {
	fs := flag.NewFlagSet("fuzz", flag.ContinueOnError)
	sock := fs.String("unix", "", "the backend's host-mode socket (vgpu serve --unix)")
	status := fs.String("status-socket", "", "the backend's status socket: its caught-panic count must stay 0 (optional)")
	dur := fs.Duration("duration", 0, "after every case once, random mutations for this long")
	seed := fs.Uint64("seed", uint64(time.Now().UnixNano()), "random seed")
	timeout := fs.Duration("timeout", 30*time.Second, "longest wait for one reply")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	if *sock == "" {
		fmt.Fprintln(os.Stderr, "vgpu fuzz: give --unix PATH (the socket of 'vgpu serve --unix PATH')")
		return 2
	}
	cfg := fieldfuzz.Config{
		Dial:     func() (net.Conn, error) { return net.Dial("unix", *sock) },
		Duration: *dur,
		Seed:     *seed,
		Timeout:  *timeout,
		Logf:     func(f string, a ...any) { fmt.Fprintf(os.Stderr, f+"\n", a...) },
	}
	if *status != "" {
		cfg.Panics = func() (uint64, error) {
			st, err := server.ReadStatus(*status, 5*time.Second)
			if err != nil {
				return 0, err
			}
			return st.Stats.Panics, nil
		}
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	fmt.Fprintf(os.Stderr, "vgpu fuzz: seed %d\n", *seed)
	rep, err := fieldfuzz.Run(ctx, cfg)
	fmt.Printf("FUZZ cases=%d random=%d reconnects=%d good_round_trips=%d elapsed=%s\n", rep.Cases, rep.Random, rep.Reconnects, rep.GoodRounds, time.Since(start).Round(time.Second))
	var sts []int
	for s := range rep.Statuses {
		sts = append(sts, int(s))
	}
	sort.Ints(sts)
	fmt.Print("FUZZ statuses")
	for _, s := range sts {
		fmt.Printf(" %d:%d", s, rep.Statuses[int32(s)])
	}
	fmt.Println()
	if err != nil {
		fmt.Printf("FAIL fuzz: %v\n", err)
		return 1
	}
	fmt.Println("PASS fuzz")
	return 0
}
