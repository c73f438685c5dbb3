// Package cuda drives a real NVIDIA GPU through libcuda.so.1, loaded at run
// time with purego: the backend builds with CGO_ENABLED=0 and runs on
// machines without CUDA, where Open returns an error wrapping device.ErrNoGPU
// ("no GPU: ...") instead of failing to start.
//
// Entry points are resolved through cuGetProcAddress with the driver's own
// version (so the _v2/_v3 ABI of each call is the one the driver means),
// falling back to dlsym of the versioned names. A symbol the driver lacks
// (Debian's libcuda 535 has no cuFuncGetParamInfo) is bound to a stub that
// answers CUDA_ERROR_NOT_SUPPORTED (801): no entry point is ever nil, so a
// guest call can never make the backend call through a nil function
// (TestAbsentSymbolsAnswer801). Kernel parameter layouts then come from the
// module image itself (package device/image).
//
// Threads: a CUDA context is current per OS thread and goroutines migrate
// between threads, so every call locks its goroutine to its thread and makes
// the device's primary context current first (cuCtxSetCurrent costs tens of
// nanoseconds). Callers may use a Context from any goroutine.
//
// Trust: the session has validated every pointer range and handle; this
// package passes them to the driver as they are.
package cuda
