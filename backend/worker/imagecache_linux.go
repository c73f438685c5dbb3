package worker

import (
	"encoding/hex"
	"os"
	"sync"

	"golang.org/x/sys/unix"

	"github.com/vgpu-project/vgpu/backend/session"
)

// imageCache is one VM's module images for its PerProcess workers, kept
// by the manager as the sealed memfds the workers sent (a worker sends an
// image only after its device loaded it and package image parsed it). It
// holds at most max bytes, least recently used out first; nothing of one
// VM's cache is visible to another's workers.
type imageCache struct {
	mu     sync.Mutex
	max    uint64
	bytes  uint64
	clock  uint64
	images map[[32]byte]*cachedFD
}

type cachedFD struct {
	f    *os.File
	size uint64
	used uint64
}

func newImageCache(max uint64) *imageCache {
	if max == 0 {
		max = session.DefaultModuleCacheBytes
	}
	return &imageCache{max: max, images: map[[32]byte]*cachedFD{}}
}

// put takes ownership of fd, a sealed memfd of size bytes.
func (c *imageCache) put(h [32]byte, fd int, size uint64) error {
	if err := checkImageFD(fd, size); err != nil {
		unix.Close(fd)
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.images[h]; ok || size > c.max {
		unix.Close(fd)
		return nil
	}
	for c.bytes+size > c.max {
		var old [32]byte
		oldest := ^uint64(0)
		for k, e := range c.images {
			if e.used < oldest {
				old, oldest = k, e.used
			}
		}
		c.drop(old)
	}
	c.clock++
	c.images[h] = &cachedFD{f: os.NewFile(uintptr(fd), "vgpu-module-"+hex.EncodeToString(h[:4])), size: size, used: c.clock}
	c.bytes += size
	return nil
}

// get returns a copy of the image's fd (the caller closes it).
func (c *imageCache) get(h [32]byte) (*os.File, uint64, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.images[h]
	if !ok {
		return nil, 0, false
	}
	fd, err := unix.Dup(int(e.f.Fd()))
	if err != nil {
		return nil, 0, false
	}
	unix.CloseOnExec(fd)
	c.clock++
	e.used = c.clock
	return os.NewFile(uintptr(fd), e.f.Name()), e.size, true
}

func (c *imageCache) drop(h [32]byte) {
	if e, ok := c.images[h]; ok {
		e.f.Close()
		c.bytes -= e.size
		delete(c.images, h)
	}
}

func (c *imageCache) size() uint64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.bytes
}

func (c *imageCache) clear() {
	c.mu.Lock()
	defer c.mu.Unlock()
	for h := range c.images {
		c.drop(h)
	}
}

func hexDecode(dst []byte, s string) (int, error) {
	if len(s) != 2*len(dst) {
		return 0, hex.ErrLength
	}
	return hex.Decode(dst, []byte(s))
}
