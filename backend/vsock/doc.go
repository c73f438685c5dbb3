// Package vsock implements the virtio-vsock device (virtio 1.2, 5.10) on
// top of package virtq: the rx and tx queues, the 44-byte packet header,
// the stream connection state machine (REQUEST, RESPONSE, RW,
// CREDIT_UPDATE, CREDIT_REQUEST, SHUTDOWN, RST) and credit-based flow
// control in both directions. Guest-initiated connections to a listening
// host port become transport.Conns.
//
// Protocol primer. The guest sends packets on the tx queue and gives the
// device empty buffers on the rx queue to fill with packets for it. A
// connection is (guest port, host port). The guest opens with REQUEST; we
// answer RESPONSE (or RST if nobody listens or the port policy refuses).
// Each side advertises its receive buffer (buf_alloc) and how much of it the
// application consumed (fwd_cnt) in every packet; a sender may have at most
// buf_alloc - (tx_cnt - fwd_cnt) bytes in flight. SHUTDOWN carries RCV/SEND
// flags; a fully shut down connection ends with RST from the other side.
//
// Threat model. Everything in a guest packet is untrusted: lengths are
// checked against the buffers that carry them and against MaxPayload, the
// source CID must be the guest's, a guest that sends beyond its credit is
// reset, unknown connections are answered with RST (never RST with RST),
// and guest-triggered log lines are rate-limited with counters beside them
// (Device.Stats). A malformed descriptor chain (package virtq) stops the
// device for that VM until the guest resets it; other VMs are unaffected.
//
// Data path. Write hands its buffer to the rx loop, which copies it
// straight into guest rx buffers (one copy); received data is copied once
// from guest tx buffers into a per-connection ring of BufAlloc bytes.
package vsock
