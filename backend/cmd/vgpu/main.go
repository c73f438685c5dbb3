// Command vgpu is the host side of the vgpu paravirtual GPU: one binary with
// subcommands (see "vgpu help").
package main

import (
	"fmt"
	"os"
)

func main() {
	os.Exit(run(hookArgs(os.Args)))
}

func run(args []string) int {
	if len(args) == 0 {
		usage(os.Stderr)
		return 2
	}
	cmd, ok := commands[args[0]]
	if !ok {
		fmt.Fprintf(os.Stderr, "vgpu: unknown command %q\n\n", args[0])
		usage(os.Stderr)
		return 2
	}
	return cmd.run(args[1:])
}
