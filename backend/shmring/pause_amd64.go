package shmring

// cpuRelax is one PAUSE: a spin loop's turn that leaves the core's other
// hardware thread (often the peer, or the driver call it waits for) its
// share of the pipeline, and leaves the loop without a memory-order
// machine clear when the watched word changes.
func cpuRelax()
