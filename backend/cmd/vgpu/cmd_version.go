package main

import (
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/vgpu-project/vgpu/protocol"
)

// version is the backend's version; the Makefile sets it with -ldflags -X.
var version = "dev"

func buildRevision() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "unknown", ""
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
			if len(rev) > 12 {
				rev = rev[:12]
			}
		case "vcs.modified":
			if s.Value == "true" {
				dirty = "+dirty"
			}
		}
	}
	return rev + dirty
}

func cmdVersion(args []string) int {
	fmt.Printf("vgpu %s (revision %s, %s, %s/%s)\n", version, buildRevision(), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Printf("protocol %d.%d (%d opcodes)\n", protocol.Major, protocol.Minor, len(protocol.Ops))
	return 0
}
