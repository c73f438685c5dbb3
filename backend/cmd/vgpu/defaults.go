package main

import (
	"fmt"

	"github.com/vgpu-project/vgpu/backend/serveconf"
)

// configDefault is a client command's default for a backend socket: key's
// value in the host configuration ($VGPU_CONFIG or /etc/vgpu/vgpu.conf, as
// the vgpu package installs it), else fallback.
func configDefault(key, fallback string) (string, error) {
	c, err := serveconf.LoadDefault()
	if err != nil {
		return "", fmt.Errorf("reading the default %s: %w", key, err)
	}
	return c.Or(key, fallback), nil
}
