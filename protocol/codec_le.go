//go:build 386 || amd64 || arm || arm64 || loong64 || mips64le || mipsle || ppc64le || riscv64 || wasm

package protocol

// This file exists only on little-endian architectures: the payload codec
// copies structs byte for byte, which is the wire format only there.
const littleEndianHost = true
