//go:build !amd64

package shmring

// cpuRelax is a spin loop's turn (see pause_amd64.go); a plain turn here.
func cpuRelax() {}
