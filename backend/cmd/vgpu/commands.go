package main

import (
	"fmt"
	"io"
	"os"
	"sort"
)

// command is one subcommand. To add one, write cmd_NAME.go with the
// command's function and an init that calls register.
type command struct {
	summary string
	hidden  bool // internal (e.g. the worker): left out of the help
	run     func(args []string) int
}

var commands = map[string]command{}

func register(name string, c command) {
	if _, dup := commands[name]; dup {
		panic("vgpu: command " + name + " registered twice")
	}
	commands[name] = c
}

func init() {
	register("help", command{summary: "show this help", run: cmdHelp})
	register("version", command{summary: "print protocol and build versions", run: cmdVersion})
}

func usage(w io.Writer) {
	fmt.Fprintln(w, "vgpu - a paravirtual GPU for QEMU guests (host backend)")
	fmt.Fprintln(w, "\nusage: vgpu COMMAND [options]\n\ncommands:")
	names := make([]string, 0, len(commands))
	for n, c := range commands {
		if !c.hidden {
			names = append(names, n)
		}
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Fprintf(w, "  %-14s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nRun 'vgpu COMMAND -h' for a command's options.")
}

func cmdHelp(args []string) int {
	usage(os.Stdout)
	return 0
}
