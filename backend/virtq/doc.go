// Package virtq implements the device side of split virtqueues (virtio 1.x,
// section 2.7): descriptor chains (direct and indirect), the available and
// used rings, event-index notification suppression, and eventfd kick/call.
//
// Trust: everything in the rings is written by the guest and trusted not at
// all. Every descriptor address is translated through a guestmem.Table with
// overflow-safe bounds checks; chains are walked with a hop limit (no loops),
// index checks and a total-length cap. A malformed chain marks the queue
// broken (ErrBroken wraps the first cause, later calls fail fast with it);
// its head still goes back to the used ring with length 0 when the head index
// itself is valid, so the guest driver does not leak the buffer.
//
// Memory ordering: ring indices shared with the guest are read and written
// with sync/atomic (acquire on avail->idx before descriptors are read,
// release on used->idx after used elements are written, and a full fence
// between publishing used->idx or avail_event and reading the guest's event
// index), as the virtio spec's barriers require. The host must be little
// endian (amd64, arm64), like the virtio 1.x rings.
//
// Concurrency: a Queue is driven by one goroutine at a time (Next, Push,
// Notify, EnableNotify, DisableNotify); SetCall may be called concurrently.
package virtq
